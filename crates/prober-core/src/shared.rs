//! [`Shared`]: values of any type, one per type, made once and shared:
//! the state probes of one run share, a job's protocol options, what the
//! responders are started with.

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};

/// State shared by every probe built in one [`crate::protocol::BuildEnv`], one value per type
/// (the ICMP sockets, the loaded TLS configuration): created by the first
/// probe that needs it.
#[derive(Default)]
pub struct Shared {
    values: Mutex<HashMap<TypeId, Arc<dyn Any + Send + Sync>>>,
}

impl fmt::Debug for Shared {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Shared").finish_non_exhaustive()
    }
}

impl Shared {
    /// Puts `value` as the shared value of its type (replacing any).
    pub fn put<T: Any + Send + Sync>(&self, value: T) {
        self.values
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(TypeId::of::<T>(), Arc::new(value));
    }

    /// The shared value of type `T`, made by `init` the first time.
    ///
    /// # Errors
    /// What `init` returned; nothing is stored then.
    pub fn get_or_try_init<T: Any + Send + Sync, E>(
        &self,
        init: impl FnOnce() -> Result<Arc<T>, E>,
    ) -> Result<Arc<T>, E> {
        let mut values = self.values.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(v) = values.get(&TypeId::of::<T>())
            && let Ok(v) = Arc::clone(v).downcast::<T>()
        {
            return Ok(v);
        }
        let v = init()?;
        values.insert(
            TypeId::of::<T>(),
            Arc::clone(&v) as Arc<dyn Any + Send + Sync>,
        );
        Ok(v)
    }
}

//! Log lines that a flood, or a failure that lasts, cannot multiply.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Log lines that repeat: the first of each kind is written at once, then
/// at most one per period, saying how many were held back.
#[derive(Debug)]
pub struct LogLimiter<K = &'static str> {
    period: Duration,
    seen: Mutex<HashMap<K, (Instant, u64)>>,
}

impl<K: Hash + Eq> LogLimiter<K> {
    /// At most one line per kind per `period`.
    pub fn new(period: Duration) -> Self {
        Self {
            period,
            seen: Mutex::new(HashMap::new()),
        }
    }

    /// `Some(held back since the last line)` when a line of `kind` may be
    /// written now, else `None` (and it is counted).
    pub fn check(&self, kind: K, now: Instant) -> Option<u64> {
        let mut seen = self.lock();
        match seen.get_mut(&kind) {
            None => {
                seen.insert(kind, (now, 0));
                Some(0)
            }
            Some((last, held)) if now.duration_since(*last) >= self.period => {
                let n = *held;
                *last = now;
                *held = 0;
                Some(n)
            }
            Some((_, held)) => {
                *held += 1;
                None
            }
        }
    }

    /// Ends a kind's streak (the condition cleared): its next line is
    /// written at once. Returns the lines held back since its last one,
    /// or `None` when the kind was not seen.
    pub fn forget<Q>(&self, kind: &Q) -> Option<u64>
    where
        K: std::borrow::Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.lock().remove(kind).map(|(_, held)| held)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<K, (Instant, u64)>> {
        // Plain counters: still good after a panic elsewhere.
        self.seen
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl<K: Hash + Eq> Default for LogLimiter<K> {
    /// One line per kind per minute.
    fn default() -> Self {
        Self::new(Duration::from_secs(60))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repeated_log_lines_are_held_back() {
        let l = LogLimiter::new(Duration::from_secs(60));
        let t0 = Instant::now();
        assert_eq!(l.check("x", t0), Some(0));
        assert_eq!(l.check("x", t0 + Duration::from_secs(1)), None);
        assert_eq!(l.check("x", t0 + Duration::from_secs(2)), None);
        assert_eq!(l.check("y", t0), Some(0));
        assert_eq!(l.check("x", t0 + Duration::from_secs(61)), Some(2));
    }

    #[test]
    fn a_forgotten_kind_starts_over() {
        let l: LogLimiter<String> = LogLimiter::new(Duration::from_secs(60));
        let t0 = Instant::now();
        assert_eq!(l.check("job".to_owned(), t0), Some(0));
        assert_eq!(l.check("job".to_owned(), t0), None);
        assert_eq!(l.forget("job"), Some(1));
        assert_eq!(l.forget("job"), None);
        assert_eq!(l.check("job".to_owned(), t0), Some(0));
    }
}

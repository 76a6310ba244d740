//! The daemon's errors.

use std::io;

/// Why the daemon cannot start, or a reload was rejected.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DaemonError {
    /// The config file is unreadable or invalid; the message names the
    /// file, the key and the reason.
    #[error("{0}")]
    Config(String),
    /// A listener or sink could not be set up.
    #[error("{what}")]
    Io {
        /// What failed (`binding tcp 0.0.0.0:8707`).
        what: String,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// A probe could not be built (a socket, a permission, a TLS file).
    #[error("{what}")]
    Build {
        /// Which job and target.
        what: String,
        /// The cause.
        #[source]
        source: prober_core::protocol::BuildError,
    },
}

impl DaemonError {
    /// An I/O error with what failed.
    pub fn io(what: impl Into<String>, source: io::Error) -> Self {
        Self::Io {
            what: what.into(),
            source,
        }
    }
}

/// Returns a [`DaemonError::Config`] with a formatted message.
macro_rules! bail {
    ($($arg:tt)*) => {
        return Err($crate::error::DaemonError::Config(format!($($arg)*)))
    };
}
pub(crate) use bail;

//! The responder descriptor: what a protocol crate that answers probes
//! exports, as [`crate::Protocol`] is what a probing one exports. `prober
//! serve`'s flags, the daemon's `[serve]` keys, the self-test and starting
//! the listeners all loop over the [`crate::Registry`]'s list of them.

use std::any::Any;
use std::fmt;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use crate::shared::Shared;

/// What a responder is started with.
#[derive(Debug, Clone)]
pub struct ServeEnv {
    /// Settings and shared state, one value per type: what every responder
    /// takes (limits, their counters, the TLS files: `prober_net`'s
    /// `responder::Common`) and a protocol's own (the STAMP reflector's
    /// settings, the TCP responder's impairments). A responder finds its
    /// defaults when nothing was put.
    pub options: Arc<Shared>,
    /// Whether this listener serves TLS (see [`Tls`]).
    pub tls: bool,
    /// Cancelled to stop every listener.
    pub stop: CancellationToken,
}

impl ServeEnv {
    /// The value of type `T` put here, or `T`'s default.
    pub fn options<T: Any + Send + Sync + Default>(&self) -> Arc<T> {
        self.options
            .get_or_try_init(|| Ok::<_, std::convert::Infallible>(Arc::new(T::default())))
            .unwrap_or_else(|e| match e {})
    }
}

/// A responder's task, ending when [`ServeEnv::stop`] is cancelled.
pub type ServeTask = Pin<Box<dyn Future<Output = std::io::Result<()>> + Send>>;

/// A started responder.
#[derive(Default)]
pub struct Serving {
    /// What listens where, by name (`("tcp", addr)`); one responder may
    /// bind more than one socket (sockperf's UDP and TCP).
    pub bound: Vec<(&'static str, SocketAddr)>,
    /// Its tasks.
    pub tasks: Vec<ServeTask>,
    /// Counters it keeps, for `/metrics` and the log at exit, found by
    /// their type.
    pub stats: Vec<Arc<dyn Any + Send + Sync>>,
}

impl fmt::Debug for Serving {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Serving")
            .field("bound", &self.bound)
            .finish_non_exhaustive()
    }
}

/// Why a responder did not start.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// A setting it cannot use (a TLS file that does not load).
    #[error("{0}")]
    Config(String),
    /// A socket it could not bind or read.
    #[error("{what}: {source}")]
    Io {
        /// What was being done: `binding tcp 127.0.0.1:8707`.
        what: String,
        /// The error.
        source: std::io::Error,
    },
}

impl ServeError {
    /// An I/O error while doing `what`.
    pub fn io(what: impl Into<String>, source: std::io::Error) -> Self {
        Self::Io {
            what: what.into(),
            source,
        }
    }
}

/// The future a [`ServeFn`] returns.
pub type ServeFuture<'a> = Pin<Box<dyn Future<Output = Result<Serving, ServeError>> + Send + 'a>>;

/// Binds a listener on an address and starts answering.
pub type ServeFn = for<'a> fn(SocketAddr, &'a ServeEnv) -> ServeFuture<'a>;

/// Checks what a responder would refuse before anything is bound (its TLS
/// files), so `--check-config` and start-up refuse it first.
pub type CheckFn = fn(&ServeEnv) -> Result<(), ServeError>;

/// How a responder uses the TLS files (`--tls-cert`, `--tls-key`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tls {
    /// Never.
    No,
    /// When they are given; plaintext beside the named responder (the TLS
    /// one of the same protocol) when that one listens too.
    Optional {
        /// The responder that takes TLS when both listen.
        plain_beside: Option<&'static str>,
    },
    /// Always: refused without them.
    Required,
}

/// Everything prober needs to know about one responder.
#[derive(Clone, Copy)]
pub struct Responder {
    /// Its flag (`--tcp ADDR`), its `[serve]` key and its name in the
    /// `listening NAME ADDR` lines.
    pub name: &'static str,
    /// Where `prober serve` with no listener asked for answers; `None`: not
    /// started by default.
    pub default_port: Option<u16>,
    /// How it uses TLS.
    pub tls: Tls,
    /// Its `--help` line.
    pub help: &'static str,
    /// Not a flag or a key of its own (the self-test's gRPC over TLS
    /// beside plaintext gRPC).
    pub hidden: bool,
    /// What it refuses before anything is bound.
    pub check: CheckFn,
    /// Starts it.
    pub serve: ServeFn,
    /// Its own settings (the STAMP reflector's key and rate, the TCP
    /// responder's test impairments): `prober_net`'s `ProtocolOptions`,
    /// which core cannot name (it knows no clap). `prober serve`'s flags
    /// and the daemon's `[serve]` keys come from it; the value read is put
    /// in [`ServeEnv::options`]. Responders may share one.
    pub own: Option<&'static (dyn Any + Sync)>,
}

impl fmt::Debug for Responder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Responder")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

/// A [`CheckFn`] for responders with nothing to check.
pub fn no_check(_: &ServeEnv) -> Result<(), ServeError> {
    Ok(())
}

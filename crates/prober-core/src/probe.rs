//! The trait every protocol implements.

use std::future::Future;

use crate::matcher::Anomalies;
use crate::sample::Reply;

/// Why one probe failed. Timeouts are not errors: the runner owns the
/// timeout and records it as [`crate::Outcome::Timeout`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ProbeError(pub String);

impl ProbeError {
    /// An error with this message.
    pub fn new(msg: impl Into<String>) -> Self {
        Self(msg.into())
    }
}

/// One target's protocol. The runner owns sequence numbers, the schedule and
/// the timeout; a probe sends one request for `seq` and returns the reply it
/// measured nearest the socket.
pub trait Probe: Send + Sync + 'static {
    /// Sends request `seq` and waits for its reply. The runner drops the
    /// future when the timeout passes, so the probe must treat a drop as a
    /// timeout and count a later reply as late.
    fn probe(&self, seq: u64) -> impl Future<Output = Result<Reply, ProbeError>> + Send;

    /// Called once before warm-up, e.g. to open a connection, so the first
    /// measured probe does not pay for it. A failure is reported and the run
    /// goes on: each probe then fails (or reconnects) on its own.
    fn prepare(&self) -> impl Future<Output = Result<(), ProbeError>> + Send {
        async { Ok(()) }
    }

    /// Replies that matched no waiting probe: late, duplicate, reordered.
    fn anomalies(&self) -> Anomalies {
        Anomalies::default()
    }
}

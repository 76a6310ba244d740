//! The trait every protocol implements.

use std::future::Future;

use crate::error::{ErrorKind, ProbeError};
use crate::matcher::Anomalies;
use crate::sample::Reply;
use crate::wait::Gate;

/// One target's protocol. The runner owns sequence numbers, the schedule and
/// the timeout; a probe sends one request for `seq` and returns the reply it
/// measured nearest the socket.
pub trait Probe: Send + Sync + 'static {
    /// Sends request `seq` once `gate` opens and waits for its reply. The
    /// probe prepares the request first, then passes the gate, then takes
    /// its send timestamp and sends (see [`Gate`]). The runner drops the
    /// future when the timeout passes, so the probe must treat a drop as a
    /// timeout and count a later reply as late.
    fn probe_at(
        &self,
        seq: u64,
        gate: Gate,
    ) -> impl Future<Output = Result<Reply, ProbeError>> + Send;

    /// Sends request `seq` at once and waits for its reply.
    fn probe(&self, seq: u64) -> impl Future<Output = Result<Reply, ProbeError>> + Send {
        self.probe_at(seq, Gate::open())
    }

    /// Called once before warm-up, e.g. to open a connection, so the first
    /// measured probe does not pay for it. A failure is reported and the run
    /// goes on: each probe then fails (or reconnects) on its own.
    fn prepare(&self) -> impl Future<Output = Result<(), ProbeError>> + Send {
        async { Ok(()) }
    }

    /// Completes reply `seq`'s split with what comes only after the reply
    /// (the responder's transmit stamp, where a protocol carries it in its
    /// next reply: [`crate::ResponderTimes::send_later`]). The runner calls
    /// it for such replies off the schedule's path, so the probes after
    /// `seq` go out meanwhile; it must end within a bounded time. The
    /// default has nothing to wait for.
    fn settle(&self, seq: u64, reply: Reply) -> impl Future<Output = Reply> + Send {
        let _ = seq;
        std::future::ready(reply)
    }

    /// Replies that matched no waiting probe: late, duplicate, reordered.
    fn anomalies(&self) -> Anomalies {
        Anomalies::default()
    }

    /// The address and port its probes leave from, where it keeps one
    /// for the run (a flow: `--flows`), so that a path tracer can follow
    /// the same 5-tuple. `None` by default.
    fn source(&self) -> Option<std::net::SocketAddr> {
        None
    }
}

/// A target whose host name did not resolve: each of its slots is an
/// error of kind [`ErrorKind::Resolve`] and nothing is sent, so the target
/// is shown and counted as down (its loss alerts fire) while the others
/// are probed. The daemon replaces it with the protocol's probe once the
/// name resolves.
#[derive(Debug, Clone)]
pub struct Unresolved {
    error: String,
}

impl Unresolved {
    /// A target whose resolution failed with `error` (the resolver's
    /// one-line message).
    pub fn new(error: impl Into<String>) -> Self {
        Self {
            error: error.into(),
        }
    }
}

impl Probe for Unresolved {
    async fn probe_at(&self, _seq: u64, gate: Gate) -> Result<Reply, ProbeError> {
        gate.pass().await;
        Err(ProbeError::new(ErrorKind::Resolve, self.error.clone()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn an_unresolved_target_fails_every_probe_with_its_reason() {
        let p = Unresolved::new("cannot resolve host \"gone.invalid\": no such name");
        for seq in 0..3 {
            let e = p.probe(seq).await.unwrap_err();
            assert_eq!(e.kind(), ErrorKind::Resolve);
            assert!(e.to_string().contains("gone.invalid"), "{e}");
        }
    }
}

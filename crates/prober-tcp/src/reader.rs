//! What the TCP and UDP probes share: how replies are read (a tokio task or
//! a busy-poll thread) and how a delivered reply becomes a [`Reply`].

use std::time::Duration;

use prober_core::busy::SpinThread;
use prober_core::{ProbeError, Reply, Waiter};
use tokio::time::Instant;
use tokio_util::task::AbortOnDropHandle;

/// What a receive loop hands a waiting probe: the arrival instant, the
/// responder's dwell time and, where the socket gives kernel receive
/// timestamps (UDP), the receive wake-up; or why the connection failed.
pub(crate) type Arrival = Result<(Instant, Duration, Option<Duration>), ProbeError>;

/// Waits for the reply to a request of `bytes` bytes sent at `sent`.
pub(crate) async fn await_reply(
    waiter: &mut Waiter<Arrival>,
    sent: Instant,
    bytes: usize,
) -> Result<Reply, ProbeError> {
    match waiter.recv().await {
        Some(Ok((received, dwell, wake))) => Ok(Reply {
            sent,
            received,
            server_dwell: Some(dwell),
            rx_wake: wake,
            bytes,
        }),
        Some(Err(e)) => Err(e),
        None => Err(ProbeError::new("reply matcher closed")),
    }
}

/// Owns the receive loop; dropping it stops the loop.
#[derive(Debug)]
pub(crate) enum Reader {
    /// A tokio task that sleeps in epoll between replies.
    Task(#[allow(dead_code, reason = "held for its Drop")] AbortOnDropHandle<()>),
    /// A thread spinning on non-blocking reads (`--busy-poll`).
    Spin(#[allow(dead_code, reason = "held for its Drop")] SpinThread),
}

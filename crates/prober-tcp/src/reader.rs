//! How a probe reads replies: a tokio task or a busy-poll thread.

use prober_core::busy::SpinThread;
use tokio_util::task::AbortOnDropHandle;

/// Owns the receive loop; dropping it stops the loop.
#[derive(Debug)]
pub(crate) enum Reader {
    /// A tokio task that sleeps in epoll between replies.
    Task(#[allow(dead_code, reason = "held for its Drop")] AbortOnDropHandle<()>),
    /// A thread spinning on non-blocking reads (`--busy-poll`).
    Spin(#[allow(dead_code, reason = "held for its Drop")] SpinThread),
}

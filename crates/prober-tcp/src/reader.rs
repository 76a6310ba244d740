//! What the TCP and UDP probes share: stamped reads and how a delivered
//! reply becomes a [`Reply`].

use std::io;
use std::os::fd::BorrowedFd;
use std::time::Duration;

use prober_core::{ProbeError, Reply, Waiter};
use prober_net::rx;
use tokio::time::Instant;

/// What a receive loop hands a waiting probe: the arrival instant, the
/// responder's dwell time and, where the kernel stamped the reply (tcp://,
/// UDP), the receive wake-up; or why the connection failed.
pub(crate) type Arrival = Result<(Instant, Duration, Option<Duration>), ProbeError>;

/// Waits for the reply to a request of `bytes` bytes sent at `sent`.
pub(crate) async fn await_reply(
    waiter: &mut Waiter<Arrival>,
    sent: Instant,
    bytes: usize,
) -> Result<Reply, ProbeError> {
    let (received, dwell, wake) = waiter.reply().await?;
    Ok(Reply {
        sent,
        received,
        server_dwell: Some(dwell),
        rx_wake: wake,
        bytes,
        ttl: None,
        stamps: prober_core::sample::Stamps::default(),
    })
}

/// Receives without blocking: the length read and the receive wake-up (for
/// TCP, that of the last segment read), if the kernel stamped it. Needs
/// [`prober_net::rx::enable_timestamps`] on the socket.
pub(crate) fn recv_stamped(
    fd: BorrowedFd<'_>,
    buf: &mut [u8],
) -> io::Result<(usize, Option<Duration>)> {
    let (n, _, stamp) = rx::recv_stamped::<()>(fd, buf)?;
    Ok((n, stamp.and_then(rx::wake_since)))
}

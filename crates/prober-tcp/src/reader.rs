//! What the TCP and UDP probes share: how replies are read (a tokio task or
//! a busy-poll thread) and how a delivered reply becomes a [`Reply`].

use std::io::{self, IoSliceMut};
use std::os::fd::{AsRawFd, BorrowedFd};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use nix::sys::socket::{ControlMessageOwned, MsgFlags, recvmsg, setsockopt, sockopt};

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

/// Turns on kernel receive timestamps (SO_TIMESTAMPNS), for the receive
/// wake-up that [`recv_stamped`] reports.
pub(crate) fn enable_rx_timestamps(fd: BorrowedFd<'_>) -> io::Result<()> {
    setsockopt(&fd, sockopt::ReceiveTimestampns, &true).map_err(io::Error::from)
}

/// Receives without blocking: the length read and how long ago the kernel
/// received it (the receive wake-up; for TCP, of the last segment read), if
/// it stamped it. Needs [`enable_rx_timestamps`] on the socket.
pub(crate) fn recv_stamped(
    fd: BorrowedFd<'_>,
    buf: &mut [u8],
) -> io::Result<(usize, Option<Duration>)> {
    let mut iov = [IoSliceMut::new(buf)];
    let mut cmsg = nix::cmsg_space!(nix::sys::time::TimeSpec);
    let msg = recvmsg::<()>(
        fd.as_raw_fd(),
        &mut iov,
        Some(&mut cmsg),
        MsgFlags::MSG_DONTWAIT,
    )
    .map_err(io::Error::from)?;
    let mut wake = None;
    if let Ok(cmsgs) = msg.cmsgs() {
        for c in cmsgs {
            if let ControlMessageOwned::ScmTimestampns(ts) = c
                && let (Ok(s), Ok(ns)) = (u64::try_from(ts.tv_sec()), u32::try_from(ts.tv_nsec()))
            {
                let kernel = UNIX_EPOCH + Duration::new(s, ns);
                // A stamp more than a second old means the wall clock moved.
                wake = SystemTime::now()
                    .duration_since(kernel)
                    .ok()
                    .filter(|w| *w < Duration::from_secs(1));
            }
        }
    }
    Ok((msg.bytes, wake))
}

/// Owns the receive loop; dropping it stops the loop.
#[derive(Debug)]
pub(crate) enum Reader {
    /// A tokio task that sleeps in epoll between replies.
    Task(#[allow(dead_code, reason = "held for its Drop")] AbortOnDropHandle<()>),
    /// A thread spinning on non-blocking reads (`--busy-poll`).
    Spin(#[allow(dead_code, reason = "held for its Drop")] SpinThread),
}

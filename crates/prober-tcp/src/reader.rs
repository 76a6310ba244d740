//! What the TCP and UDP probes share: stamped reads and how a delivered
//! reply becomes a [`Reply`].

use std::io;
use std::os::fd::BorrowedFd;
use std::time::Duration;

use prober_core::clock::unix_now_ns;
use prober_core::{ProbeError, Reply, ResponderTimes, Stamps, Waiter};
use prober_sys::rx;
use tokio::time::Instant;

/// What a read of a reply gave: the kernel's receive stamp (t4k) and the
/// wall-clock time right after the read (t4), ns since the Unix epoch.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RxStamp {
    pub(crate) t4k: Option<u64>,
    pub(crate) t4: u64,
}

/// What a receive loop hands a waiting probe.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Got {
    /// Right after the read, on the monotonic clock.
    pub(crate) received: Instant,
    /// The responder's dwell (t3 − t2).
    pub(crate) dwell: Duration,
    /// The read's stamps.
    pub(crate) rx: RxStamp,
    /// The responder's wake-up (t2 − t2k), where it reports it (wire v2).
    pub(crate) responder_wake: Option<u64>,
    /// The responder promised a follow-up frame with its transmit stamp.
    pub(crate) follow_up: bool,
    /// ... which it sends once asked ([`crate::wire::Kind::Ask`]).
    pub(crate) ask: bool,
    /// ... or which comes in a later response, or on ask
    /// ([`crate::wire::interleaved`]): the probe's split is settled later
    /// ([`settle_interleaved`]).
    pub(crate) interleaved: bool,
}

/// A reply, or why the connection failed.
pub(crate) type Arrival = Result<Got, ProbeError>;

/// Waits for the reply to a request of `bytes` bytes sent at `sent` (t1 on
/// the wall clock: `t1`); with it, what the read gave (whether the
/// responder promised a follow-up frame, and how it comes).
pub(crate) async fn await_got(
    waiter: &mut Waiter<Arrival>,
    sent: Instant,
    t1: u64,
    bytes: usize,
) -> Result<(Reply, Got), ProbeError> {
    let got = waiter.reply().await?;
    let stamps = Stamps {
        t1: Some(t1),
        t1k: None,
        t4k: got.rx.t4k,
        t4: Some(got.rx.t4),
        responder: Some(ResponderTimes {
            wake: got.responder_wake,
            dwell: Some(u64::try_from(got.dwell.as_nanos()).unwrap_or(u64::MAX)),
            send_later: got.interleaved,
            ..ResponderTimes::default()
        }),
        kernel_peer: false,
        handshake: None,
    };
    let wake = rx::wake_ns(got.rx.t4k, got.rx.t4).map(Duration::from_nanos);
    let reply = Reply {
        sent,
        received: got.received,
        server_dwell: Some(got.dwell),
        rx_wake: wake,
        bytes,
        ttl: None,
        stamps,
        app: Default::default(),
    };
    Ok((reply, got))
}

/// Receives without blocking: the length read and its stamps (for TCP, the
/// kernel stamp of the last segment read). Needs
/// [`prober_sys::rx::enable_timestamps`] on the socket.
pub(crate) fn recv_stamped(fd: BorrowedFd<'_>, buf: &mut [u8]) -> io::Result<(usize, RxStamp)> {
    let (n, _, stamp) = rx::recv_stamped::<()>(fd, buf)?;
    let t4 = unix_now_ns();
    Ok((
        n,
        RxStamp {
            t4k: stamp.and_then(rx::unix_ns),
            t4,
        },
    ))
}

//! What the TCP and UDP probes share: stamped reads and how a delivered
//! reply becomes a [`Reply`].

use std::io;
use std::os::fd::BorrowedFd;
use std::time::Duration;

use prober_core::clock::unix_now_ns;
use prober_core::{ProbeError, Reply, ResponderTimes, Stamps, Waiter};
use prober_net::rx;
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
/// [`prober_net::rx::enable_timestamps`] on the socket.
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

/// How long a probe whose reply promised a follow-up frame waits for it
/// after the reply: the responder sends it as soon as its kernel stamped the
/// reply, so it comes right behind; one that does not come in time leaves
/// the responder send part unknown.
pub(crate) const FOLLOW_UP_WAIT: Duration = Duration::from_millis(5);

/// How long before the probe's timeout the wait for a follow-up gives up.
pub(crate) const FOLLOW_UP_MARGIN: Duration = Duration::from_micros(500);

/// Follow-up frames by seq: the responder send part (t3k − t3, `None` when
/// the responder's kernel gave no stamp), kept until their probe takes it.
#[derive(Debug, Default)]
pub(crate) struct FollowUps {
    kept: std::sync::Mutex<std::collections::VecDeque<(u64, Option<u64>)>>,
    arrived: tokio::sync::Notify,
}

impl FollowUps {
    fn lock(&self) -> std::sync::MutexGuard<'_, std::collections::VecDeque<(u64, Option<u64>)>> {
        self.kept
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    pub(crate) fn put(&self, seq: u64, send: Option<u64>) {
        let mut kept = self.lock();
        if kept.len() >= prober_net::rx::TxStamps::KEPT {
            kept.pop_front();
        }
        kept.push_back((seq, send));
        drop(kept);
        self.arrived.notify_waiters();
    }

    fn take(&self, seq: u64) -> Option<Option<u64>> {
        let mut kept = self.lock();
        let at = kept.iter().position(|(s, _)| *s == seq)?;
        kept.remove(at).map(|(_, v)| v)
    }

    /// The follow-up of `seq` if it comes by `deadline`: `Some(send)`, where
    /// `send` is `None` when the responder's kernel gave no stamp; `None`
    /// when it has not come.
    async fn wait_until(&self, seq: u64, deadline: Instant) -> Option<Option<u64>> {
        loop {
            let notified = self.arrived.notified();
            if let Some(v) = self.take(seq) {
                return Some(v);
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                return self.take(seq);
            }
        }
    }

    /// Waits up to [`FOLLOW_UP_WAIT`] and `extra` for the follow-up of
    /// `seq`, and never past `limit`. A follow-up that waits for an ask
    /// comes a round trip after it: `extra` covers that.
    pub(crate) async fn wait(&self, seq: u64, limit: Instant, extra: Duration) -> Option<u64> {
        let deadline = (Instant::now() + FOLLOW_UP_WAIT + extra).min(limit);
        self.wait_until(seq, deadline).await.flatten()
    }
}

/// How long a reply whose transmit stamp comes interleaved waits for a
/// later response on its flow to carry it before the probe asks for it. A
/// schedule faster than this (and a closed loop) sends no extra frame.
pub(crate) const INTERLEAVED_WAIT: Duration = FOLLOW_UP_WAIT;

/// Whether a flow's requests go out often enough for the interleaved
/// exchange: the gap since its previous request is at most half of
/// [`INTERLEAVED_WAIT`] (or there was none: a closed loop's first). At
/// longer gaps no next response would come in time to carry the stamp, and
/// a follow-up frame right after the response costs less than waiting for
/// one and then asking: over UDP it comes unasked, over TCP the client asks
/// as soon as it has read the response. A daemon probing once a second
/// sends no ask over UDP.
#[derive(Debug, Default)]
pub(crate) struct Cadence(std::sync::Mutex<Option<Instant>>);

impl Cadence {
    /// Notes a request going out at `now`; true when it should ask for the
    /// interleaved exchange.
    pub(crate) fn interleave(&self, now: Instant) -> bool {
        let prev = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .replace(now);
        prev.is_none_or(|p| now.saturating_duration_since(p) <= INTERLEAVED_WAIT / 2)
    }
}

/// Completes the split of reply `seq`, whose transmit stamp comes
/// interleaved ([`Got::interleaved`]): in a later response's carried block
/// ([`crate::wire::carried`], filed in `follow`) within
/// [`INTERLEAVED_WAIT`]; if none brings it, `ask` sends an ask (false if it
/// could not) and the follow-up frame is waited for a round trip more
/// (twice this reply's RTT, and [`FOLLOW_UP_WAIT`]). Without it the
/// responder send part stays unknown and the split partial.
pub(crate) async fn settle_interleaved<F>(
    follow: &FollowUps,
    seq: u64,
    mut reply: Reply,
    ask: impl FnOnce() -> F,
) -> Reply
where
    F: std::future::Future<Output = bool>,
{
    let Some(r) = reply.stamps.responder.filter(|r| r.send_later) else {
        return reply;
    };
    let send = match follow
        .wait_until(seq, Instant::now() + INTERLEAVED_WAIT)
        .await
    {
        Some(send) => send,
        None if ask().await => {
            let deadline = Instant::now() + FOLLOW_UP_WAIT + 2 * reply.rtt();
            follow.wait_until(seq, deadline).await.flatten()
        }
        None => None,
    };
    reply.stamps.responder = Some(ResponderTimes {
        send,
        send_later: false,
        ..r
    });
    reply
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn requests_interleave_only_while_they_come_often() {
        let c = Cadence::default();
        let t = Instant::now();
        assert!(c.interleave(t), "the first, as a closed loop's");
        assert!(c.interleave(t), "back to back");
        assert!(c.interleave(t + Duration::from_millis(2)));
        assert!(!c.interleave(t + Duration::from_millis(12)), "10 ms apart");
        assert!(!c.interleave(t + Duration::from_millis(1_012)));
        assert!(c.interleave(t + Duration::from_millis(1_013)));
    }
}

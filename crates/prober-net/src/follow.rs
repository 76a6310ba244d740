//! The responder's send part (t3k − t3) of a reply, which comes only after
//! the reply: in a follow-up frame right behind it, in the responder's
//! next reply on the flow (interleaved, as NTP's interleaved mode), or when
//! the client asks. The TCP, UDP and gRPC probes share the waiting.

use std::time::Duration;

use prober_core::{Reply, ResponderTimes};
use tokio::time::Instant;

/// How long a probe whose reply promised a follow-up frame waits for it
/// after the reply: the responder sends it as soon as its kernel stamped the
/// reply, so it comes right behind; one that does not come in time leaves
/// the responder send part unknown (`responder_send_stamp`). The wait is
/// off the probe's clock (the reply is in hand) and only delays its
/// result, so it allows a loaded responder a scheduler's time slice or
/// two: at 5 ms, a busy-polling client and two busy loops on two cores left
/// 10 of 100 TCP probes without the stamp, every one a follow-up that came
/// after the wait (`splits_stay_complete_with_busy_poll_on_either_side`).
pub const FOLLOW_UP_WAIT: Duration = Duration::from_millis(25);

/// How long before the probe's timeout the wait for a follow-up gives up.
pub const FOLLOW_UP_MARGIN: Duration = Duration::from_micros(500);

/// When a target may next try to open its spare connection: a try at most
/// a second, counted from its start, so that a connect that hangs (a
/// server whose queue is full drops SYNs) and is cut off at the probe's
/// time limit holds one answered probe a second, not every one.
#[derive(Debug, Default)]
pub struct SpareRetry(std::sync::Mutex<Option<std::time::Instant>>);

impl SpareRetry {
    /// The least time between two tries that did not open the spare.
    pub const EVERY: Duration = Duration::from_secs(1);

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<std::time::Instant>> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Whether a try may begin now; if so, the next waits [`Self::EVERY`]
    /// unless this one opens the spare.
    pub fn begin(&self) -> bool {
        let now = std::time::Instant::now();
        let mut next = self.lock();
        if next.is_some_and(|at| now < at) {
            return false;
        }
        *next = Some(now + Self::EVERY);
        true
    }

    /// The spare opened: once it dies, the next try may begin at once.
    pub fn opened(&self) {
        *self.lock() = None;
    }
}

/// The probes that went on a target's second connection and whose send
/// part may still be asked for: asked there, since a responder keeps send
/// parts by connection. Bounded, to more than can be settling at once.
#[derive(Debug, Default)]
pub struct OnSpare(std::sync::Mutex<std::collections::VecDeque<u64>>);

impl OnSpare {
    const KEPT: usize = 64;

    fn lock(&self) -> std::sync::MutexGuard<'_, std::collections::VecDeque<u64>> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Probe `seq` went on the spare.
    pub fn remember(&self, seq: u64) {
        let mut seqs = self.lock();
        if seqs.len() == Self::KEPT {
            seqs.pop_front();
        }
        seqs.push_back(seq);
    }

    /// Whether probe `seq` went on the spare; forgotten from now.
    pub fn take(&self, seq: u64) -> bool {
        let mut seqs = self.lock();
        seqs.iter()
            .position(|s| *s == seq)
            .and_then(|at| seqs.remove(at))
            .is_some()
    }
}

/// Follow-up frames by seq: the responder send part (t3k − t3, `None` when
/// the responder's kernel gave no stamp), kept until their probe takes it.
#[derive(Debug, Default)]
pub struct FollowUps {
    kept: std::sync::Mutex<std::collections::VecDeque<(u64, Option<u64>)>>,
    arrived: tokio::sync::Notify,
}

impl FollowUps {
    fn lock(&self) -> std::sync::MutexGuard<'_, std::collections::VecDeque<(u64, Option<u64>)>> {
        self.kept
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Files `seq`'s send part (`None`: the responder's kernel gave no
    /// stamp) and wakes its waiter.
    pub fn put(&self, seq: u64, send: Option<u64>) {
        let mut kept = self.lock();
        if kept.len() >= prober_sys::rx::TxStamps::KEPT {
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
    pub async fn wait_until(&self, seq: u64, deadline: Instant) -> Option<Option<u64>> {
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
    pub async fn wait(&self, seq: u64, limit: Instant, extra: Duration) -> Option<u64> {
        let deadline = (Instant::now() + FOLLOW_UP_WAIT + extra).min(limit);
        self.wait_until(seq, deadline).await.flatten()
    }
}

/// How long a reply whose transmit stamp comes interleaved waits for a
/// later response on its flow to carry it before the probe asks for it. A
/// schedule faster than this (and a closed loop) sends no extra frame.
pub const INTERLEAVED_WAIT: Duration = Duration::from_millis(5);

/// Whether a flow's requests go out often enough for the interleaved
/// exchange: the gap since its previous request is at most half of
/// [`INTERLEAVED_WAIT`] (or there was none: a closed loop's first). At
/// longer gaps no next response would come in time to carry the stamp, and
/// a follow-up frame right after the response costs less than waiting for
/// one and then asking: over UDP it comes unasked, over TCP the client asks
/// as soon as it has read the response. A daemon probing once a second
/// sends no ask over UDP.
#[derive(Debug, Default)]
pub struct Cadence(std::sync::Mutex<Option<Instant>>);

impl Cadence {
    /// Notes a request going out at `now`; true when it should ask for the
    /// interleaved exchange.
    pub fn interleave(&self, now: Instant) -> bool {
        self.gap(now).is_none_or(|gap| gap <= INTERLEAVED_WAIT / 2)
    }

    /// Notes a request going out at `now`: the gap since the one before
    /// (`None` for the first).
    pub fn gap(&self, now: Instant) -> Option<Duration> {
        let prev = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .replace(now);
        prev.map(|p| now.saturating_duration_since(p))
    }
}

/// Time to spare between an ask's expected end and the next request.
pub const ASK_MARGIN: Duration = Duration::from_millis(1);

/// Whether an ask sent right after a reply of round trip `rtt` would still
/// be open (with [`ASK_MARGIN`] to spare) when the next request goes out,
/// `gap` after the one replied to: an ask open when a probe starts spoils
/// that probe's stamps, or takes its connection.
pub fn ask_would_overlap(gap: Duration, rtt: Duration) -> bool {
    gap < 2 * rtt + ASK_MARGIN
}

/// Whether the next reply, rather than an ask right after this one, should
/// bring a reply's send part (gRPC and HTTP, which can ask): a request
/// going out `gap` after the one before (`None`: the first) interleaves
/// when requests come at most half of [`INTERLEAVED_WAIT`] apart, or when
/// an ask would overlap the next request, judged by the latest RTT.
pub fn interleaves(gap: Option<Duration>, last_rtt: Duration) -> bool {
    gap.is_none_or(|gap| gap <= INTERLEAVED_WAIT / 2 || ask_would_overlap(gap, last_rtt))
}

/// Puts the responder's send part in (gRPC and HTTP, whose responder
/// reports its wake and dwell now and its send part later). Where it is
/// unknown (no stamp, no answer to the ask), the split is as from a
/// responder that stamps no sends: dwell, and the turnaround to its
/// handler's return (wake + dwell) standing for its parts, with its send
/// path in the network part. The wake goes: a turnaround stands for the
/// parts only where they are not all there.
pub fn finish(r: &mut ResponderTimes, send: Option<u64>) {
    r.send = send;
    r.send_later = false;
    if send.is_none() {
        r.turnaround = r.wake.zip(r.dwell).and_then(|(w, d)| w.checked_add(d));
        r.wake = None;
    }
}

/// Completes the split of reply `seq`, whose transmit stamp comes
/// interleaved: in a later response (filed in `follow` by the protocol's
/// reader) within `carry` (TCP and UDP: [`INTERLEAVED_WAIT`]); if none
/// brings it, `ask` sends an ask (false if it could not) and the answer is
/// waited for a round trip more (twice this reply's RTT, and
/// [`FOLLOW_UP_WAIT`]). Without it the responder send part stays unknown
/// and the split partial.
pub async fn settle_interleaved<F>(
    follow: &FollowUps,
    seq: u64,
    mut reply: Reply,
    carry: Duration,
    ask: impl FnOnce() -> F,
) -> Reply
where
    F: std::future::Future<Output = bool>,
{
    let Some(r) = reply.stamps.responder.filter(|r| r.send_later) else {
        return reply;
    };
    let send = match follow.wait_until(seq, Instant::now() + carry).await {
        Some(send) => send,
        None if ask().await => {
            let deadline = Instant::now() + FOLLOW_UP_WAIT + 2 * reply.rtt();
            follow.wait_until(seq, deadline).await.flatten()
        }
        // Not asked: a later response may have brought it meanwhile.
        None => follow.wait_until(seq, Instant::now()).await.flatten(),
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

    #[test]
    fn an_ask_is_sent_only_where_it_ends_before_the_next_request() {
        let ms = Duration::from_millis;
        assert!(interleaves(None, ms(0)), "the first request");
        assert!(interleaves(Some(ms(2)), ms(0)), "back to back");
        assert!(!interleaves(Some(ms(10)), ms(1)), "10 ms apart, 1 ms RTT");
        // 10 ms apart, but an ask (a round trip) would end 1 ms or less
        // before the next request.
        assert!(interleaves(Some(ms(10)), Duration::from_micros(4_600)));
        assert!(ask_would_overlap(ms(10), Duration::from_micros(4_600)));
        assert!(!ask_would_overlap(ms(10), Duration::from_micros(4_400)));
    }

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

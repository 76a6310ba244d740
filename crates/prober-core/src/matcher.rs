//! Matching replies to the probes that wait for them.
//!
//! A receive loop calls [`Matcher::deliver`] for every reply it decodes; a
//! probe registers its sequence number with [`Matcher::register`] before it
//! sends and awaits the returned [`Waiter`]. When the runner's timeout drops a
//! waiter, its sequence number is remembered as expired, so a reply that comes
//! later is counted as late instead of vanishing.

use std::collections::{HashMap, VecDeque};
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::{Arc, Mutex, PoisonError};

use serde::Serialize;
use tokio::sync::oneshot;

/// Sequence numbers at and above this value are warm-up probes: they are sent
/// and awaited but never recorded, and never count towards reordering.
pub const WARMUP_SEQ_BASE: u64 = 1 << 63;

/// How many finished sequence numbers are remembered for late and duplicate
/// detection, at most. Replies for older ones are counted as unknown.
pub const HISTORY: usize = 65_536;

/// How long a finished sequence number is remembered, at most: a reply
/// later than this after its probe timed out is counted as unknown, not
/// late. With [`HISTORY`] alone a daemon's target at 1 Hz remembered its
/// seqs for 18 hours, and its memory grew for all of them.
pub const HORIZON: std::time::Duration = std::time::Duration::from_secs(60);

/// Counts of replies that did not complete a probe, and of reconnects.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Anomalies {
    /// Replies for probes that had already timed out.
    pub late: u64,
    /// Second and later replies for one probe.
    pub duplicate: u64,
    /// Replies for seq n that arrived after a reply for a seq above n.
    pub reordered: u64,
    /// Replies for sequence numbers this run never sent or forgot.
    pub unknown: u64,
    /// Replies whose payload came back altered, rejected.
    pub corrupt: u64,
    /// Connections re-established after the first.
    pub reconnects: u64,
    /// Loss by direction, where the protocol can tell (STAMP with a
    /// stateful reflector).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub direction: Option<DirectionLoss>,
    /// The kernel's own RTT estimate of the probe's TCP connection
    /// (`TCP_INFO`), read with the other counts.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tcp_rtt: Option<TcpRtt>,
    /// A user-space transport's own view of its path (QUIC's, from its
    /// stack), read with the other counts: the counterpart of `tcp_rtt`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub path: Option<PathStats>,
    /// When the server's TLS certificate (the leaf) expires, Unix
    /// seconds, as last seen (`https://`, `grpcs://`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cert_not_after: Option<i64>,
    /// What adaptive receive spent (`--receive adaptive`), if it is on.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub spin: Option<crate::spin::SpinCount>,
}

/// The kernel's round-trip estimate of a TCP connection (`TCP_INFO`): a
/// cross-check for the RTTs prober measures, from the kernel's own ACK
/// timing.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct TcpRtt {
    /// Smoothed RTT (`tcpi_rtt`), µs.
    pub rtt_us: u32,
    /// Its mean deviation (`tcpi_rttvar`), µs.
    pub rttvar_us: u32,
    /// The lowest RTT seen (`tcpi_min_rtt`), µs.
    pub min_rtt_us: u32,
}

/// A user-space transport's figures for its connection (QUIC: quinn's
/// path statistics), as `tcp_info` gives TCP's.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct PathStats {
    /// Smoothed RTT, µs.
    pub srtt_us: u32,
    /// Congestion window, bytes.
    pub cwnd: u64,
    /// Packets sent on the connection.
    pub sent_packets: u64,
    /// Packets it declared lost.
    pub lost_packets: u64,
    /// Congestion events (the window was cut).
    pub congestion_events: u64,
    /// Connections that resumed a session and had their 0-RTT data
    /// accepted, of the run so far (QUIC with `--quic-resume`).
    pub zero_rtt: u64,
}

/// Lost probes by direction: requests that never reached the responder,
/// replies that never came back, and probes after the newest reply, whose
/// direction cannot be known yet.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct DirectionLoss {
    /// Requests lost on the way to the responder.
    pub forward: u64,
    /// Replies lost on the way back.
    pub backward: u64,
    /// Lost, direction unknown (after the newest reply).
    pub unknown: u64,
}

impl std::ops::AddAssign for Anomalies {
    fn add_assign(&mut self, o: Self) {
        self.late += o.late;
        self.duplicate += o.duplicate;
        self.reordered += o.reordered;
        self.unknown += o.unknown;
        self.corrupt += o.corrupt;
        self.reconnects += o.reconnects;
        self.direction = match (self.direction, o.direction) {
            (Some(a), Some(b)) => Some(DirectionLoss {
                forward: a.forward + b.forward,
                backward: a.backward + b.backward,
                unknown: a.unknown + b.unknown,
            }),
            (a, b) => a.or(b),
        };
        self.tcp_rtt = o.tcp_rtt.or(self.tcp_rtt);
        self.path = o.path.or(self.path);
        self.spin = match (self.spin, o.spin) {
            (Some(mut a), Some(b)) => {
                a += b;
                Some(a)
            }
            (a, b) => a.or(b),
        };
    }
}

/// What [`Matcher::deliver`] did with a reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Delivery {
    /// Completed a waiting probe.
    Matched,
    /// The probe had timed out.
    Late,
    /// The probe had already been answered.
    Duplicate,
    /// No probe with that sequence number is known.
    Unknown,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Finished {
    Answered,
    Expired,
}

impl Finished {
    fn code(self) -> u8 {
        match self {
            Self::Answered => 1,
            Self::Expired => 2,
        }
    }

    fn from_code(code: u8) -> Option<Self> {
        match code {
            1 => Some(Self::Answered),
            2 => Some(Self::Expired),
            _ => None,
        }
    }
}

/// Finished sequence numbers (answered or expired), for late and duplicate
/// detection: a byte a seq in a ring indexed by seq, since a run's seqs are
/// dense and rise; forgotten after [`HISTORY`] seqs or once older than the
/// horizon, whichever comes first. Seqs outside the ring (warm-up's, or
/// one that finished after the ring moved past it) go in a small map.
/// A map of every seq cost about 50 bytes a seq.
#[derive(Debug)]
struct History {
    /// The seq of `states[0]`.
    base: u64,
    /// 0: not finished; else [`Finished::code`].
    states: VecDeque<u8>,
    /// (where the ring ended, when), a mark every eighth of the horizon:
    /// the seqs below a mark older than the horizon are forgotten.
    marks: VecDeque<(u64, std::time::Instant)>,
    horizon: std::time::Duration,
    /// Seqs far from the ring, and the order they came in.
    apart: SeqMap<Finished>,
    apart_order: VecDeque<u64>,
}

/// Seqs kept apart from the ring, at most.
const APART: usize = 1024;

impl History {
    fn new(horizon: std::time::Duration) -> Self {
        Self {
            base: 0,
            states: VecDeque::new(),
            marks: VecDeque::new(),
            horizon,
            apart: SeqMap::default(),
            apart_order: VecDeque::new(),
        }
    }

    /// Where `seq` sits in the ring, if it does.
    fn index(&self, seq: u64) -> Option<usize> {
        let i = usize::try_from(seq.checked_sub(self.base)?).ok()?;
        (i < self.states.len()).then_some(i)
    }

    fn get(&self, seq: u64) -> Option<Finished> {
        match self.index(seq) {
            Some(i) => Finished::from_code(self.states[i]),
            None => self.apart.get(&seq).copied(),
        }
    }

    /// Changes a finished seq's state (a late reply answers it).
    fn set(&mut self, seq: u64, how: Finished) {
        match self.index(seq) {
            Some(i) => self.states[i] = how.code(),
            None => {
                if let Some(v) = self.apart.get_mut(&seq) {
                    *v = how;
                }
            }
        }
    }

    /// `seq` is registered again: not finished.
    fn forget(&mut self, seq: u64) {
        match self.index(seq) {
            Some(i) => self.states[i] = 0,
            None => {
                self.apart.remove(&seq);
            }
        }
    }

    /// Notes `seq` finished `how` at `now`.
    fn finish(&mut self, seq: u64, how: Finished, now: std::time::Instant) {
        if self.states.is_empty() && self.marks.is_empty() {
            self.base = seq;
        }
        let end = self.base + self.states.len() as u64;
        // Within the ring, or close enough above it to extend it.
        let fits = seq >= self.base && seq - self.base < 2 * HISTORY as u64;
        if fits {
            if seq >= end {
                let grow = usize::try_from(seq - end + 1).unwrap_or(usize::MAX);
                self.states.extend(std::iter::repeat_n(0, grow));
            }
            let i = usize::try_from(seq - self.base).unwrap_or(usize::MAX);
            self.states[i] = how.code();
        } else if self.apart.insert(seq, how).is_none() {
            self.apart_order.push_back(seq);
            if self.apart_order.len() > APART
                && let Some(old) = self.apart_order.pop_front()
            {
                self.apart.remove(&old);
            }
        }
        self.trim(now);
    }

    fn trim(&mut self, now: std::time::Instant) {
        while self.states.len() > HISTORY {
            self.states.pop_front();
            self.base += 1;
        }
        let end = self.base + self.states.len() as u64;
        let step = self.horizon / 8;
        if self
            .marks
            .back()
            .is_none_or(|(_, t)| now.saturating_duration_since(*t) >= step)
        {
            self.marks.push_back((end, now));
        }
        // Everything below the newest mark older than the horizon finished
        // (or was registered) before it: forget it.
        while let Some(&(upto, t)) = self.marks.front() {
            if now.saturating_duration_since(t) < self.horizon {
                break;
            }
            self.marks.pop_front();
            while self.base < upto && !self.states.is_empty() {
                self.states.pop_front();
                self.base += 1;
            }
        }
        // A ring emptied by the horizon starts again at the next seq.
        if self.states.is_empty() {
            self.base = end;
        }
        if self.states.capacity() > 4 * self.states.len().max(64) {
            self.states.shrink_to(2 * self.states.len());
        }
    }
}

/// Hashes sequence numbers with one multiplication (Fibonacci hashing). The
/// keys are our own sequence numbers (or target ids), so there is nothing to
/// defend against, and SipHash was a visible share of the per-probe
/// instructions (callgrind).
#[derive(Debug, Default, Clone, Copy)]
pub struct SeqHasher(u64);

impl Hasher for SeqHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = (self.0 ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3);
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = n.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }

    fn write_usize(&mut self, n: usize) {
        self.write_u64(n as u64);
    }
}

/// A map keyed by our own sequence numbers or ids, hashed by [`SeqHasher`].
pub(crate) type SeqMap<V> = HashMap<u64, V, BuildHasherDefault<SeqHasher>>;

/// A map keyed by target id, hashed by [`SeqHasher`]: one probe of the
/// table where a `BTreeMap` of 10,000 targets walked several nodes per
/// sample.
pub type IdMap<V> = HashMap<usize, V, BuildHasherDefault<SeqHasher>>;

#[derive(Debug)]
struct Inner<T> {
    pending: SeqMap<oneshot::Sender<T>>,
    finished: History,
    highest: Option<u64>,
    counts: Anomalies,
}

impl<T> Inner<T> {
    fn finish(&mut self, seq: u64, how: Finished) {
        self.finished.finish(seq, how, std::time::Instant::now());
    }

    fn note_order(&mut self, seq: u64) {
        if seq >= WARMUP_SEQ_BASE {
            return;
        }
        match self.highest {
            Some(h) if seq < h => self.counts.reordered += 1,
            _ => self.highest = Some(seq),
        }
    }
}

/// Matches replies of type `T` to waiting probes by sequence number.
#[derive(Debug)]
pub struct Matcher<T> {
    inner: Mutex<Inner<T>>,
}

impl<T> Default for Matcher<T> {
    fn default() -> Self {
        Self {
            inner: Mutex::new(Inner {
                pending: SeqMap::default(),
                finished: History::new(HORIZON),
                highest: None,
                counts: Anomalies::default(),
            }),
        }
    }
}

impl<T: Send + 'static> Matcher<T> {
    /// An empty matcher.
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner<T>> {
        // A panic while holding the lock leaves plain counters behind; keep going.
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Registers `seq` before its request is sent. A second registration of
    /// the same seq replaces the first.
    pub fn register(self: &Arc<Self>, seq: u64) -> Waiter<T> {
        let (tx, rx) = oneshot::channel();
        let mut inner = self.lock();
        inner.finished.forget(seq);
        inner.pending.insert(seq, tx);
        drop(inner);
        Waiter {
            matcher: Arc::clone(self),
            seq,
            rx: Some(rx),
        }
    }

    /// Hands a reply for `seq` to its waiter, or counts it.
    pub fn deliver(&self, seq: u64, value: T) -> Delivery {
        let mut inner = self.lock();
        if let Some(tx) = inner.pending.remove(&seq) {
            inner.note_order(seq);
            inner.finish(seq, Finished::Answered);
            // The waiter cannot be gone: its drop removes it from `pending`
            // under this lock before the receiver is dropped.
            let _ = tx.send(value);
            return Delivery::Matched;
        }
        match inner.finished.get(seq) {
            Some(Finished::Answered) => {
                inner.counts.duplicate += 1;
                Delivery::Duplicate
            }
            Some(Finished::Expired) => {
                inner.note_order(seq);
                inner.counts.late += 1;
                inner.finished.set(seq, Finished::Answered);
                Delivery::Late
            }
            None => {
                inner.counts.unknown += 1;
                Delivery::Unknown
            }
        }
    }

    /// Completes every waiting probe with a value made by `make`, e.g. an
    /// error when the connection under them closed.
    pub fn fail_all(&self, mut make: impl FnMut() -> T) {
        let mut inner = self.lock();
        let pending: Vec<_> = inner.pending.drain().collect();
        for (seq, tx) in pending {
            inner.finish(seq, Finished::Answered);
            let _ = tx.send(make());
        }
    }

    /// Counts a reply that came back altered or failed its checks.
    pub fn count_corrupt(&self) {
        self.lock().counts.corrupt += 1;
    }

    /// Counts a reply for a sequence number this run never sent or forgot.
    pub fn count_unknown(&self) {
        self.lock().counts.unknown += 1;
    }

    /// Counts a spin of adaptive receive: how long, and whether the reply
    /// came within it.
    pub fn count_spin(&self, spun: std::time::Duration, caught: bool) {
        let mut inner = self.lock();
        let c = inner.counts.spin.get_or_insert_default();
        c.probes += 1;
        c.caught += u64::from(caught);
        c.ns += u64::try_from(spun.as_nanos()).unwrap_or(u64::MAX);
    }

    /// Counts a re-established connection.
    pub fn count_reconnect(&self) {
        self.lock().counts.reconnects += 1;
    }

    /// The highest pending seq for which `pred` holds, e.g. to find the
    /// probe an ICMP error quotes by its 16-bit sequence number.
    pub fn newest_pending(&self, pred: impl Fn(u64) -> bool) -> Option<u64> {
        self.lock()
            .pending
            .keys()
            .copied()
            .filter(|s| pred(*s))
            .max()
    }

    /// Number of probes waiting now.
    pub fn pending(&self) -> usize {
        self.lock().pending.len()
    }

    /// The counts so far.
    pub fn anomalies(&self) -> Anomalies {
        self.lock().counts
    }
}

/// A registered probe waiting for its reply. Dropping it before the reply
/// arrives marks the sequence number as expired.
#[derive(Debug)]
pub struct Waiter<T> {
    matcher: Arc<Matcher<T>>,
    seq: u64,
    rx: Option<oneshot::Receiver<T>>,
}

/// The matchers of a probe whose replies come over a series of connections
/// (or streams), one [`Matcher`] per connection: when a connection dies,
/// failing its waiters fails only the probes sent on it, never those already
/// waiting on its replacement. Anomalies are summed over all of them.
#[derive(Debug)]
pub struct MatcherSet<T> {
    inner: Mutex<SetInner<T>>,
}

#[derive(Debug)]
struct SetInner<T> {
    live: Vec<Arc<Matcher<T>>>,
    retired: Anomalies,
}

impl<T> Default for MatcherSet<T> {
    fn default() -> Self {
        Self {
            inner: Mutex::new(SetInner {
                live: Vec::new(),
                retired: Anomalies::default(),
            }),
        }
    }
}

impl<T: Send + 'static> MatcherSet<T> {
    /// An empty set.
    pub fn new() -> Self {
        Self::default()
    }

    /// A fresh matcher for a new connection; with `reconnect`, counts one
    /// reconnect. Matchers nobody else holds any more (their reader ended,
    /// no probe waits on them) are folded into the totals here, so a long
    /// run that reconnects often keeps a short list.
    pub fn next(&self, reconnect: bool) -> Arc<Matcher<T>> {
        let m = Matcher::new();
        let mut inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        let SetInner { live, retired } = &mut *inner;
        live.retain(|old| {
            if Arc::strong_count(old) == 1 {
                *retired += old.anomalies();
                false
            } else {
                true
            }
        });
        if reconnect {
            m.count_reconnect();
        }
        live.push(Arc::clone(&m));
        m
    }

    /// The anomalies of every connection so far, added up.
    pub fn anomalies(&self) -> Anomalies {
        let inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        let mut total = inner.retired;
        for m in &inner.live {
            total += m.anomalies();
        }
        total
    }
}

impl<T> Waiter<T> {
    /// Whether the reply (or an error) is there to take without waiting.
    pub fn is_answered(&self) -> bool {
        self.rx.as_ref().is_some_and(|rx| !rx.is_empty())
    }

    /// Waits for the reply. `None` if the matcher dropped the waiter's slot
    /// without a value (it never does on its own).
    pub async fn recv(&mut self) -> Option<T> {
        let rx = self.rx.as_mut()?;
        let value = rx.await.ok();
        self.rx = None;
        value
    }
}

impl<T> Waiter<Result<T, crate::ProbeError>> {
    /// Waits for the reply or the error the receive side delivered; a slot
    /// dropped without a value is an error too.
    pub async fn reply(&mut self) -> Result<T, crate::ProbeError> {
        self.recv().await.unwrap_or_else(|| {
            Err(crate::ProbeError::new(
                crate::ErrorKind::Other,
                "reply matcher closed",
            ))
        })
    }
}

impl<T> Drop for Waiter<T> {
    fn drop(&mut self) {
        let Some(mut rx) = self.rx.take() else { return };
        let mut inner = self
            .matcher
            .inner
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if inner.pending.remove(&self.seq).is_some() {
            inner.finish(self.seq, Finished::Expired);
        } else if rx.try_recv().is_ok() {
            // The reply was delivered between the timeout firing and this
            // drop: it came too late to count, so it is late.
            inner.counts.late += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn matched_reply_reaches_its_waiter() {
        let m = Matcher::<u32>::new();
        let mut w = m.register(7);
        assert_eq!(m.deliver(7, 42), Delivery::Matched);
        assert_eq!(w.recv().await, Some(42));
        assert_eq!(m.anomalies(), Anomalies::default());
    }

    #[tokio::test]
    async fn second_copy_is_a_duplicate() {
        let m = Matcher::<u32>::new();
        let mut w = m.register(1);
        assert_eq!(m.deliver(1, 1), Delivery::Matched);
        assert_eq!(m.deliver(1, 1), Delivery::Duplicate);
        assert_eq!(w.recv().await, Some(1));
        drop(w);
        assert_eq!(m.anomalies().duplicate, 1);
        assert_eq!(m.anomalies().late, 0);
    }

    #[test]
    fn reply_after_drop_is_late_then_duplicate() {
        let m = Matcher::<u32>::new();
        let w = m.register(3);
        drop(w); // the runner's timeout
        assert_eq!(m.deliver(3, 0), Delivery::Late);
        assert_eq!(m.deliver(3, 0), Delivery::Duplicate);
        let a = m.anomalies();
        assert_eq!((a.late, a.duplicate), (1, 1));
    }

    #[test]
    fn delivered_but_never_read_is_late() {
        let m = Matcher::<u32>::new();
        let w = m.register(5);
        assert_eq!(m.deliver(5, 9), Delivery::Matched);
        drop(w);
        assert_eq!(m.anomalies().late, 1);
    }

    #[test]
    fn counts_reordering_and_unknown() {
        let m = Matcher::<u32>::new();
        let ws: Vec<_> = (0..4).map(|s| m.register(s)).collect();
        for seq in [0, 2, 1, 3] {
            assert_eq!(m.deliver(seq, 0), Delivery::Matched);
        }
        assert_eq!(m.deliver(99, 0), Delivery::Unknown);
        let a = m.anomalies();
        assert_eq!((a.reordered, a.unknown), (1, 1));
        drop(ws);
    }

    #[test]
    fn warmup_does_not_count_as_reordering() {
        let m = Matcher::<u32>::new();
        let w = m.register(WARMUP_SEQ_BASE);
        m.deliver(WARMUP_SEQ_BASE, 0);
        drop(w);
        let w0 = m.register(0);
        assert_eq!(m.deliver(0, 0), Delivery::Matched);
        drop(w0);
        assert_eq!(m.anomalies().reordered, 0);
    }

    #[tokio::test]
    async fn fail_all_completes_every_waiter() {
        let m = Matcher::<Result<(), &'static str>>::new();
        let mut a = m.register(0);
        let mut b = m.register(1);
        m.fail_all(|| Err("closed"));
        assert_eq!(a.recv().await, Some(Err("closed")));
        assert_eq!(b.recv().await, Some(Err("closed")));
        assert_eq!(m.pending(), 0);
        // A reply after the failure is a duplicate, not a late success.
        assert_eq!(m.deliver(0, Ok(())), Delivery::Duplicate);
    }

    #[tokio::test]
    async fn a_set_fails_one_connection_and_adds_up_all() {
        let set = MatcherSet::<Result<(), &'static str>>::new();
        let old = set.next(false);
        let mut a = old.register(0);
        let new = set.next(true);
        let mut b = new.register(1);
        // The old connection ends: only its probe fails.
        old.fail_all(|| Err("closed"));
        assert_eq!(a.recv().await, Some(Err("closed")));
        assert_eq!(old.deliver(0, Ok(())), Delivery::Duplicate);
        assert_eq!(new.deliver(1, Ok(())), Delivery::Matched);
        assert_eq!(b.recv().await, Some(Ok(())));
        drop((a, b, old));
        // The old matcher is folded in once nothing holds it; counts survive.
        let third = set.next(true);
        assert_eq!(third.deliver(7, Ok(())), Delivery::Unknown);
        let total = set.anomalies();
        assert_eq!(
            (total.duplicate, total.unknown, total.reconnects),
            (1, 1, 2)
        );
        assert_eq!(set.inner.lock().unwrap().live.len(), 2);
    }

    /// A finished seq is forgotten once it is older than the horizon, so a
    /// daemon's target at 1 Hz keeps a minute of seqs, not 65,536; seqs
    /// far from the ring (warm-up's) are kept apart, and a late reply is
    /// still told from a duplicate within the horizon.
    #[test]
    fn history_forgets_what_is_older_than_the_horizon() {
        let t0 = std::time::Instant::now();
        let s = std::time::Duration::from_secs;
        let mut h = History::new(s(60));
        for seq in 0..600u64 {
            // One a second for ten minutes, every third expired.
            let how = if seq % 3 == 0 {
                Finished::Expired
            } else {
                Finished::Answered
            };
            h.finish(seq, how, t0 + s(seq));
        }
        assert!(h.states.len() <= 68, "{} seqs kept", h.states.len());
        assert!(h.marks.len() <= 9, "{} marks", h.marks.len());
        assert_eq!(h.get(598), Some(Finished::Answered));
        assert_eq!(h.get(597), Some(Finished::Expired));
        assert_eq!(h.get(100), None, "forgotten");
        // Warm-up's seqs sit apart, as does a seq the ring moved past.
        h.finish(WARMUP_SEQ_BASE + 1, Finished::Expired, t0 + s(600));
        h.finish(3, Finished::Expired, t0 + s(600));
        assert_eq!(h.get(WARMUP_SEQ_BASE + 1), Some(Finished::Expired));
        assert_eq!(h.get(3), Some(Finished::Expired));
        h.set(3, Finished::Answered);
        assert_eq!(h.get(3), Some(Finished::Answered));
        h.forget(598);
        assert_eq!(h.get(598), None);
        // A gap of seqs that never finished stays unknown.
        h.finish(640, Finished::Answered, t0 + s(601));
        assert_eq!((h.get(620), h.get(640)), (None, Some(Finished::Answered)));
    }

    #[test]
    fn history_is_bounded() {
        let m = Matcher::<u32>::new();
        for seq in 0..(HISTORY as u64 + 10) {
            drop(m.register(seq));
        }
        assert_eq!(m.deliver(0, 0), Delivery::Unknown);
        assert_eq!(m.deliver(HISTORY as u64 + 9, 0), Delivery::Late);
    }
}

//! Waiting for a slot's deadline with each [`Pacing`] mode.
//!
//! The tokio timer fires on millisecond ticks, so on its own it sends up to
//! 1-2 ms late. [`Sleeper`] therefore sleeps on tokio only for the coarse
//! part of a wait and finishes on a Linux `timerfd` (a high-resolution timer
//! the runtime polls like a socket), then, for `hybrid`, spins the last
//! microseconds.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::os::fd::{AsFd, AsRawFd, RawFd};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::Waker;
use std::time::Duration;

use nix::sys::time::TimeSpec;
use nix::sys::timerfd::{ClockId, Expiration, TimerFd, TimerFlags, TimerSetTimeFlags};
use tokio::io::unix::AsyncFd;
use tokio::time::Instant;

use crate::Pacing;

/// How long before the deadline the tokio timer hands over to the timerfd.
/// The tokio timer can fire up to about a millisecond after its deadline.
pub const COARSE_MARGIN: Duration = Duration::from_micros(1500);

/// How long before the deadline hybrid pacing stops sleeping and spins, at
/// first and at least: about one wake-up of an idle vCPU. The margin then
/// adapts to how late this machine's sleeps actually wake (see [`Margin`]).
pub const HYBRID_SPIN: Duration = Duration::from_micros(80);

/// The share of each interval hybrid pacing may spend spinning on average,
/// in per mille (15 = 1.5 %). Spinning starts when the sleep wakes, so the
/// margin may exceed this share of the interval by the sleeps' usual
/// lateness. With the timer's own cost (about 3 % of a core at 10 ms on a
/// 2-vCPU VM), hybrid pacing stays under 5 % of a core.
pub const HYBRID_BUDGET_PERMILLE: u32 = 15;

/// The spin margin's ceiling whatever the interval.
pub const HYBRID_MAX_SPIN: Duration = Duration::from_millis(2);

/// Slack added to the observed wake-up lateness.
const HYBRID_SLACK: Duration = Duration::from_micros(20);

/// How many recent wake-ups the hybrid margin is estimated from.
const WAKE_HISTORY: usize = 256;

/// The adaptive spin margin of hybrid pacing.
///
/// A sleep on a VM wakes late by however long the host takes to run the idle
/// vCPU again: 100-300 µs is usual here, with a tail past 1 ms, so a fixed
/// margin is either too short (the deadline passes before the wake-up) or
/// wastes a core. The margin is the second-largest lateness of the last
/// 256 wake-ups (about their 99th percentile) plus a little
/// slack, at least [`HYBRID_SPIN`]. Since a late wake-up spins less, the
/// spin per interval averages the margin minus the mean lateness; the margin
/// is capped so that this stays within [`HYBRID_BUDGET_PERMILLE`] ‰ of the
/// interval (and the margin within [`HYBRID_MAX_SPIN`]), which bounds the
/// CPU it costs.
#[derive(Debug, Clone)]
pub struct Margin {
    wakes: [Duration; WAKE_HISTORY],
    next: usize,
    filled: usize,
    interval: Duration,
}

impl Margin {
    /// A margin for deadlines `interval` apart (the CPU budget is a share of
    /// it), with no wake-ups seen yet.
    pub fn new(interval: Duration) -> Self {
        Self {
            wakes: [Duration::ZERO; WAKE_HISTORY],
            next: 0,
            filled: 0,
            interval,
        }
    }

    /// The margin to use before the next deadline.
    pub fn get(&self) -> Duration {
        let cap = (self.mean() + self.interval * HYBRID_BUDGET_PERMILLE / 1000)
            .min(HYBRID_MAX_SPIN)
            .max(HYBRID_SPIN);
        self.estimate().clamp(HYBRID_SPIN, cap)
    }

    /// Records how late a sleep woke against the time it was asked for.
    pub fn record(&mut self, late: Duration) {
        self.wakes[self.next] = late;
        self.next = (self.next + 1) % WAKE_HISTORY;
        self.filled = (self.filled + 1).min(WAKE_HISTORY);
    }

    fn mean(&self) -> Duration {
        let seen = &self.wakes[..self.filled];
        match seen.len() {
            0 => Duration::ZERO,
            n => seen.iter().sum::<Duration>() / n as u32,
        }
    }

    fn estimate(&self) -> Duration {
        let seen = &self.wakes[..self.filled];
        let (mut first, mut second) = (Duration::ZERO, Duration::ZERO);
        for &w in seen {
            if w > first {
                second = first;
                first = w;
            } else if w > second {
                second = w;
            }
        }
        // With few samples the largest is the best guess there is.
        let top = if seen.len() < 8 { first } else { second };
        top + HYBRID_SLACK
    }
}

struct Tfd(TimerFd);

impl AsRawFd for Tfd {
    fn as_raw_fd(&self) -> RawFd {
        self.0.as_fd().as_raw_fd()
    }
}

/// The soonest a [`SharedTimer`] fires again after its last wake-up was
/// due, so it wakes the thread about 1,333 times a second at most (on
/// average: a wake-up that came late may be followed sooner) however many
/// schedules share it (10,000 targets at 1 Hz are due every 100 µs on
/// average), and each firing sends a batch: each wake-up of an idle vCPU
/// costs CPU, and a shorter gap bought less send lag for more of it
/// (BENCHMARKS.md, "The daemon's pacing at a 10 ms interval"). At most
/// [`SHARED_GRID`], so that a wake-up falls on every grid point that has a
/// deadline while every deadline on the timer is on the grid (one that is
/// not, of a schedule the grid does not fit, may push the next wake-up
/// past a grid point).
pub const SHARED_MIN_GAP: Duration = Duration::from_micros(750);

/// The grid a [`SharedTimer`]'s schedules start on ([`SharedTimer::align`]).
/// The timer wakes the thread at most every [`SHARED_MIN_GAP`], and a
/// deadline that falls between two wake-ups waits for the later one: with
/// deadlines anywhere, that wait was most of the daemon's send lag
/// (BENCHMARKS.md, "Schedules on the shared timer's grid"). Schedules whose
/// slots fall on a grid the wake-ups keep to are sent at their wake-up.
/// A millisecond divides every whole-millisecond interval, and is no
/// shorter than the gap.
pub const SHARED_GRID: Duration = Duration::from_millis(1);

const _: () = assert!(SHARED_MIN_GAP.as_nanos() <= SHARED_GRID.as_nanos());

/// One high-resolution timer (a timerfd) for many schedules: the daemon's
/// thousands of targets finish their waits on it instead of on the tokio
/// timer, which fires on millisecond ticks and so sent every probe about a
/// millisecond late (send lag p50 1.1 ms at 10,000 targets), without a
/// timerfd per target. Waiters are kept in a heap by deadline; one task
/// reads the timerfd, wakes those due and arms it for the next.
#[derive(Clone)]
pub struct SharedTimer(Arc<Shared>);

struct Shared {
    fd: AsyncFd<Tfd>,
    state: Mutex<TimerState>,
    /// What the heap's deadlines count from.
    base: Instant,
}

/// A heap entry: the deadline in ns from `base` above the waiter's id, so
/// one integer compare orders them. 16 bytes where `(Instant, u64)` took
/// 24: at 10,000 targets the heap's pops were 3.6 % of the daemon's CPU,
/// mostly cache misses down its levels. A deadline before `base` counts as
/// `base` (it is past, and fires at once).
fn heap_key(base: Instant, deadline: Instant, id: u64) -> u128 {
    let ns = u64::try_from(deadline.saturating_duration_since(base).as_nanos()).unwrap_or(u64::MAX);
    (u128::from(ns) << 64) | u128::from(id)
}

/// The deadline and id of a [`heap_key`].
fn heap_unkey(base: Instant, key: u128) -> (Instant, u64) {
    #[allow(clippy::cast_possible_truncation)] // the low half, by design
    let id = key as u64;
    let ns = u64::try_from(key >> 64).unwrap_or(u64::MAX);
    (base + Duration::from_nanos(ns), id)
}

#[derive(Default)]
struct TimerState {
    /// Deadlines and waiter ids; a waiter that went away leaves its entry,
    /// skipped when it comes due.
    heap: BinaryHeap<Reverse<u128>>,
    wakers: crate::matcher::SeqMap<Waker>,
    next_id: u64,
    /// When the timerfd fires next, if armed.
    armed: Option<Instant>,
}

impl std::fmt::Debug for SharedTimer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = lock(&self.0.state);
        f.debug_struct("SharedTimer")
            .field("waiting", &state.wakers.len())
            .field("armed", &state.armed)
            .finish()
    }
}

fn lock(state: &Mutex<TimerState>) -> std::sync::MutexGuard<'_, TimerState> {
    state.lock().unwrap_or_else(PoisonError::into_inner)
}

impl SharedTimer {
    /// A timer driven by a task spawned on the current runtime, which lives
    /// as long as the runtime (the daemon makes one).
    ///
    /// # Errors
    /// No timerfd could be made or registered with the runtime.
    ///
    /// # Panics
    /// Outside a tokio runtime.
    pub fn new() -> std::io::Result<Self> {
        let flags = TimerFlags::TFD_NONBLOCK | TimerFlags::TFD_CLOEXEC;
        let tfd = TimerFd::new(ClockId::CLOCK_MONOTONIC, flags)?;
        // See `Sleeper::new` on `AsyncFd::with_interest`.
        #[allow(deprecated)]
        let fd = AsyncFd::with_interest(Tfd(tfd), tokio::io::Interest::READABLE)?;
        let shared = Arc::new(Shared {
            fd,
            state: Mutex::default(),
            base: Instant::now(),
        });
        tokio::spawn(drive(Arc::clone(&shared)));
        Ok(Self(shared))
    }

    /// The first point of the timer's grid ([`SHARED_GRID`], counted from
    /// when the timer was made) at or after `at`: where a schedule that
    /// waits on this timer starts, so that, its interval a multiple of the
    /// grid, each of its slots is due at one of the timer's wake-ups.
    pub fn align(&self, at: Instant) -> Instant {
        let grid = SHARED_GRID.as_nanos();
        let since = at.saturating_duration_since(self.0.base).as_nanos();
        let ns = since.div_ceil(grid).saturating_mul(grid);
        self.0.base + Duration::from_nanos(u64::try_from(ns).unwrap_or(u64::MAX))
    }

    /// Waits until `deadline` (at once if it has passed).
    pub fn sleep_until(&self, deadline: Instant) -> SharedSleep<'_> {
        SharedSleep {
            timer: &self.0,
            deadline,
            id: None,
        }
    }
}

/// Arms `fd` to fire at `at` (relative to now: tokio's `Instant` is
/// CLOCK_MONOTONIC, but has no conversion to a `timespec`).
fn arm(fd: &AsyncFd<Tfd>, at: Instant) -> std::io::Result<()> {
    // A zero expiry would disarm the timer: a deadline now or past fires
    // in a nanosecond.
    let left = at
        .saturating_duration_since(Instant::now())
        .max(Duration::from_nanos(1));
    fd.get_ref()
        .0
        .set(
            Expiration::OneShot(TimeSpec::from_duration(left)),
            TimerSetTimeFlags::empty(),
        )
        .map_err(std::io::Error::from)
}

/// Reads the timerfd, wakes the waiters that are due, arms it for the next.
async fn drive(s: Arc<Shared>) {
    loop {
        let Ok(mut ready) = s.fd.readable().await else {
            // The runtime is shutting down.
            return;
        };
        // Reading the expiry count clears readiness; EAGAIN is a spurious
        // wake-up.
        let spurious = ready
            .try_io(|t| t.get_ref().0.wait().map_err(std::io::Error::from))
            .is_err();
        drop(ready);
        let mut state = lock(&s.state);
        let now = Instant::now();
        // Still armed for later: nothing is due before it (a waiter due
        // sooner arms it sooner), and re-arming from now could move the
        // wake-up off the grid.
        if spurious && state.armed.is_some_and(|a| a > now) {
            continue;
        }
        // The gap counts from when this wake-up was due, not from now: a
        // wake-up that came late, or a batch that took long, must not push
        // the next one off the grid its deadlines are on.
        let fired = state.armed.take().map_or(now, |a| a.min(now));
        while let Some(&Reverse(key)) = state.heap.peek() {
            let (at, id) = heap_unkey(s.base, key);
            if at > now {
                break;
            }
            state.heap.pop();
            if let Some(w) = state.wakers.remove(&id) {
                w.wake();
            }
        }
        if let Some(&Reverse(key)) = state.heap.peek() {
            let at = heap_unkey(s.base, key).0.max(fired + SHARED_MIN_GAP);
            if arm(&s.fd, at).is_ok() {
                state.armed = Some(at);
            } else {
                // Wake them all: each tries to arm the timer again when it
                // is polled (and spins if it still cannot). Their heap
                // entries stay, so a timer armed later still finds them.
                for (_, w) in state.wakers.drain() {
                    w.wake();
                }
            }
        }
    }
}

/// A wait on a [`SharedTimer`].
#[derive(Debug)]
pub struct SharedSleep<'a> {
    timer: &'a Shared,
    deadline: Instant,
    /// Set once the waiter is in the heap.
    id: Option<u64>,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Shared")
    }
}

impl std::future::Future for SharedSleep<'_> {
    type Output = ();

    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<()> {
        if Instant::now() >= self.deadline {
            if let Some(id) = self.id.take() {
                lock(&self.timer.state).wakers.remove(&id);
            }
            return std::task::Poll::Ready(());
        }
        let deadline = self.deadline;
        let mut state = lock(&self.timer.state);
        let id = match self.id {
            Some(id) => id,
            None => {
                let id = state.next_id;
                state.next_id += 1;
                let key = heap_key(self.timer.base, deadline, id);
                state.heap.push(Reverse(key));
                id
            }
        };
        // Polled again on every wake-up of its task (each reply of the
        // target): the waker is cloned only when it changed.
        state
            .wakers
            .entry(id)
            .and_modify(|w| w.clone_from(cx.waker()))
            .or_insert_with(|| cx.waker().clone());
        if state.armed.is_none_or(|a| deadline < a) {
            if arm(&self.timer.fd, deadline).is_err() {
                state.wakers.remove(&id);
                drop(state);
                // No timerfd to wait on: spinning is the one precise wait
                // left, and it must not hang.
                cx.waker().wake_by_ref();
                self.id = None;
                return std::task::Poll::Pending;
            }
            state.armed = Some(deadline);
        }
        drop(state);
        self.id = Some(id);
        std::task::Poll::Pending
    }
}

impl Drop for SharedSleep<'_> {
    fn drop(&mut self) {
        if let Some(id) = self.id.take() {
            lock(&self.timer.state).wakers.remove(&id);
        }
    }
}

/// Waits for deadlines in one pacing mode. Holds one timerfd when precise
/// sleeping is on and available, or finishes its waits on a
/// [`SharedTimer`].
pub struct Sleeper {
    pacing: Pacing,
    timer: Option<AsyncFd<Tfd>>,
    shared: Option<SharedTimer>,
    /// Hybrid pacing's only: 4 KB of history, which for every target of
    /// the daemon (timer pacing) was 40 MB at 10,000 targets.
    margin: Option<Box<Margin>>,
}

impl std::fmt::Debug for Sleeper {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sleeper")
            .field("pacing", &self.pacing)
            .field("precise", &self.timer.is_some())
            .field("margin", &self.margin)
            .finish()
    }
}

/// A wait of a [`Sleeper`]. A wait on the shared timer (a daemon's
/// targets) is held inline; any other is boxed, one allocation a wait. The
/// wait lives in each target's task for all its life, and as an `async fn`
/// holding every kind of wait it was 304 bytes of it (BENCHMARKS.md,
/// "Memory at 10,000 targets, third pass").
pub enum Wait<'a> {
    /// All of it on the shared timer.
    Shared(SharedSleep<'a>),
    /// The tokio timer, a timerfd of its own, a spin, or some of each.
    Other(std::pin::Pin<Box<dyn Future<Output = ()> + Send + 'a>>),
}

impl std::fmt::Debug for Wait<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Shared(_) => "Wait::Shared",
            Self::Other(_) => "Wait::Other",
        })
    }
}

impl Future for Wait<'_> {
    type Output = ();

    fn poll(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<()> {
        match self.get_mut() {
            Self::Shared(s) => std::pin::Pin::new(s).poll(cx),
            Self::Other(f) => f.as_mut().poll(cx),
        }
    }
}

impl Sleeper {
    /// A sleeper for `pacing`, for deadlines `interval` apart. With
    /// `precise`, waits end on a timerfd; without (or if no timerfd can be
    /// made) only the tokio timer is used, which also makes paused-time tests
    /// work.
    pub fn new(pacing: Pacing, precise: bool, interval: Duration) -> Self {
        let timer = (precise && pacing != Pacing::Spin)
            .then(|| {
                let flags = TimerFlags::TFD_NONBLOCK | TimerFlags::TFD_CLOEXEC;
                let tfd = TimerFd::new(ClockId::CLOCK_MONOTONIC, flags).ok()?;
                // `AsyncFd::new` is deprecated for I/O safety: the fd must
                // outlive its registration. `Tfd` owns the timerfd and the
                // AsyncFd deregisters before dropping it, so this use is sound;
                // the replacement, `register`, is `unsafe`, which we forbid.
                #[allow(deprecated)]
                let fd = AsyncFd::with_interest(Tfd(tfd), tokio::io::Interest::READABLE);
                fd.ok()
            })
            .flatten();
        Self {
            pacing,
            timer,
            shared: None,
            margin: (pacing == Pacing::Hybrid).then(|| Box::new(Margin::new(interval))),
        }
    }

    /// Finishes its waits on `shared` when it has no timerfd of its own.
    #[must_use]
    pub fn with_shared(mut self, shared: Option<SharedTimer>) -> Self {
        if self.timer.is_none() && self.pacing != Pacing::Spin {
            self.shared = shared;
        }
        self
    }

    /// Where a schedule of deadlines `interval` apart that would start at
    /// `at` starts: on the shared timer's grid ([`SharedTimer::align`])
    /// where every wait ends on that timer (timer pacing: hybrid's ends a
    /// margin early, spin's not on it at all) and `interval` keeps to the
    /// grid, so each deadline is due at one of its wake-ups; else `at` (an
    /// off-grid deadline would only be delayed).
    pub fn start_at(&self, at: Instant, interval: Duration) -> Instant {
        match &self.shared {
            Some(timer)
                if self.pacing == Pacing::Timer
                    && interval.as_nanos().is_multiple_of(SHARED_GRID.as_nanos()) =>
            {
                timer.align(at)
            }
            _ => at,
        }
    }

    /// Waits until `deadline`. Returns at once if it has passed.
    pub fn wait_until(&mut self, deadline: Instant) -> Wait<'_> {
        if self.pacing == Pacing::Timer && self.timer.is_none() {
            self.wait_plain(deadline)
        } else {
            Wait::Other(Box::pin(self.wait_other(deadline)))
        }
    }

    /// Timer pacing without a timerfd of its own: the shared timer's, or
    /// else tokio's.
    fn wait_plain(&self, deadline: Instant) -> Wait<'_> {
        match &self.shared {
            Some(shared) => Wait::Shared(shared.sleep_until(deadline)),
            None => Wait::Other(Box::pin(tokio::time::sleep_until(deadline))),
        }
    }

    /// [`Sleeper::wait_until`] where the wait is not all on the shared
    /// timer.
    async fn wait_other(&mut self, deadline: Instant) {
        match self.pacing {
            Pacing::Timer => self.sleep_until(deadline).await,
            Pacing::Spin => spin_until(deadline).await,
            Pacing::Hybrid => {
                let margin = self.margin.as_ref().map_or(HYBRID_SPIN, |m| m.get());
                if let Some(early) = deadline.checked_sub(margin)
                    && early > Instant::now()
                {
                    self.sleep_until(early).await;
                    if let Some(m) = &mut self.margin {
                        m.record(Instant::now().saturating_duration_since(early));
                    }
                }
                spin_until(deadline).await;
            }
        }
    }

    async fn sleep_until(&mut self, deadline: Instant) {
        let Some(timer) = &self.timer else {
            // The whole wait on the shared timer: a coarse sleep on the
            // tokio timer first would wake the thread twice per probe.
            return match &self.shared {
                Some(shared) => shared.sleep_until(deadline).await,
                None => tokio::time::sleep_until(deadline).await,
            };
        };
        if let Some(coarse) = deadline.checked_sub(COARSE_MARGIN)
            && coarse > Instant::now()
        {
            tokio::time::sleep_until(coarse).await;
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return;
        }
        let when = Expiration::OneShot(TimeSpec::from_duration(left));
        if timer
            .get_ref()
            .0
            .set(when, TimerSetTimeFlags::empty())
            .is_err()
        {
            return tokio::time::sleep_until(deadline).await;
        }
        loop {
            let Ok(mut ready) = timer.readable().await else {
                return tokio::time::sleep_until(deadline).await;
            };
            // Reading the expiry count re-arms readiness; EAGAIN means a
            // spurious wake-up.
            match ready.try_io(|t| t.get_ref().0.wait().map_err(std::io::Error::from)) {
                Ok(_) => return,
                Err(_would_block) => continue,
            }
        }
    }
}

/// The moment a probe may send: a probe does its preparation (building the
/// request, registering for the reply) first, then passes the gate, then
/// takes its send timestamp and sends.
///
/// With `spin` and `hybrid` pacing the runner starts each probe
/// [`GATE_LEAD`] before its deadline and the gate spins the rest of the way,
/// so the preparation is done before the deadline instead of after it. This
/// matters on a VM: after 10 ms of waiting, the code and data of the send
/// path are out of the caches and TLB, and preparing a probe then takes 10-15
/// µs instead of under 1 µs, all of which was send lag.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Gate(Option<Instant>);

/// How long before its deadline a probe is started when pacing spins
/// (`spin`, `hybrid`): enough for a cold preparation.
pub const GATE_LEAD: Duration = Duration::from_micros(40);

impl Gate {
    /// A gate that is open: send at once.
    pub const fn open() -> Self {
        Self(None)
    }

    /// A gate that opens at `at`, by spinning.
    pub const fn at(at: Instant) -> Self {
        Self(Some(at))
    }

    /// When the gate opens, if it is not open already.
    pub fn deadline(&self) -> Option<Instant> {
        self.0
    }

    /// Waits (spinning) until the gate opens.
    pub async fn pass(self) {
        if let Some(at) = self.0 {
            spin_until(at).await;
        }
    }
}

/// The last stretch of a spin that does not yield to the runtime. A yield
/// costs a trip through the scheduler (an `epoll_wait` call), which alone
/// can overshoot the deadline by several µs.
pub const SPIN_WITHOUT_YIELD: Duration = Duration::from_micros(50);

/// Spinning yields to the runtime on every turn until the last
/// [`SPIN_WITHOUT_YIELD`], so other tasks on the same worker (receivers,
/// other targets) still run; it costs a core while it waits.
async fn spin_until(deadline: Instant) {
    loop {
        let now = Instant::now();
        if now >= deadline {
            return;
        }
        if deadline - now > SPIN_WITHOUT_YIELD {
            tokio::task::yield_now().await;
        } else {
            std::hint::spin_loop();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heap_keys_order_by_deadline_then_id_and_give_both_back() {
        let base = Instant::now();
        let at = |us: u64| base + Duration::from_micros(us);
        let keys = [
            heap_key(base, at(5), 9),
            heap_key(base, at(5), 10),
            heap_key(base, at(7), 1),
            heap_key(base, base, u64::MAX),
        ];
        assert!(keys[3] < keys[0] && keys[0] < keys[1] && keys[1] < keys[2]);
        assert_eq!(heap_unkey(base, keys[1]), (at(5), 10));
        assert_eq!(heap_unkey(base, keys[3]), (base, u64::MAX));
        // A deadline already past when it was keyed comes back as `base`.
        let later = at(3);
        assert_eq!(heap_unkey(later, heap_key(later, base, 4)), (later, 4));
        // Years ahead: exact to the nanosecond.
        let far = base + Duration::from_secs(86_400 * 365 * 100) + Duration::from_nanos(1);
        assert_eq!(heap_unkey(base, heap_key(base, far, 1)), (far, 1));
    }

    #[tokio::test]
    async fn every_mode_returns_at_or_after_the_deadline() {
        for precise in [false, true] {
            for pacing in [Pacing::Timer, Pacing::Spin, Pacing::Hybrid] {
                let mut s = Sleeper::new(pacing, precise, Duration::from_millis(1));
                for ms in [0, 1, 3] {
                    let deadline = Instant::now() + Duration::from_millis(ms);
                    s.wait_until(deadline).await;
                    assert!(Instant::now() >= deadline, "{pacing} returned early");
                }
            }
        }
    }

    #[test]
    fn hybrid_margin_follows_the_wake_ups_within_its_budget() {
        let ms = Duration::from_millis;
        let us = Duration::from_micros;
        let mut m = Margin::new(ms(10));
        // Nothing known yet: the floor.
        assert_eq!(m.get(), HYBRID_SPIN);
        // Wake-ups 200 µs late at 10 ms: 200 + 20 µs, within the cap of
        // 200 µs (mean lateness) + 1.5 % of 10 ms.
        for _ in 0..WAKE_HISTORY {
            m.record(us(200));
        }
        assert_eq!(m.get(), us(220));
        // One outlier is ignored (second largest), two are not.
        m.record(us(264));
        assert_eq!(m.get(), us(220));
        m.record(us(300));
        assert_eq!(m.get(), us(284));
        // The budget caps it: the mean lateness of the wake-ups (all but
        // four at 200 µs, 264 µs, 300 µs, two at 3 ms) plus 1.5 % of 10 ms.
        m.record(ms(3));
        m.record(ms(3));
        let n = WAKE_HISTORY as u32;
        let mean = (us(200) * (n - 4) + us(264) + us(300) + ms(3) * 2) / n;
        assert_eq!(m.get(), mean + us(150));
        // At 1 s the cap is HYBRID_MAX_SPIN, not 15 ms.
        let mut slow = Margin::new(ms(1000));
        for _ in 0..WAKE_HISTORY {
            slow.record(ms(30));
        }
        assert_eq!(slow.get(), HYBRID_MAX_SPIN);
        // Old outliers age out of the history.
        for _ in 0..WAKE_HISTORY {
            slow.record(Duration::ZERO);
        }
        assert_eq!(slow.get(), HYBRID_SPIN);
        // A short interval never gets less than the floor.
        let mut fast = Margin::new(ms(1));
        for _ in 0..WAKE_HISTORY {
            fast.record(Duration::ZERO);
        }
        assert_eq!(fast.get(), HYBRID_SPIN);
    }

    #[tokio::test(start_paused = true)]
    async fn timer_wakes_at_the_deadline_in_paused_time() {
        let start = Instant::now();
        Sleeper::new(Pacing::Timer, false, Duration::from_millis(10))
            .wait_until(start + Duration::from_millis(10))
            .await;
        assert_eq!(Instant::now() - start, Duration::from_millis(10));
    }

    #[tokio::test]
    async fn a_shared_timer_wakes_every_waiter_at_or_after_its_deadline() {
        let timer = SharedTimer::new().unwrap();
        let start = Instant::now();
        // Deadlines out of order, some equal, some already past, some
        // nearer than the minimum gap between firings.
        let offsets_us = [900, 100, 100, 0, 2500, 130, 40, 1700, 5, 3000];
        let waits = offsets_us.iter().map(|&us| {
            let timer = timer.clone();
            async move {
                let deadline = start + Duration::from_micros(us);
                timer.sleep_until(deadline).await;
                (deadline, Instant::now())
            }
        });
        let done = tokio::time::timeout(
            Duration::from_secs(5),
            futures_util::future::join_all(waits),
        )
        .await
        .expect("a waiter was never woken");
        for (deadline, woke) in done {
            assert!(woke >= deadline, "woke {:?} early", deadline - woke);
        }
        // Nothing is left waiting, nor armed for a waiter that went away.
        let (pending, woke) = {
            let timer = timer.clone();
            let gone = timer.sleep_until(Instant::now() + Duration::from_secs(60));
            let mut gone = std::pin::pin!(gone);
            // Polled once (registered), then dropped.
            let first = std::future::poll_fn(|cx| {
                std::task::Poll::Ready(std::future::Future::poll(gone.as_mut(), cx))
            })
            .await;
            assert!(first.is_pending());
            let deadline = Instant::now() + Duration::from_millis(2);
            timer.sleep_until(deadline).await;
            (
                lock(&timer.0.state).wakers.len(),
                Instant::now() >= deadline,
            )
        };
        assert!(woke);
        assert_eq!(
            pending, 1,
            "the dropped wait is still registered while alive"
        );
        assert_eq!(lock(&timer.0.state).wakers.len(), 0);
    }

    #[tokio::test]
    async fn align_rounds_up_to_the_grid_from_the_timers_start() {
        let timer = SharedTimer::new().unwrap();
        let base = timer.0.base;
        let grid = SHARED_GRID;
        assert_eq!(timer.align(base), base);
        assert_eq!(timer.align(base + grid), base + grid);
        assert_eq!(timer.align(base + Duration::from_nanos(1)), base + grid);
        assert_eq!(
            timer.align(base + grid * 7 - Duration::from_nanos(1)),
            base + grid * 7
        );
        // Before the timer was made: its start, which is past.
        if let Some(before) = base.checked_sub(Duration::from_millis(5)) {
            assert_eq!(timer.align(before), base);
        }
    }

    #[tokio::test]
    async fn sleepers_finish_on_the_shared_timer_unless_they_spin() {
        let timer = SharedTimer::new().unwrap();
        let ms = Duration::from_millis(1);
        for (pacing, shared) in [
            (Pacing::Timer, true),
            (Pacing::Hybrid, true),
            (Pacing::Spin, false),
        ] {
            let mut s = Sleeper::new(pacing, false, ms).with_shared(Some(timer.clone()));
            assert_eq!(s.shared.is_some(), shared, "{pacing}");
            for wait in [0, 1, 3] {
                let deadline = Instant::now() + Duration::from_millis(wait);
                s.wait_until(deadline).await;
                assert!(Instant::now() >= deadline, "{pacing} returned early");
            }
        }
        // A sleeper with a timerfd of its own keeps it.
        let own = Sleeper::new(Pacing::Timer, true, ms).with_shared(Some(timer));
        assert!(own.timer.is_some() && own.shared.is_none());
    }

    #[tokio::test]
    async fn precise_sleeper_has_a_timerfd() {
        let ms = Duration::from_millis(1);
        assert!(Sleeper::new(Pacing::Timer, true, ms).timer.is_some());
        assert!(Sleeper::new(Pacing::Spin, true, ms).timer.is_none());
        assert!(Sleeper::new(Pacing::Timer, false, ms).timer.is_none());
    }
}

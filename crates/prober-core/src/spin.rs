//! Adaptive receive (`--receive adaptive`): after a send, a probe polls its
//! socket without blocking until the reply is there or a spin budget runs
//! out, then parks in epoll as usual. A parked receive costs a wake-up of
//! an idle CPU (`rx_wake`, 30-40 µs of a 70 µs loopback round trip on a
//! VM); spinning costs CPU only for about as long as the reply takes.
//!
//! The budget adapts to the target ([`SpinBudget`]): about the recent p90
//! of its RTT, capped; nothing at all for a target whose replies take
//! longer than the cap. And every spin of the process draws from one
//! [`SpinPool`], a token bucket of CPU time, so when many targets are due
//! at once the budgets shrink instead of the process burning cores.
//!
//! Everything here takes the time as an argument: no clock, no sockets.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

/// The spin budget's ceiling unless `--spin-budget` says otherwise.
pub const DEFAULT_SPIN_BUDGET: Duration = Duration::from_micros(100);

/// The longest spin budget that may be set: a spin holds its thread.
pub const MAX_SPIN_BUDGET: Duration = Duration::from_millis(100);

/// `budget` if it may be a spin budget: above zero, at most
/// [`MAX_SPIN_BUDGET`] (`--spin-budget` and the daemon's `spin_budget`).
///
/// # Errors
/// Why not, for a person.
pub fn check_budget(budget: Duration) -> Result<Duration, String> {
    if budget.is_zero() {
        Err("must be greater than zero".to_owned())
    } else if budget > MAX_SPIN_BUDGET {
        Err(format!(
            "{budget:?} is more than 100ms (a spin holds its thread for at most 100ms)"
        ))
    } else {
        Ok(budget)
    }
}

/// A share of one CPU for all spins together (`--spin-share`, the daemon's
/// `cpu_share`) as whole per mille, at least one.
///
/// # Errors
/// The share is not above 0 and at most 1, for a person.
pub fn check_share(share: f64) -> Result<u32, String> {
    if share > 0.0 && share <= 1.0 {
        Ok(((share * 1000.0).round() as u32).max(1))
    } else {
        Err(format!("{share} is not above 0 and at most 1 (one core)"))
    }
}

/// How far the pool may run ahead: spin time saved up while idle.
const POOL_DEPTH: Duration = Duration::from_millis(5);

/// How many recent RTTs a target's budget is estimated from.
const HISTORY: usize = 32;

/// How a probe receives its replies.
#[derive(Debug, Clone, Default)]
pub enum Receive {
    /// Parks in epoll (tokio) until the reply wakes it.
    #[default]
    Event,
    /// Polls without blocking for up to a budget after each send, then
    /// parks.
    Adaptive(Arc<SpinPool>),
}

impl Receive {
    /// The settings' name of the mode: `async` or `adaptive`.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Event => "async",
            Self::Adaptive(_) => "adaptive",
        }
    }

    /// A target's budget in this mode, `None` for [`Receive::Event`].
    pub fn budget(&self) -> Option<SpinBudget> {
        match self {
            Self::Event => None,
            Self::Adaptive(pool) => Some(SpinBudget::new(Arc::clone(pool))),
        }
    }
}

/// Two modes are the same if they are the same kind with the same
/// settings (a reload compares configs).
impl PartialEq for Receive {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (Self::Event, Self::Event) => true,
            (Self::Adaptive(a), Self::Adaptive(b)) => (a.cap, a.permille) == (b.cap, b.permille),
            _ => false,
        }
    }
}

/// The CPU time every spin of a process draws from: refilled at `permille`
/// of one core, at most 5 ms ahead.
#[derive(Debug)]
pub struct SpinPool {
    /// Each target's ceiling.
    cap: Duration,
    permille: u32,
    state: Mutex<PoolState>,
}

#[derive(Debug)]
struct PoolState {
    /// Spin time available, ns (negative: overdrawn by spins that ran
    /// past their grant).
    tokens: i64,
    refilled: Option<Instant>,
}

impl SpinPool {
    /// A pool that grants each spin at most `cap` and all of them together
    /// `permille` of one CPU.
    pub fn new(cap: Duration, permille: u32) -> Arc<Self> {
        Arc::new(Self {
            cap,
            permille,
            state: Mutex::new(PoolState {
                tokens: ns(POOL_DEPTH),
                refilled: None,
            }),
        })
    }

    /// Each target's ceiling.
    pub fn cap(&self) -> Duration {
        self.cap
    }

    /// Takes up to `want` of spin time at `now`: what is granted.
    pub fn take(&self, want: Duration, now: Instant) -> Duration {
        let mut s = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(last) = s.refilled {
            let add = ns(now.saturating_duration_since(last)) * i64::from(self.permille) / 1000;
            s.tokens = (s.tokens + add).min(ns(POOL_DEPTH));
        }
        s.refilled = Some(now);
        let grant = s.tokens.clamp(0, ns(want));
        s.tokens -= grant;
        Duration::from_nanos(grant.unsigned_abs())
    }

    /// Gives back the part of a grant a spin did not use (`used` may exceed
    /// `granted` by the last poll: that is charged).
    pub fn give_back(&self, granted: Duration, used: Duration) {
        let mut s = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        s.tokens = (s.tokens + ns(granted) - ns(used)).min(ns(POOL_DEPTH));
    }
}

fn ns(d: Duration) -> i64 {
    i64::try_from(d.as_nanos()).unwrap_or(i64::MAX)
}

/// One target's spin budget: the recent p90 of its RTT plus a quarter,
/// within the pool's cap; the cap while nothing is known; nothing when
/// even its fastest recent replies (p10) take longer than the cap, since
/// a spin would then always run out.
#[derive(Debug)]
pub struct SpinBudget {
    pool: Arc<SpinPool>,
    recent: Mutex<Recent>,
}

#[derive(Debug, Default)]
struct Recent {
    rtts: [Duration; HISTORY],
    next: usize,
    filled: usize,
    /// [`SpinBudget::wanted`] of these RTTs, once worked out: a send asks
    /// for it and an answer changes it, so it is worked out at most once
    /// per answer, on the stack. A copy into a new `Vec` and a sort on
    /// every send were 4 % of the daemon's profile at 10,000 targets; this
    /// way the daemon's CPU moved by less than paired runs resolve
    /// (BENCHMARKS.md).
    wanted: Option<Duration>,
}

impl Recent {
    /// The p90 of the RTTs plus a quarter, within `cap`; the cap with none
    /// known; zero if the p10 is above the cap.
    fn wanted(&self, cap: Duration) -> Duration {
        if self.filled == 0 {
            return cap;
        }
        // On the stack, selected in place: no allocation, no full sort.
        let mut seen = self.rtts;
        let seen = &mut seen[..self.filled];
        let rank = |q: usize| (seen.len() - 1) * q / 100;
        let (p90_rank, p10_rank) = (rank(90), rank(10));
        let (below, &mut p90, _) = seen.select_nth_unstable(p90_rank);
        let p10 = if p10_rank == p90_rank {
            p90
        } else {
            *below.select_nth_unstable(p10_rank).1
        };
        if p10 > cap {
            return Duration::ZERO;
        }
        (p90 + p90 / 4).min(cap)
    }
}

impl SpinBudget {
    /// A budget with no history, drawing from `pool`.
    pub fn new(pool: Arc<SpinPool>) -> Self {
        Self {
            pool,
            recent: Mutex::default(),
        }
    }

    /// What this target would spin with nothing else spinning.
    pub fn wanted(&self) -> Duration {
        let mut r = self.recent.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(w) = r.wanted {
            return w;
        }
        let w = r.wanted(self.pool.cap);
        r.wanted = Some(w);
        w
    }

    /// The spin to do after a send at `now`: [`Self::wanted`], as far as
    /// the pool grants it. Hand it back with [`Self::spun`].
    pub fn start(&self, now: Instant) -> Duration {
        match self.wanted() {
            Duration::ZERO => Duration::ZERO,
            want => self.pool.take(want, now),
        }
    }

    /// A spin of `granted` ended after `used`.
    pub fn spun(&self, granted: Duration, used: Duration) {
        self.pool.give_back(granted, used);
    }

    /// Spins after a send: calls `poll` (one non-blocking look at the
    /// socket, true once the reply is there) until it says so or the
    /// granted budget runs out, and gives back what was not used. `None`
    /// if nothing was granted (no spin); else the time spun and whether
    /// `poll` saw the reply.
    pub fn spin(&self, mut poll: impl FnMut() -> bool) -> Option<(Duration, bool)> {
        let start = Instant::now();
        let granted = self.start(start);
        if granted.is_zero() {
            return None;
        }
        let caught = loop {
            if poll() {
                break true;
            }
            if start.elapsed() >= granted {
                break false;
            }
            std::hint::spin_loop();
        };
        let used = start.elapsed();
        self.spun(granted, used);
        Some((used, caught))
    }

    /// An answered probe's RTT, however it was received.
    pub fn record(&self, rtt: Duration) {
        let mut r = self.recent.lock().unwrap_or_else(PoisonError::into_inner);
        let i = r.next;
        r.rtts[i] = rtt;
        r.next = (i + 1) % HISTORY;
        r.filled = (r.filled + 1).min(HISTORY);
        r.wanted = None;
    }
}

/// Spin time a target's probes used: the summary's and Prometheus's view
/// of what adaptive receive costs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct SpinCount {
    /// Probes that spun.
    pub probes: u64,
    /// Of those, how many had their reply within the spin.
    pub caught: u64,
    /// Spin time in all, ns.
    pub ns: u64,
}

impl std::ops::AddAssign for SpinCount {
    fn add_assign(&mut self, o: Self) {
        self.probes += o.probes;
        self.caught += o.caught;
        self.ns += o.ns;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const US: Duration = Duration::from_micros(1);

    #[test]
    fn the_selected_quantiles_are_the_sorted_ones() {
        // Every fill level, RTTs in a scrambled order with repeats.
        let mut x = 12_345u64;
        for filled in 1..=HISTORY {
            let mut r = Recent::default();
            for i in 0..filled {
                x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
                r.rtts[i] = Duration::from_nanos(x >> 54);
            }
            r.filled = filled;
            let mut sorted = r.rtts[..filled].to_vec();
            sorted.sort_unstable();
            let at = |q: usize| sorted[(filled - 1) * q / 100];
            for cap in [US / 2, 300 * Duration::from_nanos(1), 100 * US] {
                let want = if at(10) > cap {
                    Duration::ZERO
                } else {
                    (at(90) + at(90) / 4).min(cap)
                };
                assert_eq!(r.wanted(cap), want, "{filled} RTTs, cap {cap:?}");
            }
        }
    }

    #[test]
    fn the_budget_follows_the_rtt_within_the_cap() {
        let pool = SpinPool::new(100 * US, 1000);
        let b = SpinBudget::new(Arc::clone(&pool));
        // Nothing known: the cap.
        assert_eq!(b.wanted(), 100 * US);
        // RTTs of 20-40 µs: p90 plus a quarter.
        for i in 0..HISTORY as u32 {
            b.record((20 + i % 21) * US);
        }
        let p90 = {
            let mut v: Vec<_> = (0..HISTORY as u32).map(|i| (20 + i % 21) * US).collect();
            v.sort();
            v[(HISTORY - 1) * 90 / 100]
        };
        assert_eq!(b.wanted(), p90 + p90 / 4);
        assert!(b.wanted() < 100 * US);
        // Slower replies, some within the cap: the cap.
        for i in 0..HISTORY as u32 {
            b.record((50 + i * 5) * US);
        }
        assert_eq!(b.wanted(), 100 * US);
        // Replies all slower than the cap (a remote target): no spin.
        for _ in 0..HISTORY {
            b.record(2_000 * US);
        }
        assert_eq!(b.wanted(), Duration::ZERO);
        assert_eq!(b.start(Instant::now()), Duration::ZERO);
        // It comes back when the target does.
        for _ in 0..HISTORY {
            b.record(10 * US);
        }
        assert_eq!(b.wanted(), 12 * US + US / 2);
    }

    #[test]
    fn the_pool_shrinks_budgets_when_many_spin_at_once() {
        // A tenth of a core: 100 µs of spin per ms, 5 ms saved up at most.
        let pool = SpinPool::new(100 * US, 100);
        let t0 = Instant::now();
        // 5 ms saved up: fifty full grants, then nothing.
        let mut granted = Duration::ZERO;
        for _ in 0..60 {
            let g = pool.take(100 * US, t0);
            pool.spun_all(g);
            granted += g;
        }
        assert_eq!(granted, POOL_DEPTH);
        assert_eq!(pool.take(100 * US, t0), Duration::ZERO);
        // 1 ms later, a tenth of it is back.
        assert_eq!(pool.take(200 * US, t0 + 1000 * US), 100 * US);
        // A spin that ends early gives the rest back.
        let t1 = t0 + 3000 * US;
        let g = pool.take(100 * US, t1);
        assert_eq!(g, 100 * US);
        pool.give_back(g, 30 * US);
        assert_eq!(pool.take(200 * US, t1), 170 * US);
        // Idle for a long time: no more than the depth saved up.
        let later = t1 + Duration::from_secs(10);
        assert_eq!(pool.take(Duration::from_secs(1), later), POOL_DEPTH);
    }

    #[test]
    fn a_dead_target_costs_at_most_one_budget_per_probe() {
        // Plenty of pool: only the target's own budget limits it.
        let pool = SpinPool::new(100 * US, 1000);
        let b = SpinBudget::new(Arc::clone(&pool));
        let t0 = Instant::now();
        // A target that never answers records no RTT: each probe spins
        // for at most the cap, and gives back what it did not use.
        let mut total = Duration::ZERO;
        for i in 0..100u32 {
            let now = t0 + i * Duration::from_millis(10);
            let g = b.start(now);
            assert!(g <= 100 * US, "probe {i} granted {g:?}");
            b.spun(g, g);
            total += g;
        }
        assert!(total <= 100 * 100 * US);
    }

    #[test]
    fn a_spin_ends_when_the_reply_is_seen_or_the_budget_is_spent() {
        let b = SpinBudget::new(SpinPool::new(50 * US, 1000));
        let mut looks = 0;
        let (_, caught) = b
            .spin(|| {
                looks += 1;
                looks == 3
            })
            .expect("granted");
        assert!(caught);
        assert_eq!(looks, 3);
        let (used, caught) = b.spin(|| false).expect("granted");
        assert!(!caught && used >= 50 * US, "{used:?}");
        // A target slower than the cap: no spin, and `poll` is not called.
        for _ in 0..HISTORY {
            b.record(Duration::from_millis(2));
        }
        assert_eq!(b.spin(|| unreachable!("no spin without a budget")), None);
    }

    impl SpinPool {
        fn spun_all(&self, g: Duration) {
            self.give_back(g, g);
        }
    }
}

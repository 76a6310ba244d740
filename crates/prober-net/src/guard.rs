//! Limits that make a responder safe on a public address: a per-source
//! token bucket for replies, caps on connections (in all and per source),
//! a budget of bytes buffered for requests not yet complete, and log lines
//! that a flood cannot multiply. docs/security.md lists them with their
//! defaults.
//!
//! Loopback sources are exempt from the per-source limits unless a limit
//! was given explicitly, so back-to-back benchmarks on one machine are not
//! throttled by default.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub use prober_core::logs::LogLimiter;

/// Replies per second per source address by default (not for loopback).
pub const DEFAULT_RATE: u32 = 10_000;
/// Connections open at once by default.
pub const DEFAULT_MAX_CONNS: usize = 10_000;
/// Connections open at once per source address by default (not for
/// loopback).
pub const DEFAULT_MAX_CONNS_PER_SOURCE: usize = 256;
/// How long a connection may take to send its first whole request, or to
/// finish one it started, by default.
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a connection may stay silent between requests by default.
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(300);
/// Bytes of unfinished requests held for all connections together by
/// default.
pub const DEFAULT_MAX_BUFFERED: usize = 64 << 20;
/// HTTP/2 (gRPC, h2c, HTTPS): streams a client may have open at once on one
/// connection.
pub const H2_MAX_CONCURRENT_STREAMS: u32 = 100;
/// HTTP/2: the largest header list a client may send (bytes, as HTTP/2
/// counts them).
pub const H2_MAX_HEADER_LIST: u32 = 16 * 1024;
/// HTTP/2: streams a client may open and reset before the server has seen
/// them (CVE-2023-44487, rapid reset); past it the connection is closed.
pub const H2_MAX_PENDING_RESETS: usize = 20;
/// Source addresses a rate limiter remembers at most; past that, buckets
/// idle for a second are forgotten first.
const MAX_BUCKETS: usize = 65_536;

/// A per-source limit: the default (other sources only), none, or one
/// given explicitly (every source, loopback too).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PerSource<T> {
    /// The built-in default, not applied to loopback sources.
    #[default]
    Default,
    /// No limit.
    Off,
    /// This limit, for every source.
    Given(T),
}

impl<T: Copy> PerSource<T> {
    /// From an option's value, where 0 means no limit.
    pub fn from_option(v: Option<T>) -> Self
    where
        T: PartialEq + Default,
    {
        match v {
            None => Self::Default,
            Some(v) if v == T::default() => Self::Off,
            Some(v) => Self::Given(v),
        }
    }

    /// The limit that applies to `ip`, where `default` is the built-in one.
    pub fn for_source(self, ip: IpAddr, default: T) -> Option<T> {
        match self {
            Self::Default if is_loopback(ip) => None,
            Self::Default => Some(default),
            Self::Off => None,
            Self::Given(v) => Some(v),
        }
    }
}

/// True for 127.0.0.0/8, ::1 and IPv4-mapped loopback.
pub fn is_loopback(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => v4.is_loopback(),
        IpAddr::V6(v6) => {
            v6.is_loopback() || v6.to_ipv4_mapped().is_some_and(|v4| v4.is_loopback())
        }
    }
}

/// The limits of one responder.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Replies per second per source (a token bucket with as many as burst).
    pub rate: PerSource<u32>,
    /// Connections open at once, in all (0: no limit).
    pub max_conns: usize,
    /// Connections open at once per source.
    pub max_conns_per_source: PerSource<usize>,
    /// Time to the first whole request, and to finish one once started.
    pub request_timeout: Duration,
    /// Silence allowed between requests.
    pub idle_timeout: Duration,
    /// Bytes of unfinished requests held for all connections together.
    pub max_buffered: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            rate: PerSource::Default,
            max_conns: DEFAULT_MAX_CONNS,
            max_conns_per_source: PerSource::Default,
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
            idle_timeout: DEFAULT_IDLE_TIMEOUT,
            max_buffered: DEFAULT_MAX_BUFFERED,
        }
    }
}

/// What a responder refused, by reason; exported as counters.
#[derive(Debug, Default)]
pub struct GuardStats {
    /// Replies not sent because the source was over its rate.
    pub rate_limited: AtomicU64,
    /// Connections closed at accept: over the total cap.
    pub conns_over_total: AtomicU64,
    /// Connections closed at accept: over the per-source cap.
    pub conns_over_source: AtomicU64,
    /// Connections closed because a request did not come or complete in
    /// time.
    pub request_timeouts: AtomicU64,
    /// Connections closed after being idle too long.
    pub idle_timeouts: AtomicU64,
    /// Connections closed because the buffer budget was spent.
    pub over_buffer: AtomicU64,
}

impl GuardStats {
    /// `(reason, count)` for every counter, zeros included.
    pub fn by_reason(&self) -> [(&'static str, u64); 6] {
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        [
            ("rate_limited", get(&self.rate_limited)),
            ("conns_over_total", get(&self.conns_over_total)),
            ("conns_over_source", get(&self.conns_over_source)),
            ("request_timeout", get(&self.request_timeouts)),
            ("idle_timeout", get(&self.idle_timeouts)),
            ("over_buffer", get(&self.over_buffer)),
        ]
    }
}

/// A token bucket per source address: `rate` tokens a second, at most
/// `rate` banked (one second's burst).
#[derive(Debug, Default)]
pub struct RateLimiter {
    buckets: HashMap<IpAddr, (f64, Instant)>,
}

impl RateLimiter {
    /// Takes a token for `ip` at `now` if `rate` (per second) allows one;
    /// `None` allows everything.
    pub fn allow(&mut self, ip: IpAddr, rate: Option<u32>, now: Instant) -> bool {
        let Some(rate) = rate.filter(|&r| r > 0).map(f64::from) else {
            return true;
        };
        if self.buckets.len() >= MAX_BUCKETS && !self.buckets.contains_key(&ip) {
            self.buckets
                .retain(|_, b| now.duration_since(b.1) < Duration::from_secs(1));
        }
        let (tokens, at) = self.buckets.entry(ip).or_insert((rate, now));
        *tokens = (*tokens + now.duration_since(*at).as_secs_f64() * rate).min(rate);
        *at = now;
        if *tokens >= 1.0 {
            *tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

/// Admits connections within [`Limits::max_conns`] and
/// [`Limits::max_conns_per_source`], and keeps the byte budget.
#[derive(Debug)]
pub struct Gate {
    limits: Limits,
    open: AtomicUsize,
    per_source: Mutex<HashMap<IpAddr, usize>>,
    buffered: AtomicUsize,
    /// The refusals' log line, once a minute at most.
    logs: LogLimiter,
    /// What was refused.
    pub stats: Arc<GuardStats>,
}

/// A connection's place at a [`Gate`], given back on drop.
#[derive(Debug)]
pub struct Permit {
    gate: Arc<Gate>,
    ip: IpAddr,
    counted: bool,
}

impl Gate {
    /// A gate for these limits that counts what it refuses in `stats`.
    pub fn new(limits: Limits, stats: Arc<GuardStats>) -> Arc<Self> {
        Arc::new(Self {
            limits,
            open: AtomicUsize::new(0),
            per_source: Mutex::new(HashMap::new()),
            buffered: AtomicUsize::new(0),
            logs: LogLimiter::default(),
            stats,
        })
    }

    /// The limits.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// A place for a connection from `ip`, or `None` (counted) when a cap
    /// is reached.
    pub fn admit(self: &Arc<Self>, ip: IpAddr) -> Option<Permit> {
        let max = self.limits.max_conns;
        if self.open.fetch_add(1, Ordering::AcqRel) >= max && max > 0 {
            self.open.fetch_sub(1, Ordering::AcqRel);
            self.stats.conns_over_total.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        let cap = self
            .limits
            .max_conns_per_source
            .for_source(ip, DEFAULT_MAX_CONNS_PER_SOURCE);
        let mut counted = false;
        if let Some(cap) = cap {
            let mut map = self.per_source.lock().expect("gate lock never poisoned");
            let n = map.entry(ip).or_insert(0);
            if *n >= cap {
                drop(map);
                self.open.fetch_sub(1, Ordering::AcqRel);
                self.stats.conns_over_source.fetch_add(1, Ordering::Relaxed);
                return None;
            }
            *n += 1;
            counted = true;
        }
        Some(Permit {
            gate: Arc::clone(self),
            ip,
            counted,
        })
    }

    /// [`Gate::admit`] for a `what` connection (`tcp`, `grpc`, `http`) from
    /// `peer`, with a warning when a cap refuses it: the first, then at
    /// most one a minute, saying how many were held back.
    pub fn admit_or_warn(
        self: &Arc<Self>,
        peer: std::net::SocketAddr,
        what: &'static str,
    ) -> Option<Permit> {
        let permit = self.admit(peer.ip());
        if permit.is_none()
            && let Some(held) = self.logs.check(what, Instant::now())
        {
            tracing::warn!(%peer, open = self.open(), held_back = held, "{what} connection refused: connection limit reached");
        }
        permit
    }

    /// Takes `n` bytes of the buffer budget; false (counted) when it is
    /// spent. Give them back with [`Gate::release`].
    pub fn reserve(&self, n: usize) -> bool {
        let before = self.buffered.fetch_add(n, Ordering::AcqRel);
        if before + n > self.limits.max_buffered {
            self.buffered.fetch_sub(n, Ordering::AcqRel);
            self.stats.over_buffer.fetch_add(1, Ordering::Relaxed);
            return false;
        }
        true
    }

    /// Gives back `n` bytes taken with [`Gate::reserve`].
    pub fn release(&self, n: usize) {
        self.buffered.fetch_sub(n, Ordering::AcqRel);
    }

    /// Connections open now.
    pub fn open(&self) -> usize {
        self.open.load(Ordering::Acquire)
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        self.gate.open.fetch_sub(1, Ordering::AcqRel);
        if self.counted {
            let mut map = self
                .gate
                .per_source
                .lock()
                .expect("gate lock never poisoned");
            if let Some(n) = map.get_mut(&self.ip) {
                *n -= 1;
                if *n == 0 {
                    map.remove(&self.ip);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LO: IpAddr = IpAddr::V4(std::net::Ipv4Addr::LOCALHOST);
    const OTHER: IpAddr = IpAddr::V4(std::net::Ipv4Addr::new(192, 0, 2, 1));

    #[test]
    fn loopback_is_exempt_only_from_the_default() {
        assert_eq!(PerSource::<u32>::Default.for_source(LO, 5), None);
        assert_eq!(PerSource::<u32>::Default.for_source(OTHER, 5), Some(5));
        assert_eq!(PerSource::Given(7).for_source(LO, 5), Some(7));
        assert_eq!(PerSource::<u32>::Off.for_source(OTHER, 5), None);
        assert_eq!(PerSource::from_option(Some(0u32)), PerSource::Off);
        assert!(is_loopback("::ffff:127.0.0.2".parse().unwrap()));
    }

    #[test]
    fn a_bucket_allows_its_rate_and_refills() {
        let mut r = RateLimiter::default();
        let t0 = Instant::now();
        let allowed = (0..50).filter(|_| r.allow(OTHER, Some(10), t0)).count();
        assert_eq!(allowed, 10);
        assert!(!r.allow(OTHER, Some(10), t0));
        assert!(r.allow(OTHER, Some(10), t0 + Duration::from_millis(100)));
        assert!(r.allow(LO, None, t0));
    }

    #[test]
    fn the_gate_caps_connections_and_gives_places_back() {
        let gate = Gate::new(
            Limits {
                max_conns: 3,
                max_conns_per_source: PerSource::Given(2),
                ..Limits::default()
            },
            Arc::default(),
        );
        let a = gate.admit(OTHER).unwrap();
        let _b = gate.admit(OTHER).unwrap();
        assert!(gate.admit(OTHER).is_none(), "third from one source");
        let _c = gate.admit(LO).unwrap();
        assert!(gate.admit(LO).is_none(), "fourth in all");
        drop(a);
        assert!(gate.admit(OTHER).is_some());
        assert_eq!(gate.stats.conns_over_source.load(Ordering::Relaxed), 1);
        assert_eq!(gate.stats.conns_over_total.load(Ordering::Relaxed), 1);
    }

    #[test]
    fn the_buffer_budget_is_shared() {
        let gate = Gate::new(
            Limits {
                max_buffered: 100,
                ..Limits::default()
            },
            Arc::default(),
        );
        assert!(gate.reserve(60));
        assert!(!gate.reserve(50));
        gate.release(60);
        assert!(gate.reserve(100));
    }
}

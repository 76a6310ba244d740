//! Wall-clock time for results: [`Clock`] maps monotonic instants to Unix time.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::time::Instant;

/// Wall-clock now in ns since the Unix epoch (0 if the clock is before 1970).
pub fn unix_now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

/// Maps monotonic instants to wall-clock time, fixed once per run, so a
/// clock step during a run never reorders its samples.
#[derive(Debug, Clone, Copy)]
pub struct Clock {
    origin: Instant,
    origin_unix_ns: u64,
}

impl Clock {
    /// A clock anchored at this moment.
    pub fn now() -> Self {
        Self {
            origin: Instant::now(),
            origin_unix_ns: unix_now_ns(),
        }
    }

    /// Wall-clock time of `at`, ns since the Unix epoch.
    pub fn unix_ns(&self, at: Instant) -> u64 {
        let ns = |d: Duration| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        if at >= self.origin {
            self.origin_unix_ns.saturating_add(ns(at - self.origin))
        } else {
            self.origin_unix_ns.saturating_sub(ns(self.origin - at))
        }
    }

    /// The instant of wall-clock time `unix_ns` (the inverse of
    /// [`Clock::unix_ns`]).
    pub fn instant(&self, unix_ns: u64) -> Instant {
        if unix_ns >= self.origin_unix_ns {
            self.origin + Duration::from_nanos(unix_ns - self.origin_unix_ns)
        } else {
            self.origin
                .checked_sub(Duration::from_nanos(self.origin_unix_ns - unix_ns))
                .unwrap_or(self.origin)
        }
    }
}

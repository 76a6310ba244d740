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
///
/// The offset between the two clocks is measured as the tightest of several
/// (monotonic, wall, monotonic) read brackets: a single pair read one after
/// the other is off by whatever delays the second read (a preemption, an
/// interrupt, a vCPU exit), which on a loaded VM was tens of µs about once
/// in 30,000 reads. Kernel stamps are never converted with it: they are
/// compared with wall-clock times read next to the socket call (see
/// [`crate::Stamps`]); this clock only places `*_unix_ns` fields.
#[derive(Debug, Clone, Copy)]
pub struct Clock {
    origin: Instant,
    origin_unix_ns: u64,
    /// Half the width of the bracket the offset was read in: its error.
    error: Duration,
}

/// Brackets read to find the offset; the tightest is kept.
const BRACKETS: usize = 5;

impl Clock {
    /// A clock anchored at this moment.
    pub fn now() -> Self {
        Self::calibrate(Instant::now, unix_now_ns)
    }

    /// Anchors a clock from `BRACKETS` reads of (`mono`, `wall`, `mono`),
    /// keeping the tightest bracket and taking its middle as the instant of
    /// the wall reading.
    pub fn calibrate(mut mono: impl FnMut() -> Instant, mut wall: impl FnMut() -> u64) -> Self {
        let mut best: Option<Self> = None;
        for _ in 0..BRACKETS {
            let a = mono();
            let w = wall();
            let b = mono();
            let half = b.saturating_duration_since(a) / 2;
            if best.is_none_or(|c| half < c.error) {
                best = Some(Self {
                    origin: a + half,
                    origin_unix_ns: w,
                    error: half,
                });
            }
        }
        best.expect("BRACKETS is at least 1")
    }

    /// The largest error of [`Clock::unix_ns`] from the calibration (half
    /// the tightest bracket), before any later drift of the wall clock.
    pub fn error(&self) -> Duration {
        self.error
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
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;

    use super::*;

    #[test]
    fn a_stall_between_two_reads_does_not_shift_the_clock() {
        // A fake monotonic clock; the true wall clock runs with it from `base`.
        let start = Instant::now();
        let now = Cell::new(start);
        let base = 1_700_000_000_000_000_000u64;
        let truth = |at: Instant| base + u64::try_from((at - start).as_nanos()).unwrap();
        // The first bracket stalls 50 µs between its first monotonic read and
        // the wall read, as a preempted thread would; each read takes 40 ns.
        let walls = Cell::new(0);
        let mono = || now.get();
        let wall = || {
            walls.set(walls.get() + 1);
            if walls.get() == 1 {
                now.set(now.get() + Duration::from_micros(50));
            }
            let w = truth(now.get());
            now.set(now.get() + Duration::from_nanos(40));
            w
        };
        let c = Clock::calibrate(mono, wall);
        let probe = start + Duration::from_millis(3);
        let err = c.unix_ns(probe).abs_diff(truth(probe));
        assert!(err <= c.error().as_nanos() as u64 + 1, "off by {err} ns");
        assert!(err < 1_000, "off by {err} ns, the stall leaked in");
        // The naive pair, monotonic then wall across the stall, is 50 µs off.
        let naive = Clock {
            origin: start,
            origin_unix_ns: truth(start + Duration::from_micros(50)),
            error: Duration::ZERO,
        };
        assert!(naive.unix_ns(probe).abs_diff(truth(probe)) >= 50_000);
    }
}

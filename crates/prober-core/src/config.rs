//! Run settings shared by every target of one measurement.

use std::fmt;
use std::time::Duration;

use serde::Serialize;

/// How the runner waits for each scheduled send time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Pacing {
    /// Sleep: on the tokio timer, finished on a high-resolution timerfd.
    #[default]
    Timer,
    /// Busy-wait to the deadline, as netperf built with `--enable-spin`.
    Spin,
    /// Sleep until shortly before the deadline, then spin: the margin adapts
    /// to how late sleeps wake, within a CPU budget ([`crate::wait::Margin`]).
    Hybrid,
}

impl Pacing {
    /// Every pacing, in the order help texts list them.
    pub const ALL: [Self; 3] = [Self::Timer, Self::Spin, Self::Hybrid];

    /// The lowercase name used on the command line and in results.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Timer => "timer",
            Self::Spin => "spin",
            Self::Hybrid => "hybrid",
        }
    }
}

impl std::str::FromStr for Pacing {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|p| p.as_str() == s)
            .ok_or_else(|| {
                let names: Vec<_> = Self::ALL.iter().map(|p| p.as_str()).collect();
                format!("unknown pacing {s:?} ({})", names.join(", "))
            })
    }
}

impl fmt::Display for Pacing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A setting that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// `count` was zero.
    #[error("count must be at least 1")]
    ZeroCount,
    /// `burst` was zero.
    #[error("burst must be at least 1")]
    ZeroBurst,
    /// `timeout` was zero.
    #[error("timeout must be greater than zero")]
    ZeroTimeout,
    /// `duration` was zero.
    #[error("duration must be greater than zero")]
    ZeroDuration,
    /// `max_in_flight` was zero.
    #[error("max in flight must be at least 1")]
    ZeroInFlight,
    /// `burst` exceeds `max_in_flight`.
    #[error("burst {burst} is above the in-flight cap {cap}")]
    BurstAboveCap {
        /// The burst asked for.
        burst: u32,
        /// The cap on probes in flight.
        cap: usize,
    },
}

/// Settings for one measurement run; every target of the run shares them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunConfig {
    /// Time between slots. Zero means closed loop: each lane sends its next
    /// probe as soon as the previous one ends, as netperf TCP_RR does.
    pub interval: Duration,
    /// Probes per target; `None` runs until `duration` or until stopped.
    pub count: Option<u64>,
    /// Stop scheduling after this long; `None` means no time limit.
    pub duration: Option<Duration>,
    /// Probes sent per slot (open loop), or lanes in flight (closed loop).
    pub burst: u32,
    /// How to wait for each slot's deadline.
    pub pacing: Pacing,
    /// A probe with no reply after this long is a timeout.
    pub timeout: Duration,
    /// Probes sent and awaited before the schedule starts, never recorded.
    pub warmup: u64,
    /// Cap on probes in flight per target; a slot that finds the cap reached
    /// is counted as missed rather than delaying the schedule.
    pub max_in_flight: usize,
    /// End timer waits on a high-resolution timerfd instead of the runtime's
    /// millisecond timer. Tests with paused time turn it off.
    pub precise_timer: bool,
}

impl Default for RunConfig {
    fn default() -> Self {
        Self {
            interval: Duration::from_secs(1),
            count: None,
            duration: None,
            burst: 1,
            pacing: Pacing::Timer,
            timeout: Duration::from_secs(1),
            warmup: 0,
            max_in_flight: 4096,
            precise_timer: true,
        }
    }
}

impl RunConfig {
    /// Checks the settings that no protocol could accept.
    ///
    /// # Errors
    /// Returns the first [`ConfigError`] found.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.count == Some(0) {
            return Err(ConfigError::ZeroCount);
        }
        if self.burst == 0 {
            return Err(ConfigError::ZeroBurst);
        }
        if self.timeout.is_zero() {
            return Err(ConfigError::ZeroTimeout);
        }
        if self.duration.is_some_and(|d| d.is_zero()) {
            return Err(ConfigError::ZeroDuration);
        }
        if self.max_in_flight == 0 {
            return Err(ConfigError::ZeroInFlight);
        }
        if self.burst as usize > self.max_in_flight {
            return Err(ConfigError::BurstAboveCap {
                burst: self.burst,
                cap: self.max_in_flight,
            });
        }
        Ok(())
    }

    /// True when the run is closed loop (`interval == 0`).
    pub fn closed_loop(&self) -> bool {
        self.interval.is_zero()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_is_valid() {
        assert_eq!(RunConfig::default().validate(), Ok(()));
    }

    #[test]
    fn rejects_zeroes() {
        let base = RunConfig::default();
        let cases = [
            (
                RunConfig {
                    count: Some(0),
                    ..base.clone()
                },
                ConfigError::ZeroCount,
            ),
            (
                RunConfig {
                    burst: 0,
                    ..base.clone()
                },
                ConfigError::ZeroBurst,
            ),
            (
                RunConfig {
                    timeout: Duration::ZERO,
                    ..base.clone()
                },
                ConfigError::ZeroTimeout,
            ),
            (
                RunConfig {
                    duration: Some(Duration::ZERO),
                    ..base.clone()
                },
                ConfigError::ZeroDuration,
            ),
            (
                RunConfig {
                    max_in_flight: 0,
                    ..base.clone()
                },
                ConfigError::ZeroInFlight,
            ),
        ];
        for (cfg, want) in cases {
            assert_eq!(cfg.validate(), Err(want));
        }
    }
}

//! How a result was measured: settings, tool version, host and kernel.

use std::time::{SystemTime, UNIX_EPOCH};

use serde::Serialize;

use crate::config::RunConfig;

/// The settings and environment that travel with every result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RunMeta {
    /// prober's version.
    pub version: String,
    /// This machine's host name.
    pub hostname: String,
    /// Kernel release (`uname -r`).
    pub kernel: String,
    /// Wall-clock start of the run, ns since the Unix epoch.
    pub start_unix_ns: u64,
    /// Interval between slots in ns; 0 is closed loop.
    pub interval_ns: u64,
    /// `timer`, `spin` or `hybrid`.
    pub pacing: String,
    /// How replies are received: `async` (tokio, sleeps in epoll).
    pub receive: String,
    /// Probes per slot, or lanes in closed loop.
    pub burst: u32,
    /// Probes per target, if bounded by count.
    pub count: Option<u64>,
    /// Run length in ns, if bounded by time.
    pub duration_ns: Option<u64>,
    /// Request size in bytes.
    pub size: usize,
    /// Per-probe timeout in ns.
    pub timeout_ns: u64,
    /// Warm-up probes per target, not recorded.
    pub warmup: u64,
}

impl RunMeta {
    /// Describes a run of `cfg` on this machine, starting now.
    pub fn new(version: &str, cfg: &RunConfig) -> Self {
        let ns = |d: std::time::Duration| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        Self {
            version: version.to_owned(),
            hostname: read_proc("/proc/sys/kernel/hostname"),
            kernel: read_proc("/proc/sys/kernel/osrelease"),
            start_unix_ns: unix_now_ns(),
            interval_ns: ns(cfg.interval),
            pacing: cfg.pacing.to_string(),
            receive: "async".to_owned(),
            burst: cfg.burst,
            count: cfg.count,
            duration_ns: cfg.duration.map(ns),
            size: cfg.size,
            timeout_ns: ns(cfg.timeout),
            warmup: cfg.warmup,
        }
    }
}

fn read_proc(path: &str) -> String {
    std::fs::read_to_string(path)
        .map(|s| s.trim().to_owned())
        .unwrap_or_else(|_| "unknown".to_owned())
}

/// Wall-clock now in ns since the Unix epoch (0 if the clock is before 1970).
pub fn unix_now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

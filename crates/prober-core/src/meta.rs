//! How a result was measured: settings, tool version, host and kernel.

use serde::Serialize;

use crate::clock::unix_now_ns;
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
    /// Request size given for every target (`--size`); `None` when each
    /// target uses its protocol's default (see each target's `size`).
    pub size: Option<usize>,
    /// Per-probe timeout in ns.
    pub timeout_ns: u64,
    /// Warm-up probes per target, not recorded.
    pub warmup: u64,
    /// Which kernel timestamps the probes ask for: `rx+tx` (software
    /// receive and transmit stamps, the full split) or `rx` (receive only:
    /// `--no-tx-stamps`, or the daemon without `[stamps] transmit`).
    pub kernel_stamps: String,
    /// The PM QoS CPU latency request held for the run (`--cpu-latency`),
    /// in ns; `None`: none was made.
    pub cpu_latency_ns: Option<u64>,
}

impl RunMeta {
    /// Describes a run of `cfg`, starting now, on a host named `unknown`
    /// (see [`RunMeta::on_host`]).
    pub fn new(version: &str, cfg: &RunConfig) -> Self {
        let ns = |d: std::time::Duration| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        Self {
            version: version.to_owned(),
            hostname: "unknown".to_owned(),
            kernel: "unknown".to_owned(),
            start_unix_ns: unix_now_ns(),
            interval_ns: ns(cfg.interval),
            pacing: cfg.pacing.to_string(),
            receive: "async".to_owned(),
            burst: cfg.burst,
            count: cfg.count,
            duration_ns: cfg.duration.map(ns),
            size: None,
            timeout_ns: ns(cfg.timeout),
            warmup: cfg.warmup,
            kernel_stamps: "rx+tx".to_owned(),
            cpu_latency_ns: None,
        }
    }

    /// The same, with the PM QoS CPU latency request held for the run.
    #[must_use]
    pub fn with_cpu_latency(mut self, held: Option<std::time::Duration>) -> Self {
        self.cpu_latency_ns = held.map(|d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
        self
    }

    /// The same, saying whether transmit stamps were asked for.
    #[must_use]
    pub fn with_tx_stamps(mut self, on: bool) -> Self {
        self.kernel_stamps = if on { "rx+tx" } else { "rx" }.to_owned();
        self
    }
}

impl RunMeta {
    /// The same, on the host named `hostname` running kernel `kernel`.
    #[must_use]
    pub fn on_host(mut self, hostname: &str, kernel: &str) -> Self {
        hostname.clone_into(&mut self.hostname);
        kernel.clone_into(&mut self.kernel);
        self
    }
}

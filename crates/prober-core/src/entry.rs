//! [`TargetEntry`]: one target as the collector and every sink see it.

use std::sync::Arc;

use crate::info::TargetInfo;
use crate::matcher::Anomalies;
use crate::stats::{Summary, TargetStats};

/// Reads a running probe's late, duplicate and reconnect counters.
pub type AnomalyReader = Arc<dyn Fn() -> Anomalies + Send + Sync>;

/// One target as the collector knows it.
pub struct TargetEntry {
    /// How it is named in results.
    pub info: TargetInfo,
    /// What was recorded so far.
    pub stats: TargetStats,
    live: AnomalyReader,
    /// Boxed: most targets never end in a daemon, and the counters are
    /// 200 bytes (BENCHMARKS.md, "Memory at 10,000 targets, fourth pass").
    done: Option<Box<(Anomalies, u64)>>,
}

impl std::fmt::Debug for TargetEntry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TargetEntry")
            .field("info", &self.info)
            .finish_non_exhaustive()
    }
}

impl TargetEntry {
    /// A target with nothing recorded yet.
    pub(crate) fn new(info: TargetInfo, stats: TargetStats, live: AnomalyReader) -> Self {
        Self {
            info,
            stats,
            live,
            done: None,
        }
    }

    /// Records the target's final counters.
    pub(crate) fn set_done(&mut self, anomalies: Anomalies, missed: u64) {
        self.done = Some(Box::new((anomalies, missed)));
    }

    /// Late, duplicate, reordered and corrupt replies and reconnects: the
    /// final count once the target is done, else read from the probe now.
    pub fn anomalies(&self) -> Anomalies {
        self.done
            .as_deref()
            .map_or_else(|| (self.live)(), |(a, _)| *a)
    }

    /// Reads the probe's counters; a sink may keep it to read them later
    /// (Prometheus, at scrape time).
    pub fn anomaly_reader(&self) -> AnomalyReader {
        Arc::clone(&self.live)
    }

    /// Slots not sent because the in-flight cap was reached (known once the
    /// target is done).
    pub fn missed(&self) -> u64 {
        self.done.as_deref().map_or(0, |(_, m)| *m)
    }

    /// True once the target sent [`crate::Event::Done`].
    pub fn is_done(&self) -> bool {
        self.done.is_some()
    }

    /// The summary so far.
    pub fn summary(&self) -> Summary {
        self.stats
            .summary(&self.info, self.anomalies(), self.missed())
    }
}

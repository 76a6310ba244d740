//! Helpers for tests of probe crates (feature `test-util`): run one probe to
//! completion and keep every sample.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::runner::{Clock, EVENT_CHANNEL};
use crate::{Probe, RunConfig, RunMeta, Sample, Sink, Summary, TargetInfo, collect, run_target};

/// A sink that keeps every sample in memory.
#[derive(Debug, Default, Clone)]
pub struct VecSink(pub Arc<Mutex<Vec<Sample>>>);

impl Sink for VecSink {
    fn record(&mut self, _t: &TargetInfo, s: &Sample) -> std::io::Result<()> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(s.clone());
        Ok(())
    }

    fn finish(&mut self, _s: &[Summary]) -> std::io::Result<()> {
        Ok(())
    }
}

/// A count-bounded config with this interval and a 300 ms timeout.
pub fn config(count: u64, interval: Duration) -> RunConfig {
    RunConfig {
        interval,
        count: Some(count),
        timeout: Duration::from_millis(300),
        ..RunConfig::default()
    }
}

/// Runs `probe` with `cfg` (stopping early if `stop` is cancelled) and
/// returns its summary and its samples sorted by seq.
///
/// # Panics
/// If the accounting identity sent = ok + timeout + error does not hold.
pub async fn run_probe<P: Probe>(
    probe: P,
    cfg: RunConfig,
    stop: CancellationToken,
) -> (Summary, Vec<Sample>) {
    let targets = [TargetInfo::new(0, "test", "test", "test", cfg.size)];
    let (tx, rx) = mpsc::channel(EVENT_CHANNEL);
    let task = tokio::spawn(run_target(
        Arc::new(probe),
        0,
        cfg.clone(),
        Duration::ZERO,
        tx,
        stop,
    ));
    let sink = VecSink::default();
    let kept = Arc::clone(&sink.0);
    let mut sinks: Vec<Box<dyn Sink>> = vec![Box::new(sink)];
    let meta = RunMeta::new("test", &cfg);
    let (mut summaries, res) = collect(rx, &targets, &meta, Clock::now(), &mut sinks).await;
    res.expect("the memory sink cannot fail");
    task.await.expect("run_target does not panic");
    let mut samples = kept
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .clone();
    samples.sort_by_key(|s| s.seq);
    let summary = summaries.remove(0);
    assert_eq!(
        summary.sent,
        summary.ok + summary.timeout + summary.error,
        "accounting identity"
    );
    (summary, samples)
}

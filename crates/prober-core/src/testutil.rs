//! Helpers for tests of probe crates (feature `test-util`): run one probe to
//! completion and keep every sample; a registry of fake protocols.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::protocol::{
    BuildEnv, BuildFuture, Options, ProbeSpec, Protocol, Registry, Scheme, SizeRule,
};
use crate::{
    Clock, Collector, Context, EVENT_CHANNEL, Probe, RunConfig, RunMeta, Sample, Sink, Summary,
    TargetEntry, TargetInfo, collect, run_target,
};

/// A sink that keeps every sample in memory.
#[derive(Debug, Default, Clone)]
pub struct VecSink(pub Arc<Mutex<Vec<Sample>>>);

impl Sink for VecSink {
    fn record(&mut self, _cx: &Context<'_>, _t: &TargetEntry, s: &Sample) -> std::io::Result<()> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(s.clone());
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
    let (tx, rx) = mpsc::channel(EVENT_CHANNEL);
    let probe = Arc::new(probe);
    let reader = Arc::clone(&probe);
    let task = tokio::spawn(run_target(probe, 0, cfg.clone(), Duration::ZERO, tx, stop));
    let sink = VecSink::default();
    let kept = Arc::clone(&sink.0);
    let mut collector = Collector::new(RunMeta::new("test", &cfg), Clock::now(), sink, false);
    collector
        .add_target(
            TargetInfo::new(0, "test", "test", "test", None),
            Arc::new(move || reader.anomalies()),
        )
        .expect("the memory sink cannot fail");
    let (mut summaries, res) = collect(rx, &mut collector, None).await;
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

fn no_build<'a>(_spec: ProbeSpec<'a>, _env: &'a BuildEnv) -> BuildFuture<'a> {
    Box::pin(async { Err("fake protocols build no probes".into()) })
}

const FAKE: Protocol = Protocol {
    schemes: &[],
    port: Some(8707),
    default_port: false,
    path: None,
    size: Some(SizeRule {
        default: 64,
        min: 40,
        max: 1000,
    }),
    size_unit: "frame",
    options: Options {
        ttl: false,
        busy_poll: false,
        marks: false,
        flows: false,
    },
    help: "fake",
    ladder: &[],
    turnaround: None,
    self_test: &[],
    own: &[],
    build: no_build,
};

/// Fake protocols for parsing tests: `icmp` (no port), `tcp`
/// and `udp` (port, sizes 40..=1000), `health` (port 0, a path, no size).
pub static REGISTRY: Registry = Registry::new(&[
    &Protocol {
        schemes: &[Scheme::plain("icmp")],
        port: None,
        size: Some(SizeRule {
            default: 56,
            min: 20,
            max: 1000,
        }),
        ..FAKE
    },
    &Protocol {
        schemes: &[Scheme::plain("tcp")],
        options: Options {
            flows: true,
            ..FAKE.options
        },
        ..FAKE
    },
    &Protocol {
        schemes: &[Scheme::plain("udp")],
        options: Options {
            flows: true,
            ..FAKE.options
        },
        ..FAKE
    },
    &Protocol {
        schemes: &[Scheme::plain("health")],
        port: Some(0),
        path: Some("service"),
        size: None,
        ..FAKE
    },
]);

/// A test that cannot run on this host (a tool, a privilege or a kernel
/// feature missing): a `SKIPPED` line, and the caller returns. Under CI
/// (`CI` set), where `.ci/run` installs every tool and runs as root, it is
/// a failure instead: a test that skips there would pass without running.
///
/// # Panics
/// When `CI` is set.
pub fn skip(why: impl std::fmt::Display) {
    assert!(
        std::env::var_os("CI").is_none(),
        "this test cannot run here, and CI must run it: {why}"
    );
    eprintln!("SKIPPED: {why}");
}

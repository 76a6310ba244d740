use std::collections::HashMap;
use std::sync::Mutex;

use std::io;

use super::*;
use crate::error::ProbeError;
use crate::sample::Reply;
use crate::{
    Clock, Collector, Context, EVENT_CHANNEL, RunMeta, Sink, Summary, TargetEntry, TargetInfo,
    collect,
};

/// Replies after a per-seq delay; `None` never replies; `Err` fails at once.
struct ScriptedProbe {
    script: Box<dyn Fn(u64) -> Option<Result<Duration, String>> + Send + Sync>,
    calls: Mutex<Vec<(u64, Instant)>>,
    /// The gate each probe was given.
    gates: Mutex<Vec<(u64, Gate)>>,
}

impl ScriptedProbe {
    fn new(
        f: impl Fn(u64) -> Option<Result<Duration, String>> + Send + Sync + 'static,
    ) -> Arc<Self> {
        Arc::new(Self {
            script: Box::new(f),
            calls: Mutex::new(Vec::new()),
            gates: Mutex::new(Vec::new()),
        })
    }
}

impl std::fmt::Debug for ScriptedProbe {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ScriptedProbe")
    }
}

impl Probe for ScriptedProbe {
    async fn probe_at(&self, seq: u64, gate: Gate) -> Result<Reply, ProbeError> {
        self.gates.lock().unwrap().push((seq, gate));
        gate.pass().await;
        let sent = Instant::now();
        self.calls.lock().unwrap().push((seq, sent));
        match (self.script)(seq) {
            None => std::future::pending().await,
            Some(Err(e)) => Err(ProbeError::new(crate::ErrorKind::Other, e)),
            Some(Ok(delay)) => {
                tokio::time::sleep(delay).await;
                Ok(reply_now(sent, crate::sample::Stamps::default()))
            }
        }
    }
}

/// A 64-byte reply to a request sent at `sent`, received now.
fn reply_now(sent: Instant, stamps: crate::sample::Stamps) -> Reply {
    Reply {
        stamps,
        ..Reply::plain(sent, Instant::now(), 64)
    }
}

fn cfg(interval_ms: u64, count: u64) -> RunConfig {
    RunConfig {
        interval: Duration::from_millis(interval_ms),
        count: Some(count),
        timeout: Duration::from_millis(100),
        precise_timer: false,
        ..RunConfig::default()
    }
}

async fn run_one<P: Probe>(
    probe: Arc<P>,
    cfg: RunConfig,
    stop: CancellationToken,
) -> (Vec<Sample>, Anomalies, u64) {
    let (tx, mut rx) = mpsc::channel(EVENT_CHANNEL);
    let task = tokio::spawn(run_target(probe, 0, cfg, Duration::ZERO, tx, stop));
    let mut samples = Vec::new();
    let mut done = None;
    while let Some(ev) = rx.recv().await {
        match ev {
            Event::Sample(s) => samples.push(s),
            Event::Done {
                anomalies, missed, ..
            } => done = Some((anomalies, missed)),
        }
    }
    task.await.unwrap();
    let (anomalies, missed) = done.expect("run_target always reports Done");
    samples.sort_by_key(|s| s.seq);
    (samples, anomalies, missed)
}

#[tokio::test(start_paused = true)]
async fn open_loop_sends_on_schedule() {
    let probe = ScriptedProbe::new(|_| Some(Ok(Duration::from_millis(1))));
    let start = Instant::now();
    let (samples, _, missed) =
        run_one(Arc::clone(&probe), cfg(10, 10), CancellationToken::new()).await;
    assert_eq!(missed, 0);
    assert_eq!(
        samples.iter().map(|s| s.seq).collect::<Vec<_>>(),
        (0..10).collect::<Vec<_>>()
    );
    for s in &samples {
        assert_eq!(s.scheduled - start, Duration::from_millis(10 * s.seq));
        assert_eq!(s.send_lag(), Duration::ZERO);
        assert_eq!(s.rtt(), Some(Duration::from_millis(1)));
    }
}

/// Real time: spinning cannot run on paused time. Timing itself is not
/// asserted (a loaded machine preempts the spinner); the gates are.
#[tokio::test]
async fn spinning_pacing_gates_each_probe_at_its_deadline() {
    for pacing in [Pacing::Spin, Pacing::Hybrid, Pacing::Timer] {
        let probe = ScriptedProbe::new(|_| Some(Ok(Duration::ZERO)));
        let run = RunConfig {
            pacing,
            precise_timer: true,
            ..cfg(5, 10)
        };
        let (samples, _, _) = run_one(Arc::clone(&probe), run, CancellationToken::new()).await;
        assert_eq!(samples.len(), 10);
        let gates: HashMap<u64, Gate> = probe.gates.lock().unwrap().iter().copied().collect();
        for s in &samples {
            // Never before the deadline, whatever the pacing.
            assert!(s.sent >= s.scheduled, "{pacing}: seq {} sent early", s.seq);
            let want = match pacing {
                // Started ahead, behind a gate that opens at the deadline.
                Pacing::Spin | Pacing::Hybrid => Some(s.scheduled),
                // Started at the deadline, nothing to wait for.
                Pacing::Timer => None,
            };
            assert_eq!(gates[&s.seq].deadline(), want, "{pacing}: seq {}", s.seq);
        }
    }
}

#[tokio::test(start_paused = true)]
async fn a_stalled_reply_does_not_delay_later_sends() {
    // Probe 2 takes 50 ms, five intervals: open loop must keep sending.
    let probe =
        ScriptedProbe::new(|seq| Some(Ok(Duration::from_millis(if seq == 2 { 50 } else { 1 }))));
    let start = Instant::now();
    let (samples, _, _) = run_one(Arc::clone(&probe), cfg(10, 8), CancellationToken::new()).await;
    let calls = probe.calls.lock().unwrap().clone();
    for (seq, at) in calls {
        assert_eq!(
            at - start,
            Duration::from_millis(10 * seq),
            "seq {seq} was sent late"
        );
    }
    assert_eq!(samples[2].rtt(), Some(Duration::from_millis(50)));
    assert_eq!(samples[3].rtt(), Some(Duration::from_millis(1)));
}

#[tokio::test(start_paused = true)]
async fn timeouts_and_errors_add_up() {
    let probe = ScriptedProbe::new(|seq| match seq % 4 {
        0 => None,
        1 => Some(Err("refused".into())),
        _ => Some(Ok(Duration::from_millis(2))),
    });
    let (samples, _, _) = run_one(probe, cfg(10, 20), CancellationToken::new()).await;
    let count = |name: &str| samples.iter().filter(|s| s.outcome.name() == name).count();
    assert_eq!((count("ok"), count("timeout"), count("error")), (10, 5, 5));
    assert!(
        samples
            .iter()
            .filter(|s| s.outcome == Outcome::Timeout)
            .all(|s| s.seq % 4 == 0)
    );
}

#[tokio::test(start_paused = true)]
async fn full_in_flight_cap_counts_missed_slots() {
    // Nothing answers and only two probes may be in flight: with a 100 ms
    // timeout and 10 ms interval, most slots find no free permit.
    let probe = ScriptedProbe::new(|_| None);
    let cfg = RunConfig {
        max_in_flight: 2,
        ..cfg(10, 30)
    };
    let (samples, _, missed) = run_one(probe, cfg, CancellationToken::new()).await;
    assert_eq!(samples.len() as u64 + missed, 30);
    assert!(missed > 20, "missed {missed}");
    assert_eq!(
        samples.iter().map(|s| s.seq).collect::<Vec<_>>(),
        (0..samples.len() as u64).collect::<Vec<_>>()
    );
}

#[tokio::test(start_paused = true)]
async fn burst_sends_several_per_slot() {
    let probe = ScriptedProbe::new(|_| Some(Ok(Duration::from_micros(100))));
    let start = Instant::now();
    let cfg = RunConfig {
        burst: 3,
        ..cfg(10, 7)
    };
    let (samples, _, _) = run_one(probe, cfg, CancellationToken::new()).await;
    let slots: Vec<_> = samples
        .iter()
        .map(|s| (s.scheduled - start).as_millis())
        .collect();
    assert_eq!(slots, [0, 0, 0, 10, 10, 10, 20]);
}

#[tokio::test(start_paused = true)]
async fn duration_bounds_the_schedule() {
    let probe = ScriptedProbe::new(|_| Some(Ok(Duration::from_millis(1))));
    let cfg = RunConfig {
        count: None,
        duration: Some(Duration::from_millis(95)),
        ..cfg(10, 1)
    };
    let (samples, _, _) = run_one(probe, cfg, CancellationToken::new()).await;
    assert_eq!(samples.len(), 10);
}

#[tokio::test(start_paused = true)]
async fn stop_drains_in_flight_probes() {
    let probe = ScriptedProbe::new(|_| Some(Ok(Duration::from_millis(30))));
    let stop = CancellationToken::new();
    let canceller = stop.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(45)).await;
        canceller.cancel();
    });
    let cfg = RunConfig {
        count: None,
        ..cfg(10, 1)
    };
    let (samples, _, _) = run_one(probe, cfg, stop).await;
    // Slots at 0..=40 ms were sent; each of them finished, none was dropped.
    assert_eq!(samples.len(), 5);
    assert!(samples.iter().all(|s| s.outcome.name() == "ok"));
}

#[tokio::test(start_paused = true)]
async fn closed_loop_sends_after_each_reply() {
    let probe = ScriptedProbe::new(|_| Some(Ok(Duration::from_millis(3))));
    let start = Instant::now();
    let (samples, _, _) = run_one(Arc::clone(&probe), cfg(0, 5), CancellationToken::new()).await;
    let sent: Vec<_> = samples
        .iter()
        .map(|s| (s.sent - start).as_millis())
        .collect();
    assert_eq!(sent, [0, 3, 6, 9, 12]);
    assert!(
        samples
            .iter()
            .all(|s| s.latency() == Some(Duration::from_millis(3)))
    );
}

/// Replies after 1 ms with the responder send part to come later; the
/// reply to the next seq brings it, as an interleaved responder does. With
/// no next probe, settling gives up after 5 ms and leaves it unknown.
/// A probe whose seq is `lost` times out: its request never reaches the
/// responder, so no reply carries the send part before it.
#[derive(Debug, Default)]
struct InterleavedProbe {
    sent: tokio::sync::watch::Sender<Option<u64>>,
    lost: Option<u64>,
}

impl Probe for InterleavedProbe {
    async fn probe_at(&self, seq: u64, gate: Gate) -> Result<Reply, ProbeError> {
        gate.pass().await;
        if self.lost == Some(seq) {
            std::future::pending::<()>().await;
        }
        let sent = Instant::now();
        self.sent.send_replace(Some(seq));
        tokio::time::sleep(Duration::from_millis(1)).await;
        let stamps = crate::sample::Stamps {
            responder: Some(crate::ResponderTimes {
                send_later: true,
                ..Default::default()
            }),
            ..Default::default()
        };
        Ok(reply_now(sent, stamps))
    }

    async fn settle(&self, seq: u64, mut reply: Reply) -> Reply {
        let mut sent = self.sent.subscribe();
        let next = tokio::time::timeout(
            Duration::from_millis(5),
            sent.wait_for(|s| s.is_some_and(|s| s > seq)),
        )
        .await;
        if let Some(r) = reply.stamps.responder.as_mut() {
            r.send = next.is_ok().then_some(seq + 1_000);
        }
        reply
    }
}

/// Each probe's split waits for the next probe's reply, which a closed
/// loop sends only once this probe returned: settling must not hold it up.
#[tokio::test(start_paused = true)]
async fn replies_settle_after_the_next_probe_without_holding_it_up() {
    for interval in [0, 2] {
        let probe = Arc::new(InterleavedProbe::default());
        let start = Instant::now();
        // One in flight at most: a probe waiting to settle is answered,
        // not in flight, or every slot would wait for the one before it.
        let cfg = RunConfig {
            max_in_flight: 1,
            ..cfg(interval, 4)
        };
        let (samples, _, missed) = run_one(probe, cfg, CancellationToken::new()).await;
        assert_eq!(missed, 0, "-i {interval}ms");
        let sent: Vec<_> = samples
            .iter()
            .map(|s| (s.sent - start).as_millis())
            .collect();
        let step = interval.max(1);
        assert_eq!(
            sent,
            [0, step, 2 * step, 3 * step].map(u128::from),
            "-i {interval}ms"
        );
        let sends: Vec<_> = samples
            .iter()
            .map(|s| match &s.outcome {
                Outcome::Ok(r) => r.stamps.responder.map(|r| (r.send, r.send_later)),
                _ => None,
            })
            .collect();
        assert_eq!(
            sends,
            [
                Some((Some(1_000), false)),
                Some((Some(1_001), false)),
                Some((Some(1_002), false)),
                // The last: no next probe; unknown, and settled all the same.
                Some((None, false)),
            ],
            "-i {interval}ms"
        );
    }
}

/// Back to back, a reply waits for the next one to settle it; when the
/// next probe times out instead, the reply still comes out (settled by the
/// reply after, as a responder that never saw the lost request carries
/// it), and nothing is lost or held past the run.
#[tokio::test(start_paused = true)]
async fn a_reply_waiting_to_settle_comes_out_when_the_next_probe_is_lost() {
    let probe = Arc::new(InterleavedProbe {
        lost: Some(2),
        ..Default::default()
    });
    let (mut samples, _, _) = run_one(probe, cfg(0, 5), CancellationToken::new()).await;
    samples.sort_by_key(|s| s.seq);
    let outcomes: Vec<_> = samples
        .iter()
        .map(|s| match &s.outcome {
            Outcome::Ok(r) => Some(r.stamps.responder.map(|r| (r.send, r.send_later))),
            Outcome::Timeout => None,
            other => panic!("seq {}: {other:?}", s.seq),
        })
        .collect();
    assert_eq!(
        outcomes,
        [
            Some(Some((Some(1_000), false))),
            Some(Some((Some(1_001), false))),
            None,
            Some(Some((Some(1_003), false))),
            Some(Some((None, false))),
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn warmup_is_not_recorded() {
    let probe = ScriptedProbe::new(|_| Some(Ok(Duration::from_millis(1))));
    let cfg = RunConfig {
        warmup: 3,
        ..cfg(10, 4)
    };
    let (samples, _, _) = run_one(Arc::clone(&probe), cfg, CancellationToken::new()).await;
    assert_eq!(samples.len(), 4);
    let calls = probe.calls.lock().unwrap().len();
    assert_eq!(calls, 7);
}

#[derive(Debug, Default)]
struct VecSink {
    seen: Arc<Mutex<HashMap<usize, Vec<u64>>>>,
    finished: Arc<Mutex<Vec<Summary>>>,
}

impl Sink for VecSink {
    fn record(
        &mut self,
        _cx: &Context<'_>,
        target: &TargetEntry,
        sample: &Sample,
    ) -> io::Result<()> {
        self.seen
            .lock()
            .unwrap()
            .entry(target.info.id)
            .or_default()
            .push(sample.seq);
        Ok(())
    }
    fn finish(&mut self, _cx: &Context<'_>, summaries: &[Summary]) -> io::Result<()> {
        self.finished.lock().unwrap().extend_from_slice(summaries);
        Ok(())
    }
}

#[tokio::test(start_paused = true)]
async fn collector_summarises_every_target() {
    let (tx, rx) = mpsc::channel(EVENT_CHANNEL);
    let stop = CancellationToken::new();
    let good = ScriptedProbe::new(|_| Some(Ok(Duration::from_millis(1))));
    let lossy = ScriptedProbe::new(|seq| (seq % 2 == 0).then_some(Ok(Duration::from_millis(1))));
    let mut set = JoinSet::new();
    set.spawn(run_target(
        good,
        0,
        cfg(10, 6),
        Duration::ZERO,
        tx.clone(),
        stop.clone(),
    ));
    set.spawn(run_target(lossy, 1, cfg(10, 6), Duration::ZERO, tx, stop));
    let sink = VecSink::default();
    let (seen, finished) = (Arc::clone(&sink.seen), Arc::clone(&sink.finished));
    let meta = RunMeta::new("test", &cfg(10, 6));
    let mut collector = Collector::new(meta, Clock::now(), sink, false);
    for id in 0..2 {
        let info = TargetInfo::new(id, &format!("t{id}"), "fake", "x", Some(64));
        collector
            .add_target(info, Arc::new(Anomalies::default))
            .unwrap();
    }
    let (summaries, res) = collect(rx, &mut collector, None).await;
    res.unwrap();
    while set.join_next().await.is_some() {}
    assert_eq!(summaries.len(), 2);
    assert_eq!((summaries[0].sent, summaries[0].ok), (6, 6));
    assert_eq!(
        (summaries[1].sent, summaries[1].ok, summaries[1].timeout),
        (6, 3, 3)
    );
    assert!((summaries[1].loss_pct.unwrap() - 50.0).abs() < 1e-9);
    assert!(summaries[0].all_ok() && !summaries[1].all_ok());
    assert_eq!(*finished.lock().unwrap(), summaries);
    for id in 0..2 {
        let mut seqs = seen.lock().unwrap()[&id].clone();
        seqs.sort_unstable();
        assert_eq!(seqs, (0..6).collect::<Vec<_>>());
    }
}

#[tokio::test(start_paused = true)]
async fn a_stalled_collector_does_not_stall_the_schedule() {
    let probe = ScriptedProbe::new(|_| Some(Ok(Duration::from_millis(1))));
    let start = Instant::now();
    // Room for one event; nobody reads until the run is over.
    let (tx, mut rx) = mpsc::channel(1);
    let task = tokio::spawn(run_target(
        Arc::clone(&probe),
        0,
        cfg(10, 20),
        Duration::ZERO,
        tx,
        CancellationToken::new(),
    ));
    tokio::time::sleep(Duration::from_millis(300)).await;
    for (seq, at) in probe.calls.lock().unwrap().iter() {
        assert_eq!(
            *at - start,
            Duration::from_millis(10 * seq),
            "seq {seq} waited for the collector"
        );
    }
    assert_eq!(probe.calls.lock().unwrap().len(), 20);
    let mut seqs = Vec::new();
    while let Some(ev) = rx.recv().await {
        if let Event::Sample(s) = ev {
            seqs.push(s.seq);
        }
    }
    task.await.unwrap();
    // The first went straight over; the rest waited in the target's queue
    // and came out behind it, in order.
    assert_eq!(
        seqs,
        (0..20).collect::<Vec<_>>(),
        "nothing lost, nothing out of order"
    );
}

#[test]
fn burst_above_the_in_flight_cap_is_rejected() {
    let c = RunConfig {
        burst: 10,
        max_in_flight: 5,
        ..RunConfig::default()
    };
    assert!(c.validate().is_err());
}

/// Runs targets of `cfg` at these phases on `timer`, each probe answered
/// at once: (target, scheduled time) of every slot.
async fn on_shared_timer(
    timer: &crate::SharedTimer,
    cfg: &RunConfig,
    phases: &[Duration],
) -> Vec<(usize, Instant)> {
    let (tx, mut rx) = mpsc::channel(EVENT_CHANNEL);
    let mut set = JoinSet::new();
    for (id, phase) in phases.iter().enumerate() {
        let launch = Launch {
            id,
            cfg: cfg.clone(),
            phase: *phase,
            events: tx.clone(),
            stop: CancellationToken::new(),
            turnstile: None,
            abandon: None,
            timer: Some(timer.clone()),
        };
        let probe = ScriptedProbe::new(|_| Some(Ok(Duration::ZERO)));
        let _ = runnable(SharedProbe(probe)).launch(&mut set, launch);
    }
    drop(tx);
    let mut scheduled = Vec::new();
    while let Some(ev) = rx.recv().await {
        if let Event::Sample(s) = ev {
            scheduled.push((s.target, s.scheduled));
        }
    }
    while set.join_next().await.is_some() {}
    scheduled
}

/// A [`ScriptedProbe`] behind an `Arc`, as [`runnable`] takes a probe by value.
struct SharedProbe(Arc<ScriptedProbe>);

impl Probe for SharedProbe {
    async fn probe_at(&self, seq: u64, gate: Gate) -> Result<Reply, ProbeError> {
        self.0.probe_at(seq, gate).await
    }
}

/// Targets that finish their waits on the daemon's shared timer start on
/// its grid, wherever their phase puts them: every slot is then due at one
/// of the timer's wake-ups rather than between two (where it waited for
/// the next, most of the daemon's send lag).
#[tokio::test]
async fn schedules_on_the_shared_timer_fall_on_its_grid() {
    let timer = crate::SharedTimer::new().unwrap();
    let launched = Instant::now();
    let phases = [300, 1_700, 4_321].map(Duration::from_micros);
    let scheduled = on_shared_timer(&timer, &cfg(10, 3), &phases).await;
    assert_eq!(scheduled.len(), 9, "{scheduled:?}");
    let first = scheduled[0].1;
    for &(target, at) in &scheduled {
        // Never before where its phase put it, nor more than a grid step
        // after (and the few ms its task may take to first run)...
        let phase = launched + phases[target];
        assert!(at >= phase, "target {target} due before its phase");
        let slot = u32::try_from(at.saturating_duration_since(phase).as_millis() / 10).unwrap();
        assert!(
            at < phase
                + Duration::from_millis(10) * slot
                + crate::wait::SHARED_GRID
                + Duration::from_millis(250),
            "target {target} due {:?} after its phase",
            at - phase
        );
        // ...and on the timer's grid, as every other.
        assert_eq!(timer.align(at), at, "target {target} off the grid");
        let apart = if at >= first { at - first } else { first - at };
        assert_eq!(
            apart.as_nanos() % crate::wait::SHARED_GRID.as_nanos(),
            0,
            "target {target}'s slot is {apart:?} from another's"
        );
    }
}

/// Off the grid where the grid does not fit: an interval of 2.5 ms, or
/// hybrid pacing (its wait ends a margin before the deadline), starts where
/// its phase says.
#[tokio::test]
async fn schedules_the_grid_does_not_fit_start_at_their_phase() {
    let timer = crate::SharedTimer::new().unwrap();
    for (interval, pacing) in [
        (Duration::from_micros(2_500), Pacing::Timer),
        (Duration::from_millis(10), Pacing::Hybrid),
    ] {
        let launched = Instant::now();
        let cfg = RunConfig {
            interval,
            pacing,
            ..cfg(10, 1)
        };
        let phase = Duration::from_micros(300);
        let scheduled = on_shared_timer(&timer, &cfg, &[phase]).await;
        let at = scheduled.first().expect("one slot").1;
        assert!(at >= launched + phase);
        // Where its task first ran plus its phase: on the grid only by a
        // chance of one in a million.
        assert_ne!(
            timer.align(at),
            at,
            "{interval:?} {pacing}: put on the grid"
        );
    }
}

//! Drives probes on their schedule and feeds samples to the sinks.
//!
//! Each target runs [`run_target`] in its own task; every finished probe is
//! sent as an [`Event`] over one bounded channel to [`collect`], which owns
//! the statistics and every [`Sink`]. Sinks are therefore driven by a single
//! task and never need locks.

use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use futures_util::StreamExt as _;
use futures_util::stream::FuturesUnordered;
use serde::Serialize;
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::matcher::Anomalies;
use crate::meta::{RunMeta, unix_now_ns};
use crate::pacer::Pacer;
use crate::probe::Probe;
use crate::sample::{Outcome, Sample};
use crate::sink::Sink;
use crate::stats::{Summary, TargetStats};
use crate::wait::{GATE_LEAD, Gate, Sleeper};
use crate::{Pacing, RunConfig, WARMUP_SEQ_BASE};

/// Capacity of the event channel between probes and the collector. When the
/// sinks fall this far behind, finished probes wait to report; the schedule
/// itself never waits for them.
pub const EVENT_CHANNEL: usize = 8192;

/// Identifies one target in results.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TargetInfo {
    /// Index of the target in the run.
    pub id: usize,
    /// The target as the user wrote it, normalised (`tcp://host:port`).
    pub target: String,
    /// Protocol name: `tcp`, `tcp-connect`, `tcp-crr`, `udp`, ...
    pub protocol: String,
    /// The resolved address probed.
    pub addr: String,
    /// Request size in bytes for this target (ICMP counts the payload only).
    pub size: usize,
    /// Where reply times come from: `kernel` (SO_TIMESTAMPNS) or `user`
    /// (read by the runtime after it woke up).
    pub timestamps: String,
}

impl TargetInfo {
    /// A target with user-space timestamps.
    pub fn new(id: usize, target: &str, protocol: &str, addr: &str, size: usize) -> Self {
        Self {
            id,
            target: target.to_owned(),
            protocol: protocol.to_owned(),
            addr: addr.to_owned(),
            size,
            timestamps: "user".to_owned(),
        }
    }
}

/// Maps monotonic instants to wall-clock time, fixed once per run.
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
}

/// What a target task reports to the collector.
#[derive(Debug, Clone)]
pub enum Event {
    /// One finished probe.
    Sample(Sample),
    /// The target finished: nothing more will come from it.
    Done {
        /// Index of the target.
        target: usize,
        /// Late, duplicate and reordered replies seen by the probe.
        anomalies: Anomalies,
        /// Slots not sent because the in-flight cap was reached.
        missed: u64,
    },
}

/// Offset of target `index` of `targets` within one interval, so that targets
/// sharing a schedule do not all fire in the same instant.
pub fn phase(index: usize, targets: usize, interval: Duration) -> Duration {
    if targets <= 1 {
        return Duration::ZERO;
    }
    let ns = interval.as_nanos() * index as u128 / targets as u128;
    Duration::from_nanos(u64::try_from(ns).unwrap_or(u64::MAX))
}

/// Runs one target: optional prepare and warm-up, then its schedule until
/// `count`, `duration` or `stop`, then waits for in-flight probes (each ends
/// by its timeout) and sends [`Event::Done`]. Slot 0 of an open-loop
/// schedule is due `phase` after the warm-up ends (see [`phase`]).
///
/// If the collector has gone away the target stops early.
pub async fn run_target<P: Probe>(
    probe: Arc<P>,
    target: usize,
    cfg: RunConfig,
    phase: Duration,
    events: mpsc::Sender<Event>,
    stop: CancellationToken,
) {
    tokio::select! {
        biased;
        () = stop.cancelled() => {}
        res = tokio::time::timeout(cfg.timeout, probe.prepare()) => match res {
            Ok(Ok(())) => {}
            Ok(Err(error)) => tracing::warn!(%error, target, "probe setup failed"),
            Err(_) => tracing::warn!(target, "probe setup timed out"),
        }
    }
    for i in 0..cfg.warmup {
        if stop.is_cancelled() {
            break;
        }
        let _ = tokio::time::timeout(cfg.timeout, probe.probe(WARMUP_SEQ_BASE + i)).await;
    }
    let missed = if cfg.closed_loop() {
        closed_loop(&probe, target, &cfg, &events, &stop).await;
        0
    } else {
        open_loop(&probe, target, &cfg, phase, &events, &stop).await
    };
    let done = Event::Done {
        target,
        anomalies: probe.anomalies(),
        missed,
    };
    let _ = events.send(done).await;
}

async fn open_loop<P: Probe>(
    probe: &Arc<P>,
    target: usize,
    cfg: &RunConfig,
    phase: Duration,
    events: &mpsc::Sender<Event>,
    stop: &CancellationToken,
) -> u64 {
    // Probes in flight are polled by this task, not spawned: the request
    // goes out the moment its slot is due, without a hand-off to another
    // worker thread (which costs a wake-up of tens of µs on an idle vCPU).
    let mut in_flight = FuturesUnordered::new();
    let mut finished = std::collections::VecDeque::new();
    let start = Instant::now() + phase;
    let end = cfg.duration.map(|d| start + d);
    let mut pacer = Pacer::new(start, cfg.interval);
    let mut sleeper = Sleeper::new(cfg.pacing, cfg.precise_timer, cfg.interval);
    // Pacing that spins starts each probe a little early, behind a gate that
    // opens at the deadline (see `Gate`).
    let lead = match cfg.pacing {
        Pacing::Timer => Duration::ZERO,
        Pacing::Spin | Pacing::Hybrid => GATE_LEAD,
    };
    let (mut seq, mut slots_used, mut missed) = (0u64, 0u64, 0u64);
    'schedule: loop {
        let deadline = pacer.next_deadline();
        if end.is_some_and(|end| deadline >= end) {
            break;
        }
        // One wait per slot, kept across the other branches' wake-ups (a
        // restarted wait would re-arm its timer on every reply).
        let wait = sleeper.wait_until(deadline.checked_sub(lead).unwrap_or(deadline));
        tokio::pin!(wait);
        loop {
            tokio::select! {
                biased;
                () = stop.cancelled() => break 'schedule,
                Some(sample) = in_flight.next(), if !in_flight.is_empty() => {
                    finished.push_back(sample);
                }
                // Hand samples to the collector only as it has room, so a slow
                // sink never stalls the schedule; they queue here meanwhile.
                permit = events.reserve(), if !finished.is_empty() => match permit {
                    Ok(permit) => {
                        if let Some(sample) = finished.pop_front() {
                            permit.send(Event::Sample(sample));
                        }
                    }
                    Err(_) => break 'schedule,
                },
                () = &mut wait => break,
            }
        }
        let gate = if lead.is_zero() {
            Gate::open()
        } else {
            Gate::at(deadline)
        };
        for _ in 0..cfg.burst {
            if cfg.count.is_some_and(|c| slots_used >= c) {
                break 'schedule;
            }
            slots_used += 1;
            if in_flight.len() >= cfg.max_in_flight {
                missed += 1;
                continue;
            }
            in_flight.push(one_probe(
                &**probe,
                target,
                seq,
                deadline,
                gate,
                cfg.timeout,
            ));
            seq += 1;
        }
        if cfg.count.is_some_and(|c| slots_used >= c) {
            break;
        }
    }
    // Probes in flight first (the last ones may not even be sent yet), then
    // hand everything over.
    while let Some(sample) = in_flight.next().await {
        finished.push_back(sample);
    }
    for sample in finished {
        let _ = events.send(Event::Sample(sample)).await;
    }
    missed
}

async fn closed_loop<P: Probe>(
    probe: &Arc<P>,
    target: usize,
    cfg: &RunConfig,
    events: &mpsc::Sender<Event>,
    stop: &CancellationToken,
) {
    let next_seq = Arc::new(AtomicU64::new(0));
    let end = cfg.duration.map(|d| Instant::now() + d);
    let mut lanes = JoinSet::new();
    for _ in 0..cfg.burst {
        let (probe, events, stop) = (Arc::clone(probe), events.clone(), stop.clone());
        let (next_seq, count, timeout) = (Arc::clone(&next_seq), cfg.count, cfg.timeout);
        lanes.spawn(async move {
            while !stop.is_cancelled() && end.is_none_or(|end| Instant::now() < end) {
                let seq = next_seq.fetch_add(1, Ordering::Relaxed);
                if count.is_some_and(|c| seq >= c) {
                    break;
                }
                let sample =
                    one_probe(&*probe, target, seq, Instant::now(), Gate::open(), timeout).await;
                if events.send(Event::Sample(sample)).await.is_err() {
                    break;
                }
            }
        });
    }
    while lanes.join_next().await.is_some() {}
}

async fn one_probe<P: Probe>(
    probe: &P,
    target: usize,
    seq: u64,
    scheduled: Instant,
    gate: Gate,
    timeout: Duration,
) -> Sample {
    // A probe started ahead of its deadline (behind a gate) is timed out
    // from the deadline, like the others.
    let started = Instant::now().max(scheduled);
    let probing = probe.probe_at(seq, gate);
    let (sent, outcome, bytes) = match tokio::time::timeout_at(started + timeout, probing).await {
        Ok(Ok(reply)) => (reply.sent, Outcome::Ok(reply), reply.bytes),
        Ok(Err(error)) if error.is_timeout() => (started, Outcome::Timeout, 0),
        Ok(Err(error)) => (started, Outcome::Error(error.message().to_owned()), 0),
        Err(_) => (started, Outcome::Timeout, 0),
    };
    Sample {
        target,
        seq,
        scheduled,
        sent,
        outcome,
        bytes,
    }
}

/// Receives events until every target is done (or every sender is gone),
/// records statistics, feeds every sink and finishes them with the
/// summaries, in target order.
///
/// A sink that fails is skipped from then on, so the others still get every
/// result; the first sink error is returned after all sinks finished.
///
/// # Errors
/// The first I/O error a sink returned.
pub async fn collect(
    mut events: mpsc::Receiver<Event>,
    targets: &[TargetInfo],
    meta: &RunMeta,
    clock: Clock,
    sinks: &mut [Box<dyn Sink>],
) -> (Vec<Summary>, io::Result<()>) {
    let mut stats = vec![TargetStats::default(); targets.len()];
    let mut tallies = vec![None; targets.len()];
    let mut failed = vec![false; sinks.len()];
    let mut first_error = None;
    let mut note = |i: usize, res: io::Result<()>, failed: &mut [bool]| {
        if let Err(e) = res {
            failed[i] = true;
            first_error.get_or_insert(e);
        }
    };
    for (i, sink) in sinks.iter_mut().enumerate() {
        note(i, sink.start(meta, targets, clock), &mut failed);
    }
    let mut remaining = targets.len();
    while remaining > 0 {
        let Some(event) = events.recv().await else {
            break;
        };
        match event {
            Event::Sample(sample) => {
                let Some(st) = stats.get_mut(sample.target) else {
                    continue;
                };
                st.record(&sample);
                let info = &targets[sample.target];
                for (i, sink) in sinks.iter_mut().enumerate() {
                    if !failed[i] {
                        note(i, sink.record(info, &sample), &mut failed);
                    }
                }
            }
            Event::Done {
                target,
                anomalies,
                missed,
            } => {
                if let Some(slot) = tallies.get_mut(target)
                    && slot.is_none()
                {
                    *slot = Some((anomalies, missed));
                    remaining -= 1;
                }
            }
        }
    }
    let summaries: Vec<Summary> = targets
        .iter()
        .zip(&stats)
        .zip(&tallies)
        .map(|((info, st), tally)| {
            let (anomalies, missed) = tally.unwrap_or_default();
            st.summary(info, anomalies, missed)
        })
        .collect();
    for (i, sink) in sinks.iter_mut().enumerate() {
        if !failed[i] {
            note(i, sink.finish(&summaries), &mut failed);
        }
    }
    (summaries, first_error.map_or(Ok(()), Err))
}

#[cfg(test)]
mod tests;

//! Drives probes on their schedule.
//!
//! Each target runs [`run_target`] in its own task; every finished probe is
//! sent as an [`Event`] over one bounded channel to the collector
//! ([`mod@crate::collect`]), which owns the statistics and the sinks.
//! [`Runnable`] lets a protocol's builder hand back its probe type-erased,
//! with the generic runner instantiated once per probe type.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use futures_util::FutureExt as _;
use futures_util::StreamExt as _;
use futures_util::future::OptionFuture;
use futures_util::stream::FuturesUnordered;
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::entry::AnomalyReader;
use crate::matcher::Anomalies;
use crate::matcher::WARMUP_SEQ_BASE;
use crate::pacer::Pacer;
use crate::probe::Probe;
use crate::sample::{Outcome, Sample};
use crate::wait::{GATE_LEAD, Gate, SharedTimer, Sleeper};
use crate::{Pacing, RunConfig};

/// What a target task reports to the collector.
#[derive(Debug, Clone)]
// Moved once per probe through the collector's channel; boxing the sample
// would add an allocation to every probe instead.
#[allow(clippy::large_enum_variant)]
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

/// Runs one probe of `probe` at once, with nothing before it (no warm-up,
/// no schedule) and `timeout` for its reply: what a scrape-time probe
/// (`/probe`, as blackbox_exporter has it) needs. Returns its sample and
/// the probe's counters after it (a TLS peer's certificate expiry); `None`
/// if the probe ended without one (it panicked).
pub async fn once(probe: Box<dyn Runnable>, timeout: Duration) -> Option<(Sample, Anomalies)> {
    let (events, mut rx) = mpsc::channel(4);
    let mut set = JoinSet::new();
    let launch = Launch {
        id: 0,
        cfg: RunConfig {
            interval: timeout.max(Duration::from_millis(1)),
            count: Some(1),
            timeout,
            // One wait: the runtime's timer is fine, and the scrape-time
            // probe's runtime has no timer fd to spare.
            precise_timer: false,
            ..RunConfig::default()
        },
        phase: Duration::ZERO,
        events,
        stop: CancellationToken::new(),
        turnstile: None,
        abandon: None,
        timer: None,
    };
    let reader = probe.launch(&mut set, launch);
    let mut sample = None;
    while let Some(event) = rx.recv().await {
        match event {
            Event::Sample(s) => sample = Some(s),
            Event::Done { .. } => break,
        }
    }
    while set.join_next().await.is_some() {}
    let anomalies = reader();
    sample.map(|s| (s, anomalies))
}

/// Offset of a target's first slot within one interval: `index` of `of`
/// equal parts, so that targets sharing a schedule do not all fire in the
/// same instant. `prober run` passes the target's index among its targets;
/// the daemon a hash of job and target, stable across reloads.
pub fn phase(index: u64, of: u64, interval: Duration) -> Duration {
    if of <= 1 {
        return Duration::ZERO;
    }
    let ns = interval.as_nanos() * u128::from(index % of) / u128::from(of);
    Duration::from_nanos(u64::try_from(ns).unwrap_or(u64::MAX))
}

/// Where and how a [`Runnable`] runs.
#[derive(Debug, Clone)]
pub struct Launch {
    /// The target's id in events.
    pub id: usize,
    /// Its settings.
    pub cfg: RunConfig,
    /// Offset of its first slot (see [`phase`]).
    pub phase: Duration,
    /// Where samples go.
    pub events: mpsc::Sender<Event>,
    /// Stops the target.
    pub stop: CancellationToken,
    /// Targets that share one turnstile run one at a time, in the order
    /// they were launched: each waits for the one before it to finish (the
    /// self-test, so each protocol's figures are its own and not the
    /// others' contention for the CPUs). `None`: runs at once.
    pub turnstile: Option<Arc<tokio::sync::Mutex<()>>>,
    /// Stops waiting for the replies of probes in flight: each ends at once
    /// as a timeout (a second Ctrl-C). `None` (the daemon, sweep) waits for
    /// them, each up to its timeout, and adds nothing to a probe's path: a
    /// token, even one never cancelled, is a lock taken on every probe.
    pub abandon: Option<CancellationToken>,
    /// Where waits end when the target has no timerfd of its own
    /// ([`RunConfig::precise_timer`] off): the daemon's one high-resolution
    /// timer; `None`: the tokio timer (millisecond ticks).
    pub timer: Option<SharedTimer>,
}

/// A built probe, type-erased, ready to run: what a protocol's builder
/// returns (see [`crate::protocol::BuildFn`]).
pub trait Runnable: Send {
    /// Spawns [`run_target`] for this probe in `set` and returns a reader of
    /// its anomaly counters.
    fn launch(self: Box<Self>, set: &mut JoinSet<()>, launch: Launch) -> AnomalyReader;

    /// Its probe's [`Probe::source`].
    fn source(&self) -> Option<std::net::SocketAddr>;
}

struct Generic<P>(P);

impl<P: Probe> Runnable for Generic<P> {
    fn launch(self: Box<Self>, set: &mut JoinSet<()>, l: Launch) -> AnomalyReader {
        let probe = Arc::new(self.0);
        let reader = Arc::clone(&probe);
        set.spawn(run_launched(probe, l));
        Arc::new(move || reader.anomalies())
    }

    fn source(&self) -> Option<std::net::SocketAddr> {
        self.0.source()
    }
}

/// Type-erases `probe`: the one place the generic runner is instantiated
/// for a probe type, so runs need no per-protocol `match` and no boxed
/// future per probe.
pub fn runnable<P: Probe>(probe: P) -> Box<dyn Runnable> {
    Box::new(Generic(probe))
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
    let launch = Launch {
        id: target,
        cfg,
        phase,
        events,
        stop,
        turnstile: None,
        abandon: None,
        timer: None,
    };
    run_launched(probe, launch).await;
}

/// [`run_target`] with everything a [`Launch`] says.
async fn run_launched<P: Probe>(probe: Arc<P>, launch: Launch) {
    let Launch {
        id: target,
        cfg,
        phase,
        events,
        stop,
        turnstile,
        abandon,
        timer,
    } = launch;
    // Its turn, held until the target is done; a stop while waiting for it
    // ends the target with nothing sent.
    let _turn = match turnstile {
        None => None,
        Some(t) => tokio::select! {
            biased;
            () = stop.cancelled() => None,
            turn = t.lock_owned() => Some(turn),
        },
    };
    // The set-up, the warm-up and the closed loop are boxed: a task is as
    // large as the largest future it awaits inline, for its whole life,
    // and the steady state is the open loop (BENCHMARKS.md, "Memory at
    // 10,000 targets").
    tokio::select! {
        biased;
        () = stop.cancelled() => {}
        res = tokio::time::timeout(cfg.timeout, Box::pin(probe.prepare())) => match res {
            Ok(Ok(())) => {}
            // Each probe reports the same failure as its outcome, so it is
            // said once there, with the target's URL, not here as well.
            Ok(Err(error)) => tracing::debug!(%error, target, "probe setup failed"),
            Err(_) => tracing::debug!(target, "probe setup timed out"),
        }
    }
    for i in 0..cfg.warmup {
        if stop.is_cancelled() {
            break;
        }
        let _ = tokio::time::timeout(cfg.timeout, Box::pin(probe.probe(WARMUP_SEQ_BASE + i))).await;
    }
    let missed = if cfg.closed_loop() {
        Box::pin(closed_loop(
            &probe,
            target,
            &cfg,
            &events,
            &stop,
            abandon.as_ref(),
        ))
        .await;
        0
    } else {
        open_loop(
            &probe,
            target,
            &cfg,
            phase,
            timer,
            &events,
            (&stop, abandon.as_ref()),
        )
        .await
    };
    let done = Event::Done {
        target,
        anomalies: probe.anomalies(),
        missed,
    };
    let _ = Box::pin(events.send(done)).await;
}

async fn open_loop<P: Probe>(
    probe: &Arc<P>,
    target: usize,
    cfg: &RunConfig,
    phase: Duration,
    timer: Option<SharedTimer>,
    events: &mpsc::Sender<Event>,
    (stop, abandon): (&CancellationToken, Option<&CancellationToken>),
) -> u64 {
    let mut sleeper = Sleeper::new(cfg.pacing, cfg.precise_timer, cfg.interval).with_shared(timer);
    // On the shared timer, slot 0 falls on its grid: every slot is then due
    // at one of its wake-ups, not between two (see `SHARED_GRID`).
    let start = sleeper.start_at(Instant::now() + phase, cfg.interval);
    // Probes in flight are polled by this task, not spawned: the request
    // goes out the moment its slot is due, without a hand-off to another
    // worker thread (which costs a wake-up of tens of µs on an idle vCPU).
    let mut in_flight = FuturesUnordered::new();
    // Answered probes whose split comes later (`Probe::settle`): apart from
    // `in_flight`, so that they do not count against `max_in_flight` (the
    // next probe may be what brings their stamp). Made at the first such
    // probe: most protocols never settle, and an empty set is two
    // allocations a target (BENCHMARKS.md, "Memory at 10,000 targets,
    // fourth pass").
    let mut settling = None;
    // Samples the collector had no room for yet, in order. A sample goes
    // straight to the collector when none waits here and it has room (see
    // `hand_over`), so this stays empty and unallocated: a sample is 456
    // bytes, and room for one kept by every target was 4.5 MB at 10,000
    // targets (BENCHMARKS.md, "Memory at 10,000 targets, fourth pass").
    let mut finished = std::collections::VecDeque::new();
    let end = cfg.duration.map(|d| start + d);
    let mut pacer = Pacer::new(start, cfg.interval);
    // Pacing that spins starts each probe a little early, behind a gate that
    // opens at the deadline (see `Gate`).
    let lead = match cfg.pacing {
        Pacing::Timer => Duration::ZERO,
        Pacing::Spin | Pacing::Hybrid => GATE_LEAD,
    };
    let (mut seq, mut slots_used, mut missed) = (0u64, 0u64, 0u64);
    // One wait for the stop for the whole schedule: made anew in the loop,
    // each of a target's wake-ups registered a waiter on the token (with a
    // waker clone) and took it off again (the token's lock was 1.5 % of
    // the daemon's CPU at 10,000 targets).
    let cancelled = stop.cancelled();
    tokio::pin!(cancelled);
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
                () = &mut cancelled => break 'schedule,
                Some(sample) = in_flight.next(), if !in_flight.is_empty() => {
                    if unsettled(&sample) {
                        settling
                            .get_or_insert_with(FuturesUnordered::new)
                            .push(Box::pin(settled(&**probe, sample)));
                    } else if hand_over(events, &mut finished, sample).is_err() {
                        break 'schedule;
                    }
                }
                Some(sample) = next_of(&mut settling), if settling.as_ref().is_some_and(|s: &FuturesUnordered<_>| !s.is_empty()) => {
                    if hand_over(events, &mut finished, sample).is_err() {
                        break 'schedule;
                    }
                }
                // Hand samples to the collector only as it has room, so a slow
                // sink never stalls the schedule; they queue here meanwhile.
                // Boxed, and made only while samples wait: inline, the wait
                // for room was carried by every target's task for life.
                Some(permit) = OptionFuture::from((!finished.is_empty()).then(|| Box::pin(events.reserve()))) => match permit {
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
            // Boxed: a `FuturesUnordered` keeps a stub task the size of its
            // future for as long as it lives, a kilobyte or more a target
            // (BENCHMARKS.md, "Memory at 10,000 targets"); boxed, the stub
            // is a pointer, for one more allocation a probe.
            in_flight.push(Box::pin(one_probe(
                &**probe,
                target,
                seq,
                deadline,
                gate,
                cfg.timeout,
                abandon,
            )));
            seq += 1;
        }
        if cfg.count.is_some_and(|c| slots_used >= c) {
            break;
        }
    }
    // Probes in flight first (the last ones may not even be sent yet), then
    // hand everything over. Boxed, as the set-up is (see `run_launched`):
    // the sends hold a sample each.
    Box::pin(async move {
        while let Some(sample) = in_flight.next().await {
            if unsettled(&sample) {
                settling
                    .get_or_insert_with(FuturesUnordered::new)
                    .push(Box::pin(settled(&**probe, sample)));
            } else {
                finished.push_back(sample);
            }
        }
        while let Some(sample) = next_of(&mut settling).await {
            finished.push_back(sample);
        }
        for sample in finished {
            let _ = events.send(Event::Sample(sample)).await;
        }
    })
    .await;
    missed
}

async fn closed_loop<P: Probe>(
    probe: &Arc<P>,
    target: usize,
    cfg: &RunConfig,
    events: &mpsc::Sender<Event>,
    stop: &CancellationToken,
    abandon: Option<&CancellationToken>,
) {
    let next_seq = Arc::new(AtomicU64::new(0));
    let end = cfg.duration.map(|d| Instant::now() + d);
    let mut lanes = JoinSet::new();
    for _ in 0..cfg.burst {
        let (probe, events, stop) = (Arc::clone(probe), events.clone(), stop.clone());
        let abandon = abandon.cloned();
        let (next_seq, count, timeout) = (Arc::clone(&next_seq), cfg.count, cfg.timeout);
        lanes.spawn(async move {
            // Replies whose split comes later (`Probe::settle`) wait here
            // while the lane's next probes go out: the next one may be
            // what brings it.
            let mut settling = FuturesUnordered::new();
            // The latest such reply, not yet waiting: back to back, the
            // next reply carries its send part, so it is settled on the
            // spot once that reply is in. Waiting for it from the start
            // armed a timer and a wake-up for every probe, and the carried
            // part woke the lane inside the next probe's round trip.
            let mut held: Option<Sample> = None;
            'lane: while !stop.is_cancelled() && end.is_none_or(|end| Instant::now() < end) {
                let seq = next_seq.fetch_add(1, Ordering::Relaxed);
                if count.is_some_and(|c| seq >= c) {
                    break;
                }
                let probing = one_probe(
                    &*probe,
                    target,
                    seq,
                    Instant::now(),
                    Gate::open(),
                    timeout,
                    abandon.as_ref(),
                );
                tokio::pin!(probing);
                let sample = loop {
                    tokio::select! {
                        biased;
                        sample = &mut probing => break sample,
                        Some(done) = settling.next(), if !settling.is_empty() => {
                            if events.send(Event::Sample(done)).await.is_err() {
                                break 'lane;
                            }
                        }
                    }
                };
                if let Some(prev) = held.take() {
                    let mut settle = Box::pin(settled(&*probe, prev));
                    match (&mut settle).now_or_never() {
                        Some(done) => {
                            if events.send(Event::Sample(done)).await.is_err() {
                                break;
                            }
                        }
                        None => settling.push(settle),
                    }
                }
                if unsettled(&sample) {
                    held = Some(sample);
                } else if events.send(Event::Sample(sample)).await.is_err() {
                    break;
                }
                // What this reply settled goes out now, before the next
                // send, as a sample that needed no settling does. Handed over
                // while the next probe was in flight (and with the carried
                // stamp filed before the reply carrying it was delivered,
                // which woke this task twice), UDP back to back measured
                // client and responder wake-ups of 15-23 µs at the median,
                // against 9 and 6 µs with both changed.
                while let Some(Some(done)) = settling.next().now_or_never() {
                    if events.send(Event::Sample(done)).await.is_err() {
                        break 'lane;
                    }
                }
            }
            if let Some(prev) = held.take() {
                settling.push(Box::pin(settled(&*probe, prev)));
            }
            while let Some(done) = settling.next().await {
                if events.send(Event::Sample(done)).await.is_err() {
                    break;
                }
            }
        });
    }
    while lanes.join_next().await.is_some() {}
}

/// Gives `sample` to the collector now if none is queued in `finished`
/// before it and the collector has room, else queues it there; `Err` when
/// the collector has gone.
fn hand_over(
    events: &mpsc::Sender<Event>,
    finished: &mut std::collections::VecDeque<Sample>,
    sample: Sample,
) -> Result<(), ()> {
    if finished.is_empty() {
        match events.try_reserve() {
            Ok(permit) => permit.send(Event::Sample(sample)),
            Err(mpsc::error::TrySendError::Full(())) => finished.push_back(sample),
            Err(mpsc::error::TrySendError::Closed(())) => return Err(()),
        }
    } else {
        finished.push_back(sample);
    }
    Ok(())
}

/// The next of `set`'s futures to finish; `None` at once when there is no
/// set (or it is empty).
fn next_of<F: Future>(
    set: &mut Option<FuturesUnordered<F>>,
) -> impl Future<Output = Option<F::Output>> + '_ {
    std::future::poll_fn(move |cx| match set.as_mut() {
        Some(set) => set.poll_next_unpin(cx),
        None => std::task::Poll::Ready(None),
    })
}

/// True when part of the sample's split comes after its reply.
fn unsettled(sample: &Sample) -> bool {
    matches!(&sample.outcome, Outcome::Ok(reply)
        if reply.stamps.responder.is_some_and(|r| r.send_later))
}

/// The sample with its split completed by the probe, where part of it
/// comes after the reply ([`Probe::settle`]).
async fn settled<P: Probe>(probe: &P, mut sample: Sample) -> Sample {
    if unsettled(&sample)
        && let Outcome::Ok(reply) = &mut sample.outcome
    {
        *reply = probe.settle(sample.seq, *reply).await;
        if let Some(r) = reply.stamps.responder.as_mut() {
            r.send_later = false;
        }
    }
    sample
}

async fn one_probe<P: Probe>(
    probe: &P,
    target: usize,
    seq: u64,
    scheduled: Instant,
    gate: Gate,
    timeout: Duration,
    abandon: Option<&CancellationToken>,
) -> Sample {
    // A probe started ahead of its deadline (behind a gate) is timed out
    // from the deadline, like the others.
    let started = Instant::now().max(scheduled);
    let probing = probe.probe_at(seq, gate);
    let waiting = tokio::time::timeout_at(started + timeout, probing);
    let waited = match abandon {
        None => waiting.await,
        Some(abandon) => tokio::select! {
            r = waiting => r,
            // Abandoned: unanswered so far, so counted as a timeout.
            () = abandon.cancelled() => Ok(Err(crate::ProbeError::timeout("abandoned: stopped while in flight"))),
        },
    };
    let (sent, outcome, bytes) = match waited {
        Ok(Ok(reply)) => (reply.sent, Outcome::Ok(reply), reply.bytes),
        Ok(Err(error)) if error.is_timeout() => (started, Outcome::Timeout, 0),
        Ok(Err(error)) => (started, Outcome::Error(error), 0),
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

#[cfg(test)]
mod tests;

//! The one result pipeline: [`Collector`] owns every target's statistics and
//! the sinks; `prober run` drives it with [`collect`], the daemon from its
//! own loop, with the same calls.

use std::collections::BTreeMap;
use std::io;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::clock::Clock;
use crate::entry::{AnomalyReader, TargetEntry};
use crate::info::TargetInfo;
use crate::meta::RunMeta;
use crate::runner::Event;
use crate::sink::{Context, Sink};
use crate::stats::{Summary, TargetStats};

/// Owns the statistics of every target and one sink (a
/// [`crate::sink::Fanout`] for several), and feeds it every event.
#[derive(Debug)]
pub struct Collector<S> {
    meta: RunMeta,
    clock: Clock,
    /// Boxed: an entry is 832 bytes, and in a B-tree's nodes (eleven
    /// slots, two thirds full) it cost 1.3 kB a target (BENCHMARKS.md,
    /// "Memory at 10,000 targets").
    targets: BTreeMap<usize, Box<TargetEntry>>,
    counts_only: bool,
    started: bool,
    sink: S,
}

impl<S: Sink> Collector<S> {
    /// A collector for a run described by `meta`; with `counts_only`, no
    /// distributions are kept (see [`TargetStats::counts_only`]).
    pub fn new(meta: RunMeta, clock: Clock, sink: S, counts_only: bool) -> Self {
        Self {
            meta,
            clock,
            targets: BTreeMap::new(),
            counts_only,
            started: false,
            sink,
        }
    }

    fn parts(&mut self) -> (Context<'_>, &mut S) {
        let cx = Context {
            meta: &self.meta,
            clock: self.clock,
            targets: &self.targets,
        };
        (cx, &mut self.sink)
    }

    /// Calls [`Sink::start`] with the targets added so far.
    ///
    /// # Errors
    /// The sink's.
    pub fn start(&mut self) -> io::Result<()> {
        self.started = true;
        let (cx, sink) = self.parts();
        sink.start(&cx)
    }

    /// Adds a target; after [`Collector::start`], tells the sink.
    ///
    /// # Errors
    /// The sink's.
    pub fn add_target(&mut self, info: TargetInfo, live: AnomalyReader) -> io::Result<()> {
        let id = info.id;
        let stats = if self.counts_only {
            TargetStats::counts_only()
        } else {
            TargetStats::default()
        };
        let entry = TargetEntry::new(info, stats, live);
        self.targets.insert(id, Box::new(entry));
        if !self.started {
            return Ok(());
        }
        let (cx, sink) = self.parts();
        match cx.targets.get(&id) {
            Some(t) => sink.target_added(&cx, t),
            None => Ok(()),
        }
    }

    /// Removes a target, telling the sink first.
    ///
    /// # Errors
    /// The sink's.
    pub fn remove_target(&mut self, id: usize) -> io::Result<()> {
        let (cx, sink) = self.parts();
        let res = match cx.targets.get(&id) {
            Some(t) => sink.target_removed(&cx, t),
            None => Ok(()),
        };
        self.targets.remove(&id);
        res
    }

    /// Records one event. Returns the target's id when the event says it is
    /// done.
    ///
    /// # Errors
    /// The sink's; the sample is counted anyway.
    pub fn event(&mut self, ev: Event) -> io::Result<Option<usize>> {
        match ev {
            Event::Sample(sample) => {
                let Some(t) = self.targets.get_mut(&sample.target) else {
                    return Ok(None);
                };
                t.stats.record(&sample);
                let (cx, sink) = self.parts();
                match cx.targets.get(&sample.target) {
                    Some(t) => sink.record(&cx, t, &sample).map(|()| None),
                    None => Ok(None),
                }
            }
            Event::Done {
                target,
                anomalies,
                missed,
            } => {
                let Some(t) = self.targets.get_mut(&target) else {
                    return Ok(None);
                };
                if t.is_done() {
                    return Ok(None);
                }
                t.set_done(anomalies, missed);
                Ok(Some(target))
            }
        }
    }

    /// Periodic work of the sinks (flush, rotate, intervals).
    ///
    /// # Errors
    /// The sink's.
    pub fn tick(&mut self, now: Instant) -> io::Result<()> {
        let (cx, sink) = self.parts();
        sink.tick(&cx, now)
    }

    /// Reopens moved output files.
    ///
    /// # Errors
    /// The sink's.
    pub fn reopen(&mut self) -> io::Result<()> {
        let (cx, sink) = self.parts();
        sink.reopen(&cx)
    }

    /// One summary per target, in id order, without finishing.
    pub fn summaries(&self) -> Vec<Summary> {
        self.targets.values().map(|t| t.summary()).collect()
    }

    /// The summaries so far, given to [`Sink::interim`].
    ///
    /// # Errors
    /// The sink's.
    pub fn interim(&mut self) -> io::Result<()> {
        let summaries = self.summaries();
        let (cx, sink) = self.parts();
        sink.interim(&cx, &summaries)
    }

    /// The summaries, given to [`Sink::finish`].
    pub fn finish(&mut self) -> (Vec<Summary>, io::Result<()>) {
        let summaries = self.summaries();
        let (cx, sink) = self.parts();
        let res = sink.finish(&cx, &summaries);
        (summaries, res)
    }

    /// Every target.
    pub fn targets(&self) -> &BTreeMap<usize, Box<TargetEntry>> {
        &self.targets
    }

    /// The sink, e.g. to change a daemon job's files on reload.
    pub fn sink_mut(&mut self) -> &mut S {
        &mut self.sink
    }

    /// Calls `f` with the context and the sink, e.g. to finish a job's
    /// files, which needs both.
    pub fn with_sink<R>(&mut self, f: impl FnOnce(&Context<'_>, &mut S) -> R) -> R {
        let (cx, sink) = self.parts();
        f(&cx, sink)
    }
}

/// How often [`collect`] ticks the sinks: output reaches a terminal or a
/// pipe at most this long after a probe ends, without a write per probe at
/// high rates.
pub const TICK: Duration = Duration::from_millis(20);

/// Starts the sinks, then receives events until every target is done (or
/// every sender is gone), ticking the sinks every [`TICK`] and giving them
/// interim statistics on every message of `interim`, and finishes them with
/// the summaries, in target order.
///
/// # Errors
/// The first I/O error of the sink (a [`crate::sink::Fanout`] that skips
/// failing sinks returns none; take its error afterwards).
pub async fn collect<S: Sink>(
    mut events: mpsc::Receiver<Event>,
    collector: &mut Collector<S>,
    mut interim: Option<mpsc::Receiver<()>>,
) -> (Vec<Summary>, io::Result<()>) {
    let mut first_error = None;
    let mut note = |res: io::Result<()>| {
        if let Err(e) = res {
            first_error.get_or_insert(e);
        }
    };
    note(collector.start());
    let mut remaining = collector
        .targets()
        .values()
        .filter(|t| !t.is_done())
        .count();
    let mut tick = tokio::time::interval(TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    while remaining > 0 {
        tokio::select! {
            ev = events.recv() => {
                let Some(ev) = ev else { break };
                match collector.event(ev) {
                    Ok(Some(_)) => remaining -= 1,
                    Ok(None) => {}
                    Err(e) => note(Err(e)),
                }
            }
            now = tick.tick() => note(collector.tick(now)),
            Some(()) = async { interim.as_mut()?.recv().await }, if interim.is_some() => {
                note(collector.interim());
            }
        }
    }
    let (summaries, res) = collector.finish();
    note(res);
    (summaries, first_error.map_or(Ok(()), Err))
}

//! The [`Sink`] trait every output implements, and [`Fanout`], which feeds
//! several sinks as one.
//!
//! Sinks are push-driven by one task (the [`crate::collect::Collector`]), so
//! they never need locks. Every call gets a [`Context`]: the run's settings,
//! its clock and every target with its statistics so far, as ripgrep's
//! `Sink` gets its searcher. No sink stores or invents them.
//!
//! The sinks themselves (human, JSON lines, CSV, files, Prometheus) live in
//! the `prober-sinks` crate; this crate has no files or sockets.

use std::collections::BTreeMap;
use std::io;

use tokio::time::Instant;

use crate::clock::Clock;
use crate::entry::TargetEntry;
use crate::meta::RunMeta;
use crate::sample::Sample;
use crate::stats::Summary;

/// What every sink call may read.
#[derive(Debug, Clone, Copy)]
pub struct Context<'a> {
    /// The run's settings and environment.
    pub meta: &'a RunMeta,
    /// Maps the run's instants to wall-clock time.
    pub clock: Clock,
    /// Every current target by id, with its statistics so far.
    pub targets: &'a BTreeMap<usize, Box<TargetEntry>>,
}

/// Receives results. Errors are I/O errors of the sink's own output. Only
/// [`Sink::record`] is required; the hooks default to doing nothing.
pub trait Sink: Send {
    /// Once, before any sample, with the run's first targets.
    fn start(&mut self, _cx: &Context<'_>) -> io::Result<()> {
        Ok(())
    }

    /// A target was added after the start (daemon reload, discovery).
    fn target_added(&mut self, _cx: &Context<'_>, _target: &TargetEntry) -> io::Result<()> {
        Ok(())
    }

    /// A target is gone: its last sample was recorded. Its series and state
    /// can go.
    fn target_removed(&mut self, _cx: &Context<'_>, _target: &TargetEntry) -> io::Result<()> {
        Ok(())
    }

    /// Every finished probe, in completion order. `target`'s statistics
    /// already include it.
    fn record(&mut self, cx: &Context<'_>, target: &TargetEntry, sample: &Sample)
    -> io::Result<()>;

    /// Periodic work at `now`: flush buffered output, rotate files, close
    /// due intervals. Called at least every few tens of milliseconds.
    fn tick(&mut self, _cx: &Context<'_>, _now: Instant) -> io::Result<()> {
        Ok(())
    }

    /// Reopen output files whose path was moved away (SIGHUP after
    /// logrotate).
    fn reopen(&mut self, _cx: &Context<'_>) -> io::Result<()> {
        Ok(())
    }

    /// Statistics so far while the run goes on (SIGQUIT, as ping's Ctrl-\\).
    fn interim(&mut self, _cx: &Context<'_>, _summaries: &[Summary]) -> io::Result<()> {
        Ok(())
    }

    /// Once at the end, with one summary per target in id order (also after
    /// Ctrl-C). The sink flushes and completes its output.
    fn finish(&mut self, _cx: &Context<'_>, _summaries: &[Summary]) -> io::Result<()> {
        Ok(())
    }

    /// Something found that is not a probe (the daemon's path changes), as
    /// one JSON object with a `type`: sinks that write JSON lines write it
    /// as a line, the others ignore it.
    fn event(&mut self, _cx: &Context<'_>, _event: &serde_json::Value) -> io::Result<()> {
        Ok(())
    }
}

/// Several sinks fed as one. Each sink is called on its own, so one failing
/// sink does not cost the others a result.
pub struct Fanout {
    sinks: Vec<Box<dyn Sink>>,
    failed: Vec<bool>,
    skip_failed: bool,
    first_error: Option<io::Error>,
}

impl std::fmt::Debug for Fanout {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Fanout")
            .field("sinks", &self.sinks.len())
            .field("failed", &self.failed)
            .finish_non_exhaustive()
    }
}

impl Fanout {
    /// For a run: a sink that fails is skipped from then on and its first
    /// error kept for [`Fanout::take_error`]; every call returns `Ok`.
    pub fn skipping_failed(sinks: Vec<Box<dyn Sink>>) -> Self {
        let failed = vec![false; sinks.len()];
        Self {
            sinks,
            failed,
            skip_failed: true,
            first_error: None,
        }
    }

    /// For a daemon: every sink is tried on every call (a full disk may
    /// clear), and a call returns the first error of that call.
    pub fn retrying(sinks: Vec<Box<dyn Sink>>) -> Self {
        Self {
            skip_failed: false,
            ..Self::skipping_failed(sinks)
        }
    }

    /// The first error a skipped sink returned.
    pub fn take_error(&mut self) -> Option<io::Error> {
        self.first_error.take()
    }

    fn each(&mut self, mut f: impl FnMut(&mut dyn Sink) -> io::Result<()>) -> io::Result<()> {
        let mut first = Ok(());
        for (sink, failed) in self.sinks.iter_mut().zip(&mut self.failed) {
            if *failed {
                continue;
            }
            if let Err(e) = f(sink.as_mut()) {
                if self.skip_failed {
                    *failed = true;
                    self.first_error.get_or_insert(e);
                } else if first.is_ok() {
                    first = Err(e);
                }
            }
        }
        first
    }
}

impl Sink for Fanout {
    fn start(&mut self, cx: &Context<'_>) -> io::Result<()> {
        self.each(|s| s.start(cx))
    }

    fn target_added(&mut self, cx: &Context<'_>, t: &TargetEntry) -> io::Result<()> {
        self.each(|s| s.target_added(cx, t))
    }

    fn target_removed(&mut self, cx: &Context<'_>, t: &TargetEntry) -> io::Result<()> {
        self.each(|s| s.target_removed(cx, t))
    }

    fn record(&mut self, cx: &Context<'_>, t: &TargetEntry, sample: &Sample) -> io::Result<()> {
        self.each(|s| s.record(cx, t, sample))
    }

    fn tick(&mut self, cx: &Context<'_>, now: Instant) -> io::Result<()> {
        self.each(|s| s.tick(cx, now))
    }

    fn reopen(&mut self, cx: &Context<'_>) -> io::Result<()> {
        self.each(|s| s.reopen(cx))
    }

    fn interim(&mut self, cx: &Context<'_>, summaries: &[Summary]) -> io::Result<()> {
        self.each(|s| s.interim(cx, summaries))
    }

    fn finish(&mut self, cx: &Context<'_>, summaries: &[Summary]) -> io::Result<()> {
        self.each(|s| s.finish(cx, summaries))
    }

    fn event(&mut self, cx: &Context<'_>, event: &serde_json::Value) -> io::Result<()> {
        self.each(|s| s.event(cx, event))
    }
}

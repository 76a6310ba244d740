//! Where results go: the [`Sink`] trait, summary fields and built-in sinks.
//!
//! Sinks are synchronous and push-driven by the single collector task
//! ([`crate::collect`]): `start` once, `record` for every finished probe,
//! `finish` once with every target's summary, also after Ctrl-C.

mod csv;
mod fields;
mod human;
mod json;

use std::io::{self, Write};
use std::time::{Duration, Instant};

pub use self::csv::CsvSink;
pub use self::fields::{
    DEFAULT_CSV_FIELDS, DEFAULT_TABLE_FIELDS, FieldValue, field_value, parse_fields,
};
pub use self::human::HumanSink;
pub use self::json::{JsonSink, ProbeLine};

use crate::meta::RunMeta;
use crate::runner::{Clock, TargetInfo};
use crate::sample::Sample;
use crate::stats::Summary;

/// Receives results. Errors are I/O errors of the sink's own output.
pub trait Sink: Send {
    /// Called once before any sample, with the run's settings and targets.
    fn start(&mut self, _meta: &RunMeta, _targets: &[TargetInfo], _clock: Clock) -> io::Result<()> {
        Ok(())
    }

    /// Called for every finished probe, in completion order.
    fn record(&mut self, target: &TargetInfo, sample: &Sample) -> io::Result<()>;

    /// Called once at the end with one summary per target, in target order.
    fn finish(&mut self, summaries: &[Summary]) -> io::Result<()>;
}

/// How often a streaming sink flushes its buffered output at most.
const FLUSH_EVERY: Duration = Duration::from_millis(50);

/// A buffered writer that flushes at most every [`FLUSH_EVERY`], so lines
/// stream to a terminal or pipe without a syscall per probe at high rates.
struct Output {
    out: io::BufWriter<Box<dyn Write + Send>>,
    last_flush: Instant,
}

impl std::fmt::Debug for Output {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Output").finish_non_exhaustive()
    }
}

impl Output {
    fn new(out: Box<dyn Write + Send>) -> Self {
        Self {
            out: io::BufWriter::with_capacity(64 * 1024, out),
            last_flush: Instant::now(),
        }
    }

    fn maybe_flush(&mut self) -> io::Result<()> {
        if self.last_flush.elapsed() >= FLUSH_EVERY {
            self.last_flush = Instant::now();
            self.out.flush()?;
        }
        Ok(())
    }
}

impl Write for Output {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.out.write(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }
}

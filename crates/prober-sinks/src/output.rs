//! A buffered writer for streaming sinks.

use std::io::{self, Write};
use std::time::{Duration, Instant};

/// How often a streaming sink flushes its buffered output at most on its
/// own; the collector's tick flushes the rest within its period.
const FLUSH_EVERY: Duration = Duration::from_millis(20);

/// A buffered writer that flushes at most every [`FLUSH_EVERY`] while
/// writing, and on every [`Output::tick`] when it holds unflushed data, so
/// lines stream to a terminal or pipe as probes end without a syscall per
/// probe at high rates.
pub(crate) struct Output {
    out: io::BufWriter<Box<dyn Write + Send>>,
    last_flush: Instant,
    dirty: bool,
}

impl std::fmt::Debug for Output {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Output").finish_non_exhaustive()
    }
}

impl Output {
    pub(crate) fn new(out: Box<dyn Write + Send>) -> Self {
        Self {
            out: io::BufWriter::with_capacity(64 * 1024, out),
            last_flush: Instant::now(),
            dirty: false,
        }
    }

    /// Flushes if the last flush is long enough ago.
    pub(crate) fn maybe_flush(&mut self) -> io::Result<()> {
        if self.last_flush.elapsed() >= FLUSH_EVERY {
            self.flush()?;
        }
        Ok(())
    }

    /// Flushes what is buffered, if anything.
    pub(crate) fn tick(&mut self) -> io::Result<()> {
        if self.dirty {
            self.flush()?;
        }
        Ok(())
    }
}

impl Write for Output {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.dirty = true;
        self.out.write(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.last_flush = Instant::now();
        self.dirty = false;
        self.out.flush()
    }
}

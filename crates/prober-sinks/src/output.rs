//! Buffered writers that write whole records (lines) or none: [`Records`],
//! under every file sink, and `Output`, for streaming sinks.

use std::fs::File;
use std::io::{self, Write};
use std::os::fd::{AsFd, BorrowedFd};
use std::time::{Duration, Instant};

/// How often a streaming sink flushes its buffered output at most on its
/// own; the collector's tick flushes the rest within its period.
const FLUSH_EVERY: Duration = Duration::from_millis(20);

/// Bytes a [`Records`] buffers before it writes on its own.
const BUFFER: usize = 64 * 1024;

/// Where a streaming sink writes: standard output, a file, or memory.
pub trait Destination: Write + Send {
    /// The descriptor, when this is a regular file: a record a full disk
    /// tore is then cut off again.
    fn file(&self) -> Option<BorrowedFd<'_>> {
        None
    }
}

impl Destination for Vec<u8> {}

impl Destination for io::Sink {}

impl Destination for File {
    fn file(&self) -> Option<BorrowedFd<'_>> {
        Some(self.as_fd())
    }
}

impl Destination for io::Stdout {
    fn file(&self) -> Option<BorrowedFd<'_>> {
        Some(self.as_fd())
    }
}

/// Standard output written with `write(2)` directly, under a [`Records`]:
/// `io::Stdout` buffers lines of its own and reports them written before
/// they reach the file, so a full disk would tear a record that
/// [`Records`] could no longer cut off.
#[derive(Debug)]
pub struct RawStdout(io::Stdout);

impl RawStdout {
    /// Standard output, boxed for a sink.
    pub fn boxed() -> Box<dyn Destination> {
        Box::new(Self(io::stdout()))
    }
}

impl Write for RawStdout {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        // Whatever was printed through `io::Stdout` goes first.
        self.0.flush()?;
        nix::unistd::write(&self.0, buf).map_err(io::Error::from)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Destination for RawStdout {
    fn file(&self) -> Option<BorrowedFd<'_>> {
        Some(self.0.as_fd())
    }
}

/// Standard output when it is a pipe or a terminal, written by a thread of
/// its own. A reader that falls behind (`prober run -o json | slow`) then
/// holds up that thread, not the runtime that sends the probes: on one
/// runtime thread a full pipe stopped every target's schedule (1.47 s of
/// send lag in a four-target run whose output nobody read for 1.7 s). Up
/// to [`PIPE_QUEUE`] batches wait for the reader; past that a write blocks,
/// so memory stays bounded and no result is dropped.
///
/// A regular file keeps [`RawStdout`], whose failed writes can cut a torn
/// line off again.
#[derive(Debug)]
pub struct PipedStdout {
    tx: std::sync::mpsc::SyncSender<Piped>,
    failed: std::sync::Arc<Failed>,
    fd: io::Stdout,
}

/// What [`PipedStdout`]'s thread is handed.
#[derive(Debug)]
enum Piped {
    Bytes(Vec<u8>),
    /// Answer once everything before has been written.
    Drained(std::sync::mpsc::Sender<()>),
}

/// Batches (at most one per 20 ms flush, or 64 KiB) queued for a slow
/// reader of standard output before a write waits: 1024 × 64 KiB at most.
pub const PIPE_QUEUE: usize = 1024;

/// Waits until everything handed to a [`PipedStdout`] is written.
#[derive(Debug, Clone)]
pub struct PipeDrain {
    tx: std::sync::mpsc::SyncSender<Piped>,
    failed: std::sync::Arc<Failed>,
}

impl PipeDrain {
    /// Blocks until the thread has written everything handed to it so far.
    ///
    /// # Errors
    /// The write that failed, if one did (then the rest was not written).
    pub fn wait(&self) -> io::Result<()> {
        let (done, finished) = std::sync::mpsc::channel();
        if self.tx.send(Piped::Drained(done)).is_ok() {
            let _ = finished.recv();
        }
        failure(&self.failed)
    }
}

pub(crate) type Failed = std::sync::Mutex<Option<(io::ErrorKind, String)>>;

pub(crate) fn lock_failed(
    m: &Failed,
) -> std::sync::MutexGuard<'_, Option<(io::ErrorKind, String)>> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The writer thread's failure, every time it is asked (the thread writes
/// nothing after it).
pub(crate) fn failure(m: &Failed) -> io::Result<()> {
    match &*lock_failed(m) {
        Some((kind, msg)) => Err(io::Error::new(*kind, msg.clone())),
        None => Ok(()),
    }
}

impl PipedStdout {
    /// Standard output through a writer thread, and the handle that waits
    /// for it to finish.
    ///
    /// # Errors
    /// The thread cannot be started.
    pub fn start() -> io::Result<(Box<dyn Destination>, PipeDrain)> {
        let (tx, rx) = std::sync::mpsc::sync_channel::<Piped>(PIPE_QUEUE);
        let failed = std::sync::Arc::new(std::sync::Mutex::new(None));
        let on_thread = std::sync::Arc::clone(&failed);
        std::thread::Builder::new()
            .name("prober-stdout".to_owned())
            .spawn(move || {
                let mut out = RawStdout(io::stdout());
                let mut broken = false;
                for msg in rx {
                    match msg {
                        Piped::Bytes(bytes) if !broken => {
                            if let Err(e) = out.write_all(&bytes) {
                                *lock_failed(&on_thread) = Some((e.kind(), e.to_string()));
                                broken = true;
                            }
                        }
                        Piped::Bytes(_) => {}
                        Piped::Drained(done) => {
                            // Whatever was printed through `io::Stdout` since.
                            let _ = out.0.flush();
                            let _ = done.send(());
                        }
                    }
                }
            })?;
        let drain = PipeDrain {
            tx: tx.clone(),
            failed: std::sync::Arc::clone(&failed),
        };
        Ok((
            Box::new(Self {
                tx,
                failed,
                fd: io::stdout(),
            }),
            drain,
        ))
    }

    /// Standard output for a sink: through a thread when it is a pipe or a
    /// terminal, directly when it is a regular file (or the thread cannot
    /// start). The drain, where there is a thread.
    pub fn or_raw() -> (Box<dyn Destination>, Option<PipeDrain>) {
        let regular = nix::sys::stat::fstat(io::stdout().as_fd())
            .is_ok_and(|st| (st.st_mode & nix::libc::S_IFMT) == nix::libc::S_IFREG);
        if !regular && let Ok((out, drain)) = Self::start() {
            return (out, Some(drain));
        }
        (RawStdout::boxed(), None)
    }
}

impl Write for PipedStdout {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        failure(&self.failed)?;
        self.tx
            .send(Piped::Bytes(buf.to_vec()))
            .map_err(|_| io::Error::from(io::ErrorKind::BrokenPipe))?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        failure(&self.failed)
    }
}

impl Destination for PipedStdout {
    fn file(&self) -> Option<BorrowedFd<'_>> {
        Some(self.fd.as_fd())
    }
}

impl Destination for Box<dyn Destination> {
    fn file(&self) -> Option<BorrowedFd<'_>> {
        (**self).file()
    }
}

/// A buffer that writes only whole lines, and never leaves part of one in a
/// file: when a write fails part way (a full disk), the part of the last
/// line that reached a regular file is cut off again (`ftruncate`), the
/// lines that failed are dropped and counted, and the error is returned.
/// Writing resumes with the next line when space returns. So a reader never
/// sees a torn record, even after SIGTERM on a full disk.
///
/// A line still being written (no newline yet) stays buffered until its
/// newline comes; [`Records::flush_all`] writes it anyway.
pub struct Records<W: Destination> {
    inner: W,
    buf: Vec<u8>,
    dropped_lines: u64,
}

impl<W: Destination> std::fmt::Debug for Records<W> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Records")
            .field("buffered", &self.buf.len())
            .field("dropped_lines", &self.dropped_lines)
            .finish_non_exhaustive()
    }
}

impl<W: Destination> Records<W> {
    /// Buffers writes to `inner`.
    pub fn new(inner: W) -> Self {
        Self {
            inner,
            buf: Vec::with_capacity(BUFFER),
            dropped_lines: 0,
        }
    }

    /// The writer underneath.
    pub fn get_ref(&self) -> &W {
        &self.inner
    }

    /// Lines dropped because writing them failed.
    pub fn dropped_lines(&self) -> u64 {
        self.dropped_lines
    }

    /// True when nothing is buffered.
    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }

    /// Writes every whole line buffered.
    ///
    /// # Errors
    /// The writer's; the lines that failed are dropped (see the type).
    pub fn flush_lines(&mut self) -> io::Result<()> {
        let Some(end) = self.buf.iter().rposition(|&b| b == b'\n').map(|i| i + 1) else {
            return Ok(());
        };
        self.write_out(end)
    }

    /// Writes everything buffered, a line without its newline too (the end
    /// of the output).
    ///
    /// # Errors
    /// As [`Records::flush_lines`].
    pub fn flush_all(&mut self) -> io::Result<()> {
        self.write_out(self.buf.len())?;
        self.inner.flush()
    }

    fn write_out(&mut self, end: usize) -> io::Result<()> {
        let mut done = 0;
        while done < end {
            match self.inner.write(&self.buf[done..end]) {
                Ok(0) => return self.failed(done, end, io::ErrorKind::WriteZero.into()),
                Ok(n) => done += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return self.failed(done, end, e),
            }
        }
        self.buf.drain(..end);
        Ok(())
    }

    /// A write failed after `done` of `end` bytes: cut the torn line off
    /// the file and drop the lines that did not go out.
    fn failed(&mut self, done: usize, end: usize, e: io::Error) -> io::Result<()> {
        let whole = self.buf[..done]
            .iter()
            .rposition(|&b| b == b'\n')
            .map_or(0, |i| i + 1);
        let torn = (done - whole) as u64;
        if torn > 0
            && let Some(fd) = self.inner.file()
            && let Ok(st) = nix::sys::stat::fstat(fd)
            && (st.st_mode & nix::libc::S_IFMT) == nix::libc::S_IFREG
        {
            #[allow(clippy::cast_sign_loss)] // a file size
            let size = st.st_size as u64;
            #[allow(clippy::cast_possible_wrap)] // a file size
            let keep = size.saturating_sub(torn) as i64;
            // Back to the end of the last whole line, for a file not opened
            // to append (`prober run > file`), so the next line follows it.
            if nix::unistd::ftruncate(fd, keep).is_ok() {
                let _ = nix::unistd::lseek(fd, keep, nix::unistd::Whence::SeekSet);
            }
        }
        let lost = &self.buf[whole..end];
        self.dropped_lines += lost.iter().filter(|&&b| b == b'\n').count() as u64
            + u64::from(lost.last().is_some_and(|&b| b != b'\n'));
        self.buf.drain(..end);
        Err(e)
    }
}

impl<W: Destination> Write for Records<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.buf.extend_from_slice(buf);
        if self.buf.len() >= BUFFER {
            self.flush_lines()?;
        }
        Ok(buf.len())
    }

    /// Writes the whole lines buffered.
    fn flush(&mut self) -> io::Result<()> {
        self.flush_lines()?;
        self.inner.flush()
    }
}

/// A [`Records`] that flushes at most every [`FLUSH_EVERY`] while writing,
/// and on every [`Output::tick`] when it holds unflushed data, so lines
/// stream to a terminal or pipe as probes end without a syscall per probe
/// at high rates.
pub(crate) struct Output {
    out: Records<Box<dyn Destination>>,
    last_flush: Instant,
}

impl std::fmt::Debug for Output {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Output").finish_non_exhaustive()
    }
}

impl Output {
    pub(crate) fn new(out: Box<dyn Destination>) -> Self {
        Self {
            out: Records::new(out),
            last_flush: Instant::now(),
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
        if !self.out.is_empty() {
            self.flush()?;
        }
        Ok(())
    }
}

impl Write for Output {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.out.write(buf)
    }

    /// Writes everything: a sink flushes between lines, never inside one.
    fn flush(&mut self) -> io::Result<()> {
        self.last_flush = Instant::now();
        self.out.flush_all()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A file that takes `room` more bytes, then fails with ENOSPC.
    struct Full {
        file: File,
        room: usize,
    }

    impl Write for Full {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            if self.room == 0 {
                return Err(io::Error::from_raw_os_error(nix::libc::ENOSPC));
            }
            let n = buf.len().min(self.room);
            self.room -= n;
            self.file.write(&buf[..n])
        }

        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    impl Destination for Full {
        fn file(&self) -> Option<BorrowedFd<'_>> {
            Some(self.file.as_fd())
        }
    }

    #[test]
    fn a_full_disk_leaves_whole_lines_and_writing_resumes() {
        let path = std::env::temp_dir().join(format!("prober-records-{}", std::process::id()));
        let file = File::create(&path).unwrap();
        let mut r = Records::new(Full { file, room: 25 });
        for i in 0..5 {
            writeln!(r, "{{\"seq\":{i}}}").unwrap(); // 10 bytes each
        }
        assert!(r.flush().is_err());
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            "{\"seq\":0}\n{\"seq\":1}\n"
        );
        assert_eq!(r.dropped_lines(), 3);
        // Space returns: the next lines go out whole.
        r.inner.room = 100;
        write!(r, "{{\"seq\":5}}\n{{\"seq\":").unwrap();
        r.flush().unwrap();
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            "{\"seq\":0}\n{\"seq\":1}\n{\"seq\":5}\n"
        );
        // The unfinished line waits for its newline.
        writeln!(r, "6}}").unwrap();
        r.flush().unwrap();
        assert!(
            std::fs::read_to_string(&path)
                .unwrap()
                .ends_with("{\"seq\":6}\n")
        );
        let _ = std::fs::remove_file(&path);
    }
}

//! File sinks: probe lines as JSON lines or CSV, HdrHistogram interval logs,
//! the [`RotatingFile`] wrapper any of them can write through, and
//! [`ByJob`], which routes the daemon's samples to each job's files.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use hdrhistogram::Histogram;
use hdrhistogram::serialization::V2DeflateSerializer;
use hdrhistogram::serialization::interval_log::{IntervalLogWriterBuilder, Tag};
use prober_core::{Context, Fanout, Sample, Sink, Summary, TargetEntry};

use crate::json::ProbeLine;
use crate::output::{Failed, Records, failure, lock_failed};
use prober_core::logs::LogLimiter;

/// Checks that a sink file can be created or appended to at `path`: its
/// directory exists and is writable. Nothing is created.
///
/// # Errors
/// Names the path and what is wrong.
pub fn check_writable(path: &Path) -> io::Result<()> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let meta = std::fs::metadata(dir).map_err(|e| {
        io::Error::new(
            e.kind(),
            format!("directory {} of {}: {e}", dir.display(), path.display()),
        )
    })?;
    if !meta.is_dir() {
        return Err(io::Error::other(format!(
            "{} is not a directory",
            dir.display()
        )));
    }
    if path.exists() {
        OpenOptions::new().append(true).open(path).map_err(|e| {
            io::Error::new(e.kind(), format!("{} is not writable: {e}", path.display()))
        })?;
    } else if nix::unistd::access(dir, nix::unistd::AccessFlags::W_OK).is_err() {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!("directory {} is not writable", dir.display()),
        ));
    }
    Ok(())
}

/// Opens `path` for appending, creating the file (not its directory).
fn open_append(path: &Path) -> io::Result<File> {
    OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(|e| io::Error::new(e.kind(), format!("opening {}: {e}", path.display())))
}

/// Whether `path` no longer names the file `open` writes to: renamed or
/// removed (by logrotate, say), or replaced by another file.
fn moved(open: &File, path: &Path) -> bool {
    use std::os::unix::fs::MetadataExt as _;
    match (open.metadata(), std::fs::metadata(path)) {
        (Ok(a), Ok(b)) => (a.dev(), a.ino()) != (b.dev(), b.ino()),
        _ => true,
    }
}

/// When a [`RotatingFile`] rotates: by size, by age, or both.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Rotation {
    /// Rotate before a write would take the file above this size.
    pub bytes: Option<u64>,
    /// Rotate once the file is this old.
    pub age: Option<Duration>,
    /// Rotated files kept (`path.1` is the newest); 0 keeps none.
    pub keep: usize,
}

/// Writes a file's header; `true` when the file is new or empty.
pub type Header = Box<dyn Fn(&mut dyn Write, bool) -> io::Result<()> + Send>;

/// A buffered file, appended to, that rotates to `path.1`, `path.2`, ...
/// and reopens itself when its path was moved away. Every file sink writes
/// through one.
pub struct RotatingFile {
    path: PathBuf,
    rotation: Rotation,
    header: Option<Header>,
    out: Records<File>,
    size: u64,
    opened: Instant,
}

impl std::fmt::Debug for RotatingFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RotatingFile")
            .field("path", &self.path)
            .field("rotation", &self.rotation)
            .finish_non_exhaustive()
    }
}

impl RotatingFile {
    /// Opens (appending to) `path`; the header is written on every open.
    ///
    /// # Errors
    /// If the file cannot be opened or the header not written.
    pub fn open(path: &Path, rotation: Rotation, header: Option<Header>) -> io::Result<Self> {
        let (out, size) = Self::start(path, header.as_ref())?;
        Ok(Self {
            path: path.to_owned(),
            rotation,
            header,
            out,
            size,
            opened: Instant::now(),
        })
    }

    fn start(path: &Path, header: Option<&Header>) -> io::Result<(Records<File>, u64)> {
        let file = open_append(path)?;
        let size = file.metadata()?.len();
        let mut out = Records::new(file);
        if let Some(h) = header {
            h(&mut out, size == 0)?;
        }
        Ok((out, size))
    }

    /// The path written to.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn rotated(&self, n: usize) -> PathBuf {
        let mut p = self.path.clone().into_os_string();
        p.push(format!(".{n}"));
        PathBuf::from(p)
    }

    fn rotate(&mut self) -> io::Result<()> {
        self.out.flush_all()?;
        for n in (1..self.rotation.keep).rev() {
            let from = self.rotated(n);
            if from.exists() {
                std::fs::rename(&from, self.rotated(n + 1))?;
            }
        }
        let res = if self.rotation.keep > 0 {
            std::fs::rename(&self.path, self.rotated(1))
        } else {
            std::fs::remove_file(&self.path)
        };
        match res {
            // Already moved or removed (logrotate, a person): start anew.
            Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
            _ => {}
        }
        self.reset()
    }

    fn reset(&mut self) -> io::Result<()> {
        let (out, size) = Self::start(&self.path, self.header.as_ref())?;
        self.out = out;
        self.size = size;
        self.opened = Instant::now();
        Ok(())
    }

    /// Appends `buf`, rotating first when the rotation says so. A write
    /// never splits across files.
    ///
    /// # Errors
    /// I/O errors of the file or the rotation.
    pub fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        let too_big = self
            .rotation
            .bytes
            .is_some_and(|max| self.size > 0 && self.size + buf.len() as u64 > max);
        let too_old = self
            .rotation
            .age
            .is_some_and(|age| self.opened.elapsed() >= age);
        if too_big || too_old {
            self.rotate()?;
        }
        self.out.write_all(buf)?;
        self.size += buf.len() as u64;
        Ok(())
    }

    /// Flushes the buffer.
    ///
    /// # Errors
    /// The file's.
    pub fn flush(&mut self) -> io::Result<()> {
        let res = self.out.flush_all();
        if res.is_err() {
            // What reached the file: whole lines only (see `Records`).
            self.size = self.out.get_ref().metadata().map_or(self.size, |m| m.len());
        }
        res
    }

    /// True when the path now names another file or none.
    pub fn is_moved(&self) -> bool {
        moved(self.out.get_ref(), &self.path)
    }

    /// If the path was moved away: flushes to the old file, which is then
    /// complete, and goes on in a new file at the path. Returns whether it
    /// reopened.
    ///
    /// # Errors
    /// I/O errors of either file.
    pub fn reopen_if_moved(&mut self) -> io::Result<bool> {
        if !self.is_moved() {
            return Ok(false);
        }
        self.out.flush_all()?;
        self.reset()?;
        tracing::info!(path = %self.path.display(), "reopened a moved sink file");
        Ok(true)
    }
}

/// Batches queued for a [`ThreadedFile`]'s thread before a write waits:
/// at most 256 × 64 KiB, so memory stays bounded and no line is dropped.
pub const FILE_QUEUE: usize = 256;

/// What a [`ThreadedFile`]'s thread is handed, in order.
enum ToFile {
    Bytes(Vec<u8>),
    /// Flush, and file the result as the file's state.
    Flush,
    /// Flush, then go on in a new file if the path was moved away.
    Reopen,
    /// Flush, and answer with the result once everything before is
    /// written.
    Drain(std::sync::mpsc::Sender<io::Result<()>>),
}

/// A [`RotatingFile`] written by a thread of its own: its lines are made
/// on the caller's thread and handed over in batches, and the thread does
/// the writes, the flushes, the rotations and the reopens. The daemon's
/// collector runs on the thread that sends the probes, and a write can
/// wait in the kernel for milliseconds (ext4 taking its allocation lock
/// while writeback holds it: the largest send lags of the 10,000-target
/// benchmark, BENCHMARKS.md); here that wait holds up this thread only.
///
/// A flush hands the batch over and reports the state of the file as of
/// the thread's last flush (failing or not), so a failure or a recovery
/// shows one flush later than it happens. [`ThreadedFile::drain`] waits
/// for everything to be written; dropping it does too.
pub struct ThreadedFile {
    path: PathBuf,
    tx: Option<std::sync::mpsc::SyncSender<ToFile>>,
    batch: Vec<u8>,
    /// The error of the thread's last flush, if it failed.
    state: std::sync::Arc<Failed>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl std::fmt::Debug for ThreadedFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ThreadedFile")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

/// A batch is handed over once it holds this much (or at the next flush).
const BATCH: usize = 64 * 1024;

impl ThreadedFile {
    /// `file`, written from now on by a thread of its own.
    ///
    /// # Errors
    /// The thread cannot be started.
    pub fn start(mut file: RotatingFile) -> io::Result<Self> {
        let path = file.path().to_owned();
        let (tx, rx) = std::sync::mpsc::sync_channel::<ToFile>(FILE_QUEUE);
        let state = std::sync::Arc::new(Failed::default());
        let on_thread = std::sync::Arc::clone(&state);
        let thread = std::thread::Builder::new()
            .name("prober-file".to_owned())
            .spawn(move || {
                // A failed write's error, until the next flush files it.
                let mut failed: Option<io::Error> = None;
                let file_state = |failed: &mut Option<io::Error>, flushed: io::Result<()>| {
                    let res = match (failed.take(), flushed) {
                        (Some(e), _) | (None, Err(e)) => Err(e),
                        (None, Ok(())) => Ok(()),
                    };
                    *lock_failed(&on_thread) =
                        res.as_ref().err().map(|e| (e.kind(), e.to_string()));
                    res
                };
                for msg in rx {
                    match msg {
                        ToFile::Bytes(bytes) => {
                            // A line at a time: rotation by size is decided
                            // per line, and a line never splits across
                            // files (a batch as one write made files a
                            // batch long, whatever rotate_bytes said).
                            for line in bytes.split_inclusive(|&b| b == b'\n') {
                                if let Err(e) = file.write_all(line) {
                                    failed.get_or_insert(e);
                                }
                            }
                        }
                        ToFile::Flush => {
                            let flushed = file.flush();
                            let _ = file_state(&mut failed, flushed);
                        }
                        ToFile::Reopen => {
                            let reopened =
                                file.flush().and_then(|()| file.reopen_if_moved().map(drop));
                            let _ = file_state(&mut failed, reopened);
                        }
                        ToFile::Drain(done) => {
                            let flushed = file.flush();
                            let _ = done.send(file_state(&mut failed, flushed));
                        }
                    }
                }
                let _ = file.flush();
            })?;
        Ok(Self {
            path,
            tx: Some(tx),
            batch: Vec::with_capacity(BATCH),
            state,
            thread: Some(thread),
        })
    }

    /// The path written to.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Hands the batch over to the thread, if it holds anything.
    fn hand_over(&mut self) -> io::Result<()> {
        if self.batch.is_empty() {
            return Ok(());
        }
        let bytes = std::mem::replace(&mut self.batch, Vec::with_capacity(BATCH));
        self.send(ToFile::Bytes(bytes))
    }

    fn send(&self, msg: ToFile) -> io::Result<()> {
        let tx = self
            .tx
            .as_ref()
            .ok_or_else(|| io::Error::from(io::ErrorKind::BrokenPipe))?;
        tx.send(msg)
            .map_err(|_| io::Error::other("the file's writer thread is gone"))
    }

    /// Appends `buf` (whole lines) to the batch, and hands the batch over
    /// once it is full.
    ///
    /// # Errors
    /// Only if the thread is gone: the file's own errors come with
    /// [`ThreadedFile::flush`].
    pub fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        self.batch.extend_from_slice(buf);
        if self.batch.len() >= BATCH {
            self.hand_over()?;
        }
        Ok(())
    }

    /// Hands the batch over with a flush, without waiting for it; the
    /// file's state as of the thread's last flush.
    ///
    /// # Errors
    /// The last flush's, or a write's before it, on the thread.
    pub fn flush(&mut self) -> io::Result<()> {
        self.hand_over()?;
        self.send(ToFile::Flush)?;
        failure(&self.state)
    }

    /// Has the thread reopen the file if its path was moved away (after
    /// writing what came before to the old one). How that went shows at
    /// the next flush: the state before it is not the reopen's, and a
    /// file already failing would count a reopen that was not yet tried.
    ///
    /// # Errors
    /// Only if the thread is gone.
    pub fn reopen_if_moved(&mut self) -> io::Result<()> {
        self.hand_over()?;
        self.send(ToFile::Reopen)
    }

    /// Waits until everything handed over is written and flushed.
    ///
    /// # Errors
    /// That flush's, or a write's before it.
    pub fn drain(&mut self) -> io::Result<()> {
        let (done, finished) = std::sync::mpsc::channel();
        self.hand_over()?;
        self.send(ToFile::Drain(done))?;
        finished
            .recv()
            .map_err(|_| io::Error::other("the file's writer thread is gone"))?
    }
}

impl Drop for ThreadedFile {
    fn drop(&mut self) {
        let _ = self.hand_over();
        // The thread writes what is queued, then ends with the channel.
        drop(self.tx.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Every probe as a JSON line (`prober run -o json`'s probe lines, with
/// the job as `"probe"`), appended to a file.
#[derive(Debug)]
pub struct JsonLinesFile {
    file: ThreadedFile,
    /// One line's bytes, kept from line to line: serde_json's `to_vec`
    /// grew a new buffer from 128 bytes for every line (allocation and
    /// copying were about a tenth of the daemon's CPU at 10,000 targets).
    line: Vec<u8>,
}

impl JsonLinesFile {
    /// Opens `path` with `rotation`.
    ///
    /// # Errors
    /// If the file cannot be opened.
    pub fn open(path: &Path, rotation: Rotation) -> io::Result<Self> {
        Ok(Self {
            file: ThreadedFile::start(RotatingFile::open(path, rotation, None)?)?,
            line: Vec::with_capacity(1024),
        })
    }
}

/// Every probe as a CSV row ([`ProbeLine::csv_row`]), appended to a file
/// that starts with the header.
#[derive(Debug)]
pub struct CsvLinesFile {
    file: ThreadedFile,
}

impl CsvLinesFile {
    /// Opens `path` with `rotation`; a new or empty file gets the header.
    ///
    /// # Errors
    /// If the file cannot be opened.
    pub fn open(path: &Path, rotation: Rotation) -> io::Result<Self> {
        let header: Header = Box::new(|w, empty| {
            if empty {
                w.write_all(ProbeLine::csv_header())?;
            }
            Ok(())
        });
        Ok(Self {
            file: ThreadedFile::start(RotatingFile::open(path, rotation, Some(header))?)?,
        })
    }
}

macro_rules! file_hooks {
    () => {
        fn tick(&mut self, _cx: &Context<'_>, _now: tokio::time::Instant) -> io::Result<()> {
            self.file.flush()
        }

        fn reopen(&mut self, _cx: &Context<'_>) -> io::Result<()> {
            self.file.reopen_if_moved()
        }

        fn finish(&mut self, _cx: &Context<'_>, _summaries: &[Summary]) -> io::Result<()> {
            self.file.drain()
        }
    };
}

impl JsonLinesFile {
    /// Writes `value` as one line through the kept buffer.
    fn write_line(&mut self, value: &impl serde::Serialize) -> io::Result<()> {
        self.line.clear();
        serde_json::to_writer(&mut self.line, value)?;
        self.line.push(b'\n');
        // A line far longer than usual does not keep its memory.
        let wrote = self.file.write_all(&self.line);
        if self.line.capacity() > 64 * 1024 {
            self.line = Vec::with_capacity(1024);
        }
        wrote
    }
}

impl Sink for JsonLinesFile {
    fn record(&mut self, cx: &Context<'_>, t: &TargetEntry, s: &Sample) -> io::Result<()> {
        self.write_line(&ProbeLine::new(&t.info, s, &cx.clock))
    }

    /// A path change (or another event) as a line of its own, among the
    /// probe lines.
    fn event(&mut self, _cx: &Context<'_>, event: &serde_json::Value) -> io::Result<()> {
        self.write_line(event)
    }

    file_hooks!();
}

impl Sink for CsvLinesFile {
    fn record(&mut self, cx: &Context<'_>, t: &TargetEntry, s: &Sample) -> io::Result<()> {
        let line = ProbeLine::new(&t.info, s, &cx.clock).csv_row()?;
        self.file.write_all(&line)
    }

    file_hooks!();
}

/// An HdrHistogram interval log of RTT in ns, one tag per target, readable
/// by HistogramLogProcessor and other HdrHistogram tools: compressed V2
/// histograms (cookie `0x1c849314`), as interval logs carry them.
///
/// Intervals are exactly `every` long, on boundaries counted from the
/// file's start on the wall clock: a reply is counted in the interval in
/// which it is recorded, and an interval is written once its end has passed.
/// Only the last interval before the file is closed or reopened is shorter.
pub struct HlogFile {
    file: RotatingFile,
    serializer: V2DeflateSerializer,
    every: Duration,
    /// Wall-clock start of the log, ns since the Unix epoch.
    base_ns: u64,
    /// Start of the open interval, ns since the Unix epoch.
    start_ns: u64,
    /// By (target id, 0 for the RTT or 1 + the part's index): its tag and
    /// histogram.
    hists: HashMap<(usize, usize), (String, Histogram<u64>)>,
    /// Targets gone since the last interval: dropped once it is written.
    removed: std::collections::HashSet<usize>,
}

impl std::fmt::Debug for HlogFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HlogFile")
            .field("file", &self.file)
            .field("every", &self.every)
            .finish_non_exhaustive()
    }
}

fn hlog_header(start: SystemTime) -> Header {
    Box::new(move |w, _empty| {
        let mut serializer = V2DeflateSerializer::new();
        let mut buf = Vec::new();
        IntervalLogWriterBuilder::new()
            .add_comment("prober RTT interval log, values in ns, one tag per target")
            .with_start_time(start)
            .with_base_time(start)
            .begin_log_with(&mut buf, &mut serializer)?;
        w.write_all(&buf)?;
        writeln!(
            w,
            "\"StartTimestamp\",\"Interval_Length\",\"Interval_Max\",\"Interval_Compressed_Histogram\""
        )
    })
}

fn ns_of(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

impl HlogFile {
    /// Opens `path` (appending) with intervals of `every`, starting now.
    ///
    /// # Errors
    /// If the file cannot be opened.
    pub fn open(path: &Path, every: Duration) -> io::Result<Self> {
        let now = SystemTime::now();
        let file = RotatingFile::open(path, Rotation::default(), Some(hlog_header(now)))?;
        let every = every.max(Duration::from_millis(1));
        Ok(Self {
            file,
            serializer: V2DeflateSerializer::new(),
            every,
            base_ns: ns_of(now),
            start_ns: ns_of(now),
            hists: HashMap::new(),
            removed: std::collections::HashSet::new(),
        })
    }

    fn every_ns(&self) -> u64 {
        u64::try_from(self.every.as_nanos()).unwrap_or(u64::MAX)
    }

    /// Writes every interval that ended by `now_ns` (wall clock, as the
    /// file's own times). Empty intervals are skipped at once, so a jump of
    /// the wall clock costs no loop per interval.
    fn close_due(&mut self, now_ns: u64) -> io::Result<()> {
        let every = self.every_ns().max(1);
        while now_ns >= self.start_ns.saturating_add(every) {
            if self.hists.values().all(|(_, h)| h.is_empty()) {
                let skip = (now_ns - self.start_ns) / every;
                self.start_ns = self.start_ns.saturating_add(skip.saturating_mul(every));
                self.forget_removed();
                break;
            }
            self.write_interval(self.every)?;
        }
        Ok(())
    }

    fn forget_removed(&mut self) {
        if !self.removed.is_empty() {
            let removed = std::mem::take(&mut self.removed);
            self.hists.retain(|(id, _), _| !removed.contains(id));
        }
    }

    fn write_interval(&mut self, length: Duration) -> io::Result<()> {
        let start = Duration::from_nanos(self.start_ns.saturating_sub(self.base_ns));
        let mut buf = Vec::new();
        {
            let mut w =
                IntervalLogWriterBuilder::new().begin_log_with(&mut buf, &mut self.serializer)?;
            let mut ids: Vec<(usize, usize)> = self.hists.keys().copied().collect();
            ids.sort_unstable();
            for id in ids {
                let (tag, h) = &self.hists[&id];
                if h.is_empty() {
                    continue;
                }
                w.write_histogram(h, start, length, Tag::new(tag))
                    .map_err(io::Error::other)?;
            }
        }
        // Written first: a failed write keeps the interval for the next try.
        self.file.write_all(&buf)?;
        for (_, h) in self.hists.values_mut() {
            h.reset();
        }
        self.start_ns = self.start_ns.saturating_add(self.every_ns());
        self.forget_removed();
        self.file.flush()
    }

    /// Writes the open interval, as long as it has run, ending the file.
    fn close_partial(&mut self) -> io::Result<()> {
        let now = ns_of(SystemTime::now());
        self.close_due(now)?;
        let length = Duration::from_nanos(now.saturating_sub(self.start_ns));
        if self.hists.values().any(|(_, h)| !h.is_empty()) {
            self.write_interval(length)?;
        }
        self.file.flush()
    }
}

impl Sink for HlogFile {
    fn record(&mut self, _cx: &Context<'_>, t: &TargetEntry, s: &Sample) -> io::Result<()> {
        let prober_core::Outcome::Ok(reply) = &s.outcome else {
            return Ok(());
        };
        // The file's times are the wall clock's (its header says when it
        // started), so intervals close on that clock too; a sample is
        // recorded even when writing the interval before it failed.
        let closed = self.close_due(prober_core::clock::unix_now_ns());
        let ns = u64::try_from(reply.rtt().as_nanos()).unwrap_or(u64::MAX);
        let values = std::iter::once(Some(ns)).chain(reply.parts().list());
        for (k, v) in values.enumerate() {
            let Some(v) = v else { continue };
            let (_, h) = self.hists.entry((t.info.id, k)).or_insert_with(|| {
                // Tags may not contain commas or whitespace; a part's tag is
                // the target's with `#part` after it.
                let mut tag: String = t
                    .info
                    .target
                    .chars()
                    .map(|c| {
                        if c == ',' || c.is_whitespace() {
                            '_'
                        } else {
                            c
                        }
                    })
                    .collect();
                if k > 0 {
                    tag.push('#');
                    tag.push_str(prober_core::Parts::NAMES[k - 1]);
                }
                (tag, prober_core::stats::histogram())
            });
            h.saturating_record(v.max(1));
        }
        closed
    }

    fn target_removed(&mut self, _cx: &Context<'_>, t: &TargetEntry) -> io::Result<()> {
        // Keep its samples of the open interval; drop them once written.
        self.removed.insert(t.info.id);
        Ok(())
    }

    fn tick(&mut self, _cx: &Context<'_>, _now: tokio::time::Instant) -> io::Result<()> {
        self.close_due(prober_core::clock::unix_now_ns())
    }

    fn reopen(&mut self, _cx: &Context<'_>) -> io::Result<()> {
        if !self.file.is_moved() {
            return Ok(());
        }
        self.close_partial()?;
        let path = self.file.path().to_owned();
        *self = Self::open(&path, self.every)?;
        tracing::info!(path = %path.display(), "reopened a moved sink file");
        Ok(())
    }

    fn finish(&mut self, _cx: &Context<'_>, _summaries: &[Summary]) -> io::Result<()> {
        self.close_partial()
    }
}

/// How often a job whose files keep failing is logged again.
pub const FAILURE_LOG_EVERY: Duration = Duration::from_secs(60);

/// Per job, the writes its files failed: shared with the daemon's metrics,
/// which read it at scrape time.
#[derive(Debug, Default)]
pub struct SinkFailures(std::sync::Mutex<std::collections::BTreeMap<String, JobFailures>>);

/// One job's failed writes.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct JobFailures {
    /// Operations on the job's files that failed (a write of samples, a
    /// flush, a reopen; for a file with a thread of its own, its flushes,
    /// which report its writes), since the daemon started.
    pub errors: u64,
    /// Whether the last operation failed.
    pub failing: bool,
}

impl SinkFailures {
    /// Every job seen so far, by name.
    pub fn snapshot(&self) -> Vec<(String, JobFailures)> {
        self.lock().iter().map(|(j, f)| (j.clone(), *f)).collect()
    }

    /// Counts one operation on `job`'s files; whether the one before it
    /// failed.
    fn record(&self, job: &str, failed: bool) -> bool {
        let mut all = self.lock();
        let f = all.entry(job.to_owned()).or_default();
        f.errors += u64::from(failed);
        std::mem::replace(&mut f.failing, failed)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, std::collections::BTreeMap<String, JobFailures>> {
        // A panic elsewhere leaves plain counters behind: still good.
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// The daemon's file sinks: one [`Fanout`] per job, each sample routed to
/// its target's job. Each file of a job is tried on every sample even when
/// another fails, so a full disk under one file costs only that file's
/// lines. A job whose files fail is logged when the failures start, then at
/// most once per [`FAILURE_LOG_EVERY`] while they go on, and once when
/// writing works again; every failure is counted in [`SinkFailures`].
#[derive(Debug)]
pub struct ByJob {
    jobs: HashMap<String, Fanout>,
    /// Jobs whose files are failing, with their log lines held back.
    failing: LogLimiter<String>,
    failures: std::sync::Arc<SinkFailures>,
    /// Lines logged about failures (for tests).
    logged: u64,
}

impl Default for ByJob {
    fn default() -> Self {
        Self {
            jobs: HashMap::new(),
            failing: LogLimiter::new(FAILURE_LOG_EVERY),
            failures: std::sync::Arc::default(),
            logged: 0,
        }
    }
}

impl ByJob {
    /// Sets (or replaces) the sinks of `job`; the old ones are finished.
    pub fn insert(&mut self, cx: &Context<'_>, job: &str, sinks: Fanout) {
        if let Some(mut old) = self.jobs.insert(job.to_owned(), sinks) {
            let _ = old.finish(cx, &[]);
        }
    }

    /// Finishes and removes the sinks of `job`.
    pub fn remove(&mut self, cx: &Context<'_>, job: &str) {
        if let Some(mut old) = self.jobs.remove(job)
            && let Err(error) = old.finish(cx, &[])
        {
            tracing::error!(%job, %error, "closing sinks failed");
        }
        // Its series go with it, as those of removed targets do.
        self.failing.forget(job);
        self.failures.lock().remove(job);
    }

    /// Hands `event` to `job`'s sinks (its JSON lines file writes it).
    pub fn event(&mut self, cx: &Context<'_>, job: &str, event: &serde_json::Value) {
        if let Some(sinks) = self.jobs.get_mut(job)
            && let Err(e) = sinks.event(cx, event)
        {
            self.note(job, Err(e), "writing events");
        }
    }

    /// True when `job` has sinks.
    pub fn contains(&self, job: &str) -> bool {
        self.jobs.contains_key(job)
    }

    /// The failure counters, for the daemon's metrics.
    pub fn failures(&self) -> std::sync::Arc<SinkFailures> {
        std::sync::Arc::clone(&self.failures)
    }

    fn note(&mut self, job: &str, res: io::Result<()>, what: &str) {
        let was_failing = self.failures.record(job, res.is_err());
        match res {
            Ok(()) => {
                if let Some(held) = self.failing.forget(job) {
                    self.logged += 1;
                    tracing::warn!(
                        %job,
                        failed_since_last_log = held,
                        "sink files are written again"
                    );
                }
            }
            Err(error) => {
                let Some(held) = self.failing.check(job.to_owned(), Instant::now()) else {
                    return;
                };
                self.logged += 1;
                if was_failing {
                    tracing::error!(
                        %job,
                        %error,
                        failed_since_last_log = held,
                        "{what} still failing"
                    );
                } else {
                    tracing::error!(%job, %error, "{what} failed; probing goes on, and the files are tried again on every sample");
                }
            }
        }
    }

    /// Runs `f` on every job's files; with `flushed`, success means the
    /// lines reached the files, and ends a streak of failures.
    fn each(
        &mut self,
        what: &str,
        flushed: bool,
        mut f: impl FnMut(&mut Fanout) -> io::Result<()>,
    ) {
        let results: Vec<(String, io::Result<()>)> = self
            .jobs
            .iter_mut()
            .map(|(job, s)| (job.clone(), f(s)))
            .collect();
        for (job, res) in results {
            if flushed || res.is_err() {
                self.note(&job, res, what);
            }
        }
    }
}

impl Sink for ByJob {
    fn record(&mut self, cx: &Context<'_>, t: &TargetEntry, s: &Sample) -> io::Result<()> {
        let Some(job) = t.info.job.as_deref() else {
            return Ok(());
        };
        if let Some(sinks) = self.jobs.get_mut(job) {
            // A sample that only reached a buffer proves nothing: the
            // flush on the next tick tells whether writing works again.
            if let Err(e) = sinks.record(cx, t, s) {
                self.note(job, Err(e), "writing samples");
            }
        }
        Ok(())
    }

    fn target_removed(&mut self, cx: &Context<'_>, t: &TargetEntry) -> io::Result<()> {
        if let Some(sinks) = t.info.job.as_deref().and_then(|j| self.jobs.get_mut(j)) {
            sinks.target_removed(cx, t)?;
        }
        Ok(())
    }

    fn tick(&mut self, cx: &Context<'_>, now: tokio::time::Instant) -> io::Result<()> {
        self.each("flushing sinks", true, |s| s.tick(cx, now));
        Ok(())
    }

    fn reopen(&mut self, cx: &Context<'_>) -> io::Result<()> {
        self.each("reopening sink files", false, |s| s.reopen(cx));
        Ok(())
    }

    fn finish(&mut self, cx: &Context<'_>, summaries: &[Summary]) -> io::Result<()> {
        self.each("closing sinks", true, |s| s.finish(cx, summaries));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An empty directory of the temporary one, for this test alone.
    fn fresh_dir(tag: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("prober-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn rotates_by_size_and_keeps_n() {
        let dir = fresh_dir("rot");
        let path = dir.join("x.jsonl");
        let rotation = Rotation {
            bytes: Some(100),
            age: None,
            keep: 2,
        };
        let mut j = RotatingFile::open(&path, rotation, None).unwrap();
        for i in 0..10 {
            j.write_all(format!("{{\"n\":{i:040}}}\n").as_bytes())
                .unwrap();
        }
        j.flush().unwrap();
        let read = |p: &Path| std::fs::read_to_string(p).unwrap_or_default();
        assert!(read(&path).lines().count() <= 2);
        assert!(j.rotated(1).exists() && j.rotated(2).exists() && !j.rotated(3).exists());
        // Rotation never splits or loses the newest lines.
        assert!(read(&path).contains(&format!("{:040}", 9)));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn rotation_goes_on_when_the_file_was_moved_away() {
        let dir = fresh_dir("rot-gone");
        let path = dir.join("x.jsonl");
        let rotation = Rotation {
            bytes: Some(10),
            age: None,
            keep: 1,
        };
        let mut f = RotatingFile::open(&path, rotation, None).unwrap();
        f.write_all(b"0123456789\n").unwrap();
        f.flush().unwrap();
        std::fs::remove_file(&path).unwrap();
        // The next write rotates a file that is gone: it starts a new one.
        f.write_all(b"abc\n").unwrap();
        f.flush().unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "abc\n");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn an_idle_hlog_skips_empty_intervals_at_once() {
        let dir = fresh_dir("hlog-skip");
        let mut h = HlogFile::open(&dir.join("x.hlog"), Duration::from_millis(1)).unwrap();
        let start = h.start_ns;
        // A day later (a wall clock stepped forward): one step, no loop of
        // 86 million empty intervals.
        let day = 86_400_000_000_000;
        h.close_due(start + day + 500_000).unwrap();
        assert_eq!(h.start_ns, start + day);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn checks_directories_without_creating_them() {
        let dir = std::env::temp_dir().join(format!("prober-chk-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let err = check_writable(&dir.join("x.jsonl"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("directory"), "{err}");
        assert!(!dir.exists());
        std::fs::create_dir_all(&dir).unwrap();
        check_writable(&dir.join("x.jsonl")).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A write that cannot go on (a pipe nobody reads, as a disk that
    /// stalls) holds the file's thread, never its caller: every line is
    /// handed over and flushed without waiting, and all of them arrive,
    /// in order, once the reader reads.
    #[test]
    fn a_stalled_write_holds_the_files_thread_not_its_caller() {
        use std::io::Read as _;
        use std::os::unix::fs::OpenOptionsExt as _;
        let dir = fresh_dir("stall");
        let fifo = dir.join("lines");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).unwrap();
        // Open for reading first (without waiting for a writer), so the
        // file's open does not wait for a reader.
        let mut reader = OpenOptions::new()
            .read(true)
            .custom_flags(nix::libc::O_NONBLOCK)
            .open(&fifo)
            .unwrap();
        let file = RotatingFile::open(&fifo, Rotation::default(), None).unwrap();
        let mut f = ThreadedFile::start(file).unwrap();
        // 1 MiB of lines, 16 times what a pipe holds; nothing is read yet.
        let line = |i: usize| format!("{i:0>1023}\n");
        let (done, finished) = std::sync::mpsc::channel();
        let writer = std::thread::spawn(move || {
            for i in 0..1024 {
                f.write_all(line(i).as_bytes()).unwrap();
            }
            let flushed = f.flush();
            done.send(()).unwrap();
            (f, flushed)
        });
        finished
            .recv_timeout(Duration::from_secs(20))
            .expect("the caller waited for the pipe's reader");
        let (mut f, flushed) = writer.join().unwrap();
        assert!(flushed.is_ok(), "{flushed:?}");
        let got = std::thread::spawn(move || {
            let mut all = Vec::new();
            let mut buf = vec![0u8; 65_536];
            while all.len() < 1024 * 1024 {
                match reader.read(&mut buf) {
                    Ok(0) => break,
                    Ok(n) => all.extend_from_slice(&buf[..n]),
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                        std::thread::sleep(Duration::from_millis(1));
                    }
                    Err(e) => panic!("{e}"),
                }
            }
            all
        });
        f.drain().unwrap();
        let all = got.join().unwrap();
        let want: String = (0..1024).map(line).collect();
        assert!(
            all == want.as_bytes(),
            "{} of {} bytes, in order?",
            all.len(),
            want.len()
        );
        drop(f);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Through its thread a file still rotates by the line: with room for
    /// two lines a file, every file holds two (a batch written as one
    /// write made one file of them all).
    #[test]
    fn a_threaded_file_rotates_by_the_line() {
        let dir = fresh_dir("trot");
        let path = dir.join("x.jsonl");
        let rotation = Rotation {
            bytes: Some(100),
            age: None,
            keep: 2,
        };
        let file = RotatingFile::open(&path, rotation, None).unwrap();
        let mut f = ThreadedFile::start(file).unwrap();
        for i in 0..9 {
            f.write_all(format!("{{\"n\":{i:040}}}\n").as_bytes())
                .unwrap();
        }
        f.drain().unwrap();
        drop(f);
        let lines = |p: &Path| std::fs::read_to_string(p).unwrap().lines().count();
        assert_eq!(lines(&path), 1, "the newest file: the ninth line");
        assert_eq!(lines(&dir.join("x.jsonl.1")), 2);
        assert_eq!(lines(&dir.join("x.jsonl.2")), 2);
        assert!(!dir.join("x.jsonl.3").exists(), "two kept");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A file's failure shows in the flushes after the thread met it, and
    /// in the drain; and is gone once a flush succeeds again. `/dev/full`
    /// fails every write with ENOSPC.
    #[test]
    fn a_threaded_files_failures_show_in_its_flushes() {
        let file = RotatingFile::open(Path::new("/dev/full"), Rotation::default(), None).unwrap();
        let mut f = ThreadedFile::start(file).unwrap();
        f.write_all(b"{\"n\":1}\n").unwrap();
        let err = f.drain().unwrap_err();
        assert_eq!(err.raw_os_error(), Some(28), "{err}");
        f.write_all(b"{\"n\":2}\n").unwrap();
        assert!(f.flush().is_err(), "the last flush failed");
        // Its line was dropped there: a drain has nothing to write, and
        // works; a line after it fails again.
        f.drain().unwrap();
        f.write_all(b"{\"n\":3}\n").unwrap();
        assert!(f.drain().is_err());

        // A file that works: every flush after the first drain is fine.
        let dir = fresh_dir("tf");
        let path = dir.join("x.jsonl");
        let mut f =
            ThreadedFile::start(RotatingFile::open(&path, Rotation::default(), None).unwrap())
                .unwrap();
        f.write_all(b"{\"n\":1}\n").unwrap();
        f.drain().unwrap();
        f.write_all(b"{\"n\":2}\n").unwrap();
        f.flush().unwrap();
        drop(f);
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            "{\"n\":1}\n{\"n\":2}\n",
            "dropped, it wrote the rest"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A sink that fails while its switch is on, like a file on a full disk.
    struct Flaky(std::sync::Arc<std::sync::atomic::AtomicBool>);

    impl Sink for Flaky {
        fn record(&mut self, _: &Context<'_>, _: &TargetEntry, _: &Sample) -> io::Result<()> {
            if self.0.load(std::sync::atomic::Ordering::Relaxed) {
                Err(io::Error::from_raw_os_error(28))
            } else {
                Ok(())
            }
        }
    }

    #[test]
    fn a_failing_file_is_logged_once_a_period_counted_and_spares_the_others() {
        use prober_core::{Clock, Collector, Event, Outcome, RunConfig, RunMeta, TargetInfo};
        use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
        let dir = fresh_dir("byjob");
        let full = std::sync::Arc::new(AtomicBool::new(false));
        let csv = CsvLinesFile::open(&dir.join("ok.csv"), Rotation::default()).unwrap();
        let mut by_job = ByJob {
            failing: LogLimiter::new(Duration::from_millis(200)),
            ..ByJob::default()
        };
        let failures = by_job.failures();
        let meta = RunMeta::new("test", &RunConfig::default());
        let fanout = Fanout::retrying(vec![
            Box::new(Flaky(std::sync::Arc::clone(&full))),
            Box::new(csv),
        ]);
        by_job.jobs.insert("j".to_owned(), fanout);
        let mut c = Collector::new(meta, Clock::now(), by_job, true);
        let mut info = TargetInfo::new(1, "udp://h:1", "udp", "h:1", None);
        info.job = Some("j".to_owned());
        c.add_target(info, std::sync::Arc::new(Default::default))
            .unwrap();
        c.start().unwrap();
        let mut seq = 0;
        let mut probe = |c: &mut Collector<ByJob>| {
            let now = tokio::time::Instant::now();
            c.event(Event::Sample(Sample {
                target: 1,
                seq,
                scheduled: now,
                sent: now,
                outcome: Outcome::Timeout,
                bytes: 0,
            }))
            .unwrap();
            seq += 1;
        };
        for _ in 0..3 {
            probe(&mut c);
        }
        full.store(true, Relaxed);
        for _ in 0..50 {
            probe(&mut c);
        }
        // 50 failures, one line about them.
        assert_eq!(c.sink_mut().logged, 1);
        let snap = failures.snapshot();
        assert_eq!(
            snap,
            vec![(
                "j".to_owned(),
                JobFailures {
                    errors: 50,
                    failing: true
                }
            )]
        );
        // A period later, still failing: one more line.
        std::thread::sleep(Duration::from_millis(250));
        for _ in 0..50 {
            probe(&mut c);
        }
        assert_eq!(c.sink_mut().logged, 2);
        // Space again: one line says so, and the counter keeps its total.
        full.store(false, Relaxed);
        for _ in 0..5 {
            probe(&mut c);
        }
        // Buffered samples prove nothing; the flush on the tick does.
        assert_eq!(c.sink_mut().logged, 2);
        c.tick(tokio::time::Instant::now()).unwrap();
        assert_eq!(c.sink_mut().logged, 3);
        assert_eq!(
            failures.snapshot()[0].1,
            JobFailures {
                errors: 100,
                failing: false
            }
        );
        let _ = c.finish();
        // The other file of the job missed nothing.
        let text = std::fs::read_to_string(dir.join("ok.csv")).unwrap();
        assert_eq!(text.lines().count(), 1 + 108, "{text}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

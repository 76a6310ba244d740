//! File sinks of the daemon: JSON lines (rotated by size or age), CSV and
//! HdrHistogram interval logs.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use hdrhistogram::Histogram;
use hdrhistogram::serialization::V2Serializer;
use hdrhistogram::serialization::interval_log::{IntervalLogWriterBuilder, Tag};
use prober_core::runner::Clock;
use prober_core::sink::ProbeLine;
use prober_core::{Sample, TargetInfo};

use super::config::{JsonlSink, Sinks};

fn open_append(path: &Path) -> io::Result<File> {
    if let Some(dir) = path.parent()
        && !dir.as_os_str().is_empty()
    {
        std::fs::create_dir_all(dir)?;
    }
    OpenOptions::new().create(true).append(true).open(path)
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

/// A JSON lines file that rotates to `path.1`, `path.2`, ... (newest first).
struct Jsonl {
    cfg: JsonlSink,
    out: BufWriter<File>,
    size: u64,
    opened: Instant,
}

impl Jsonl {
    fn open(cfg: JsonlSink) -> io::Result<Self> {
        let file = open_append(&cfg.path)?;
        let size = file.metadata()?.len();
        Ok(Self {
            cfg,
            out: BufWriter::new(file),
            size,
            opened: Instant::now(),
        })
    }

    fn rotated(&self, n: usize) -> PathBuf {
        let mut p = self.cfg.path.clone().into_os_string();
        p.push(format!(".{n}"));
        PathBuf::from(p)
    }

    fn rotate(&mut self) -> io::Result<()> {
        self.out.flush()?;
        for n in (1..self.cfg.keep).rev() {
            let from = self.rotated(n);
            if from.exists() {
                std::fs::rename(&from, self.rotated(n + 1))?;
            }
        }
        if self.cfg.keep > 0 {
            std::fs::rename(&self.cfg.path, self.rotated(1))?;
        } else {
            std::fs::remove_file(&self.cfg.path)?;
        }
        let file = open_append(&self.cfg.path)?;
        self.out = BufWriter::new(file);
        self.size = 0;
        self.opened = Instant::now();
        Ok(())
    }

    fn write(&mut self, line: &[u8]) -> io::Result<()> {
        let too_big = self
            .cfg
            .rotate_bytes
            .is_some_and(|max| self.size > 0 && self.size + line.len() as u64 > max);
        let too_old = self
            .cfg
            .rotate_age
            .is_some_and(|age| self.opened.elapsed() >= age);
        if too_big || too_old {
            self.rotate()?;
        }
        self.out.write_all(line)?;
        self.size += line.len() as u64;
        Ok(())
    }
}

/// One job's HdrHistogram interval log: one tag per target, one interval
/// histogram of RTT (ns) per target every `every`.
struct Hlog {
    path: PathBuf,
    out: BufWriter<File>,
    serializer: V2Serializer,
    every: Duration,
    base: SystemTime,
    interval_start: SystemTime,
    last: Instant,
    hists: HashMap<String, Histogram<u64>>,
}

impl Hlog {
    fn open(path: &Path, every: Duration) -> io::Result<Self> {
        let mut out = BufWriter::new(open_append(path)?);
        let mut serializer = V2Serializer::new();
        let now = SystemTime::now();
        IntervalLogWriterBuilder::new()
            .add_comment("prober RTT interval log, values in ns, one tag per target")
            .with_start_time(now)
            .with_base_time(now)
            .begin_log_with(&mut out, &mut serializer)?;
        writeln!(
            out,
            "\"StartTimestamp\",\"Interval_Length\",\"Interval_Max\",\"Interval_Compressed_Histogram\""
        )?;
        out.flush()?;
        Ok(Self {
            path: path.to_owned(),
            out,
            serializer,
            every,
            base: now,
            interval_start: now,
            last: Instant::now(),
            hists: HashMap::new(),
        })
    }

    fn record(&mut self, target: &str, rtt_ns: u64) {
        // Look up first: the tag is allocated only for a target's first sample.
        if !self.hists.contains_key(target) {
            let h = Histogram::new_with_bounds(1, prober_core::stats::MAX_TRACKABLE_NS, 3)
                .expect("static histogram bounds are valid");
            self.hists.insert(target.to_owned(), h);
        }
        if let Some(h) = self.hists.get_mut(target) {
            h.saturating_record(rtt_ns.max(1));
        }
    }

    /// Writes the finished interval if `every` has passed (or `force`).
    fn tick(&mut self, force: bool) -> io::Result<()> {
        if !force && self.last.elapsed() < self.every {
            return Ok(());
        }
        let now = SystemTime::now();
        let start = self
            .interval_start
            .duration_since(self.base)
            .unwrap_or_default();
        let length = now.duration_since(self.interval_start).unwrap_or_default();
        {
            let mut w = IntervalLogWriterBuilder::new()
                .begin_log_with(&mut self.out, &mut self.serializer)?;
            let mut names: Vec<&String> = self.hists.keys().collect();
            names.sort();
            for name in names {
                let h = &self.hists[name];
                if h.is_empty() {
                    continue;
                }
                // Tags may not contain commas or whitespace.
                let tag_text: String = name
                    .chars()
                    .map(|c| {
                        if c == ',' || c.is_whitespace() {
                            '_'
                        } else {
                            c
                        }
                    })
                    .collect();
                w.write_histogram(h, start, length, Tag::new(&tag_text))
                    .map_err(io::Error::other)?;
            }
        }
        for h in self.hists.values_mut() {
            h.reset();
        }
        self.interval_start = now;
        self.last = Instant::now();
        self.out.flush()
    }
}

/// Opens a CSV file for appending, with the header if it is new or empty.
fn open_csv(path: &Path) -> io::Result<BufWriter<File>> {
    let file = open_append(path)?;
    let empty = file.metadata()?.len() == 0;
    let mut w = BufWriter::new(file);
    if empty {
        writeln!(w, "{}", ProbeLine::CSV_HEADER)?;
    }
    Ok(w)
}

/// Everything one job writes to files.
pub(crate) struct JobSinks {
    jsonl: Option<Jsonl>,
    csv: Option<(PathBuf, BufWriter<File>)>,
    hlog: Option<Hlog>,
    job: String,
    clock: Clock,
}

impl std::fmt::Debug for JobSinks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JobSinks")
            .field("job", &self.job)
            .finish_non_exhaustive()
    }
}

impl JobSinks {
    /// Opens (appending to) every file of `sinks`.
    pub(crate) fn open(job: &str, sinks: &Sinks, clock: Clock) -> io::Result<Self> {
        let jsonl = sinks.jsonl.clone().map(Jsonl::open).transpose()?;
        let csv = sinks
            .csv
            .as_ref()
            .map(|path| Ok::<_, io::Error>((path.clone(), open_csv(path)?)))
            .transpose()?;
        let hlog = sinks
            .hlog
            .as_ref()
            .map(|(p, every)| Hlog::open(p, *every))
            .transpose()?;
        Ok(Self {
            jsonl,
            csv,
            hlog,
            job: job.to_owned(),
            clock,
        })
    }

    /// Writes one sample to every file. Each file is written on its own, so
    /// one failing file does not cost the others the sample; the first error
    /// is returned.
    pub(crate) fn record(&mut self, t: &TargetInfo, s: &Sample) -> io::Result<()> {
        let line = ProbeLine::new(Some(&self.job), t, s, &self.clock);
        let mut first: io::Result<()> = Ok(());
        if let Some(j) = &mut self.jsonl {
            let res = serde_json::to_vec(&line)
                .map_err(io::Error::from)
                .and_then(|mut bytes| {
                    bytes.push(b'\n');
                    j.write(&bytes)
                });
            first = first.and(res);
        }
        if let Some((_, c)) = &mut self.csv {
            let res = writeln!(c, "{}", line.csv_row());
            first = first.and(res);
        }
        if let (Some(h), Some(rtt)) = (&mut self.hlog, s.rtt()) {
            h.record(&t.target, u64::try_from(rtt.as_nanos()).unwrap_or(u64::MAX));
        }
        first
    }

    /// Periodic work: flush buffers, write due hlog intervals.
    pub(crate) fn tick(&mut self) -> io::Result<()> {
        if let Some(j) = &mut self.jsonl {
            j.out.flush()?;
        }
        if let Some((_, c)) = &mut self.csv {
            c.flush()?;
        }
        if let Some(h) = &mut self.hlog {
            h.tick(false)?;
        }
        Ok(())
    }

    /// Reopens every file whose path now names another file or none (moved
    /// away by logrotate, say): what was buffered goes to the old file, which
    /// is complete (the hlog gets its last interval), and writing goes on in
    /// a new file at the configured path. Files still in place are kept.
    /// Returns the paths reopened.
    pub(crate) fn reopen_moved(&mut self) -> io::Result<Vec<PathBuf>> {
        let mut reopened = Vec::new();
        if let Some(j) = &mut self.jsonl
            && moved(j.out.get_ref(), &j.cfg.path)
        {
            j.out.flush()?;
            *j = Jsonl::open(j.cfg.clone())?;
            reopened.push(j.cfg.path.clone());
        }
        if let Some((path, c)) = &mut self.csv
            && moved(c.get_ref(), path)
        {
            c.flush()?;
            *c = open_csv(path)?;
            reopened.push(path.clone());
        }
        if let Some(h) = &mut self.hlog
            && moved(h.out.get_ref(), &h.path)
        {
            h.tick(true)?;
            *h = Hlog::open(&h.path.clone(), h.every)?;
            reopened.push(h.path.clone());
        }
        Ok(reopened)
    }

    /// Writes the last hlog interval and flushes everything.
    pub(crate) fn close(&mut self) -> io::Result<()> {
        if let Some(h) = &mut self.hlog {
            h.tick(true)?;
        }
        self.tick()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jsonl_rotates_by_size_and_keeps_n() {
        let dir = std::env::temp_dir().join(format!("prober-rot-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let path = dir.join("x.jsonl");
        let cfg = JsonlSink {
            path: path.clone(),
            rotate_bytes: Some(100),
            rotate_age: None,
            keep: 2,
        };
        let mut j = Jsonl::open(cfg).unwrap();
        for i in 0..10 {
            j.write(format!("{{\"n\":{i:040}}}\n").as_bytes()).unwrap();
        }
        j.out.flush().unwrap();
        let read = |p: &Path| std::fs::read_to_string(p).unwrap_or_default();
        assert!(read(&path).lines().count() <= 2);
        assert!(j.rotated(1).exists() && j.rotated(2).exists() && !j.rotated(3).exists());
        // Rotation never splits or loses the newest lines.
        assert!(read(&path).contains(&format!("{:040}", 9)));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

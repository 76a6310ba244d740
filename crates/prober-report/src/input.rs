//! Reading prober's files into [`Series`]: JSON lines (`prober run -o
//! json`, the daemon's JSONL sink, `prober sweep`) and HdrHistogram interval
//! logs (the daemon's and `prober run`'s hlog sink).
//!
//! A file is read as far as it can be: a line that is not JSON, a truncated
//! last line (a run killed mid-write), a tag this version does not know,
//! each becomes a [`InputFile::notes`] entry and the rest is still read.
//! Only a file with nothing prober wrote in it is an error.

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};

use hdrhistogram::Histogram;
use hdrhistogram::serialization::Deserializer;
use hdrhistogram::serialization::interval_log::{IntervalLogIterator, LogEntry, LogIteratorError};
use memchr::memmem;
use serde::Deserialize;

/// The names of the parts of a round trip, in the order of
/// [`prober_core::Parts::NAMES`].
pub const PART_NAMES: [&str; 6] = prober_core::Parts::NAMES;

/// What ended a probe.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProbeOutcome {
    /// A reply.
    Ok,
    /// No reply within the timeout.
    Timeout,
    /// An error (refused, unreachable, corrupt reply…).
    Error,
}

/// One probe line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Probe {
    /// When it was sent (Unix ns).
    pub sent_unix_ns: u64,
    /// User RTT (t4 − t1) of an ok probe.
    pub rtt_ns: Option<u64>,
    /// How it ended.
    pub outcome: ProbeOutcome,
    /// The parts of its split in [`PART_NAMES`] order, [`Probe::UNKNOWN`]
    /// where unknown: 48 bytes instead of 96 for `[Option<u64>; 6]`, which
    /// matters at millions of probes (see `benches/report`).
    parts: [u64; 6],
}

impl Probe {
    /// A part's stored value when it is unknown.
    pub const UNKNOWN: u64 = u64::MAX;

    /// A probe.
    pub fn new(
        sent_unix_ns: u64,
        rtt_ns: Option<u64>,
        outcome: ProbeOutcome,
        parts: [Option<u64>; 6],
    ) -> Self {
        Self {
            sent_unix_ns,
            rtt_ns,
            outcome,
            parts: parts.map(|p| p.unwrap_or(Self::UNKNOWN)),
        }
    }

    /// Part `k` (in [`PART_NAMES`] order), if known.
    pub fn part(&self, k: usize) -> Option<u64> {
        self.parts.get(k).copied().filter(|&v| v != Self::UNKNOWN)
    }
}

/// The settings of the run a series came from, as its meta line gave them
/// (all `None` for the daemon's JSONL files, which have no meta line).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Settings {
    /// Probe interval.
    pub interval_ns: Option<u64>,
    /// Pacing: timer, spin or hybrid.
    pub pacing: Option<String>,
    /// Receive mode: async or busy-poll.
    pub receive: Option<String>,
    /// What the target's RTT ran between: `user` (user send to user
    /// receive) or `kernel` (to the kernel's receive stamp, ICMP in schema 1
    /// files).
    pub timestamps: Option<String>,
    /// Which kernel stamps the run asked for (`rx+tx`, `rx`).
    pub kernel_stamps: Option<String>,
    /// Request size in bytes.
    pub size: Option<u64>,
    /// Host the run was made on.
    pub hostname: Option<String>,
    /// That host's kernel.
    pub kernel: Option<String>,
    /// prober's version.
    pub version: Option<String>,
}

/// One target's probes from one file (for a sweep: at one interval).
#[derive(Debug, Clone, Default)]
pub struct Series {
    /// What the page calls it: the target, the job if any, and the file when
    /// several files are drawn.
    pub label: String,
    /// The file it came from.
    pub file: PathBuf,
    /// The target as written (`tcp://host:port`).
    pub target: String,
    /// The daemon's job, if any.
    pub job: Option<String>,
    /// The sweep interval of this point, for `prober sweep` output.
    pub sweep_interval_ns: Option<u64>,
    /// Which run of the file it is from, counting meta lines from 1 (0
    /// before any); a file that holds several runs gives a series per run.
    pub run: usize,
    /// The run's settings.
    pub settings: Settings,
    /// Probes in file order (JSON input only).
    pub probes: Vec<Probe>,
    /// From an hlog: every interval's RTT histogram merged.
    pub hist: Option<Histogram<u64>>,
    /// From an hlog: (interval start Unix ns, interval length ns, histogram).
    pub windows: Vec<(u64, u64, Histogram<u64>)>,
    /// From an hlog: each part's histogram, by part name.
    pub part_hists: BTreeMap<String, Histogram<u64>>,
}

impl Series {
    /// Whether it came from an hlog, so only histogram charts can be drawn.
    pub fn histogram_only(&self) -> bool {
        self.hist.is_some()
    }
}

/// Which probes to keep.
#[derive(Debug, Clone, Default)]
pub struct Filter {
    /// Keep targets whose name contains any of these (all when empty).
    pub targets: Vec<String>,
    /// Keep probes sent at or after this Unix ns.
    pub since_ns: Option<u64>,
    /// Keep probes sent before this Unix ns.
    pub until_ns: Option<u64>,
}

impl Filter {
    fn target(&self, name: &str) -> bool {
        self.targets.is_empty() || self.targets.iter().any(|t| name.contains(t.as_str()))
    }

    fn time(&self, ns: u64) -> bool {
        self.since_ns.is_none_or(|s| ns >= s) && self.until_ns.is_none_or(|u| ns < u)
    }
}

/// What one file gave.
#[derive(Debug, Default)]
pub struct InputFile {
    /// The file.
    pub path: PathBuf,
    /// "json" or "hlog".
    pub format: &'static str,
    /// Its series, in order of first appearance.
    pub series: Vec<Series>,
    /// Problems met and skipped over, one line each.
    pub notes: Vec<String>,
    /// The `summary` lines' RTT statistics by target (for cross-checks).
    pub summaries: BTreeMap<String, serde_json::Value>,
    /// The sweep's point order, when the file is a sweep:
    /// (round, interval ns, target).
    pub sweep_order: Vec<(u64, u64, String)>,
}

/// Why a file gave nothing at all.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// It could not be read.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// Nothing in it is prober's.
    #[error("{}: {reason}", path.display())]
    NotProber {
        /// The file.
        path: PathBuf,
        /// What was found instead.
        reason: String,
    },
}

/// Reads one file, JSON lines or hlog by its content.
pub fn read_file(path: &Path, filter: &Filter) -> Result<InputFile, ReadError> {
    let f = std::fs::File::open(path).map_err(|source| ReadError::Io {
        path: path.to_owned(),
        source,
    })?;
    read_from(path, BufReader::with_capacity(1 << 20, f), filter)
}

/// Reads `bytes` as the content of the file named `path`.
pub fn read_bytes(path: &Path, bytes: &[u8], filter: &Filter) -> Result<InputFile, ReadError> {
    read_from(path, std::io::Cursor::new(bytes.to_vec()), filter)
}

/// Reads a file from `input`: JSON lines are streamed line by line (a
/// million-probe file is never held whole), an hlog is read whole.
pub fn read_from(
    path: &Path,
    mut input: impl BufRead + Send + 'static,
    filter: &Filter,
) -> Result<InputFile, ReadError> {
    let io = |source| ReadError::Io {
        path: path.to_owned(),
        source,
    };
    let not = |reason: &str| ReadError::NotProber {
        path: path.to_owned(),
        reason: reason.to_owned(),
    };
    // The first byte that is not white space tells the format.
    let first = loop {
        let buf = input.fill_buf().map_err(io)?;
        if buf.is_empty() {
            break None;
        }
        match buf.iter().position(|b| !b.is_ascii_whitespace()) {
            Some(i) => break Some(buf[i]),
            None => {
                let n = buf.len();
                input.consume(n);
            }
        }
    };
    let mut file = match first {
        None => return Err(not("the file is empty")),
        Some(b'{') => read_json(path, input, filter).map_err(io)?,
        Some(b'#' | b'T' | b'0'..=b'9' | b'"') => {
            let mut bytes = Vec::new();
            input.read_to_end(&mut bytes).map_err(io)?;
            read_hlog(path, &bytes, filter)
        }
        Some(_) => {
            return Err(not(
                "neither JSON lines nor an HdrHistogram log (expected the output of `prober run -o json`, `prober sweep -o json` or an .hlog file)",
            ));
        }
    };
    if file.series.is_empty() {
        let mut reason = match file.format {
            "json" => {
                "no prober probe lines in it (is it the output of `prober run -o json`?)".to_owned()
            }
            _ => "no histogram intervals in it".to_owned(),
        };
        if !filter.targets.is_empty() || filter.since_ns.is_some() || filter.until_ns.is_some() {
            reason = format!("{reason}, or none that --target/--since/--until keep");
        }
        if let Some(n) = file.notes.first() {
            reason = format!("{reason}; {n}");
        }
        return Err(not(&reason));
    }
    file.path = path.to_owned();
    Ok(file)
}

/// The lines of a JSON-lines file this reader looks at; unknown fields and
/// line types are ignored, so newer files still read.
#[derive(Deserialize)]
struct Line {
    #[serde(rename = "type")]
    kind: Option<String>,
    #[serde(default)]
    sweep: Option<SweepTag>,
    // meta
    #[serde(default)]
    targets: Vec<serde_json::Value>,
    interval_ns: Option<u64>,
    pacing: Option<String>,
    receive: Option<String>,
    hostname: Option<String>,
    kernel: Option<String>,
    version: Option<String>,
    kernel_stamps: Option<String>,
    // summary
    target: Option<String>,
    rtt: Option<serde_json::Value>,
    // sweep
    #[serde(default)]
    order: Vec<(u64, u64, String)>,
}

#[derive(Deserialize, Clone, Copy)]
struct SweepTag {
    interval_ns: u64,
}

/// A probe line, read with borrowed strings: most lines of a file are
/// probe lines, and this is the reader's hot path.
#[derive(Deserialize)]
struct ProbeLine<'a> {
    #[serde(borrow)]
    target: Option<Cow<'a, str>>,
    /// `probe` since schema 3, `job` before.
    #[serde(borrow, rename = "probe", alias = "job")]
    job: Option<Cow<'a, str>>,
    #[serde(borrow)]
    outcome: Option<Cow<'a, str>>,
    sent_unix_ns: Option<u64>,
    rtt_ns: Option<u64>,
    sweep: Option<SweepTag>,
    #[serde(default)]
    parts: PartsIn,
}

/// The keys [`scan_probe_line`] looks for, each searcher built once.
struct Keys {
    target: memmem::Finder<'static>,
    job: memmem::Finder<'static>,
    old_job: memmem::Finder<'static>,
    interval: memmem::Finder<'static>,
    outcome: memmem::Finder<'static>,
    sent: memmem::Finder<'static>,
    rtt: memmem::Finder<'static>,
    parts: memmem::Finder<'static>,
    glued: memmem::Finder<'static>,
    trailing_comma: memmem::Finder<'static>,
}

impl Keys {
    fn new() -> Self {
        let f = |k: &'static [u8]| memmem::Finder::new(k);
        Self {
            target: f(br#""target":""#),
            job: f(br#""probe":""#),
            old_job: f(br#""job":""#),
            interval: f(br#""interval_ns":"#),
            outcome: f(br#""outcome":""#),
            sent: f(br#""sent_unix_ns":"#),
            rtt: f(br#""rtt_ns":"#),
            parts: f(br#""parts":{"#),
            glued: f(b"}{"),
            trailing_comma: f(b",}"),
        }
    }
}

/// Reads a probe line in prober's own layout without serde: the fields it
/// needs are found in the order prober's JSON sink writes them (a line in
/// any other order goes to serde), with SIMD
/// substring search. Only lines that start as prober's do, end in `}`, have
/// as many `{` as `}` and hold no backslash are read this way: with no
/// backslash no string can hold a quote, so a `"key":` found is a key.
/// Anything else (`None`) goes to serde_json, which also says what is wrong.
///
/// Hand-written because it was measured: serde_json read the 4 × 1,000,000
/// probe benchmark (`benches/report`, 2.1 GB) at 183 MB/s, 11.5 s of a
/// 12.6 s report, and a one-pass tokenizer at 280 MB/s; the budget for the
/// whole report is 5 s.
fn scan_probe_line<'a>(raw: &'a [u8], k: &Keys) -> Option<ProbeLine<'a>> {
    if !raw.starts_with(br#"{"type":"probe""#)
        || raw.last() != Some(&b'}')
        || memchr::memchr(b'\\', raw).is_some()
        // Balanced braces, and none of the shapes of two lines glued
        // together (`}{`) or a trailing comma (`,}`): anything suspicious
        // goes to serde, which decides. (A structural walk over quotes and
        // braces cost 2.5 s of the benchmark's 6.)
        || memchr::memchr_iter(b'{', raw).count() != memchr::memchr_iter(b'}', raw).count()
        || k.glued.find(raw).is_some()
        || k.trailing_comma.find(raw).is_some()
    {
        return None;
    }
    // The position just after `key` at or after `from`.
    let after = |key: &memmem::Finder<'_>, from: usize| {
        key.find(&raw[from..])
            .map(|i| from + i + key.needle().len())
    };
    let string = |at: usize| {
        let len = memchr::memchr(b'"', &raw[at..])?;
        std::str::from_utf8(&raw[at..at + len]).ok()
    };
    // A u64, or `Some(None)` for null; what follows must end the value.
    let number = |at: usize| -> Option<Option<u64>> {
        let rest = &raw[at..];
        if rest.starts_with(b"null") {
            return matches!(rest.get(4), Some(b',' | b'}')).then_some(None);
        }
        let len = rest.iter().take_while(|c| c.is_ascii_digit()).count();
        if len == 0
            || len > 19
            || (len > 1 && rest[0] == b'0')
            || !matches!(rest.get(len), Some(b',' | b'}'))
        {
            return None;
        }
        Some(Some(
            rest[..len]
                .iter()
                .fold(0u64, |n, d| n * 10 + u64::from(d - b'0')),
        ))
    };
    let t = after(&k.target, 0)?;
    let head = &raw[..t];
    // The job's key is `probe` since schema 3, `job` before.
    let job = match (k.job.find(head), k.old_job.find(head)) {
        (Some(i), None) => Some(string(i + k.job.needle().len())?),
        (None, Some(i)) => Some(string(i + k.old_job.needle().len())?),
        (None, None) => None,
        (Some(_), Some(_)) => return None,
    };
    let sweep = match k.interval.find(head) {
        Some(i) => Some(SweepTag {
            interval_ns: number(i + 14)??,
        }),
        None => None,
    };
    let target = string(t)?;
    let o = after(&k.outcome, t)?;
    let outcome = string(o)?;
    let sent_at = after(&k.sent, o)?;
    let sent = number(sent_at)??;
    let r = after(&k.rtt, sent_at)?;
    let rtt = number(r)?;
    // Each key is looked for only where the sink writes it; one written
    // elsewhere (another writer's field order) sends the line to serde
    // rather than reading as absent.
    if k.job.find(&raw[t..]).is_some()
        || k.old_job.find(&raw[t..]).is_some()
        || k.interval.find(&raw[t..]).is_some()
        || k.parts.find(&raw[..r]).is_some()
    {
        return None;
    }
    let mut parts = PartsIn::default();
    if let Some(mut i) = after(&k.parts, r) {
        while raw.get(i) == Some(&b'"') {
            let key_len = memchr::memchr(b'"', &raw[i + 1..])?;
            let key = &raw[i + 1..i + 1 + key_len];
            let v = i + 1 + key_len + 2;
            if raw.get(v - 1) != Some(&b':') {
                return None;
            }
            let n = number(v)??;
            let slot = match key {
                b"client_send_ns" => &mut parts.client_send_ns,
                b"network_ns" => &mut parts.network_ns,
                b"responder_wake_ns" => &mut parts.responder_wake_ns,
                b"responder_dwell_ns" => &mut parts.responder_dwell_ns,
                b"responder_send_ns" => &mut parts.responder_send_ns,
                b"client_wake_ns" => &mut parts.client_wake_ns,
                _ => return None,
            };
            *slot = Some(n);
            i = v + raw[v..].iter().take_while(|c| c.is_ascii_digit()).count();
            if raw.get(i) == Some(&b',') {
                i += 1;
                if raw.get(i) != Some(&b'"') {
                    return None;
                }
            }
        }
        if raw.get(i) != Some(&b'}') {
            return None;
        }
    }
    Some(ProbeLine {
        target: Some(Cow::Borrowed(target)),
        job: job.map(Cow::Borrowed),
        outcome: Some(Cow::Borrowed(outcome)),
        sent_unix_ns: Some(sent),
        rtt_ns: rtt,
        sweep,
        parts,
    })
}

#[derive(Deserialize, Default)]
struct PartsIn {
    client_send_ns: Option<u64>,
    network_ns: Option<u64>,
    responder_wake_ns: Option<u64>,
    responder_dwell_ns: Option<u64>,
    responder_send_ns: Option<u64>,
    client_wake_ns: Option<u64>,
}

#[derive(Deserialize)]
struct MetaTarget {
    target: String,
    size: Option<u64>,
    timestamps: Option<String>,
}

/// Bytes of JSON lines handed from the reading thread to the parser at once.
const CHUNK: usize = 4 << 20;

/// Whole lines of a stream in chunks of about [`CHUNK`] bytes, read on a
/// thread of their own so the copy out of the page cache overlaps parsing
/// (on the 4 × 1,000,000 probe benchmark it was a fifth of the time).
/// Buffers come back through [`Chunks::recycle`], so the pages are not
/// allocated and zeroed again for every chunk.
struct Chunks {
    rx: std::sync::mpsc::Receiver<std::io::Result<Vec<u8>>>,
    back: std::sync::mpsc::SyncSender<Vec<u8>>,
}

impl Chunks {
    fn spawn(mut input: impl std::io::Read + Send + 'static) -> Self {
        use std::io::Read as _;
        let (tx, rx) = std::sync::mpsc::sync_channel(2);
        let (back, spare) = std::sync::mpsc::sync_channel::<Vec<u8>>(4);
        std::thread::spawn(move || {
            let mut carry = Vec::new();
            loop {
                let mut buf = spare
                    .try_recv()
                    .unwrap_or_else(|_| Vec::with_capacity(CHUNK + (64 << 10)));
                buf.clear();
                buf.append(&mut carry);
                // Read on until the chunk holds a newline (a line longer
                // than a chunk is never split) or the input ends.
                let eof = loop {
                    let want = CHUNK.saturating_sub(buf.len()).max(1 << 16);
                    let got = match input.by_ref().take(want as u64).read_to_end(&mut buf) {
                        Ok(n) => n,
                        Err(e) => {
                            let _ = tx.send(Err(e));
                            return;
                        }
                    };
                    let eof = got < want;
                    if eof || memchr::memchr(b'\n', &buf).is_some() {
                        break eof;
                    }
                };
                if !eof && let Some(i) = memchr::memrchr(b'\n', &buf) {
                    carry.extend_from_slice(&buf[i + 1..]);
                    buf.truncate(i + 1);
                }
                if !buf.is_empty() && tx.send(Ok(buf)).is_err() {
                    return;
                }
                if eof {
                    return;
                }
            }
        });
        Self { rx, back }
    }

    fn next(&self) -> Option<std::io::Result<Vec<u8>>> {
        self.rx.recv().ok()
    }

    fn recycle(&self, buf: Vec<u8>) {
        let _ = self.back.try_send(buf);
    }
}

fn read_json(
    path: &Path,
    input: impl BufRead + Send + 'static,
    filter: &Filter,
) -> std::io::Result<InputFile> {
    let mut file = InputFile {
        format: "json",
        ..InputFile::default()
    };
    // Settings per target name, from the latest meta line.
    let mut settings: BTreeMap<String, Settings> = BTreeMap::new();
    // Series by target, then matched on job and sweep interval; looked up
    // by &str, so a probe line allocates nothing.
    let mut index: HashMap<String, Vec<usize>> = HashMap::new();
    let mut bad = 0usize;
    let mut first_bad = None;
    let mut foreign = 0usize;
    let mut n = 0usize;
    let mut runs = 0usize;
    let keys = Keys::new();
    let chunks = Chunks::spawn(input);
    while let Some(chunk) = chunks.next() {
        let chunk = chunk?;
        let mut start = 0;
        while start < chunk.len() {
            let (end, complete) = match memchr::memchr(b'\n', &chunk[start..]) {
                Some(i) => (start + i, true),
                None => (chunk.len(), false),
            };
            let raw = chunk[start..end].trim_ascii();
            start = end + 1;
            n += 1;
            if raw.is_empty() {
                continue;
            }
            let mut fail = |e: &dyn std::fmt::Display, file: &mut InputFile| {
                if complete {
                    bad += 1;
                    first_bad.get_or_insert_with(|| format!("line {n}: {e}"));
                } else {
                    file.notes.push(format!(
                    "line {n}: the last line is cut off (was the run killed mid-write?); skipped"
                ));
                }
            };
            // prober writes "type" first; any other probe line is read twice.
            let is_probe = raw.starts_with(br#"{"type":"probe""#)
                || (!raw.starts_with(br#"{"type":""#)
                    && serde_json::from_slice::<Line>(raw)
                        .is_ok_and(|l| l.kind.as_deref() == Some("probe")));
            if is_probe {
                let fast = scan_probe_line(raw, &keys);
                let p: ProbeLine<'_> = match fast.map_or_else(|| serde_json::from_slice(raw), Ok) {
                    Ok(p) => p,
                    Err(e) => {
                        fail(&e, &mut file);
                        continue;
                    }
                };
                let (Some(target), Some(outcome), Some(sent)) =
                    (p.target, p.outcome, p.sent_unix_ns)
                else {
                    fail(
                        &"a probe line without target, outcome or sent_unix_ns",
                        &mut file,
                    );
                    continue;
                };
                if !filter.target(&target) || !filter.time(sent) {
                    continue;
                }
                let outcome = match &*outcome {
                    "ok" => ProbeOutcome::Ok,
                    "timeout" => ProbeOutcome::Timeout,
                    _ => ProbeOutcome::Error,
                };
                let sweep = p.sweep.map(|s| s.interval_ns);
                let job = p.job.as_deref();
                let found = index.get(&*target).and_then(|v| {
                    v.iter().copied().find(|&i| {
                        let s = &file.series[i];
                        s.job.as_deref() == job && s.sweep_interval_ns == sweep && s.run == runs
                    })
                });
                let i = match found {
                    Some(i) => i,
                    None => {
                        let mut st = settings.get(&*target).cloned().unwrap_or_default();
                        if sweep.is_some() {
                            st.interval_ns = sweep;
                        }
                        file.series.push(Series {
                            label: match job {
                                Some(j) => format!("{j}/{target}"),
                                None => target.to_string(),
                            },
                            file: path.to_owned(),
                            target: target.to_string(),
                            job: job.map(str::to_owned),
                            sweep_interval_ns: sweep,
                            run: runs,
                            settings: st,
                            ..Series::default()
                        });
                        let i = file.series.len() - 1;
                        index.entry(target.to_string()).or_default().push(i);
                        i
                    }
                };
                let q = &p.parts;
                let parts = [
                    q.client_send_ns,
                    q.network_ns,
                    q.responder_wake_ns,
                    q.responder_dwell_ns,
                    q.responder_send_ns,
                    q.client_wake_ns,
                ];
                let rtt = if outcome == ProbeOutcome::Ok {
                    p.rtt_ns
                } else {
                    None
                };
                file.series[i]
                    .probes
                    .push(Probe::new(sent, rtt, outcome, parts));
                continue;
            }
            let line: Line = match serde_json::from_slice(raw) {
                Ok(l) => l,
                Err(e) => {
                    fail(&e, &mut file);
                    continue;
                }
            };
            match line.kind.as_deref() {
                Some("meta") => {
                    if line.sweep.is_none() {
                        runs += 1;
                    }
                    for t in &line.targets {
                        let Ok(t) = MetaTarget::deserialize(t) else {
                            continue;
                        };
                        settings.insert(
                            t.target.clone(),
                            Settings {
                                interval_ns: line.interval_ns,
                                pacing: line.pacing.clone(),
                                receive: line.receive.clone(),
                                timestamps: t.timestamps.clone(),
                                kernel_stamps: line.kernel_stamps.clone(),
                                size: t.size,
                                hostname: line.hostname.clone(),
                                kernel: line.kernel.clone(),
                                version: line.version.clone(),
                            },
                        );
                    }
                }
                Some("summary") => {
                    if let (Some(t), Some(rtt), None) = (line.target, line.rtt, line.sweep) {
                        file.summaries.insert(t, rtt);
                    }
                }
                Some("sweep") => file.sweep_order = line.order,
                Some(_) => {}
                None => foreign += 1,
            }
        }
        chunks.recycle(chunk);
    }
    if runs > 1 {
        for s in &mut file.series {
            s.label = match s.run {
                0 => format!("{} (before run 1)", s.label),
                k => format!("{} (run {k})", s.label),
            };
        }
        file.notes.push(format!(
            "the file holds {runs} runs (meta lines); each target of each run is its own series"
        ));
    }
    if bad > 0 {
        file.notes.push(format!(
            "{bad} line(s) could not be read and were skipped; the first: {}",
            first_bad.unwrap_or_default()
        ));
    }
    if foreign > 0 {
        file.notes.push(format!(
            "{foreign} JSON line(s) without a \"type\" field are not prober's and were skipped"
        ));
    }
    Ok(file)
}

/// The most significant digits a histogram read from an hlog may have:
/// the deserializer allocates the counts its header asks for, and 4
/// digits stay under 4.3 MiB for any range (prober writes 3).
const MAX_DIGITS: u32 = 4;

/// The largest counts payload a histogram's header may announce. The
/// deserializer allocates the announced length before it reads a byte of
/// it: the fuzzer found a 3 kB hlog line that made it allocate 16 MiB at
/// once, and the field allows 4 GiB. A 4-digit histogram's counts take at
/// most 9 bytes each, under 4.8 MB.
const MAX_PAYLOAD: u32 = 8 << 20;

/// Reads a V2 histogram's header (compressed or not) before the
/// deserializer does, and refuses one that would make it allocate more
/// than [`MAX_DIGITS`] and [`MAX_PAYLOAD`] allow; other encodings are left
/// to the deserializer, which refuses them.
fn header_ok(raw: &[u8]) -> Result<(), String> {
    // hdrhistogram's cookies: 0x1c849303 | 0x10, and the compressed one.
    const V2: u32 = 0x1c84_9313;
    const V2_COMPRESSED: u32 = 0x1c84_9314;
    let cookie = |b: &[u8]| {
        b.get(..4)
            .map(|c| u32::from_be_bytes([c[0], c[1], c[2], c[3]]))
    };
    let mut head = [0u8; 16];
    match cookie(raw) {
        Some(V2_COMPRESSED) => {
            let z = raw.get(8..).ok_or("a short histogram")?;
            std::io::Read::read_exact(&mut flate2::read::ZlibDecoder::new(z), &mut head)
                .map_err(|e| format!("a histogram that does not inflate: {e}"))?;
        }
        Some(V2) => head.copy_from_slice(raw.get(..16).ok_or("a short histogram")?),
        _ => return Ok(()),
    }
    let field =
        |at: usize| u32::from_be_bytes([head[at], head[at + 1], head[at + 2], head[at + 3]]);
    let (payload, digits) = (field(4), field(12));
    if digits > MAX_DIGITS {
        return Err(format!(
            "a histogram with {digits} significant digits (at most {MAX_DIGITS} are read)"
        ));
    }
    if payload > MAX_PAYLOAD {
        return Err(format!(
            "a histogram announcing {payload} bytes of counts (at most {MAX_PAYLOAD} are read)"
        ));
    }
    Ok(())
}

fn read_hlog(path: &Path, bytes: &[u8], filter: &Filter) -> InputFile {
    let mut file = InputFile {
        format: "hlog",
        ..InputFile::default()
    };
    let mut base_ns = 0u64;
    let mut index: BTreeMap<String, usize> = BTreeMap::new();
    let mut deserializer = Deserializer::new();
    let mut unknown_parts: BTreeMap<String, usize> = BTreeMap::new();
    let mut bad = 0usize;
    let mut first_bad = None;
    // After a line that does not parse (a daemon killed mid-write, then
    // restarted onto the same file), go on from the next line.
    let mut rest: &[u8] = bytes;
    loop {
        let mut resume = None;
        for entry in IntervalLogIterator::new(rest) {
            let interval = match entry {
                Ok(LogEntry::BaseTime(d)) => {
                    base_ns = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
                    continue;
                }
                Ok(LogEntry::StartTime(_)) => continue,
                Ok(LogEntry::Interval(i)) => i,
                Err(LogIteratorError::ParseError { offset }) => {
                    bad += 1;
                    let line = String::from_utf8_lossy(&rest[offset..])
                        .lines()
                        .next()
                        .unwrap_or_default()
                        .chars()
                        .take(60)
                        .collect::<String>();
                    first_bad
                        .get_or_insert_with(|| format!("a line that does not parse: {line:?}"));
                    resume = Some(offset);
                    break;
                }
            };
            let tag = interval
                .tag()
                .map_or("(untagged)", |t| t.as_str())
                .to_owned();
            let (target, part) = match tag.split_once('#') {
                Some((t, p)) => (t.to_owned(), Some(p.to_owned())),
                None => (tag.clone(), None),
            };
            if let Some(p) = &part
                && !PART_NAMES.contains(&p.as_str())
            {
                *unknown_parts.entry(tag.clone()).or_default() += 1;
                continue;
            }
            let start = base_ns.saturating_add(
                u64::try_from(interval.start_timestamp().as_nanos()).unwrap_or(u64::MAX),
            );
            let len = u64::try_from(interval.duration().as_nanos()).unwrap_or(u64::MAX);
            if !filter.target(&target) || !filter.time(start) {
                continue;
            }
            let decoded = base64_decode(interval.encoded_histogram())
                .ok_or_else(|| "not base64".to_owned())
                .and_then(|raw| header_ok(&raw).map(|()| raw))
                .and_then(|raw| {
                    deserializer
                        .deserialize::<u64, _>(&mut raw.as_slice())
                        .map_err(|e| format!("{e:?}"))
                });
            let h = match decoded {
                Ok(h) => h,
                Err(e) => {
                    bad += 1;
                    first_bad.get_or_insert_with(|| format!("tag {tag}: {e}"));
                    continue;
                }
            };
            let i = *index.entry(target.clone()).or_insert_with(|| {
                file.series.push(Series {
                    label: target.clone(),
                    file: path.to_owned(),
                    target: target.clone(),
                    ..Series::default()
                });
                file.series.len() - 1
            });
            let s = &mut file.series[i];
            match part {
                Some(p) => merge(s.part_hists.entry(p).or_insert_with(empty), &h),
                None => {
                    merge(s.hist.get_or_insert_with(empty), &h);
                    s.windows.push((start, len, h));
                }
            }
        }
        match resume.and_then(|off| memchr::memchr(b'\n', &rest[off..]).map(|nl| off + nl + 1)) {
            Some(next) => rest = &rest[next..],
            None => break,
        }
    }
    // A series with only part histograms has no RTT to draw.
    file.series.retain(|s| s.hist.is_some());
    for (tag, n) in unknown_parts {
        file.notes.push(format!(
            "tag {tag:?} ({n} interval(s)): not a part this version knows; skipped"
        ));
    }
    if bad > 0 {
        file.notes.push(format!(
            "{bad} interval(s) could not be read; the first: {}",
            first_bad.unwrap_or_default()
        ));
    }
    file
}

fn empty() -> Histogram<u64> {
    prober_core::stats::histogram()
}

fn merge(into: &mut Histogram<u64>, h: &Histogram<u64>) {
    for v in h.iter_recorded() {
        into.saturating_record_n(v.value_iterated_to(), v.count_at_value()); // saturating_record_n never fails
    }
}

/// Standard base64 (with padding) as hlog files use it; `None` if malformed.
fn base64_decode(s: &str) -> Option<Vec<u8>> {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD
        .decode(s.trim())
        .ok()
}

/// Parses a `--since`/`--until` time: RFC 3339 (`2026-11-23T13:00:00Z`,
/// UTC) or Unix seconds.
pub fn parse_time(s: &str) -> Result<u64, String> {
    if let Ok(secs) = s.parse::<f64>()
        && secs >= 0.0
    {
        return Ok((secs * 1e9) as u64);
    }
    humantime::parse_rfc3339_weak(s)
        .map_err(|e| {
            format!("{s:?} is not a time: {e} (give RFC 3339, e.g. 2026-11-23T13:00:00Z, or Unix seconds)")
        })
        .and_then(|t| {
            t.duration_since(std::time::UNIX_EPOCH)
                .map_err(|_| format!("{s:?} is before 1970"))
                .map(|d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_histogram_header_that_asks_too_much_is_refused_before_it_is_read() {
        // An uncompressed V2 header: cookie, payload length, normalizing
        // offset, digits, then lowest, highest and the ratio.
        let header = |payload: u32, digits: u32| {
            let mut h = Vec::new();
            for v in [0x1c84_9313u32, payload, 0, digits] {
                h.extend_from_slice(&v.to_be_bytes());
            }
            h
        };
        assert!(header_ok(&header(100, 3)).is_ok());
        assert!(
            header_ok(&header(16 << 20, 3))
                .unwrap_err()
                .contains("16777216 bytes")
        );
        assert!(
            header_ok(&header(100, 5))
                .unwrap_err()
                .contains("5 significant digits")
        );
        assert!(header_ok(&header(100, 3)[..10]).is_err(), "cut short");
        // A compressed one, as prober writes them, passes.
        let mut h = hdrhistogram::Histogram::<u64>::new(3).unwrap();
        h.record(1_000).unwrap();
        let mut raw = Vec::new();
        hdrhistogram::serialization::Serializer::serialize(
            &mut hdrhistogram::serialization::V2DeflateSerializer::new(),
            &h,
            &mut raw,
        )
        .unwrap();
        assert!(header_ok(&raw).is_ok());
    }

    fn same(line: &str) {
        assert!(agree(line), "the fast reader left {line} to serde");
    }

    /// Whether the fast reader read `line` (and then read it as serde does).
    fn agree(line: &str) -> bool {
        let Some(fast) = scan_probe_line(line.as_bytes(), &Keys::new()) else {
            return false;
        };
        let slow: ProbeLine<'_> = serde_json::from_str(line).unwrap();
        let key = |p: &ProbeLine<'_>| {
            let q = &p.parts;
            (
                p.target.as_deref().map(str::to_owned),
                p.job.as_deref().map(str::to_owned),
                p.outcome.as_deref().map(str::to_owned),
                p.sent_unix_ns,
                p.rtt_ns,
                p.sweep.map(|s| s.interval_ns),
                [
                    q.client_send_ns,
                    q.network_ns,
                    q.responder_wake_ns,
                    q.responder_dwell_ns,
                    q.responder_send_ns,
                    q.client_wake_ns,
                ],
            )
        };
        assert_eq!(key(&fast), key(&slow), "{line}");
        true
    }

    #[test]
    fn the_fast_reader_agrees_with_serde() {
        same(
            r#"{"type":"probe","target":"tcp://127.0.0.1:35699","protocol":"tcp","addr":"127.0.0.1:35699","seq":0,"outcome":"ok","scheduled_unix_ns":1795440611026528520,"sent_unix_ns":1795440611026550801,"send_lag_ns":22281,"rtt_ns":137135,"latency_ns":159888,"server_dwell_ns":1132,"bytes":64,"error":null,"error_kind":null,"rx_wake_ns":25277,"ttl":null,"kernel_rtt_ns":null,"ping_rtt_ns":111858,"parts":{"responder_dwell_ns":1132,"client_wake_ns":25277}}"#,
        );
        same(
            r#"{"type":"probe","job":"edge","sweep":{"round":1,"point":3,"interval_ns":1000},"target":"udp://[::1]:9","outcome":"error","sent_unix_ns":5,"rtt_ns":null,"error":"connection refused (os error 111)","ttl":64,"x":-1.5e3,"ok":true}"#,
        );
        same(
            r#"{"type":"probe","target":"a","outcome":"timeout","sent_unix_ns":1,"rtt_ns":null,"parts":{}}"#,
        );
    }

    /// Lines the JSON sink really writes, with their top-level keys in
    /// every rotation of the sink's order and of its reverse: the fast
    /// reader reads each as serde does, or leaves it to serde.
    #[test]
    fn the_fast_reader_agrees_with_serde_on_the_sinks_lines_in_any_key_order() {
        use std::time::Duration;

        use prober_core::{Clock, Outcome, Reply, Sample, TargetInfo};
        use tokio::time::Instant;

        let clock = Clock::now();
        let now = Instant::now();
        let mut lines = Vec::new();
        for (job, outcome) in [
            (None, Outcome::Timeout),
            (
                Some("edge"),
                Outcome::Ok(Reply::plain(now, now + Duration::from_micros(40), 64)),
            ),
        ] {
            let mut info = TargetInfo::new(0, "udp://127.0.0.1:9", "udp", "127.0.0.1:9", Some(64));
            info.job = job.map(str::to_owned);
            let sample = Sample {
                target: 0,
                seq: 1,
                scheduled: now,
                sent: now,
                outcome,
                bytes: 64,
            };
            let line = serde_json::to_string(&prober_sinks::ProbeLine::new(&info, &sample, &clock))
                .unwrap();
            lines.push(line);
        }
        // The sink's own order, then with a sweep tag and parts, as a sweep
        // and a split write them.
        let mut with_more: serde_json::Map<String, serde_json::Value> =
            serde_json::from_str(&lines[1]).unwrap();
        with_more.insert(
            "sweep".to_owned(),
            serde_json::json!({"round": 1, "point": 2, "interval_ns": 1000}),
        );
        with_more.insert(
            "parts".to_owned(),
            serde_json::json!({"network_ns": 10, "client_wake_ns": 3}),
        );
        let mut checked = 0;
        for line in &lines {
            same(line);
            checked += 1;
        }
        let entries_of = |line: &str| -> Vec<(String, serde_json::Value)> {
            // Keys in the order the line has them.
            let mut de = serde_json::Deserializer::from_str(line);
            let v: indexed::Entries = serde::Deserialize::deserialize(&mut de).unwrap();
            v.0
        };
        let mut all = lines.iter().map(|l| entries_of(l)).collect::<Vec<_>>();
        all.push(with_more.into_iter().collect());
        let text = |order: &[(String, serde_json::Value)]| {
            let body: Vec<String> = order
                .iter()
                .map(|(k, v)| format!("{}:{v}", serde_json::to_string(k).unwrap()))
                .collect();
            format!("{{{}}}", body.join(","))
        };
        let mut fast = 0;
        for entries in &all {
            // Each key moved to every other place, the rest in the sink's
            // order: the orders most likely to pass the fast reader's checks.
            for from in 0..entries.len() {
                for to in 0..entries.len() {
                    let mut order = entries.clone();
                    let moved = order.remove(from);
                    order.insert(to, moved);
                    if agree(&text(&order)) {
                        fast += 1;
                    }
                    checked += 1;
                }
            }
        }
        assert!(fast > 0, "some orders are read by the fast reader");
        for entries in all {
            for reversed in [false, true] {
                let mut order = entries.clone();
                if reversed {
                    order.reverse();
                }
                for _ in 0..order.len() {
                    order.rotate_left(1);
                    let body: Vec<String> = order
                        .iter()
                        .map(|(k, v)| format!("{}:{v}", serde_json::to_string(k).unwrap()))
                        .collect();
                    agree(&format!("{{{}}}", body.join(",")));
                    checked += 1;
                }
            }
        }
        assert!(checked > 50, "{checked} lines checked");
    }

    /// A JSON object's entries in the order written (serde_json's own map
    /// sorts them).
    mod indexed {
        pub(super) struct Entries(pub(super) Vec<(String, serde_json::Value)>);

        impl<'de> serde::Deserialize<'de> for Entries {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                struct V;
                impl<'de> serde::de::Visitor<'de> for V {
                    type Value = Entries;
                    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                        f.write_str("an object")
                    }
                    fn visit_map<A: serde::de::MapAccess<'de>>(
                        self,
                        mut m: A,
                    ) -> Result<Entries, A::Error> {
                        let mut out = Vec::new();
                        while let Some(e) = m.next_entry()? {
                            out.push(e);
                        }
                        Ok(Entries(out))
                    }
                }
                d.deserialize_map(V)
            }
        }
    }

    #[test]
    fn the_fast_reader_leaves_what_it_cannot_read_to_serde() {
        for line in [
            r#"{"type":"probe","target":"a\"b","outcome":"ok","sent_unix_ns":1}"#,
            r#"{"type":"probe","target":"a","outcome":"ok","sent_unix_ns":1"#,
            r#"{"type":"probe","target":"a","outcome":"ok","sent_unix_ns":1,"l":[1]}"#,
            r#"{"type":"probe","target":"a","outcome":"ok","sent_unix_ns":-1}"#,
            r#"{"type":"probe","target":"a","outcome":"ok","sent_unix_ns":1}x"#,
            r#"{"type":"probe","target":"a","outcome":"ok","sent_unix_ns":1,,}"#,
            r#"{"type":"probe","target":"a","outcome":"ok","sent_unix_ns":nul}"#,
            r#"{ "type" : "probe" , "target" : "a" , "outcome" : "ok" , "sent_unix_ns" : 1 }"#,
            r#"{"type":"probe","target":"a","outcome":"ok","sent_unix_ns":1,"rtt_ns":2}{"type":"meta"}"#,
            r#"{"type":"probe","target":"a","outcome":"ok","sent_unix_ns":1,"rtt_ns":nullx}"#,
            r#"{"type":"probe","target":"a","outcome":"ok","sent_unix_ns":007,"rtt_ns":2}"#,
            r#"{"type":"probe","target":"a","outcome":"ok","sent_unix_ns":1,"rtt_ns":2,"parts":{"network_ns":1,}}"#,
            r#"{"type":"probe","outcome":"ok","target":"a","sent_unix_ns":1,"rtt_ns":2}"#,
            r#"{"type":"probe","target":"a","outcome":"ok","sent_unix_ns":1,"rtt_ns":2,"parts":{"network_ns":1}"#,
        ] {
            assert!(
                scan_probe_line(line.as_bytes(), &Keys::new()).is_none(),
                "{line}"
            );
        }
    }

    #[test]
    fn base64_round_trip() {
        assert_eq!(base64_decode("aGVsbG8=").unwrap(), b"hello");
        assert_eq!(base64_decode("aGVsbG8h").unwrap(), b"hello!");
        assert_eq!(base64_decode("aGk=").unwrap(), b"hi");
        assert!(base64_decode("a$==").is_none());
    }

    #[test]
    fn times_parse() {
        assert_eq!(parse_time("1.5").unwrap(), 1_500_000_000);
        assert_eq!(parse_time("1970-01-01T00:00:10Z").unwrap(), 10_000_000_000);
        assert!(parse_time("yesterday").unwrap_err().contains("RFC 3339"));
    }
}

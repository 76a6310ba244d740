//! Reading prober's files into [`Series`]: JSON lines (`prober run -o
//! json`, the daemon's JSONL sink, `prober sweep`) and HdrHistogram interval
//! logs (the daemon's and `prober run`'s hlog sink).
//!
//! A file is read as far as it can be: a line that is not JSON, a truncated
//! last line (a run killed mid-write), a tag this version does not know,
//! each becomes a [`InputFile::notes`] entry and the rest is still read.
//! Only a file with nothing prober wrote in it is an error.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use hdrhistogram::Histogram;
use hdrhistogram::serialization::Deserializer;
use hdrhistogram::serialization::interval_log::{IntervalLogIterator, LogEntry};
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
    /// The parts of its split, in [`PART_NAMES`] order; `None` where unknown.
    pub parts: [Option<u64>; 6],
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
    /// Which timestamps the target's RTT used (user, kernel).
    pub timestamps: Option<String>,
    /// Request size in bytes.
    pub size: Option<u64>,
    /// Host the run was made on.
    pub hostname: Option<String>,
    /// That host's kernel.
    pub kernel: Option<String>,
    /// prober's version.
    pub version: Option<String>,
}

impl Settings {
    /// The settings as (name, value) pairs for the page, "?" where unknown.
    pub fn rows(&self) -> Vec<(&'static str, String)> {
        let s = |v: &Option<String>| v.clone().unwrap_or_else(|| "?".to_owned());
        vec![
            (
                "interval",
                self.interval_ns
                    .map_or_else(|| "?".to_owned(), |n| crate::stats::format_ns(n as f64)),
            ),
            ("pacing", s(&self.pacing)),
            ("receive", s(&self.receive)),
            ("kernel stamps", s(&self.timestamps)),
            (
                "size",
                self.size
                    .map_or_else(|| "?".to_owned(), |n| format!("{n} B")),
            ),
            ("host", s(&self.hostname)),
            ("kernel", s(&self.kernel)),
            ("prober", s(&self.version)),
        ]
    }
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
    let bytes = std::fs::read(path).map_err(|source| ReadError::Io {
        path: path.to_owned(),
        source,
    })?;
    read_bytes(path, &bytes, filter)
}

/// Reads `bytes` as the content of the file named `path`.
pub fn read_bytes(path: &Path, bytes: &[u8], filter: &Filter) -> Result<InputFile, ReadError> {
    let not = |reason: &str| ReadError::NotProber {
        path: path.to_owned(),
        reason: reason.to_owned(),
    };
    let first = bytes.iter().find(|b| !b.is_ascii_whitespace());
    let mut file = match first {
        None => return Err(not("the file is empty")),
        Some(b'{') => read_json(path, bytes, filter),
        Some(b'#' | b'T' | b'0'..=b'9' | b'"') => read_hlog(path, bytes, filter),
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
    // probe and summary
    target: Option<String>,
    job: Option<String>,
    outcome: Option<String>,
    sent_unix_ns: Option<u64>,
    rtt_ns: Option<u64>,
    #[serde(default)]
    parts: Option<serde_json::Value>,
    rtt: Option<serde_json::Value>,
    // sweep
    #[serde(default)]
    order: Vec<(u64, u64, String)>,
}

#[derive(Deserialize, Clone, Copy)]
struct SweepTag {
    interval_ns: u64,
}

#[derive(Deserialize)]
struct MetaTarget {
    target: String,
    size: Option<u64>,
    timestamps: Option<String>,
}

fn read_json(path: &Path, bytes: &[u8], filter: &Filter) -> InputFile {
    let text = String::from_utf8_lossy(bytes);
    let mut file = InputFile {
        format: "json",
        ..InputFile::default()
    };
    // Settings per target name, from the latest meta line.
    let mut settings: BTreeMap<String, Settings> = BTreeMap::new();
    let mut index: BTreeMap<(String, Option<String>, Option<u64>), usize> = BTreeMap::new();
    let mut bad = 0usize;
    let mut first_bad = None;
    let mut foreign = 0usize;
    let lines: Vec<&str> = text.split('\n').collect();
    let last = lines.iter().rposition(|l| !l.trim().is_empty());
    for (n, raw) in lines.iter().enumerate() {
        let raw = raw.trim();
        if raw.is_empty() {
            continue;
        }
        let line: Line = match serde_json::from_str(raw) {
            Ok(l) => l,
            Err(e) => {
                if Some(n) == last && !text.ends_with('\n') {
                    file.notes.push(format!(
                        "line {}: the last line is cut off (was the run killed mid-write?); skipped",
                        n + 1
                    ));
                } else {
                    bad += 1;
                    first_bad.get_or_insert_with(|| format!("line {}: {e}", n + 1));
                }
                continue;
            }
        };
        match line.kind.as_deref() {
            Some("meta") => {
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
                            size: t.size,
                            hostname: line.hostname.clone(),
                            kernel: line.kernel.clone(),
                            version: line.version.clone(),
                        },
                    );
                }
            }
            Some("probe") => {
                let (Some(target), Some(outcome), Some(sent)) =
                    (line.target, line.outcome.as_deref(), line.sent_unix_ns)
                else {
                    bad += 1;
                    first_bad.get_or_insert_with(|| {
                        format!(
                            "line {}: a probe line without target, outcome or sent_unix_ns",
                            n + 1
                        )
                    });
                    continue;
                };
                if !filter.target(&target) || !filter.time(sent) {
                    continue;
                }
                let outcome = match outcome {
                    "ok" => ProbeOutcome::Ok,
                    "timeout" => ProbeOutcome::Timeout,
                    _ => ProbeOutcome::Error,
                };
                let mut parts = [None; 6];
                for (k, name) in PART_NAMES.iter().enumerate() {
                    parts[k] = line
                        .parts
                        .as_ref()
                        .and_then(|p| p.get(format!("{name}_ns")))
                        .and_then(serde_json::Value::as_u64);
                }
                let sweep = line.sweep.map(|s| s.interval_ns);
                let key = (target.clone(), line.job.clone(), sweep);
                let i = *index.entry(key).or_insert_with(|| {
                    let mut st = settings.get(&target).cloned().unwrap_or_default();
                    if sweep.is_some() {
                        st.interval_ns = sweep;
                    }
                    file.series.push(Series {
                        label: match &line.job {
                            Some(j) => format!("{j}/{target}"),
                            None => target.clone(),
                        },
                        file: path.to_owned(),
                        target: target.clone(),
                        job: line.job.clone(),
                        sweep_interval_ns: sweep,
                        settings: st,
                        ..Series::default()
                    });
                    file.series.len() - 1
                });
                file.series[i].probes.push(Probe {
                    sent_unix_ns: sent,
                    rtt_ns: if outcome == ProbeOutcome::Ok {
                        line.rtt_ns
                    } else {
                        None
                    },
                    outcome,
                    parts,
                });
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
    file
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
    for entry in IntervalLogIterator::new(bytes) {
        let interval = match entry {
            Ok(LogEntry::BaseTime(d)) => {
                base_ns = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
                continue;
            }
            Ok(LogEntry::StartTime(_)) => continue,
            Ok(LogEntry::Interval(i)) => i,
            Err(e) => {
                bad += 1;
                first_bad.get_or_insert_with(|| format!("{e:?}"));
                // The iterator cannot resynchronise after a parse error.
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
    // Hand-written (20 lines) rather than a dependency for the one call:
    // hdrhistogram re-exports no decoder.
    fn val(c: u8) -> Option<u32> {
        Some(match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        } as u32)
    }
    let s = s.trim().trim_end_matches('=').as_bytes();
    let mut out = Vec::with_capacity(s.len() * 3 / 4);
    for chunk in s.chunks(4) {
        let mut acc = 0u32;
        for (i, &c) in chunk.iter().enumerate() {
            acc |= val(c)? << (18 - 6 * i);
        }
        let bytes = acc.to_be_bytes();
        match chunk.len() {
            4 => out.extend_from_slice(&bytes[1..4]),
            3 => out.extend_from_slice(&bytes[1..3]),
            2 => out.push(bytes[1]),
            _ => return None,
        }
    }
    Some(out)
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

//! Prometheus metrics of the daemon: per target counters, errors by
//! reason, and histograms of the RTT, its parts, latency and send lag.
//!
//! Counters are read at scrape time from the counts the core collector
//! keeps (copied here on every sample) and from each probe's anomaly
//! counters, so nothing is counted twice; a target's series go with it
//! ([`Sink::target_removed`]).
//!
//! The targets' families are written by [`crate::exposition`], the
//! daemon's own few through prometheus/client_rust's registry
//! ([`scrape`] puts them together).
//!
//! Why the targets' families are written by [`crate::exposition`] and not
//! by prometheus-client: at 10,000 targets with native and per-part
//! histograms, most of a protobuf scrape's CPU went to prometheus-client
//! building its message tree (copies of label strings), over the scale
//! goal; BENCHMARKS.md ("A fleet citizen" and the sections before it) has
//! the figures of both. prometheus-client still serves the daemon's own
//! families.
//!
//! A scrape runs on the blocking pool and takes each target's series lock
//! only to copy it, so probing waits for it only at that one target.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use parking_lot::RwLock;

use prober_core::sequence::{BURST_BUCKETS, LossBursts};
use prober_core::stats::Tally;
use std::time::Duration;

use prober_core::{Anomalies, AnomalyReader, Context, Outcome, Sample, Sink, TargetEntry};

use crate::exposition::{Histogram, Kind, SeriesLabels, Value, Writer};
use crate::window::{Window, WindowStats};

/// Upper bounds of the RTT histogram buckets, in seconds: 5 µs to 10 s
/// (loopback RTTs are 5-100 µs, a datacenter's 50-500 µs).
pub const RTT_BUCKETS: [f64; 20] = [
    0.000_005, 0.000_01, 0.000_025, 0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005,
    0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// How the duration histograms are bucketed: classic buckets (every
/// scrape format) and, optionally, native exponential buckets (sent only to
/// scrapers that ask for the protobuf format, as Prometheus does with
/// `--enable-feature=native-histograms`).
#[derive(Debug, Clone, PartialEq)]
pub struct Buckets {
    /// Upper bounds of the classic buckets, seconds, ascending.
    pub classic: Arc<[f64]>,
    /// Growth factor of the native buckets (the largest of Prometheus's
    /// schemas at or under it is used: 1.1 gives 2^(1/8) = 1.0905, so a
    /// quantile is known to within 9 %); `None`: classic buckets only.
    pub native_factor: Option<f64>,
    /// Which histogram families are exported, and with which buckets.
    pub families: Families,
}

/// How one histogram family is exported. A native histogram is one series
/// (and reaches only scrapers that ask for protobuf); classic buckets are
/// a series each, plus `_sum` and `_count`, in every format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HistMode {
    /// Not kept, not exported.
    Off,
    /// Classic buckets only, in every format.
    Classic,
    /// Native buckets only: in protobuf scrapes, absent from the text ones.
    Native,
    /// Both: native for protobuf scrapes, classic for everyone else.
    Both,
}

impl HistMode {
    /// The config's names, in the order of the variants.
    pub const NAMES: [&'static str; 4] = ["off", "classic", "native", "both"];

    /// The mode named `name` (one of [`HistMode::NAMES`]).
    pub fn parse(name: &str) -> Option<Self> {
        match name {
            "off" => Some(Self::Off),
            "classic" => Some(Self::Classic),
            "native" => Some(Self::Native),
            "both" => Some(Self::Both),
            _ => None,
        }
    }

    /// Keeps classic buckets.
    pub fn classic(self) -> bool {
        matches!(self, Self::Classic | Self::Both)
    }

    /// Keeps native buckets.
    pub fn native(self) -> bool {
        matches!(self, Self::Native | Self::Both)
    }

    /// Exported in some format.
    pub fn on(self) -> bool {
        self != Self::Off
    }

    /// In a scrape of `format`: classic buckets go everywhere, native ones
    /// only in protobuf.
    fn exported_in(self, format: Format) -> bool {
        self.classic() || (self.native() && format == Format::Protobuf)
    }

    /// Without native buckets (`native_histograms = false`): what was
    /// native becomes classic.
    #[must_use]
    pub fn without_native(self) -> Self {
        match self {
            Self::Off => Self::Off,
            _ => Self::Classic,
        }
    }
}

/// The histogram families of every target and how each is exported. The
/// default keeps a target within a Prometheus operator's series budget:
/// RTT with both kinds of buckets (a text scrape gets one classic
/// histogram), latency, send lag and HTTP phases native only, the rest off
/// (docs/config.md, "Series per target").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Families {
    /// `prober_rtt_seconds`.
    pub rtt: HistMode,
    /// `prober_latency_seconds`.
    pub latency: HistMode,
    /// `prober_send_lag_seconds`.
    pub send_lag: HistMode,
    /// `prober_ipdv_seconds`.
    pub ipdv: HistMode,
    /// `prober_loss_burst_length`: classic or off (its buckets count
    /// probes, not seconds).
    pub loss_burst: HistMode,
    /// `prober_phase_duration_seconds` (HTTP's phases).
    pub phases: HistMode,
    /// `prober_rtt_part_seconds` (the parts of the split).
    pub parts: HistMode,
}

impl Default for Families {
    fn default() -> Self {
        Self {
            rtt: HistMode::Both,
            latency: HistMode::Native,
            send_lag: HistMode::Native,
            ipdv: HistMode::Off,
            loss_burst: HistMode::Off,
            phases: HistMode::Native,
            parts: HistMode::Off,
        }
    }
}

impl Families {
    /// Every family on, with both kinds of buckets (the loss bursts'
    /// classic ones).
    pub fn everything() -> Self {
        Self {
            rtt: HistMode::Both,
            latency: HistMode::Both,
            send_lag: HistMode::Both,
            ipdv: HistMode::Both,
            loss_burst: HistMode::Classic,
            phases: HistMode::Both,
            parts: HistMode::Both,
        }
    }

    /// Without native buckets: every family that is on keeps classic ones.
    #[must_use]
    pub fn without_native(self) -> Self {
        Self {
            rtt: self.rtt.without_native(),
            latency: self.latency.without_native(),
            send_lag: self.send_lag.without_native(),
            ipdv: self.ipdv.without_native(),
            loss_burst: self.loss_burst.without_native(),
            phases: self.phases.without_native(),
            parts: self.parts.without_native(),
        }
    }
}

/// The native buckets' default growth factor, as client_golang's.
pub const NATIVE_FACTOR: f64 = 1.1;

impl Default for Buckets {
    fn default() -> Self {
        Self {
            classic: RTT_BUCKETS.into(),
            native_factor: Some(NATIVE_FACTOR),
            families: Families::default(),
        }
    }
}

impl Buckets {
    /// A histogram of a family exported as `mode`; `None` when it is off.
    fn histogram(&self, mode: HistMode) -> Option<Histogram> {
        // Values are durations, never below zero; the native zero bucket is
        // zero-wide, which keeps the smallest ones in their own buckets.
        let classic: Arc<[f64]> = if mode.classic() {
            Arc::clone(&self.classic)
        } else {
            Arc::from([])
        };
        let native = self.native_factor.filter(|_| mode.native());
        mode.on().then(|| Histogram::new(&classic, native))
    }
}

/// Label names every series has; job labels may not reuse them, nor the
/// names Prometheus itself gives meaning to.
pub const RESERVED_LABELS: [&str; 12] = [
    "probe",
    "flow",
    "job",
    "target",
    "protocol",
    "reason",
    "part",
    "phase",
    "direction",
    "le",
    "quantile",
    "instance",
];

/// What `/metrics` reads of a target: cheap to copy (the histograms are
/// a shared handle), so a scrape copies each target's under its series'
/// lock and encodes with the lock released.
#[derive(Clone)]
struct Exported {
    labels: Arc<SeriesLabels>,
    tally: Tally,
    anomalies: AnomalyReader,
    /// Scheduled time lost to loss bursts that ended, seconds (copied from
    /// the core's sequence tracker).
    outage_s: f64,
    /// The bursts themselves, only where `prober_loss_burst_length` is
    /// exported (off by default): 160 bytes a target, kept and copied at
    /// every scrape, for a family nobody reads.
    bursts: Option<Box<LossBursts>>,
    /// RFC 3550 jitter, ns; `None` before two consecutive answers.
    jitter: Option<f64>,
    /// Whether the last probe was answered; `None` before the first.
    up: Option<bool>,
    /// Answered probes whose split was not complete, by why
    /// ([`prober_core::Missing::ALL`] order); made at the first one, and
    /// only when [`Families::parts`] is on (with transmit stamps off, the
    /// daemon's default, every probe would count).
    split_missing: Option<Box<[u64; prober_core::stats::MISSING_COUNT]>>,
    /// One lock for all of a target's histograms: a sample observes in
    /// up to ten of them.
    hists: Arc<Mutex<Hists>>,
    /// How each family is exported.
    families: Families,
}

/// A target's histograms.
struct Hists {
    rtt: Option<Histogram>,
    /// One histogram per part ([`prober_core::Parts::ALL_NAMES`]: the six
    /// and the responder's turnaround), made when the part is first known
    /// (only when [`Families::parts`] is on). Empty until then: thirteen
    /// empty slots inline were 1.4 kB a target.
    parts: Vec<Option<Histogram>>,
    /// One histogram per phase of an application request (HTTP), made
    /// when the phase is first known; empty until then.
    phases: Vec<Option<Histogram>>,
    /// |IPDV| between consecutive answered probes.
    ipdv: Option<Histogram>,
    /// Reply minus scheduled send (the coordinated-omission view).
    latency: Option<Histogram>,
    /// Actual send minus scheduled send, of every probe sent.
    send_lag: Option<Histogram>,
}

struct Series {
    /// What `/metrics` reads.
    m: Exported,
    /// The last [`RECENT`] probes' RTTs in µs (NaN: lost; half the bytes
    /// of an `Option<f32>`), for the
    /// status page.
    recent: std::collections::VecDeque<f32>,
    /// The last error, and how many probes ago.
    last_error: Option<String>,
    /// The last minute (6 slots of 10 s) and hour (6 of 10 min), for the
    /// status page.
    minute: Window,
    hour: Window,
    /// The parts of the last answered probe's round trip, ns
    /// ([`prober_core::Parts::ALL_NAMES`]).
    last_parts: [Option<u64>; 7],
}

/// Probes per target the status page's loss and quantiles cover. As f32
/// µs it is 400 bytes a target (4 MB at 10,000 targets).
pub const RECENT: usize = 100;

/// One target's line on the daemon's status page.
#[derive(Debug, Clone, PartialEq)]
pub struct StatusRow {
    /// `probe`, `target`, `protocol`, then the job's and target's labels.
    pub labels: Vec<(String, String)>,
    /// Since the target started.
    pub tally: Tally,
    /// The last error's text, if any probe failed.
    pub last_error: Option<String>,
    /// The last [`RECENT`] probes, oldest first: RTT in µs, or `None` if
    /// lost (for a sparkline and the last result).
    pub recent_rtts: Vec<Option<f32>>,
    /// The last minute and the last hour (whole slots: 10 s and 10 min).
    pub minute: WindowStats,
    /// See `minute`.
    pub hour: WindowStats,
    /// The parts of the last answered probe's round trip that are known:
    /// name and ns.
    pub last_parts: Vec<(&'static str, u64)>,
}

struct State {
    /// Boxed: a `Series` is 648 bytes, and unboxed a `BTreeMap`'s nodes
    /// were 7 KB each; finding a target's series on every sample went
    /// through several of them (about half of `record`'s own time at 10,000
    /// targets, from perf). A hash map finds it with one probe; a scrape
    /// sorts the series by id, the status page its rows by labels. Each
    /// has a lock of its own ([`PrometheusSink::each_of`]).
    series: prober_core::IdMap<Box<parking_lot::Mutex<Series>>>,
    /// Where the windows count their slots from.
    origin: std::time::Instant,
}

impl Default for State {
    fn default() -> Self {
        Self {
            series: prober_core::IdMap::default(),
            origin: std::time::Instant::now(),
        }
    }
}

/// The sink's targets, shared: the probing thread records one target's
/// series under its own lock, and a scrape reads them the same way, so
/// neither waits for the other unless both are at the same target.
fn read(state: &RwLock<State>) -> parking_lot::RwLockReadGuard<'_, State> {
    state.read()
}

/// The sink's targets, to add or remove one.
fn write(state: &RwLock<State>) -> parking_lot::RwLockWriteGuard<'_, State> {
    state.write()
}

/// The labels of a target's series, in this order: `probe` (its job),
/// `target`, `protocol`, then the job's and the target's own labels. The
/// OTLP sink gives its data points the same attributes.
pub fn series_labels(info: &prober_core::TargetInfo) -> Vec<(String, String)> {
    let mut labels = vec![
        ("probe".to_owned(), info.job.clone().unwrap_or_default()),
        ("target".to_owned(), info.target.clone()),
        ("protocol".to_owned(), info.protocol.clone()),
    ];
    labels.extend(info.labels.iter().map(|(k, v)| (k.clone(), v.clone())));
    labels
}

/// Feeds the series that `/metrics` reads ([`scrape`]).
#[derive(Clone, Default)]
pub struct PrometheusSink {
    state: Arc<RwLock<State>>,
    buckets: Buckets,
    /// The size of the last scrape, to reserve as much for the next.
    last_size: Arc<AtomicUsize>,
}

impl std::fmt::Debug for PrometheusSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PrometheusSink")
            .field("targets", &read(&self.state).series.len())
            .finish()
    }
}

impl PrometheusSink {
    /// A sink with no series.
    pub fn new() -> Self {
        Self::default()
    }

    /// Exports the histogram families `buckets` names, bucketed as it says
    /// (default: [`Families::default`], [`RTT_BUCKETS`] and native buckets
    /// of factor [`NATIVE_FACTOR`]).
    #[must_use]
    pub fn with_buckets(mut self, buckets: Buckets) -> Self {
        self.buckets = buckets;
        self
    }

    /// Every target's families in `format`, without OpenMetrics' closing
    /// `# EOF` ([`scrape`] adds the daemon's own families and ends it).
    pub fn encode(&self, format: Format) -> Vec<u8> {
        let series = self.snapshot();
        let mut w = Writer::new(format, self.last_size.load(Ordering::Relaxed) * 9 / 8);
        encode_targets(&mut w, &series);
        let out = w.finish();
        self.last_size.store(out.len(), Ordering::Relaxed);
        out
    }

    /// As [`PrometheusSink::encode`], handing the exposition to `spill` in
    /// pieces of about `chunk` bytes as it is written (each ends at a whole
    /// sample or family), and returning the rest: what a scrape holds at
    /// once is a piece, not the whole (tens of MB at 10,000 targets).
    pub fn encode_streaming(&self, format: Format, chunk: usize, spill: Spill<'static>) -> Vec<u8> {
        let series = self.snapshot();
        let mut w = Writer::streaming(format, chunk, spill);
        encode_targets(&mut w, &series);
        w.finish()
    }

    /// Every target's exported state, in the order of their ids.
    fn snapshot(&self) -> Vec<Exported> {
        // Copied under the lock, encoded without it: the sink records on
        // the probing thread and must not wait for a scrape.
        let mut series = self.each_of(&self.ids(), |id, s| (id, s.m.clone()));
        series.sort_unstable_by_key(|(id, _)| *id);
        series.into_iter().map(|(_, m)| m).collect()
    }

    /// The ids of every target now.
    fn ids(&self) -> Vec<usize> {
        read(&self.state).series.keys().copied().collect()
    }

    /// `f` of each target of `ids` still here, in that order, each under
    /// its own series' lock: the probing thread, recording, waits only for
    /// the one target being read, never for the whole.
    ///
    /// With one lock for every series, taken [`LOCK_CHUNK`] targets at a
    /// time, `perf` saw the probing thread sleep on it chunk after chunk
    /// for a whole snapshot: woken at each chunk's end, it ran only after
    /// this thread had taken the lock back for the next (BENCHMARKS.md,
    /// "A scrape's snapshot and the probing thread").
    /// The targets' map is still read a chunk at a time, and handed fairly
    /// to a reload waiting to add or remove targets.
    fn each_of<T>(&self, ids: &[usize], mut f: impl FnMut(usize, &Series) -> T) -> Vec<T> {
        let mut out = Vec::with_capacity(ids.len());
        for chunk in ids.chunks(LOCK_CHUNK) {
            let state = read(&self.state);
            out.extend(
                chunk
                    .iter()
                    .filter_map(|id| Some(f(*id, &state.series.get(id)?.lock()))),
            );
            parking_lot::RwLockReadGuard::unlock_fair(state);
        }
        out
    }

    /// Removes a target's series now (a reload restarts it under a new id),
    /// while its last samples may still arrive; they are ignored here.
    pub fn forget(&self, id: usize) {
        write(&self.state).series.remove(&id);
    }

    fn add(&self, t: &TargetEntry) {
        let mut state = write(&self.state);
        let origin = state.origin;
        let info = &t.info;
        let f = self.buckets.families;
        let series = Series {
            m: Exported {
                labels: Arc::new(SeriesLabels::new(series_labels(info))),
                tally: t.stats.tally,
                anomalies: t.anomaly_reader(),
                outage_s: t.stats.seq.bursts.outage_s,
                bursts: f.loss_burst.on().then(|| Box::new(t.stats.seq.bursts)),
                jitter: None,
                up: None,
                split_missing: None,
                hists: Arc::new(Mutex::new(Hists {
                    rtt: self.buckets.histogram(f.rtt),
                    parts: Vec::new(),
                    phases: Vec::new(),
                    ipdv: self.buckets.histogram(f.ipdv),
                    latency: self.buckets.histogram(f.latency),
                    send_lag: self.buckets.histogram(f.send_lag),
                })),
                families: f,
            },
            recent: std::collections::VecDeque::with_capacity(RECENT),
            last_error: None,
            minute: Window::new(origin, Duration::from_secs(10), 6),
            // Six slots of 10 minutes, not twelve of 5: a closed slot packs
            // to about as many bytes whatever its length, so this halves
            // what an hour of a wide spread of RTTs holds (BENCHMARKS.md,
            // "Memory at 10,000 targets, fourth pass"), for an hour that
            // slides by 10 minutes.
            hour: Window::new(origin, Duration::from_secs(600), 6),
            last_parts: [None; 7],
        };
        state
            .series
            .insert(info.id, Box::new(parking_lot::Mutex::new(series)));
    }

    /// Every target's place on the status page, in the order of their
    /// labels (probe, target, ...): enough to sort, count and filter them
    /// all. The page's own rows come from [`PrometheusSink::status_rows`]:
    /// a full row of every target was 12 MB at 10,000 targets, for a page
    /// that shows 200 (BENCHMARKS.md, "Memory at 10,000 targets").
    pub fn status_index(&self) -> Vec<StatusKey> {
        let mut keys = self.each_of(&self.ids(), |id, s| StatusKey {
            id,
            labels: Arc::clone(&s.m.labels),
            recent: s.recent.len(),
            lost: s.recent.iter().filter(|us| us.is_nan()).count(),
        });
        keys.sort_by(|a, b| a.labels.pairs.cmp(&b.labels.pairs));
        keys
    }

    /// The status lines of the targets `ids`, in that order; a target
    /// removed since is left out.
    pub fn status_rows(&self, ids: &[usize]) -> Vec<StatusRow> {
        let now = std::time::Instant::now();
        self.each_of(ids, |_, s| StatusRow {
            labels: s.m.labels.pairs.clone(),
            tally: s.m.tally,
            last_error: s.last_error.clone(),
            recent_rtts: s
                .recent
                .iter()
                .map(|us| (!us.is_nan()).then_some(*us))
                .collect(),
            minute: s.minute.stats(now),
            hour: s.hour.stats(now),
            last_parts: prober_core::Parts::ALL_NAMES
                .iter()
                .zip(s.last_parts)
                .filter_map(|(n, v)| Some((*n, v?)))
                .collect(),
        })
    }
}

/// A few hundred targets per read of the sink's map of targets
/// ([`PrometheusSink::each_of`]): a reload that adds or removes targets
/// waits for at most that many (a status row's window quantiles cost some
/// µs a target).
const LOCK_CHUNK: usize = 256;

/// A target on the status page, before its row is made.
#[derive(Debug, Clone)]
pub struct StatusKey {
    /// The target's id (for [`PrometheusSink::status_rows`]).
    pub id: usize,
    /// Its labels, shared with its series.
    pub labels: Arc<SeriesLabels>,
    /// Of its last [`RECENT`] probes, how many there were...
    pub recent: usize,
    /// ...and how many of them were lost.
    pub lost: usize,
}

impl Sink for PrometheusSink {
    fn start(&mut self, cx: &Context<'_>) -> std::io::Result<()> {
        for t in cx.targets.values() {
            self.add(t);
        }
        Ok(())
    }

    fn target_added(&mut self, _cx: &Context<'_>, t: &TargetEntry) -> std::io::Result<()> {
        self.add(t);
        Ok(())
    }

    fn target_removed(&mut self, _cx: &Context<'_>, t: &TargetEntry) -> std::io::Result<()> {
        self.forget(t.info.id);
        Ok(())
    }

    fn record(&mut self, _cx: &Context<'_>, t: &TargetEntry, s: &Sample) -> std::io::Result<()> {
        let state = read(&self.state);
        if let Some(series) = state.series.get(&t.info.id) {
            let series = &mut *series.lock();
            let m = &mut series.m;
            m.tally = t.stats.tally;
            m.up = Some(matches!(s.outcome, Outcome::Ok(_)));
            let seq = &t.stats.seq;
            m.outage_s = seq.bursts.outage_s;
            if let Some(b) = &mut m.bursts {
                **b = seq.bursts;
            }
            if seq.ipdv.count > 0 {
                m.jitter = Some(seq.ipdv.rfc3550);
            }
            let mut h = m.hists.lock().unwrap_or_else(PoisonError::into_inner);
            if let Some(ipdv) = &mut h.ipdv {
                for d in &seq.last_ipdvs {
                    ipdv.observe(d.unsigned_abs() as f64 / 1e9);
                }
            }
            if let Some(lag) = &mut h.send_lag {
                lag.observe(s.send_lag().as_secs_f64());
            }
            if let (Some(lat), Some(h)) = (s.latency(), &mut h.latency) {
                h.observe(lat.as_secs_f64());
            }
            if series.recent.len() == RECENT {
                series.recent.pop_front();
            }
            let rtt_us = match &s.outcome {
                Outcome::Ok(r) => Some(r.rtt().as_secs_f64() * 1e6),
                Outcome::Error(e) => {
                    series.last_error = Some(e.to_string());
                    None
                }
                _ => None,
            };
            series
                .recent
                .push_back(rtt_us.map_or(f32::NAN, |us| us as f32));
            let ended = s.sent.into_std() + s.rtt().unwrap_or_default();
            series.minute.push(ended, rtt_us);
            series.hour.push(ended, rtt_us);
            if let Outcome::Ok(r) = &s.outcome {
                if let Some(rtt) = &mut h.rtt {
                    rtt.observe(r.rtt().as_secs_f64());
                }
                let f = self.buckets.families;
                observe_each(&self.buckets, f.phases, &mut h.phases, r.app.phases.0);
                let split = r.parts();
                let parts = split.list_all();
                observe_each(&self.buckets, f.parts, &mut h.parts, parts);
                if let (true, Some(why)) = (f.parts.on(), split.missing) {
                    let counts = m.split_missing.get_or_insert_with(Box::default);
                    counts[why as usize] += 1;
                }
                drop(h);
                series.last_parts = parts;
            }
        }
        Ok(())
    }
}

/// The registry in the OpenMetrics text format (what Prometheus asks for
/// first).
///
/// # Errors
/// A metric that fails to encode.
pub fn encode_openmetrics(
    registry: &prometheus_client::registry::Registry,
) -> Result<String, std::fmt::Error> {
    let mut out = String::with_capacity(64 * 1024);
    prometheus_client::encoding::text::encode(&mut out, registry)?;
    Ok(out)
}

pub use crate::exposition::{Format, Spill};

/// Encoding prometheus-client's registries (the daemon's own families).
impl Format {
    /// `registry` in this format.
    ///
    /// # Errors
    /// A metric that fails to encode.
    pub fn encode(
        self,
        registry: &prometheus_client::registry::Registry,
    ) -> Result<Vec<u8>, std::fmt::Error> {
        match self {
            Self::Protobuf => encode_protobuf(registry),
            Self::OpenMetrics => encode_openmetrics(registry).map(String::into_bytes),
            Self::Text => encode_text(registry).map(String::into_bytes),
        }
    }
}

/// What `/metrics` serves in `format`: the targets' families of `sink`,
/// then those of `registry` (the daemon's own), as one exposition.
///
/// # Errors
/// A metric of the registry that fails to encode.
pub fn scrape(
    format: Format,
    sink: &PrometheusSink,
    registry: &prometheus_client::registry::Registry,
) -> Result<Vec<u8>, std::fmt::Error> {
    let mut out = sink.encode(format);
    // The registry's ends with OpenMetrics' `# EOF`.
    out.extend_from_slice(&format.encode(registry)?);
    Ok(out)
}

/// As [`scrape`], streamed: the targets' families go to `spill` in pieces
/// of about `chunk` bytes as they are written; the rest, with the
/// registry's families, is returned.
///
/// # Errors
/// A metric of the registry that fails to encode.
pub fn scrape_streaming(
    format: Format,
    sink: &PrometheusSink,
    registry: &prometheus_client::registry::Registry,
    chunk: usize,
    spill: Spill<'static>,
) -> Result<Vec<u8>, std::fmt::Error> {
    let mut out = sink.encode_streaming(format, chunk, spill);
    out.extend_from_slice(&format.encode(registry)?);
    Ok(out)
}

/// The registry as length-delimited `io.prometheus.client.MetricFamily`
/// messages: the one format that carries native histograms.
///
/// # Errors
/// A metric that fails to encode.
pub fn encode_protobuf(
    registry: &prometheus_client::registry::Registry,
) -> Result<Vec<u8>, std::fmt::Error> {
    prometheus_client::encoding::prometheus_protobuf::encode_to_vec(registry)
        .map_err(|_| std::fmt::Error)
}

/// The registry in the Prometheus text format 0.0.4, for clients that do
/// not ask for OpenMetrics (curl, promtool, older scrapers). prometheus
/// client_rust writes only OpenMetrics; the two differ, for what we expose,
/// in that a counter family is named without `_total` in OpenMetrics'
/// `# HELP`/`# TYPE` lines, an info family is OpenMetrics' own type (a gauge
/// named `_info` here), and that OpenMetrics ends with `# EOF`.
///
/// # Errors
/// A metric that fails to encode.
pub fn encode_text(
    registry: &prometheus_client::registry::Registry,
) -> Result<String, std::fmt::Error> {
    // Converted as it is written, line by line: building the OpenMetrics
    // text first and copying it held both (2 x 121 MB at 10,000 targets).
    let mut out = TextFormat {
        out: String::with_capacity(64 * 1024),
        comment: String::new(),
        help: String::new(),
        line_start: true,
    };
    prometheus_client::encoding::text::encode(&mut out, registry)?;
    Ok(out.out)
}

/// OpenMetrics text in, Prometheus 0.0.4 text out: sample lines pass
/// through, comment lines are held until whole and then rewritten.
struct TextFormat {
    out: String,
    /// The comment line being written, while it is one.
    comment: String,
    /// The family's `# HELP` line, until its `# TYPE` line names the kind.
    help: String,
    line_start: bool,
}

impl TextFormat {
    /// One whole comment line, with its newline. Families come as HELP,
    /// TYPE, then samples: a counter family's HELP and TYPE lines are
    /// renamed once its TYPE says it is one.
    fn comment_line(&mut self, line: &str) {
        if line.starts_with("# HELP ") {
            line.clone_into(&mut self.help);
        } else if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest
                .trim_end()
                .split_once(' ')
                .unwrap_or_else(|| (rest.trim_end(), ""));
            // An OpenMetrics info family is a gauge of 1 named `_info`.
            let (suffix, kind) = match kind {
                "counter" => ("_total", kind),
                "info" => ("_info", "gauge"),
                _ => ("", kind),
            };
            if !self.help.is_empty() {
                let text = self.help["# HELP ".len()..]
                    .split_once(' ')
                    .map_or("\n", |(_, t)| t);
                self.out.push_str(&format!("# HELP {name}{suffix} {text}"));
                self.help.clear();
            }
            self.out
                .push_str(&format!("# TYPE {name}{suffix} {kind}\n"));
        }
        // `# EOF` and `# UNIT` have no place in the 0.0.4 format.
    }
}

impl std::fmt::Write for TextFormat {
    fn write_str(&mut self, mut s: &str) -> std::fmt::Result {
        while !s.is_empty() {
            if self.line_start && s.starts_with('#') {
                self.comment.push('#');
                s = &s[1..];
                self.line_start = false;
                continue;
            }
            let (piece, rest) = match s.find('\n') {
                Some(i) => s.split_at(i + 1),
                None => (s, ""),
            };
            self.line_start = piece.ends_with('\n');
            if self.comment.is_empty() {
                self.out.push_str(piece);
            } else {
                self.comment.push_str(piece);
                if self.line_start {
                    let line = std::mem::take(&mut self.comment);
                    self.comment_line(&line);
                    self.comment = line;
                    self.comment.clear();
                }
            }
            s = rest;
        }
        Ok(())
    }
}

/// A histogram family's name, help text and which of a series' it is.
type HistogramDef = (
    &'static str,
    &'static str,
    HistMode,
    fn(&Hists) -> Option<&Histogram>,
);

/// A counter's name (without `_total`), help text and how to read it.
type CounterDef<T> = (&'static str, &'static str, fn(&T) -> u64);

/// Every target's families: the counters, the phases, the four duration
/// histograms, loss and jitter, the parts.
fn encode_targets(w: &mut Writer, series: &[Exported]) {
    // Every target of a sink shares its families' modes.
    let Some(f) = series.first().map(|s| s.families) else {
        return;
    };
    encode_counts(w, series);
    encode_by_label(
        w,
        series,
        (
            "prober_phase_duration_seconds",
            "Phases of answered application requests: resolve, connect, tls, write, first_byte, body (as blackbox_exporter's probe_http_duration_seconds)",
            "phase",
        ),
        (f.phases, &prober_core::Phases::NAMES),
        |s| &s.phases,
    );
    let views: [HistogramDef; 4] = [
        (
            "prober_rtt_seconds",
            "Round-trip time of answered probes",
            f.rtt,
            |s| s.rtt.as_ref(),
        ),
        (
            "prober_latency_seconds",
            "Reply minus scheduled send of answered probes: the RTT plus any send lag, the coordinated-omission view",
            f.latency,
            |s| s.latency.as_ref(),
        ),
        (
            "prober_send_lag_seconds",
            "Actual send minus scheduled send of every probe sent",
            f.send_lag,
            |s| s.send_lag.as_ref(),
        ),
        (
            "prober_ipdv_seconds",
            "Absolute delay variation between the RTTs of consecutive answered probes (RFC 3393 IPDV); _sum / _count is the mean |IPDV|",
            f.ipdv,
            |s| s.ipdv.as_ref(),
        ),
    ];
    for (name, help, mode, pick) in views {
        if !mode.exported_in(w.format()) {
            continue;
        }
        w.family(name, help, Kind::Histogram);
        for s in series {
            // Copied under the lock, encoded without it (see
            // `lock_hists`).
            let h = pick(&lock_hists(s)).cloned();
            if let Some(h) = h {
                w.histogram(&s.labels, None, &h);
            }
        }
    }
    encode_sequence(w, series, f.loss_burst.on());
    encode_by_label(
        w,
        series,
        (
            "prober_rtt_part_seconds",
            "Parts of the round trip of answered probes: client_send, network, responder_wake, responder_dwell, responder_send, client_wake, and responder_turnaround where a responder reports only that (docs/timestamps.md)",
            "part",
        ),
        (f.parts, &prober_core::Parts::ALL_NAMES),
        |s| &s.parts,
    );
}

/// A family with a series for each target whose anomaly counts `get` a
/// value from; nothing at all when none does.
fn encode_known(
    w: &mut Writer,
    (name, help, kind): (&'static str, &str, Kind),
    anomalies: &[(&SeriesLabels, Anomalies)],
    get: impl Fn(&Anomalies) -> Option<Value>,
) {
    if !anomalies.iter().any(|(_, a)| get(a).is_some()) {
        return;
    }
    w.family(name, help, kind);
    for (labels, a) in anomalies {
        if let Some(v) = get(a) {
            w.value(labels, None, v);
        }
    }
}

/// A counter family per definition, with a series per target.
fn encode_counter_defs(w: &mut Writer, defs: &[CounterDef<Tally>], series: &[Exported]) {
    // Read from the snapshot in place: a copy of every target's tally for
    // it took 136 bytes a target at every scrape (BENCHMARKS.md, "Memory at
    // 10,000 targets, third pass").
    for (name, help, get) in defs {
        w.family(name, help, Kind::Counter);
        for s in series {
            w.value(&s.labels, None, Value::U64(get(&s.tally)));
        }
    }
}

/// `prober_split_incomplete`'s help, naming the reasons from
/// [`prober_core::Missing::ALL`] (a new reason is named without a line here).
static SPLIT_INCOMPLETE_HELP: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
    let names: Vec<&str> = prober_core::Missing::ALL.iter().map(|m| m.name()).collect();
    format!(
        "Answered probes whose split lacks a part, by the first stamp missing along the round trip ({})",
        names.join(", ")
    )
});

/// The counters and gauges of every target: probes by outcome, errors by
/// reason, the probe's anomaly counts, and what only some protocols know.
fn encode_counts(w: &mut Writer, series: &[Exported]) {
    let counters: [CounterDef<Tally>; 4] = [
        (
            "prober_probes_sent",
            "Probes sent (ok + timeout + error)",
            |t| t.sent,
        ),
        (
            "prober_probes_ok",
            "Probes answered within the timeout",
            |t| t.ok,
        ),
        (
            "prober_probes_timeout",
            "Probes with no reply within the timeout",
            |t| t.timeout,
        ),
        (
            "prober_probes_error",
            "Probes that failed (refused, unreachable, bad reply)",
            |t| t.error,
        ),
    ];
    encode_counter_defs(w, &counters, series);
    w.family(
        "prober_probe_errors",
        "Failed probes by reason (refused, unreachable, reset, tls, protocol, timeout, local, status, content, too_large, truncated, other)",
        Kind::Counter,
    );
    for s in series {
        for (kind, n) in s.tally.errors_by_kind() {
            w.value(&s.labels, Some(("reason", kind.as_str())), Value::U64(n));
        }
    }
    if series.iter().any(|s| s.split_missing.is_some()) {
        w.family(
            "prober_split_incomplete",
            &SPLIT_INCOMPLETE_HELP,
            Kind::Counter,
        );
        for s in series {
            let Some(counts) = &s.split_missing else {
                continue;
            };
            for (why, n) in prober_core::Missing::ALL.iter().zip(counts.iter()) {
                if *n > 0 {
                    w.value(&s.labels, Some(("reason", why.name())), Value::U64(*n));
                }
            }
        }
    }
    let anomalies: Vec<(&SeriesLabels, Anomalies)> = series
        .iter()
        .map(|s| (&*s.labels, (s.anomalies)()))
        .collect();
    let extra: [CounterDef<Anomalies>; 5] = [
        (
            "prober_replies_late",
            "Replies that arrived after their probe timed out",
            |a| a.late,
        ),
        (
            "prober_replies_duplicate",
            "Second and later replies to one probe",
            |a| a.duplicate,
        ),
        (
            "prober_replies_reordered",
            "Replies that arrived after a reply to a later probe",
            |a| a.reordered,
        ),
        (
            "prober_replies_corrupt",
            "Replies that could not be decoded (counted as corrupt, never as ok)",
            |a| a.corrupt,
        ),
        (
            "prober_reconnects",
            "Connections the probe opened again after losing one (tcp, grpc, http, dns over tcp)",
            |a| a.reconnects,
        ),
    ];
    // A healthy target costs no series for these: each is exported for a
    // target once it has counted something (docs/config.md).
    for (name, help, get) in extra {
        encode_known(w, (name, help, Kind::Counter), &anomalies, |a| {
            Some(get(a)).filter(|n| *n > 0).map(Value::U64)
        });
    }
    if anomalies.iter().any(|(_, a)| a.direction.is_some()) {
        w.family(
            "prober_lost",
            "Lost probes by direction (forward, backward, unknown), where the protocol tells (stamp:// with a stateful reflector)",
            Kind::Counter,
        );
        for (labels, a) in &anomalies {
            let Some(d) = a.direction else { continue };
            for (dir, n) in [
                ("forward", d.forward),
                ("backward", d.backward),
                ("unknown", d.unknown),
            ] {
                w.value(labels, Some(("direction", dir)), Value::U64(n));
            }
        }
    }
    encode_known(
        w,
        (
            "prober_receive_spin_seconds",
            "CPU time adaptive receive spent polling for replies (prober run --receive adaptive; the daemon's [receive] mode)",
            Kind::Counter,
        ),
        &anomalies,
        |a| a.spin.map(|sp| Value::F64(sp.ns as f64 / 1e9)),
    );
    encode_known(
        w,
        (
            "prober_tls_cert_expiry_timestamp_seconds",
            "When the server's certificate expires, as Unix seconds (https://, grpcs://), as blackbox_exporter's probe_ssl_earliest_cert_expiry",
            Kind::Gauge,
        ),
        &anomalies,
        |a| a.cert_not_after.map(Value::I64),
    );
}

/// Loss bursts and RFC 3550 jitter (prober_core::sequence), per target.
fn encode_sequence(w: &mut Writer, series: &[Exported], bursts: bool) {
    if bursts {
        encode_bursts(w, series);
    }
    encode_outage_and_jitter(w, series);
}

/// `prober_loss_burst_length`, classic buckets of probe counts.
fn encode_bursts(w: &mut Writer, series: &[Exported]) {
    w.family(
        "prober_loss_burst_length",
        "Runs of consecutive lost probes (timeouts and errors) that ended, by length in probes; _count is the number of bursts, _sum the probes lost in them",
        Kind::Histogram,
    );
    let mut buckets = [(0.0, 0); BURST_BUCKETS];
    for s in series {
        let Some(b) = &s.bursts else { continue };
        // Bucket i holds bursts of 2^i to 2^(i+1) - 1 probes; the last is
        // open-ended (+Inf).
        for (i, slot) in buckets.iter_mut().enumerate() {
            let le = if i == BURST_BUCKETS - 1 {
                f64::INFINITY
            } else {
                ((2u64 << i) - 1) as f64
            };
            *slot = (le, b.lengths[i]);
        }
        w.classic(&s.labels, None, (b.lost as f64, b.count), &buckets);
    }
}

/// Scheduled time lost to outages, and RFC 3550 jitter.
fn encode_outage_and_jitter(w: &mut Writer, series: &[Exported]) {
    w.family(
        "prober_loss_outage_seconds",
        "Scheduled time from the first probe of each ended loss burst to the next answered probe, added up",
        Kind::Counter,
    );
    for s in series {
        w.value(&s.labels, None, Value::F64(s.outage_s));
    }
    // What blackbox users alert on (`probe_success == 0`): a gauge, where
    // the counters need a rate over a window.
    w.family(
        "prober_target_up",
        "Whether the target's last probe was answered (1) or not (0): timed out, failed, or its name does not resolve",
        Kind::Gauge,
    );
    for s in series {
        if let Some(up) = s.up {
            w.value(&s.labels, None, Value::I64(i64::from(up)));
        }
    }
    if series.iter().any(|s| s.jitter.is_some()) {
        w.family(
            "prober_jitter_seconds",
            "Interarrival jitter estimate of RFC 3550 (J += (|D| - J) / 16) over consecutive answered probes' RTTs",
            Kind::Gauge,
        );
        for s in series {
            if let Some(j) = s.jitter {
                w.value(&s.labels, None, Value::F64(j / 1e9));
            }
        }
    }
}

/// A target's histograms, locked. The probing thread takes this lock for
/// every answer, while holding the target's series lock: a scrape holds it only to
/// copy a histogram, never to encode one. Encoding under it (the writer's
/// buffer growing, the render thread preempted by another) blocked the
/// probing thread for milliseconds at every scrape at 10,000 targets
/// (BENCHMARKS.md, "Scrapes and the probing thread").
fn lock_hists(s: &Exported) -> std::sync::MutexGuard<'_, Hists> {
    s.hists.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Observes each known value (ns) in its histogram, made on first use.
fn observe_each<const N: usize>(
    buckets: &Buckets,
    mode: HistMode,
    slots: &mut Vec<Option<Histogram>>,
    values: [Option<u64>; N],
) {
    if !mode.on() || (slots.is_empty() && values.iter().all(Option::is_none)) {
        return;
    }
    // Made with the first value any of them has.
    if slots.is_empty() {
        slots.resize_with(N, || None);
    }
    for (slot, v) in slots.iter_mut().zip(values) {
        let Some(ns) = v else { continue };
        if slot.is_none() {
            *slot = buckets.histogram(mode);
        }
        if let Some(h) = slot {
            h.observe(ns as f64 / 1e9);
        }
    }
}

/// One histogram family (metric name, help, label) with a series per
/// target and per known histogram of `pick`, labelled by its name; nothing
/// when no target has any, or when the family's mode leaves it out of this
/// format.
fn encode_by_label(
    w: &mut Writer,
    series: &[Exported],
    (metric, help, label): (&'static str, &str, &str),
    (mode, names): (HistMode, &[&str]),
    pick: fn(&Hists) -> &[Option<Histogram>],
) {
    if !mode.exported_in(w.format())
        || !series
            .iter()
            .any(|s| pick(&lock_hists(s)).iter().any(Option::is_some))
    {
        return;
    }
    w.family(metric, help, Kind::Histogram);
    for s in series {
        // Copied under the lock, encoded without it (see `lock_hists`).
        let hists: Vec<Option<Histogram>> = pick(&lock_hists(s)).to_vec();
        for (name, h) in names.iter().zip(&hists) {
            if let Some(h) = h {
                w.histogram(&s.labels, Some((label, name)), h);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use prober_core::{
        Clock, Collector as CoreCollector, Event, ProbeError, Reply, RunConfig, RunMeta, TargetInfo,
    };
    use prometheus_client::registry::Registry;
    use tokio::time::Instant;

    use super::*;
    use std::collections::BTreeMap;

    /// What a scrape of `sink` alone gives in `format`.
    fn scraped(sink: &PrometheusSink, format: Format) -> String {
        let bytes = scrape(format, sink, &Registry::default()).unwrap();
        String::from_utf8(bytes).unwrap()
    }

    /// A core collector feeding `sink` with one target, and a handle on
    /// the sink to scrape.
    fn collecting(
        sink: PrometheusSink,
        info: TargetInfo,
    ) -> (CoreCollector<PrometheusSink>, PrometheusSink) {
        let reader = sink.clone();
        let meta = RunMeta::new("test", &RunConfig::default());
        let mut c = CoreCollector::new(meta, Clock::now(), sink, true);
        c.add_target(info, Arc::new(Anomalies::default)).unwrap();
        c.start().unwrap();
        (c, reader)
    }

    /// A reply `us` µs after `now`, with `stamps`.
    fn reply(now: Instant, us: u64, stamps: prober_core::sample::Stamps) -> Reply {
        Reply {
            stamps,
            ..Reply::plain(now, now + Duration::from_micros(us), 64)
        }
    }

    /// A collector recording into a sink (and a reader of that sink) with
    /// `targets` targets, `udp://h:ID`, each answered once.
    fn answered_targets(targets: usize) -> (CoreCollector<PrometheusSink>, PrometheusSink) {
        let sink = PrometheusSink::new();
        let reader = sink.clone();
        let meta = RunMeta::new("test", &RunConfig::default());
        let mut c = CoreCollector::new(meta, Clock::now(), sink, true);
        for id in 0..targets {
            let info = TargetInfo::new(id, &format!("udp://h:{id}"), "udp", "h:1", Some(64));
            c.add_target(info, Arc::new(Anomalies::default)).unwrap();
        }
        c.start().unwrap();
        for id in 0..targets {
            c.event(Event::Sample(answer(id))).unwrap();
        }
        (c, reader)
    }

    /// An answer from `target`, 100 µs after now.
    fn answer(target: usize) -> Sample {
        let now = Instant::now();
        Sample {
            target,
            seq: 0,
            scheduled: now,
            sent: now,
            outcome: Outcome::Ok(reply(now, 100, prober_core::sample::Stamps::default())),
            bytes: 64,
        }
    }

    fn sample(outcome: Outcome) -> Sample {
        let now = Instant::now();
        Sample {
            target: 7,
            seq: 0,
            scheduled: now,
            sent: now,
            outcome,
            bytes: 0,
        }
    }

    /// OpenMetrics `text` through [`TextFormat`], written `n` chars at a
    /// time.
    fn convert(text: &str, n: usize) -> String {
        use std::fmt::Write as _;
        let mut w = TextFormat {
            out: String::new(),
            comment: String::new(),
            help: String::new(),
            line_start: true,
        };
        let chars: Vec<char> = text.chars().collect();
        for piece in chars.chunks(n) {
            w.write_str(&piece.iter().collect::<String>()).unwrap();
        }
        w.out
    }

    /// A scrape streams as it is read, and a spill waits for its reader:
    /// it must never wait holding a lock that recording an answer takes, or
    /// a slow scraper holds the probing thread. In the text format a piece
    /// may end after any sample, and one was spilled under the target's
    /// histogram lock (this test failed so).
    #[test]
    fn a_stalled_scrape_reader_never_holds_recording() {
        use std::sync::mpsc;
        const TARGETS: usize = 8;
        let (mut c, reader) = answered_targets(TARGETS);
        // On each go, an answer for every target, then done.
        let (go, gone) = mpsc::channel::<()>();
        let (done, finished) = mpsc::channel::<()>();
        let recorder = std::thread::spawn(move || {
            while gone.recv().is_ok() {
                for id in 0..TARGETS {
                    c.event(Event::Sample(answer(id))).unwrap();
                }
                if done.send(()).is_err() {
                    break;
                }
            }
        });
        // Every piece (one a sample) waits, as a stalled reader's would,
        // until the recorder has recorded: within 2 s, or it was held.
        let (spills, held) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        let spill: Spill<'static> = {
            let (spills, held) = (Arc::clone(&spills), Arc::clone(&held));
            Box::new(move |_piece| {
                if held.load(Ordering::Relaxed) > 0 {
                    return;
                }
                spills.fetch_add(1, Ordering::Relaxed);
                go.send(()).unwrap();
                if finished.recv_timeout(Duration::from_secs(2)).is_err() {
                    held.fetch_add(1, Ordering::Relaxed);
                }
            })
        };
        let _rest = reader.encode_streaming(Format::Text, 1, spill);
        recorder.join().unwrap();
        assert!(
            spills.load(Ordering::Relaxed) > TARGETS,
            "too few pieces to tell"
        );
        assert_eq!(held.load(Ordering::Relaxed), 0, "a spill held recording");
    }

    #[test]
    fn a_scrape_never_holds_a_recorder_of_another_target() {
        use std::sync::mpsc;
        // Two chunks' worth; a target of the second chunk is answered
        // while the scrape reads the first.
        const TARGETS: usize = 2 * LOCK_CHUNK;
        let (mut c, reader) = answered_targets(TARGETS);
        let mut ids = reader.ids();
        ids.sort_unstable();
        let (first, second) = (ids[0], ids[LOCK_CHUNK]);
        let (go, gone) = mpsc::channel::<()>();
        let (done, finished) = mpsc::channel::<()>();
        let recorder = std::thread::spawn(move || {
            gone.recv().unwrap();
            c.event(Event::Sample(answer(second))).unwrap();
            done.send(()).unwrap();
        });
        let mut held = false;
        let answers = reader.each_of(&ids, |id, s| {
            if id == first {
                go.send(()).unwrap();
                held = finished.recv_timeout(Duration::from_secs(2)).is_err();
            }
            (id == second).then_some(s.recent.len())
        });
        recorder.join().unwrap();
        assert!(!held, "the recorder waited for the scrape");
        let seen = answers.into_iter().flatten().collect::<Vec<_>>();
        assert_eq!(seen, [2], "the recorder's answer is not in the scrape");
    }

    #[test]
    fn renders_counters_and_a_cumulative_histogram() {
        let sink = PrometheusSink::new();
        let reader = sink.clone();
        let meta = RunMeta::new("test", &RunConfig::default());
        let mut c = CoreCollector::new(meta, Clock::now(), sink, true);
        let mut info = TargetInfo::new(7, "udp://h:1", "udp", "h:1", Some(64));
        info.job = Some("j".to_owned());
        info.labels
            .insert("site".to_owned(), "lab \"1\"".to_owned());
        c.add_target(
            info,
            Arc::new(|| Anomalies {
                late: 2,
                ..Default::default()
            }),
        )
        .unwrap();
        c.start().unwrap();
        let now = Instant::now();
        for us in [30, 300, 3000] {
            let r = Reply {
                sent: now,
                received: now + Duration::from_micros(us),
                server_dwell: None,
                rx_wake: None,
                bytes: 64,
                ttl: None,
                stamps: prober_core::sample::Stamps::default(),
                app: Default::default(),
            };
            c.event(Event::Sample(sample(Outcome::Ok(r)))).unwrap();
        }
        c.event(Event::Sample(sample(Outcome::Timeout))).unwrap();
        let refused = ProbeError::new(prober_core::ErrorKind::Refused, "refused");
        c.event(Event::Sample(sample(Outcome::Error(refused))))
            .unwrap();
        let text = scraped(&reader, Format::OpenMetrics);
        let l = r#"probe="j",target="udp://h:1",protocol="udp",site="lab \"1\"""#;
        for want in [
            format!("prober_probes_sent_total{{{l}}} 5"),
            format!("prober_probes_timeout_total{{{l}}} 1"),
            format!("prober_probes_error_total{{{l}}} 1"),
            format!("prober_probe_errors_total{{{l},reason=\"refused\"}} 1"),
            format!("prober_replies_late_total{{{l}}} 2"),
            format!("prober_rtt_seconds_bucket{{le=\"0.00005\",{l}}} 1"),
            format!("prober_rtt_seconds_bucket{{le=\"0.0005\",{l}}} 2"),
            format!("prober_rtt_seconds_bucket{{le=\"+Inf\",{l}}} 3"),
            format!("prober_rtt_seconds_count{{{l}}} 3"),
        ] {
            assert!(text.contains(&want), "{want} missing from\n{text}");
        }
        let classic = scraped(&reader, Format::Text);
        assert!(
            classic.contains("# TYPE prober_probes_sent_total counter"),
            "{classic}"
        );
        assert!(
            classic.contains("# HELP prober_rtt_seconds Round-trip"),
            "{classic}"
        );
        assert!(!classic.contains("# EOF"));
        // However the encoder splits its writes, the same text comes out:
        // sample lines as they were, comment lines renamed.
        for n in [1, 2, 7, 64, text.len()] {
            assert_eq!(convert(&text, n), classic, "written {n} chars at a time");
        }
        let samples = |t: &str| {
            t.lines()
                .filter(|l| !l.starts_with('#'))
                .map(str::to_owned)
                .collect::<Vec<_>>()
        };
        assert_eq!(samples(&classic), samples(&text));
        c.remove_target(7).unwrap();
        let text = scraped(&reader, Format::OpenMetrics);
        assert!(!text.contains("udp://h:1"), "{text}");
    }

    #[test]
    fn scrapers_get_the_format_they_rank_first() {
        use Format::*;
        // Prometheus 2.42 with native histograms on, and later versions'
        // scrape_protocols (q values, protobuf first).
        let prom_242 = "application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited,application/openmetrics-text;version=1.0.0;q=0.8,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
        let prom_3 = "application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited;q=0.5,application/openmetrics-text;version=1.0.0;q=0.4,text/plain;version=0.0.4;q=0.3,*/*;q=0.1";
        let prom_classic = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
        for (accept, want) in [
            (Some(prom_242), Protobuf),
            (Some(prom_3), Protobuf),
            (Some(prom_classic), OpenMetrics),
            (
                Some("text/plain;q=0.9, application/openmetrics-text;q=0.2"),
                Text,
            ),
            // A protobuf of another message is not ours to send.
            (
                Some("application/vnd.google.protobuf;proto=other.Message"),
                Text,
            ),
            (Some("*/*"), Text),
            (None, Text),
        ] {
            assert_eq!(Format::negotiate(accept), want, "{accept:?}");
        }
    }

    /// Decodes a protobuf scrape.
    fn families(
        sink: &PrometheusSink,
    ) -> Vec<prometheus_client::encoding::prometheus_protobuf::prometheus_data_model::MetricFamily>
    {
        use prost::Message;
        let bytes = scrape(Format::Protobuf, sink, &Registry::default()).unwrap();
        let mut buf = bytes.as_slice();
        let mut out = Vec::new();
        while !buf.is_empty() {
            out.push(Message::decode_length_delimited(&mut buf).unwrap());
        }
        out
    }

    /// Series one target costs, counted as Prometheus counts them: in a
    /// text scrape every line; in a protobuf scrape a native histogram is
    /// one series, a classic one a series per bucket plus `_sum` and
    /// `_count`.
    fn series_per_target(sink: &PrometheusSink) -> (usize, usize) {
        let text = scraped(sink, Format::Text);
        let text = text
            .lines()
            .filter(|l| !l.starts_with('#') && l.contains("target=\"udp://h:1\""))
            .count();
        let proto = families(sink)
            .iter()
            .flat_map(|f| &f.metric)
            .map(|m| match &m.histogram {
                Some(h) if !h.positive_span.is_empty() || h.schema != 0 => 1,
                Some(h) => h.bucket.len() + 2,
                None => 1,
            })
            .sum();
        (text, proto)
    }

    /// The series budget (docs/config.md, "Series per target"): at most 12
    /// a target in protobuf with native histograms and 40 in text by
    /// default; every family on costs what the table there says.
    fn all_families() -> Buckets {
        Buckets {
            families: Families::everything(),
            ..Buckets::default()
        }
    }

    #[test]
    fn a_streamed_scrape_is_the_whole_scrape_in_pieces_that_end_whole() {
        let all = Buckets {
            families: Families::everything(),
            ..Buckets::default()
        };
        let sink = PrometheusSink::new().with_buckets(all);
        let (mut c, reader) = collecting(
            sink,
            TargetInfo::new(7, "udp://h:1", "udp", "h:1", Some(64)),
        );
        for id in 8..40 {
            let url = format!("udp://h{id}:1");
            c.add_target(
                TargetInfo::new(id, &url, "udp", &url[6..], Some(64)),
                Arc::new(Anomalies::default),
            )
            .unwrap();
        }
        let now = Instant::now();
        for target in 7..40 {
            for us in [30, 300, 3000, 40] {
                let mut s = sample(Outcome::Ok(reply(now, us, Default::default())));
                s.target = target;
                c.event(Event::Sample(s)).unwrap();
            }
        }
        for format in [Format::Text, Format::OpenMetrics, Format::Protobuf] {
            let whole = reader.encode(format);
            let pieces = Arc::new(Mutex::new(Vec::<Vec<u8>>::new()));
            let into = Arc::clone(&pieces);
            let rest = reader.encode_streaming(
                format,
                512,
                Box::new(move |p| into.lock().unwrap().push(p)),
            );
            let pieces = std::mem::take(&mut *pieces.lock().unwrap());
            assert!(pieces.len() > 3, "{format:?}: {} pieces", pieces.len());
            for p in &pieces {
                assert!(p.len() >= 512, "{format:?}: a piece of {} bytes", p.len());
                if format != Format::Protobuf {
                    assert_eq!(p.last(), Some(&b'\n'), "{format:?}: a piece ends mid-line");
                }
            }
            let joined: Vec<u8> = pieces.into_iter().flatten().chain(rest).collect();
            assert_eq!(joined, whole, "{format:?}");
        }
    }

    #[test]
    fn a_target_stays_within_the_series_budget_by_default() {
        let run = |buckets: Buckets| {
            let sink = PrometheusSink::new().with_buckets(buckets);
            let info = TargetInfo::new(7, "udp://h:1", "udp", "h:1", Some(64));
            let (mut c, reader) = collecting(sink, info);
            let now = Instant::now();
            for us in [30, 300, 300, 3000, 40, 50] {
                c.event(Event::Sample(sample(Outcome::Ok(reply(
                    now,
                    us,
                    Default::default(),
                )))))
                .unwrap();
            }
            series_per_target(&reader)
        };
        let (text, proto) = run(Buckets::default());
        assert!(text <= 40, "text: {text} series");
        assert!(proto <= 12, "protobuf: {proto} series");
        // RTT's classic histogram (20 bounds, +Inf, _sum, _count), the
        // five counters and prober_target_up (the jitter gauge comes with
        // consecutive answers, which these samples are not); latency and
        // send lag are native.
        assert_eq!((text, proto), (29, 9));
        let all = Buckets {
            families: Families::everything(),
            ..Buckets::default()
        };
        let (text, proto) = run(all);
        assert_eq!((text, proto), (116, 28), "every family on");
        // Without native buckets every family that is on is classic.
        let classic = Buckets {
            native_factor: None,
            families: Families::default().without_native(),
            ..Buckets::default()
        };
        assert_eq!(run(classic), (75, 75), "native_histograms = false");
    }

    #[test]
    fn native_buckets_reach_protobuf_scrapes_with_classic_ones_beside_them() {
        for native in [true, false] {
            let buckets = Buckets {
                classic: [0.001, 0.01].as_slice().into(),
                native_factor: native.then_some(NATIVE_FACTOR),
                families: Families::default(),
            };
            let sink = PrometheusSink::new().with_buckets(buckets);
            let info = TargetInfo::new(7, "udp://h:1", "udp", "h:1", Some(64));
            let (mut c, reader) = collecting(sink, info);
            let now = Instant::now();
            for us in [30, 300, 300, 3000] {
                c.event(Event::Sample(sample(Outcome::Ok(reply(
                    now,
                    us,
                    Default::default(),
                )))))
                .unwrap();
            }
            let all = families(&reader);
            let rtt = all
                .iter()
                .find(|f| f.name == "prober_rtt_seconds")
                .expect("an RTT family");
            let h = rtt.metric[0].histogram.as_ref().unwrap();
            assert_eq!(h.sample_count, 4);
            // The classic buckets as configured.
            let classic: Vec<(f64, u64)> = h
                .bucket
                .iter()
                .map(|b| (b.upper_bound, b.cumulative_count))
                .collect();
            assert_eq!(classic, [(0.001, 3), (0.01, 4), (f64::INFINITY, 4)]);
            if !native {
                assert!(h.positive_span.is_empty() && h.zero_count == 0, "{h:?}");
                continue;
            }
            // Schema 3: bucket i holds (2^((i-1)/8), 2^(i/8)].
            assert_eq!(h.schema, 3);
            let mut index = 0;
            let mut counts = BTreeMap::new();
            let mut count = 0i64;
            let mut deltas = h.positive_delta.iter();
            for span in &h.positive_span {
                index += span.offset;
                for _ in 0..span.length {
                    count += deltas.next().unwrap();
                    counts.insert(index, count);
                    index += 1;
                }
            }
            let want: BTreeMap<i32, i64> = [(30e-6, 1), (300e-6, 2), (3000e-6, 1)]
                .into_iter()
                .map(|(v, n)| ((f64::log2(v) * 8.0).ceil() as i32, n))
                .collect();
            let got: BTreeMap<i32, i64> = counts.into_iter().filter(|(_, n)| *n > 0).collect();
            assert_eq!(got, want);
            // Counters go the same way.
            assert!(all.iter().any(|f| f.name.starts_with("prober_probes_sent")));
        }
    }

    #[test]
    fn parts_get_a_histogram_each_when_asked() {
        let info = TargetInfo::new(7, "icmp://h", "icmp", "h", Some(56));
        let (mut c, reader) = collecting(
            PrometheusSink::new().with_buckets(Buckets {
                families: Families {
                    parts: HistMode::Both,
                    ..Families::default()
                },
                ..Buckets::default()
            }),
            info,
        );
        let now = Instant::now();
        let stamps = prober_core::Stamps {
            t1: Some(1_000_000),
            t1k: Some(1_002_000),
            t4k: Some(1_012_000),
            t4: Some(1_040_000),
            responder: None,
            kernel_peer: true,
            handshake: None,
        };
        let r = reply(now, 40, stamps);
        c.event(Event::Sample(sample(Outcome::Ok(r)))).unwrap();
        let text = scraped(&reader, Format::OpenMetrics);
        for part in ["client_send", "network", "client_wake"] {
            let want = format!(
                "prober_rtt_part_seconds_count{{probe=\"\",target=\"icmp://h\",protocol=\"icmp\",part=\"{part}\"}} 1"
            );
            assert!(text.contains(&want), "{want} missing from\n{text}");
        }
        assert!(
            !text.contains("part=\"responder_wake\""),
            "unknown parts have no series"
        );
    }

    #[test]
    fn a_split_lacking_a_part_is_counted_by_why_with_parts_on() {
        let stamps = prober_core::Stamps {
            t1: Some(1_000_000),
            t1k: Some(1_002_000),
            t4k: Some(1_032_000),
            t4: Some(1_040_000),
            // A remote UDP responder without --udp-follow-ups: no t3k.
            responder: Some(prober_core::ResponderTimes {
                wake: Some(3_000),
                dwell: Some(2_000),
                ..prober_core::ResponderTimes::default()
            }),
            kernel_peer: false,
            handshake: None,
        };
        for parts in [HistMode::Both, HistMode::Off] {
            let info = TargetInfo::new(7, "udp://h:1", "udp", "h:1", Some(64));
            let sink = PrometheusSink::new().with_buckets(Buckets {
                families: Families {
                    parts,
                    ..Families::default()
                },
                ..Buckets::default()
            });
            let (mut c, reader) = collecting(sink, info);
            let r = reply(Instant::now(), 40, stamps);
            c.event(Event::Sample(sample(Outcome::Ok(r)))).unwrap();
            let text = scraped(&reader, Format::OpenMetrics);
            let want = "prober_split_incomplete_total{probe=\"\",target=\"udp://h:1\",protocol=\"udp\",reason=\"responder_send_stamp\"} 1";
            // Off by default: with transmit stamps off (the daemon's
            // default) every probe would count, a series per target.
            assert_eq!(
                text.contains(want),
                parts.on(),
                "{parts:?}: {want} in\n{text}"
            );
        }
    }

    #[test]
    fn renders_loss_bursts_and_delay_variation() {
        let info = TargetInfo::new(7, "udp://h:1", "udp", "h:1", Some(64));
        let (mut c, reader) = collecting(PrometheusSink::new().with_buckets(all_families()), info);
        let now = Instant::now();
        // ok 100 µs, ok 300 µs, lost, lost, ok, lost, ok: bursts of 2 and
        // 1; one IPDV pair (+200 µs).
        let outcomes = [Some(100), Some(300), None, None, Some(200), None, Some(200)];
        for (seq, us) in outcomes.into_iter().enumerate() {
            let outcome = us.map_or(Outcome::Timeout, |us| {
                Outcome::Ok(reply(now, us, prober_core::sample::Stamps::default()))
            });
            let mut s = sample(outcome);
            s.seq = seq as u64;
            c.event(Event::Sample(s)).unwrap();
        }
        let text = scraped(&reader, Format::OpenMetrics);
        let l = r#"probe="",target="udp://h:1",protocol="udp""#;
        for want in [
            format!("prober_loss_burst_length_bucket{{le=\"1.0\",{l}}} 1"),
            format!("prober_loss_burst_length_bucket{{le=\"3.0\",{l}}} 2"),
            format!("prober_loss_burst_length_bucket{{le=\"+Inf\",{l}}} 2"),
            format!("prober_loss_burst_length_count{{{l}}} 2"),
            format!("prober_loss_burst_length_sum{{{l}}} 3.0"),
            format!("prober_ipdv_seconds_count{{{l}}} 1"),
            format!("prober_ipdv_seconds_sum{{{l}}} 0.0002"),
            format!("prober_jitter_seconds{{{l}}} 0.0000125"),
            format!("prober_latency_seconds_count{{{l}}} 4"),
            format!("prober_send_lag_seconds_count{{{l}}} 7"),
            format!("prober_rtt_seconds_bucket{{le=\"0.000005\",{l}}} 0"),
        ] {
            assert!(text.contains(&want), "{want} missing from\n{text}");
        }
        // Counters of replies that matched no probe cost a series only once
        // they count something.
        for absent in [
            "prober_replies_reordered",
            "prober_replies_corrupt",
            "prober_reconnects",
        ] {
            assert!(!text.contains(absent), "{absent} in\n{text}");
        }
    }
}

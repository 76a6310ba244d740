//! The targets' families of `/metrics`, written straight into the
//! exposition: each target's labels are encoded once, when the target is
//! added, in the text and in the protobuf form, and a scrape copies bytes.
//!
//! # Why not prometheus-client here
//! The daemon's other families still go through prometheus-client. These
//! are the big ones. At 10,000 targets with the fleet features (native and
//! per-part histograms: 7 histograms a target), a protobuf scrape through
//! prometheus-client took 0.42-0.78 s of CPU (benches/scale), two thirds of
//! it building its message tree, mostly copies of every label string into
//! every series of every family; the scale goal is 200 ms. Written here,
//! the same scrape takes 0.15-0.17 s, and peak RSS went from 313 to
//! 247-252 MiB (BENCHMARKS.md, "The daemon at 10,000 targets").
//!
//! The histograms ([`Histogram`]) are ours for the same reason:
//! prometheus-client's show their buckets only to its own encoders. They
//! bucket as prometheus-client's and client_golang's do, with the same
//! native bucket boundaries (client_golang's table); a test feeds both
//! the same values and compares the expositions, byte for byte in text and
//! message for message in protobuf.

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use crate::dense::DenseBuckets;
use prost::encoding::{WireType, encode_key, encode_varint, encoded_len_varint, key_len};

use crate::native_bounds::BOUNDS;

const SCHEMA_MIN: i8 = -4;
const SCHEMA_MAX: i8 = 8;

/// The native schema whose bucket growth factor is the largest at or
/// under `factor` (above 1), as prometheus-client picks it.
pub(crate) fn pick_schema(factor: f64) -> i8 {
    let floor = factor.log2().log2().floor();
    if floor <= -f64::from(SCHEMA_MAX) {
        SCHEMA_MAX
    } else if floor >= -f64::from(SCHEMA_MIN) {
        SCHEMA_MIN
    } else {
        // In (-8, 4) and whole, so it fits.
        (-floor) as i8
    }
}

/// A histogram with classic buckets and, optionally, native (exponential)
/// ones.
///
/// Its counts sit in one buffer, so an observation touches few cache
/// lines. At 10,000 targets with seven histograms each, a first version
/// (a lock and three allocations per histogram) spent 7.5 % of the
/// daemon's CPU in `observe`, most of it waiting for memory.
#[derive(Clone)]
pub struct Histogram {
    /// Upper bounds of the classic buckets: finite and rising; the +Inf
    /// bucket is implied.
    bounds: Arc<[f64]>,
    sum: f64,
    count: u64,
    /// The classic buckets' own counts, not cumulative, +Inf's last.
    classic: Box<[u64]>,
    /// The positive native buckets' counts, dense from the lowest seen to
    /// the highest (durations fill the buckets between theirs), in 16 bits
    /// until one passes it, then 32, then 64: what a target's histograms
    /// cost grows with the spread of its values (BENCHMARKS.md, "Memory at
    /// 10,000 targets").
    positive: DenseBuckets<u16, u32, u64>,
    /// Native buckets: their schema (`None`: classic buckets only).
    schema: Option<i8>,
    /// The native zero bucket, zero-wide: exact zeros only.
    zero: u64,
    /// Native buckets below zero, (index, count) by rising index (never,
    /// for durations).
    negative: Vec<(i32, u64)>,
    created: SystemTime,
}

impl std::fmt::Debug for Histogram {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Histogram")
            .field("count", &self.count)
            .field("sum", &self.sum)
            .finish_non_exhaustive()
    }
}

impl Histogram {
    /// Classic buckets at `bounds` (seconds, rising), and native ones of
    /// growth factor `native_factor` (the schema at or under it) if given.
    /// Native buckets have no limit on their number: the values are
    /// durations, which span a few dozen buckets of a target at schema 3.
    pub fn new(bounds: &Arc<[f64]>, native_factor: Option<f64>) -> Self {
        // Shared by every histogram when the bounds are proper, as the
        // daemon's config checks they are.
        let bounds = if bounds.iter().all(|b| b.is_finite()) {
            Arc::clone(bounds)
        } else {
            bounds.iter().copied().filter(|b| b.is_finite()).collect()
        };
        Self {
            classic: vec![0; bounds.len() + 1].into_boxed_slice(),
            positive: DenseBuckets::default(),
            bounds,
            sum: 0.0,
            count: 0,
            schema: native_factor.map(pick_schema),
            zero: 0,
            negative: Vec::new(),
            created: SystemTime::now(),
        }
    }

    /// Counts `v`.
    pub fn observe(&mut self, v: f64) {
        self.sum += v;
        self.count += 1;
        // The first bucket whose bound is at or above v; NaN goes to +Inf.
        let i = if v.is_nan() {
            self.bounds.len()
        } else {
            self.bounds.partition_point(|b| *b < v)
        };
        self.classic[i] += 1;
        let Some(schema) = self.schema else { return };
        if v.is_nan() {
        } else if v == 0.0 {
            self.zero += 1;
        } else {
            let index = bucket_index(schema, v.abs(), v.is_infinite());
            if v.is_sign_negative() {
                match self.negative.binary_search_by_key(&index, |b| b.0) {
                    Ok(at) => self.negative[at].1 += 1,
                    Err(at) => self.negative.insert(at, (index, 1)),
                }
            } else {
                self.positive.add(index);
            }
        }
    }

    /// Observations so far.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// The classic buckets' own counts, +Inf's last.
    fn classic(&self) -> &[u64] {
        &self.classic
    }

    /// The positive native buckets that hold anything: (index, count), by
    /// rising index.
    fn positive(&self) -> impl Iterator<Item = (i32, u64)> + '_ {
        self.positive.iter()
    }

    fn has_positive(&self) -> bool {
        !self.positive.is_empty()
    }
}

/// The native bucket of `v` (positive) at `schema`: bucket i holds
/// (base^(i-1), base^i] with base = 2^(2^-schema). client_golang's method,
/// on the exact binary exponent and fraction of `v`.
fn bucket_index(schema: i8, v: f64, infinite: bool) -> i32 {
    let v = if infinite { f64::MAX } else { v };
    let (frac, exp) = frexp(v);
    let index = if schema > 0 {
        let bounds = BOUNDS[schema as usize];
        let within = bounds.partition_point(|b| *b < frac) as i32;
        within + (exp - 1) * bounds.len() as i32
    } else {
        let key = if frac == 0.5 { exp - 1 } else { exp };
        let shift = -i32::from(schema);
        (key + (1 << shift) - 1) >> shift
    };
    if infinite {
        index.saturating_add(1)
    } else {
        index
    }
}

/// `v` (positive, finite) as frac * 2^exp with frac in [0.5, 1).
fn frexp(v: f64) -> (f64, i32) {
    if v == 0.0 {
        return (0.0, 0);
    }
    let bits = v.to_bits();
    let exponent = ((bits >> 52) & 0x7ff) as i32;
    let mantissa = bits & ((1 << 52) - 1);
    if exponent == 0 {
        // Subnormal.
        let p = 63 - mantissa.leading_zeros() as i32;
        (mantissa as f64 / 2f64.powi(p + 1), p - 1073)
    } else {
        (
            ((1 << 52) | mantissa) as f64 / 2f64.powi(53),
            exponent - 1022,
        )
    }
}

/// The exposition formats `/metrics` serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// Length-delimited protobuf (`prometheus::encode_protobuf`), with native
    /// histograms.
    Protobuf,
    /// OpenMetrics text (`prometheus::encode_openmetrics`).
    OpenMetrics,
    /// Prometheus text 0.0.4 (`prometheus::encode_text`): curl, promtool, and
    /// anything that does not say.
    Text,
}

impl Format {
    /// The format an `Accept` header prefers: the highest `q` (1 unless
    /// given) among the three, the first listed on a tie, text when none
    /// is named. Prometheus lists protobuf first (highest) when its
    /// native-histograms feature or `scrape_protocols` asks for it.
    pub fn negotiate(accept: Option<&str>) -> Self {
        let mut best = (0.0_f64, Self::Text);
        for entry in accept.unwrap_or("").split(',') {
            let mut params = entry.split(';').map(str::trim);
            let kind = params.next().unwrap_or("").to_ascii_lowercase();
            let mut q = 1.0;
            let mut proto = None;
            for p in params {
                match p.split_once('=') {
                    Some(("q", v)) => q = v.parse().unwrap_or(0.0),
                    Some(("proto", v)) => proto = Some(v),
                    _ => {}
                }
            }
            let format = match kind.as_str() {
                "application/vnd.google.protobuf"
                    if proto == Some("io.prometheus.client.MetricFamily") =>
                {
                    Self::Protobuf
                }
                "application/openmetrics-text" => Self::OpenMetrics,
                "text/plain" | "*/*" => Self::Text,
                _ => continue,
            };
            if q > best.0 {
                best = (q, format);
            }
        }
        best.1
    }

    /// The content type of a response in this format.
    pub fn content_type(self) -> &'static str {
        match self {
            Self::Protobuf => {
                "application/vnd.google.protobuf; proto=io.prometheus.client.MetricFamily; encoding=delimited"
            }
            Self::OpenMetrics => "application/openmetrics-text; version=1.0.0; charset=utf-8",
            Self::Text => "text/plain; version=0.0.4; charset=utf-8",
        }
    }
}

/// The kind of a family.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Counter,
    Gauge,
    Histogram,
}

impl Kind {
    fn text(self) -> &'static str {
        match self {
            Self::Counter => "counter",
            Self::Gauge => "gauge",
            Self::Histogram => "histogram",
        }
    }

    /// `io.prometheus.client.MetricType`.
    fn proto(self) -> u64 {
        match self {
            Self::Counter => 0,
            Self::Gauge => 1,
            Self::Histogram => 4,
        }
    }
}

/// A sample's value; a counter or gauge keeps its integer form in text.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Value {
    U64(u64),
    I64(i64),
    F64(f64),
}

impl Value {
    fn as_f64(self) -> f64 {
        match self {
            Self::U64(v) => v as f64,
            Self::I64(v) => v as f64,
            Self::F64(v) => v,
        }
    }
}

/// A target's labels as given, and encoded for the text formats and for
/// protobuf.
#[derive(Debug)]
pub struct SeriesLabels {
    /// Name and value, in order.
    pub pairs: Vec<(String, String)>,
    /// `name="value",...`, values escaped.
    text: Vec<u8>,
    /// The `Metric.label` fields.
    proto: Vec<u8>,
}

impl SeriesLabels {
    /// Encodes `pairs` for every format.
    pub fn new(pairs: Vec<(String, String)>) -> Self {
        let mut text = Vec::new();
        let mut proto = Vec::new();
        for (i, (k, v)) in pairs.iter().enumerate() {
            if i > 0 {
                text.push(b',');
            }
            text_label(&mut text, k, v);
            label_pair(&mut proto, k, v);
        }
        Self { pairs, text, proto }
    }
}

/// `k="v"`, with `\`, `"` and newlines in v escaped.
fn text_label(out: &mut Vec<u8>, k: &str, v: &str) {
    out.extend_from_slice(k.as_bytes());
    out.extend_from_slice(b"=\"");
    for b in v.bytes() {
        match b {
            b'\\' => out.extend_from_slice(b"\\\\"),
            b'"' => out.extend_from_slice(b"\\\""),
            b'\n' => out.extend_from_slice(b"\\n"),
            _ => out.push(b),
        }
    }
    out.push(b'"');
}

/// The length of a string field, 0 when empty (proto3 leaves it out).
fn str_field_len(tag: u32, s: &str) -> usize {
    if s.is_empty() {
        0
    } else {
        key_len(tag) + encoded_len_varint(s.len() as u64) + s.len()
    }
}

fn str_field(out: &mut Vec<u8>, tag: u32, s: &str) {
    if !s.is_empty() {
        encode_key(tag, WireType::LengthDelimited, out);
        encode_varint(s.len() as u64, out);
        out.extend_from_slice(s.as_bytes());
    }
}

fn label_pair_len(k: &str, v: &str) -> usize {
    let inner = str_field_len(1, k) + str_field_len(2, v);
    key_len(1) + encoded_len_varint(inner as u64) + inner
}

/// A `Metric.label` field.
fn label_pair(out: &mut Vec<u8>, k: &str, v: &str) {
    encode_key(1, WireType::LengthDelimited, out);
    encode_varint((str_field_len(1, k) + str_field_len(2, v)) as u64, out);
    str_field(out, 1, k);
    str_field(out, 2, v);
}

fn double_field(out: &mut Vec<u8>, tag: u32, v: f64) {
    if v != 0.0 {
        encode_key(tag, WireType::SixtyFourBit, out);
        out.extend_from_slice(&v.to_le_bytes());
    }
}

fn varint_field(out: &mut Vec<u8>, tag: u32, v: u64) {
    if v != 0 {
        encode_key(tag, WireType::Varint, out);
        encode_varint(v, out);
    }
}

fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

/// Writes families, one after another, in one format.
pub(crate) struct Writer {
    format: Format,
    out: Vec<u8>,
    /// Protobuf: the family being written (its length goes before it).
    family: Vec<u8>,
    /// Protobuf: the metric value being written.
    body: Vec<u8>,
    spans: Vec<(i32, u32)>,
    deltas: Vec<i64>,
    /// The classic bounds last formatted as `le` values, and those.
    le: Option<(Arc<[f64]>, Vec<String>)>,
    name: &'static str,
    kind: Kind,
    open: bool,
    /// Where whole pieces of output go once `out` holds `chunk` bytes, for
    /// an exposition streamed as it is written: a text scrape of 10,000
    /// targets built whole was the daemon's largest allocation (BENCHMARKS.md,
    /// "Memory at 10,000 targets").
    spill: Option<(usize, Spill<'static>)>,
}

/// Takes a piece of an exposition as it is written.
pub type Spill<'a> = Box<dyn FnMut(Vec<u8>) + Send + 'a>;

impl Writer {
    /// A writer whose output starts with room for `capacity` bytes.
    pub(crate) fn new(format: Format, capacity: usize) -> Self {
        Self {
            spill: None,
            format,
            out: Vec::with_capacity(capacity),
            family: Vec::new(),
            body: Vec::new(),
            spans: Vec::new(),
            deltas: Vec::new(),
            le: None,
            name: "",
            kind: Kind::Gauge,
            open: false,
        }
    }

    /// A writer that hands its output to `spill` in pieces of about
    /// `chunk` bytes, each ending at a whole sample (text) or family
    /// (protobuf); [`Writer::finish`] returns the rest.
    pub(crate) fn streaming(format: Format, chunk: usize, spill: Spill<'static>) -> Self {
        let mut w = Self::new(format, chunk + chunk / 4);
        w.spill = Some((chunk, spill));
        w
    }

    /// Hands `out` over once it is full: called only between samples and
    /// families, so every piece ends at a line (text) or a message. The
    /// spill may wait for the reader (a scrape streams as it is read), so
    /// nothing may be written under a lock the probing thread takes: a
    /// scrape encodes copies (`prometheus::lock_hists`).
    fn spill_if_full(&mut self) {
        if let Some((chunk, spill)) = &mut self.spill
            && self.out.len() >= *chunk
        {
            let full = std::mem::replace(&mut self.out, Vec::with_capacity(*chunk + *chunk / 4));
            spill(full);
        }
    }

    /// The format being written.
    pub(crate) fn format(&self) -> Format {
        self.format
    }

    /// Starts a family (ending the one before).
    pub(crate) fn family(&mut self, name: &'static str, help: &str, kind: Kind) {
        self.end_family();
        self.name = name;
        self.kind = kind;
        self.open = true;
        let total = if kind == Kind::Counter { "_total" } else { "" };
        match self.format {
            Format::Protobuf => {
                self.family.clear();
                encode_key(1, WireType::LengthDelimited, &mut self.family);
                encode_varint((name.len() + total.len()) as u64, &mut self.family);
                self.family.extend_from_slice(name.as_bytes());
                self.family.extend_from_slice(total.as_bytes());
                str_field(&mut self.family, 2, help);
                varint_field(&mut self.family, 3, kind.proto());
            }
            Format::OpenMetrics | Format::Text => {
                // OpenMetrics names a counter family without `_total`.
                let total = if self.format == Format::Text {
                    total
                } else {
                    ""
                };
                for (what, text) in [("# HELP ", help), ("# TYPE ", kind.text())] {
                    self.out.extend_from_slice(what.as_bytes());
                    self.out.extend_from_slice(name.as_bytes());
                    self.out.extend_from_slice(total.as_bytes());
                    self.out.push(b' ');
                    self.out.extend_from_slice(text.as_bytes());
                    self.out.push(b'\n');
                }
            }
        }
    }

    fn end_family(&mut self) {
        if self.open && self.format == Format::Protobuf {
            encode_varint(self.family.len() as u64, &mut self.out);
            self.out.extend_from_slice(&self.family);
        }
        self.open = false;
        self.spill_if_full();
    }

    /// The exposition.
    pub(crate) fn finish(mut self) -> Vec<u8> {
        self.end_family();
        self.out
    }

    /// A text sample's name and labels, up to the space before its value.
    fn series(
        &mut self,
        suffix: &str,
        le: Option<&str>,
        labels: &SeriesLabels,
        extra: Option<(&str, &str)>,
    ) {
        let out = &mut self.out;
        out.extend_from_slice(self.name.as_bytes());
        out.extend_from_slice(suffix.as_bytes());
        out.push(b'{');
        let mut first = true;
        if let Some(le) = le {
            out.extend_from_slice(b"le=\"");
            out.extend_from_slice(le.as_bytes());
            out.push(b'"');
            first = false;
        }
        if !labels.text.is_empty() {
            if !first {
                out.push(b',');
            }
            out.extend_from_slice(&labels.text);
            first = false;
        }
        if let Some((k, v)) = extra {
            if !first {
                out.push(b',');
            }
            text_label(out, k, v);
        }
        out.extend_from_slice(b"} ");
    }

    /// One `Metric` of the family, with `self.body` as its field `field`.
    fn metric(&mut self, labels: &SeriesLabels, extra: Option<(&str, &str)>, field: u32) {
        let extra_len = extra.map_or(0, |(k, v)| label_pair_len(k, v));
        let len = labels.proto.len()
            + extra_len
            + key_len(field)
            + encoded_len_varint(self.body.len() as u64)
            + self.body.len();
        let f = &mut self.family;
        encode_key(4, WireType::LengthDelimited, f);
        encode_varint(len as u64, f);
        f.extend_from_slice(&labels.proto);
        if let Some((k, v)) = extra {
            label_pair(f, k, v);
        }
        encode_key(field, WireType::LengthDelimited, f);
        encode_varint(self.body.len() as u64, f);
        f.extend_from_slice(&self.body);
    }

    /// A counter's or a gauge's sample, as the family is.
    pub(crate) fn value(&mut self, labels: &SeriesLabels, extra: Option<(&str, &str)>, v: Value) {
        self.spill_if_full();
        match self.format {
            Format::Protobuf => {
                self.body.clear();
                double_field(&mut self.body, 1, v.as_f64());
                let field = if self.kind == Kind::Counter { 3 } else { 2 };
                self.metric(labels, extra, field);
            }
            Format::OpenMetrics | Format::Text => {
                let suffix = if self.kind == Kind::Counter {
                    "_total"
                } else {
                    ""
                };
                self.series(suffix, None, labels, extra);
                match v {
                    Value::U64(v) => self
                        .out
                        .extend_from_slice(itoa::Buffer::new().format(v).as_bytes()),
                    Value::I64(v) => self
                        .out
                        .extend_from_slice(itoa::Buffer::new().format(v).as_bytes()),
                    Value::F64(v) => self
                        .out
                        .extend_from_slice(dtoa::Buffer::new().format(v).as_bytes()),
                }
                self.out.push(b'\n');
            }
        }
    }

    /// A histogram's sample.
    pub(crate) fn histogram(
        &mut self,
        labels: &SeriesLabels,
        extra: Option<(&str, &str)>,
        h: &Histogram,
    ) {
        self.spill_if_full();
        let d = h;
        match self.format {
            Format::Protobuf => {
                self.body.clear();
                let bounds = d.bounds.iter().copied().chain([f64::INFINITY]);
                // A native-only histogram has no classic buckets to send:
                // its +Inf bucket would make Prometheus keep a classic one.
                let native_only = d.bounds.is_empty() && d.schema.is_some();
                let classic =
                    d.classic()
                        .iter()
                        .copied()
                        .take(if native_only { 0 } else { usize::MAX });
                classic_body(&mut self.body, d.sum, d.count, bounds.zip(classic));
                if let Some(schema) = d.schema {
                    self.native_body(d, schema);
                }
                self.metric(labels, extra, 7);
            }
            Format::OpenMetrics | Format::Text => {
                let fresh = match &self.le {
                    Some((b, _)) => !Arc::ptr_eq(b, &d.bounds),
                    None => true,
                };
                if fresh {
                    let les = d
                        .bounds
                        .iter()
                        .map(|b| dtoa::Buffer::new().format(*b).to_owned())
                        .collect();
                    self.le = Some((Arc::clone(&d.bounds), les));
                }
                let Some((_, les)) = self.le.take() else {
                    return;
                };
                let counts = d.classic();
                self.text_histogram(labels, extra, (d.sum, d.count), counts.len(), |i| {
                    (les.get(i).map_or("+Inf", String::as_str), counts[i])
                });
                self.le = Some((Arc::clone(&d.bounds), les));
            }
        }
    }

    /// A histogram's sample from its classic buckets alone: (upper bound,
    /// count in it), rising, the last +Inf.
    pub(crate) fn classic(
        &mut self,
        labels: &SeriesLabels,
        extra: Option<(&str, &str)>,
        (sum, count): (f64, u64),
        buckets: &[(f64, u64)],
    ) {
        self.spill_if_full();
        match self.format {
            Format::Protobuf => {
                self.body.clear();
                classic_body(&mut self.body, sum, count, buckets.iter().copied());
                self.metric(labels, extra, 7);
            }
            Format::OpenMetrics | Format::Text => {
                let les: Vec<String> = buckets
                    .iter()
                    .map(|(b, _)| {
                        if b.is_infinite() {
                            "+Inf".to_owned()
                        } else {
                            dtoa::Buffer::new().format(*b).to_owned()
                        }
                    })
                    .collect();
                self.text_histogram(labels, extra, (sum, count), buckets.len(), |i| {
                    (les[i].as_str(), buckets[i].1)
                });
            }
        }
    }

    /// `_sum`, `_count`, then the `n` buckets: `bucket(i)` gives the
    /// i-th's `le` and its own count.
    fn text_histogram<'a>(
        &mut self,
        labels: &SeriesLabels,
        extra: Option<(&str, &str)>,
        (sum, count): (f64, u64),
        n: usize,
        bucket: impl Fn(usize) -> (&'a str, u64),
    ) {
        self.series("_sum", None, labels, extra);
        self.out
            .extend_from_slice(dtoa::Buffer::new().format(sum).as_bytes());
        self.out.push(b'\n');
        self.series("_count", None, labels, extra);
        self.out
            .extend_from_slice(itoa::Buffer::new().format(count).as_bytes());
        self.out.push(b'\n');
        let mut cumulative = 0;
        for i in 0..n {
            let (le, own) = bucket(i);
            cumulative += own;
            self.series("_bucket", Some(le), labels, extra);
            self.out
                .extend_from_slice(itoa::Buffer::new().format(cumulative).as_bytes());
            self.out.push(b'\n');
        }
    }

    /// The native fields of `Histogram`.
    fn native_body(&mut self, n: &Histogram, schema: i8) {
        let b = &mut self.body;
        encode_key(15, WireType::LengthDelimited, b);
        let since = n.created.duration_since(UNIX_EPOCH).unwrap_or_default();
        let (secs, nanos) = (since.as_secs(), u64::from(since.subsec_nanos()));
        let ts_len = [(secs), (nanos)]
            .iter()
            .filter(|v| **v != 0)
            .map(|v| 1 + encoded_len_varint(*v))
            .sum::<usize>();
        encode_varint(ts_len as u64, b);
        varint_field(b, 1, secs);
        varint_field(b, 2, nanos);
        varint_field(b, 5, zigzag(i64::from(schema)));
        // The zero bucket is zero-wide: threshold 0, left out.
        varint_field(b, 7, n.zero);
        if !n.negative.is_empty() {
            self.spans_and_deltas(n.negative.iter().copied(), 9, 10);
        }
        if !n.has_positive() && n.negative.is_empty() && n.zero == 0 {
            // One empty span tells a native histogram without observations
            // from a classic one.
            encode_key(12, WireType::LengthDelimited, &mut self.body);
            encode_varint(0, &mut self.body);
        } else if n.has_positive() {
            self.spans_and_deltas(n.positive(), 12, 13);
        }
    }

    /// Spans (`BucketSpan`s in field `span_tag`) and packed count deltas
    /// (field `delta_tag`) of `buckets`: a gap of up to two empty buckets
    /// stays within a span, as client_golang writes them.
    fn spans_and_deltas(
        &mut self,
        buckets: impl Iterator<Item = (i32, u64)>,
        span_tag: u32,
        delta_tag: u32,
    ) {
        self.spans.clear();
        self.deltas.clear();
        let mut previous = 0i64;
        let mut next = 0i32;
        for (n, (index, count)) in buckets.enumerate() {
            let count = i64::try_from(count).unwrap_or(i64::MAX);
            let gap = index - next;
            if n == 0 || gap > 2 {
                self.spans.push((gap, 0));
            } else {
                for _ in 0..gap {
                    self.deltas.push(-previous);
                    previous = 0;
                }
                if let Some(s) = self.spans.last_mut() {
                    s.1 += gap as u32;
                }
            }
            self.deltas.push(count - previous);
            previous = count;
            if let Some(s) = self.spans.last_mut() {
                s.1 += 1;
            }
            next = index + 1;
        }
        let b = &mut self.body;
        for &(offset, length) in &self.spans {
            let offset = zigzag(i64::from(offset));
            let length = u64::from(length);
            let inner = [offset, length]
                .iter()
                .filter(|v| **v != 0)
                .map(|v| 1 + encoded_len_varint(*v))
                .sum::<usize>();
            encode_key(span_tag, WireType::LengthDelimited, b);
            encode_varint(inner as u64, b);
            varint_field(b, 1, offset);
            varint_field(b, 2, length);
        }
        let packed: usize = self
            .deltas
            .iter()
            .map(|d| encoded_len_varint(zigzag(*d)))
            .sum();
        encode_key(delta_tag, WireType::LengthDelimited, b);
        encode_varint(packed as u64, b);
        for d in &self.deltas {
            encode_varint(zigzag(*d), b);
        }
    }
}

/// `Histogram`'s count, sum and classic buckets (upper bound, own count).
fn classic_body(b: &mut Vec<u8>, sum: f64, count: u64, buckets: impl Iterator<Item = (f64, u64)>) {
    varint_field(b, 1, count);
    double_field(b, 2, sum);
    let mut cumulative = 0;
    for (bound, n) in buckets {
        cumulative += n;
        let inner = if cumulative == 0 {
            0
        } else {
            1 + encoded_len_varint(cumulative)
        } + if bound == 0.0 { 0 } else { 9 };
        encode_key(3, WireType::LengthDelimited, b);
        encode_varint(inner as u64, b);
        varint_field(b, 1, cumulative);
        double_field(b, 2, bound);
    }
}

#[cfg(test)]
mod tests {
    use prometheus_client::collector::Collector;
    use prometheus_client::encoding::prometheus_protobuf::prometheus_data_model::MetricFamily;
    use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric, NoLabelSet};
    use prometheus_client::metrics::MetricType;
    use prometheus_client::metrics::counter::ConstCounter;
    use prometheus_client::metrics::gauge::ConstGauge;
    use prometheus_client::metrics::histogram::{
        Histogram as TheirHistogram, NativeHistogramConfig,
    };
    use prometheus_client::registry::Registry;

    use super::*;

    type Pairs = Vec<(String, String)>;

    /// The same series, encoded by prometheus-client.
    #[derive(Debug)]
    struct Theirs {
        series: Vec<(Pairs, TheirHistogram)>,
    }

    const BURSTS: [(f64, u64); 3] = [(1.0, 4), (3.0, 1), (f64::INFINITY, 2)];

    impl Collector for Theirs {
        fn encode(&self, mut e: DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
            let mut m =
                e.encode_descriptor("t_seconds", "A \"help\" text", None, MetricType::Histogram)?;
            for (labels, h) in &self.series {
                h.encode(m.encode_family(labels)?)?;
            }
            let mut m = e.encode_descriptor("t_parts", "Parts", None, MetricType::Histogram)?;
            for (labels, h) in &self.series {
                let mut labels = labels.clone();
                labels.push(("part".to_owned(), "net\"work".to_owned()));
                h.encode(m.encode_family(&labels)?)?;
            }
            let mut m = e.encode_descriptor("t_bursts", "Bursts", None, MetricType::Histogram)?;
            for (labels, _) in &self.series {
                m.encode_family(labels)?
                    .encode_histogram::<NoLabelSet>(9.0, 7, &BURSTS, None)?;
            }
            let mut m = e.encode_descriptor("t_count", "Counts", None, MetricType::Counter)?;
            for (i, (labels, _)) in self.series.iter().enumerate() {
                ConstCounter::new(i as u64 * 1000).encode(m.encode_family(labels)?)?;
            }
            let mut m = e.encode_descriptor("t_spin", "Seconds", None, MetricType::Counter)?;
            for (i, (labels, _)) in self.series.iter().enumerate() {
                ConstCounter::new(i as f64 * 0.25e-6).encode(m.encode_family(labels)?)?;
            }
            let mut m = e.encode_descriptor("t_gauge", "Gauges", None, MetricType::Gauge)?;
            for (i, (labels, _)) in self.series.iter().enumerate() {
                ConstGauge::new(i as f64 / 3.0).encode(m.encode_family(labels)?)?;
            }
            let mut m = e.encode_descriptor("t_when", "Unix", None, MetricType::Gauge)?;
            for (i, (labels, _)) in self.series.iter().enumerate() {
                ConstGauge::new(1_700_000_000 - i as i64).encode(m.encode_family(labels)?)?;
            }
            Ok(())
        }
    }

    /// The same series, written here.
    fn ours(format: Format, series: &[(SeriesLabels, Histogram)]) -> Vec<u8> {
        let mut w = Writer::new(format, 0);
        w.family("t_seconds", "A \"help\" text", Kind::Histogram);
        for (labels, h) in series {
            w.histogram(labels, None, h);
        }
        w.family("t_parts", "Parts", Kind::Histogram);
        for (labels, h) in series {
            w.histogram(labels, Some(("part", "net\"work")), h);
        }
        w.family("t_bursts", "Bursts", Kind::Histogram);
        for (labels, _) in series {
            w.classic(labels, None, (9.0, 7), &BURSTS);
        }
        w.family("t_count", "Counts", Kind::Counter);
        for (i, (labels, _)) in series.iter().enumerate() {
            w.value(labels, None, Value::U64(i as u64 * 1000));
        }
        w.family("t_spin", "Seconds", Kind::Counter);
        for (i, (labels, _)) in series.iter().enumerate() {
            w.value(labels, None, Value::F64(i as f64 * 0.25e-6));
        }
        w.family("t_gauge", "Gauges", Kind::Gauge);
        for (i, (labels, _)) in series.iter().enumerate() {
            w.value(labels, None, Value::F64(i as f64 / 3.0));
        }
        w.family("t_when", "Unix", Kind::Gauge);
        for (i, (labels, _)) in series.iter().enumerate() {
            w.value(labels, None, Value::I64(1_700_000_000 - i as i64));
        }
        w.finish()
    }

    /// Decoded, with the creation times (ours and theirs differ) cleared.
    fn decoded(mut bytes: &[u8]) -> Vec<MetricFamily> {
        use prost::Message;
        let mut out = Vec::new();
        while !bytes.is_empty() {
            let mut f = MetricFamily::decode_length_delimited(&mut bytes).unwrap();
            for m in &mut f.metric {
                if let Some(h) = &mut m.histogram {
                    h.start_timestamp = None;
                }
            }
            out.push(f);
        }
        out
    }

    /// Values as RTTs, latencies and their parts are: 1 µs to 20 s spread
    /// evenly in log, and the awkward ones.
    fn values(n: usize, seed: u64) -> Vec<f64> {
        let mut x = seed | 1;
        let mut out = vec![
            0.0,
            0.001,
            0.5,
            1.0,
            2f64.powi(-10),
            0.000_005,
            0.5 * 1.090_507_732_665_257_7, // a schema-3 bound times 2^0
            f64::MIN_POSITIVE / 4.0,       // subnormal
            f64::MAX,
        ];
        while out.len() < n {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let u = (x >> 11) as f64 / (1u64 << 53) as f64;
            out.push((u * 17.0 - 14.0).exp2() * 10.0 / 8.0);
        }
        out.truncate(n);
        out
    }

    #[test]
    fn writes_what_prometheus_client_writes() {
        let factors = [
            None,
            Some(1.1),
            Some(1.5),
            Some(2.0),
            Some(4.0),
            Some(16.0),
            Some(1.001),
            Some(1e9),
        ];
        let bounds: Arc<[f64]> = [0.000_005, 0.000_1, 0.001, 0.25, 10.0].as_slice().into();
        for (k, factor) in factors.into_iter().enumerate() {
            let mut theirs = Vec::new();
            let mut mine = Vec::new();
            for t in 0..4 {
                let pairs: Pairs = vec![
                    ("probe".to_owned(), String::new()),
                    ("target".to_owned(), format!("udp://h{t}:1")),
                    ("site".to_owned(), "lab \"1\"\\\n".to_owned()),
                ];
                let their = match factor {
                    Some(f) => TheirHistogram::new_classic_and_native(
                        bounds.iter().copied(),
                        NativeHistogramConfig::new(f).zero_threshold(-1.0),
                    ),
                    None => TheirHistogram::new(bounds.iter().copied()),
                };
                let mut my = Histogram::new(&bounds, factor);
                // One target never observes: an empty native histogram.
                let n = if t == 3 { 0 } else { 400 };
                for v in values(n, (k * 10 + t) as u64) {
                    their.observe(v);
                    my.observe(v);
                }
                assert_eq!(my.count(), n as u64);
                theirs.push((pairs.clone(), their));
                mine.push((SeriesLabels::new(pairs), my));
            }
            let mut registry = Registry::default();
            registry.register_collector(Box::new(Theirs { series: theirs }));
            let mut want_om = String::new();
            prometheus_client::encoding::text::encode_registry(&mut want_om, &registry).unwrap();
            let om = String::from_utf8(ours(Format::OpenMetrics, &mine)).unwrap();
            assert_eq!(om, want_om, "OpenMetrics, factor {factor:?}");
            let text = String::from_utf8(ours(Format::Text, &mine)).unwrap();
            let want_text = String::from_utf8(Format::Text.encode(&registry).unwrap()).unwrap();
            assert_eq!(text, want_text, "0.0.4 text, factor {factor:?}");
            let want = decoded(&Format::Protobuf.encode(&registry).unwrap());
            let got = decoded(&ours(Format::Protobuf, &mine));
            assert_eq!(got.len(), 7);
            for (g, w) in got.iter().zip(&want) {
                assert_eq!(g, w, "protobuf, factor {factor:?}");
            }
            assert_eq!(got, want);
        }
    }

    #[test]
    fn schemas_are_picked_as_prometheus_client_picks_them() {
        for (factor, schema) in [
            (1.1, 3),
            (1.5, 1),
            (2.0, 0),
            (4.0, -1),
            (1.001, 8),
            (1e9, -4),
            (1.09, 4),
        ] {
            assert_eq!(pick_schema(factor), schema, "{factor}");
        }
    }
}

//! The JSON lines sink: a meta line, a line per probe, a line per summary.

use std::io::{self, Write};

use serde::Serialize;

use prober_core::{
    Clock, Context, Detail, Outcome, Parts, RunMeta, Sample, Sink, Summary, TargetEntry, TargetInfo,
};

use crate::output::Output;

/// Version of the JSON lines and CSV probe-line layout, in every meta line
/// (`"schema"`) so readers can detect a change. 2: statistics of a target
/// without samples are `null`, sizes may be `null`, errors carry a kind.
/// 3: a daemon job is `"probe"` (the CSV column too), as the metrics'
/// label is, where 2 wrote `"job"`.
pub const SCHEMA_VERSION: u32 = 3;

/// Writes one JSON object per line; field names are listed in the README.
pub struct JsonSink {
    out: Output,
    quiet: bool,
    sweep: Option<SweepTag>,
}

/// Marks every line of one `prober sweep` point (`"sweep":{..}`), so a
/// reader can tell the points of one stream apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct SweepTag {
    /// Round, from 0.
    pub round: u32,
    /// Position of the point in the sweep's run order, from 0.
    pub point: u32,
    /// The probe interval of the point.
    pub interval_ns: u64,
}

impl std::fmt::Debug for JsonSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JsonSink").finish_non_exhaustive()
    }
}

impl JsonSink {
    /// Writes to `out`; with `quiet`, only the meta and summary lines.
    pub fn new(out: Box<dyn crate::Destination>, quiet: bool) -> Self {
        Self {
            out: Output::new(out),
            quiet,
            sweep: None,
        }
    }

    /// Tags every line with a sweep point.
    #[must_use]
    pub fn with_sweep(mut self, tag: SweepTag) -> Self {
        self.sweep = Some(tag);
        self
    }

    fn summaries(
        &mut self,
        kind: &'static str,
        cx: &Context<'_>,
        summaries: &[Summary],
    ) -> io::Result<()> {
        for summary in summaries {
            self.line(&SummaryLine {
                kind,
                sweep: self.sweep,
                summary,
                settings: cx.meta,
            })?;
        }
        self.out.flush()
    }

    fn line(&mut self, value: &impl Serialize) -> io::Result<()> {
        serde_json::to_writer(&mut self.out, value)?;
        self.out.write_all(b"\n")
    }
}

#[derive(Serialize)]
struct MetaLine<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    schema: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    sweep: Option<SweepTag>,
    #[serde(flatten)]
    meta: &'a RunMeta,
    targets: Vec<&'a TargetInfo>,
}

/// One probe as a JSON object (the `"type":"probe"` line). The daemon adds
/// the job name.
#[derive(Debug, Serialize)]
pub struct ProbeLine<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    /// The daemon job, under the name the metrics' label has (`probe`:
    /// Prometheus keeps `job` for its scrape job).
    #[serde(rename = "probe", skip_serializing_if = "Option::is_none")]
    job: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    sweep: Option<SweepTag>,
    target: &'a str,
    protocol: &'a str,
    addr: &'a str,
    seq: u64,
    outcome: &'static str,
    scheduled_unix_ns: u64,
    sent_unix_ns: u64,
    send_lag_ns: u64,
    rtt_ns: Option<u64>,
    latency_ns: Option<u64>,
    server_dwell_ns: Option<u64>,
    bytes: usize,
    error: Option<&'a str>,
    error_kind: Option<&'static str>,
    rx_wake_ns: Option<u64>,
    ttl: Option<u8>,
    kernel_rtt_ns: Option<u64>,
    ping_rtt_ns: Option<u64>,
    #[serde(skip_serializing_if = "KeyedNs::is_empty")]
    parts: KeyedNs,
    /// Why an answered probe's split is not complete: the first stamp along
    /// the round trip that was missing ([`prober_core::Missing::name`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    split_missing: Option<&'static str>,
    /// The responder's turnaround where it reports only that (STAMP).
    #[serde(skip_serializing_if = "Option::is_none")]
    responder_turnaround_ns: Option<u64>,
    /// One-way delays (STAMP, both clocks synchronised).
    #[serde(skip_serializing_if = "Option::is_none")]
    forward_ns: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    backward_ns: Option<u64>,
    /// An application request's phases (HTTP), as `{"resolve_ns": ..}`.
    #[serde(skip_serializing_if = "KeyedNs::is_empty")]
    phases: KeyedNs,
    /// An HTTP reply's status, version (11, 20) and redirects followed.
    #[serde(skip_serializing_if = "Option::is_none")]
    http_status: Option<u16>,
    #[serde(skip_serializing_if = "Option::is_none")]
    http_version: Option<u8>,
    #[serde(skip_serializing_if = "Option::is_none")]
    redirects: Option<u8>,
    /// A DNS reply's rcode, answer count and flags.
    #[serde(skip_serializing_if = "Option::is_none")]
    dns_rcode: Option<u16>,
    #[serde(skip_serializing_if = "Option::is_none")]
    dns_answers: Option<u16>,
    #[serde(skip_serializing_if = "Option::is_none")]
    dns_aa: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    dns_tc: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    dns_tcp: Option<bool>,
}

/// Known values under fixed keys, as `{"client_send_ns": ..}`; an unknown
/// value is absent, never 0.
#[derive(Debug)]
struct KeyedNs(&'static [&'static str; 6], [Option<u64>; 6]);

impl KeyedNs {
    fn is_empty(&self) -> bool {
        self.1.iter().all(Option::is_none)
    }
}

impl Serialize for KeyedNs {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap as _;
        let mut m = s.serialize_map(None)?;
        for (name, v) in self.0.iter().zip(self.1) {
            if let Some(v) = v {
                m.serialize_entry(name, &v)?;
            }
        }
        m.end()
    }
}

/// The JSON keys of the parts, in [`Parts::NAMES`] order.
const PART_KEYS: [&str; 6] = [
    "client_send_ns",
    "network_ns",
    "responder_wake_ns",
    "responder_dwell_ns",
    "responder_send_ns",
    "client_wake_ns",
];

/// The JSON keys of the phases, in [`prober_core::Phases::NAMES`] order.
const PHASE_KEYS: [&str; 6] = [
    "resolve_ns",
    "connect_ns",
    "tls_ns",
    "write_ns",
    "first_byte_ns",
    "body_ns",
];

#[derive(Serialize)]
struct SummaryLine<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    sweep: Option<SweepTag>,
    #[serde(flatten)]
    summary: &'a Summary,
    settings: &'a RunMeta,
}

fn ns(d: std::time::Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

impl<'a> ProbeLine<'a> {
    /// The line for sample `s` of target `t`, wall-clock times from `clock`.
    pub fn new(t: &'a TargetInfo, s: &'a Sample, clock: &Clock) -> Self {
        let (dwell, wake, ttl, error) = match &s.outcome {
            Outcome::Ok(r) => (r.server_dwell.map(ns), r.rx_wake.map(ns), r.ttl, None),
            Outcome::Error(e) => (None, None, None, Some(e)),
            _ => (None, None, None, None),
        };
        let parts = match &s.outcome {
            Outcome::Ok(r) => r.parts(),
            _ => Parts::default(),
        };
        let responder = match &s.outcome {
            Outcome::Ok(r) => r.stamps.responder,
            _ => None,
        };
        let app = match &s.outcome {
            Outcome::Ok(r) => r.app,
            _ => prober_core::AppReply::default(),
        };
        let (http, dns) = match app.detail {
            Some(Detail::Http {
                status,
                version,
                redirects,
                ..
            }) => (Some((status, version, redirects)), None),
            Some(Detail::Dns {
                rcode,
                answers,
                aa,
                tc,
                tcp,
                ..
            }) => (None, Some((rcode, answers, aa, tc, tcp))),
            _ => (None, None),
        };
        Self {
            kind: "probe",
            job: t.job.as_deref(),
            sweep: None,
            target: &t.target,
            protocol: &t.protocol,
            addr: &t.addr,
            seq: s.seq,
            outcome: s.outcome.name(),
            scheduled_unix_ns: clock.unix_ns(s.scheduled),
            sent_unix_ns: clock.unix_ns(s.sent),
            send_lag_ns: ns(s.send_lag()),
            rtt_ns: s.rtt().map(ns),
            latency_ns: s.latency().map(ns),
            server_dwell_ns: dwell,
            bytes: s.bytes,
            error: error.map(prober_core::ProbeError::message),
            error_kind: error.map(|e| e.kind().as_str()),
            rx_wake_ns: wake,
            ttl,
            kernel_rtt_ns: parts.kernel_rtt,
            ping_rtt_ns: parts.ping_rtt,
            parts: KeyedNs(&PART_KEYS, parts.list()),
            split_missing: parts.missing.map(prober_core::Missing::name),
            responder_turnaround_ns: parts.responder_turnaround,
            forward_ns: responder.and_then(|r| r.forward),
            backward_ns: responder.and_then(|r| r.backward),
            phases: KeyedNs(&PHASE_KEYS, app.phases.0),
            http_status: http.map(|h| h.0),
            http_version: http.map(|h| h.1),
            redirects: http.map(|h| h.2),
            dns_rcode: dns.map(|d| d.0),
            dns_answers: dns.map(|d| d.1),
            dns_aa: dns.map(|d| d.2),
            dns_tc: dns.map(|d| d.3),
            dns_tcp: dns.map(|d| d.4),
        }
    }

    /// This probe as one CSV row, with its line break.
    ///
    /// # Errors
    /// None in practice: the row is written to memory.
    pub fn csv_row(&self) -> io::Result<Vec<u8>> {
        csv_line(false, &CsvRow::from(self))
    }

    /// The header of [`ProbeLine::csv_row`], with its line break: the
    /// field names of the row's struct, so the two cannot drift apart.
    pub fn csv_header() -> &'static [u8] {
        static HEADER: std::sync::OnceLock<Vec<u8>> = std::sync::OnceLock::new();
        HEADER.get_or_init(|| {
            let row = CsvRow::default();
            let both = csv_line(true, &row).unwrap_or_default();
            let end = both
                .iter()
                .position(|&b| b == b'\n')
                .map_or(both.len(), |i| i + 1);
            both[..end].to_vec()
        })
    }
}

/// `row` as CSV (RFC 4180 quoting), after its header when `header`.
fn csv_line(header: bool, row: &CsvRow<'_>) -> io::Result<Vec<u8>> {
    let mut w = csv::WriterBuilder::new()
        .has_headers(header)
        .from_writer(Vec::with_capacity(256));
    w.serialize(row).map_err(io::Error::other)?;
    w.into_inner().map_err(|e| io::Error::other(e.to_string()))
}

/// A probe line's CSV columns, in order: serde gives both the header and
/// the row, so they stay in step. A missing value is an empty cell.
#[derive(Serialize, Default)]
struct CsvRow<'a> {
    /// The daemon job, named as the metrics' label is.
    probe: &'a str,
    target: &'a str,
    protocol: &'a str,
    addr: &'a str,
    seq: u64,
    outcome: &'a str,
    scheduled_unix_ns: u64,
    sent_unix_ns: u64,
    send_lag_ns: u64,
    rtt_ns: Option<u64>,
    latency_ns: Option<u64>,
    server_dwell_ns: Option<u64>,
    bytes: usize,
    error: &'a str,
    error_kind: &'a str,
    rx_wake_ns: Option<u64>,
    ttl: Option<u8>,
    kernel_rtt_ns: Option<u64>,
    ping_rtt_ns: Option<u64>,
    part_client_send_ns: Option<u64>,
    part_network_ns: Option<u64>,
    part_responder_wake_ns: Option<u64>,
    part_responder_dwell_ns: Option<u64>,
    part_responder_send_ns: Option<u64>,
    part_client_wake_ns: Option<u64>,
}

impl<'a> From<&'a ProbeLine<'a>> for CsvRow<'a> {
    fn from(l: &'a ProbeLine<'a>) -> Self {
        let [
            part_client_send_ns,
            part_network_ns,
            part_responder_wake_ns,
            part_responder_dwell_ns,
            part_responder_send_ns,
            part_client_wake_ns,
        ] = l.parts.1;
        Self {
            probe: l.job.unwrap_or(""),
            target: l.target,
            protocol: l.protocol,
            addr: l.addr,
            seq: l.seq,
            outcome: l.outcome,
            scheduled_unix_ns: l.scheduled_unix_ns,
            sent_unix_ns: l.sent_unix_ns,
            send_lag_ns: l.send_lag_ns,
            rtt_ns: l.rtt_ns,
            latency_ns: l.latency_ns,
            server_dwell_ns: l.server_dwell_ns,
            bytes: l.bytes,
            error: l.error.unwrap_or(""),
            error_kind: l.error_kind.unwrap_or(""),
            rx_wake_ns: l.rx_wake_ns,
            ttl: l.ttl,
            kernel_rtt_ns: l.kernel_rtt_ns,
            ping_rtt_ns: l.ping_rtt_ns,
            part_client_send_ns,
            part_network_ns,
            part_responder_wake_ns,
            part_responder_dwell_ns,
            part_responder_send_ns,
            part_client_wake_ns,
        }
    }
}

impl Sink for JsonSink {
    fn start(&mut self, cx: &Context<'_>) -> io::Result<()> {
        self.line(&MetaLine {
            kind: "meta",
            schema: SCHEMA_VERSION,
            sweep: self.sweep,
            meta: cx.meta,
            targets: cx.targets.values().map(|t| &t.info).collect(),
        })?;
        self.out.flush()
    }

    fn record(&mut self, cx: &Context<'_>, t: &TargetEntry, s: &Sample) -> io::Result<()> {
        if self.quiet {
            return Ok(());
        }
        let mut line = ProbeLine::new(&t.info, s, &cx.clock);
        line.sweep = self.sweep;
        self.line(&line)?;
        self.out.maybe_flush()
    }

    fn tick(&mut self, _cx: &Context<'_>, _now: tokio::time::Instant) -> io::Result<()> {
        self.out.tick()
    }

    fn interim(&mut self, cx: &Context<'_>, summaries: &[Summary]) -> io::Result<()> {
        self.summaries("interim", cx, summaries)
    }

    fn finish(&mut self, cx: &Context<'_>, summaries: &[Summary]) -> io::Result<()> {
        self.summaries("summary", cx, summaries)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use prober_core::{Clock, Outcome, ProbeError, Reply, Sample, TargetInfo};
    use tokio::time::Instant;

    use super::ProbeLine;

    /// The header is the one the CSV files have always had.
    #[test]
    fn the_csv_header_keeps_its_columns() {
        assert_eq!(
            std::str::from_utf8(ProbeLine::csv_header()).unwrap(),
            "probe,target,protocol,addr,seq,outcome,scheduled_unix_ns,sent_unix_ns,send_lag_ns,rtt_ns,latency_ns,server_dwell_ns,bytes,error,error_kind,rx_wake_ns,ttl,kernel_rtt_ns,ping_rtt_ns,part_client_send_ns,part_network_ns,part_responder_wake_ns,part_responder_dwell_ns,part_responder_send_ns,part_client_wake_ns\n"
        );
    }

    /// A row has a cell per header column, quotes what needs quoting, and
    /// leaves unknown values empty.
    #[test]
    fn a_csv_row_reads_back_under_its_header() {
        let now = Instant::now();
        let mut info = TargetInfo::new(0, "http://h:1/a,b", "http", "127.0.0.1:1", None);
        info.job = Some("web \"x\"".to_owned());
        let clock = Clock::now();
        let ok = Sample {
            target: 0,
            seq: 3,
            scheduled: now,
            sent: now,
            outcome: Outcome::Ok(Reply::plain(now, now + Duration::from_micros(40), 64)),
            bytes: 64,
        };
        let err = Sample {
            seq: 4,
            outcome: Outcome::Error(ProbeError::protocol("refused, \"no\"\nbye")),
            ..ok.clone()
        };
        let mut text = ProbeLine::csv_header().to_vec();
        for s in [&ok, &err] {
            text.extend(ProbeLine::new(&info, s, &clock).csv_row().unwrap());
        }
        let mut r = csv::Reader::from_reader(text.as_slice());
        let header = r.headers().unwrap().clone();
        let rows: Vec<csv::StringRecord> = r.records().map(Result::unwrap).collect();
        assert_eq!(rows.len(), 2);
        let cell = |row: &csv::StringRecord, name: &str| {
            let i = header.iter().position(|h| h == name).unwrap();
            row[i].to_owned()
        };
        assert_eq!(cell(&rows[0], "probe"), "web \"x\"");
        assert_eq!(cell(&rows[0], "target"), "http://h:1/a,b");
        assert_eq!(cell(&rows[0], "seq"), "3");
        assert_eq!(cell(&rows[0], "rtt_ns"), "40000");
        assert_eq!(cell(&rows[0], "error"), "");
        assert_eq!(cell(&rows[0], "kernel_rtt_ns"), "");
        assert_eq!(cell(&rows[1], "outcome"), "error");
        assert_eq!(cell(&rows[1], "error"), "refused, \"no\"\nbye");
        assert_eq!(cell(&rows[1], "rtt_ns"), "");
    }
}

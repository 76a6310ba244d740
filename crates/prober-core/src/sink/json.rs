//! The JSON lines sink: a meta line, a line per probe, a line per summary.

use std::io::{self, Write};

use serde::Serialize;

use super::csv::quote;
use super::{Output, Sink};
use crate::meta::RunMeta;
use crate::runner::{Clock, TargetInfo};
use crate::sample::{Outcome, Sample};
use crate::stats::Summary;

/// Writes one JSON object per line; field names are listed in the README.
pub struct JsonSink {
    out: Output,
    quiet: bool,
    clock: Option<Clock>,
    meta: Option<RunMeta>,
}

impl std::fmt::Debug for JsonSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JsonSink").finish_non_exhaustive()
    }
}

impl JsonSink {
    /// Writes to `out`; with `quiet`, only the meta and summary lines.
    pub fn new(out: Box<dyn Write + Send>, quiet: bool) -> Self {
        Self {
            out: Output::new(out),
            quiet,
            clock: None,
            meta: None,
        }
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
    #[serde(flatten)]
    meta: &'a RunMeta,
    targets: &'a [TargetInfo],
}

/// One probe as a JSON object (the `"type":"probe"` line). The daemon adds
/// the job name.
#[derive(Debug, Serialize)]
pub struct ProbeLine<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    job: Option<&'a str>,
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
    rx_wake_ns: Option<u64>,
}

#[derive(Serialize)]
struct SummaryLine<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    #[serde(flatten)]
    summary: &'a Summary,
    settings: &'a RunMeta,
}

fn ns(d: std::time::Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

impl<'a> ProbeLine<'a> {
    /// The line for sample `s` of target `t`, wall-clock times from `clock`.
    pub fn new(job: Option<&'a str>, t: &'a TargetInfo, s: &'a Sample, clock: &Clock) -> Self {
        let (dwell, wake, error) = match &s.outcome {
            Outcome::Ok(r) => (r.server_dwell.map(ns), r.rx_wake.map(ns), None),
            Outcome::Error(e) => (None, None, Some(e.as_str())),
            _ => (None, None, None),
        };
        Self {
            kind: "probe",
            job,
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
            error,
            rx_wake_ns: wake,
        }
    }

    /// The fields in CSV order, matching [`ProbeLine::CSV_HEADER`].
    pub fn csv_row(&self) -> String {
        let opt = |v: Option<u64>| v.map_or_else(String::new, |v| v.to_string());
        format!(
            "{},{},{},{},{},{},{},{},{},{},{},{},{},{},{}",
            quote(self.job.unwrap_or("")),
            quote(self.target),
            self.protocol,
            self.addr,
            self.seq,
            self.outcome,
            self.scheduled_unix_ns,
            self.sent_unix_ns,
            self.send_lag_ns,
            opt(self.rtt_ns),
            opt(self.latency_ns),
            opt(self.server_dwell_ns),
            self.bytes,
            quote(self.error.unwrap_or("")),
            opt(self.rx_wake_ns),
        )
    }

    /// Header of [`ProbeLine::csv_row`].
    pub const CSV_HEADER: &'static str = "job,target,protocol,addr,seq,outcome,scheduled_unix_ns,sent_unix_ns,send_lag_ns,rtt_ns,latency_ns,server_dwell_ns,bytes,error,rx_wake_ns";
}

impl Sink for JsonSink {
    fn start(&mut self, meta: &RunMeta, targets: &[TargetInfo], clock: Clock) -> io::Result<()> {
        self.clock = Some(clock);
        self.meta = Some(meta.clone());
        self.line(&MetaLine {
            kind: "meta",
            meta,
            targets,
        })?;
        self.out.flush()
    }

    fn record(&mut self, t: &TargetInfo, s: &Sample) -> io::Result<()> {
        if self.quiet {
            return Ok(());
        }
        let clock = *self.clock.get_or_insert_with(Clock::now);
        self.line(&ProbeLine::new(None, t, s, &clock))?;
        self.out.maybe_flush()
    }

    fn finish(&mut self, summaries: &[Summary]) -> io::Result<()> {
        let meta = self
            .meta
            .clone()
            .unwrap_or_else(|| RunMeta::new("", &Default::default()));
        for summary in summaries {
            self.line(&SummaryLine {
                kind: "summary",
                summary,
                settings: &meta,
            })?;
        }
        self.out.flush()
    }
}

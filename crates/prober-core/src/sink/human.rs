//! The human sink: ping-style lines, per-target summaries and a table.

use std::fmt::Write as _;
use std::io::{self, Write};

use super::{FieldValue, Output, Sink, field_value};
use crate::duration::format_ns;
use crate::meta::RunMeta;
use crate::runner::{Clock, TargetInfo};
use crate::sample::{Outcome, Sample};
use crate::stats::{DistSummary, Summary};

/// Prints a line per probe (unless quiet), then one summary per target and a
/// side-by-side table of the chosen fields, with times in µs.
pub struct HumanSink {
    out: Output,
    quiet: bool,
    fields: Vec<String>,
    meta: Option<RunMeta>,
    multi: bool,
}

impl std::fmt::Debug for HumanSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HumanSink")
            .field("quiet", &self.quiet)
            .finish_non_exhaustive()
    }
}

impl HumanSink {
    /// Writes to `out`; `fields` are the table columns.
    pub fn new(out: Box<dyn Write + Send>, quiet: bool, fields: Vec<String>) -> Self {
        Self {
            out: Output::new(out),
            quiet,
            fields,
            meta: None,
            multi: false,
        }
    }
}

fn settings_line(m: &RunMeta) -> String {
    let interval = if m.interval_ns == 0 {
        "0 (closed loop)".to_owned()
    } else {
        format_ns(m.interval_ns as f64)
    };
    let mut s = format!(
        "interval {interval}, pacing {}, receive {}, burst {}, size {} B, timeout {}",
        m.pacing,
        m.receive,
        m.burst,
        m.size,
        format_ns(m.timeout_ns as f64)
    );
    if let Some(c) = m.count {
        let _ = write!(s, ", count {c}");
    }
    if let Some(d) = m.duration_ns {
        let _ = write!(s, ", duration {}", format_ns(d as f64));
    }
    if m.warmup > 0 {
        let _ = write!(s, ", warmup {}", m.warmup);
    }
    s
}

fn dist_line(label: &str, d: &DistSummary) -> String {
    if d.count == 0 {
        return format!("{label:<9} no samples");
    }
    let f = |ns: u64| format_ns(ns as f64);
    format!(
        "{label:<9} min/p50/p90/p99/max = {}/{}/{}/{}/{}, mean {}, std {}",
        f(d.min),
        f(d.p50),
        f(d.p90),
        f(d.p99),
        f(d.max),
        format_ns(d.mean),
        format_ns(d.std)
    )
}

impl Sink for HumanSink {
    fn start(&mut self, meta: &RunMeta, targets: &[TargetInfo], _clock: Clock) -> io::Result<()> {
        self.multi = targets.len() > 1;
        writeln!(
            self.out,
            "prober {} on {} (kernel {}): {}",
            meta.version,
            meta.hostname,
            meta.kernel,
            settings_line(meta)
        )?;
        for t in targets {
            writeln!(
                self.out,
                "{} ({}) via {}, {} B, {} timestamps",
                t.target, t.addr, t.protocol, t.size, t.timestamps
            )?;
        }
        self.meta = Some(meta.clone());
        self.out.flush()
    }

    fn record(&mut self, target: &TargetInfo, s: &Sample) -> io::Result<()> {
        if self.quiet {
            return Ok(());
        }
        let who = if self.multi {
            format!("{} ", target.target)
        } else {
            String::new()
        };
        match &s.outcome {
            Outcome::Ok(r) => {
                let lat = s.latency().unwrap_or_default();
                write!(
                    self.out,
                    "{who}seq={} bytes={} rtt={} latency={}",
                    s.seq,
                    r.bytes,
                    format_ns(r.rtt().as_nanos() as f64),
                    format_ns(lat.as_nanos() as f64)
                )?;
                if let Some(d) = r.server_dwell {
                    write!(self.out, " dwell={}", format_ns(d.as_nanos() as f64))?;
                }
                if let Some(d) = r.rx_wake {
                    write!(self.out, " wake={}", format_ns(d.as_nanos() as f64))?;
                }
                writeln!(self.out)?;
            }
            Outcome::Timeout => writeln!(self.out, "{who}seq={} timeout", s.seq)?,
            Outcome::Error(e) => writeln!(self.out, "{who}seq={} error: {e}", s.seq)?,
        }
        self.out.maybe_flush()
    }

    fn finish(&mut self, summaries: &[Summary]) -> io::Result<()> {
        let meta = self
            .meta
            .clone()
            .unwrap_or_else(|| RunMeta::new("", &Default::default()));
        for s in summaries {
            writeln!(
                self.out,
                "\n--- {} ({}) {} statistics ---",
                s.target, s.addr, s.protocol
            )?;
            writeln!(
                self.out,
                "{} sent, {} ok, {} timeout, {} error, {:.1}% loss; late {}, duplicate {}, reordered {}, corrupt {}, missed {}, reconnects {}",
                s.sent,
                s.ok,
                s.timeout,
                s.error,
                s.loss_pct,
                s.late,
                s.duplicate,
                s.reordered,
                s.corrupt,
                s.missed,
                s.reconnects
            )?;
            writeln!(self.out, "{}", dist_line("rtt", &s.rtt))?;
            writeln!(self.out, "{}", dist_line("latency", &s.latency))?;
            writeln!(self.out, "{}", dist_line("send lag", &s.send_lag))?;
            if let Some(d) = &s.server_dwell {
                writeln!(self.out, "{}", dist_line("dwell", d))?;
            }
            if let Some(d) = &s.rx_wake {
                writeln!(self.out, "{}", dist_line("rx wake", d))?;
            }
        }
        writeln!(self.out, "\n{} (times in µs)", settings_line(&meta))?;
        let mut rows: Vec<Vec<String>> = vec![self.fields.clone()];
        for s in summaries {
            let row = self
                .fields
                .iter()
                .map(|f| match field_value(f, s, &meta) {
                    Some(FieldValue::Text(t)) => t,
                    Some(FieldValue::Int(n)) => n.to_string(),
                    Some(FieldValue::Nanos(ns)) => format!("{:.1}", ns / 1e3),
                    Some(FieldValue::Percent(p)) => format!("{p:.1}%"),
                    None => "-".to_owned(),
                })
                .collect();
            rows.push(row);
        }
        let widths: Vec<usize> = (0..self.fields.len())
            .map(|c| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0))
            .collect();
        for row in &rows {
            let mut line = String::new();
            for (c, cell) in row.iter().enumerate() {
                let pad = widths[c] - cell.chars().count();
                if c == 0 {
                    let _ = write!(line, "{cell}{}", " ".repeat(pad));
                } else {
                    let _ = write!(line, "  {}{cell}", " ".repeat(pad));
                }
            }
            writeln!(self.out, "{}", line.trim_end())?;
        }
        self.out.flush()
    }
}

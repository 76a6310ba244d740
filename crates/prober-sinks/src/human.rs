//! The human sink: ping-style lines, per-target summaries and a table.

use std::fmt::Write as _;
use std::io::{self, Write};

use prober_core::duration::format_ns;
use prober_core::protocol::Rung;
use prober_core::{
    Context, DistSummary, Outcome, Registry, RunMeta, Sample, Sink, Summary, TargetEntry,
};

use crate::fields::{FieldValue, field_value};
use crate::output::Output;

/// Prints a line per probe (unless quiet), then one summary per target and a
/// side-by-side table of the chosen fields, with times in µs.
pub struct HumanSink {
    out: Output,
    quiet: bool,
    fields: Vec<String>,
    unix_time: bool,
    multi: bool,
    ladder: Vec<Rung>,
    /// How each scheme's responder reports a whole turnaround
    /// ([`prober_core::Protocol::turnaround`]).
    turnarounds: Vec<(&'static str, &'static str)>,
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
    pub fn new(out: Box<dyn crate::Destination>, quiet: bool, fields: Vec<String>) -> Self {
        Self {
            out: Output::new(out),
            quiet,
            fields,
            unix_time: false,
            multi: false,
            ladder: Vec::new(),
            turnarounds: Vec::new(),
        }
    }

    /// Adds the protocol ladder to the summaries: one row per rung (from
    /// [`prober_core::Registry::ladder`]), with each row's median RTT, what
    /// it adds over the row it is compared with, and which part of the
    /// split grew most (the self-test). No rungs: no ladder.
    #[must_use]
    pub fn with_ladder(mut self, rungs: Vec<Rung>) -> Self {
        self.ladder = rungs;
        self
    }

    /// Words each summary's turnaround line in its protocol's terms.
    #[must_use]
    pub fn with_protocols(mut self, registry: &Registry) -> Self {
        self.turnarounds = registry
            .protocols()
            .filter_map(|p| Some((p.turnaround?, p.schemes)))
            .flat_map(|(note, schemes)| schemes.iter().map(move |s| (s.name, note)))
            .collect();
        self
    }

    /// The protocol ladder (see [`HumanSink::with_ladder`]).
    fn write_ladder(&mut self, summaries: &[Summary]) -> io::Result<()> {
        let rows = ladder_rows(summaries, &self.ladder);
        if rows.len() < 3 {
            return Ok(());
        }
        writeln!(
            self.out,
            "\nthe protocol ladder (median RTT per layer, and what each adds over the layer in `over`):"
        )?;
        self.write_table(&rows)
    }

    /// Starts each probe line with the Unix time of the reply (of the
    /// timeout, for timeouts) in brackets, as `ping -D` does.
    #[must_use]
    pub fn with_unix_time(mut self, on: bool) -> Self {
        self.unix_time = on;
        self
    }

    /// "Where the time goes": each known part's median and its share of the
    /// median RTT, and how many splits were complete.
    fn write_split(&mut self, s: &Summary) -> io::Result<()> {
        let (Some(rtt), Some(split)) = (s.rtt.as_ref(), s.split.as_ref()) else {
            return Ok(());
        };
        if s.parts.is_empty() {
            return Ok(());
        }
        // Shares are of the parts' means, which add up (medians of parts
        // do not: a block of medians showed 56.8 % + 11.4 % + 59.5 %); the
        // time shown is each part's median.
        // The responder's whole turnaround stands in for its three parts
        // only where none of them is known: beside a known one (HTTP with
        // --new-connection knows its dwell) it would overlap it.
        let turnaround = s.parts.get(prober_core::Parts::TURNAROUND).filter(|_| {
            !prober_core::Parts::NAMES
                .iter()
                .any(|n| n.starts_with("responder") && s.parts.contains_key(*n))
        });
        let shown: Vec<&prober_core::DistSummary> = prober_core::Parts::NAMES
            .iter()
            .filter_map(|name| match (s.parts.get(*name), turnaround) {
                (Some(d), _) => Some(d),
                (None, Some(t)) if *name == "responder_wake" => Some(t),
                _ => None,
            })
            .collect();
        let total: f64 = shown.iter().map(|d| d.mean).sum();
        let share = |d: &prober_core::DistSummary| {
            if total > 0.0 {
                d.mean * 100.0 / total
            } else {
                0.0
            }
        };
        let mut head = format!(
            "where the time goes (each part's median, and its share of the parts' means, which add up; median rtt {}",
            format_ns(rtt.p50 as f64)
        );
        if let Some(k) = &s.kernel_rtt {
            let _ = write!(
                head,
                "; kernel rtt {}, the kernel's send stamp to its receive stamp",
                format_ns(k.p50 as f64)
            );
        }
        writeln!(self.out, "{head}):")?;
        for name in prober_core::Parts::NAMES {
            let label = name.replace('_', " ");
            if let Some(d) = turnaround
                && name.starts_with("responder")
                && !s.parts.contains_key(name)
            {
                // The responder reports its turnaround as a whole (STAMP's
                // T3 − T2; gRPC's kernel receive stamp to handler return).
                if name == "responder_wake" {
                    let how = self
                        .turnarounds
                        .iter()
                        .find(|(scheme, _)| *scheme == s.protocol)
                        .map_or(
                            "its kernel receive stamp to its handler's return, as it reports it",
                            |(_, note)| note,
                        );
                    writeln!(
                        self.out,
                        "  {:<16} {:>10}  {:>5.1}%  ({how})",
                        "responder",
                        format_ns(d.p50 as f64),
                        share(d)
                    )?;
                }
                continue;
            }
            match s.parts.get(name) {
                Some(d) => writeln!(
                    self.out,
                    "  {label:<16} {:>10}  {:>5.1}%",
                    format_ns(d.p50 as f64),
                    share(d)
                )?,
                None if split.kernel_peer && name.starts_with("responder") => {}
                None => writeln!(self.out, "  {label:<16} {:>10}", "unknown")?,
            }
        }
        if split.kernel_peer {
            writeln!(
                self.out,
                "  (the peer's kernel answers; its turnaround is in the network part)"
            )?;
        }
        let missing: Vec<String> = split
            .missing
            .iter()
            .map(|(why, n)| format!("{why} {n}"))
            .collect();
        writeln!(
            self.out,
            "  split: {} complete, {} partial, {} unknown{}",
            split.complete,
            split.partial,
            split.unknown,
            if missing.is_empty() {
                String::new()
            } else {
                format!(" (missing: {})", missing.join(", "))
            }
        )?;
        Ok(())
    }

    /// The split of every target side by side (medians, µs), when more than
    /// one target has one: where each protocol's extra time goes.
    fn write_split_table(&mut self, summaries: &[Summary]) -> io::Result<()> {
        let with: Vec<&Summary> = summaries.iter().filter(|s| !s.parts.is_empty()).collect();
        if with.len() < 2 {
            return Ok(());
        }
        // The responder's turnaround as a whole, where a responder reports
        // only that (STAMP, gRPC): a column after its parts.
        let turnaround = with.iter().any(|s| {
            s.parts.contains_key(prober_core::Parts::TURNAROUND)
                && !s.parts.contains_key(prober_core::Parts::NAMES[4])
        });
        let mut names: Vec<&str> = prober_core::Parts::NAMES.to_vec();
        if turnaround {
            names.insert(5, prober_core::Parts::TURNAROUND);
        }
        let mut rows = vec![
            ["target", "rtt", "kernel rtt"]
                .iter()
                .map(|h| (*h).to_owned())
                .chain(names.iter().map(|n| n.replace('_', " ")))
                .collect::<Vec<_>>(),
        ];
        let us = |d: Option<&prober_core::DistSummary>| {
            d.map_or_else(|| "-".to_owned(), |d| format!("{:.1}", d.p50 as f64 / 1e3))
        };
        for s in with {
            let mut row = vec![
                s.target.clone(),
                us(s.rtt.as_ref()),
                us(s.kernel_rtt.as_ref()),
            ];
            // A turnaround stands in for the three responder parts only
            // where they are unknown: beside them (prober's HTTP responder,
            // whose first probe has only the turnaround) its median is of
            // the few probes without them, and reads as if it added to them.
            let sent_part = s.parts.contains_key(prober_core::Parts::NAMES[4]);
            row.extend(names.iter().map(|n| {
                if *n == prober_core::Parts::TURNAROUND && sent_part {
                    "-".to_owned()
                } else {
                    us(s.parts.get(*n))
                }
            }));
            rows.push(row);
        }
        writeln!(
            self.out,
            "\nwhere the time goes, side by side (medians in µs, - unknown):"
        )?;
        self.write_table(&rows)
    }

    /// Rows of cells as aligned columns: the first left-aligned, the rest
    /// right-aligned, two spaces apart.
    fn write_table(&mut self, rows: &[Vec<String>]) -> io::Result<()> {
        let columns = rows.first().map_or(0, Vec::len);
        let widths: Vec<usize> = (0..columns)
            .map(|c| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0))
            .collect();
        for row in rows {
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
        Ok(())
    }

    fn write_summaries(&mut self, meta: &RunMeta, summaries: &[Summary]) -> io::Result<()> {
        for s in summaries {
            writeln!(
                self.out,
                "\n--- {} ({}) {} statistics ---",
                s.target, s.addr, s.protocol
            )?;
            let loss = s
                .loss_pct
                .map_or_else(|| "-".to_owned(), |l| format!("{l:.1}%"));
            writeln!(
                self.out,
                "{} sent, {} ok, {} timeout, {} error, {loss} loss; late {}, duplicate {}, reordered {}, corrupt {}, missed {}, reconnects {}",
                s.sent,
                s.ok,
                s.timeout,
                s.error,
                s.late,
                s.duplicate,
                s.reordered,
                s.corrupt,
                s.missed,
                s.reconnects
            )?;
            if !s.errors.is_empty() {
                let by: Vec<String> = s.errors.iter().map(|(k, n)| format!("{k} {n}")).collect();
                writeln!(self.out, "errors    {}", by.join(", "))?;
            }
            if let (Some(rate), Some(elapsed)) = (s.rate, s.elapsed_s) {
                writeln!(
                    self.out,
                    "rate      {rate:.1} answered/s over {elapsed:.3} s (first send to last reply)"
                )?;
            }
            writeln!(self.out, "{}", dist_line("rtt", s.rtt.as_ref()))?;
            if let Some(p) = &s.ping_rtt {
                // What ping prints, so a ping user can compare: it stops
                // at the kernel's receive stamp, before the wake-up and the
                // read that `rtt` includes.
                writeln!(
                    self.out,
                    "{}  (ping's number: user send to the kernel's receive stamp)",
                    dist_line("ping rtt", Some(p))
                )?;
            }
            writeln!(self.out, "{}", dist_line("latency", s.latency.as_ref()))?;
            writeln!(self.out, "{}", dist_line("send lag", s.send_lag.as_ref()))?;
            if let Some(d) = &s.server_dwell {
                writeln!(self.out, "{}", dist_line("dwell", Some(d)))?;
            }
            if let Some(d) = &s.rx_wake {
                writeln!(self.out, "{}", dist_line("rx wake", Some(d)))?;
            }
            if let Some(sp) = &s.spin {
                let per = if sp.probes == 0 {
                    0.0
                } else {
                    sp.ns as f64 / sp.probes as f64 / 1e3
                };
                writeln!(
                    self.out,
                    "spin      {} spun {per:.1} µs each on average, {} answered within the spin",
                    prober_core::quote::count(sp.probes, "probe"),
                    sp.caught
                )?;
            }
            if let Some(d) = &s.forward {
                writeln!(self.out, "{}", dist_line("forward", Some(d)))?;
            }
            if let Some(d) = &s.backward {
                writeln!(self.out, "{}", dist_line("backward", Some(d)))?;
            }
            if let Some(j) = &s.jitter {
                // The same five statistics as the lines above, signed.
                let spread = j.ipdv.map_or_else(String::new, |d| {
                    let f = |ns: i64| {
                        let sign = if ns < 0 { "-" } else { "" };
                        format!("{sign}{}", format_ns(ns.unsigned_abs() as f64))
                    };
                    format!(
                        "min/p50/p90/p99/max = {}/{}/{}/{}/{}, ",
                        f(d.min),
                        f(d.p50),
                        f(d.p90),
                        f(d.p99),
                        f(d.max)
                    )
                });
                writeln!(
                    self.out,
                    "ipdv      {spread}mean |Δ| {}; rfc3550 jitter {}",
                    format_ns(j.mean_abs),
                    format_ns(j.rfc3550)
                )?;
            }
            let b = &s.loss_bursts;
            if b.count > 0 {
                let by: Vec<String> = b.lengths.iter().map(|(k, n)| format!("{k}: {n}")).collect();
                writeln!(
                    self.out,
                    "bursts    {} loss bursts, longest {}, outage {:.3}s; by length {}",
                    b.count,
                    b.longest,
                    b.outage_s,
                    by.join(", ")
                )?;
            }
            if let Some(t) = &s.tcp_info {
                writeln!(
                    self.out,
                    "tcp_info  rtt {} (var {}), min_rtt {}: the kernel's own estimate",
                    format_ns(f64::from(t.rtt_us) * 1e3),
                    format_ns(f64::from(t.rttvar_us) * 1e3),
                    format_ns(f64::from(t.min_rtt_us) * 1e3)
                )?;
            }
            if let Some(p) = &s.path {
                let zero_rtt = if p.zero_rtt > 0 {
                    format!(", {} resumed with 0-RTT", p.zero_rtt)
                } else {
                    String::new()
                };
                writeln!(
                    self.out,
                    "path      srtt {}, cwnd {} bytes, {} packets sent, {} lost, {} congestion events{zero_rtt}: the transport's own figures",
                    format_ns(f64::from(p.srtt_us) * 1e3),
                    p.cwnd,
                    p.sent_packets,
                    p.lost_packets,
                    p.congestion_events
                )?;
            }
            if !s.phases.is_empty() {
                // p50 of each phase, in the order of a request.
                let row: Vec<String> = prober_core::Phases::NAMES
                    .iter()
                    .filter_map(|n| {
                        let d = s.phases.get(*n)?;
                        Some(format!(
                            "{} {}",
                            n.replace('_', " "),
                            format_ns(d.p50 as f64)
                        ))
                    })
                    .collect();
                writeln!(self.out, "phases    p50: {}", row.join(", "))?;
            }
            if let Some(t) = s.cert_not_after {
                let now = prober_core::clock::unix_now_ns() / 1_000_000_000;
                let days = (t - now as i64) as f64 / 86_400.0;
                writeln!(self.out, "cert      expires in {days:.1} days (unix {t})")?;
            }
            if let Some(l) = &s.direction_loss {
                writeln!(
                    self.out,
                    "lost      forward {}, backward {}, direction unknown {} (after the newest reply)",
                    l.forward, l.backward, l.unknown
                )?;
            }
            self.write_split(s)?;
        }
        self.write_split_table(summaries)?;
        if !self.ladder.is_empty() {
            self.write_ladder(summaries)?;
        }
        writeln!(
            self.out,
            "\n{} (rtt: user send to user receive, times in µs)",
            settings_line(meta)
        )?;
        let mut rows: Vec<Vec<String>> = vec![self.fields.clone()];
        for s in summaries {
            let row = self
                .fields
                .iter()
                .map(|f| match field_value(f, s, meta) {
                    Some(FieldValue::Text(t)) => t,
                    Some(FieldValue::Int(n)) => n.to_string(),
                    Some(FieldValue::Nanos(ns)) => format!("{:.1}", ns / 1e3),
                    Some(FieldValue::Percent(p)) => format!("{p:.1}%"),
                    Some(FieldValue::Number(x)) => format!("{x:.1}"),
                    Some(FieldValue::Missing) | None => "-".to_owned(),
                })
                .collect();
            rows.push(row);
        }
        self.write_table(&rows)?;
        // ping's own number differs from the table's RTT: say so once, under
        // the table, where a ping user compares them. Only for ICMP targets:
        // other protocols have a ping RTT too (to their reply's kernel
        // stamp), but no ping to compare with.
        if let Some(p) = summaries
            .iter()
            .filter(|s| s.protocol == "icmp")
            .find_map(|s| s.ping_rtt.as_ref())
        {
            writeln!(
                self.out,
                "ICMP rtt runs to the user receive, as every protocol's; ping prints less, to the kernel's receive stamp: p50 {} here (ping rtt above, or --fields ping.p50)",
                format_ns(p.p50 as f64)
            )?;
        }
        self.out.flush()
    }
}

fn settings_line(m: &RunMeta) -> String {
    let interval = if m.interval_ns == 0 {
        "0 (closed loop)".to_owned()
    } else {
        format_ns(m.interval_ns as f64)
    };
    let mut s = format!(
        "interval {interval}, pacing {}, receive {}, burst {}",
        m.pacing, m.receive, m.burst,
    );
    if let Some(size) = m.size {
        let _ = write!(s, ", size {size} B");
    }
    let _ = write!(s, ", timeout {}", format_ns(m.timeout_ns as f64));
    if let Some(c) = m.count {
        let _ = write!(s, ", count {c}");
    }
    if let Some(d) = m.duration_ns {
        let _ = write!(s, ", duration {}", format_ns(d as f64));
    }
    if m.warmup > 0 {
        let _ = write!(s, ", warmup {}", m.warmup);
    }
    let _ = write!(s, ", kernel stamps {}", m.kernel_stamps);
    if let Some(ns) = m.cpu_latency_ns {
        let _ = write!(s, ", cpu latency request {}", format_ns(ns as f64));
    }
    s
}

fn dist_line(label: &str, d: Option<&DistSummary>) -> String {
    let Some(d) = d else {
        return format!("{label:<9} no samples");
    };
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
    fn start(&mut self, cx: &Context<'_>) -> io::Result<()> {
        self.multi = cx.targets.len() > 1;
        let meta = cx.meta;
        writeln!(
            self.out,
            "prober {} on {} (kernel {}): {}",
            meta.version,
            meta.hostname,
            meta.kernel,
            settings_line(meta)
        )?;
        for t in cx.targets.values().map(|t| &t.info) {
            let size = t
                .size
                .map_or_else(|| "no payload".to_owned(), |s| format!("{s} B"));
            writeln!(
                self.out,
                "{} ({}) via {}, {size}, {} timestamps",
                t.target, t.addr, t.protocol, t.timestamps
            )?;
        }
        self.out.flush()
    }

    fn record(&mut self, cx: &Context<'_>, target: &TargetEntry, s: &Sample) -> io::Result<()> {
        if self.quiet {
            return Ok(());
        }
        if self.unix_time {
            let at = match &s.outcome {
                Outcome::Ok(r) => r.received,
                _ => s.sent,
            };
            let ns = cx.clock.unix_ns(at);
            write!(
                self.out,
                "[{}.{:06}] ",
                ns / 1_000_000_000,
                ns % 1_000_000_000 / 1000
            )?;
        }
        let who = if self.multi {
            format!("{} ", target.info.target)
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
                if let Some(ttl) = r.ttl {
                    write!(self.out, " ttl={ttl}")?;
                }
                if let Some(d) = r.server_dwell {
                    write!(self.out, " dwell={}", format_ns(d.as_nanos() as f64))?;
                }
                if let Some(d) = r.rx_wake {
                    write!(self.out, " wake={}", format_ns(d.as_nanos() as f64))?;
                }
                writeln!(self.out)?;
            }
            Outcome::Timeout => writeln!(self.out, "{who}seq={} timeout", s.seq)?,
            Outcome::Error(e) => {
                writeln!(self.out, "{who}seq={} error ({}): {e}", s.seq, e.kind())?
            }
            other => writeln!(self.out, "{who}seq={} {}", s.seq, other.name())?,
        }
        self.out.maybe_flush()
    }

    fn tick(&mut self, _cx: &Context<'_>, _now: tokio::time::Instant) -> io::Result<()> {
        self.out.tick()
    }

    fn interim(&mut self, cx: &Context<'_>, summaries: &[Summary]) -> io::Result<()> {
        // Headed so it is not taken for the final summary (SIGQUIT, as
        // ping's Ctrl-\).
        let elapsed_ns = prober_core::clock::unix_now_ns().saturating_sub(cx.meta.start_unix_ns);
        writeln!(
            self.out,
            "\n=== interim statistics after {:.1} s; the run goes on ===",
            elapsed_ns as f64 / 1e9
        )?;
        self.write_summaries(cx.meta, summaries)
    }

    fn finish(&mut self, cx: &Context<'_>, summaries: &[Summary]) -> io::Result<()> {
        self.write_summaries(cx.meta, summaries)
    }
}

/// A summary's part medians in four groups: client send, network, the
/// responder (its parts, or its turnaround where it reports only that),
/// client wake.
fn part_groups(s: &Summary) -> [Option<u64>; 4] {
    let p = |n: &str| s.parts.get(n).map(|d| d.p50);
    // The responder's three parts where it gave them; its turnaround only
    // where not. An HTTP run has both: the first probe's turnaround (no
    // send part carried yet) and every later probe's three parts, and the
    // one slow first probe's turnaround read as +119 µs of responder.
    let parts = ["responder_wake", "responder_dwell", "responder_send"].map(p);
    let responder = parts
        .iter()
        .copied()
        .sum::<Option<u64>>()
        .or_else(|| p(prober_core::Parts::TURNAROUND));
    [p("client_send"), p("network"), responder, p("client_wake")]
}

/// The protocol ladder's table, header first: each layer that answered,
/// its median RTT, and what it adds over the layer it is compared with (or
/// the nearest one below that answered): gRPC over HTTP/2 (h2c), not over
/// HTTPS, the row above it. Of several targets of one protocol (ICMP to
/// 127.0.0.1 and ::1) the first that answered counts.
fn ladder_rows(summaries: &[Summary], rungs: &[Rung]) -> Vec<Vec<String>> {
    let answered = |proto: &str| {
        summaries
            .iter()
            .filter(|s| s.protocol == proto)
            .find_map(|s| Some((s.rtt.as_ref()?.p50, part_groups(s))))
    };
    let layer_of = |proto: &str| rungs.iter().find(|l| l.scheme == proto);
    let mut rows = vec![
        [
            "layer",
            "p50 µs",
            "over",
            "adds µs",
            "where it grew (part medians, µs)",
        ]
        .map(str::to_owned)
        .to_vec(),
    ];
    for &Rung {
        scheme: proto,
        label: layer,
        over: below,
        ..
    } in rungs
    {
        let Some((p50, groups)) = answered(proto) else {
            continue;
        };
        // The layer it builds on, or the nearest below that one that answered.
        let mut base = below;
        let mut under = None;
        while let Some(b) = base {
            if let Some(found) = answered(b) {
                under = Some((b, found));
                break;
            }
            base = layer_of(b).and_then(|l| l.over);
        }
        let (over, adds, grew) = match under {
            Some((b, (was_p50, before))) => {
                let adds = format!("{:+.1}", (p50 as f64 - was_p50 as f64) / 1e3);
                let grew = ["client send", "network", "responder", "client wake"]
                    .iter()
                    .zip(groups.iter().zip(before))
                    .filter_map(|(n, (now, was))| Some((*n, now.zip(was)?)))
                    .map(|(n, (now, was))| (n, now as f64 - was as f64))
                    .max_by(|a, b| a.1.total_cmp(&b.1))
                    .filter(|(_, d)| *d > 0.0)
                    .map_or_else(|| "-".to_owned(), |(n, d)| format!("{n} {:+.1}", d / 1e3));
                (layer_of(b).map_or("", |l| l.label).to_owned(), adds, grew)
            }
            None => ("-".to_owned(), "-".to_owned(), "-".to_owned()),
        };
        rows.push(vec![
            layer.to_owned(),
            format!("{:.1}", p50 as f64 / 1e3),
            over,
            adds,
            grew,
        ]);
    }
    rows
}

#[cfg(test)]
mod tests {
    use super::*;
    use prober_core::DistSummary;

    fn summary(protocol: &str, rtt_us: u64, parts: &[(&str, u64)]) -> Summary {
        let d = |us: u64| DistSummary {
            count: 100,
            p50: us * 1000,
            ..DistSummary::default()
        };
        Summary {
            protocol: protocol.to_owned(),
            rtt: Some(d(rtt_us)),
            parts: parts
                .iter()
                .map(|(n, us)| ((*n).to_owned(), d(*us)))
                .collect(),
            ..Summary::default()
        }
    }

    #[test]
    fn the_ladder_compares_each_layer_with_the_one_it_builds_on() {
        let responder = |wake, send| {
            [
                ("client_send", 10),
                ("network", 4),
                ("responder_wake", wake),
                ("responder_dwell", 1),
                ("responder_send", send),
                ("client_wake", 9),
            ]
        };
        let mut dead = summary("icmp", 0, &[]);
        dead.rtt = None;
        let summaries = [
            // A first ICMP target that never answered: the second counts.
            dead,
            summary(
                "icmp",
                80,
                &[("client_send", 30), ("network", 15), ("client_wake", 35)],
            ),
            summary("tcp", 58, &responder(30, 2)),
            // HTTP's first probe has only the turnaround (150 µs here): the
            // three parts the later ones carried are what counts.
            summary("http", 91, &{
                let mut p = responder(33, 7).to_vec();
                p.push(("turnaround", 150));
                p
            }),
            summary("h2c", 160, &responder(40, 19)),
            summary("https", 219, &responder(57, 25)),
            summary("grpc", 109, &responder(36, 12)),
        ];
        let rung = |scheme, label, over, rank| Rung {
            scheme,
            label,
            over,
            rank,
        };
        let rungs = [
            rung("icmp", "ICMP", None, 0),
            rung("udp", "UDP", Some("icmp"), 1),
            rung("tcp", "TCP", Some("udp"), 2),
            rung("http", "HTTP/1.1", Some("tcp"), 3),
            rung("h2c", "HTTP/2 (h2c)", Some("http"), 4),
            rung("https", "HTTPS (HTTP/2, TLS)", Some("h2c"), 5),
            rung("grpc", "gRPC", Some("h2c"), 6),
            rung("grpcs", "gRPC over TLS", Some("grpc"), 7),
        ];
        let rows = ladder_rows(&summaries, &rungs);
        let row = |layer: &str| {
            rows.iter()
                .find(|r| r[0] == layer)
                .unwrap_or_else(|| panic!("no {layer} row in {rows:?}"))
                .clone()
        };
        assert_eq!(rows[0][2], "over");
        assert_eq!(row("ICMP")[2..], ["-", "-", "-"]);
        // UDP did not answer: TCP is compared with ICMP, the layer below.
        assert!(rows.iter().all(|r| r[0] != "UDP"));
        assert_eq!(row("TCP")[2..4], ["ICMP", "-22.0"]);
        // 33 + 1 + 7 against TCP's 30 + 1 + 2: +8 µs of responder, not
        // the turnaround's +117.
        assert_eq!(row("HTTP/1.1")[2..], ["TCP", "+33.0", "responder +8.0"]);
        assert_eq!(row("HTTPS (HTTP/2, TLS)")[2..4], ["HTTP/2 (h2c)", "+59.0"]);
        // gRPC runs on HTTP/2 without TLS: compared with h2c, not HTTPS.
        assert_eq!(row("gRPC")[2..], ["HTTP/2 (h2c)", "-51.0", "-"]);
        assert!(rows.iter().all(|r| r[0] != "gRPC over TLS"));
    }

    /// A writer the test reads back.
    #[derive(Clone, Default)]
    struct Buf(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

    impl std::io::Write for Buf {
        fn write(&mut self, b: &[u8]) -> io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    impl crate::Destination for Buf {}

    /// A responder that reports its dwell and also its whole turnaround
    /// (HTTP with --new-connection): the turnaround does not stand in for
    /// the parts beside the known one, which would count the dwell twice.
    #[test]
    fn a_known_responder_part_is_not_overlapped_by_the_turnaround() {
        let buf = Buf::default();
        let mut sink = HumanSink::new(Box::new(buf.clone()), true, Vec::new());
        let mut s = summary(
            "http",
            300,
            &[
                ("client_send", 20),
                ("network", 10),
                ("responder_dwell", 5),
                ("client_wake", 30),
                ("turnaround", 240),
            ],
        );
        s.split = Some(prober_core::stats::SplitCounts::default());
        sink.write_split(&s).unwrap();
        sink.out.flush().unwrap();
        let text = String::from_utf8(buf.0.lock().unwrap().clone()).unwrap();
        assert!(text.contains("responder dwell"), "{text}");
        assert!(
            !text.lines().any(|l| l.trim_start().starts_with("responder ") && l.contains("as it reports it")),
            "the turnaround overlaps the dwell: {text}"
        );
        assert!(
            text.contains("responder wake") && text.contains("unknown"),
            "{text}"
        );
    }
}

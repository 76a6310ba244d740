//! A trace for a person: mtr's report table (`mtr --report`), one per
//! branch, with what a good mtr reader would say about a hop's loss.

use std::fmt::Write as _;

use crate::trace::{Branch, Trace};

/// The trace as text: a line on what was found, then each branch's table.
pub fn human(t: &Trace) -> String {
    let mut out = String::new();
    let n = t.paths.len();
    let _ = writeln!(
        out,
        "trace {} {}: {} {} ({} flows tried; {})",
        t.to.ip(),
        match t.method {
            crate::Method::Icmp => "icmp echo".to_owned(),
            m => format!("{} port {}", m.name(), t.to.port()),
        },
        n,
        if n == 1 { "path" } else { "paths (ECMP)" },
        t.flows,
        if t.capped {
            "stopped at the flow limit: more paths may exist".to_owned()
        } else {
            format!("{:.0} % sure no path was missed", t.confidence * 100.0)
        },
    );
    for (i, b) in t.paths.iter().enumerate() {
        branch(&mut out, i, n, b, t.method);
    }
    if t.user_timed > 0 {
        let _ = writeln!(
            out,
            "{} RTTs were timed by user-space clocks, a kernel stamp missing",
            t.user_timed
        );
    }
    if t.unmatched > 0 {
        let _ = writeln!(
            out,
            "{} answers quoted too little of the probe to say which one they answer",
            t.unmatched
        );
    }
    out
}

fn branch(out: &mut String, i: usize, n: usize, b: &Branch, method: crate::Method) {
    let ports: Vec<String> = b.flows.iter().map(u16::to_string).collect();
    let _ = writeln!(
        out,
        "\npath {} of {n}: {} flow{} ({} {}){}",
        i + 1,
        b.flows.len(),
        if b.flows.len() == 1 { "" } else { "s" },
        if method == crate::Method::Icmp {
            "echo identifiers"
        } else {
            "source ports"
        },
        ports.join(", "),
        if b.reached {
            ""
        } else {
            "; the destination did not answer"
        },
    );
    let width = b
        .hops
        .iter()
        .map(|h| h.addr.map_or(3, |a| a.to_string().len()))
        .max()
        .unwrap_or(3)
        .max(7);
    let _ = writeln!(
        out,
        "{:>4}  {:<width$}  {:>6} {:>5} {:>8} {:>8} {:>8} {:>8} {:>8}",
        "hop", "address", "Loss%", "Snt", "Last", "Avg", "Best", "Wrst", "StDev"
    );
    let ms = |v: Option<f64>| v.map_or_else(|| "-".to_owned(), |v| format!("{v:.3}"));
    for h in &b.hops {
        let addr = h.addr.map_or_else(|| "???".to_owned(), |a| a.to_string());
        let mut note = h.answer.map(|k| k.mark()).unwrap_or_default().to_owned();
        if h.rate_limited {
            note.push_str("  (ICMP rate-limited: later hops lose less)");
        }
        if !h.also.is_empty() {
            let also: Vec<String> = h.also.iter().map(ToString::to_string).collect();
            let _ = write!(note, "  (also {})", also.join(", "));
        }
        let _ = writeln!(
            out,
            "{:>3}.  {addr:<width$}  {:>5.1}% {:>5} {:>8} {:>8} {:>8} {:>8} {:>8}{note}",
            h.ttl,
            h.loss_pct,
            h.sent,
            ms(h.last_ms),
            ms(h.avg_ms),
            ms(h.best_ms),
            ms(h.worst_ms),
            ms(h.stdev_ms),
        );
    }
    let _ = writeln!(out, "(RTTs in ms)");
}

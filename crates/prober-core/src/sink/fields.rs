//! Summary fields selectable with `--fields`, like netperf's `-o`.

use crate::meta::RunMeta;
use crate::stats::{DistSummary, Summary};

/// Fields of the human table when `--fields` is not given.
pub const DEFAULT_TABLE_FIELDS: &[&str] = &[
    "target", "count", "loss", "mean", "std", "min", "p25", "p50", "p75", "p90", "p99", "max",
];

/// Fields of CSV output when `--fields` is not given.
pub const DEFAULT_CSV_FIELDS: &[&str] = &[
    "target",
    "protocol",
    "addr",
    "sent",
    "ok",
    "timeout",
    "error",
    "late",
    "duplicate",
    "reordered",
    "missed",
    "loss",
    "mean",
    "std",
    "min",
    "p1",
    "p5",
    "p10",
    "p25",
    "p50",
    "p75",
    "p90",
    "p95",
    "p99",
    "p99.9",
    "max",
    "lat.mean",
    "lat.p50",
    "lat.p99",
    "lat.max",
    "lag.p50",
    "lag.p99",
    "lag.max",
    "interval",
    "pacing",
    "burst",
    "size",
    "probe_timeout",
    "receive",
];

/// A field's value, typed so each sink can format it in its own way.
#[derive(Debug, Clone, PartialEq)]
pub enum FieldValue {
    /// Text: target, protocol, pacing.
    Text(String),
    /// A count.
    Int(u64),
    /// A time in nanoseconds (sinks show µs).
    Nanos(f64),
    /// A percentage.
    Percent(f64),
}

/// The value of field `name` for `s`, or `None` if no field has that name.
///
/// Time statistics without a prefix are RTT; `lat.` is latency from the
/// scheduled send, `lag.` send lag, `dwell.` responder dwell time, `wake.`
/// receive wake-up (kernel receive timestamp to the probe's read). Each takes
/// `mean std min p1 p5 p10 p25 p50 p75 p90 p95 p99 p99.9 max` (`25%` is
/// accepted for `p25`).
pub fn field_value(name: &str, s: &Summary, meta: &RunMeta) -> Option<FieldValue> {
    use FieldValue::{Int, Nanos, Percent, Text};
    let v = match name {
        "target" => Text(s.target.clone()),
        "protocol" => Text(s.protocol.clone()),
        "addr" => Text(s.addr.clone()),
        "count" | "sent" => Int(s.sent),
        "ok" => Int(s.ok),
        "timeout" => Int(s.timeout),
        "error" => Int(s.error),
        "late" => Int(s.late),
        "duplicate" => Int(s.duplicate),
        "reordered" => Int(s.reordered),
        "unknown" => Int(s.unknown),
        "corrupt" => Int(s.corrupt),
        "reconnects" => Int(s.reconnects),
        "missed" => Int(s.missed),
        "loss" => Percent(s.loss_pct),
        "interval" => Nanos(meta.interval_ns as f64),
        "pacing" => Text(meta.pacing.clone()),
        "receive" => Text(meta.receive.clone()),
        "burst" => Int(u64::from(meta.burst)),
        "size" => Int(meta.size as u64),
        "probe_timeout" => Nanos(meta.timeout_ns as f64),
        _ => {
            let empty = DistSummary::default();
            let (dist, stat) = match name.split_once('.') {
                Some(("lat", stat)) => (&s.latency, stat),
                Some(("lag", stat)) => (&s.send_lag, stat),
                Some(("rtt", stat)) => (&s.rtt, stat),
                Some(("dwell", stat)) => (s.server_dwell.as_ref().unwrap_or(&empty), stat),
                Some(("wake", stat)) => (s.rx_wake.as_ref().unwrap_or(&empty), stat),
                _ => (&s.rtt, name),
            };
            let stat = match stat.strip_suffix('%') {
                Some(p) => format!("p{p}"),
                None => stat.to_owned(),
            };
            match stat.as_str() {
                "count" => Int(dist.count),
                _ => Nanos(dist.get(&stat)?),
            }
        }
    };
    Some(v)
}

/// Parses a comma-separated field list and checks every name.
///
/// # Errors
/// Names the first unknown field.
pub fn parse_fields(spec: &str) -> Result<Vec<String>, String> {
    // field_value looks only at the name: any summary will do.
    let probe_summary = Summary::default();
    let meta = RunMeta::new("", &crate::RunConfig::default());
    let fields: Vec<String> = spec
        .split(',')
        .map(str::trim)
        .filter(|f| !f.is_empty())
        .map(str::to_owned)
        .collect();
    if fields.is_empty() {
        return Err("no fields given".to_owned());
    }
    for f in &fields {
        if field_value(f, &probe_summary, &meta).is_none() {
            return Err(format!(
                "unknown field {f:?} (known: {}, and lat./lag./dwell./wake. prefixes)",
                DEFAULT_CSV_FIELDS.join(",")
            ));
        }
    }
    Ok(fields)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_rejects() {
        assert_eq!(
            parse_fields("mean, p99,lat.p50").unwrap(),
            ["mean", "p99", "lat.p50"]
        );
        assert!(parse_fields("25%,p99.9,dwell.p50,lag.max").is_ok());
        assert!(parse_fields("mean,bogus").unwrap_err().contains("bogus"));
        assert!(parse_fields("lat.nope").is_err());
        assert!(parse_fields(" , ").is_err());
        for f in DEFAULT_CSV_FIELDS.iter().chain(DEFAULT_TABLE_FIELDS) {
            assert!(parse_fields(f).is_ok(), "{f}");
        }
    }
}

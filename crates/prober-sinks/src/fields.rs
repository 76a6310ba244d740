//! Summary fields selectable with `--fields`, like netperf's `-o`.

use prober_core::{DistSummary, RunMeta, Summary};

/// Fields of the human table when `--fields` is not given.
pub const DEFAULT_TABLE_FIELDS: &[&str] = &[
    "target", "count", "loss", "missed", "mean", "std", "min", "p25", "p50", "p75", "p90", "p99",
    "max",
];

/// Every field that is not a statistic, in the order the unknown-field
/// error lists them.
const PLAIN_FIELDS: &[&str] = &[
    "target",
    "protocol",
    "addr",
    "count",
    "sent",
    "ok",
    "timeout",
    "error",
    "late",
    "duplicate",
    "reordered",
    "unknown",
    "corrupt",
    "reconnects",
    "missed",
    "loss",
    "elapsed",
    "rate",
    "interval",
    "pacing",
    "receive",
    "cpu_latency",
    "burst",
    "size",
    "probe_timeout",
    "jitter",
    "ipdv",
    "bursts",
    "longest_burst",
    "outage",
];

/// The statistics each distribution field takes.
const STATS: &[&str] = &[
    "count", "mean", "std", "min", "p1", "p5", "p10", "p25", "p50", "p75", "p90", "p95", "p99",
    "p99.9", "max",
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
    "elapsed",
    "rate",
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
    "jitter",
    "ipdv",
    "bursts",
    "longest_burst",
    "outage",
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
    /// A plain number with its own unit (seconds, probes per second).
    Number(f64),
    /// No value: a statistic of a target with no samples, a size of a
    /// protocol without payload. Shown as `-` in tables, empty in CSV.
    Missing,
}

/// The value of field `name` for `s`, or `None` if no field has that name.
///
/// Time statistics without a prefix are RTT; `lat.` is latency from the
/// scheduled send, `lag.` send lag, `dwell.` responder dwell time, `wake.`
/// receive wake-up (kernel receive timestamp to the probe's read), `ping.`
/// ping's number (ICMP: user send to the kernel's receive stamp). Each takes
/// `mean std min p1 p5 p10 p25 p50 p75 p90 p95 p99 p99.9 max` (`25%` is
/// accepted for `p25`).
pub fn field_value(name: &str, s: &Summary, meta: &RunMeta) -> Option<FieldValue> {
    use FieldValue::{Int, Missing, Nanos, Number, Percent, Text};
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
        "loss" => s.loss_pct.map_or(Missing, Percent),
        "elapsed" => s.elapsed_s.map_or(Missing, Number),
        "rate" => s.rate.map_or(Missing, Number),
        "interval" => Nanos(meta.interval_ns as f64),
        "pacing" => Text(meta.pacing.clone()),
        "receive" => Text(meta.receive.clone()),
        "cpu_latency" => meta.cpu_latency_ns.map_or(Missing, |ns| Nanos(ns as f64)),
        "burst" => Int(u64::from(meta.burst)),
        "size" => s.size.map_or(Missing, |n| Int(n as u64)),
        "probe_timeout" => Nanos(meta.timeout_ns as f64),
        "jitter" => s.jitter.map_or(Missing, |j| Nanos(j.rfc3550)),
        "ipdv" => s.jitter.map_or(Missing, |j| Nanos(j.mean_abs)),
        "bursts" => Int(s.loss_bursts.count),
        "longest_burst" => Int(s.loss_bursts.longest),
        "outage" => Nanos(s.loss_bursts.outage_s * 1e9),
        _ => {
            let (dist, stat): (&Option<DistSummary>, _) = match name.split_once('.') {
                Some(("lat", stat)) => (&s.latency, stat),
                Some(("lag", stat)) => (&s.send_lag, stat),
                Some(("rtt", stat)) => (&s.rtt, stat),
                Some(("dwell", stat)) => (&s.server_dwell, stat),
                Some(("wake", stat)) => (&s.rx_wake, stat),
                Some(("ping", stat)) => (&s.ping_rtt, stat),
                _ => (&s.rtt, name),
            };
            let stat = match stat.strip_suffix('%') {
                Some(p) => format!("p{p}"),
                None => stat.to_owned(),
            };
            if !STATS.contains(&stat.as_str()) {
                return None;
            }
            match (dist, stat.as_str()) {
                (None, "count") => Int(0),
                (None, _) => Missing,
                (Some(d), "count") => Int(d.count),
                (Some(d), stat) => Nanos(d.get(stat)?),
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
    let meta = RunMeta::new("", &prober_core::RunConfig::default());
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
                "unknown field {f:?} (known: {}; statistics {} of rtt, bare or with the prefix rtt., lat., lag., dwell. or wake.)",
                PLAIN_FIELDS.join(","),
                STATS.join(",")
            ));
        }
    }
    Ok(fields)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_statistics_are_missing_not_zero() {
        let s = Summary::default();
        let meta = RunMeta::new("", &prober_core::RunConfig::default());
        assert_eq!(field_value("p50", &s, &meta), Some(FieldValue::Missing));
        assert_eq!(field_value("lat.max", &s, &meta), Some(FieldValue::Missing));
        assert_eq!(field_value("loss", &s, &meta), Some(FieldValue::Missing));
        assert_eq!(field_value("size", &s, &meta), Some(FieldValue::Missing));
        assert_eq!(field_value("count", &s, &meta), Some(FieldValue::Int(0)));
    }

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
        let err = parse_fields("bogus").unwrap_err();
        for f in [
            "count",
            "unknown",
            "corrupt",
            "reconnects",
            "missed",
            "p99.9",
            "wake.",
        ] {
            assert!(err.contains(f), "{f} not listed: {err}");
        }
        for f in PLAIN_FIELDS {
            assert!(parse_fields(f).is_ok(), "{f}");
        }
        for f in DEFAULT_CSV_FIELDS.iter().chain(DEFAULT_TABLE_FIELDS) {
            assert!(parse_fields(f).is_ok(), "{f}");
        }
    }
}

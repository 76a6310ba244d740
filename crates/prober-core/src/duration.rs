//! Parsing of human durations such as `10ms`, `250us` and `1.5s`.

use std::time::Duration;

/// The longest duration accepted, in ns: every duration must fit the u64
/// nanosecond fields of the outputs.
pub const MAX_NS: u64 = u64::MAX;

/// Parses a duration written as a decimal number followed by a unit:
/// `ns`, `us` (or `µs`), `ms`, `s`, `m` or `h`, or as several such parts
/// (`1m30s`, read by humantime). A bare `0` is accepted.
///
/// # Errors
/// Returns a message naming the problem: an empty string, a negative value,
/// a missing or unknown unit, or a number that does not parse or overflows.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let s = text.trim();
    if s.len() > crate::quote::MAX_QUOTE {
        return Err(format!(
            "duration {:?} is too long to be one",
            crate::quote::short(s)
        ));
    }
    if s.is_empty() {
        return Err("empty duration".to_owned());
    }
    if s.starts_with('-') {
        return Err(format!("duration {s:?} is negative"));
    }
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (number, unit) = s.split_at(split);
    if number.is_empty() {
        return Err(format!("duration {s:?} does not start with a number"));
    }
    let value: f64 = number
        .parse()
        .map_err(|_| format!("duration {s:?} has an invalid number"))?;
    let scale_ns = match unit.trim() {
        "" if value == 0.0 => 0.0,
        "" => {
            return Err(format!(
                "duration {s:?} has no unit (use ns, us, ms, s, m or h, e.g. 10ms)"
            ));
        }
        "ns" => 1.0,
        "us" | "µs" => 1e3,
        "ms" => 1e6,
        "s" => 1e9,
        "m" | "min" => 60e9,
        "h" => 3600e9,
        // `1m30s`, `1h 5m`: several numbers with units.
        other if other.chars().any(|c| c.is_ascii_digit()) => {
            let d = humantime::parse_duration(s)
                .map_err(|e| format!("duration {s:?} is not valid: {e}"))?;
            if d.as_nanos() > u128::from(MAX_NS) {
                return Err(format!(
                    "duration {s:?} is too large (at most {MAX_NS}ns, 584 years)"
                ));
            }
            return Ok(d);
        }
        other => return Err(format!("duration {s:?} has an unknown unit {other:?}")),
    };
    let too_large = || format!("duration {s:?} is too large (at most {MAX_NS}ns, 584 years)");
    // Whole numbers are scaled exactly: as an f64, 2^64 ns would round to
    // u64::MAX and pass.
    if !number.contains('.') {
        let whole: u128 = number.parse().map_err(|_| too_large())?;
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)] // whole ns per unit
        let ns = whole
            .checked_mul(scale_ns as u128)
            .filter(|&ns| ns <= u128::from(MAX_NS))
            .ok_or_else(too_large)?;
        #[allow(clippy::cast_possible_truncation)] // checked above
        return Ok(Duration::from_nanos(ns as u64));
    }
    let ns = (value * scale_ns).round();
    // u64::MAX as f64 is 2^64, one past the largest u64.
    if !ns.is_finite() || ns >= u64::MAX as f64 {
        return Err(too_large());
    }
    Ok(Duration::from_nanos(ns as u64))
}

/// Formats a duration compactly with a unit chosen by its size
/// (`850ns`, `45.2µs`, `1.25ms`, `2s`).
pub fn format_duration(d: Duration) -> String {
    format_ns(d.as_nanos() as f64)
}

/// Formats a nanosecond value compactly with a unit chosen by its size.
pub fn format_ns(ns: f64) -> String {
    let trim = |v: f64, unit: &str| {
        let s = format!("{v:.3}");
        let s = s.trim_end_matches('0').trim_end_matches('.');
        format!("{s}{unit}")
    };
    if ns < 1e3 {
        trim(ns, "ns")
    } else if ns < 1e6 {
        trim(ns / 1e3, "µs")
    } else if ns < 1e9 {
        trim(ns / 1e6, "ms")
    } else {
        trim(ns / 1e9, "s")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_units() {
        assert_eq!(parse_duration("10ms"), Ok(Duration::from_millis(10)));
        assert_eq!(parse_duration("250us"), Ok(Duration::from_micros(250)));
        assert_eq!(parse_duration("250µs"), Ok(Duration::from_micros(250)));
        assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_duration("100ns"), Ok(Duration::from_nanos(100)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("0"), Ok(Duration::ZERO));
        assert_eq!(parse_duration("0ms"), Ok(Duration::ZERO));
        assert_eq!(parse_duration("1m30s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("1h5m"), Ok(Duration::from_secs(3900)));
        assert_eq!(parse_duration("1s500ms"), Ok(Duration::from_millis(1500)));
    }

    #[test]
    fn rejects_bad_input() {
        for bad in [
            "",
            "-1ms",
            "10",
            "ms",
            "1.2.3s",
            "10 parsecs",
            "1e400s",
            "abc",
            "1m30x",
        ] {
            assert!(parse_duration(bad).is_err(), "{bad:?} should not parse");
        }
        assert!(parse_duration("-5ms").unwrap_err().contains("negative"));
        assert!(parse_duration("10").unwrap_err().contains("no unit"));
    }

    #[test]
    fn refuses_what_does_not_fit_u64_nanoseconds() {
        assert_eq!(
            parse_duration("18446744073709551615ns"),
            Ok(Duration::from_nanos(u64::MAX))
        );
        for big in [
            "18446744073709551616ns",
            "18446744074s",
            "18446744073.8s",
            "99999999999999999999999999999999999999999s",
            "5124096h 1s",
        ] {
            let e = parse_duration(big).unwrap_err();
            assert!(e.contains("too large"), "{big:?}: {e}");
        }
    }

    #[test]
    fn formats_compactly() {
        assert_eq!(format_ns(850.0), "850ns");
        assert_eq!(format_ns(45_200.0), "45.2µs");
        assert_eq!(format_ns(1_250_000.0), "1.25ms");
        assert_eq!(format_duration(Duration::from_secs(2)), "2s");
    }
}

//! STAMP timestamps (RFC 8762 §4.2.1): NTP 64-bit (seconds since 1900 and a
//! binary fraction) or PTPv2 truncated (seconds and nanoseconds since 1970),
//! and the Error Estimate field (RFC 4656 §4.1.2) that says which and how
//! good.
//!
//! prober works in nanoseconds since the Unix epoch on `CLOCK_REALTIME`.
//! Differences of two timestamps of one format (T3 − T2) are taken in that
//! format with wrapping arithmetic, so they are right across the NTP era
//! rollover of 2036 without knowing the era.

/// Seconds from 1900-01-01 (the NTP epoch) to 1970-01-01 (the Unix epoch).
pub const NTP_UNIX_OFFSET: u64 = 2_208_988_800;

const NS: u64 = 1_000_000_000;
const ERA: i128 = 1 << 32;

/// The timestamp format of a packet: the Z bit of its Error Estimate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Format {
    /// NTP 64-bit: 32-bit seconds since 1900, 32-bit fraction (Z = 0).
    #[default]
    Ntp,
    /// PTPv2 truncated: 32-bit seconds, 32-bit nanoseconds (Z = 1).
    Ptp,
}

impl Format {
    /// `unix_ns` (ns since the Unix epoch) in this format.
    pub fn encode(self, unix_ns: u64) -> u64 {
        let (secs, ns) = (unix_ns / NS, unix_ns % NS);
        match self {
            Self::Ntp => {
                // The era is not carried: seconds wrap in 2036 (RFC 5905 §6).
                let s = (secs + NTP_UNIX_OFFSET) & 0xffff_ffff;
                let frac = (ns << 32).div_ceil(NS);
                (s << 32) | (frac & 0xffff_ffff)
            }
            // PTP time is counted from 1970 too. prober's clock is the
            // system's realtime clock (UTC); the TAI offset is not added,
            // which docs/stamp.md says.
            Self::Ptp => ((secs & 0xffff_ffff) << 32) | ns,
        }
    }

    /// Splits a timestamp of this format into (seconds, nanoseconds) of its
    /// own epoch; `None` for a PTP nanosecond field of a second or more.
    fn split(self, t: u64) -> Option<(u64, u64)> {
        let (s, low) = (t >> 32, t & 0xffff_ffff);
        match self {
            Self::Ntp => Some((s, (low * NS) >> 32)),
            Self::Ptp => (low < NS).then_some((s, low)),
        }
    }

    /// `b − a` in ns, for two timestamps of this format no more than 68
    /// years apart (so across the 2036 rollover too); `None` for a malformed
    /// PTP timestamp.
    pub fn diff_ns(self, a: u64, b: u64) -> Option<i64> {
        let ((sa, na), (sb, nb)) = (self.split(a)?, self.split(b)?);
        let mut secs = i128::from(sb) - i128::from(sa);
        if secs >= ERA / 2 {
            secs -= ERA;
        } else if secs < -ERA / 2 {
            secs += ERA;
        }
        let ns = secs * i128::from(NS) + i128::from(nb) - i128::from(na);
        i64::try_from(ns).ok()
    }

    /// The Unix time in ns of timestamp `t`, taking the era (NTP) or the
    /// 32-bit wrap (PTP) that puts it nearest `near_unix_ns`; `None` before
    /// 1970 or for a malformed PTP timestamp.
    pub fn decode(self, t: u64, near_unix_ns: u64) -> Option<u64> {
        let near = self.encode(near_unix_ns);
        let d = self.diff_ns(near, t)?;
        let at = i128::from(near_unix_ns) + i128::from(d);
        u64::try_from(at).ok()
    }
}

/// The Error Estimate field (RFC 4656 §4.1.2, RFC 8762 §4.2.1): S
/// (synchronised to UTC), Z (timestamp format), Scale and Multiplier; the
/// error is Multiplier × 2^(Scale − 32) seconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ErrorEstimate(pub u16);

impl ErrorEstimate {
    /// An estimate for a clock of `format`, synchronised or not, with an
    /// error of at least `error_ns` (rounded up to what the field can
    /// express). The multiplier is never 0 (RFC 4656 forbids it).
    pub fn new(format: Format, synced: bool, error_ns: u64) -> Self {
        // Smallest scale with error ≤ 255 × 2^(scale − 32) s.
        let mut scale = 0u16;
        let unit = |scale: u16| (NS as f64) * 2f64.powi(i32::from(scale) - 32);
        while scale < 63 && 255.0 * unit(scale) < error_ns as f64 {
            scale += 1;
        }
        let mult = ((error_ns as f64) / unit(scale)).ceil().clamp(1.0, 255.0) as u16;
        let s = if synced { 0x8000 } else { 0 };
        let z = if format == Format::Ptp { 0x4000 } else { 0 };
        Self(s | z | (scale << 8) | mult)
    }

    /// The S bit: the sender says its clock is synchronised to UTC.
    pub fn synced(self) -> bool {
        self.0 & 0x8000 != 0
    }

    /// The Z bit: the timestamp format.
    pub fn format(self) -> Format {
        if self.0 & 0x4000 != 0 {
            Format::Ptp
        } else {
            Format::Ntp
        }
    }

    /// The error in ns; `None` for a multiplier of 0 (invalid).
    pub fn error_ns(self) -> Option<f64> {
        let scale = i32::from((self.0 >> 8) & 0x3f);
        let mult = f64::from(self.0 & 0xff);
        (mult > 0.0).then(|| mult * 2f64.powi(scale - 32) * NS as f64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 2036-02-07T06:28:16Z: NTP era 0 ends, seconds wrap to 0.
    const ROLLOVER_UNIX: u64 = (1 << 32) - NTP_UNIX_OFFSET;

    #[test]
    fn ntp_at_the_epochs() {
        // 1970-01-01: NTP seconds are the offset.
        assert_eq!(Format::Ntp.encode(0), NTP_UNIX_OFFSET << 32);
        // NTP zero is 1900 in era 0 and 2036-02-07 in era 1; from 1970 on
        // the nearer is 2036 (1900 is 70 years back, past half an era).
        assert_eq!(Format::Ntp.decode(0, 0), Some(ROLLOVER_UNIX * NS));
        // A time before the Unix epoch is no Unix time.
        assert_eq!(
            Format::Ntp.decode(Format::Ntp.encode(0) - (10 << 32), 0),
            None
        );
        // Half a second is 2^31 of fraction.
        assert_eq!(Format::Ntp.encode(NS / 2) & 0xffff_ffff, 1 << 31);
        // The rollover: seconds 0 of era 1.
        assert_eq!(Format::Ntp.encode(ROLLOVER_UNIX * NS), 0);
        assert_eq!(
            Format::Ntp.encode((ROLLOVER_UNIX - 1) * NS),
            0xffff_ffff << 32
        );
    }

    #[test]
    fn ntp_round_trips_within_a_nanosecond() {
        let now = 1_795_000_000 * NS + 123_456_789; // late 2026
        for t in [
            now,
            ROLLOVER_UNIX * NS - 1,
            ROLLOVER_UNIX * NS,
            ROLLOVER_UNIX * NS + 999_999_999,
            1,
        ] {
            let back = Format::Ntp.decode(Format::Ntp.encode(t), t).unwrap();
            assert!(back.abs_diff(t) <= 1, "{t} came back as {back}");
            let back = Format::Ptp.decode(Format::Ptp.encode(t), t).unwrap();
            assert_eq!(back, t);
        }
    }

    #[test]
    fn differences_cross_the_2036_rollover() {
        let before = Format::Ntp.encode(ROLLOVER_UNIX * NS - 250_000_000);
        let after = Format::Ntp.encode(ROLLOVER_UNIX * NS + 250_000_000);
        let d = Format::Ntp.diff_ns(before, after).unwrap();
        assert!((499_999_998..=500_000_002).contains(&d), "{d}");
        let back = Format::Ntp.diff_ns(after, before).unwrap();
        assert_eq!(back, -d);
        // Decoding picks the era nearest the reference time.
        let t = ROLLOVER_UNIX * NS + 5 * NS;
        let got = Format::Ntp
            .decode(Format::Ntp.encode(t), t - 60 * NS)
            .unwrap();
        assert!(got.abs_diff(t) <= 1);
    }

    #[test]
    fn a_ptp_nanosecond_field_past_a_second_is_malformed() {
        assert_eq!(Format::Ptp.diff_ns(0, NS), None);
        assert_eq!(Format::Ptp.diff_ns(0, 5 << 32), Some(5 * NS as i64));
    }

    #[test]
    fn error_estimate_bits() {
        let e = ErrorEstimate::new(Format::Ntp, false, 1_000_000);
        assert!(!e.synced());
        assert_eq!(e.format(), Format::Ntp);
        let err = e.error_ns().unwrap();
        assert!((1_000_000.0..1_010_000.0).contains(&err), "{err}");
        let p = ErrorEstimate::new(Format::Ptp, true, 1);
        assert!(p.synced());
        assert_eq!(p.format(), Format::Ptp);
        assert_eq!(p.0 & 0xff, 5, "1 ns is 5 × 2^-32 s at scale 0"); // 4.29 units
        assert_eq!(ErrorEstimate(0x8000).error_ns(), None);
    }
}

//! Per-target statistics: HdrHistograms in nanoseconds plus exact moments.

use std::time::Duration;

use hdrhistogram::Histogram;
use serde::Serialize;

use crate::error::ErrorKind;
use crate::info::TargetInfo;
use crate::matcher::Anomalies;
use crate::sample::{Outcome, Sample};

pub use crate::hist::{MAX_TRACKABLE_NS, SIGNIFICANT_DIGITS, histogram};

/// The quantiles reported, with their field names.
pub const QUANTILES: [(&str, f64); 10] = [
    ("p1", 0.01),
    ("p5", 0.05),
    ("p10", 0.10),
    ("p25", 0.25),
    ("p50", 0.50),
    ("p75", 0.75),
    ("p90", 0.90),
    ("p95", 0.95),
    ("p99", 0.99),
    ("p99.9", 0.999),
];

/// One distribution: an HdrHistogram for quantiles, exact count, mean,
/// standard deviation, minimum and maximum.
#[derive(Debug, Clone)]
pub struct Dist {
    hist: Histogram<u64>,
    count: u64,
    mean: f64,
    m2: f64,
    min: u64,
    max: u64,
}

impl Default for Dist {
    fn default() -> Self {
        Self {
            hist: histogram(),
            count: 0,
            mean: 0.0,
            m2: 0.0,
            min: u64::MAX,
            max: 0,
        }
    }
}

impl Dist {
    /// Records one value.
    pub fn record(&mut self, d: Duration) {
        let ns = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        self.record_ns(ns);
    }

    /// Records one value in nanoseconds.
    pub fn record_ns(&mut self, ns: u64) {
        // The histogram's lowest bucket is 1 ns; 0 is legal in HdrHistogram
        // and saturating_record clamps anything above the top.
        self.hist.saturating_record(ns);
        self.count += 1;
        // Welford's online update keeps the exact mean and variance.
        let x = ns as f64;
        let delta = x - self.mean;
        self.mean += delta / self.count as f64;
        self.m2 += delta * (x - self.mean);
        self.min = self.min.min(ns);
        self.max = self.max.max(ns);
    }

    /// Number of values recorded.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// Count, mean, population standard deviation, min, quantiles and max;
    /// `None` when nothing was recorded (no statistic is 0 by default).
    pub fn summary(&self) -> Option<DistSummary> {
        if self.count == 0 {
            return None;
        }
        Some(DistSummary::with_quantiles(
            &self.hist,
            self.count,
            self.mean,
            (self.m2 / self.count as f64).sqrt(),
            self.min,
            self.max,
        ))
    }
}

/// A distribution summarised; every value is in nanoseconds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
#[allow(missing_docs)]
pub struct DistSummary {
    pub count: u64,
    pub mean: f64,
    pub std: f64,
    pub min: u64,
    pub p1: u64,
    pub p5: u64,
    pub p10: u64,
    pub p25: u64,
    pub p50: u64,
    pub p75: u64,
    pub p90: u64,
    pub p95: u64,
    pub p99: u64,
    #[serde(rename = "p99.9")]
    pub p99_9: u64,
    pub max: u64,
}

impl DistSummary {
    /// From a histogram alone (an HdrHistogram interval log's): count,
    /// mean, standard deviation, min and max are the histogram's, to its
    /// precision; `None` when it is empty.
    pub fn from_histogram(h: &Histogram<u64>) -> Option<Self> {
        (!h.is_empty())
            .then(|| Self::with_quantiles(h, h.len(), h.mean(), h.stdev(), h.min(), h.max()))
    }

    /// The given count, mean, std, min and max, with quantiles from `h`
    /// clamped to [min, max].
    fn with_quantiles(
        h: &Histogram<u64>,
        count: u64,
        mean: f64,
        std: f64,
        min: u64,
        max: u64,
    ) -> Self {
        let q = |p: f64| h.value_at_quantile(p).clamp(min, max);
        Self {
            count,
            mean,
            std,
            min,
            p1: q(0.01),
            p5: q(0.05),
            p10: q(0.10),
            p25: q(0.25),
            p50: q(0.50),
            p75: q(0.75),
            p90: q(0.90),
            p95: q(0.95),
            p99: q(0.99),
            p99_9: q(0.999),
            max,
        }
    }

    /// A statistic by its field name (`mean`, `std`, `min`, `p50`, `p99.9`,
    /// `max`, `count`), in nanoseconds.
    pub fn get(&self, name: &str) -> Option<f64> {
        Some(match name {
            "count" => self.count as f64,
            "mean" => self.mean,
            "std" => self.std,
            "min" => self.min as f64,
            "max" => self.max as f64,
            "p1" => self.p1 as f64,
            "p5" => self.p5 as f64,
            "p10" => self.p10 as f64,
            "p25" => self.p25 as f64,
            "p50" => self.p50 as f64,
            "p75" => self.p75 as f64,
            "p90" => self.p90 as f64,
            "p95" => self.p95 as f64,
            "p99" => self.p99 as f64,
            "p99.9" => self.p99_9 as f64,
            _ => return None,
        })
    }
}

/// How probes of one target ended: the counts every output shows, kept for
/// every target (the daemon keeps only these; see [`TargetStats::counts_only`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Tally {
    /// Probes sent (ok + timeout + error).
    pub sent: u64,
    /// Probes answered in time.
    pub ok: u64,
    /// Probes with no reply in time.
    pub timeout: u64,
    /// Probes that failed.
    pub error: u64,
    /// Failed probes by reason, indexed like [`ErrorKind::ALL`].
    pub errors: [u64; ErrorKind::ALL.len()],
}

impl Tally {
    /// Counts one finished probe.
    pub fn record(&mut self, outcome: &Outcome) {
        self.sent += 1;
        match outcome {
            Outcome::Ok(_) => self.ok += 1,
            Outcome::Timeout => self.timeout += 1,
            Outcome::Error(e) => {
                self.error += 1;
                if let Some(i) = ErrorKind::ALL.iter().position(|k| *k == e.kind()) {
                    self.errors[i] += 1;
                }
            }
        }
    }

    /// Failed probes of each reason that occurred.
    pub fn errors_by_kind(&self) -> impl Iterator<Item = (ErrorKind, u64)> + '_ {
        ErrorKind::ALL
            .iter()
            .zip(self.errors)
            .filter(|(_, n)| *n > 0)
            .map(|(k, n)| (*k, n))
    }
}

/// The distributions of one target.
#[derive(Debug, Clone, Default)]
pub struct Dists {
    /// Reply minus actual send, for ok probes.
    pub rtt: Dist,
    /// Reply minus scheduled send, for ok probes.
    pub latency: Dist,
    /// Actual send minus scheduled send, for every probe sent.
    pub send_lag: Dist,
    /// Responder dwell time, when the protocol reports it.
    pub server_dwell: Dist,
    /// Receive wake-up (see [`crate::Reply::rx_wake`]), where measured.
    pub rx_wake: Dist,
    /// Kernel transmit to kernel receive (t4k − t1k), where both are known.
    pub kernel_rtt: Dist,
    /// ping's convention: user send to the kernel's receive stamp (ICMP).
    pub ping_rtt: Dist,
    /// Each part of the split and the responder's turnaround where it
    /// reports only that ([`crate::Parts::ALL_NAMES`] order), where known.
    pub parts: [Dist; 7],
    /// One-way delays, where both clocks say they are synchronised (STAMP).
    pub forward: Dist,
    /// One-way delay back.
    pub backward: Dist,
    /// Each phase of an application request ([`crate::Phases::NAMES`]
    /// order), where known; made on the first known phase, so that
    /// protocols without phases do not pay for six histograms.
    pub phases: Option<Box<[Dist; 6]>>,
    /// Replies whose six parts are all known.
    pub split_complete: u64,
    /// Replies with some parts known, not all.
    pub split_partial: u64,
    /// Replies with no part known (no kernel stamps, or a clock step).
    pub split_unknown: u64,
    /// Partial and unknown splits by why ([`crate::Missing`] order).
    pub split_missing: [u64; MISSING_COUNT],
    /// The peer is a kernel (ICMP): the responder parts do not apply.
    pub kernel_peer: bool,
}

/// How many reasons [`crate::Missing::ALL`] has: the length of the
/// per-reason counts, kept in its order.
pub const MISSING_COUNT: usize = crate::Missing::ALL.len();

/// Everything recorded for one target.
#[derive(Debug, Clone)]
pub struct TargetStats {
    /// The counts.
    pub tally: Tally,
    /// Loss bursts and IPDV, from the probes in sequence order (with the
    /// IPDV distribution only where `dists` are kept).
    pub seq: crate::sequence::Sequence,
    /// The distributions, unless counts only are kept.
    pub dists: Option<Box<Dists>>,
    /// When the first probe was sent and the last one ended (its reply,
    /// or its send for one that got none): the span `elapsed_s` and `rate`
    /// are over.
    pub span: Option<(tokio::time::Instant, tokio::time::Instant)>,
}

impl Default for TargetStats {
    fn default() -> Self {
        Self {
            tally: Tally::default(),
            seq: crate::sequence::Sequence::with_distribution(),
            dists: Some(Box::default()),
            span: None,
        }
    }
}

impl TargetStats {
    /// Counts only, no distributions: five HdrHistograms take about a MiB
    /// per target, too much for a daemon with 10,000 targets, whose
    /// distributions go to Prometheus buckets and interval logs instead.
    pub fn counts_only() -> Self {
        Self {
            tally: Tally::default(),
            seq: crate::sequence::Sequence::default(),
            dists: None,
            span: None,
        }
    }

    /// Records one finished probe.
    pub fn record(&mut self, s: &Sample) {
        self.tally.record(&s.outcome);
        let rtt = match &s.outcome {
            Outcome::Ok(reply) => Some(u64::try_from(reply.rtt().as_nanos()).unwrap_or(u64::MAX)),
            _ => None,
        };
        let end = match &s.outcome {
            Outcome::Ok(reply) => s.sent + reply.rtt(),
            _ => s.sent,
        };
        self.span = Some(match self.span {
            None => (s.sent, end),
            Some((first, last)) => (first.min(s.sent), last.max(end)),
        });
        self.seq.push(s.seq, s.scheduled, rtt);
        let Some(d) = &mut self.dists else {
            return;
        };
        d.send_lag.record(s.send_lag());
        if let Outcome::Ok(reply) = &s.outcome {
            d.rtt.record(reply.rtt());
            if let Some(lat) = s.latency() {
                d.latency.record(lat);
            }
            if let Some(dwell) = reply.server_dwell {
                d.server_dwell.record(dwell);
            }
            if let Some(wake) = reply.rx_wake {
                d.rx_wake.record(wake);
            }
            let parts = reply.parts();
            if let Some(r) = reply.stamps.responder {
                if let Some(f) = r.forward {
                    d.forward.record_ns(f);
                }
                if let Some(b) = r.backward {
                    d.backward.record_ns(b);
                }
            }
            if let Some(k) = parts.kernel_rtt {
                d.kernel_rtt.record_ns(k);
            }
            if let Some(p) = parts.ping_rtt {
                d.ping_rtt.record_ns(p);
            }
            record_each(&mut d.parts, parts.list_all());
            if reply.app.phases.any() {
                record_each(
                    &mut d.phases.get_or_insert_with(Box::default)[..],
                    reply.app.phases.0,
                );
            }
            d.kernel_peer |= parts.kernel_peer;
            if parts.complete() {
                d.split_complete += 1;
            } else if parts.any() {
                d.split_partial += 1;
            } else {
                d.split_unknown += 1;
            }
            if let Some(m) = parts.missing {
                d.split_missing[m as usize] += 1;
            }
        }
    }

    /// The summary of this target, with the probe's anomaly counts and the
    /// number of slots the schedule could not fire.
    pub fn summary(&self, target: &TargetInfo, anomalies: Anomalies, missed: u64) -> Summary {
        let t = &self.tally;
        let loss_pct = (t.sent > 0).then(|| (t.sent - t.ok) as f64 * 100.0 / t.sent as f64);
        let dist = |f: fn(&Dists) -> &Dist| self.dists.as_deref().and_then(|d| f(d).summary());
        let elapsed_s = self
            .span
            .map(|(first, last)| last.saturating_duration_since(first).as_secs_f64())
            .filter(|e| *e > 0.0);
        Summary {
            target: target.target.clone(),
            protocol: target.protocol.clone(),
            addr: target.addr.clone(),
            size: target.size,
            sent: t.sent,
            ok: t.ok,
            timeout: t.timeout,
            error: t.error,
            errors: t
                .errors_by_kind()
                .map(|(k, n)| (k.as_str().to_owned(), n))
                .collect(),
            late: anomalies.late,
            duplicate: anomalies.duplicate,
            reordered: anomalies.reordered,
            unknown: anomalies.unknown,
            corrupt: anomalies.corrupt,
            reconnects: anomalies.reconnects,
            missed,
            loss_pct,
            elapsed_s,
            rate: elapsed_s.map(|e| t.ok as f64 / e),
            rtt: dist(|d| &d.rtt),
            latency: dist(|d| &d.latency),
            send_lag: dist(|d| &d.send_lag),
            server_dwell: dist(|d| &d.server_dwell),
            rx_wake: dist(|d| &d.rx_wake),
            kernel_rtt: dist(|d| &d.kernel_rtt),
            ping_rtt: dist(|d| &d.ping_rtt),
            forward: dist(|d| &d.forward),
            backward: dist(|d| &d.backward),
            direction_loss: anomalies.direction,
            tcp_info: anomalies.tcp_rtt,
            path: anomalies.path,
            cert_not_after: anomalies.cert_not_after,
            spin: anomalies.spin,
            parts: self
                .dists
                .as_deref()
                .map(|d| named(crate::Parts::ALL_NAMES.iter().zip(&d.parts)))
                .unwrap_or_default(),
            phases: self
                .dists
                .as_deref()
                .and_then(|d| d.phases.as_deref())
                .map(|phases| named(crate::Phases::NAMES.iter().zip(phases)))
                .unwrap_or_default(),
            loss_bursts: self.seq.burst_summary(),
            jitter: self.seq.ipdv.summary(),
            split: self.dists.as_deref().map(|d| SplitCounts {
                complete: d.split_complete,
                partial: d.split_partial,
                unknown: d.split_unknown,
                kernel_peer: d.kernel_peer,
                missing: crate::Missing::ALL
                    .iter()
                    .zip(d.split_missing)
                    .filter(|(_, n)| *n > 0)
                    .map(|(m, n)| (m.name().to_owned(), n))
                    .collect(),
            }),
        }
    }
}

/// Records each known value (ns) in its distribution.
fn record_each(dists: &mut [Dist], values: impl IntoIterator<Item = Option<u64>>) {
    for (dist, v) in dists.iter_mut().zip(values) {
        if let Some(ns) = v {
            dist.record_ns(ns);
        }
    }
}

/// The summaries of the distributions that recorded anything, by name.
fn named<'a>(
    dists: impl Iterator<Item = (&'a &'static str, &'a Dist)>,
) -> std::collections::BTreeMap<String, DistSummary> {
    dists
        .filter_map(|(name, dist)| Some(((*name).to_owned(), dist.summary()?)))
        .collect()
}

/// The result for one target. Counts satisfy sent = ok + timeout + error;
/// late replies are a subset of the timeouts.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[allow(missing_docs)]
pub struct Summary {
    pub target: String,
    pub protocol: String,
    pub addr: String,
    /// Request size, where the protocol sends a payload.
    pub size: Option<usize>,
    pub sent: u64,
    pub ok: u64,
    pub timeout: u64,
    pub error: u64,
    /// Failed probes by reason (`refused`, `unreachable`, ...).
    pub errors: std::collections::BTreeMap<String, u64>,
    pub late: u64,
    pub duplicate: u64,
    pub reordered: u64,
    pub unknown: u64,
    pub corrupt: u64,
    pub reconnects: u64,
    /// Slots not sent because the in-flight cap was reached.
    pub missed: u64,
    /// (sent - ok) / sent, in percent; `None` when nothing was sent.
    pub loss_pct: Option<f64>,
    /// Seconds from the first probe sent to the last one's end (its reply,
    /// or its send when it got none); `None` before two probes or with no
    /// time between them.
    pub elapsed_s: Option<f64>,
    /// Answered probes per second over `elapsed_s`: netperf's transactions
    /// per second, for a back-to-back run (`-i 0`).
    pub rate: Option<f64>,
    /// Statistics are `None` where nothing was recorded.
    pub rtt: Option<DistSummary>,
    pub latency: Option<DistSummary>,
    pub send_lag: Option<DistSummary>,
    pub server_dwell: Option<DistSummary>,
    /// Kernel receive timestamp to the probe reading the reply (`tcp://`,
    /// UDP, ICMP).
    pub rx_wake: Option<DistSummary>,
    /// Kernel transmit to kernel receive (t4k − t1k), where known.
    pub kernel_rtt: Option<DistSummary>,
    /// What ping prints: user send to the kernel's receive stamp (t4k − t1;
    /// ICMP), where known. `rtt` runs to the user receive, as every
    /// protocol's does.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ping_rtt: Option<DistSummary>,
    /// One-way delay out (STAMP with both clocks synchronised).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub forward: Option<DistSummary>,
    /// One-way delay back.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub backward: Option<DistSummary>,
    /// What adaptive receive spent (`--receive adaptive`): probes that
    /// spun, how many caught their reply, and the spin time in all (ns).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub spin: Option<crate::spin::SpinCount>,
    /// Lost probes by direction, where the protocol can tell.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub direction_loss: Option<crate::DirectionLoss>,
    /// The kernel's own RTT estimate of the probe's TCP connection
    /// (`tcp://`, `grpc://`, `grpc+stream://`), as last read.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tcp_info: Option<crate::TcpRtt>,
    /// A user-space transport's own figures for its connection (QUIC's
    /// path statistics), as last read.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub path: Option<crate::PathStats>,
    /// When the server's TLS certificate expires, Unix seconds
    /// (`https://`, `grpcs://`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cert_not_after: Option<i64>,
    /// The distribution of each part of the split that was ever known
    /// (`client_send`, `network`, ...), by name.
    pub parts: std::collections::BTreeMap<String, DistSummary>,
    /// How many replies had their split complete, partial or unknown.
    pub split: Option<SplitCounts>,
    /// Runs of consecutive lost probes (timeouts and errors), in sequence
    /// order.
    pub loss_bursts: crate::sequence::BurstSummary,
    /// Delay variation between consecutive answered probes (RFC 3393
    /// IPDV on RTTs, and RFC 3550's jitter estimate); `None` before two
    /// consecutive probes were answered.
    pub jitter: Option<crate::sequence::JitterSummary>,
    /// The distribution of each phase of an application request
    /// (`resolve`, `connect`, `tls`, `write`, `first_byte`, `body`) that was
    /// ever known, by name (HTTP).
    #[serde(skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub phases: std::collections::BTreeMap<String, DistSummary>,
}

/// How many replies had all, some or none of their parts known.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct SplitCounts {
    /// Every part known.
    pub complete: u64,
    /// Some parts known.
    pub partial: u64,
    /// No part known.
    pub unknown: u64,
    /// The peer is a kernel (ICMP echo): no responder parts, and its
    /// turnaround is in the network part.
    pub kernel_peer: bool,
    /// Partial and unknown splits by why: the first stamp along the round
    /// trip that was missing ([`crate::Missing::name`]), only those that
    /// occurred.
    #[serde(skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub missing: std::collections::BTreeMap<String, u64>,
}

impl Summary {
    /// True when every probe sent got a reply in time and none was missed.
    pub fn all_ok(&self) -> bool {
        self.sent > 0 && self.ok == self.sent && self.missed == 0
    }

    /// Probes that got no reply in time, plus slots never sent (missed), as
    /// a percentage of the slots scheduled; `None` when none was.
    pub fn loss_with_missed_pct(&self) -> Option<f64> {
        let slots = self.sent + self.missed;
        (slots > 0).then(|| (slots - self.ok) as f64 * 100.0 / slots as f64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uniform_distribution_has_known_quantiles() {
        let mut d = Dist::default();
        // 1..=10_000 µs: the p-th quantile is p * 10_000 µs.
        for us in 1..=10_000u64 {
            d.record_ns(us * 1000);
        }
        let s = d.summary().unwrap();
        assert_eq!(s.count, 10_000);
        assert_eq!(s.min, 1000);
        assert_eq!(s.max, 10_000_000);
        for (name, p) in QUANTILES {
            let want = p * 10_000_000.0;
            let got = s.get(name).unwrap();
            // Three significant digits: within 0.1% (+ one step of the data).
            assert!(
                (got - want).abs() <= want * 0.001 + 1000.0,
                "{name}: {got} vs {want}"
            );
        }
        assert!((s.mean - 5_000_500.0).abs() < 1e-3);
        // Population std of 1..=n (in µs) is sqrt((n^2 - 1) / 12).
        let want_std = (((10_000f64).powi(2) - 1.0) / 12.0).sqrt() * 1000.0;
        assert!((s.std - want_std).abs() < 1e-3 * want_std);
    }

    #[test]
    fn constant_distribution() {
        let mut d = Dist::default();
        for _ in 0..100 {
            d.record(Duration::from_micros(50));
        }
        let s = d.summary().unwrap();
        assert_eq!(
            (s.min, s.p50, s.p99_9, s.max),
            (50_000, 50_000, 50_000, 50_000)
        );
        assert_eq!(s.std, 0.0);
    }

    #[test]
    fn bimodal_distribution() {
        let mut d = Dist::default();
        for _ in 0..900 {
            d.record_ns(10_000);
        }
        for _ in 0..100 {
            d.record_ns(1_000_000);
        }
        let s = d.summary().unwrap();
        // Quantiles are the highest value equivalent at 3 significant digits.
        assert!((10_000..=10_010).contains(&s.p50), "{}", s.p50);
        assert!((10_000..=10_010).contains(&s.p90), "{}", s.p90);
        assert!((s.p95 as f64 - 1e6).abs() <= 1e3);
        assert!((s.mean - 109_000.0).abs() < 1e-6);
    }

    #[test]
    fn outliers_saturate_instead_of_panicking() {
        let mut d = Dist::default();
        d.record(Duration::from_secs(10_000));
        d.record_ns(0);
        let s = d.summary().unwrap();
        assert_eq!(s.count, 2);
        assert_eq!(s.min, 0);
    }

    #[test]
    fn empty_summary_is_none() {
        assert_eq!(Dist::default().summary(), None);
    }

    #[test]
    fn tally_counts_errors_by_kind() {
        use crate::error::ProbeError;
        let mut t = Tally::default();
        t.record(&Outcome::Timeout);
        t.record(&Outcome::Error(ProbeError::new(ErrorKind::Refused, "x")));
        t.record(&Outcome::Error(ProbeError::new(ErrorKind::Refused, "y")));
        t.record(&Outcome::Error(ProbeError::protocol("z")));
        assert_eq!((t.sent, t.timeout, t.error), (4, 1, 3));
        let by: Vec<_> = t.errors_by_kind().collect();
        assert_eq!(by, [(ErrorKind::Refused, 2), (ErrorKind::Protocol, 1)]);
    }

    #[test]
    fn a_target_without_replies_has_no_statistics() {
        let mut st = TargetStats::default();
        let now = tokio::time::Instant::now();
        st.record(&Sample {
            target: 0,
            seq: 0,
            scheduled: now,
            sent: now,
            outcome: Outcome::Timeout,
            bytes: 0,
        });
        let s = st.summary(
            &TargetInfo::new(0, "t", "p", "a", None),
            Anomalies::default(),
            0,
        );
        assert_eq!(s.rtt, None);
        assert_eq!(s.loss_pct, Some(100.0));
        assert!(s.send_lag.is_some());
        let json = serde_json::to_string(&s).unwrap();
        assert!(json.contains("\"rtt\":null"), "{json}");
    }
}

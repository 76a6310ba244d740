//! What only the order of probes shows: loss in bursts, and delay
//! variation between consecutive probes.
//!
//! Probes finish out of order (a timeout is known a timeout later than the
//! replies that follow it), so [`Sequence`] puts each target's outcomes
//! back in sequence order before it looks at neighbours.
//!
//! - **Loss bursts**: runs of consecutive lost probes (timeouts and
//!   errors), their count, the longest, a histogram of their lengths in
//!   powers of two (1, 2-3, 4-7, ...), and the outage they add up to.
//! - **IPDV** (RFC 3393, on round-trip times): the difference between the
//!   RTTs of consecutive answered probes, signed, with its distribution and
//!   mean absolute value; and the interarrival jitter estimate of RFC 3550
//!   §6.4.1 (J += (|D| − J) / 16), as RTP tools report it.

use std::collections::BTreeMap;

use hdrhistogram::Histogram;
use serde::Serialize;
use tokio::time::Instant;

/// Buckets of the burst-length histogram: bucket `i` counts bursts of
/// 2^i to 2^(i+1) − 1 lost probes; the last is open-ended.
pub const BURST_BUCKETS: usize = 16;

/// Outcomes waiting for an earlier one are dropped past this many (a seq
/// that never comes, which the runner does not produce): the order is then
/// taken up again after the hole.
const MAX_PENDING: usize = 1 << 16;

/// Loss bursts of one target.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct LossBursts {
    /// Bursts that ended (an answered probe came after them).
    pub count: u64,
    /// The longest, in probes.
    pub longest: u64,
    /// Probes lost in them.
    pub lost: u64,
    /// Bursts by length ([`BURST_BUCKETS`]).
    pub lengths: [u64; BURST_BUCKETS],
    /// Scheduled time from each burst's first lost probe to the next
    /// answered one, added up, in seconds.
    pub outage_s: f64,
}

impl LossBursts {
    /// The bucket of a burst of `len` probes (≥ 1).
    pub fn bucket(len: u64) -> usize {
        (63 - len.max(1).leading_zeros() as usize).min(BURST_BUCKETS - 1)
    }

    /// A bucket's name: `1`, `2-3`, `4-7`, ..., `32768+`.
    pub fn bucket_name(i: usize) -> String {
        let lo = 1u64 << i;
        if i == BURST_BUCKETS - 1 {
            format!("{lo}+")
        } else if lo == 1 {
            "1".to_owned()
        } else {
            format!("{lo}-{}", 2 * lo - 1)
        }
    }

    fn add(&mut self, len: u64, outage_s: f64) {
        self.count += 1;
        self.longest = self.longest.max(len);
        self.lost += len;
        self.lengths[Self::bucket(len)] += 1;
        self.outage_s += outage_s;
    }
}

/// Delay variation between consecutive answered probes.
#[derive(Debug, Clone, Default)]
pub struct Ipdv {
    /// Pairs of consecutive answered probes.
    pub count: u64,
    /// Sum of |IPDV|, ns.
    pub sum_abs: f64,
    /// RFC 3550 interarrival jitter, ns.
    pub rfc3550: f64,
    /// |IPDV| of the positive and the negative differences, when
    /// distributions are kept.
    hists: Option<Box<(Histogram<u64>, Histogram<u64>)>>,
}

impl Ipdv {
    fn record(&mut self, d: i64) {
        self.count += 1;
        let abs = d.unsigned_abs();
        self.sum_abs += abs as f64;
        self.rfc3550 += (abs as f64 - self.rfc3550) / 16.0;
        if let Some(h) = &mut self.hists {
            let side = if d < 0 { &mut h.1 } else { &mut h.0 };
            side.saturating_record(abs);
        }
    }

    /// The signed value at quantile `q` of both sides together.
    fn quantile(&self, q: f64) -> Option<i64> {
        let h = self.hists.as_deref()?;
        let (pos, neg) = (h.0.len(), h.1.len());
        let n = pos + neg;
        if n == 0 {
            return None;
        }
        let rank = ((q * n as f64).ceil() as u64).clamp(1, n);
        let signed = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
        Some(if rank <= neg {
            // The negative side, from the most negative up.
            -signed(h.1.value_at_quantile(1.0 - (rank - 1) as f64 / neg as f64))
        } else {
            signed(h.0.value_at_quantile((rank - neg) as f64 / pos as f64))
        })
    }

    /// The summary; `None` before the first pair.
    pub fn summary(&self) -> Option<JitterSummary> {
        (self.count > 0).then(|| {
            let q = |p: f64| self.quantile(p);
            JitterSummary {
                count: self.count,
                mean_abs: self.sum_abs / self.count as f64,
                rfc3550: self.rfc3550,
                ipdv: q(0.5).map(|p50| SignedDist {
                    min: q(0.0).unwrap_or(p50),
                    p1: q(0.01).unwrap_or(p50),
                    p10: q(0.10).unwrap_or(p50),
                    p50,
                    p90: q(0.90).unwrap_or(p50),
                    p99: q(0.99).unwrap_or(p50),
                    max: q(1.0).unwrap_or(p50),
                }),
            }
        })
    }
}

/// Delay variation of one target, in nanoseconds.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct JitterSummary {
    /// Pairs of consecutive answered probes.
    pub count: u64,
    /// Mean |IPDV|.
    pub mean_abs: f64,
    /// RFC 3550 interarrival jitter at the end.
    pub rfc3550: f64,
    /// The signed IPDV's distribution, where distributions are kept.
    pub ipdv: Option<SignedDist>,
}

/// Quantiles of a signed quantity, ns.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[allow(missing_docs)]
pub struct SignedDist {
    pub min: i64,
    pub p1: i64,
    pub p10: i64,
    pub p50: i64,
    pub p90: i64,
    pub p99: i64,
    pub max: i64,
}

/// Loss bursts as a summary shows them.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct BurstSummary {
    /// Bursts, the one still open at the end included.
    pub count: u64,
    /// The longest, in probes.
    pub longest: u64,
    /// Outage in seconds: from each burst's first lost probe to the next
    /// answered one (an open burst: to one spacing after its last).
    pub outage_s: f64,
    /// Bursts by length: `1`, `2-3`, `4-7`, ...; only lengths that occurred.
    pub lengths: BTreeMap<String, u64>,
}

/// A burst in progress: always the tail of the order, so its last lost
/// probe is [`Sequence::prev`].
#[derive(Debug, Clone, Copy)]
struct Open {
    len: u64,
    first: Instant,
}

/// Puts a target's outcomes back in sequence order and derives loss
/// bursts and IPDV from them.
#[derive(Debug, Clone, Default)]
pub struct Sequence {
    next: u64,
    /// Finished probes after a hole: seq → (scheduled, RTT ns if answered).
    pending: BTreeMap<u64, (Instant, Option<u64>)>,
    /// The previous probe in order: its scheduled time and RTT if answered.
    prev: Option<(Instant, Option<u64>)>,
    /// Spacing between the last two probes in order.
    spacing: Option<std::time::Duration>,
    open: Option<Open>,
    /// Bursts that ended.
    pub bursts: LossBursts,
    /// IPDV so far.
    pub ipdv: Ipdv,
    /// IPDV values produced by the last [`Sequence::push`] (for sinks that
    /// keep their own distributions).
    pub last_ipdvs: Vec<i64>,
}

impl Sequence {
    /// A tracker that also keeps the IPDV distribution (two histograms).
    pub fn with_distribution() -> Self {
        let h = crate::hist::histogram;
        Self {
            ipdv: Ipdv {
                hists: Some(Box::new((h(), h()))),
                ..Ipdv::default()
            },
            ..Self::default()
        }
    }

    /// One finished probe: its seq, scheduled time and RTT if it was
    /// answered (`None`: lost, a timeout or an error).
    pub fn push(&mut self, seq: u64, scheduled: Instant, rtt_ns: Option<u64>) {
        self.last_ipdvs.clear();
        if seq < self.next {
            return; // a seq already taken (or skipped past): not ours
        }
        if seq == self.next && self.pending.is_empty() {
            // In order, the common case: no detour through the map.
            self.next += 1;
            self.take(scheduled, rtt_ns);
            return;
        }
        self.pending.insert(seq, (scheduled, rtt_ns));
        if self.pending.len() > MAX_PENDING
            && let Some((&first, _)) = self.pending.first_key_value()
        {
            // Give up on the hole: start again after it.
            self.next = first;
            self.prev = None;
        }
        while let Some((scheduled, rtt)) = self.pending.remove(&self.next) {
            self.next += 1;
            self.take(scheduled, rtt);
        }
    }

    fn take(&mut self, scheduled: Instant, rtt: Option<u64>) {
        if let Some((prev_at, prev_rtt)) = self.prev {
            self.spacing = Some(scheduled.saturating_duration_since(prev_at));
            if let (Some(a), Some(b)) = (prev_rtt, rtt) {
                let d = i64::try_from(b).unwrap_or(i64::MAX) - i64::try_from(a).unwrap_or(i64::MAX);
                self.ipdv.record(d);
                self.last_ipdvs.push(d);
            }
        }
        match (rtt, &mut self.open) {
            (None, Some(open)) => open.len += 1,
            (None, None) => {
                self.open = Some(Open {
                    len: 1,
                    first: scheduled,
                });
            }
            (Some(_), Some(open)) => {
                let outage = scheduled.saturating_duration_since(open.first);
                self.bursts.add(open.len, outage.as_secs_f64());
                self.open = None;
            }
            (Some(_), None) => {}
        }
        self.prev = Some((scheduled, rtt));
    }

    /// The bursts so far, the open one included.
    pub fn burst_summary(&self) -> BurstSummary {
        let mut all = self.bursts;
        if let (Some(open), Some((last, _))) = (self.open, self.prev) {
            let to = last + self.spacing.unwrap_or_default();
            all.add(
                open.len,
                to.saturating_duration_since(open.first).as_secs_f64(),
            );
        }
        BurstSummary {
            count: all.count,
            longest: all.longest,
            outage_s: all.outage_s,
            lengths: all
                .lengths
                .iter()
                .enumerate()
                .filter(|(_, n)| **n > 0)
                .map(|(i, n)| (LossBursts::bucket_name(i), *n))
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn run(outcomes: &[Option<u64>], order: &[usize]) -> Sequence {
        let t0 = Instant::now();
        let mut s = Sequence::with_distribution();
        for &i in order {
            s.push(
                i as u64,
                t0 + Duration::from_millis(10 * i as u64),
                outcomes[i],
            );
        }
        s
    }

    #[test]
    fn bursts_in_any_order_of_arrival() {
        // ok, lost×3, ok, lost, ok, lost×2 (open at the end)
        let o = [
            Some(100),
            None,
            None,
            None,
            Some(100),
            None,
            Some(100),
            None,
            None,
        ];
        let in_order: Vec<usize> = (0..o.len()).collect();
        // Timeouts arrive after the replies that follow them.
        let shuffled = [0, 4, 6, 1, 2, 3, 5, 8, 7];
        for order in [&in_order[..], &shuffled[..]] {
            let s = run(&o, order);
            let b = s.burst_summary();
            assert_eq!((b.count, b.longest), (3, 3), "{order:?}");
            let want: BTreeMap<String, u64> = [("1".to_owned(), 1), ("2-3".to_owned(), 2)].into();
            assert_eq!(b.lengths, want);
            // 30 ms + 10 ms + (an open burst of 2: 10 ms + one spacing).
            assert!((b.outage_s - 0.060).abs() < 1e-9, "{}", b.outage_s);
        }
    }

    #[test]
    fn bucket_names_are_powers_of_two() {
        let names: Vec<String> = (0..5).map(LossBursts::bucket_name).collect();
        assert_eq!(names, ["1", "2-3", "4-7", "8-15", "16-31"]);
        assert_eq!(LossBursts::bucket(1), 0);
        assert_eq!(LossBursts::bucket(3), 1);
        assert_eq!(LossBursts::bucket(4), 2);
        assert_eq!(LossBursts::bucket(u64::MAX), BURST_BUCKETS - 1);
        assert_eq!(LossBursts::bucket_name(BURST_BUCKETS - 1), "32768+");
    }

    #[test]
    fn ipdv_of_consecutive_answered_probes_only() {
        // 100, 130, lost, 90, 60: pairs (100,130) and (90,60) only.
        let o = [Some(100), Some(130), None, Some(90), Some(60)];
        let s = run(&o, &[1, 0, 3, 2, 4]);
        let j = s.ipdv.summary().unwrap();
        assert_eq!(j.count, 2);
        assert!((j.mean_abs - 30.0).abs() < 1e-9);
        let d = j.ipdv.unwrap();
        assert_eq!((d.min, d.max), (-30, 30));
        // RFC 3550: 0 + (30 − 0)/16, then + (30 − 1.875)/16.
        let want = 30.0 / 16.0 + (30.0 - 30.0 / 16.0) / 16.0;
        assert!((j.rfc3550 - want).abs() < 1e-9, "{}", j.rfc3550);
    }

    #[test]
    fn signed_quantiles_span_both_sides() {
        let mut s = Sequence::with_distribution();
        let t0 = Instant::now();
        // RTTs alternating 1000 and 2000: IPDV +1000, −1000, ...
        for i in 0..101u64 {
            s.push(i, t0, Some(if i % 2 == 0 { 1000 } else { 2000 }));
        }
        let d = s.ipdv.summary().unwrap().ipdv.unwrap();
        assert_eq!((d.min, d.p1, d.p99, d.max), (-1000, -1000, 1000, 1000));
        assert!(d.p50.abs() == 1000, "{d:?}");
    }

    #[test]
    fn a_hole_that_never_fills_is_given_up() {
        let mut s = Sequence::default();
        let t0 = Instant::now();
        // seq 0 never comes.
        for i in 1..=(MAX_PENDING as u64 + 1) {
            s.push(i, t0, Some(10));
        }
        assert!(s.pending.len() < 2, "{}", s.pending.len());
        assert_eq!(s.ipdv.count, MAX_PENDING as u64);
    }
}

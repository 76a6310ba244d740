//! Loss and RTT quantiles over a sliding window of time (the status page's
//! "last minute" and "last hour"), small enough for 10,000 targets.
//!
//! A window is a ring of slots (a minute: 6 of 10 s; an hour: 12 of 5 min).
//! Each slot counts lost probes and keeps its RTTs as a sparse histogram
//! with Prometheus's schema-3 buckets (2^(1/8), 9 % wide): a few bytes per
//! distinct bucket, where a list of RTTs would cost 4 bytes per probe
//! (14 kB per target-hour at 1 Hz). A quantile is read as the geometric
//! middle of its bucket, so it is within 4.5 % of the true one.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// Buckets per power of two.
const PER_OCTAVE: f64 = 8.0;

#[derive(Debug, Clone)]
struct Slot {
    /// Which slot of time this is (time since the window's origin / slot).
    number: u64,
    lost: u32,
    /// (bucket index, count), sorted by index, while the slot is open (and
    /// after, where that is the smaller form).
    rtts: Vec<(i16, u32)>,
    /// A closed slot's counts from bucket `.0` up, one a bucket, where that
    /// is smaller than the pairs: an hour's slots at 1 Hz hold up to 300
    /// RTTs each, which fill the buckets between theirs (BENCHMARKS.md,
    /// "Memory at 10,000 targets").
    dense: Option<(i16, Dense)>,
}

/// Dense counts, in 16 bits where every one fits (a 5-minute slot below
/// 218 probes a second to one bucket), else 32.
#[derive(Debug, Clone)]
enum Dense {
    Narrow(Box<[u16]>),
    Wide(Box<[u32]>),
}

impl Slot {
    /// Keeps the slot's counts in the smallest of the forms, with no spare
    /// room: it takes no more probes.
    fn close(&mut self) {
        let (Some(first), Some(last)) = (self.rtts.first(), self.rtts.last()) else {
            self.rtts.shrink_to_fit();
            return;
        };
        let span = usize::try_from(i32::from(last.0) - i32::from(first.0) + 1).unwrap_or(0);
        let narrow = self.rtts.iter().all(|(_, c)| u16::try_from(*c).is_ok());
        let width = if narrow {
            size_of::<u16>()
        } else {
            size_of::<u32>()
        };
        if span * width >= self.rtts.len() * size_of::<(i16, u32)>() {
            self.rtts.shrink_to_fit();
            return;
        }
        let lo = first.0;
        let dense = if narrow {
            Dense::Narrow(spread(lo, span, &self.rtts, |c| {
                u16::try_from(c).unwrap_or(u16::MAX)
            }))
        } else {
            Dense::Wide(spread(lo, span, &self.rtts, |c| c))
        };
        self.dense = Some((lo, dense));
        self.rtts = Vec::new();
    }

    /// (bucket index, count) of every bucket with RTTs, by rising index.
    fn counts(&self) -> impl Iterator<Item = (i16, u32)> + '_ {
        let (narrow, wide) = match &self.dense {
            Some((lo, Dense::Narrow(d))) => (Some(gather(*lo, d)), None),
            Some((lo, Dense::Wide(d))) => (None, Some(gather(*lo, d))),
            None => (None, None),
        };
        let dense = narrow
            .into_iter()
            .flatten()
            .chain(wide.into_iter().flatten());
        self.rtts.iter().copied().chain(dense)
    }
}

/// `pairs` (by rising index, from `lo`) as `span` dense counts, each
/// count made a `T` by `count`.
fn spread<T: Default + Copy>(
    lo: i16,
    span: usize,
    pairs: &[(i16, u32)],
    count: impl Fn(u32) -> T,
) -> Box<[T]> {
    let mut d = vec![T::default(); span].into_boxed_slice();
    for &(b, c) in pairs {
        d[usize::try_from(i32::from(b) - i32::from(lo)).unwrap_or(0)] = count(c);
    }
    d
}

/// The (bucket index, count) pairs of dense counts from bucket `lo` up,
/// the empty ones left out. Indexed by position, not by a range from `lo`:
/// a range that ends at i16::MAX would step past it.
fn gather<T: Copy + Into<u32>>(lo: i16, d: &[T]) -> impl Iterator<Item = (i16, u32)> + '_ {
    d.iter().enumerate().filter_map(move |(i, c)| {
        let c: u32 = (*c).into();
        let b = i64::from(lo) + i64::try_from(i).unwrap_or(i64::MAX);
        (c > 0).then(|| (i16::try_from(b).unwrap_or(i16::MAX), c))
    })
}

/// Probes in a sliding window of whole slots.
#[derive(Debug, Clone)]
pub struct Window {
    origin: Instant,
    slot: Duration,
    slots: usize,
    ring: VecDeque<Slot>,
}

/// What a window holds now.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct WindowStats {
    /// Probes that ended in the window.
    pub probes: u64,
    /// Of those, lost (timeout or error).
    pub lost: u64,
    /// Median RTT of the answered ones, µs (within 4.5 %).
    pub p50_us: Option<f64>,
    /// 99th percentile RTT, µs (within 4.5 %).
    pub p99_us: Option<f64>,
}

fn bucket(us: f64) -> i16 {
    // 2^-1000 µs .. 2^1000: anything an RTT can be, clamped.
    (us.max(1e-3).log2() * PER_OCTAVE)
        .ceil()
        .clamp(f64::from(i16::MIN), f64::from(i16::MAX)) as i16
}

fn middle(index: i16) -> f64 {
    ((f64::from(index) - 0.5) / PER_OCTAVE).exp2()
}

impl Window {
    /// `slots` slots of `slot` each, counted from `origin`.
    pub fn new(origin: Instant, slot: Duration, slots: usize) -> Self {
        Self {
            origin,
            slot,
            slots,
            ring: VecDeque::new(),
        }
    }

    /// The window's length.
    pub fn span(&self) -> Duration {
        self.slot * self.slots as u32
    }

    fn number(&self, at: Instant) -> u64 {
        // In u64 ns (584 years), not `as_nanos`' u128: a 128-bit division
        // per probe and window showed in the daemon's profile at 10,000
        // targets.
        let ns = |d: Duration| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        ns(at.saturating_duration_since(self.origin)) / ns(self.slot).max(1)
    }

    /// Drops slots that have left the window at `now`; the last one's
    /// buffer, to reuse.
    fn expire(&mut self, now: u64) -> Option<Vec<(i16, u32)>> {
        let mut spare = None;
        while self
            .ring
            .front()
            .is_some_and(|s| s.number + self.slots as u64 <= now)
        {
            spare = self.ring.pop_front().map(|s| s.rtts);
        }
        spare
    }

    /// A probe that ended at `at`: its RTT in µs, or `None` if lost.
    pub fn push(&mut self, at: Instant, rtt_us: Option<f64>) {
        let n = self.number(at);
        // The buffer of a slot that left the window is the new slot's (as
        // nearly always once the window is full): no allocation per slot
        // per target.
        let spare = self.expire(n);
        if self.ring.back().is_none_or(|s| s.number < n) {
            if let Some(done) = self.ring.back_mut() {
                done.close();
            }
            // Grown a slot at a time up to the slots it keeps: by
            // doubling, an hour's twelve took room for sixteen.
            if self.ring.len() == self.ring.capacity() {
                self.ring.reserve_exact(1);
            }
            let mut rtts = spare.unwrap_or_default();
            rtts.clear();
            self.ring.push_back(Slot {
                number: n,
                lost: 0,
                rtts,
                dense: None,
            });
        }
        let slot = self.ring.back_mut().expect("pushed above");
        match rtt_us {
            None => slot.lost += 1,
            Some(us) => {
                let b = bucket(us);
                match slot.rtts.binary_search_by_key(&b, |(i, _)| *i) {
                    Ok(i) => slot.rtts[i].1 += 1,
                    Err(i) => {
                        if slot.rtts.len() == slot.rtts.capacity() {
                            slot.rtts.reserve_exact(8);
                        }
                        slot.rtts.insert(i, (b, 1));
                    }
                }
            }
        }
    }

    /// The probes in the window at `now`.
    pub fn stats(&self, now: Instant) -> WindowStats {
        let n = self.number(now);
        let live = self
            .ring
            .iter()
            .filter(|s| s.number + self.slots as u64 > n);
        let mut merged: Vec<(i16, u64)> = Vec::new();
        let mut lost = 0u64;
        for s in live {
            lost += u64::from(s.lost);
            for (b, c) in s.counts() {
                match merged.binary_search_by_key(&b, |(i, _)| *i) {
                    Ok(i) => merged[i].1 += u64::from(c),
                    Err(i) => merged.insert(i, (b, u64::from(c))),
                }
            }
        }
        let answered: u64 = merged.iter().map(|(_, c)| c).sum();
        // Nearest rank, as the summaries'.
        let q = |q: f64| -> Option<f64> {
            let rank = ((q * answered as f64).ceil() as u64).clamp(1, answered.max(1));
            let mut seen = 0;
            merged.iter().find_map(|&(b, c)| {
                seen += c;
                (seen >= rank).then(|| middle(b))
            })
        };
        WindowStats {
            probes: answered + lost,
            lost,
            p50_us: q(0.5),
            p99_us: q(0.99),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_are_within_half_a_bucket_and_old_slots_leave() {
        let t0 = Instant::now();
        let mut w = Window::new(t0, Duration::from_secs(10), 6);
        assert_eq!(w.span(), Duration::from_secs(60));
        assert_eq!(w.stats(t0), WindowStats::default());
        // 100 probes over the first 50 s: RTTs 1..=100 µs, every 10th lost.
        for i in 1..=100u32 {
            let at = t0 + Duration::from_millis(u64::from(i) * 500);
            let rtt = (i % 10 != 0).then_some(f64::from(i));
            w.push(at, rtt);
        }
        let s = w.stats(t0 + Duration::from_secs(50));
        assert_eq!((s.probes, s.lost), (100, 10));
        // The true nearest-rank p50 of the 90 answers (rank 45) is 49, p99
        // (rank 90) is 99.
        for (got, want) in [(s.p50_us.unwrap(), 49.0), (s.p99_us.unwrap(), 99.0)] {
            assert!((got / want - 1.0).abs() < 0.045, "{got} against {want}");
        }
        // At 65 s the first slot (0-10 s, 19 probes, 1 lost) has left.
        let s = w.stats(t0 + Duration::from_secs(65));
        assert_eq!((s.probes, s.lost), (81, 9));
        // A push long after empties the ring but its own slot.
        w.push(t0 + Duration::from_secs(3600), Some(7.0));
        let s = w.stats(t0 + Duration::from_secs(3600));
        assert_eq!((s.probes, s.lost), (1, 0));
        assert!((s.p50_us.unwrap() / 7.0 - 1.0).abs() < 0.045);
        assert_eq!(w.ring.len(), 1);
    }

    #[test]
    fn a_closed_slot_keeps_its_counts_in_the_smaller_form() {
        let t0 = Instant::now();
        let mut w = Window::new(t0, Duration::from_secs(10), 6);
        // 300 RTTs from 10 to 1,000 µs in the first slot: they fill the
        // buckets between them, so the closed slot is kept dense.
        for i in 0..300u32 {
            let us = 10.0 * 100f64.powf(f64::from(i) / 299.0);
            w.push(t0 + Duration::from_millis(u64::from(i) * 30), Some(us));
        }
        let open = w.stats(t0 + Duration::from_secs(9));
        assert_eq!(open.probes, 300);
        w.push(t0 + Duration::from_secs(10), None);
        assert!(w.ring[0].dense.is_some() && w.ring[0].rtts.is_empty());
        let closed = w.stats(t0 + Duration::from_secs(10));
        assert_eq!((closed.probes, closed.lost), (301, 1));
        assert_eq!((closed.p50_us, closed.p99_us), (open.p50_us, open.p99_us));
        // Three RTTs far apart stay pairs.
        for (k, us) in [1.0, 1e3, 1e6].into_iter().enumerate() {
            w.push(t0 + Duration::from_secs(20 + k as u64), Some(us));
        }
        w.push(t0 + Duration::from_secs(30), None);
        assert!(w.ring[2].dense.is_none() && w.ring[2].rtts.len() == 3);
        assert_eq!(w.stats(t0 + Duration::from_secs(30)).probes, 305);
        assert!(matches!(w.ring[0].dense, Some((_, Dense::Narrow(_)))));
        // A count past 16 bits keeps 32.
        let mut w = Window::new(t0, Duration::from_secs(10), 6);
        for _ in 0..70_000 {
            w.push(t0, Some(10.0));
        }
        for us in [11.0, 12.0, 13.0] {
            w.push(t0, Some(us));
        }
        let open = w.stats(t0);
        w.push(t0 + Duration::from_secs(10), None);
        assert!(matches!(w.ring[0].dense, Some((_, Dense::Wide(_)))));
        let closed = w.stats(t0 + Duration::from_secs(10));
        assert_eq!(closed.probes, 70_004);
        assert_eq!((closed.p50_us, closed.p99_us), (open.p50_us, open.p99_us));
    }

    #[test]
    fn extreme_rtts_do_not_overflow_the_bucket_index() {
        let t0 = Instant::now();
        let mut w = Window::new(t0, Duration::from_secs(1), 2);
        for us in [0.0, 1e-300, f64::MAX, f64::INFINITY] {
            w.push(t0, Some(us));
        }
        assert_eq!(w.stats(t0).probes, 4);
        // Closed, the slot keeps them in the smaller form; the top bucket
        // (i16::MAX) is read back without stepping past it.
        let mut w = Window::new(t0, Duration::from_secs(1), 2);
        w.push(t0, Some(f64::INFINITY));
        w.push(t0 + Duration::from_secs(1), None);
        let s = w.stats(t0 + Duration::from_secs(1));
        assert_eq!((s.probes, s.lost), (2, 1));
        assert!(s.p50_us.is_some());
    }
}

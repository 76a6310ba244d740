//! Loss and RTT quantiles over a sliding window of time (the status page's
//! "last minute" and "last hour"), small enough for 10,000 targets.
//!
//! A window is a ring of slots (a minute: 6 of 10 s; an hour: 6 of 10 min).
//! Each slot counts lost probes and keeps its RTTs as a histogram with
//! Prometheus's schema-3 buckets (2^(1/8), 9 % wide): while it is open,
//! dense 16-bit counts; once closed, packed as varints with the window's
//! other closed slots in one buffer, a byte or so a bucket, where a list of RTTs would cost 4 bytes per probe
//! (14 kB per target-hour at 1 Hz). A quantile is read as the geometric
//! middle of its bucket, so it is within 4.5 % of the true one.

use std::time::{Duration, Instant};

use prost::encoding::{decode_varint, encode_varint, encoded_len_varint};

use crate::dense::{DenseBuckets, pack, unpack};

/// Buckets per power of two.
const PER_OCTAVE: f64 = 8.0;

/// A slot that has closed, read from [`Window::closed`].
struct Closed<'a> {
    /// Which slot of time this is (time since the window's origin / slot).
    number: u64,
    lost: u64,
    rtts: &'a [u8],
}

/// The closed slots in `bytes` (see [`Window::closed`]), oldest first, each
/// with the offset of the one after it.
fn closed_slots(bytes: &[u8]) -> impl Iterator<Item = (Closed<'_>, usize)> + '_ {
    let mut rest = bytes;
    std::iter::from_fn(move || {
        let number = decode_varint(&mut rest).ok()?;
        let lost = decode_varint(&mut rest).ok()?;
        let len = usize::try_from(decode_varint(&mut rest).ok()?).ok()?;
        let rtts = rest.get(..len)?;
        rest = &rest[len..];
        let slot = Closed { number, lost, rtts };
        Some((slot, bytes.len() - rest.len()))
    })
}

/// The slot probes are counted in now: its RTTs dense, in 8 bits while
/// every count fits (a 10-second slot at 1 Hz always does), then 16 (a
/// 10-minute slot below 109 probes a second to one bucket), then 32.
#[derive(Debug, Clone, Default)]
struct Open {
    number: u64,
    lost: u32,
    rtts: DenseBuckets<u8, u16, u32>,
}

/// Probes in a sliding window of whole slots.
#[derive(Debug, Clone)]
pub struct Window {
    origin: Instant,
    slot: Duration,
    slots: usize,
    /// Closed slots, oldest first, one after another: varints of the slot's
    /// number, its lost probes and the length of its packed RTTs, then
    /// those ([`pack`]). One buffer a window, where a buffer a slot cost
    /// an allocation and a slot's header each (BENCHMARKS.md, "Memory at
    /// 10,000 targets, third pass").
    closed: Vec<u8>,
    /// `None` before the first probe. Its room is kept from slot to slot:
    /// no allocation per slot per target once the spread is seen.
    open: Option<Open>,
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

fn bucket(us: f64) -> i32 {
    // 2^-1000 µs .. 2^1000: anything an RTT can be, clamped.
    (us.max(1e-3).log2() * PER_OCTAVE)
        .ceil()
        .clamp(f64::from(i16::MIN), f64::from(i16::MAX)) as i32
}

fn middle(index: i32) -> f64 {
    ((f64::from(index) - 0.5) / PER_OCTAVE).exp2()
}

impl Window {
    /// `slots` slots of `slot` each, counted from `origin`.
    pub fn new(origin: Instant, slot: Duration, slots: usize) -> Self {
        Self {
            origin,
            slot,
            slots,
            closed: Vec::new(),
            open: None,
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

    /// Whether slot `number` is still in the window at slot `now`.
    fn live(&self, number: u64, now: u64) -> bool {
        number + self.slots as u64 > now
    }

    /// A probe that ended at `at`: its RTT in µs, or `None` if lost.
    pub fn push(&mut self, at: Instant, rtt_us: Option<f64>) {
        let n = self.number(at);
        let open = self.open.get_or_insert_with(|| Open {
            number: n,
            ..Open::default()
        });
        if open.number < n {
            // A new slot: the closed ones that have left the window go
            // first, so that their room holds the one closing now.
            let slots = self.slots as u64;
            let gone = closed_slots(&self.closed)
                .take_while(|(s, _)| s.number + slots <= n)
                .last()
                .map_or(0, |(_, end)| end);
            self.closed.drain(..gone);
            // The open slot closes: packed, if it is still in the window.
            if open.number + slots > n {
                let mut rtts = Vec::new();
                pack(open.rtts.iter(), &mut rtts);
                let head = [open.number, u64::from(open.lost), rtts.len() as u64];
                // Grown by what the slot needs, no more.
                let len: usize = head.iter().map(|v| encoded_len_varint(*v)).sum();
                self.closed.reserve_exact(len + rtts.len());
                for v in head {
                    encode_varint(v, &mut self.closed);
                }
                self.closed.extend_from_slice(&rtts);
            }
            open.number = n;
            open.lost = 0;
            open.rtts.clear();
        }
        match rtt_us {
            None => open.lost += 1,
            Some(us) => open.rtts.add(bucket(us)),
        }
    }

    /// The probes in the window at `now`.
    pub fn stats(&self, now: Instant) -> WindowStats {
        let n = self.number(now);
        let mut merged: Vec<(i32, u64)> = Vec::new();
        let mut lost = 0u64;
        let mut merge = |counts: &mut dyn Iterator<Item = (i32, u64)>| {
            for (b, c) in counts {
                match merged.binary_search_by_key(&b, |(i, _)| *i) {
                    Ok(i) => merged[i].1 += c,
                    Err(i) => merged.insert(i, (b, c)),
                }
            }
        };
        for (s, _) in closed_slots(&self.closed).filter(|(s, _)| self.live(s.number, n)) {
            lost += s.lost;
            merge(&mut unpack(s.rtts));
        }
        if let Some(open) = self.open.as_ref().filter(|o| self.live(o.number, n)) {
            lost += u64::from(open.lost);
            merge(&mut open.rtts.iter());
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
        assert!(w.closed.is_empty());
    }

    #[test]
    fn a_closed_slot_reads_as_it_did_open_and_is_packed_small() {
        let t0 = Instant::now();
        let mut w = Window::new(t0, Duration::from_secs(10), 6);
        // 300 RTTs from 10 to 1,000 µs in the first slot: they fill the
        // buckets between them.
        for i in 0..300u32 {
            let us = 10.0 * 100f64.powf(f64::from(i) / 299.0);
            w.push(t0 + Duration::from_millis(u64::from(i) * 30), Some(us));
        }
        let open = w.stats(t0 + Duration::from_secs(9));
        assert_eq!(open.probes, 300);
        w.push(t0 + Duration::from_secs(10), None);
        let closed = w.stats(t0 + Duration::from_secs(10));
        assert_eq!((closed.probes, closed.lost), (301, 1));
        assert_eq!((closed.p50_us, closed.p99_us), (open.p50_us, open.p99_us));
        // 54 buckets of about 6 RTTs: a byte each, the first index's one,
        // and the slot's number, lost count and length.
        let (slot, end) = closed_slots(&w.closed).next().unwrap();
        assert_eq!(unpack(slot.rtts).count(), 54);
        assert_eq!((slot.rtts.len(), end), (55, 55 + 3));
        // A count past 16 bits widens the open slot twice, and reads back.
        let mut w = Window::new(t0, Duration::from_secs(10), 6);
        for _ in 0..70_000 {
            w.push(t0, Some(10.0));
        }
        for us in [11.0, 12.0, 13.0] {
            w.push(t0, Some(us));
        }
        let open = w.stats(t0);
        assert_eq!(w.open.as_ref().map(|o| o.rtts.width()), Some(4));
        w.push(t0 + Duration::from_secs(10), None);
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

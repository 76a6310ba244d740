//! Counts of exponential buckets, kept dense from the lowest bucket seen to
//! the highest, in the narrowest of three integer widths that every count
//! fits: what a target's histograms and windows cost grows with the spread
//! of its values, and at 10,000 targets that spread is most of the daemon's
//! memory after a long run (BENCHMARKS.md, "Memory at 10,000 targets").
//! Spread evenly over five decades (133 buckets at schema 3), a 1 Hz
//! target's bucket passes 16 bits after 100 days; a count that passes its
//! width widens every count one step, once, so a target whose values sit
//! in a few buckets pays the wider width only for those.
//!
//! Durations fill the buckets between theirs, so dense counts beat (index,
//! count) pairs once a histogram has seen a few values; the room grows by
//! what is needed, not by doubling, since there are tens of thousands of
//! these.

/// An unsigned count of one of the three widths.
pub(crate) trait Count: Copy + Default + Into<u64> + TryFrom<u64> {
    /// This plus one, or `None` past the width.
    fn succ(self) -> Option<Self>;
}

impl Count for u8 {
    fn succ(self) -> Option<Self> {
        self.checked_add(1)
    }
}

impl Count for u16 {
    fn succ(self) -> Option<Self> {
        self.checked_add(1)
    }
}

impl Count for u32 {
    fn succ(self) -> Option<Self> {
        self.checked_add(1)
    }
}

impl Count for u64 {
    fn succ(self) -> Option<Self> {
        self.checked_add(1)
    }
}

#[derive(Debug, Clone)]
enum Counts<N, M, W> {
    Narrow(Vec<N>),
    Mid(Vec<M>),
    Wide(Vec<W>),
}

/// Bucket counts from bucket `lo` up, one a bucket, each an `N` until one
/// would pass `N`'s width, then all an `M`, then all a `W`.
#[derive(Debug, Clone)]
pub(crate) struct DenseBuckets<N, M, W> {
    lo: i32,
    counts: Counts<N, M, W>,
}

impl<N: Count, M: Count, W: Count> Default for DenseBuckets<N, M, W> {
    fn default() -> Self {
        Self {
            lo: 0,
            counts: Counts::Narrow(Vec::new()),
        }
    }
}

/// Counts `index` in `v` (dense from `*lo`), growing it by exactly what the
/// index needs; `false` (and nothing counted) if that bucket is full.
fn bump<C: Count>(v: &mut Vec<C>, lo: &mut i32, index: i32) -> bool {
    if v.is_empty() {
        *lo = index;
    }
    let offset = i64::from(index) - i64::from(*lo);
    let at = if offset < 0 {
        let more = usize::try_from(-offset).unwrap_or(usize::MAX);
        v.reserve_exact(more);
        v.splice(0..0, std::iter::repeat_n(C::default(), more));
        *lo = index;
        0
    } else {
        let at = usize::try_from(offset).unwrap_or(usize::MAX);
        if at >= v.len() {
            v.reserve_exact(at + 1 - v.len());
            v.resize(at + 1, C::default());
        }
        at
    };
    match v[at].succ() {
        Some(c) => {
            v[at] = c;
            true
        }
        None => false,
    }
}

/// `v`'s counts in the next width up.
fn widen<A: Count, B: Count>(v: &[A]) -> Vec<B> {
    let mut wide = Vec::with_capacity(v.len());
    wide.extend(v.iter().map(|c| {
        B::try_from((*c).into()).unwrap_or_else(|_| unreachable!("a count fits the next width"))
    }));
    wide
}

impl<N: Count, M: Count, W: Count> DenseBuckets<N, M, W> {
    /// Counts one value in bucket `index`.
    pub(crate) fn add(&mut self, index: i32) {
        let lo = &mut self.lo;
        let widened = match &mut self.counts {
            Counts::Narrow(v) => {
                if bump(v, lo, index) {
                    return;
                }
                Counts::Mid(widen(v))
            }
            Counts::Mid(v) => {
                if bump(v, lo, index) {
                    return;
                }
                Counts::Wide(widen(v))
            }
            Counts::Wide(v) => {
                // A `W` that overflows would take 2^64 values: saturate.
                let _ = bump(v, lo, index);
                return;
            }
        };
        // A count passed its width: every count widened one step, once,
        // and the value is counted in the wider ones.
        self.counts = widened;
        self.add(index);
    }

    /// No bucket counted.
    pub(crate) fn is_empty(&self) -> bool {
        match &self.counts {
            Counts::Narrow(v) => v.is_empty(),
            Counts::Mid(v) => v.is_empty(),
            Counts::Wide(v) => v.is_empty(),
        }
    }

    /// Forgets every count, keeping the room (and the width) for the next.
    pub(crate) fn clear(&mut self) {
        match &mut self.counts {
            Counts::Narrow(v) => v.clear(),
            Counts::Mid(v) => v.clear(),
            Counts::Wide(v) => v.clear(),
        }
    }

    /// Bytes a count takes now (1, 2, 4 or 8).
    #[cfg(test)]
    pub(crate) fn width(&self) -> usize {
        match &self.counts {
            Counts::Narrow(_) => size_of::<N>(),
            Counts::Mid(_) => size_of::<M>(),
            Counts::Wide(_) => size_of::<W>(),
        }
    }

    /// (bucket index, count) of every bucket that holds anything, by rising
    /// index.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (i32, u64)> + '_ {
        let (narrow, mid, wide) = match &self.counts {
            Counts::Narrow(v) => (Some(nonzero(self.lo, v)), None, None),
            Counts::Mid(v) => (None, Some(nonzero(self.lo, v)), None),
            Counts::Wide(v) => (None, None, Some(nonzero(self.lo, v))),
        };
        narrow
            .into_iter()
            .flatten()
            .chain(mid.into_iter().flatten())
            .chain(wide.into_iter().flatten())
    }
}

/// The (index, count) pairs of dense counts from bucket `lo` up, the empty
/// ones left out. Indexed by position: a range that ends at the top index
/// would step past it.
fn nonzero<C: Count>(lo: i32, v: &[C]) -> impl Iterator<Item = (i32, u64)> + '_ {
    v.iter().enumerate().filter_map(move |(i, c)| {
        let c: u64 = (*c).into();
        let index = i64::from(lo) + i64::try_from(i).unwrap_or(i64::MAX);
        (c > 0).then(|| (i32::try_from(index).unwrap_or(i32::MAX), c))
    })
}

/// Appends bucket counts that no longer change to `out` in a few bytes:
/// varints of the lowest index (zigzag), then for each bucket from it up
/// either its count (`2c`) or a run of empty ones (`2(k - 1) + 1`). A count
/// under 64 takes a byte, so an hour's 10-minute slot of RTTs at 1 Hz
/// spread over five decades (133 buckets) takes about as many bytes, where
/// 16-bit dense counts took twice that. [`unpack`] reads them back.
pub(crate) fn pack(counts: impl Iterator<Item = (i32, u64)>, out: &mut Vec<u8>) {
    use prost::encoding::encode_varint;
    let mut next: Option<i64> = None;
    for (index, count) in counts {
        let index = i64::from(index);
        match next {
            None => encode_varint(zigzag(index), out),
            Some(n) if index > n => encode_varint(2 * (index - n - 1) as u64 + 1, out),
            Some(_) => {}
        }
        encode_varint(count.saturating_mul(2), out);
        next = Some(index + 1);
    }
}

/// The (index, count) pairs [`pack`] wrote as `bytes`.
pub(crate) fn unpack(bytes: &[u8]) -> impl Iterator<Item = (i32, u64)> + '_ {
    use prost::encoding::decode_varint;
    let mut rest = bytes;
    let mut at: Option<i64> = None;
    std::iter::from_fn(move || {
        loop {
            let v = decode_varint(&mut rest).ok()?;
            let Some(index) = at else {
                at = Some(unzigzag(v));
                continue;
            };
            if v & 1 == 1 {
                at = Some(index + i64::try_from(v >> 1).ok()? + 1);
                continue;
            }
            at = Some(index + 1);
            return Some((i32::try_from(index).ok()?, v >> 1));
        }
    })
}

fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

fn unzigzag(v: u64) -> i64 {
    ((v >> 1) as i64) ^ -((v & 1) as i64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dense_counts_grow_both_ways_and_widen_when_a_count_would_overflow() {
        let mut d: DenseBuckets<u8, u16, u32> = DenseBuckets::default();
        assert!(d.is_empty() && d.iter().next().is_none());
        for i in [5, 3, 9, 5, -2] {
            d.add(i);
        }
        assert_eq!(
            d.iter().collect::<Vec<_>>(),
            [(-2, 1), (3, 1), (5, 2), (9, 1)]
        );
        assert_eq!(d.width(), 1);
        for _ in 0..300 {
            d.add(3);
        }
        assert_eq!(d.width(), 2);
        assert_eq!(
            d.iter().collect::<Vec<_>>(),
            [(-2, 1), (3, 301), (5, 2), (9, 1)]
        );
        for _ in 0..70_000 {
            d.add(3);
        }
        assert_eq!(d.width(), 4);
        // A new lowest bucket in the widest form.
        d.add(-4);
        assert_eq!(
            d.iter().collect::<Vec<_>>(),
            [(-4, 1), (-2, 1), (3, 70_301), (5, 2), (9, 1)]
        );
        // The widest saturates.
        let mut s: DenseBuckets<u8, u8, u8> = DenseBuckets::default();
        for _ in 0..300 {
            s.add(0);
        }
        s.add(1);
        assert_eq!(s.iter().collect::<Vec<_>>(), [(0, 255), (1, 1)]);
        d.clear();
        assert!(d.is_empty());
        d.add(i32::MAX);
        d.add(i32::MAX - 1);
        assert_eq!(
            d.iter().collect::<Vec<_>>(),
            [(i32::MAX - 1, 1), (i32::MAX, 1)]
        );
    }

    #[test]
    fn packed_counts_read_back_as_given() {
        let cases: [Vec<(i32, u64)>; 5] = [
            vec![],
            vec![(0, 1)],
            vec![(-40, 63), (-39, 64), (-1, 70_000), (7, u64::MAX / 2)],
            (100..233).map(|i| (i, 1 + (i as u64 % 5))).collect(),
            vec![(i32::MIN, 1), (i32::MAX, 2)],
        ];
        for counts in cases {
            let mut bytes = Vec::new();
            pack(counts.iter().copied(), &mut bytes);
            assert_eq!(unpack(&bytes).collect::<Vec<_>>(), counts);
        }
        // Dense small counts are a byte each, and the first index one or two.
        let mut bytes = Vec::new();
        pack((100..233).map(|i| (i, 3)), &mut bytes);
        assert_eq!(bytes.len(), 2 + 133);
    }
}

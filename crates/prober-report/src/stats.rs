//! The numbers behind the page: the `describe()` table, exact quantiles,
//! the z-score trim of the box plot and a kernel density estimate.
//!
//! Everything works on [`Values`]: sorted values with a weight each, so a
//! series of probes (weight 1 each) and an hlog histogram (a bucket's value
//! and its count) go through the same code.

use hdrhistogram::Histogram;
use prober_core::stats::{Dist, DistSummary};

use crate::input::{ProbeOutcome, Series};

/// The statistics table's row for one series.
#[derive(Debug, Clone, PartialEq)]
pub struct Describe {
    /// Probes in the series (ok + timeout + error); for an hlog, the
    /// histogram's count (it records replies only).
    pub sent: u64,
    /// Ok probes.
    pub ok: u64,
    /// Timeouts and errors as a percentage of `sent`; `None` for an hlog,
    /// which has no record of lost probes.
    pub loss_pct: Option<f64>,
    /// The RTT distribution of the ok probes, computed exactly as the run's
    /// own summary computes it; `None` without ok probes.
    pub rtt: Option<DistSummary>,
}

/// The table row of `s`.
pub fn describe(s: &Series) -> Describe {
    if let Some(h) = &s.hist {
        return Describe {
            sent: h.len(),
            ok: h.len(),
            loss_pct: None,
            rtt: DistSummary::from_histogram(h),
        };
    }
    // The same Dist, fed in the same (file) order, as the run's summary.
    let mut d = Dist::default();
    let mut ok = 0;
    for p in &s.probes {
        if let (ProbeOutcome::Ok, Some(rtt)) = (p.outcome, p.rtt_ns) {
            d.record_ns(rtt);
            ok += 1;
        }
    }
    let sent = s.probes.len() as u64;
    Describe {
        sent,
        ok,
        loss_pct: (sent > 0).then(|| (sent - ok) as f64 * 100.0 / sent as f64),
        rtt: d.summary(),
    }
}

/// Sorted values, each with a weight (a count).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Values {
    v: Vec<f64>,
    w: Vec<u64>,
    total: u64,
}

impl Values {
    /// From unsorted values of weight 1.
    pub fn from_values(mut v: Vec<f64>) -> Self {
        v.sort_by(f64::total_cmp);
        let total = v.len() as u64;
        Self {
            w: vec![1; v.len()],
            v,
            total,
        }
    }

    /// From a histogram: each bucket's highest-equivalent value, weighted
    /// by its count.
    pub fn from_histogram(h: &Histogram<u64>) -> Self {
        let (mut v, mut w) = (Vec::new(), Vec::new());
        for it in h.iter_recorded() {
            v.push(h.highest_equivalent(it.value_iterated_to()) as f64);
            w.push(it.count_at_value());
        }
        let total = w.iter().sum();
        Self { v, w, total }
    }

    /// The RTTs of `s`'s ok probes, or its histogram.
    pub fn rtt(s: &Series) -> Self {
        match &s.hist {
            Some(h) => Self::from_histogram(h),
            None => Self::from_values(
                s.probes
                    .iter()
                    .filter_map(|p| p.rtt_ns)
                    .map(|n| n as f64)
                    .collect(),
            ),
        }
    }

    /// Total weight.
    pub fn len(&self) -> u64 {
        self.total
    }

    /// Whether there is nothing.
    pub fn is_empty(&self) -> bool {
        self.total == 0
    }

    /// Smallest value.
    pub fn min(&self) -> Option<f64> {
        self.v.first().copied()
    }

    /// Largest value.
    pub fn max(&self) -> Option<f64> {
        self.v.last().copied()
    }

    /// Weighted mean.
    pub fn mean(&self) -> Option<f64> {
        if self.is_empty() {
            return None;
        }
        let s: f64 = self.v.iter().zip(&self.w).map(|(v, w)| v * *w as f64).sum();
        Some(s / self.total as f64)
    }

    /// Weighted population standard deviation.
    pub fn std(&self) -> Option<f64> {
        let m = self.mean()?;
        let s: f64 = self
            .v
            .iter()
            .zip(&self.w)
            .map(|(v, w)| (v - m).powi(2) * *w as f64)
            .sum();
        Some((s / self.total as f64).sqrt())
    }

    /// The value at rank `r` (0-based) of the weighted, expanded list.
    fn at_rank(&self, r: u64) -> f64 {
        let mut acc = 0;
        for (v, w) in self.v.iter().zip(&self.w) {
            acc += w;
            if acc > r {
                return *v;
            }
        }
        self.v.last().copied().unwrap_or(f64::NAN)
    }

    /// The quantile `p` (0..=1) with linear interpolation between the two
    /// nearest ranks, as pandas' and numpy's default.
    pub fn quantile(&self, p: f64) -> Option<f64> {
        if self.is_empty() {
            return None;
        }
        let h = p.clamp(0.0, 1.0) * (self.total - 1) as f64;
        let (lo, hi) = (h.floor() as u64, h.ceil() as u64);
        let (a, b) = (self.at_rank(lo), self.at_rank(hi));
        Some(a + (b - a) * (h - lo as f64))
    }

    /// Many quantiles at once, `ps` ascending, in one pass.
    pub fn quantiles(&self, ps: &[f64]) -> Vec<f64> {
        if self.is_empty() {
            return vec![f64::NAN; ps.len()];
        }
        // Cumulative weights, then a binary search per rank.
        let mut cum = Vec::with_capacity(self.w.len());
        let mut acc = 0;
        for w in &self.w {
            acc += w;
            cum.push(acc);
        }
        let at = |r: u64| {
            let i = cum.partition_point(|&c| c <= r).min(self.v.len() - 1);
            self.v[i]
        };
        ps.iter()
            .map(|p| {
                let h = p.clamp(0.0, 1.0) * (self.total - 1) as f64;
                let (lo, hi) = (h.floor() as u64, h.ceil() as u64);
                let (a, b) = (at(lo), at(hi));
                a + (b - a) * (h - lo as f64)
            })
            .collect()
    }

    /// Keeps the values within `z` standard deviations of the mean.
    fn cut(&self, z: f64) -> Self {
        let (Some(m), Some(sd)) = (self.mean(), self.std()) else {
            return self.clone();
        };
        if sd == 0.0 {
            return self.clone();
        }
        let (mut v, mut w) = (Vec::new(), Vec::new());
        for (x, c) in self.v.iter().zip(&self.w) {
            if ((x - m) / sd).abs() <= z {
                v.push(*x);
                w.push(*c);
            }
        }
        let total = w.iter().sum();
        Self { v, w, total }
    }

    /// The box plot's outlier rule: drop |z| > 3, recompute the mean and
    /// standard deviation on what is left, drop |z| > 3 again. Returns what
    /// is kept and how many values were removed.
    pub fn trim_z(&self) -> (Self, u64) {
        let kept = self.cut(3.0).cut(3.0);
        let removed = self.total - kept.total;
        (kept, removed)
    }

    /// Silverman's rule-of-thumb bandwidth, `0.9 · min(σ, IQR/1.34) ·
    /// n^(−1/5)`, over the values mapped by `f` (identity, or log10 for the
    /// log-scale violin). Falls back to σ when the IQR is 0, and to a tiny
    /// width when every value is the same.
    pub fn silverman(&self, f: impl Fn(f64) -> f64) -> Option<f64> {
        let t = self.map(f);
        let sd = t.std()?;
        let iqr = t.quantile(0.75)? - t.quantile(0.25)?;
        let spread = if iqr > 0.0 { sd.min(iqr / 1.34) } else { sd };
        let h = 0.9 * spread * (t.total as f64).powf(-0.2);
        Some(if h > 0.0 {
            h
        } else {
            t.v[0].abs().max(1.0) * 1e-3
        })
    }

    fn map(&self, f: impl Fn(f64) -> f64) -> Self {
        let mut out = self.clone();
        for v in &mut out.v {
            *v = f(*v);
        }
        out
    }

    /// A Gaussian kernel density estimate over the values mapped by `f`,
    /// with [`Values::silverman`]'s bandwidth, from 3 bandwidths below the
    /// smallest value to 3 above the largest, as `points` (x, density)
    /// pairs in the mapped space, each the mean density over its equal
    /// share of that range.
    ///
    /// Binned KDE, as R's `density()`: values are binned linearly onto a
    /// grid at most a quarter bandwidth wide (1,024 to 65,536 bins), the
    /// kernel (cut at 8 bandwidths) is summed over the bins, and groups of
    /// bins are averaged down to `points`. So a million samples cost a
    /// pass over them plus bins × kernel width, and a narrow mode in a
    /// long range (a long tail on `--log`) is still on the grid.
    pub fn kde(&self, f: impl Fn(f64) -> f64 + Copy, points: usize) -> Vec<(f64, f64)> {
        let Some(h) = self.silverman(f) else {
            return Vec::new();
        };
        let t = self.map(f);
        let (lo, hi) = (t.v[0] - 3.0 * h, t.v[t.v.len() - 1] + 3.0 * h);
        let points = points.max(2);
        let wanted = ((hi - lo) / (h / 4.0)).ceil().clamp(1024.0, 65536.0) as usize;
        let group = wanted.div_ceil(points);
        let nb = group * points;
        let width = (hi - lo) / nb as f64;
        // Bin i covers [lo + i·width, lo + (i+1)·width), centre at +width/2.
        let mut bins = vec![0.0f64; nb];
        for (x, w) in t.v.iter().zip(&t.w) {
            let pos = ((x - lo) / width - 0.5).clamp(0.0, (nb - 1) as f64);
            let i = (pos.floor() as usize).min(nb - 2);
            let frac = pos - i as f64;
            bins[i] += *w as f64 * (1.0 - frac);
            bins[i + 1] += *w as f64 * frac;
        }
        let reach = ((8.0 * h / width).ceil() as usize).min(nb);
        let kernel: Vec<f64> = (0..=reach)
            .map(|m| {
                let u = m as f64 * width / h;
                (-0.5 * u * u).exp()
            })
            .collect();
        let mut density = vec![0.0f64; nb];
        for (i, c) in bins.iter().enumerate().filter(|(_, c)| **c > 0.0) {
            let (from, to) = (i.saturating_sub(reach), (i + reach).min(nb - 1));
            for (j, d) in density.iter_mut().enumerate().take(to + 1).skip(from) {
                *d += c * kernel[i.abs_diff(j)];
            }
        }
        let norm = 1.0 / (t.total as f64 * h * (2.0 * std::f64::consts::PI).sqrt());
        density
            .chunks(group)
            .enumerate()
            .map(|(k, g)| {
                let x = lo + (k as f64 + 0.5) * group as f64 * width;
                (x, g.iter().sum::<f64>() / g.len() as f64 * norm)
            })
            .collect()
    }
}

/// The median with the same interpolation as [`Values::quantile`], by
/// selection instead of a sort (the parts chart needs only medians of
/// millions of values).
pub fn median(mut v: Vec<f64>) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    let h = 0.5 * (v.len() - 1) as f64;
    let lo = h.floor() as usize;
    let (_, a, upper) = v.select_nth_unstable_by(lo, f64::total_cmp);
    let a = *a;
    if h.fract() == 0.0 {
        return Some(a);
    }
    let b = upper.iter().copied().fold(f64::INFINITY, f64::min);
    Some(a + (b - a) * (h - lo as f64))
}

/// A time unit for a chart's axis, chosen so its numbers read well.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Unit {
    /// Nanoseconds per unit.
    pub ns: f64,
    /// Its symbol.
    pub name: &'static str,
}

impl Unit {
    /// The largest unit in which `max_ns` is at least 1.
    pub fn for_max(max_ns: f64) -> Self {
        match max_ns {
            m if m >= 1e9 => Self { ns: 1e9, name: "s" },
            m if m >= 1e6 => Self {
                ns: 1e6,
                name: "ms",
            },
            m if m >= 1e3 => Self {
                ns: 1e3,
                name: "µs",
            },
            _ => Self {
                ns: 1.0,
                name: "ns",
            },
        }
    }
}

/// A duration for a person: `812 ns`, `35.2 µs`, `1.27 ms`, `1.00 s`.
pub fn format_ns(ns: f64) -> String {
    if !ns.is_finite() {
        return "–".to_owned();
    }
    let u = Unit::for_max(ns.abs());
    let v = ns / u.ns;
    if u.ns == 1.0 || v.abs() >= 100.0 {
        format!("{v:.0} {}", u.name)
    } else if v.abs() >= 10.0 {
        format!("{v:.1} {}", u.name)
    } else {
        format!("{v:.2} {}", u.name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Standard normal draws (Box–Muller) from a seeded generator.
    fn normal(rng: &mut fastrand::Rng, n: usize, mean: f64, sd: f64) -> Vec<f64> {
        (0..n)
            .map(|_| {
                let (u1, u2) = (rng.f64().max(1e-300), rng.f64());
                mean + sd * (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()
            })
            .collect()
    }

    fn density_at(kde: &[(f64, f64)], x: f64) -> f64 {
        kde.iter()
            .min_by(|a, b| (a.0 - x).abs().total_cmp(&(b.0 - x).abs()))
            .unwrap()
            .1
    }

    #[test]
    fn quantiles_interpolate_as_pandas() {
        let v = Values::from_values(vec![4.0, 1.0, 3.0, 2.0]);
        // pandas: Series([1,2,3,4]).quantile([0, .25, .5, .9, 1])
        assert_eq!(v.quantile(0.0), Some(1.0));
        assert_eq!(v.quantile(0.25), Some(1.75));
        assert_eq!(v.quantile(0.5), Some(2.5));
        assert!((v.quantile(0.9).unwrap() - 3.7).abs() < 1e-12);
        assert_eq!(v.quantile(1.0), Some(4.0));
        assert_eq!(
            v.quantiles(&[0.25, 0.5, 0.9]),
            vec![1.75, 2.5, v.quantile(0.9).unwrap()]
        );
        assert_eq!(Values::default().quantile(0.5), None);
        assert_eq!(median(vec![4.0, 1.0, 3.0, 2.0]), Some(2.5));
        assert_eq!(median(vec![5.0, 1.0, 3.0]), Some(3.0));
        assert_eq!(median(Vec::new()), None);
    }

    #[test]
    fn weighted_values_equal_the_expanded_list() {
        let mut h = prober_core::stats::histogram();
        h.record_n(100, 3).unwrap();
        h.record_n(200, 1).unwrap();
        let v = Values::from_histogram(&h);
        assert_eq!(v.len(), 4);
        assert_eq!(v.quantile(0.5), Some(100.0));
        assert_eq!(v.quantile(1.0), Some(200.0));
        assert_eq!(v.mean(), Some(125.0));
    }

    #[test]
    fn normal_quantiles_and_density() {
        let mut rng = fastrand::Rng::with_seed(7);
        let v = Values::from_values(normal(&mut rng, 50_000, 100.0, 10.0));
        // N(100, 10): median 100, p97.5 = 100 + 1.96·10.
        assert!((v.quantile(0.5).unwrap() - 100.0).abs() < 0.3);
        assert!((v.quantile(0.975).unwrap() - 119.6).abs() < 0.6);
        let kde = v.kde(|x| x, 400);
        let peak = 1.0 / (10.0 * (2.0 * std::f64::consts::PI).sqrt());
        let at_mean = density_at(&kde, 100.0);
        assert!((at_mean / peak - 1.0).abs() < 0.05, "{at_mean} vs {peak}");
        let at_1sd = density_at(&kde, 110.0);
        assert!(
            (at_1sd / (peak * (-0.5f64).exp()) - 1.0).abs() < 0.06,
            "{at_1sd}"
        );
        // It integrates to 1.
        let step = kde[1].0 - kde[0].0;
        let area: f64 = kde.iter().map(|(_, d)| d * step).sum();
        assert!((area - 1.0).abs() < 0.01, "{area}");
    }

    #[test]
    fn lognormal_in_log_space_is_normal() {
        let mut rng = fastrand::Rng::with_seed(11);
        // ln X ~ N(ln 50_000, 0.5): median 50 µs.
        let v = Values::from_values(
            normal(&mut rng, 40_000, 50_000f64.ln(), 0.5)
                .into_iter()
                .map(f64::exp)
                .collect(),
        );
        assert!((v.quantile(0.5).unwrap() / 50_000.0 - 1.0).abs() < 0.02);
        // Mean of a lognormal: exp(mu + s²/2).
        let mean = 50_000.0 * (0.125f64).exp();
        assert!((v.mean().unwrap() / mean - 1.0).abs() < 0.02);
        // In log10 space the density peaks at log10(median), with
        // sd = 0.5 / ln 10.
        let kde = v.kde(f64::log10, 400);
        let mode = kde.iter().max_by(|a, b| a.1.total_cmp(&b.1)).unwrap().0;
        assert!((mode - 50_000f64.log10()).abs() < 0.02, "{mode}");
        let sd = 0.5 / std::f64::consts::LN_10;
        let peak = 1.0 / (sd * (2.0 * std::f64::consts::PI).sqrt());
        assert!((density_at(&kde, 50_000f64.log10()) / peak - 1.0).abs() < 0.05);
    }

    #[test]
    fn bimodal_has_two_modes_and_a_trough() {
        let mut rng = fastrand::Rng::with_seed(3);
        let mut x = normal(&mut rng, 20_000, 30.0, 2.0);
        x.extend(normal(&mut rng, 20_000, 80.0, 4.0));
        let kde = Values::from_values(x).kde(|x| x, 500);
        let modes: Vec<f64> = kde
            .windows(3)
            .filter(|w| w[1].1 > w[0].1 && w[1].1 > w[2].1 && w[1].1 > 0.005)
            .map(|w| w[1].0)
            .collect();
        assert_eq!(modes.len(), 2, "{modes:?}");
        assert!(
            (modes[0] - 30.0).abs() < 1.0 && (modes[1] - 80.0).abs() < 1.5,
            "{modes:?}"
        );
        assert!(density_at(&kde, 55.0) < 0.001);
    }

    #[test]
    fn a_narrow_mode_in_a_long_range_is_not_lost() {
        // A million-probe shape: 50 ± 0.5 µs and one value at 1 s, in log
        // space (the untrimmed --log violin).
        let mut rng = fastrand::Rng::with_seed(9);
        let mut x = normal(&mut rng, 100_000, 50_000.0, 500.0);
        x.push(1e9);
        let kde = Values::from_values(x).kde(f64::log10, 240);
        let (mode, peak) = kde
            .iter()
            .copied()
            .fold((0.0, 0.0), |a, p| if p.1 > a.1 { p } else { a });
        assert!((mode - 50_000f64.log10()).abs() < 0.05, "{mode}");
        assert!(peak > 1.0, "{peak}");
        let step = kde[1].0 - kde[0].0;
        let area: f64 = kde.iter().map(|(_, d)| d * step).sum();
        assert!((area - 1.0).abs() < 0.01, "{area}");
    }

    #[test]
    fn silverman_matches_the_formula() {
        let v = Values::from_values((1..=100).map(f64::from).collect());
        let sd = v.std().unwrap();
        let iqr = v.quantile(0.75).unwrap() - v.quantile(0.25).unwrap();
        let want = 0.9 * sd.min(iqr / 1.34) * 100f64.powf(-0.2);
        assert!((v.silverman(|x| x).unwrap() - want).abs() < 1e-12);
        // Identical values still get a usable width.
        let same = Values::from_values(vec![5.0; 10]);
        assert!(same.silverman(|x| x).unwrap() > 0.0);
        assert!(!same.kde(|x| x, 50).is_empty());
    }

    #[test]
    fn z_trim_takes_two_passes() {
        let mut rng = fastrand::Rng::with_seed(5);
        let mut x = normal(&mut rng, 10_000, 100.0, 5.0);
        x.extend([10_000.0, 9_000.0, 300.0]);
        let v = Values::from_values(x);
        let (kept, removed) = v.trim_z();
        // The first pass removes the two huge values, the second the 300
        // (40 σ from the recomputed mean), plus the normal tail beyond 3 σ.
        assert!(kept.max().unwrap() < 130.0, "{:?}", kept.max());
        assert!((3..60).contains(&removed), "{removed}");
        assert_eq!(kept.len() + removed, v.len());
    }

    #[test]
    fn describe_matches_the_runs_summary_code() {
        use crate::input::{Probe, ProbeOutcome};
        let probe = |rtt: Option<u64>, outcome| Probe::new(0, rtt, outcome, [None; 6]);
        let s = Series {
            probes: vec![
                probe(Some(1000), ProbeOutcome::Ok),
                probe(None, ProbeOutcome::Timeout),
                probe(Some(3000), ProbeOutcome::Ok),
                probe(None, ProbeOutcome::Error),
            ],
            ..Series::default()
        };
        let d = describe(&s);
        assert_eq!((d.sent, d.ok, d.loss_pct), (4, 2, Some(50.0)));
        let rtt = d.rtt.unwrap();
        assert_eq!((rtt.min, rtt.max, rtt.mean), (1000, 3000, 2000.0));
        let none = describe(&Series {
            probes: vec![probe(None, ProbeOutcome::Timeout)],
            ..Series::default()
        });
        assert_eq!((none.ok, none.loss_pct, none.rtt), (0, Some(100.0), None));
    }

    #[test]
    fn units_read_well() {
        assert_eq!(format_ns(812.0), "812 ns");
        assert_eq!(format_ns(35_240.0), "35.2 µs");
        assert_eq!(format_ns(1_270_000.0), "1.27 ms");
        assert_eq!(format_ns(1e9), "1.00 s");
    }
}

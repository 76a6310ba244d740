//! The stopping rule of the Multipath Detection Algorithm (Veitch,
//! Augustin, Friedman and Teixeira, "Failure control in multipath route
//! tracing", INFOCOM 2009; Paris traceroute's MDA).
//!
//! A hop where `k` next hops were seen is taken to have no other once
//! `n_k` flows have been sent through it: `n_k` is the fewest flows for
//! which, were there `k + 1` next hops each taking an equal share of the
//! flows, the chance that one of them got none is at most `1 - confidence`.

/// The chance that `n` flows, each going to one of `branches` equally
/// likely next hops, leave at least one of them unseen (inclusion and
/// exclusion over the hops missed).
pub fn miss_probability(branches: u32, n: u32) -> f64 {
    let k = f64::from(branches);
    let mut p = 0.0;
    let mut choose = 1.0;
    for j in 1..=branches {
        choose *= f64::from(branches - j + 1) / f64::from(j);
        let term = choose * (1.0 - f64::from(j) / k).powi(i32::try_from(n).unwrap_or(i32::MAX));
        if j % 2 == 1 {
            p += term;
        } else {
            p -= term;
        }
    }
    p.max(0.0)
}

/// `n_k`: the flows to send through a hop where `seen` next hops were
/// found before taking it that there is no other, at `confidence` (0.95:
/// 6, 11, 16, 21, 27, ... as the MDA's table gives).
pub fn flows_needed(seen: u32, confidence: f64) -> u32 {
    let seen = seen.max(1);
    let alpha = 1.0 - confidence;
    let mut n = seen;
    while miss_probability(seen + 1, n) > alpha {
        n += 1;
    }
    n
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The MDA paper's table of n_k at 95 %.
    #[test]
    fn the_stopping_points_are_the_mdas() {
        let n: Vec<u32> = (1..=10).map(|k| flows_needed(k, 0.95)).collect();
        assert_eq!(n, [6, 11, 16, 21, 27, 33, 38, 44, 51, 57]);
        assert_eq!(flows_needed(0, 0.95), 6);
        // Surer takes more.
        assert!(flows_needed(1, 0.99) > 6);
        assert!((miss_probability(2, 1) - 1.0).abs() < 1e-12);
        assert!((miss_probability(2, 2) - 0.5).abs() < 1e-12);
    }
}

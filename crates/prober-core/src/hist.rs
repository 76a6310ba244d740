//! The one shape of every HdrHistogram of times: bounds and precision.

use hdrhistogram::Histogram;

/// Highest value the histograms track (100 s in ns); larger values saturate.
pub const MAX_TRACKABLE_NS: u64 = 100_000_000_000;

/// Significant decimal digits kept by every histogram.
pub const SIGNIFICANT_DIGITS: u8 = 3;

/// A new empty histogram with prober's bounds and precision; every
/// histogram of RTTs (statistics, interval logs) is made here.
pub fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, MAX_TRACKABLE_NS, SIGNIFICANT_DIGITS)
        .expect("static histogram bounds are valid")
}

//! What this machine allows a pacer, without prober: how often a spinning
//! thread is taken off its CPU, and how late a plain sleep wakes.
//!
//! `benches/peers/run.sh` runs it beside the pacing rows, so the pacing
//! targets can be read against the platform's own floor from the same run:
//! a send-lag p99 cannot beat the gaps a bare spin loop sees, and a hybrid
//! pacer's spin margin has to cover the sleep's lateness.
//!
//! ```sh
//! cargo run --release -p prober-benches --bin floor -- [SECONDS] [COUNT]
//! ```
//!
//! Prints one JSON object (times in nanoseconds). SECONDS (default 2) is how
//! long the spin loop runs; COUNT (default 200) is how many 10 ms sleeps each
//! sleep row takes. Nothing here touches the network.

use std::time::{Duration, Instant};

/// Gaps between two consecutive clock reads longer than this count as the
/// thread having been off its CPU (a read itself takes well under 1 µs).
const GAP: Duration = Duration::from_micros(2);
/// The pacing interval the sleep rows use, as the harness's pacing rows do.
const INTERVAL: Duration = Duration::from_millis(10);

fn main() {
    let mut args = std::env::args().skip(1);
    let secs = parse_arg(args.next(), 2.0, "SECONDS");
    let count = parse_arg(args.next(), 200.0, "COUNT") as usize;
    if !(0.1..=60.0).contains(&secs) || !(10..=10_000).contains(&count) {
        eprintln!("floor: SECONDS must be 0.1..60 and COUNT 10..10000");
        std::process::exit(2);
    }

    let spin = spin_gaps(Duration::from_secs_f64(secs));
    let sleep = paced(count, Duration::ZERO);
    let hybrid80 = paced(count, Duration::from_micros(80));
    let hybrid500 = paced(count, Duration::from_micros(500));
    println!(
        "{{\"spin\":{spin},\"sleep\":{sleep},\"sleep_spin_80us\":{hybrid80},\"sleep_spin_500us\":{hybrid500}}}"
    );
}

fn parse_arg(arg: Option<String>, default: f64, name: &str) -> f64 {
    match arg.map(|a| a.parse::<f64>()) {
        None => default,
        Some(Ok(v)) => v,
        Some(Err(_)) => {
            eprintln!("floor: {name} must be a number");
            std::process::exit(2);
        }
    }
}

/// Spins on the clock for `length`, recording every gap between two reads
/// longer than [`GAP`].
fn spin_gaps(length: Duration) -> String {
    let start = Instant::now();
    let mut prev = start;
    let mut gaps: Vec<u64> = Vec::with_capacity(1 << 16);
    loop {
        let now = Instant::now();
        let gap = now - prev;
        if gap > GAP {
            gaps.push(gap.as_nanos() as u64);
        }
        prev = now;
        if now - start >= length {
            break;
        }
        std::hint::spin_loop();
    }
    let wall = (prev - start).as_nanos() as u64;
    let lost: u64 = gaps.iter().sum();
    gaps.sort_unstable();
    format!(
        "{{\"wall_ns\":{wall},\"gaps\":{},\"gaps_per_s\":{:.1},\"lost_fraction\":{:.5},\"gap_p50\":{},\"gap_p99\":{},\"gap_max\":{}}}",
        gaps.len(),
        gaps.len() as f64 / (wall as f64 / 1e9),
        lost as f64 / wall as f64,
        pct(&gaps, 50.0),
        pct(&gaps, 99.0),
        gaps.last().copied().unwrap_or(0),
    )
}

/// `count` deadlines [`INTERVAL`] apart: sleep until `margin` before each,
/// then spin to it. Records how late the sleep woke (against its own target,
/// deadline - margin) and how late the deadline was met in the end, which is
/// the send lag a perfect pacer of this kind would have.
fn paced(count: usize, margin: Duration) -> String {
    let t0 = Instant::now() + INTERVAL;
    let mut wake = Vec::with_capacity(count);
    let mut late = Vec::with_capacity(count);
    for k in 0..count {
        let deadline = t0 + INTERVAL * k as u32;
        let target = deadline - margin;
        let now = Instant::now();
        if target > now {
            std::thread::sleep(target - now);
        }
        let woke = Instant::now();
        wake.push(woke.saturating_duration_since(target).as_nanos() as u64);
        let mut now = woke;
        while now < deadline {
            std::hint::spin_loop();
            now = Instant::now();
        }
        late.push((now - deadline).as_nanos() as u64);
    }
    wake.sort_unstable();
    late.sort_unstable();
    format!(
        "{{\"margin_ns\":{},\"count\":{count},\"wake_late_p50\":{},\"wake_late_p99\":{},\"late_p50\":{},\"late_p99\":{},\"late_max\":{}}}",
        margin.as_nanos(),
        pct(&wake, 50.0),
        pct(&wake, 99.0),
        pct(&late, 50.0),
        pct(&late, 99.0),
        late.last().copied().unwrap_or(0),
    )
}

/// Nearest-rank percentile of an ascending slice (0 when empty).
fn pct(sorted: &[u64], p: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let k = ((p / 100.0 * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[k - 1]
}

#[cfg(test)]
mod tests {
    use super::pct;

    #[test]
    fn nearest_rank() {
        let v: Vec<u64> = (1..=100).collect();
        assert_eq!(pct(&v, 50.0), 50);
        assert_eq!(pct(&v, 99.0), 99);
        assert_eq!(pct(&v, 100.0), 100);
        assert_eq!(pct(&[7], 1.0), 7);
        assert_eq!(pct(&[], 50.0), 0);
    }
}

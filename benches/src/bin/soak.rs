//! The daemon's per-target memory once every histogram has seen the spread
//! of values a long run brings, without waiting hours for it
//! (`benches/scale/soak.sh` runs it; figures in BENCHMARKS.md).
//!
//! It feeds the daemon's own result path (core's collector, counts only,
//! into the Prometheus sink that `/metrics` and the status page read)
//! with synthetic samples for `N` targets: RTTs log-uniform from 10 µs to
//! the timeout, send lags log-uniform from 1 µs to 10 ms, 1 % lost, the
//! parts of the split each log-uniform within a share of the RTT, over an
//! hour of sample time so that every slot of the status page's windows
//! fills. It prints the resident memory before the targets, after adding
//! them and after the soak, and the bytes per target. No sockets.
//!
//! ```text
//! cargo run --release -p prober-benches --bin soak -- [N] [PROBES] [default|everything]
//! RTT_US=50-5000 cargo run ...   # RTTs within two decades instead
//! ```

use std::sync::Arc;
use std::time::Duration;

use prober_core::{
    Anomalies, Clock, Collector, Event, Outcome, Reply, RunConfig, RunMeta, Sample, TargetInfo,
};
use prober_sinks::prometheus::{Buckets, Families, PrometheusSink};
use tokio::time::Instant;

/// Resident memory now, from `/proc/self/status` (KiB).
fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

/// xorshift64*: reproducible draws without a dependency.
struct Rng(u64);

impl Rng {
    fn unit(&mut self) -> f64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Log-uniform in `lo..hi` ns.
    fn log_uniform(&mut self, lo: f64, hi: f64) -> u64 {
        (lo * (hi / lo).powf(self.unit())) as u64
    }
}

fn main() {
    let mut args = std::env::args().skip(1);
    let n: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(10_000);
    let probes: u64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(600);
    let everything = args.next().as_deref() == Some("everything");
    // RTT_US=LO-HI narrows the RTTs (a path that stays within two decades).
    let rtt_us = std::env::var("RTT_US").ok().and_then(|r| {
        let (lo, hi) = r.split_once('-')?;
        Some((lo.parse::<f64>().ok()?, hi.parse::<f64>().ok()?))
    });
    soak(n, probes, everything, rtt_us);
}

fn soak(n: usize, probes: u64, everything: bool, rtt_us: Option<(f64, f64)>) {
    let families = if everything {
        Families::everything()
    } else {
        Families::default()
    };
    let buckets = Buckets {
        families,
        ..Buckets::default()
    };
    let sink = PrometheusSink::new().with_buckets(buckets);
    let reader = sink.clone();
    let timeout = Duration::from_secs(1);
    let meta = RunMeta::new("soak", &RunConfig::default());
    let mut c = Collector::new(meta, Clock::now(), sink, true);
    c.start().expect("the sink starts");
    let before = rss_kib();
    for id in 0..n {
        let url = format!("icmp://127.1.{}.{}", id / 250, id % 250 + 1);
        let mut info = TargetInfo::new(id, &url, "icmp", &url[7..], Some(56));
        info.job = Some("soak".to_owned());
        c.add_target(info, Arc::new(Anomalies::default))
            .expect("a target");
    }
    let added = rss_kib();
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    // An hour of sample time: every slot of the hour's window gets its share.
    let step = Duration::from_secs(3600) / u32::try_from(probes).unwrap_or(u32::MAX);
    let origin = Instant::now();
    for seq in 0..probes {
        let at = origin + step * u32::try_from(seq).unwrap_or(u32::MAX);
        for target in 0..n {
            let lag = Duration::from_nanos(rng.log_uniform(1e3, 1e7));
            let sent = at + lag;
            let outcome = if rng.unit() < 0.01 {
                Outcome::Timeout
            } else {
                let (lo, hi) = rtt_us.map_or((1e4, timeout.as_nanos() as f64), |(lo, hi)| {
                    (lo * 1e3, hi * 1e3)
                });
                let rtt = rng.log_uniform(lo, hi);
                let mut reply = Reply::plain(sent, sent + Duration::from_nanos(rtt), 64);
                // Kernel stamps at both ends and a responder's times, each
                // part log-uniform within its share of the RTT.
                let mut part = |share: f64| rng.log_uniform(1e2, (rtt as f64 * share).max(2e2));
                let t1 = 1_000_000_000_000;
                let (send, wake) = (part(0.25), part(0.25));
                let responder = prober_core::sample::ResponderTimes {
                    wake: Some(part(0.1)),
                    dwell: Some(part(0.1)),
                    send: Some(part(0.1)),
                    ..Default::default()
                };
                reply.stamps = prober_core::sample::Stamps {
                    t1: Some(t1),
                    t1k: Some(t1 + send),
                    t4k: Some(t1 + rtt - wake),
                    t4: Some(t1 + rtt),
                    responder: Some(responder),
                    ..Default::default()
                };
                Outcome::Ok(reply)
            };
            let sample = Sample {
                target,
                seq,
                scheduled: at,
                sent,
                outcome,
                bytes: 64,
            };
            c.event(Event::Sample(sample)).expect("recorded");
        }
    }
    // A scrape and a status page, as the daemon serves them.
    // Streamed and dropped piece by piece, as `/metrics` does.
    let scraped = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = Arc::clone(&scraped);
    let rest = reader.encode_streaming(
        prober_sinks::prometheus::Format::Text,
        256 * 1024,
        Box::new(move |piece: Vec<u8>| {
            counted.fetch_add(piece.len(), std::sync::atomic::Ordering::Relaxed);
        }),
    );
    let scraped = scraped.load(std::sync::atomic::Ordering::Relaxed) + rest.len();
    let page = reader.status_index().len();
    let after = rss_kib();
    let per = |kib: u64| kib as f64 * 1024.0 / n as f64;
    println!(
        "families           {}",
        if everything { "everything" } else { "default" }
    );
    println!("targets            {n}, {probes} probes each over an hour of sample time");
    let (lo, hi) = rtt_us.unwrap_or((10.0, timeout.as_secs_f64() * 1e6));
    println!("rtts               log-uniform {lo} µs to {hi} µs");
    println!(
        "rss                {before} KiB before, {added} after adding, {after} after the soak"
    );
    println!(
        "bytes per target   {:.0} added, {:.0} after the soak",
        per(added.saturating_sub(before)),
        per(after.saturating_sub(before))
    );
    println!("last text scrape   {scraped} bytes; status index {page} rows");
}

//! `prober sweep`: every target at every interval, one point at a time, in
//! a shuffled order each round; the latency-vs-interval curve.

use std::collections::BTreeMap;
use std::io::{IsTerminal as _, Write as _};
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context as _, anyhow, bail};
use prober_core::stats::Dist;
use prober_core::{
    Clock, Collector, Context, EVENT_CHANNEL, Fanout, Launch, RunConfig, RunMeta, Sample, Sink,
    TargetEntry, collect, parse_target,
};
use prober_net::{Family, resolve};
use prober_sinks::{JsonSink, SweepTag};
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

#[cfg(test)]
use crate::cli::intervals;
use crate::cli::{Output, SweepArgs};
use crate::cmd::probe_flags::ProbeFlags;
use crate::protocols::PROTOCOLS;
use crate::signal::cancel_on_signals;

/// Probes per point when neither --count nor --duration is given.
const DEFAULT_COUNT: u64 = 100;

/// One point: a target at an interval.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Point {
    round: u32,
    interval: Duration,
    target: usize,
}

/// The run order: every (interval, target) once per round, shuffled anew
/// each round.
fn plan(intervals: &[Duration], targets: usize, rounds: u32, seed: u64) -> Vec<Point> {
    let mut rng = fastrand::Rng::with_seed(seed);
    let mut order = Vec::new();
    for round in 0..rounds {
        let mut points: Vec<Point> = intervals
            .iter()
            .flat_map(|&interval| {
                (0..targets).map(move |target| Point {
                    round,
                    interval,
                    target,
                })
            })
            .collect();
        rng.shuffle(&mut points);
        order.extend(points);
    }
    order
}

/// What one (target, interval) gathered over every round.
#[derive(Debug, Default)]
struct Cell {
    sent: u64,
    ok: u64,
    rtt: Dist,
}

/// Records every sample of a point into its cell.
struct CellSink(Arc<Mutex<Cell>>);

impl std::fmt::Debug for CellSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CellSink")
    }
}

impl Sink for CellSink {
    fn record(&mut self, _cx: &Context<'_>, _t: &TargetEntry, s: &Sample) -> std::io::Result<()> {
        let mut c = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        c.sent += 1;
        if let Some(rtt) = s.rtt() {
            c.ok += 1;
            c.rtt.record(rtt);
        }
        Ok(())
    }
}

fn fmt_d(d: Duration) -> String {
    prober_report::stats::format_ns(d.as_nanos() as f64)
}

/// Runs `prober sweep`; `cpu_latency`: the PM QoS request `main` holds, for
/// the settings.
pub(crate) async fn sweep(
    args: SweepArgs,
    cpu_latency: Option<Duration>,
) -> anyhow::Result<ExitCode> {
    let receive = args.receive.run_receive(true)?;
    let intervals = &args.intervals.0;
    let targets = args
        .targets
        .iter()
        .map(|t| parse_target(&PROTOCOLS, t))
        .collect::<Result<Vec<_>, _>>()?;
    for t in &targets {
        if let Some(size) = t.size(args.size) {
            t.check_size(size)?;
        }
    }
    // The same flags, checks and build environment as `prober run`'s.
    let flags = ProbeFlags {
        ttl: args.ttl,
        marks: &args.marks,
        tls: &args.tls,
        own: &args.own,
        size: args.size,
        no_tx_stamps: args.no_tx_stamps,
    };
    flags.check(&targets)?;
    let count = match args.duration {
        Some(_) => None,
        None => Some(args.count.unwrap_or(DEFAULT_COUNT)),
    };
    // Refuse a point that would run too long before anything runs: its
    // schedule (count × interval, or the duration) plus the wait for the
    // last reply (the timeout). Warm-up probes go back to back before the
    // schedule and take an RTT each against a live target (up to a timeout
    // each against a dead one, which the estimate does not count).
    let warmup = args.warmup;
    let schedule = |iv: Duration| match (count, args.duration) {
        (_, Some(d)) => d,
        (Some(n), None) => iv.saturating_mul(u32::try_from(n).unwrap_or(u32::MAX)),
        (None, None) => Duration::ZERO,
    };
    let point_time = |iv: Duration| schedule(iv).saturating_add(args.timeout);
    // What a point takes against a live target: its schedule and about 50 ms
    // to set up, warm up and drain.
    let estimate = |iv: Duration| schedule(iv) + Duration::from_millis(50);
    if let Some(&worst) = intervals
        .iter()
        .find(|&&iv| point_time(iv) > args.max_point_time)
    {
        let fix = match count {
            Some(_) => {
                let fits = args.max_point_time.saturating_sub(args.timeout).as_nanos()
                    / worst.as_nanos().max(1);
                format!(
                    "use --count {} or fewer, drop {} from --intervals, or raise --max-point-time to {}",
                    fits.max(1),
                    fmt_d(worst),
                    humantime::format_duration(point_time(worst))
                )
            }
            None => "use a shorter --duration or raise --max-point-time".to_owned(),
        };
        bail!(
            "a point at {} takes {} ({} then up to --timeout {} for the last reply), more than --max-point-time {}: {fix}",
            fmt_d(worst),
            humantime::format_duration(point_time(worst)),
            count.map_or_else(|| "--duration".to_owned(), |n| format!("{n} probes")),
            humantime::format_duration(args.timeout),
            humantime::format_duration(args.max_point_time),
        );
    }
    // One point's run: `run`'s settings at interval `iv`.
    let config = |interval: Duration| RunConfig {
        interval,
        count,
        duration: args.duration,
        burst: 1,
        pacing: args.pacing.into(),
        timeout: args.timeout,
        warmup,
        max_in_flight: 4096,
        precise_timer: true,
    };
    for &iv in intervals {
        config(iv).validate()?;
    }
    let family = match (args.ipv4, args.ipv6) {
        (true, _) => Family::V4,
        (_, true) => Family::V6,
        _ => Family::Any,
    };
    let mut addrs = Vec::with_capacity(targets.len());
    for t in &targets {
        addrs.push(resolve(t, family).await?);
    }
    let busy_poll = super::run::busy_poll_for(args.busy_poll, args.pacing.into());
    let env = flags.env(busy_poll, receive);
    flags.seed(&targets, &env)?;
    let seed = args.seed.unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64)
    });
    let order = plan(intervals, targets.len(), args.rounds, seed);
    // Each point's own time plus about 50 ms to set it up and drain it.
    let total: Duration = order.iter().map(|p| estimate(p.interval)).sum();
    eprintln!(
        "prober: sweep of {} target(s) × {} interval(s) × {} round(s) = {} points, about {} (seed {seed})",
        targets.len(),
        intervals.len(),
        args.rounds,
        order.len(),
        humantime::format_duration(Duration::from_secs(total.as_secs().max(1)))
    );
    let json = args.output == Output::Json;
    if json {
        let line = serde_json::json!({
            "type": "sweep",
            "seed": seed,
            "rounds": args.rounds,
            "count": count,
            "duration_ns": args.duration.map(|d| d.as_nanos() as u64),
            "intervals_ns": intervals.iter().map(|d| d.as_nanos() as u64).collect::<Vec<_>>(),
            "targets": targets.iter().map(ToString::to_string).collect::<Vec<_>>(),
            "order": order.iter().map(|p| (p.round, p.interval.as_nanos() as u64, targets[p.target].to_string())).collect::<Vec<_>>(),
        });
        let mut out = std::io::stdout().lock();
        writeln!(out, "{line}").context("writing results")?;
    }
    let bar = indicatif::ProgressBar::with_draw_target(
        // Weighted by each point's estimated time, so the bar and its ETA
        // move with the clock, not with the count of points (a 1 s point is
        // 1,000 times a 1 ms one).
        Some(total.as_millis() as u64),
        if std::io::stderr().is_terminal() {
            indicatif::ProgressDrawTarget::stderr()
        } else {
            indicatif::ProgressDrawTarget::hidden()
        },
    );
    bar.enable_steady_tick(Duration::from_millis(250));
    bar.set_style(
        indicatif::ProgressStyle::with_template("{bar:30} {elapsed}, about {eta} left · {msg}")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );

    let stop = CancellationToken::new();
    cancel_on_signals(stop.clone(), None);
    let (host, kernel) = prober_sys::host();
    let mut cells: BTreeMap<(usize, Duration), Arc<Mutex<Cell>>> = BTreeMap::new();
    let mut done = 0usize;
    for (k, p) in order.iter().enumerate() {
        if stop.is_cancelled() {
            break;
        }
        let t = &targets[p.target];
        bar.set_message(format!(
            "point {}/{} · round {} · {t} @ {}",
            k + 1,
            order.len(),
            p.round + 1,
            fmt_d(p.interval)
        ));
        let cfg = config(p.interval);
        let size = t.size(args.size);
        let probe = (t.protocol.build)(t.spec(addrs[p.target], size, cfg.timeout), &env)
            .await
            .map_err(|e| anyhow!("target {t}: {e}"))?;
        let cell = cells.entry((p.target, p.interval)).or_default().clone();
        let mut sinks: Vec<Box<dyn Sink>> = vec![Box::new(CellSink(cell))];
        if json {
            let tag = SweepTag {
                round: p.round,
                point: u32::try_from(k).unwrap_or(u32::MAX),
                interval_ns: p.interval.as_nanos() as u64,
            };
            sinks.push(Box::new(
                JsonSink::new(prober_sinks::RawStdout::boxed(), false).with_sweep(tag),
            ));
        }
        let mut meta = RunMeta::new(env!("CARGO_PKG_VERSION"), &cfg)
            .on_host(&host, &kernel)
            .with_tx_stamps(!args.no_tx_stamps)
            .with_cpu_latency(cpu_latency);
        meta.size = args.size;
        super::run::receive_name(busy_poll, &env.receive).clone_into(&mut meta.receive);
        let mut collector =
            Collector::new(meta, Clock::now(), Fanout::skipping_failed(sinks), false);
        let (events, rx) = mpsc::channel(EVENT_CHANNEL);
        let mut runs = JoinSet::new();
        let launch = Launch {
            id: 0,
            cfg: cfg.clone(),
            phase: Duration::ZERO,
            events,
            stop: stop.clone(),
            turnstile: None,
            abandon: None,
            timer: None,
        };
        let reader = probe.launch(&mut runs, launch);
        collector.add_target(t.info(0, addrs[p.target], size), reader)?;
        let (_summaries, written) = collect(rx, &mut collector, None).await;
        while runs.join_next().await.is_some() {}
        written.context("writing results")?;
        if let Some(e) = collector.sink_mut().take_error() {
            return Err(anyhow!(e).context("writing results"));
        }
        if !stop.is_cancelled() {
            done += 1;
        }
        bar.inc(estimate(p.interval).as_millis() as u64);
    }
    bar.finish_and_clear();
    let _ = std::io::stdout().flush();

    // The table: by target, then interval; every round merged.
    let mut failed = false;
    let mut table = String::new();
    let width = targets
        .iter()
        .map(|t| t.to_string().len())
        .max()
        .unwrap_or(6)
        .max(6);
    table.push_str(&format!(
        "{:<width$}  {:>9}  {:>7}  {:>9}  {:>9}  {:>9}  {:>7}\n",
        "target", "interval", "count", "p50", "p99", "mean", "loss"
    ));
    for ((ti, iv), cell) in &cells {
        let c = cell
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let s = c.rtt.summary();
        if c.ok == 0 {
            failed = true;
        }
        let cellf =
            |v: Option<f64>| v.map_or_else(|| "–".to_owned(), prober_report::stats::format_ns);
        let loss = if c.sent == 0 {
            "–".to_owned()
        } else {
            format!("{:.1}%", (c.sent - c.ok) as f64 * 100.0 / c.sent as f64)
        };
        table.push_str(&format!(
            "{:<width$}  {:>9}  {:>7}  {:>9}  {:>9}  {:>9}  {:>7}\n",
            targets[*ti].to_string(),
            fmt_d(*iv),
            c.ok,
            cellf(s.map(|s| s.p50 as f64)),
            cellf(s.map(|s| s.p99 as f64)),
            cellf(s.map(|s| s.mean)),
            loss
        ));
    }
    if json {
        eprint!("{table}");
    } else {
        print!("{table}");
    }
    if stop.is_cancelled() {
        eprintln!("prober: stopped after {done} of {} points", order.len());
        return Ok(ExitCode::from(130));
    }
    Ok(if failed {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn intervals_parse_as_lists_and_decades() {
        let us = Duration::from_micros;
        assert_eq!(
            intervals("1us,10us,1ms").unwrap().0,
            vec![us(1), us(10), us(1000)]
        );
        assert_eq!(
            intervals("1us..1s").unwrap().0,
            (0..7).map(|k| us(10u64.pow(k))).collect::<Vec<_>>()
        );
        assert_eq!(intervals("10ms..10ms").unwrap().0, vec![us(10_000)]);
    }

    #[test]
    fn bad_intervals_say_what_is_wrong() {
        assert!(intervals("1ms,1us").unwrap_err().contains("ascending"));
        assert!(intervals("1ms,1ms").unwrap_err().contains("twice"));
        assert!(intervals("0,1ms").unwrap_err().contains("closed loop"));
        assert!(
            intervals("0..1s")
                .unwrap_err()
                .contains("cannot start at 0")
        );
        assert!(intervals("1us..5us").unwrap_err().contains("decades"));
        assert!(intervals("1s..1us").unwrap_err().contains("ends before"));
        assert!(intervals("fast").is_err());
    }

    #[test]
    fn every_round_runs_every_point_once_in_its_own_order() {
        let ivs: Vec<Duration> = (1..=5).map(Duration::from_millis).collect();
        let order = plan(&ivs, 3, 4, 42);
        assert_eq!(order.len(), 5 * 3 * 4);
        let mut orders = Vec::new();
        for r in 0..4 {
            let mut round: Vec<(Duration, usize)> = order
                .iter()
                .filter(|p| p.round == r)
                .map(|p| (p.interval, p.target))
                .collect();
            orders.push(round.clone());
            round.sort();
            round.dedup();
            assert_eq!(round.len(), 15);
        }
        // Shuffled: rounds do not all share one order.
        assert!(orders.windows(2).any(|w| w[0] != w[1]));
        // And reproducible from the seed.
        assert_eq!(plan(&ivs, 3, 4, 42), order);
    }
}

//! prober's numbers through the impairment relay (relay.rs): each test
//! knows from the relay's counts exactly what prober must report.

use crate::relay::{Counts, Impair, Relay};
use crate::support::{Server, of_type, run_json};

/// One `udp://` run through `relay`; its summary. Transmit stamps are off,
/// so the responder sends no follow-up frames and every datagram the relay
/// sees from it is a reply.
fn through(relay: &Relay, args: &[&str]) -> serde_json::Value {
    through_with_probes(relay, args).0
}

/// [`through`], and the probe lines (`-q` is left out for them).
fn through_with_probes(
    relay: &Relay,
    args: &[&str],
) -> (serde_json::Value, Vec<serde_json::Value>) {
    let target = format!("udp://{}", relay.addr);
    let mut all = vec!["run", "-o", "json", "--no-tx-stamps"];
    all.extend_from_slice(args);
    all.push(&target);
    let (code, lines, err) = run_json(&all);
    assert!(matches!(code, Some(0 | 1)), "{err}");
    let probes = of_type(&lines, "probe").into_iter().cloned().collect();
    (of_type(&lines, "summary")[0].clone(), probes)
}

fn n(v: &serde_json::Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a count: {v}"))
}

#[test]
fn an_injected_delay_moves_the_median_by_that_delay() {
    let _machine = crate::support::times_things();
    let server = Server::start(&[]);
    let args = ["-c", "200", "-i", "5ms", "-W", "1s"];
    let d = std::time::Duration::from_millis(10);
    median_moves_by(d, "udp", |delay| {
        let relay = Relay::start(
            &server.udp,
            Impair {
                delay,
                ..Impair::default()
            },
        );
        // The RTT to the reply's kernel receive stamp: the client's own
        // wake-up (the `client_wake` part) is left out. Without the delay
        // the client is still spinning for the reply; 10 ms later it has
        // gone to sleep, and a slow VM's sleeping vCPU wakes 200 µs late
        // and more: that is the sender's runtime, not the path, and the
        // split says so.
        let (_, probes) = through_with_probes(&relay, &args);
        let mut to_stamp: Vec<f64> = (probes.iter())
            .filter_map(|p| Some(p["rtt_ns"].as_f64()? - p["parts"]["client_wake_ns"].as_f64()?))
            .collect();
        assert!(
            to_stamp.len() >= 150,
            "{} of 200 probes with their receive stamp",
            to_stamp.len()
        );
        to_stamp.sort_by(f64::total_cmp);
        let p50 = quantile(&to_stamp, 0.5);
        // What the relay held the replies for: the delay, plus its own
        // lateness in waking for each, which is on the path prober
        // measures.
        let mut held: Vec<f64> = (relay.counts.held.lock().unwrap().iter())
            .map(|(_, d)| d.as_nanos() as f64)
            .collect();
        held.sort_by(f64::total_cmp);
        (p50, Some(quantile(&held, 0.5)))
    });
}

/// Runs `median(delay)` without and with delay `d`, alternating, three
/// rounds each (the relay's own cost is in both), and asserts that the
/// median of the three shifts is d ± 2% or ± 20 µs, whichever is larger.
/// Where the relay says how long it held the replies (the median hold,
/// second of the pair), the shift is compared with how much that moved
/// instead, which must itself be at least d: the relay's lateness in
/// sending is on the path too, and is not prober's error.
fn median_moves_by(
    d: std::time::Duration,
    what: &str,
    median: impl Fn(std::time::Duration) -> (f64, Option<f64>),
) {
    let want = d.as_nanos() as f64;
    let mut diffs: Vec<(f64, f64)> = (0..3)
        .map(|_| {
            let (base, base_held) = median(std::time::Duration::ZERO);
            let (with, with_held) = median(d);
            let added = match (base_held, with_held) {
                (Some(b), Some(w)) => {
                    assert!(
                        w - b >= want * 0.98,
                        "{what}: the relay held replies {} ns longer, not {want}",
                        w - b
                    );
                    w - b
                }
                _ => want,
            };
            (with - base, added)
        })
        .collect();
    diffs.sort_by(|a, b| (a.0 - a.1).total_cmp(&(b.0 - b.1)));
    let (moved, added) = diffs[1];
    eprintln!(
        "{what}: median moved by {diffs:?} ns (measured, added on the path) for a {d:?} delay"
    );
    assert!(
        (moved - added).abs() <= (0.02 * want).max(20_000.0),
        "{what}: median moved by {moved} ns, not the {added} the path added"
    );
}

#[test]
fn every_impaired_reply_is_accounted_for() {
    let server = Server::start(&[]);
    let relay = Relay::start(
        &server.udp,
        Impair {
            drop_every: Some(11),
            duplicate_every: Some(10),
            reorder_every: Some(7),
            corrupt_every: Some(13),
            ..Impair::default()
        },
    );
    let s = through(&relay, &["-c", "400", "-i", "2ms", "-W", "500ms"]);
    let c = &relay.counts;
    eprintln!(
        "relay: dropped {} duplicated {} reordered {} corrupted {}; prober: ok {} timeout {} duplicate {} reordered {} corrupt {}",
        Counts::get(&c.dropped),
        Counts::get(&c.duplicated),
        Counts::get(&c.reordered),
        Counts::get(&c.corrupted),
        s["ok"],
        s["timeout"],
        s["duplicate"],
        s["reordered"],
        s["corrupt"]
    );
    assert_eq!(Counts::get(&c.replies), 400, "{s}");
    assert_eq!(
        n(&s["sent"]),
        n(&s["ok"]) + n(&s["timeout"]) + n(&s["error"]),
        "{s}"
    );
    assert_eq!(n(&s["duplicate"]), Counts::get(&c.duplicated), "{s}");
    assert_eq!(n(&s["reordered"]), Counts::get(&c.reordered), "{s}");
    assert_eq!(n(&s["corrupt"]), Counts::get(&c.corrupted), "{s}");
    // A dropped or corrupted reply is a timeout, never ok; the rest are ok.
    assert_eq!(
        n(&s["timeout"]),
        Counts::get(&c.dropped) + Counts::get(&c.corrupted),
        "{s}"
    );
    assert_eq!(
        n(&s["rtt"]["count"]),
        n(&s["ok"]),
        "duplicates never reach the histogram: {s}"
    );
}

#[test]
fn a_blackhole_and_a_stall_are_accounted_for_slot_by_slot() {
    use std::time::Duration;
    let server = Server::start(&[]);
    let s2 = Duration::from_secs(2);
    // Replies dropped for 2 s: those probes time out, every slot counted.
    let hole = Relay::start(
        &server.udp,
        Impair {
            blackhole: Some((Duration::from_millis(500), s2)),
            ..Impair::default()
        },
    );
    let s = through(&hole, &["-c", "400", "-i", "10ms", "-W", "500ms"]);
    assert_eq!(n(&s["sent"]), 400);
    assert_eq!(
        n(&s["timeout"]),
        Counts::get(&hole.counts.blackholed),
        "{s}"
    );
    eprintln!(
        "blackhole: {} timeouts, relay dropped {}",
        s["timeout"],
        Counts::get(&hole.counts.blackholed)
    );
    assert!((190..=210).contains(&n(&s["timeout"])), "{s}");
    assert_eq!(n(&s["ok"]) + n(&s["timeout"]), 400, "{s}");
    // Replies held for 2 s, then released: all answered, and the latency
    // from the scheduled time shows the stall.
    let stall = Relay::start(
        &server.udp,
        Impair {
            stall: Some((Duration::from_millis(500), s2)),
            ..Impair::default()
        },
    );
    let s = through(&stall, &["-c", "400", "-i", "10ms", "-W", "3s"]);
    assert_eq!(n(&s["ok"]), 400, "{s}");
    let p99 = s["latency"]["p99"].as_f64().unwrap();
    eprintln!("stall: latency p99 {p99} ns, rtt p99 {}", s["rtt"]["p99"]);
    assert!(
        p99 >= 0.95 * s2.as_nanos() as f64,
        "latency p99 {p99} ns under a 2 s stall"
    );
}

/// The `p`-quantile of sorted nanoseconds.
fn quantile(sorted: &[f64], p: f64) -> f64 {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

/// A uniform and a Pareto jitter: prober's RTT quantiles are the relay's
/// drawn delays' quantiles plus the unimpaired median, within ±5% or
/// ±300 µs.
#[test]
fn jittered_delays_show_in_the_rtt_quantiles() {
    use crate::relay::Jitter;
    use std::time::Duration;
    let _machine = crate::support::times_things();
    let server = Server::start(&[]);
    let mut m = crate::faults::Moments::new("jitter");
    // The timeout is above the holds the relay draws: the Pareto tail
    // (shape 1.5, 1 ms) passes 2 s once in about 90,000 draws, and seed
    // 23953001 drew one, which timed out and failed the count below (at
    // bec4437 as after it). Past 60 s: once in about 15 million draws, so
    // one run of this test in about 37,000.
    let args = ["-c", "400", "-i", "5ms", "-W", "60s"];
    let plain = Relay::start(&server.udp, Impair::default());
    let base = through(&plain, &args)["rtt"]["p50"].as_f64().unwrap();
    drop(plain);
    for jitter in [
        Jitter::Uniform(Duration::from_millis(10)),
        Jitter::Pareto {
            scale: Duration::from_millis(1),
            shape: 1.5,
        },
    ] {
        let relay = Relay::start(
            &server.udp,
            Impair {
                jitter: Some(jitter),
                seed: m.next(),
                ..Impair::default()
            },
        );
        let (s, probes) = through_with_probes(&relay, &args);
        assert_eq!(n(&s["ok"]), 400, "{s}");
        // What the relay held each reply for: its draw, plus the relay's
        // own lateness on a busy machine (which a test of prober must not
        // count against prober).
        let mut held = relay.counts.held.lock().unwrap().clone();
        held.sort_unstable();
        let order: Vec<f64> = held.iter().map(|(_, d)| d.as_nanos() as f64).collect();
        assert_eq!(order.len(), 400);
        let mut drawn = order.clone();
        drawn.sort_by(f64::total_cmp);
        let late: Vec<f64> = relay
            .counts
            .jitters
            .lock()
            .unwrap()
            .iter()
            .zip(&order)
            .map(|(d, h)| h - d.as_nanos() as f64)
            .collect();
        eprintln!(
            "{jitter:?}: the relay sent {:.0} µs late at most",
            late.iter().copied().fold(0.0, f64::max) / 1e3
        );
        // The mean |IPDV| is exactly that of the probes' own RTTs, in seq
        // order; and it is the relay's: the mean difference of consecutive
        // holds, with the base RTT's own variation on top (tens of µs on a
        // quiet machine, 220 µs once with a busy loop beside the suite, so
        // this bound is loose; the quantiles below tie prober to the relay).
        let mut rtts: Vec<(u64, f64)> = probes
            .iter()
            .map(|p| (p["seq"].as_u64().unwrap(), p["rtt_ns"].as_f64().unwrap()))
            .collect();
        rtts.sort_by_key(|r| r.0);
        let own = rtts
            .windows(2)
            .map(|w| (w[1].1 - w[0].1).abs())
            .sum::<f64>()
            / 399.0;
        let want = order.windows(2).map(|w| (w[1] - w[0]).abs()).sum::<f64>() / 399.0;
        let got = s["jitter"]["mean_abs"].as_f64().unwrap();
        eprintln!(
            "{jitter:?}: mean |ipdv| {got:.0} ns, of its RTTs {own:.0} ns, relay's holds {want:.0} ns"
        );
        assert_eq!(n(&s["jitter"]["count"]), 399, "{s}");
        assert!(
            (got - own).abs() <= 1.0,
            "{jitter:?}: mean |ipdv| {got} ns, its RTTs' {own} ns"
        );
        assert!(
            (got - want).abs() <= (0.25 * want).max(300_000.0),
            "{jitter:?}: mean |ipdv| {got} ns, the relay's {want} ns"
        );
        for (q, key) in [(0.1, "p10"), (0.5, "p50"), (0.9, "p90")] {
            let want = quantile(&drawn, q) + base;
            let got = s["rtt"][key].as_f64().unwrap();
            eprintln!("{jitter:?} {key}: rtt {got:.0} ns, relay held {want:.0} ns (+ base)");
        }
        // Probe by probe (the k-th reply the relay held is seq k - 1: it
        // drops, duplicates and reorders nothing here), each RTT is that
        // reply's hold plus the unimpaired round trip. Quantiles of whole
        // runs drifted by more than 500 µs under the suite on 2 vCPUs
        // (prober's and the responder's own wake-ups, beyond the relay's
        // lateness), so the bound is per probe, for 90 % of them: within
        // 1 ms of the median (500 µs held alone beside a busy loop, 396 of
        // 400, but not once in the whole suite beside one). Paired with
        // the wrong hold, a uniform 0-10 ms one is off by 3.3 ms on
        // average; Pareto holds, mostly 1-2 ms, are checked more loosely.
        let hold: std::collections::HashMap<u64, f64> = held
            .iter()
            .map(|(k, d)| (k - 1, d.as_nanos() as f64))
            .collect();
        let mut extra: Vec<f64> = rtts.iter().map(|(seq, rtt)| rtt - hold[seq]).collect();
        extra.sort_by(f64::total_cmp);
        let med = quantile(&extra, 0.5);
        let close = extra
            .iter()
            .filter(|e| (*e - med).abs() <= 1_000_000.0)
            .count();
        eprintln!(
            "{jitter:?}: RTT − hold median {med:.0} ns (base {base:.0}), {close} of 400 within 1 ms of it"
        );
        assert!(close * 10 >= 400 * 9, "{jitter:?}: {close} of 400");
        assert!(
            (med - base).abs() <= 300_000.0,
            "{jitter:?}: RTT − hold median {med} ns, base {base} ns"
        );
    }
}

/// Loss in bursts (Gilbert-Elliott): every lost reply is a timeout, and the
/// runs of consecutive timeouts in prober's probe lines are the relay's
/// bursts, one for one.
#[test]
fn bursty_loss_gives_the_relays_bursts_exactly() {
    let server = Server::start(&[]);
    let mut m = crate::faults::Moments::new("bursty loss");
    let relay = Relay::start(
        &server.udp,
        Impair {
            loss: Some(crate::relay::GilbertElliott { p: 0.03, r: 0.25 }),
            seed: m.next(),
            ..Impair::default()
        },
    );
    let target = format!("udp://{}", relay.addr);
    let (code, lines, err) = run_json(&[
        "run",
        "-o",
        "json",
        "--no-tx-stamps",
        "-c",
        "1000",
        "-i",
        "2ms",
        "-W",
        "300ms",
        &target,
    ]);
    assert!(matches!(code, Some(0 | 1)), "{err}");
    let s = of_type(&lines, "summary")[0];
    let lost = Counts::get(&relay.counts.lost);
    assert_eq!(n(&s["timeout"]), lost, "{s}");
    assert_eq!(
        n(&s["sent"]),
        n(&s["ok"]) + n(&s["timeout"]) + n(&s["error"])
    );
    let mut probes: Vec<(u64, bool)> = of_type(&lines, "probe")
        .iter()
        .map(|p| (n(&p["seq"]), p["outcome"] == "timeout"))
        .collect();
    probes.sort_unstable();
    let mut runs = Vec::new();
    let mut run = 0u64;
    for (_, timed_out) in &probes {
        if *timed_out {
            run += 1;
        } else if run > 0 {
            runs.push(run);
            run = 0;
        }
    }
    if run > 0 {
        runs.push(run);
    }
    let bursts = relay.counts.bursts.lock().unwrap().clone();
    eprintln!(
        "{lost} lost in {} bursts (mean {:.2}, longest {:?})",
        bursts.len(),
        lost as f64 / bursts.len().max(1) as f64,
        bursts.iter().max()
    );
    assert!(bursts.len() >= 5, "{bursts:?}");
    assert_eq!(runs, bursts, "prober's timeout runs are the relay's bursts");
    // And the summary's burst histogram is theirs, bucket by bucket.
    let mut want = std::collections::BTreeMap::new();
    for &len in &bursts {
        let i = 63 - len.leading_zeros();
        let lo = 1u64 << i;
        let name = if lo == 1 {
            "1".to_owned()
        } else {
            format!("{lo}-{}", 2 * lo - 1)
        };
        *want.entry(name).or_insert(0u64) += 1;
    }
    assert_eq!(s["loss_bursts"]["lengths"], serde_json::json!(want), "{s}");
    assert_eq!(n(&s["loss_bursts"]["count"]), bursts.len() as u64);
    assert_eq!(
        n(&s["loss_bursts"]["longest"]),
        *bursts.iter().max().unwrap()
    );
}

/// TCP through the relay: a 10 ms delay moves the median by 10 ms ± 2%, a
/// 2 s stall shows in the latency with every slot accounted for, and
/// connections closed under the prober are reopened and counted.
#[test]
fn tcp_through_the_relay_delay_stall_and_closed_connections() {
    use crate::relay::{TcpImpair, TcpRelay};
    use std::time::Duration;
    let _machine = crate::support::times_things();
    let server = Server::start(&[]);
    let run_tcp = |relay: &TcpRelay, args: &[&str]| {
        let target = format!("tcp://{}", relay.addr);
        let mut all = vec!["run", "-o", "json", "-q"];
        all.extend_from_slice(args);
        all.push(&target);
        let (code, lines, err) = run_json(&all);
        assert!(matches!(code, Some(0 | 1)), "{err}");
        of_type(&lines, "summary")[0].clone()
    };
    let args = ["-c", "200", "-i", "5ms", "-W", "1s"];
    median_moves_by(Duration::from_millis(10), "tcp", |delay| {
        let relay = TcpRelay::start(
            &server.tcp,
            TcpImpair {
                delay,
                ..TcpImpair::default()
            },
        );
        (run_tcp(&relay, &args)["rtt"]["p50"].as_f64().unwrap(), None)
    });
    // A 2 s stall of the replies.
    let s2 = Duration::from_secs(2);
    let stall = TcpRelay::start(
        &server.tcp,
        TcpImpair {
            stall: Some((Duration::from_millis(500), s2)),
            ..TcpImpair::default()
        },
    );
    let s = run_tcp(&stall, &["-c", "400", "-i", "10ms", "-W", "3s"]);
    assert_eq!(n(&s["ok"]), 400, "{s}");
    let p99 = s["latency"]["p99"].as_f64().unwrap();
    eprintln!("tcp stall: latency p99 {p99} ns");
    assert!(p99 >= 0.95 * s2.as_nanos() as f64, "{s}");
    // Connections closed under the prober at 0.5 s: it reconnects, counts
    // it, and every slot is accounted for.
    let closing = TcpRelay::start(
        &server.tcp,
        TcpImpair {
            reset_at: Some(Duration::from_millis(500)),
            ..TcpImpair::default()
        },
    );
    let s = run_tcp(&closing, &["-c", "200", "-i", "5ms", "-W", "500ms"]);
    eprintln!(
        "tcp closed: {} reconnects, relay accepted {} and closed {}; ok {} timeout {} error {}",
        s["reconnects"],
        Counts::get(&closing.accepted),
        Counts::get(&closing.reset),
        s["ok"],
        s["timeout"],
        s["error"]
    );
    // Every connection is counted: the first, each reopened one (a
    // reconnect), and the spare's first, if it had one. A spare is opened
    // only once probes overlapped, which a loaded machine's late replies
    // can make happen (a probe's latency past the interval, or a timeout);
    // without that there is none. The relay closed every connection it had
    // then: the first, and the spare if it was open by then.
    let (accepted, reset) = (Counts::get(&closing.accepted), Counts::get(&closing.reset));
    let reconnects = n(&s["reconnects"]);
    assert!(reconnects >= 1, "{s}");
    let spare = accepted
        .checked_sub(reconnects + 1)
        .unwrap_or_else(|| panic!("{reconnects} reconnects of {accepted} accepted: {s}"));
    let overlapped = n(&s["timeout"]) > 0 || n(&s["latency"]["max"]) >= 5_000_000;
    assert!(spare <= u64::from(overlapped), "{spare} spares: {s}");
    assert!((1..=1 + spare).contains(&reset), "{reset} closed: {s}");
    assert_eq!(n(&s["sent"]), 200);
    assert_eq!(
        n(&s["sent"]),
        n(&s["ok"]) + n(&s["timeout"]) + n(&s["error"])
    );
    assert!(n(&s["ok"]) >= 190, "{s}");
}

/// `prober run -o json -c 200 -i INTERVAL` of a gRPC target behind the
/// TCP relay holding every reply 4 ms: its JSON lines.
fn grpc_through_a_4ms_relay(interval: &str) -> Vec<serde_json::Value> {
    let server = Server::start(&[]);
    let relay = relay_4ms(&server.grpc);
    let target = format!("grpc://{}", relay.addr);
    crate::support::run_json_ok(&["run", "-o", "json", "-c", "200", "-i", interval, &target])
}

/// The TCP relay in front of `upstream`, holding every reply 4 ms.
fn relay_4ms(upstream: &str) -> crate::relay::TcpRelay {
    use crate::relay::{TcpImpair, TcpRelay};
    TcpRelay::start(
        upstream,
        TcpImpair {
            delay: std::time::Duration::from_millis(4),
            ..TcpImpair::default()
        },
    )
}

/// Whether a probe line has all six parts of its split.
fn has_six(p: &serde_json::Value) -> bool {
    prober_core::Parts::NAMES
        .iter()
        .all(|n| p["parts"][format!("{n}_ns")].is_u64())
}

/// gRPC through the TCP relay with a 4 ms reply delay, probed every 3 ms:
/// each probe is still under way when the next goes out, and three are
/// under way at once only where a round trip passes 6 ms. On one HTTP/2
/// connection neither would have stamps of its own; the second connection
/// kept once probes overlap carries the next, and a probe that shared its
/// time with one other probe at most has its six parts. (Three at once,
/// from a loaded machine's longer RTTs, rightly spoil one another: those
/// are not judged.)
#[test]
fn grpc_probes_that_overlap_in_pairs_keep_their_split() {
    let _machine = crate::support::times_things();
    let lines = grpc_through_a_4ms_relay("3ms");
    judge_pairs(&lines);
}

/// Judges the probes that shared their time with one other probe at most:
/// enough of them overlapped one, and 9 in 10 have their six parts.
fn judge_pairs(lines: &[serde_json::Value]) {
    let probes = of_type(lines, "probe");
    let spans = crate::support::Exchanges::of(&probes);
    let all = spans.all();
    let overlaps = |a: &(u64, u64, u64), b: &(u64, u64, u64)| a.1 < b.2 && b.1 < a.2;
    let (mut paired, mut judged, mut full) = (0, 0, 0);
    let mut partial = Vec::new();
    for p in &probes {
        let seq = p["seq"].as_u64().unwrap();
        let me = all.iter().find(|e| e.0 == seq).unwrap();
        let others: Vec<_> = all
            .iter()
            .filter(|e| e.0 != seq && overlaps(e, me))
            .collect();
        // Never more than one other under way beside it.
        let pairs_only = others
            .iter()
            .enumerate()
            .all(|(i, a)| others[i + 1..].iter().all(|b| !overlaps(a, b)));
        if !pairs_only {
            continue;
        }
        judged += 1;
        paired += usize::from(!others.is_empty());
        if has_six(p) {
            full += 1;
        } else {
            partial.push(format!(
                "{seq} {} {} {}",
                p["rtt_ns"], p["split_missing"], p["parts"]
            ));
        }
    }
    assert!(
        paired >= 50,
        "the probes overlap (the relay's 4 ms against 3 ms apart): {paired} of {judged}"
    );
    assert!(
        judged >= 100 && full * 10 >= judged * 9,
        "{full} of {judged} probes with one other under way at most have six parts; the others: {partial:#?}"
    );
}

/// TCP through the same relay, probed every 3 ms: once probes overlapped,
/// a second connection carries the probe that finds a reply due on the
/// first, so that a reply is not read with the next one queued behind it
/// on its socket (TCP merges the two, and the first's receive stamp is
/// the later arrival's: on a loaded host, where round trips outlast the
/// interval, that cost TCP a share of its splits). The relay sees two
/// connections, and the probes that overlapped in pairs keep their six
/// parts, their send parts settled on the connection each went on. With
/// `-b 2` the run overlaps probes on purpose: pipelined on one
/// connection, as netperf's `-b` does.
#[test]
fn tcp_probes_that_overlap_go_on_a_second_connection_unless_pipelined() {
    let _machine = crate::support::times_things();
    let server = Server::start(&[]);
    for (args, connections) in [(&["-i", "3ms"][..], 2), (&["-i", "6ms", "-b", "2"], 1)] {
        let relay = relay_4ms(&server.tcp);
        let target = format!("tcp://{}", relay.addr);
        let mut run = vec!["run", "-o", "json", "-c", "200"];
        run.extend(args);
        run.push(&target);
        let lines = crate::support::run_json_ok(&run);
        let s = of_type(&lines, "summary")[0];
        assert_eq!(s["ok"], 200, "{args:?}: {s}");
        assert_eq!(
            relay.accepted.load(std::sync::atomic::Ordering::Relaxed),
            connections,
            "{args:?}: {s}"
        );
        if connections == 2 {
            judge_pairs(&lines);
        }
    }
}

/// gRPC through the TCP relay with a 4 ms reply delay (RTTs of about 5
/// ms), probed every 7 ms: an ask for the send part right after each reply
/// would still be open when the next probe starts, and spoil its stamps.
/// The next reply carries it instead, and nearly every probe has its six
/// parts, with the relay's 4 ms in the network part. (A probe whose RTT
/// grew past 7 ms on a loaded machine overlaps the next, and rightly gets
/// none: the check counts the probes that had the connection to
/// themselves.)
#[test]
fn grpc_through_a_slow_path_keeps_its_split() {
    let _machine = crate::support::times_things();
    // 200 probes: on a slow, loaded VM only about a quarter had the
    // connection to themselves (23 of 100 once), too few to judge by.
    let lines = grpc_through_a_4ms_relay("7ms");
    let probes = of_type(&lines, "probe");
    // Probes that had the connection to themselves: answered before the
    // next one went out, after the one before was answered. On a loaded
    // machine the relay's RTTs reach 11 ms, and probes that overlap rightly
    // get no stamps; an ask left open would spoil the ones that do not.
    let spans = crate::support::Exchanges::of(&probes);
    let solo: Vec<_> = probes
        .iter()
        .filter(|p| spans.alone(p["seq"].as_u64().unwrap(), 0))
        .collect();
    let full: Vec<_> = solo.iter().filter(|p| has_six(p)).collect();
    let partial: Vec<_> = solo
        .iter()
        .filter(|p| !has_six(p))
        .map(|p| format!("{} {} {}", p["seq"], p["rtt_ns"], p["parts"]))
        .collect();
    assert!(
        solo.len() >= 30 && full.len() * 10 >= solo.len() * 9,
        "{} of {} probes alone on the connection with six parts; the others: {partial:#?}",
        full.len(),
        solo.len()
    );
    // The first probe too: the connection was warmed with one call, so its
    // first read is its response, not the server's SETTINGS.
    for p in &full {
        let net = p["parts"]["network_ns"].as_u64().unwrap();
        assert!(net >= 4_000_000, "the relay's delay is in the network: {p}");
    }
}

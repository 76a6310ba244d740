//! prober's numbers through the impairment relay (relay.rs): each test
//! knows from the relay's counts exactly what prober must report.

use crate::relay::{Counts, Impair, Relay};
use crate::support::{Server, of_type, run_json};

/// One `udp://` run through `relay`; its summary. Transmit stamps are off,
/// so the responder sends no follow-up frames and every datagram the relay
/// sees from it is a reply.
fn through(relay: &Relay, args: &[&str]) -> serde_json::Value {
    let target = format!("udp://{}", relay.addr);
    let mut all = vec!["run", "-o", "json", "-q", "--no-tx-stamps"];
    all.extend_from_slice(args);
    all.push(&target);
    let (code, lines, err) = run_json(&all);
    assert!(matches!(code, Some(0 | 1)), "{err}");
    of_type(&lines, "summary")[0].clone()
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
    let mut diffs = Vec::new();
    // Alternating, three rounds each: the relay's own cost is in both.
    for _ in 0..3 {
        let plain = Relay::start(&server.udp, Impair::default());
        let base = through(&plain, &args)["rtt"]["p50"].as_f64().unwrap();
        drop(plain);
        let slow = Relay::start(
            &server.udp,
            Impair {
                delay: d,
                ..Impair::default()
            },
        );
        let delayed = through(&slow, &args)["rtt"]["p50"].as_f64().unwrap();
        diffs.push(delayed - base);
    }
    diffs.sort_by(f64::total_cmp);
    let moved = diffs[1];
    eprintln!("median moved by {diffs:?} ns for a {d:?} delay");
    let want = d.as_nanos() as f64;
    // d ± 2% or ± 20 µs, whichever is larger.
    assert!(
        (moved - want).abs() <= (0.02 * want).max(20_000.0),
        "median moved by {moved} ns, not {want}"
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

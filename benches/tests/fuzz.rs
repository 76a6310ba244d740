//! Fuzzing every parser that reads bytes from the network or from a user,
//! on stable Rust: proptest feeds each parser random byte strings and
//! mutations (byte sets, bit flips, cuts, growth, splices) of valid inputs,
//! the seeds, which are built by prober's own encoders and read from
//! `benches/fuzz/corpus/<target>/`.
//!
//! A case fails on a panic, on taking longer than [`CASE_TIME`], or on a
//! single allocation larger than [`MAX_ALLOC`]. proptest then shrinks it to
//! a smallest input; add that input to the target's corpus folder, where
//! every later run replays it.
//!
//! CI runs each target for `PROBER_FUZZ_CASES` cases (default 5,000); a
//! soak is `PROBER_FUZZ_SECS=3600 cargo test --release -p prober-benches
//! --test fuzz -- --test-threads 1` (benches/fuzz/README.md).
//!
//! Time is the test thread's CPU time, not the wall clock: a soak run at
//! `nice 19` beside builds, or stopped with SIGSTOP while a benchmark runs,
//! still gets its full hour of fuzzing, and a case is not failed as slow
//! because the thread was waiting for a core.
#![allow(unsafe_code)] // the counting allocator below

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::path::Path;
use std::time::Duration;

use proptest::prelude::*;
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};

/// The most CPU time one case may take.
const CASE_TIME: Duration = Duration::from_secs(1);
/// The largest single allocation one case may make.
const MAX_ALLOC: usize = 16 << 20;

thread_local! {
    static LARGEST: Cell<usize> = const { Cell::new(0) };
}

/// The system allocator, noting the largest allocation of this thread.
struct Counting;

// SAFETY: every call is passed to the system allocator unchanged; the
// thread-local is a const-initialised Cell, which never allocates.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let _ = LARGEST.try_with(|l| l.set(l.get().max(layout.size())));
        // SAFETY: the caller's contract, passed on.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller's contract, passed on.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let _ = LARGEST.try_with(|l| l.set(l.get().max(new_size)));
        // SAFETY: the caller's contract, passed on.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

/// One mutation of a seed.
#[derive(Debug, Clone)]
enum Edit {
    Set(usize, u8),
    Flip(usize, u8),
    Cut(usize),
    Grow(Vec<u8>),
    Splice(usize, usize),
}

fn apply(mut b: Vec<u8>, edits: &[Edit]) -> Vec<u8> {
    for e in edits {
        let n = b.len().max(1);
        match *e {
            Edit::Set(i, v) if !b.is_empty() => b[i % n] = v,
            Edit::Flip(i, bit) if !b.is_empty() => b[i % n] ^= 1 << (bit % 8),
            Edit::Cut(at) => b.truncate(at % (n + 1)),
            Edit::Grow(ref more) => b.extend_from_slice(more),
            Edit::Splice(from, len) if !b.is_empty() => {
                let from = from % n;
                let part = b[from..(from + len % 64).min(b.len())].to_vec();
                b.splice(from..from, part);
            }
            _ => {}
        }
    }
    b
}

fn edit() -> impl Strategy<Value = Edit> {
    prop_oneof![
        4 => (any::<usize>(), any::<u8>()).prop_map(|(i, v)| Edit::Set(i, v)),
        4 => (any::<usize>(), any::<u8>()).prop_map(|(i, b)| Edit::Flip(i, b)),
        1 => any::<usize>().prop_map(Edit::Cut),
        1 => proptest::collection::vec(any::<u8>(), 1..64).prop_map(Edit::Grow),
        1 => (any::<usize>(), any::<usize>()).prop_map(|(a, l)| Edit::Splice(a, l)),
    ]
}

/// The seeds of `target`: those built here, and the corpus files.
fn seeds(target: &str, mut built: Vec<Vec<u8>>) -> Vec<Vec<u8>> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fuzz/corpus")
        .join(target);
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    assert!(!files.is_empty(), "{}: no seed files", dir.display());
    built.extend(files.iter().map(|p| std::fs::read(p).unwrap()));
    built
}

/// This thread's CPU time.
fn cpu_now() -> Duration {
    let t = nix::time::clock_gettime(nix::time::ClockId::CLOCK_THREAD_CPUTIME_ID)
        .expect("CLOCK_THREAD_CPUTIME_ID");
    Duration::from(t)
}

fn env_number(name: &str) -> Option<u64> {
    std::env::var(name).ok().map(|v| {
        v.parse()
            .unwrap_or_else(|_| panic!("{name}={v}: not a whole number"))
    })
}

fn cases() -> u32 {
    std::env::var("PROBER_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5_000)
}

/// Runs `parse` on random and mutated inputs (see the module docs).
fn fuzz(target: &str, seeds: Vec<Vec<u8>>, parse: impl Fn(&[u8])) {
    let start = cpu_now();
    let deadline = env_number("PROBER_FUZZ_SECS").map(|s| start + Duration::from_secs(s));
    // A later soak goes on from where an earlier one stopped (it printed
    // its next round), instead of repeating the same cases.
    let first = env_number("PROBER_FUZZ_FIRST_ROUND").unwrap_or(0);
    let inputs = prop_oneof![
        1 => proptest::collection::vec(any::<u8>(), 0..600),
        3 => (proptest::sample::select(seeds), proptest::collection::vec(edit(), 1..6))
            .prop_map(|(s, e)| apply(s, &e)),
    ];
    let mut round = first;
    let mut total = 0u64;
    loop {
        // A fixed seed per round: a CI failure replays as it happened.
        let rng = TestRng::from_seed(RngAlgorithm::ChaCha, &seed_bytes(target, round));
        let mut runner = TestRunner::new_with_rng(
            Config {
                cases: cases(),
                failure_persistence: None,
                ..Config::default()
            },
            rng,
        );
        let res = runner.run(&inputs, |input| {
            LARGEST.with(|l| l.set(0));
            let t = cpu_now();
            parse(&input);
            let took = cpu_now().saturating_sub(t);
            let largest = LARGEST.with(Cell::get);
            prop_assert!(
                took < CASE_TIME,
                "{target}: {took:?} for {} bytes",
                input.len()
            );
            prop_assert!(
                largest <= MAX_ALLOC,
                "{target}: allocated {largest} bytes at once for {} bytes of input",
                input.len()
            );
            Ok(())
        });
        if let Err(e) = res {
            panic!("{target}: {e}");
        }
        round += 1;
        total += u64::from(cases());
        if deadline.is_none_or(|d| cpu_now() >= d) {
            break;
        }
    }
    eprintln!(
        "fuzz {target}: {total} cases, 0 failures, rounds {first}..{round}, {:.0} s of CPU",
        cpu_now().saturating_sub(start).as_secs_f64()
    );
}

fn seed_bytes(target: &str, round: u64) -> [u8; 32] {
    let mut s = [0u8; 32];
    for (i, b) in target.bytes().chain(round.to_le_bytes()).enumerate() {
        s[i % 32] ^= b;
    }
    s
}

// === the targets ===

#[test]
fn tcp_udp_wire_frames() {
    use prober_tcp::wire;
    let mut built = Vec::new();
    for size in [40, 64, 200] {
        let mut req = Vec::new();
        wire::encode_request(&mut req, size, 7, 99);
        let mut stamped = req.clone();
        wire::want_stamps(&mut stamped);
        wire::want_follow_up(&mut stamped);
        let mut resp = stamped.clone();
        wire::make_followed_response(&mut resp, 1_000, Some(2_000), true, false);
        let mut on_ask = stamped.clone();
        wire::want_follow_up_on_ask(&mut on_ask);
        let mut asked = on_ask.clone();
        wire::make_followed_response(&mut asked, 1_000, Some(2_000), true, true);
        let mut follow = Vec::new();
        wire::encode_follow_up(&mut follow, 7, 99, Some(3_000));
        let mut ask = Vec::new();
        wire::encode_ask(&mut ask, 7, 99);
        let mut interleaved = req.clone();
        wire::want_interleaved(&mut interleaved);
        let mut carrying = interleaved.clone();
        wire::make_followed_response(&mut carrying, 1_000, Some(2_000), true, true);
        wire::carry(&mut carrying, 6, Some(4_000));
        built.extend([
            req,
            stamped,
            resp,
            on_ask,
            asked,
            follow,
            ask,
            interleaved,
            carrying,
        ]);
    }
    // A sockperf client's ping (seq, flags client | pong request, length).
    let mut ping = vec![0u8; 64];
    ping[8..10].copy_from_slice(&3u16.to_be_bytes());
    ping[10..14].copy_from_slice(&64u32.to_be_bytes());
    built.push(ping);
    fuzz("wire", seeds("wire", built), |b| {
        for max in [wire::MAX_TCP_FRAME, wire::MAX_UDP_FRAME] {
            if wire::Header::decode(b, max).is_ok() {
                let _ = wire::flags(b);
                let _ = wire::responder_wake(b);
                let _ = wire::follow_up_send(b);
                let _ = wire::follow_up_promised(b);
                let _ = wire::waits_for_ask(b);
                let _ = wire::interleaved(b);
                let _ = wire::carried(b);
            }
        }
        // The sockperf listener reads the same datagrams' worth of bytes.
        let mut m = b.to_vec();
        if prober_tcp::sockperf::answer(&mut m) == prober_tcp::sockperf::Verdict::Answer {
            // Answered only as long as it says it is, and changed only in
            // its flags (the client flag cleared).
            let said = prober_tcp::sockperf::header(&m).map(|(_, len)| len);
            assert_eq!(said, Some(b.len()), "an answer is never longer");
            assert_eq!((&m[..8], &m[10..]), (&b[..8], &b[10..]));
            assert_eq!(
                m[8..10],
                (u16::from_be_bytes([b[8], b[9]]) & !1).to_be_bytes()
            );
        }
        // And its TCP side the same bytes as a stream: the answers are
        // never more bytes than the whole messages taken, which never run
        // past the stream.
        let (mut stream, mut out) = (b.to_vec(), Vec::new());
        let stats = prober_tcp::sockperf::SockperfStats::default();
        match prober_tcp::sockperf::answer_messages(&mut stream, &mut out, &stats) {
            Ok((took, answers)) => {
                assert!(took <= b.len() && out.len() <= took, "{took} {}", out.len());
                assert_eq!(answers == 0, out.is_empty());
            }
            Err((_, answers)) => {
                assert!(out.len() <= b.len());
                assert_eq!(answers == 0, out.is_empty());
            }
        }
    });
}

#[test]
fn icmp_replies_and_errors() {
    use prober_icmp::packet;
    let mut payload = [0u8; 56];
    packet::encode_payload(&mut payload, 0xfeed, 42);
    let v4 = packet::echo_request_v4(7, 42, &payload);
    let v6 = packet::echo_request_v6(7, 42, &payload);
    let mut reply4 = v4.clone();
    reply4[0] = 0;
    let mut reply6 = v6.clone();
    reply6[0] = 129;
    // An IPv4 header in front (raw sockets), and an ICMP error quoting it.
    let mut ip = vec![
        0x45, 0, 0, 84, 0, 0, 0, 0, 64, 1, 0, 0, 127, 0, 0, 1, 127, 0, 0, 1,
    ];
    ip.extend_from_slice(&reply4);
    let mut unreach = vec![3, 1, 0, 0, 0, 0, 0, 0];
    unreach.extend_from_slice(&ip[..20]);
    unreach.extend_from_slice(&v4);
    let built = vec![v4, v6, reply4, reply6, ip, unreach, payload.to_vec()];
    fuzz("icmp", seeds("icmp", built), |b| {
        let _ = packet::parse_v4(b, true, Ipv4Addr::LOCALHOST);
        let _ = packet::parse_v4(b, false, Ipv4Addr::LOCALHOST);
        let _ = packet::parse_v6(b, Ipv6Addr::LOCALHOST);
        let _ = packet::find_payload(b);
        let _ = packet::check_payload(b);
    });
}

#[test]
fn stamp_packets_and_tlvs() {
    use prober_stamp::packet::{ReflectorPacket, SenderPacket};
    use prober_stamp::{Key, Mode, tlv};
    let key = Key::new(b"fuzz key");
    let mut built = Vec::new();
    for (mode, k) in [(Mode::Open, None), (Mode::Authenticated, Some(&key))] {
        let p = SenderPacket {
            seq: 5,
            timestamp: 0x0123_4567_89ab_cdef,
            error: prober_stamp::time::ErrorEstimate(0x8001),
            ssid: 9,
        };
        let mut buf = vec![0u8; mode.base_len() + 12];
        p.write(&mut buf, mode, k);
        // A TLV after the base packet: type 1 (padding), length 8.
        let at = mode.base_len();
        buf[at..at + 4].copy_from_slice(&[0x00, 1, 0, 8]);
        built.push(buf);
    }
    fuzz("stamp", seeds("stamp", built), |b| {
        for (mode, k) in [
            (Mode::Open, None),
            (Mode::Authenticated, Some(&key)),
            (Mode::Authenticated, None),
        ] {
            let _ = SenderPacket::read(b, mode, k);
            let _ = ReflectorPacket::read(b, mode, k);
            if b.len() >= mode.base_len() {
                let _ = tlv::walk(b, mode.base_len());
            }
        }
    });
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn durations() {
    let built = [
        "10ms",
        "1m30s",
        "0",
        "2.5us",
        "18446744073709551615ns",
        "1h 5m",
    ]
    .map(|s| s.as_bytes().to_vec())
    .to_vec();
    fuzz("duration", seeds("duration", built), |b| {
        let _ = prober_core::duration::parse_duration(&text(b));
    });
}

#[test]
fn target_urls() {
    let reg = &prober_core::testutil::REGISTRY;
    let built = [
        "tcp://127.0.0.1:8707",
        "udp://[::1]:9",
        "icmp://localhost",
        "127.0.0.1",
        "health://h:50051/my.Service",
    ]
    .map(|s| s.as_bytes().to_vec())
    .to_vec();
    fuzz("target", seeds("target", built), |b| {
        let _ = prober_core::target::parse_target(reg, &text(b));
    });
}

#[test]
fn dns_questions() {
    let built = [
        "/example.com?type=A",
        "/_sip._udp.example.com?type=SRV&tcp",
        "/x?type=TYPE65",
    ]
    .map(|s| s.as_bytes().to_vec())
    .to_vec();
    fuzz("dns-question", seeds("dns-question", built), |b| {
        let _ = prober_dns::Question::parse(&text(b));
    });
}

#[test]
fn report_inputs() {
    let filter = prober_report::input::Filter::default();
    fuzz("report", seeds("report", Vec::new()), |b| {
        let _ = prober_report::input::read_bytes(Path::new("fuzz"), b, &filter);
    });
}

/// The daemon's config file: TOML, then every key's validation, with host
/// names refused rather than resolved (no DNS query leaves the machine).
#[test]
fn config_files() {
    use prober_daemon::config::{Resolution, parse_with};
    static REGISTRY: prober_core::Registry = prober_core::Registry::new(&[
        &prober_tcp::TCP,
        &prober_tcp::TCP_CONNECT,
        &prober_tcp::TCP_CRR,
        &prober_tcp::UDP,
        &prober_grpc::GRPC,
        &prober_grpc::GRPC_STREAM,
        &prober_grpc::GRPC_HEALTH,
        &prober_stamp::STAMP,
        &prober_dns::DNS,
        &prober_icmp::ICMP,
    ])
    .with_responders(&[
        &prober_tcp::TCP_RESPONDER,
        &prober_tcp::UDP_RESPONDER,
        &prober_grpc::GRPC_RESPONDER,
        &prober_stamp::STAMP_RESPONDER,
        &prober_tcp::SOCKPERF_RESPONDER,
    ]);
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let path =
        std::env::temp_dir().join(format!("prober-fuzz-config-{}/x.toml", std::process::id()));
    let seeds = seeds("config", Vec::new());
    // The seeds are valid: mutations of them reach every key's checks, not
    // only TOML's.
    for seed in &seeds {
        let parsed = rt.block_on(parse_with(
            &text(seed),
            &path,
            &REGISTRY,
            Resolution::LiteralsOnly,
        ));
        assert!(parsed.is_ok(), "{:?}", parsed.err());
    }
    fuzz("config", seeds, |b| {
        let text = text(b);
        let _ = rt.block_on(parse_with(
            &text,
            &path,
            &REGISTRY,
            Resolution::LiteralsOnly,
        ));
    });
}

/// Prometheus file_sd files, as JSON and as YAML (every input is tried as
/// both).
#[test]
fn file_sd_files() {
    use prober_daemon::file_sd::parse;
    let seeds = seeds("file-sd", Vec::new());
    for seed in &seeds {
        let t = text(seed);
        assert!(
            parse(&t, false, Some("udp")).is_ok() || parse(&t, true, Some("udp")).is_ok(),
            "a seed that parses: {t}"
        );
    }
    fuzz("file-sd", seeds, |b| {
        let t = text(b);
        let _ = parse(&t, false, Some("udp"));
        let _ = parse(&t, true, None);
    });
}

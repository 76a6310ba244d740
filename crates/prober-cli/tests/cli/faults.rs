//! Faults of the processes themselves: a responder killed with `kill -9`
//! and restarted, a responder stopped with SIGSTOP, and `prober run` and the
//! daemon stopped by SIGTERM or SIGINT at random moments.
//!
//! The random moments come from a seed printed at the start of each test;
//! `PROBER_FAULT_SEED=N` repeats a run.

use std::collections::{BTreeMap, BTreeSet};
use std::process::Stdio;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::Value;

use crate::daemon::free_port;
use crate::support::{Serve, Server, json_lines, of_type, prober, signal};

/// Random moments from a printed seed.
pub(crate) struct Moments(crate::relay::Rng);

impl Moments {
    pub(crate) fn new(test: &str) -> Self {
        let seed = std::env::var("PROBER_FAULT_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| {
                SystemTime::now()
                    .duration_since(UNIX_EPOCH)
                    .unwrap()
                    .subsec_nanos()
                    .into()
            });
        eprintln!("{test}: PROBER_FAULT_SEED={seed}");
        Self(crate::relay::Rng(seed))
    }

    pub(crate) fn next(&mut self) -> u64 {
        self.0.next_u64()
    }

    /// Uniform in `lo..hi` milliseconds.
    pub(crate) fn millis(&mut self, lo: u64, hi: u64) -> Duration {
        Duration::from_millis(lo + self.next() % (hi - lo))
    }
}

fn unix_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos()
        .try_into()
        .unwrap()
}

/// A responder on fixed loopback ports, so that a restarted one is found
/// where the first was: TCP and UDP on one port, gRPC and STAMP on others.
struct Responder {
    serve: Serve,
    port: u16,
    grpc: u16,
    stamp: u16,
}

impl Responder {
    fn start(port: u16, grpc: u16, stamp: u16) -> Self {
        let a = |p: u16| format!("127.0.0.1:{p}");
        let (tcp, grpc_at, stamp_at) = (a(port), a(grpc), a(stamp));
        let serve = Serve::start(
            &[
                "--quiet", "--tcp", &tcp, "--udp", &tcp, "--grpc", &grpc_at, "--stamp", &stamp_at,
            ],
            4,
        );
        Self {
            serve,
            port,
            grpc,
            stamp,
        }
    }

    fn targets(&self) -> Vec<String> {
        vec![
            format!("udp://127.0.0.1:{}", self.port),
            format!("tcp://127.0.0.1:{}", self.port),
            format!("grpc://127.0.0.1:{}", self.grpc),
            format!("stamp://127.0.0.1:{}", self.stamp),
        ]
    }

    /// `kill -9`; dropping it reaps it.
    fn kill9(self) {
        signal(self.serve.child.id(), "KILL");
    }
}

/// Per target: its summary and its probe lines, checking that every seq
/// appears exactly once, that the summary counts them all, and that sent =
/// ok + timeout + error.
fn accounted(lines: &[Value]) -> BTreeMap<String, (Value, Vec<Value>)> {
    let mut out: BTreeMap<String, (Value, Vec<Value>)> = BTreeMap::new();
    for s in of_type(lines, "summary") {
        out.insert(
            s["target"].as_str().unwrap().to_owned(),
            (s.clone(), Vec::new()),
        );
    }
    for p in of_type(lines, "probe") {
        let t = p["target"].as_str().unwrap();
        out.get_mut(t)
            .unwrap_or_else(|| panic!("{t}: probes but no summary"))
            .1
            .push(p.clone());
    }
    for (t, (s, probes)) in &out {
        let seqs: BTreeSet<u64> = probes.iter().map(|p| p["seq"].as_u64().unwrap()).collect();
        assert_eq!(seqs.len(), probes.len(), "{t}: a seq twice");
        let n = |k: &str| s[k].as_u64().unwrap();
        assert_eq!(n("sent"), probes.len() as u64, "{t}: {s}");
        assert_eq!(n("sent"), n("ok") + n("timeout") + n("error"), "{t}: {s}");
        assert_eq!(
            seqs.iter().copied().collect::<Vec<_>>(),
            (0..n("sent")).collect::<Vec<_>>(),
            "{t}: seqs 0..sent"
        );
    }
    out
}

/// `kill -9` of the responder during UDP, TCP, gRPC and STAMP runs, and a
/// restart 0.5 s later on the same ports: no panic, every slot accounted
/// for, each protocol answered again within 1 s of the restart, and the
/// connection-based ones count their reconnects.
#[test]
fn a_responder_killed_and_restarted_is_found_again_within_a_second() {
    let _machine = crate::support::times_things();
    let (port, grpc, stamp) = (free_port(), free_port(), free_port());
    let first = Responder::start(port, grpc, stamp);
    let targets = first.targets();
    let run = prober()
        .args(["run", "-o", "json", "-i", "10ms", "-d", "4s", "-W", "300ms"])
        .args(&targets)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(1200));
    let killed = unix_ns();
    first.kill9();
    std::thread::sleep(Duration::from_millis(500));
    let again = Responder::start(port, grpc, stamp);
    let restarted = unix_ns();
    let out = run.wait_with_output().unwrap();
    drop(again);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("panicked"), "{err}");
    assert_eq!(out.status.code(), Some(0), "{err}");
    let lines = json_lines(&out);
    let by_target = accounted(&lines);
    assert_eq!(by_target.len(), 4, "{:?}", by_target.keys());
    for (t, (s, probes)) in &by_target {
        let ok_at =
            |p: &&Value| (p["outcome"] == "ok").then(|| p["scheduled_unix_ns"].as_u64().unwrap());
        let before = probes
            .iter()
            .filter_map(|p| ok_at(&p))
            .filter(|&at| at < killed);
        assert!(before.count() > 50, "{t}: answered before the kill");
        let first_after = probes
            .iter()
            .filter_map(|p| ok_at(&p))
            .find(|&at| at >= restarted)
            .unwrap_or_else(|| panic!("{t}: no answer after the restart: {s}"));
        let gap_ms = (first_after - restarted) as f64 / 1e6;
        eprintln!("{t}: first answer {gap_ms:.1} ms after the restart");
        assert!(
            gap_ms < 1000.0,
            "{t}: resumed {gap_ms:.1} ms after the restart"
        );
        // What was lost was lost while the responder was away.
        let n = |k: &str| s[k].as_u64().unwrap();
        assert!(n("ok") > n("sent") / 2, "{t}: {s}");
        if t.starts_with("tcp://") || t.starts_with("grpc://") {
            assert!(n("reconnects") >= 1, "{t}: reconnects counted: {s}");
        }
    }
}

/// SIGSTOP of the responder for 2 s in a 10 ms run, as a blackhole that
/// then answers: every slot is accounted for, and the latency (from the
/// scheduled time) shows the whole stall.
#[test]
fn a_responder_stopped_for_two_seconds_shows_in_latency_and_loses_no_slot() {
    let _machine = crate::support::times_things();
    let srv = Server::start(&[]);
    let targets = [
        format!("udp://{}", srv.udp),
        format!("tcp://{}", srv.tcp),
        format!("grpc://{}", srv.grpc),
    ];
    let run = prober()
        .args(["run", "-o", "json", "-i", "10ms", "-d", "4s", "-W", "3s"])
        .args(&targets)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(1000));
    signal(srv.pid(), "STOP");
    // The stall lasted at least from the STOP's `kill` returning to the
    // CONT's being started (each `kill` is a process of its own, which a
    // loaded machine may take tens of ms to run).
    let stopped = Instant::now();
    std::thread::sleep(Duration::from_secs(2));
    let stall = stopped.elapsed();
    signal(srv.pid(), "CONT");
    let out = run.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    let lines = json_lines(&out);
    let by_target = accounted(&lines);
    assert_eq!(by_target.len(), 3);
    for (t, (s, _)) in &by_target {
        let n = |k: &str| s[k].as_u64().unwrap();
        // 4 s at 10 ms: 400 slots, each sent or counted missed.
        let slots = n("sent") + n("missed");
        assert!((399..=401).contains(&slots), "{t}: {slots} slots: {s}");
        let p99 = s["latency"]["p99"].as_f64().unwrap() / 1e9;
        let max = s["latency"]["max"].as_f64().unwrap() / 1e9;
        eprintln!(
            "{t}: stall {:.3} s, latency p99 {p99:.3} s, max {max:.3} s, ok {} timeout {}",
            stall.as_secs_f64(),
            n("ok"),
            n("timeout")
        );
        assert!(
            p99 >= 0.95 * stall.as_secs_f64() && max >= stall.as_secs_f64() - 0.05,
            "{t}: the stall ({stall:?}) is in the latency: {s}"
        );
    }
}

/// Ctrl-C while a target's name is still being resolved, against a DNS
/// server that never answers (the resolver would wait 2 × 5 s): the run
/// ends within a second, with 130 and a line that says so.
#[test]
fn ctrl_c_while_a_name_resolves_ends_the_run_at_once() {
    use std::io::BufRead as _;
    // Names must go to the resolver that resolv.conf names: not through
    // nscd or systemd-resolved, which would answer from the host.
    let nss = std::fs::read_to_string("/etc/nsswitch.conf").unwrap_or_default();
    let hosts = nss.lines().find(|l| l.trim_start().starts_with("hosts:"));
    if hosts.is_some_and(|l| l.contains("resolve"))
        || std::path::Path::new("/var/run/nscd/socket").exists()
    {
        prober_core::testutil::skip("names resolve through nscd or systemd-resolved here");
        return;
    }
    if !crate::support::require_tools(
        &["python3"],
        "no python3 for the silent DNS server (.ci/run has it)",
    ) {
        return;
    }
    let Some(ns) = crate::support::Netns::new("resolve") else {
        return;
    };
    // `ip netns exec` mounts /etc/netns/NAME/resolv.conf over the host's.
    let etc = std::path::PathBuf::from(format!("/etc/netns/{}", ns.name));
    std::fs::create_dir_all(&etc).unwrap();
    struct Gone(std::path::PathBuf);
    impl Drop for Gone {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
    let _etc = Gone(etc.clone());
    std::fs::write(
        etc.join("resolv.conf"),
        "nameserver 127.0.0.1\noptions timeout:5 attempts:2\n",
    )
    .unwrap();
    // A server that takes the queries and answers none (bound, so no port
    // unreachable ends the wait early).
    let mut dns = std::process::Command::new("ip")
        .args(["netns", "exec", &ns.name, "python3", "-c"])
        .arg(
            "import socket,time\n\
             s=socket.socket(socket.AF_INET,socket.SOCK_DGRAM)\n\
             s.bind(('127.0.0.1',53))\n\
             print('up',flush=True)\n\
             time.sleep(60)",
        )
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    struct Killed(std::process::Child);
    impl Drop for Killed {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let mut up = String::new();
    std::io::BufReader::new(dns.stdout.take().unwrap())
        .read_line(&mut up)
        .unwrap();
    let _dns = Killed(dns);
    assert_eq!(up.trim(), "up", "the silent DNS server started");
    let child = std::process::Command::new("ip")
        .args(["netns", "exec", &ns.name, env!("CARGO_BIN_EXE_prober")])
        .args(["run", "-c", "1", "udp://never-answered.test:9"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    // Killed if an assertion below fails first.
    let mut child = Killed(child);
    catches_term_and_int(pid);
    std::thread::sleep(Duration::from_millis(300));
    signal(pid, "INT");
    let start = Instant::now();
    let out = {
        use std::io::Read as _;
        let (mut stderr, mut stdout) = (Vec::new(), Vec::new());
        let c = &mut child.0;
        c.stderr.take().unwrap().read_to_end(&mut stderr).unwrap();
        c.stdout.take().unwrap().read_to_end(&mut stdout).unwrap();
        std::process::Output {
            status: c.wait().unwrap(),
            stdout,
            stderr,
        }
    };
    let took = start.elapsed();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(130), "{err}");
    assert!(err.contains("stopped while resolving"), "{err}");
    assert!(
        took < Duration::from_secs(2),
        "took {took:?} after the signal"
    );
}

/// Waits (at most 10 s) until process `pid` catches SIGTERM and SIGINT
/// (`SigCgt` in /proc/PID/status).
fn catches_term_and_int(pid: u32) {
    let want = (1u64 << (15 - 1)) | (1u64 << (2 - 1));
    let start = std::time::Instant::now();
    while start.elapsed() < std::time::Duration::from_secs(10) {
        let caught = std::fs::read_to_string(format!("/proc/{pid}/status"))
            .ok()
            .and_then(|s| {
                let line = s.lines().find(|l| l.starts_with("SigCgt:"))?.to_owned();
                u64::from_str_radix(line.split_whitespace().nth(1)?, 16).ok()
            });
        if caught.is_some_and(|c| c & want == want) {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    panic!("process {pid} did not catch SIGTERM and SIGINT within 10 s");
}

/// The last line of a file is whole and every line parses as `parse` says.
fn whole_lines(what: &str, text: &str) {
    assert!(
        text.is_empty() || text.ends_with('\n'),
        "{what}: torn last line: …{}",
        &text[text.len().saturating_sub(120)..]
    );
}

/// SIGTERM or SIGINT at random moments of `prober run`, with each output,
/// 20 trials: every probe once, the summaries written, and every line
/// whole (prober writes whole lines; readers need not tolerate torn ones).
#[test]
fn run_stopped_at_random_moments_writes_every_probe_once_and_whole_lines() {
    let srv = Server::start(&[]);
    let targets = [format!("udp://{}", srv.udp), format!("tcp://{}", srv.tcp)];
    let mut m = Moments::new("run_stopped_at_random_moments");
    for trial in 0..20 {
        let output = ["json", "csv", "human"][(m.next() % 3) as usize];
        let sig = ["TERM", "INT"][(m.next() % 2) as usize];
        let wait = m.millis(20, 900);
        let child = prober()
            .args(["run", "-o", output, "-i", "2ms"])
            .args(&targets)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // From the moment prober catches both signals (it sets its handlers
        // first thing in a run; before that the default action kills it, as
        // for any program still starting up).
        catches_term_and_int(child.id());
        std::thread::sleep(wait);
        signal(child.id(), sig);
        let out = child.wait_with_output().unwrap();
        let what = format!("trial {trial}: -o {output}, SIG{sig} after {wait:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!err.contains("panicked"), "{what}: {err}");
        // Stopped before any reply is possible at 20 ms: exit 1 is honest
        // then; otherwise every target answered.
        assert!(
            matches!(out.status.code(), Some(0 | 1)),
            "{what}: {:?} {err}",
            out.status
        );
        let text = String::from_utf8(out.stdout).unwrap();
        whole_lines(&what, &text);
        match output {
            "json" => {
                let lines: Vec<Value> = text
                    .lines()
                    .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{what}: {l}: {e}")))
                    .collect();
                let by_target = accounted(&lines);
                assert_eq!(by_target.len(), 2, "{what}");
            }
            "csv" => {
                let mut rows = text.lines();
                let header = rows.next().unwrap_or_else(|| panic!("{what}: empty"));
                let cols = header.split(',').count();
                let rows: Vec<&str> = rows.collect();
                assert_eq!(rows.len(), 2, "{what}: {text}");
                for r in rows {
                    assert_eq!(r.split(',').count(), cols, "{what}: {r}");
                }
            }
            _ => {
                for t in &targets {
                    let head = format!("--- {t} (");
                    let mut at = text.lines().skip_while(|l| !l.starts_with(&head));
                    assert!(at.next().is_some(), "{what}: no summary of {t}:\n{text}");
                    let counts = at.next().unwrap_or_default();
                    assert!(counts.contains(" sent, "), "{what}: {counts}");
                }
            }
        }
    }
}

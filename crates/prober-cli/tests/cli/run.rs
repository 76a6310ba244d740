//! `prober run` against `prober serve`, for every protocol and sink.

use std::collections::BTreeMap;
use std::process::Stdio;
use std::time::Duration;

use serde_json::Value;

use crate::support::{
    Server, closed_port, json_lines, of_type, ok_json, prober, run, run_json_ok, sigterm,
};

const N: u64 = 25;

#[test]
fn json_has_every_seq_once_per_protocol() {
    let srv = Server::start(&[]);
    let targets = [
        format!("tcp://{}", srv.tcp),
        format!("udp://{}", srv.udp),
        format!("tcp-connect://{}", srv.tcp),
        format!("tcp-crr://{}", srv.tcp),
    ];
    let mut args = vec![
        "run",
        "--count",
        "25",
        "--interval",
        "2ms",
        "--output",
        "json",
    ];
    args.extend(targets.iter().map(String::as_str));
    let lines = run_json_ok(&args);
    let meta = of_type(&lines, "meta");
    assert_eq!(meta.len(), 1);
    assert_eq!(meta[0]["interval_ns"], 2_000_000);
    assert_eq!(meta[0]["pacing"], "timer");
    assert!(meta[0]["kernel"].as_str().is_some_and(|k| !k.is_empty()));
    let mut seqs: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    let mut with_wake: BTreeMap<&str, usize> = BTreeMap::new();
    for p in of_type(&lines, "probe") {
        assert_eq!(p["outcome"], "ok", "{p}");
        assert!(p["rtt_ns"].as_u64().is_some() && p["sent_unix_ns"].as_u64().is_some());
        // udp://, tcp:// and tcp-crr:// (of these) read with kernel receive
        // timestamps (a TCP read with more data queued behind it drops
        // its stamp: docs/timestamps.md); tcp-connect:// reads nothing.
        let protocol = p["protocol"].as_str().unwrap();
        if ["udp", "tcp", "tcp-crr"].contains(&protocol) {
            *with_wake.entry(protocol).or_default() += usize::from(p["rx_wake_ns"].is_u64());
            assert!(p["rx_wake_ns"].as_u64() <= p["rtt_ns"].as_u64(), "{p}");
        } else {
            assert!(p["rx_wake_ns"].is_null(), "{p}");
        }
        seqs.entry(p["target"].as_str().unwrap().to_owned())
            .or_default()
            .push(p["seq"].as_u64().unwrap());
    }
    // A UDP reply has its stamp (one may be set aside as a clock
    // anomaly). A TCP read drops its stamp when more data was queued
    // behind it, which a loaded machine (the client read late) makes
    // common: 65 of 75 had one in a run beside a busy loop.
    let wakes = |p: &str| with_wake.get(p).copied().unwrap_or(0);
    assert!(wakes("udp") >= 24, "{with_wake:?}");
    assert!(
        wakes("tcp") + wakes("tcp-crr") >= 25,
        "{with_wake:?} of 25 each with a wake-up"
    );
    let summaries = of_type(&lines, "summary");
    assert_eq!(summaries.len(), 4);
    for (t, s) in targets.iter().zip(&summaries) {
        assert_eq!(s["target"], t.as_str());
        let mut got = seqs.remove(t.as_str()).unwrap_or_default();
        got.sort_unstable();
        assert_eq!(got, (0..N).collect::<Vec<_>>(), "{t}");
        assert_eq!(
            (s["sent"].as_u64(), s["ok"].as_u64()),
            (Some(N), Some(N)),
            "{s}"
        );
        assert_eq!(s["rtt"]["count"], N);
        assert_eq!(s["settings"]["count"], N);
        assert!(s["rtt"]["p50"].as_u64().unwrap() > 0);
    }
}

#[test]
fn dropped_requests_are_exact_timeouts_and_exit_as_ping() {
    let srv = Server::start(&["--drop-every", "5"]);
    let target = format!("udp://{}", srv.udp);
    // 20 % loss: exit 1 only with --fail-on-loss below it.
    for (max, code) in [("10", 1), ("25", 0)] {
        let args = ["run", "-c", "20", "-i", "2ms", "-W", "200ms", "-q"];
        let out = run(&[&args[..], &["--fail-on-loss", max, &target]].concat());
        assert_eq!(out.status.code(), Some(code), "--fail-on-loss {max}");
    }
    // As ping: some replies arrived, so 0.
    let out = run(&[
        "run", "-c", "20", "-i", "2ms", "-W", "200ms", "-o", "json", &target,
    ]);
    assert_eq!(out.status.code(), Some(0));
    let lines = json_lines(&out);
    let s = of_type(&lines, "summary")[0];
    assert_eq!(
        (s["sent"].as_u64(), s["ok"].as_u64(), s["timeout"].as_u64()),
        (Some(20), Some(16), Some(4))
    );
    let timed_out: Vec<u64> = of_type(&lines, "probe")
        .iter()
        .filter(|p| p["outcome"] == "timeout")
        .map(|p| p["seq"].as_u64().unwrap())
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    assert_eq!(timed_out, [4, 9, 14, 19]);
}

#[test]
fn refused_target_fails_alone() {
    let srv = Server::start(&[]);
    let good = format!("tcp://{}", srv.tcp);
    let bad = format!("tcp://127.0.0.1:{}", closed_port());
    let out = run(&["run", "-c", "10", "-i", "2ms", "-o", "json", &good, &bad]);
    assert_eq!(out.status.code(), Some(1));
    let lines = json_lines(&out);
    let s = of_type(&lines, "summary");
    assert_eq!(
        (s[0]["ok"].as_u64(), s[0]["error"].as_u64()),
        (Some(10), Some(0))
    );
    assert_eq!(
        (s[1]["ok"].as_u64(), s[1]["error"].as_u64()),
        (Some(0), Some(10))
    );
    let err = of_type(&lines, "probe")
        .into_iter()
        .find(|p| p["target"] == bad.as_str())
        .unwrap();
    assert!(err["error"].as_str().unwrap().contains("refused"), "{err}");
}

#[test]
fn human_output_has_summaries_and_table() {
    let srv = Server::start(&[]);
    let a = format!("tcp://{}", srv.tcp);
    let b = format!("udp://{}", srv.udp);
    let out = run(&["run", "-c", "5", "-i", "2ms", &a, &b]);
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains(&format!("--- {a} ")), "{text}");
    assert!(
        text.contains("5 sent, 5 ok, 0 timeout, 0 error, 0.0% loss"),
        "{text}"
    );
    assert!(text.contains("rtt       min/p50/p90/p99/max = "), "{text}");
    assert!(text.contains("interval 2ms, pacing timer"), "{text}");
    // The summary table is the last; the split table before it has its own.
    let header = text
        .lines()
        .rfind(|l| l.starts_with("target "))
        .expect("table header");
    assert!(text.contains("where the time goes, side by side"), "{text}");
    for col in [
        "count", "loss", "mean", "std", "min", "p25", "p50", "p75", "p90", "p99", "max",
    ] {
        assert!(
            header.split_whitespace().any(|c| c == col),
            "{col} in {header}"
        );
    }
    assert_eq!(
        text.lines().filter(|l| l.contains(" seq=")).count(),
        10,
        "{text}"
    );
    let quiet = run(&["run", "-q", "-c", "5", "-i", "2ms", &a]);
    assert!(!String::from_utf8(quiet.stdout).unwrap().contains("seq="));
}

#[test]
fn csv_has_a_header_and_a_row_per_target() {
    let srv = Server::start(&[]);
    let a = format!("tcp://{}", srv.tcp);
    let b = format!("udp://{}", srv.udp);
    let out = run(&[
        "run",
        "-c",
        "5",
        "-i",
        "2ms",
        "-o",
        "csv",
        "--fields",
        "target,sent,ok,p50,lat.p99,pacing",
        &a,
        &b,
    ]);
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8(out.stdout).unwrap();
    let rows: Vec<Vec<&str>> = text.lines().map(|l| l.split(',').collect()).collect();
    assert_eq!(rows.len(), 3, "{text}");
    assert_eq!(
        rows[0],
        ["target", "sent", "ok", "p50", "lat.p99", "pacing"]
    );
    assert_eq!(rows[1][..3], [a.as_str(), "5", "5"]);
    assert_eq!(rows[2][0], b);
    assert!(rows[1][3].parse::<f64>().unwrap() > 0.0);
    assert_eq!(rows[1][5], "timer");
}

#[test]
fn self_test_measures_every_protocol() {
    let lines = run_json_ok(&["run", "-c", "10", "-o", "json"]);
    let protos: Vec<&str> = of_type(&lines, "summary")
        .iter()
        .map(|s| s["protocol"].as_str().unwrap())
        .collect();
    // In the protocol list's order, each protocol's own self-test targets:
    // these, and any a protocol added since has (each answering below).
    let base = [
        "tcp",
        "tcp-connect",
        "tcp-crr",
        "udp",
        "grpc",
        "grpcs",
        "grpc+stream",
        "http",
        "h2c",
        "https",
    ];
    let in_order: Vec<&str> = protos
        .iter()
        .copied()
        .filter(|p| base.contains(p))
        .collect();
    assert_eq!(in_order, base, "{protos:?}");
    // ICMP joins when a socket can be opened (always as root).
    let icmp = protos.iter().filter(|p| **p == "icmp").count();
    if crate::support::is_root() {
        assert!(icmp >= 1, "{protos:?}");
    }
    // Every target of the meta line has its summary.
    let meta = of_type(&lines, "meta")[0]["targets"]
        .as_array()
        .unwrap()
        .len();
    assert_eq!(protos.len(), meta, "{protos:?}");
    for s in of_type(&lines, "summary") {
        assert_eq!(s["ok"], 10, "every rung of the ladder answers: {s}");
    }
    assert_eq!(of_type(&lines, "probe").len(), 10 * protos.len());
}

#[test]
fn closed_loop_and_burst() {
    let srv = Server::start(&[]);
    let a = format!("tcp://{}", srv.tcp);
    for args in [
        ["-i", "0", "-b", "1"],
        ["-i", "0", "-b", "4"],
        ["-i", "5ms", "-b", "3"],
    ] {
        let mut all = vec!["run", "-c", "30", "-o", "json"];
        all.extend(args);
        all.push(&a);
        let out = run(&all);
        assert_eq!(out.status.code(), Some(0), "{args:?}");
        let lines = json_lines(&out);
        let mut seqs: Vec<u64> = of_type(&lines, "probe")
            .iter()
            .map(|p| p["seq"].as_u64().unwrap())
            .collect();
        seqs.sort_unstable();
        assert_eq!(seqs, (0..30).collect::<Vec<_>>(), "{args:?}");
    }
}

#[test]
fn sigterm_stops_and_still_reports() {
    let srv = Server::start(&[]);
    let a = format!("tcp://{}", srv.tcp);
    let child = prober()
        .args(["run", "-i", "5ms", "-o", "json", &a])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(400));
    sigterm(child.id());
    let out = child.wait_with_output().unwrap();
    let lines = ok_json(&out);
    let probes = of_type(&lines, "probe");
    let s = of_type(&lines, "summary");
    assert_eq!(s.len(), 1);
    assert!(probes.len() > 10, "{} probes", probes.len());
    assert_eq!(s[0]["sent"].as_u64(), Some(probes.len() as u64));
    let v: Vec<&Value> = probes
        .into_iter()
        .filter(|p| p["outcome"] != "ok")
        .collect();
    assert!(v.is_empty(), "{v:?}");
}

/// A reader of the JSON lines that reads nothing for 1.5 s (the pipe fills
/// within 0.1 s at 1 ms): the probes keep their schedule, on the one
/// runtime thread adaptive receive runs on, and every line arrives once the
/// reader reads. Before standard output had a writer thread of its own, the
/// full pipe stopped the schedule until it was read: send lag 1.47 s.
#[test]
fn a_reader_that_falls_behind_does_not_hold_up_the_probes() {
    let srv = Server::start(&[]);
    let a = format!("udp://{}", srv.udp);
    let mut child = prober()
        .args(["run", "-i", "1ms", "-d", "2s", "-o", "json", &a])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    let mut stdout = child.stdout.take().unwrap();
    let mut text = String::new();
    std::io::Read::read_to_string(&mut stdout, &mut text).unwrap();
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(0));
    let lines: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let probes = of_type(&lines, "probe");
    let s = of_type(&lines, "summary");
    assert_eq!(s.len(), 1);
    assert_eq!(s[0]["sent"].as_u64(), Some(probes.len() as u64));
    assert!(probes.len() >= 1900, "{} probes", probes.len());
    // A stall would show as one send lag as long as it; the machine's own
    // hiccups stay far below 300 ms.
    let worst = probes
        .iter()
        .filter_map(|p| p["send_lag_ns"].as_u64())
        .max()
        .unwrap();
    assert!(
        worst < 300_000_000,
        "send lag up to {} ms",
        worst / 1_000_000
    );
}

/// A reader that never reads: the first SIGINT stops the probes, the
/// results wait for the reader, and a second SIGINT exits at once with
/// 130, as it says in the README. The signals are handled on a thread of
/// their own: on the one runtime thread, the wait for the writer thread
/// held the handler too, and the process ignored every Ctrl-C.
#[test]
fn a_second_ctrl_c_exits_while_nobody_reads_the_output() {
    let srv = Server::start(&[]);
    let a = format!("udp://{}", srv.udp);
    let mut child = prober()
        .args(["run", "-i", "1ms", "-o", "json", &a])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(800));
    crate::support::signal(child.id(), "INT");
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        child.try_wait().unwrap().is_none(),
        "the results are still waiting for the reader"
    );
    crate::support::signal(child.id(), "INT");
    let started = std::time::Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if started.elapsed() > Duration::from_secs(10) {
            let _ = child.kill();
            panic!("still running 10 s after the second SIGINT");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(status.code(), Some(130));
}

/// Against a peer that never answers, the first Ctrl-C says what the stop
/// waits for; the second ends the wait at once, and the statistics are
/// still written, the probes in flight counted as timeouts, exit 130.
#[test]
fn a_second_ctrl_c_writes_what_is_known() {
    let srv = Server::start(&["--drop-every", "1"]);
    let a = format!("udp://{}", srv.udp);
    let child = prober()
        .args(["run", "-W", "5s", "-i", "100ms", "-o", "json", "-q", &a])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(700));
    crate::support::signal(child.id(), "INT");
    std::thread::sleep(Duration::from_millis(300));
    crate::support::signal(child.id(), "INT");
    let started = std::time::Instant::now();
    let out = child.wait_with_output().unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "the second Ctrl-C did not stop the wait: {:?}",
        started.elapsed()
    );
    assert_eq!(out.status.code(), Some(130));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(
            "prober: stopping: waiting up to 5s for the probes in flight (Ctrl-C again to stop now)"
        ),
        "{err}"
    );
    assert!(
        err.contains("probes still in flight count as timeouts"),
        "{err}"
    );
    let lines = json_lines(&out);
    let s = &of_type(&lines, "summary")[0];
    let sent = s["sent"].as_u64().unwrap();
    assert!(sent >= 3, "{s}");
    assert_eq!(
        s["timeout"].as_u64(),
        Some(sent),
        "every probe unanswered: {s}"
    );
}

#[test]
fn serve_exits_cleanly_on_sigterm() {
    let srv = Server::start(&[]);
    std::thread::sleep(Duration::from_millis(100));
    sigterm(srv.pid());
    assert_eq!(srv.wait().code(), Some(0));
}

#[test]
fn busy_poll_on_both_sides_answers_every_probe() {
    let srv = Server::start(&["--busy-poll"]);
    let mut targets = vec![format!("tcp://{}", srv.tcp), format!("udp://{}", srv.udp)];
    if crate::support::is_root() {
        targets.push("icmp://127.0.0.1".to_owned());
    }
    let mut args = vec!["run", "--busy-poll", "-c", "200", "-i", "0", "-o", "json"];
    args.extend(targets.iter().map(String::as_str));
    let out = run(&args);
    let lines = ok_json(&out);
    assert_eq!(of_type(&lines, "meta")[0]["receive"], "busy-poll");
    for s in of_type(&lines, "summary") {
        assert_eq!(
            (s["sent"].as_u64(), s["ok"].as_u64()),
            (Some(200), Some(200)),
            "{s}"
        );
    }
    // Spin pacing implies busy-poll receive where there are cores to spare;
    // else the receive is `run`'s default, adaptive.
    let out = run(&[
        "run",
        "--pacing",
        "spin",
        "-c",
        "20",
        "-i",
        "1ms",
        "-o",
        "json",
        &targets[1],
    ]);
    assert_eq!(out.status.code(), Some(0));
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    let want = if cores >= 4 { "busy-poll" } else { "adaptive" };
    assert_eq!(of_type(&json_lines(&out), "meta")[0]["receive"], want);
}

#[test]
fn splits_stay_complete_with_busy_poll_on_either_side() {
    // A busy-polling responder stamps and follows up as the async one
    // does, and a busy-polling client asks for it, over UDP and TCP.
    let srv = Server::start(&["--busy-poll"]);
    let target = format!("udp://{}", srv.udp);
    for client in [None, Some("--busy-poll")] {
        let mut args = vec!["run", "-c", "300", "-i", "1ms", "-o", "json"];
        args.extend(client);
        args.push(&target);
        let lines = ok_json(&run(&args));
        let s = of_type(&lines, "summary")[0];
        assert_eq!(s["ok"], 300, "{client:?}: {s}");
        // The last reply's stamp may come after the run ends.
        let complete = s["split"]["complete"].as_u64().unwrap();
        assert!(complete >= 299, "{client:?}: {}", s["split"]);
        for part in ["client_send", "network", "responder_wake", "responder_send"] {
            let n = s["parts"][part]["count"].as_u64().unwrap_or(0);
            assert!(n >= 299, "{client:?}: {part} known for {n} of 300");
        }
    }
    drop(srv);
    // TCP, against a responder that busy-polls TCP only, and the async
    // one: two spinners are all this machine's cores, and at 1 ms an RTT
    // stretched by them outlasts the interval, so that a reply is read
    // with the next one behind it (no receive stamp of its own: client
    // wake and network unknown). At 10 ms that is rare.
    for responder in [&["--busy-poll"][..], &[]] {
        let mut args = vec!["--quiet", "--tcp", "127.0.0.1:0"];
        args.extend(responder);
        let serve = crate::support::Serve::start(&args, 1);
        let target = format!("tcp://{}", serve.addr("tcp"));
        for client in [None, Some("--busy-poll")] {
            if responder.is_empty() && client.is_none() {
                continue;
            }
            let mut args = vec!["run", "-c", "100", "-i", "10ms", "-o", "json"];
            args.extend(client);
            args.push(&target);
            let lines = ok_json(&run(&args));
            let s = of_type(&lines, "summary")[0];
            let case = format!("{responder:?} {client:?}");
            let receive = of_type(&lines, "meta")[0]["receive"].clone();
            assert_eq!(
                receive == "busy-poll",
                client.is_some(),
                "{case}: {receive}"
            );
            assert_eq!(s["ok"], 100, "{case}: {s}");
            // The one part this load can take: a reply read while a later
            // segment (the next reply, or a follow-up) had arrived behind
            // it, which TCP merges and stamps with the later arrival, so the
            // client has no receive stamp of its own. Each such probe says
            // so (`client_receive_stamp`); most were read after the next
            // probe was sent. Any other missing stamp is a defect of the
            // stamps or follow-ups under test: at most one. (Under the
            // suite a run once had 11 merged reads in 100; with two busy
            // loops beside both spinners, up to 36.)
            let probes = of_type(&lines, "probe");
            let other: Vec<String> = probes
                .iter()
                .filter_map(|p| {
                    let why = p["split_missing"].as_str()?;
                    (why != "client_receive_stamp").then(|| format!("seq {}: {why}", p["seq"]))
                })
                .collect();
            assert!(other.len() <= 1, "{case}: {other:?} {}", s["split"]);
            let complete = s["split"]["complete"].as_u64().unwrap();
            assert!(complete >= 50, "{case}: {}", s["split"]);
            for part in ["client_send", "responder_wake", "responder_send"] {
                let n = s["parts"][part]["count"].as_u64().unwrap_or(0);
                assert!(n >= 99, "{case}: {part} known for {n} of 100");
            }
        }
        // Back to back the stamps ride in the next response (interleaved).
        if !responder.is_empty() {
            let lines = ok_json(&run(&[
                "run", "-c", "2000", "-i", "0", "-q", "-o", "json", &target,
            ]));
            let s = of_type(&lines, "summary")[0];
            assert_eq!(s["ok"], 2000, "{s}");
            assert!(
                s["split"]["complete"].as_u64().unwrap() >= 1950,
                "{}",
                s["split"]
            );
            let n = s["parts"]["responder_send"]["count"].as_u64().unwrap_or(0);
            assert!(n >= 1990, "responder send known for {n} of 2000");
        }
    }
}

#[test]
fn size_on_a_target_without_payload_is_a_warning_not_an_error() {
    let srv = Server::start(&[]);
    let tcp = format!("tcp-connect://{}", srv.tcp);
    let udp = format!("udp://{}", srv.udp);
    let out = run(&[
        "run", "-q", "-o", "json", "-c", "2", "-i", "10ms", "--size", "100", &tcp, &udp,
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!("--size has no effect on {tcp}")),
        "{err}"
    );
    assert!(!err.contains(&format!("no effect on {udp}")), "{err}");
    let lines = ok_json(&out);
    let sizes: Vec<_> = of_type(&lines, "summary")
        .iter()
        .map(|s| s["settings"]["size"].as_u64())
        .collect();
    assert_eq!(sizes, [Some(100), Some(100)]);
}

/// Local ports of the sockets (`ss` protocol flag `-u` or `-t`) connected
/// to `dst`: established ones only (connected UDP sockets are too), not
/// another test's TIME_WAIT sockets to a server that had the same port
/// (seen once: five tcp ports).
fn local_ports(flag: &str, dst: &str) -> std::collections::BTreeSet<String> {
    let out = std::process::Command::new("ss")
        .args(["-Han", flag, "dst", dst])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        // Connected UDP sockets show as ESTAB too.
        .filter(|l| l.starts_with("ESTAB"))
        .filter_map(|l| l.split_whitespace().nth(3))
        .filter_map(|local| local.rsplit_once(':').map(|(_, p)| p.to_owned()))
        .collect()
}

/// `--flows 3` spreads a udp and a tcp target over three flows each: their
/// own sockets (three source ports each, as `ss` sees them), their own
/// statistics, named `#flow=I`.
#[test]
fn flows_leave_from_their_own_source_ports_with_their_own_statistics() {
    let serve = crate::support::Serve::start(
        &["--quiet", "--tcp", "127.0.0.1:0", "--udp", "127.0.0.1:0"],
        2,
    );
    let (tcp, udp) = (serve.addr("tcp").to_owned(), serve.addr("udp").to_owned());
    let child = crate::support::prober()
        .args([
            "run", "-o", "json", "-q", "-i", "10ms", "-d", "2s", "--flows", "3",
        ])
        .arg(format!("udp://{udp}"))
        .arg(format!("tcp://{tcp}"))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(1000));
    let (udp_ports, tcp_ports) = (local_ports("-u", &udp), local_ports("-t", &tcp));
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(udp_ports.len(), 3, "udp source ports {udp_ports:?}");
    assert_eq!(tcp_ports.len(), 3, "tcp source ports {tcp_ports:?}");
    let lines = crate::support::json_lines(&out);
    let summaries: BTreeMap<String, &Value> = lines
        .iter()
        .filter(|l| l["type"] == "summary")
        .map(|l| (l["target"].as_str().unwrap().to_owned(), l))
        .collect();
    let want: Vec<String> = (0..3)
        .map(|i| format!("tcp://{tcp}#flow={i}"))
        .chain((0..3).map(|i| format!("udp://{udp}#flow={i}")))
        .collect();
    assert_eq!(summaries.keys().cloned().collect::<Vec<_>>(), want);
    for (target, s) in &summaries {
        let sent = s["sent"].as_u64().unwrap();
        assert!(sent >= 150, "{target}: {sent} sent");
        assert_eq!(s["ok"].as_u64(), Some(sent), "{target}: {s}");
    }
    // Only where one socket carries the run.
    let (code, _, err) = crate::support::run_json(&["run", "-c", "1", "--flows", "2", "127.0.0.1"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("--flows applies to tcp:// and udp://"),
        "{err}"
    );
    drop(serve);
}

/// The kernel's PM QoS CPU latency target now, in µs.
fn cpu_latency_now_us() -> i32 {
    let mut v = [0u8; 4];
    std::io::Read::read_exact(
        &mut std::fs::File::open("/dev/cpu_dma_latency").expect("a PM QoS device"),
        &mut v,
    )
    .unwrap();
    i32::from_ne_bytes(v)
}

#[test]
fn cpu_latency_is_held_while_the_run_lasts_and_recorded() {
    let srv = Server::start(&[]);
    let target = format!("udp://{}", srv.udp);
    let args = [
        "run",
        "--cpu-latency",
        "0us",
        "-q",
        "-c",
        "300",
        "-i",
        "1ms",
        "-o",
        "json",
        &target,
    ];
    if !std::path::Path::new("/dev/cpu_dma_latency").exists() {
        crate::support::fails(&args, "this kernel has no PM QoS device");
        return;
    }
    if !crate::support::is_root() {
        crate::support::fails(&args, "it takes root");
        return;
    }
    // 500ns is held as 0 µs, and recorded as held.
    let out = run(&[
        "run",
        "--cpu-latency",
        "500ns",
        "-c",
        "1",
        "-o",
        "json",
        &target,
    ]);
    assert_eq!(of_type(&ok_json(&out), "meta")[0]["cpu_latency_ns"], 0);
    let before = cpu_latency_now_us();
    assert!(
        before > 0,
        "another process holds a request of 0 µs: this test cannot tell ours"
    );
    let child = crate::support::prober()
        .args(args)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(150));
    let during = cpu_latency_now_us();
    let out = child.wait_with_output().unwrap();
    let after = cpu_latency_now_us();
    assert_eq!(during, 0, "the request was not held (before {before} µs)");
    assert_eq!(after, before, "the request outlived the run");
    let lines = ok_json(&out);
    assert_eq!(of_type(&lines, "meta")[0]["cpu_latency_ns"], 0);
    assert_eq!(of_type(&lines, "summary")[0]["ok"], 300);
    // Without it, the settings say none was made.
    let out = run(&["run", "-c", "2", "-i", "1ms", "-o", "json", &target]);
    assert!(of_type(&ok_json(&out), "meta")[0]["cpu_latency_ns"].is_null());
    // `report` takes it too (every command's help lists it): what fails
    // here is the missing file, not the flag.
    let out = run(&["report", "--cpu-latency", "0us", "/nonexistent"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("/nonexistent") && !err.contains("cpu-latency"),
        "{err}"
    );
    // Someone without the right to the device gets a clear refusal, before
    // any probe. A copy of the binary that anyone may run: the build's
    // directory may be closed to others.
    let dir = crate::support::Files::new("cpu-latency");
    let bin = dir.path("prober");
    std::fs::copy(env!("CARGO_BIN_EXE_prober"), &bin).unwrap();
    let open = |p: &str, mode| {
        std::fs::set_permissions(p, std::os::unix::fs::PermissionsExt::from_mode(mode)).unwrap();
    };
    open(&bin, 0o755);
    open(&dir.path(""), 0o755);
    let out = std::process::Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(&bin)
        .args(args)
        .output()
        .expect("setpriv (util-linux) runs");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("--cpu-latency: cannot request") && err.contains("it takes root"),
        "{err}"
    );
    assert!(out.stdout.is_empty());
}

/// The self-test runs its targets one at a time whatever -i and -c say,
/// back to back included: no target's probes overlap another's.
#[test]
fn the_self_test_runs_one_target_at_a_time() {
    let out = run(&["run", "-i", "0", "-c", "100", "-o", "json"]);
    let lines = ok_json(&out);
    let mut spans: std::collections::BTreeMap<String, (u64, u64)> = Default::default();
    for p in of_type(&lines, "probe") {
        let sent = p["sent_unix_ns"].as_u64().unwrap();
        let end = sent + p["rtt_ns"].as_u64().unwrap_or(0);
        let span = spans
            .entry(p["target"].as_str().unwrap().to_owned())
            .or_insert((sent, end));
        *span = (span.0.min(sent), span.1.max(end));
    }
    assert!(spans.len() >= 10, "{spans:?}");
    let mut by_start: Vec<_> = spans.into_iter().collect();
    by_start.sort_by_key(|(_, (start, _))| *start);
    for pair in by_start.windows(2) {
        let ((a, (_, a_end)), (b, (b_start, _))) = (&pair[0], &pair[1]);
        assert!(a_end <= b_start, "{a} and {b} overlap");
    }
}

/// `--one-at-a-time` runs the targets one after another, each to its end;
/// without -c or -d it is refused, as the first target would never end.
#[test]
fn one_at_a_time_runs_targets_in_turn() {
    let srv = Server::start(&[]);
    let (t, u) = (format!("tcp://{}", srv.tcp), format!("udp://{}", srv.udp));
    let out = run(&[
        "run",
        "--one-at-a-time",
        "-i",
        "0",
        "-c",
        "200",
        "-o",
        "json",
        &t,
        &u,
    ]);
    let lines = ok_json(&out);
    let span = |target: &str| {
        let sent: Vec<u64> = of_type(&lines, "probe")
            .iter()
            .filter(|p| p["target"] == target)
            .map(|p| p["sent_unix_ns"].as_u64().unwrap())
            .collect();
        (*sent.iter().min().unwrap(), *sent.iter().max().unwrap())
    };
    let (a, b) = (span(&t), span(&u));
    assert!(a.1 < b.0 || b.1 < a.0, "{a:?} and {b:?} overlap");
    crate::support::fails(
        &["run", "--one-at-a-time", &t, &u],
        "give -c COUNT or -d DURATION",
    );
}

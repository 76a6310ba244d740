//! ICMP: both socket kinds, permissions, exact loss and ICMP errors, inside
//! network namespaces the tests create.

use crate::support::{Netns, json_lines, of_type, ok_json, run, run_json_ok};

/// True if `nft` can run here; otherwise the test says it is skipped.
fn have_nft(test: &str) -> bool {
    let ok = std::process::Command::new("nft")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        prober_core::testutil::skip(format_args!(
            "{test} needs nft (nftables; .ci/run installs it)"
        ));
    }
    ok
}

fn summary(out: &std::process::Output) -> serde_json::Value {
    assert!(
        out.status.code() != Some(2),
        "prober failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines = json_lines(out);
    let s = of_type(&lines, "summary")[0].clone();
    assert_eq!(
        s["sent"].as_u64(),
        Some(
            s["ok"].as_u64().unwrap()
                + s["timeout"].as_u64().unwrap()
                + s["error"].as_u64().unwrap()
        )
    );
    s
}

#[test]
fn raw_socket_on_loopback_v4_and_v6() {
    if !crate::support::require_root("raw ICMP sockets need root or CAP_NET_RAW") {
        return;
    }
    let mut args = vec![
        "run",
        "-c",
        "20",
        "-i",
        "2ms",
        "--icmp-socket",
        "raw",
        "-o",
        "json",
        "127.0.0.1",
    ];
    let has_v6 = std::net::UdpSocket::bind("[::1]:0").is_ok();
    if has_v6 {
        args.push("icmp://[::1]");
    }
    let lines = run_json_ok(&args);
    let sums = of_type(&lines, "summary");
    assert_eq!(sums.len(), 1 + usize::from(has_v6));
    for s in sums {
        assert_eq!(
            (s["sent"].as_u64(), s["ok"].as_u64()),
            (Some(20), Some(20)),
            "{s}"
        );
        assert_eq!(s["protocol"], "icmp");
        assert_eq!(s["corrupt"], 0);
        // ping's number sits beside the RTT, and is the shorter: it stops
        // at the kernel's receive stamp.
        let (ping, rtt) = (s["ping_rtt"]["p50"].as_u64(), s["rtt"]["p50"].as_u64());
        assert!(ping.is_some() && ping <= rtt, "{s}");
    }
    // The human table says, under it, what ping would print.
    let out = crate::support::run(&[
        "run",
        "-c",
        "5",
        "-i",
        "10ms",
        "--icmp-socket",
        "raw",
        "127.0.0.1",
    ]);
    let text = String::from_utf8_lossy(&out.stdout);
    let table = text
        .rsplit("(rtt: user send to user receive")
        .next()
        .unwrap();
    assert!(
        table.contains("ping prints less, to the kernel's receive stamp: p50 "),
        "{text}"
    );
    let mut seqs: Vec<u64> = of_type(&lines, "probe")
        .iter()
        .filter(|p| p["target"] == "icmp://127.0.0.1")
        .map(|p| p["seq"].as_u64().unwrap())
        .collect();
    seqs.sort_unstable();
    assert_eq!(seqs, (0..20).collect::<Vec<_>>());
    // User send to user receive, as every protocol's RTT; ping's
    // convention (to the kernel's receive stamp) is `ping_rtt_ns` beside it.
    assert_eq!(
        of_type(&lines, "meta")[0]["targets"][0]["timestamps"],
        "user"
    );
    for p in of_type(&lines, "probe") {
        if let (Some(rtt), Some(k), Some(ping)) = (
            p["rtt_ns"].as_u64(),
            p["kernel_rtt_ns"].as_u64(),
            p["ping_rtt_ns"].as_u64(),
        ) {
            assert!(k <= ping && ping <= rtt, "{p}");
        }
    }
    // The reply's TTL (hop limit), as ping shows it: 64 on loopback.
    for p in of_type(&lines, "probe") {
        assert_eq!(p["ttl"], 64, "{p}");
    }
}

/// Sixteen targets share one raw socket, and two runtime workers drain its
/// error queue: a probe whose transmit stamp another worker had just read
/// and not filed found the queue empty and lost its client send part (about
/// 2 % of these probes did, before the queue's readers took a lock).
#[test]
fn every_probe_keeps_its_send_stamp_when_workers_share_the_socket() {
    if !crate::support::require_root("raw ICMP sockets need root or CAP_NET_RAW") {
        return;
    }
    let hosts: Vec<String> = (1..=16).map(|i| format!("127.0.0.{i}")).collect();
    let mut args = vec![
        "--threads",
        "2",
        "run",
        "-c",
        "1500",
        "-i",
        "300us",
        "--icmp-socket",
        "raw",
        "-o",
        "json",
    ];
    args.extend(hosts.iter().map(String::as_str));
    let lines = run_json_ok(&args);
    let probes = of_type(&lines, "probe");
    let ok: Vec<_> = probes.iter().filter(|p| p["outcome"] == "ok").collect();
    assert!(
        ok.len() >= 12_000,
        "{} of {} answered",
        ok.len(),
        probes.len()
    );
    // Lost stamps, not a clock that moved (`stamp_order`, `clock_step`).
    let lost = ok
        .iter()
        .filter(|p| p["split_missing"] == "client_send_stamp")
        .count();
    assert_eq!(
        lost,
        0,
        "{lost} of {} answered probes lost their send stamp",
        ok.len()
    );
}

#[test]
fn datagram_socket_where_the_namespace_allows_it() {
    let Some(ns) = Netns::new("dgram") else {
        return;
    };
    ns.ping_group_range("0 2147483647");
    let out = ns.prober(
        &[],
        &[
            "run",
            "-c",
            "10",
            "-i",
            "2ms",
            "--icmp-socket",
            "dgram",
            "-o",
            "json",
            "127.0.0.1",
            "::1",
        ],
    );
    let lines = ok_json(&out);
    for s in of_type(&lines, "summary") {
        assert_eq!(s["ok"].as_u64(), Some(10), "{s}");
    }
    for p in of_type(&lines, "probe") {
        assert_eq!(p["ttl"], 64, "{p}");
    }
}

#[test]
fn datagram_socket_refused_names_both_remedies() {
    let Some(ns) = Netns::new("nodgram") else {
        return;
    };
    ns.ping_group_range("1 0");
    let out = ns.prober(
        &[],
        &["run", "-c", "1", "--icmp-socket", "dgram", "127.0.0.1"],
    );
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("ping_group_range") && err.contains("setcap cap_net_raw+ep"),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(out.stdout.is_empty());
}

#[test]
fn no_permission_at_all_is_a_clear_error() {
    let Some(ns) = Netns::new("noperm") else {
        return;
    };
    ns.ping_group_range("1 0");
    // An unprivileged user without capabilities: neither socket opens.
    let nobody = [
        "setpriv",
        "--reuid=65534",
        "--regid=65534",
        "--clear-groups",
        "--inh-caps=-all",
        "--bounding-set=-all",
    ];
    let out = ns.prober(&nobody, &["run", "-c", "1", "127.0.0.1"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("datagram socket:") && err.contains("raw socket:"),
        "{err}"
    );
    assert!(
        err.contains("ping_group_range") && err.contains("setcap"),
        "{err}"
    );
    // And the same user is allowed once the namespace allows ping sockets.
    ns.ping_group_range("0 2147483647");
    let out = ns.prober(&nobody, &["run", "-c", "3", "-i", "2ms", "127.0.0.1"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn loss_matches_what_the_filter_dropped() {
    if !have_nft("loss_matches_what_the_filter_dropped") {
        return;
    }
    for (kind, range) in [("raw", "1 0"), ("dgram", "0 2147483647")] {
        let Some(ns) = Netns::new(&format!("loss-{kind}")) else {
            return;
        };
        ns.ping_group_range(range);
        // Drop every 4th echo request on arrival (0, 4, 8, ...), as a lossy
        // network would; a drop on output would fail the send instead.
        ns.sh(
            "nft add table ip t && nft add chain ip t in '{ type filter hook input priority 0; }' \
               && nft add rule ip t in icmp type echo-request numgen inc mod 4 == 0 counter drop",
        );
        let out = ns.prober(
            &[],
            &[
                "run",
                "-c",
                "40",
                "-i",
                "2ms",
                "-W",
                "200ms",
                "--icmp-socket",
                kind,
                "-o",
                "json",
                "127.0.0.1",
            ],
        );
        // Replies arrived, so 0, as ping.
        assert_eq!(out.status.code(), Some(0), "{kind}");
        let s = summary(&out);
        assert_eq!(
            (s["sent"].as_u64(), s["ok"].as_u64(), s["timeout"].as_u64()),
            (Some(40), Some(30), Some(10)),
            "{kind}: {s}"
        );
        assert_eq!(s["loss_pct"].as_f64(), Some(25.0));
        assert_eq!(
            (s["late"].as_u64(), s["duplicate"].as_u64()),
            (Some(0), Some(0))
        );
    }
}

#[test]
fn icmp_unreachable_is_an_error_outcome() {
    if !have_nft("icmp_unreachable_is_an_error_outcome") {
        return;
    }
    for (kind, range) in [("raw", "1 0"), ("dgram", "0 2147483647")] {
        let Some(ns) = Netns::new(&format!("unreach-{kind}")) else {
            return;
        };
        ns.ping_group_range(range);
        ns.sh("nft add table ip t && nft add chain ip t in '{ type filter hook input priority 0; }' \
               && nft add rule ip t in ip daddr 127.0.0.2 icmp type echo-request reject with icmp type host-unreachable");
        let out = ns.prober(
            &[],
            &[
                "run",
                "-c",
                "5",
                "-i",
                "5ms",
                "-W",
                "300ms",
                "--icmp-socket",
                kind,
                "-o",
                "json",
                "127.0.0.2",
            ],
        );
        assert_eq!(
            out.status.code(),
            Some(1),
            "{kind}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let lines = json_lines(&out);
        let s = &of_type(&lines, "summary")[0];
        assert_eq!(
            (s["error"].as_u64(), s["ok"].as_u64()),
            (Some(5), Some(0)),
            "{kind}: {s}"
        );
        let p = &of_type(&lines, "probe")[0];
        let e = p["error"].as_str().unwrap();
        assert!(
            e.contains("destination unreachable (type 3, code 1)"),
            "{kind}: {e}"
        );
    }
}

#[test]
fn icmp_size_is_checked_first() {
    let out = run(&["run", "-s", "10", "127.0.0.1"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("size 10 is out of range for icmp"));
}

/// A deterministic loss pattern (nft `numgen inc`: of every 20 echo
/// requests, the 1st and the 11th to 13th are dropped) gives exactly the
/// expected loss bursts in every output: 50 bursts of 1 and 50 of 3 in
/// 1,000 probes, and an outage of 50 × 1 ms + 50 × 3 ms.
#[test]
fn a_deterministic_loss_pattern_gives_exactly_its_bursts() {
    if !have_nft("a_deterministic_loss_pattern_gives_exactly_its_bursts") {
        return;
    }
    let Some(ns) = Netns::new("bursts") else {
        return;
    };
    ns.sh(
        "nft add table ip t && nft add chain ip t in '{ type filter hook input priority 0; }' \
           && nft add rule ip t in icmp type echo-request numgen inc mod 20 '{ 0, 10-12 }' counter drop",
    );
    let args = [
        "run",
        "-c",
        "1000",
        "-i",
        "1ms",
        "-W",
        "200ms",
        "--icmp-socket",
        "raw",
    ];
    let out = ns.prober(&[], &[&args[..], &["-o", "json", "127.0.0.1"]].concat());
    assert_eq!(out.status.code(), Some(0));
    let s = summary(&out);
    assert_eq!(s["timeout"].as_u64(), Some(200), "{s}");
    let b = &s["loss_bursts"];
    assert_eq!(b["count"].as_u64(), Some(100), "{b}");
    assert_eq!(b["longest"].as_u64(), Some(3), "{b}");
    assert_eq!(b["lengths"], serde_json::json!({"1": 50, "2-3": 50}), "{b}");
    let outage = b["outage_s"].as_f64().unwrap();
    assert!((outage - 0.200).abs() < 1e-6, "{outage}");
    // The CSV and the human summary say the same.
    ns.sh("nft reset counters >/dev/null");
    let out = ns.prober(
        &[],
        &[
            &args[..],
            &[
                "-o",
                "csv",
                "-f",
                "target,bursts,longest_burst,outage",
                "127.0.0.1",
            ],
        ]
        .concat(),
    );
    let csv = String::from_utf8(out.stdout).unwrap();
    assert_eq!(
        csv.lines().nth(1),
        Some("icmp://127.0.0.1,100,3,200000.000"),
        "{csv}"
    );
    let out = ns.prober(&[], &[&args[..], &["-q", "127.0.0.1"]].concat());
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains(
            "bursts    100 loss bursts, longest 3, outage 0.200s; by length 1: 50, 2-3: 50"
        ),
        "{text}"
    );
}

/// `--dscp ef --source 127.0.0.2 --interface lo --fwmark 42` marks every
/// request of icmp, udp, tcp, tcp-connect and tcp-crr targets on the wire
/// and sends it from that address (a capture in a namespace reads the TOS
/// byte and the source of each, SYNs included; an nftables rule counts the
/// firewall mark on each); the options are refused where they cannot apply.
#[test]
fn dscp_and_source_hold_for_every_request_on_the_wire() {
    if !crate::support::require_tools(
        &["tcpdump"],
        "tcpdump is not installed (.ci/run installs it)",
    ) {
        return;
    }
    let Some(ns) = Netns::new("dscp") else {
        return;
    };
    let mut serve = std::process::Command::new("ip")
        .args(["netns", "exec", &ns.name, env!("CARGO_BIN_EXE_prober")])
        .args([
            "serve",
            "-q",
            "--tcp",
            "127.0.0.1:8707",
            "--udp",
            "127.0.0.1:8707",
        ])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    {
        use std::io::BufRead as _;
        let mut lines = std::io::BufReader::new(serve.stdout.take().unwrap()).lines();
        for _ in 0..2 {
            assert!(lines.next().unwrap().unwrap().starts_with("listening "));
        }
    }
    let file = std::env::temp_dir().join(format!("prober-dscp-{}.pcap", std::process::id()));
    // Counts the packets leaving with firewall mark 42.
    let nft = have_nft("dscp_and_source_hold_for_every_request_on_the_wire");
    if nft {
        ns.sh(
            "nft add table ip m && nft add chain ip m out '{ type filter hook output priority 0; }' \
               && nft add rule ip m out meta mark 42 counter",
        );
    }
    // Immediate mode: a run this short ends before libpcap's buffer
    // timeout would hand the packets over, and they would be lost at stop.
    // Immediate mode also gives a ring of frames of the snapshot length
    // (256 KiB by default): 8 frames in the default 2 MiB, which the five
    // targets' first probes overflowed now and then ("packets dropped by
    // kernel", most often when the handshake stamps' BPF program was
    // attached to lo as the run began). Headers are all this test reads.
    let dump = ns.tcpdump(
        &file,
        &["--immediate-mode", "-s", "256", "-B", "16384"],
        "icmp or port 8707",
    );
    let out = ns.prober(
        &[],
        &[
            "run",
            "--dscp",
            "ef",
            "--source",
            "127.0.0.2",
            "--interface",
            "lo",
            "--fwmark",
            "0x2a",
            "-c",
            "5",
            "-i",
            "5ms",
            "-o",
            "json",
            "--icmp-socket",
            "raw",
            "icmp://127.0.0.1",
            "udp://127.0.0.1:8707",
            "tcp://127.0.0.1:8707",
            "tcp-connect://127.0.0.1:8707",
            "tcp-crr://127.0.0.1:8707",
        ],
    );
    std::thread::sleep(std::time::Duration::from_millis(200));
    crate::support::stop(dump);
    let _ = serve.kill();
    let _ = serve.wait();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for s in of_type(&json_lines(&out), "summary") {
        assert_eq!(s["ok"].as_u64(), Some(5), "{s}");
    }
    // Read the TOS byte of every captured IPv4 packet: tcpdump -r -v.
    // Requests only: echo requests, and packets to the responder's port.
    let text = std::process::Command::new("tcpdump")
        .args(["-nv", "-r"])
        .arg(&file)
        .arg("icmp[icmptype] == icmp-echo or dst port 8707")
        .output()
        .unwrap();
    let _ = std::fs::remove_file(&file);
    let err = String::from_utf8_lossy(&text.stderr).into_owned();
    let text = String::from_utf8_lossy(&text.stdout);
    let tos: Vec<&str> = text
        .lines()
        .filter_map(|l| l.split("tos ").nth(1)?.split(',').next())
        .collect();
    // 5 echo requests, 5 datagrams, and for each tcp target a SYN and more.
    assert!(
        tos.len() >= 5 + 5 + 3 * 5,
        "{} packets:\n{text}{err}",
        tos.len()
    );
    assert!(tos.iter().all(|t| *t == "0xb8"), "{tos:?}\n{text}");
    // -v puts "SRC > DST:" on the line after each header.
    let sources: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with(' ') && l.contains(" > "))
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    assert_eq!(sources.len(), tos.len(), "{text}");
    assert!(
        sources
            .iter()
            .all(|s| *s == "127.0.0.2" || s.starts_with("127.0.0.2.")),
        "{sources:?}"
    );
    if nft {
        let list = std::process::Command::new("ip")
            .args([
                "netns", "exec", &ns.name, "nft", "list", "chain", "ip", "m", "out",
            ])
            .output()
            .unwrap();
        let list = String::from_utf8_lossy(&list.stdout);
        let marked: usize = list
            .split("counter packets ")
            .nth(1)
            .and_then(|r| r.split_whitespace().next()?.parse().ok())
            .unwrap_or_else(|| panic!("{list}"));
        assert_eq!(marked, tos.len(), "every request marked 42:\n{list}");
    }
    // A source of the other address family is refused before any probe.
    let out = run(&["run", "--source", "::1", "-c", "1", "udp://127.0.0.1:1"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("is not of the address family"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Where it cannot apply, it is refused, not ignored.
    let out = run(&["run", "--tos", "184", "-c", "1", "grpc://127.0.0.1:1"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains("--tos applies only to icmp, udp and tcp targets")
    );
}

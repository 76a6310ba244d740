//! `prober run --trace`: on loopback (no privilege: ICMP errors come back
//! on the socket's error queue), and through a fabric of namespaces with
//! two equal-cost paths, checked against mtr.

use std::process::{Command, Output};
use std::time::Duration;

use crate::support::Netns;

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// The trace's summary line of `-o json` output.
fn summary(out: &str) -> serde_json::Value {
    let line = out
        .lines()
        .rev()
        .find(|l| l.contains("\"type\":\"trace\""))
        .unwrap_or_else(|| panic!("no trace line in {out}"));
    serde_json::from_str(line).unwrap()
}

/// On loopback the destination is the first hop; over IPv6 too.
#[test]
fn a_trace_on_loopback_reaches_in_one_hop() {
    for host in ["127.0.0.1", "::1"] {
        if host == "::1" && std::net::UdpSocket::bind("[::1]:0").is_err() {
            continue; // no IPv6 on this host's loopback
        }
        let out = Command::new(env!("CARGO_BIN_EXE_prober"))
            .args([
                "run", "--trace", host, "-c", "3", "-i", "10ms", "-W", "500ms", "-o", "json",
            ])
            .env_remove("RUST_LOG")
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{host}: {}", stderr(&out));
        let text = stdout(&out);
        let t = summary(&text);
        let paths = t["paths"].as_array().unwrap();
        assert_eq!(paths.len(), 1, "{t}");
        let hops = paths[0]["hops"].as_array().unwrap();
        assert_eq!(hops.len(), 1, "{t}");
        assert_eq!(hops[0]["addr"], host, "{t}");
        assert_eq!(hops[0]["answer"], "port_unreachable", "{t}");
        assert_eq!(hops[0]["sent"], 3, "{t}");
        assert_eq!(hops[0]["received"], 3, "{t}");
        assert!(hops[0]["best_ms"].as_f64().unwrap() > 0.0, "{t}");
        // Six flows at least: the MDA's n_1 at 95 %.
        assert!(t["flows"].as_u64().unwrap() >= 6, "{t}");
        // A line per probe before the summary.
        assert!(
            text.lines()
                .filter(|l| l.contains("\"type\":\"trace_probe\""))
                .count()
                >= 9,
            "{text}"
        );
    }
    // What cannot be traced says so in one line, exit 2.
    for (args, why) in [
        (&["run", "--trace", "http://127.0.0.1:1"][..], "not http://"),
        (&["run", "--trace", "127.0.0.1", "127.0.0.2"], "one target"),
        (&["run", "--trace", "127.0.0.1", "-o", "csv"], "not CSV"),
        (&["run", "--trace", "127.0.0.1", "--flows", "4"], "--flows"),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_prober"))
            .args(args)
            .env_remove("RUST_LOG")
            .output()
            .unwrap();
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(why), "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{err}");
    }
}

/// A small fabric: the client's first router reaches the destination
/// through two others over an equal-cost multipath route hashed on ports.
/// The split is on a router, not on the client: there the hash reads the
/// packet (mtr's too), where the client's own route lookup for a raw
/// socket, which mtr sends on, hashes addresses only.
struct Fabric {
    a: Netns,
    r0: Netns,
    r1: Netns,
    r2: Netns,
    b: Netns,
}

const DEST: &str = "10.213.9.1";
const R0: &str = "10.213.0.2";
const R1: &str = "10.213.1.2";
const R2: &str = "10.213.2.2";

impl Fabric {
    /// Its namespaces are named after `tag`: tests run side by side.
    fn new(tag: &str) -> Option<Self> {
        let f = Self {
            a: Netns::new(&format!("{tag}-a"))?,
            r0: Netns::new(&format!("{tag}-r0"))?,
            r1: Netns::new(&format!("{tag}-r1"))?,
            r2: Netns::new(&format!("{tag}-r2"))?,
            b: Netns::new(&format!("{tag}-b"))?,
        };
        let link = |x: &Netns, xi: &str, xa: &str, y: &Netns, yi: &str, ya: &str| {
            // Made in the first namespace, one end moved to the second.
            x.sh(&format!(
                "ip link add {xi} type veth peer name {yi} && ip link set {yi} netns {} && ip addr add {xa}/30 dev {xi} && ip link set {xi} up",
                y.name
            ));
            y.sh(&format!(
                "ip addr add {ya}/30 dev {yi} && ip link set {yi} up"
            ));
        };
        link(&f.a, "a0", "10.213.0.1", &f.r0, "r0a", R0);
        link(&f.r0, "r01", "10.213.1.1", &f.r1, "r1a", R1);
        link(&f.r0, "r02", "10.213.2.1", &f.r2, "r2a", R2);
        link(&f.r1, "r1b", "10.213.3.1", &f.b, "b1", "10.213.3.2");
        link(&f.r2, "r2b", "10.213.4.1", &f.b, "b2", "10.213.4.2");
        f.a.sh(&format!("ip route add default via {R0}"));
        f.r0.sh(&format!(
            "sysctl -q -w net.ipv4.ip_forward=1 && sysctl -q -w net.ipv4.fib_multipath_hash_policy=1 && ip route add {DEST}/32 nexthop via {R1} dev r01 nexthop via {R2} dev r02"
        ));
        for (r, down, up) in [
            (&f.r1, "10.213.3.2", "10.213.1.1"),
            (&f.r2, "10.213.4.2", "10.213.2.1"),
        ] {
            r.sh(&format!(
                "sysctl -q -w net.ipv4.ip_forward=1 && ip route add {DEST}/32 via {down} && ip route add 10.213.0.0/30 via {up}"
            ));
        }
        f.b.sh(&format!(
            "ip addr add {DEST}/32 dev lo && ip route add 10.213.0.0/30 nexthop via 10.213.3.1 dev b1 nexthop via 10.213.4.1 dev b2"
        ));
        f.limit_icmp(0);
        Some(f)
    }

    /// Sets every router's and the destination's ICMP rate limit (ms
    /// between errors to one host after a burst; Linux's default is 1000,
    /// 0 is none). Their limit on all ICMP they send (1,000 a second after
    /// a burst of 50) is lifted: a trace's flows at every TTL at once
    /// outrun it.
    fn limit_icmp(&self, ms: u32) {
        for ns in [&self.r0, &self.r1, &self.r2, &self.b] {
            ns.sh(&format!(
                "sysctl -q -w net.ipv4.icmp_ratelimit={ms} net.ipv4.icmp_msgs_per_sec=100000 net.ipv4.icmp_msgs_burst=10000"
            ));
        }
    }
}

/// A trace of `target` from the fabric's client at 99.999 % (the test
/// must not be the one run in twenty that the default 95 % allows to miss
/// a branch), five rounds: its summary, once it exited 0.
fn fabric_trace(f: &Fabric, target: &str) -> serde_json::Value {
    let out = f.a.prober(
        &[],
        &[
            "run",
            "--trace",
            target,
            "-c",
            "5",
            "-i",
            "20ms",
            "-W",
            "300ms",
            "-o",
            "json",
            "--trace-confidence",
            "99.999",
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{target}: {}", stderr(&out));
    summary(&stdout(&out))
}

/// [`fabric_trace`], which must find both branches, three hops each, the
/// destination answering `end`, no hop losing or limited.
fn two_branches(f: &Fabric, target: &str, end: &str) -> serde_json::Value {
    let t = fabric_trace(f, target);
    let paths = t["paths"].as_array().unwrap();
    assert_eq!(paths.len(), 2, "{t}");
    let mut middle: Vec<&str> = Vec::new();
    for p in paths {
        let hops = p["hops"].as_array().unwrap();
        assert_eq!(hops.len(), 3, "{t}");
        assert_eq!(hops[0]["addr"], R0, "{t}");
        middle.push(hops[1]["addr"].as_str().unwrap());
        assert_eq!(hops[2]["addr"], DEST, "{t}");
        assert_eq!(hops[2]["answer"], end, "{t}");
        for h in hops {
            assert_eq!(h["loss_pct"], 0.0, "{t}");
            assert_eq!(h["rate_limited"], false, "{t}");
        }
        assert!(!p["flows"].as_array().unwrap().is_empty(), "{t}");
    }
    middle.sort_unstable();
    assert_eq!(middle, [R1, R2], "{t}");
    t
}

/// Both branches are found, each with the flows (source ports) that take
/// it; mtr, held to one of those ports, walks the same hops; and a router
/// that limits its ICMP shows as rate-limited, not as loss.
#[test]
fn a_trace_finds_both_ecmp_branches_and_agrees_with_mtr() {
    let Some(f) = Fabric::new("trace") else {
        return;
    };
    // The answer at the end: Port Unreachable (nothing listens on 33434).
    let t = two_branches(&f, DEST, "port_unreachable");
    let paths = t["paths"].as_array().unwrap();
    // Enough flows for 99.999 % at two next hops (the MDA's rule).
    assert!(t["flows"].as_u64().unwrap() >= 30, "{t}");
    assert_eq!(t["capped"], false, "{t}");

    // mtr from one of the first path's source ports, to the same port:
    // the same five-tuple, so the same branch.
    if crate::support::require_tools(&["mtr"], "the mtr check (.ci/run installs mtr-tiny)") {
        for p in paths {
            let port = p["flows"][0].as_u64().unwrap().to_string();
            let out = Command::new("ip")
                .args([
                    "netns", "exec", &f.a.name, "mtr", "--report", "-n", "-c", "3", "-i", "0.1",
                ])
                .args(["--udp", "-P", "33434", "-L", &port, DEST])
                .output()
                .unwrap();
            let report = stdout(&out);
            assert!(out.status.success(), "{report}{}", stderr(&out));
            let hops: Vec<&str> = report
                .lines()
                .filter_map(|l| {
                    l.split_once("|--")
                        .map(|(_, r)| r.split_whitespace().next().unwrap_or(""))
                })
                .collect();
            let want: Vec<&str> = p["hops"]
                .as_array()
                .unwrap()
                .iter()
                .map(|h| h["addr"].as_str().unwrap())
                .collect();
            assert_eq!(hops, want, "mtr from port {port}:\n{report}\nprober: {t}");
        }
    }

    // Loss on a link: R1 drops a fifth of what it forwards. The branch
    // through R1 loses it from the destination on (R1's own answers come
    // from R1, not through its forwarding), and mtr on that branch's flow
    // sees the same share, within the binomial error of the two counts.
    f.r1.sh(
        "nft -f - <<'EOF'\ntable inet trace {\n  chain forward {\n    type filter hook forward priority 0; policy accept;\n    iifname \"r1a\" numgen random mod 100 < 20 drop\n  }\n}\nEOF",
    );
    let n = 300u32;
    let out = f.a.prober(
        &[],
        &[
            "run",
            "--trace",
            DEST,
            "-c",
            &n.to_string(),
            "-i",
            "2ms",
            "-W",
            "100ms",
            "-o",
            "json",
            "--trace-confidence",
            "99.999",
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let t = summary(&stdout(&out));
    let via_r1 = t["paths"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["hops"][1]["addr"] == R1)
        .unwrap_or_else(|| panic!("no branch through R1: {t}"))
        .clone();
    let hops = via_r1["hops"].as_array().unwrap();
    assert!(
        hops[1]["loss_pct"].as_f64().unwrap() < 5.0,
        "R1 answers itself: {t}"
    );
    let ours = hops[2]["loss_pct"].as_f64().unwrap() / 100.0;
    let port = via_r1["flows"][0].as_u64().unwrap().to_string();
    let out = Command::new("ip")
        .args([
            "netns",
            "exec",
            &f.a.name,
            "mtr",
            "--report",
            "-n",
            "-c",
            &n.to_string(),
        ])
        .args(["-i", "0.002", "--udp", "-P", "33434", "-L", &port, DEST])
        .output()
        .unwrap();
    let report = stdout(&out);
    assert!(out.status.success(), "{report}{}", stderr(&out));
    let theirs = report
        .lines()
        .find(|l| l.contains("|--") && l.contains(DEST))
        .and_then(|l| l.split_whitespace().find(|w| w.ends_with('%')))
        .and_then(|w| w.trim_end_matches('%').parse::<f64>().ok())
        .unwrap_or_else(|| panic!("no loss for {DEST} in mtr's report:\n{report}"))
        / 100.0;
    // Four standard errors of the difference of two shares of n (a test
    // that fails once in 15,000 runs by chance, not once in 370).
    let p = f64::midpoint(ours, theirs);
    let bound = 4.0 * (p * (1.0 - p) * 2.0 / f64::from(n)).sqrt();
    assert!(
        (ours - theirs).abs() <= bound && (0.1..0.3).contains(&ours),
        "prober {ours:.3}, mtr {theirs:.3} (bound {bound:.3}):\n{report}\n{t}"
    );
    f.r1.sh("nft delete table inet trace");

    // Linux's own ICMP limit on the routers (a burst of 6, then one a
    // second to a host): the routers lose answers the destination behind
    // them does not, which is the routers, not the path.
    for r in [&f.r0, &f.r1, &f.r2] {
        r.sh("sysctl -q -w net.ipv4.icmp_ratelimit=1000");
    }
    let out = f.a.prober(
        &[],
        &[
            "run",
            "--trace",
            DEST,
            "-c",
            "30",
            "-i",
            "10ms",
            "-W",
            "100ms",
            "--trace-confidence",
            "99.999",
        ],
    );
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(0), "{text}{}", stderr(&out));
    assert!(text.contains("2 paths (ECMP)"), "{text}");
    assert!(
        text.contains("(ICMP rate-limited: later hops lose less)"),
        "{text}"
    );
    let last: Vec<&str> = text
        .lines()
        .filter(|l| l.trim_start().starts_with("3.") && l.contains(DEST))
        .collect();
    assert_eq!(last.len(), 2, "{text}");
    for line in last {
        assert!(
            line.contains("  0.0%"),
            "the destination answers all: {text}"
        );
    }
}

/// A TCP SYN trace (`tcp://`) and an ICMP echo trace (`icmp://`), from
/// raw sockets (root): on loopback an open port answers with a SYN-ACK
/// and ICMP with an echo reply; through the fabric the SYN flows' source
/// ports spread over both branches, the closed port answers with a reset,
/// and mtr's TCP mode saw every hop of each branch.
#[test]
fn tcp_and_icmp_traces_reach_and_find_the_branches() {
    let Some(f) = Fabric::new("trtcp") else {
        return;
    };
    let open = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = open.local_addr().unwrap().port().to_string();
    let open6 = std::net::TcpListener::bind("[::1]:0").ok();
    let mut cases = vec![
        (
            format!("tcp://127.0.0.1:{port}"),
            "127.0.0.1",
            "reply",
            "tcp",
        ),
        ("icmp://127.0.0.1".to_owned(), "127.0.0.1", "reply", "icmp"),
    ];
    if let Some(l) = &open6 {
        let p6 = l.local_addr().unwrap().port();
        cases.push((format!("tcp://[::1]:{p6}"), "::1", "reply", "tcp"));
        cases.push(("icmp://::1".to_owned(), "::1", "reply", "icmp"));
    }
    for (target, host, answer, method) in &cases {
        let out = Command::new(env!("CARGO_BIN_EXE_prober"))
            .args([
                "run", "--trace", target, "-c", "3", "-i", "10ms", "-W", "500ms", "-o", "json",
            ])
            .env_remove("RUST_LOG")
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{target}: {}", stderr(&out));
        let t = summary(&stdout(&out));
        assert_eq!(t["method"], *method, "{t}");
        let hops = t["paths"][0]["hops"].as_array().unwrap();
        assert_eq!(t["paths"].as_array().unwrap().len(), 1, "{t}");
        assert_eq!(hops.len(), 1, "{t}");
        assert_eq!(hops[0]["addr"], *host, "{t}");
        assert_eq!(hops[0]["answer"], *answer, "{target}: {t}");
        assert_eq!(hops[0]["received"], 3, "{t}");
    }

    // Through the fabric: r0 hashes the SYNs' ports, so the flows spread
    // over both branches; nothing listens on port 80 of the destination.
    let t = two_branches(&f, &format!("tcp://{DEST}"), "port_unreachable");
    let paths = t["paths"].as_array().unwrap();

    // mtr's TCP mode on the same path: its SYNs leave from a new source
    // port each (-L holds only UDP's), so it walks both branches at the
    // middle hop; every hop of each of prober's branches is one it saw.
    if crate::support::require_tools(&["mtr"], "the mtr check (.ci/run installs mtr-tiny)") {
        let out = Command::new("ip")
            .args([
                "netns", "exec", &f.a.name, "mtr", "--report", "-n", "-c", "10", "-i", "0.1",
            ])
            .args(["--tcp", "-P", "80", DEST])
            .output()
            .unwrap();
        let report = stdout(&out);
        assert!(out.status.success(), "{report}{}", stderr(&out));
        // Each hop's addresses: its line's, and the lines under it that
        // name only an address.
        let mut seen: Vec<Vec<String>> = Vec::new();
        for l in report.lines() {
            if let Some((_, r)) = l.split_once("|--") {
                seen.push(vec![r.split_whitespace().next().unwrap_or("").to_owned()]);
            } else {
                let words: Vec<&str> = l.split_whitespace().collect();
                if let (Some(last), [addr]) = (seen.last_mut(), words.as_slice())
                    && addr.parse::<std::net::IpAddr>().is_ok()
                {
                    last.push((*addr).to_owned());
                }
            }
        }
        for p in paths {
            for (i, h) in p["hops"].as_array().unwrap().iter().enumerate() {
                let addr = h["addr"].as_str().unwrap();
                assert!(
                    seen.get(i).is_some_and(|s| s.iter().any(|a| a == addr)),
                    "mtr --tcp saw no {addr} at hop {}:\n{report}\nprober: {t}",
                    i + 1
                );
            }
        }
    }

    // ICMP echo through the fabric reaches the destination over r0 and one
    // of r1, r2: a Linux router hashes an echo on its addresses alone, so
    // every identifier takes one branch.
    let t = fabric_trace(&f, &format!("icmp://{DEST}"));
    assert_eq!(t["method"], "icmp", "{t}");
    // 18 identifiers (99.999 %), each with a checksum of its own, and one
    // branch: r0 hashed none of them apart.
    assert_eq!(t["paths"].as_array().unwrap().len(), 1, "{t}");
    assert!(t["flows"].as_u64().unwrap() >= 18, "{t}");
    for p in t["paths"].as_array().unwrap() {
        let hops = p["hops"].as_array().unwrap();
        assert_eq!(hops.len(), 3, "{t}");
        assert_eq!(hops[0]["addr"], R0, "{t}");
        assert!([R1, R2].contains(&hops[1]["addr"].as_str().unwrap()), "{t}");
        assert_eq!(hops[2]["addr"], DEST, "{t}");
        assert_eq!(hops[2]["answer"], "reply", "{t}");
        assert_eq!(hops[2]["received"], 5, "{t}");
    }
    drop(open);
}

/// A job with `trace_every` traces the path to each of its udp:// targets
/// and exports it: one branch, one hop on loopback, traced again and again
/// without a change; a job with no udp:// target is refused.
#[test]
fn the_daemon_traces_a_jobs_targets_and_exports_their_paths() {
    let mut d = crate::daemon::Daemon::start(
        "paths",
        r#"
[[job]]
name = "mesh"
interval = "100ms"
trace_every = "1s"
trace_hops = true
trace_rounds = 3
labels = { zone = "z1" }
targets = ["udp://RESPONDER"]
"#,
    );
    let text = d.scrape_until("two traces of the target", Duration::from_secs(30), &|t| {
        t.lines().any(|l| {
            l.starts_with("prober_path_traces_total{")
                && l.split_whitespace()
                    .last()
                    .and_then(|n| n.parse::<u64>().ok())
                    >= Some(2)
        })
    });
    let series = |name: &str| -> String {
        text.lines()
            .find(|l| l.starts_with(&format!("{name}{{")))
            .unwrap_or_else(|| panic!("no {name}:\n{text}"))
            .to_owned()
    };
    let want = format!("probe=\"mesh\",target=\"udp://{}\",zone=\"z1\"", d.udp);
    for (name, value) in [
        ("prober_paths", "1"),
        ("prober_path_hops", "1"),
        ("prober_path_changes_total", "0"),
    ] {
        let line = series(name);
        assert!(line.contains(&want), "{line}");
        assert!(line.ends_with(&format!(" {value}")), "{line}");
    }
    // trace_hops: the one branch's one hop, the destination itself.
    let hop = series("prober_path_hop_info");
    assert!(
        hop.contains(&want)
            && hop.contains("path=\"1\",hop=\"1\",addr=\"127.0.0.1\"")
            && hop.ends_with(" 1"),
        "{hop}"
    );
    // trace_rounds: the hop measured three times a trace, all answered.
    let rtt = series("prober_path_hop_rtt_seconds");
    assert!(
        rtt.contains(&want) && rtt.contains("path=\"1\",hop=\"1\""),
        "{rtt}"
    );
    let secs: f64 = rtt.split_whitespace().last().unwrap().parse().unwrap();
    assert!(secs > 0.0 && secs < 0.1, "{rtt}");
    let loss = series("prober_path_hop_loss_ratio");
    assert!(
        loss.contains("path=\"1\",hop=\"1\"") && loss.ends_with(" 0.0"),
        "{loss}"
    );
    // The probe flow (the target itself: one flow) on the one branch.
    let flow = series("prober_path_flow");
    assert!(
        flow.contains(&want)
            && flow.contains("path=\"1\",source=\"127.0.0.1\"")
            && flow.ends_with(" 1"),
        "{flow}"
    );
    // The status page says it under the target, each branch on hover.
    let page = crate::daemon::http_get(&d.metrics, "/");
    assert!(
        page.contains("<div class=\"lb\" title=\"127.0.0.1\">1 path, 1 hop</div>"),
        "{page}"
    );
    let dir = d.dir.clone();
    let (code, err) = d.stop();
    assert_eq!(code, Some(0), "{err}");
    let _ = std::fs::remove_dir_all(&dir);

    let files = crate::support::Files::new("paths-refused");
    let cfg = files.write(
        "c.toml",
        "[[job]]\nname = \"web\"\ntrace_every = \"5m\"\ntargets = [\"http://127.0.0.1:1\"]\n",
    );
    let out = Command::new(env!("CARGO_BIN_EXE_prober"))
        .args(["serve", "--config", &cfg, "--check-config"])
        .env_remove("RUST_LOG")
        .output()
        .unwrap();
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("trace_every: traces the paths to udp://, tcp:// and icmp:// targets"),
        "{err}"
    );
}

/// A job's `tcp://` and `icmp://` targets are traced with their own
/// protocol (raw sockets: root): the responder's port answers the SYNs,
/// the host the echoes.
#[test]
fn the_daemon_traces_tcp_and_icmp_targets_too() {
    if !crate::support::require_root("tcp:// and icmp:// traces need raw sockets (root)") {
        return;
    }
    let mut d = crate::daemon::Daemon::start(
        "paths-tcp",
        r#"
[[job]]
name = "web"
interval = "100ms"
trace_every = "1s"
targets = ["tcp://RESPONDER", "icmp://127.0.0.1"]
"#,
    );
    let text = d.scrape_until("a trace of each target", Duration::from_secs(30), &|t| {
        t.lines()
            .filter(|l| l.starts_with("prober_path_traces_total{") && !l.ends_with(" 0"))
            .count()
            >= 2
    });
    for target in [format!("tcp://{}", d.udp), "icmp://127.0.0.1".to_owned()] {
        let line = text
            .lines()
            .find(|l| l.starts_with("prober_paths{") && l.contains(&format!("target=\"{target}\"")))
            .unwrap_or_else(|| panic!("no prober_paths for {target}:\n{text}"));
        assert!(line.ends_with(" 1"), "{line}");
    }
    let (code, err) = d.stop();
    assert_eq!(code, Some(0), "{err}");
    assert!(
        !err.contains("trace failed") && !err.contains("cannot trace"),
        "{err}"
    );
}

/// A daemon on the fabric's client follows each of its probe flows onto
/// the branch the flow's own 5-tuple takes: with r1 dropping every
/// datagram to the responder's port, each flow it puts through r1 loses
/// every probe and each it puts through r2 none. A route change is then a
/// path change, in the job's JSON lines file too.
#[test]
fn the_daemon_follows_each_probe_flow_onto_its_branch() {
    let Some(f) = Fabric::new("follow") else {
        return;
    };
    // A switch hashes the header; Linux's policy 1 would route a connected
    // socket's packets by the socket's own random hash (docs/path.md).
    f.r0.sh("sysctl -q -w net.ipv4.fib_multipath_hash_fields=0x0037 && sysctl -q -w net.ipv4.fib_multipath_hash_policy=3");
    f.r1.sh("nft add table inet t && nft add chain inet t f '{ type filter hook forward priority 0; }' && nft add rule inet t f udp dport 8707 drop");
    let responder = Command::new("ip")
        .args([
            "netns",
            "exec",
            &f.b.name,
            env!("CARGO_BIN_EXE_prober"),
            "serve",
            "--udp",
        ])
        .arg(format!("{DEST}:8707"))
        .env_remove("RUST_LOG")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // The namespaces' processes go with them (Netns's drop).
    let _responder = responder;
    let files = crate::support::Files::new("paths-follow");
    let jsonl = files.path("mesh.jsonl");
    let cfg = files.write(
        "c.toml",
        &format!(
            r#"[metrics]
listen = "127.0.0.1:9707"

[[job]]
name = "mesh"
interval = "50ms"
timeout = "300ms"
flows = 12
trace_every = "2s"
trace_hops = true
targets = ["udp://{DEST}:8707"]
[job.sinks]
jsonl = {{ path = "{jsonl}" }}
"#
        ),
    );
    let daemon = Command::new("ip")
        .args([
            "netns",
            "exec",
            &f.a.name,
            env!("CARGO_BIN_EXE_prober"),
            "serve",
            "--config",
            &cfg,
        ])
        .env_remove("RUST_LOG")
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(files.path("daemon.log")).unwrap())
        .spawn()
        .unwrap();
    let _daemon = daemon;
    let log = || std::fs::read_to_string(files.path("daemon.log")).unwrap_or_default();
    let scrape = || {
        let out = Command::new("ip")
            .args([
                "netns",
                "exec",
                &f.a.name,
                "curl",
                "-s",
                "127.0.0.1:9707/metrics",
            ])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let value = |l: &str| {
        l.rsplit(' ')
            .next()
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    let label = |l: &str, k: &str| {
        let at = l.find(&format!("{k}=\""))? + k.len() + 2;
        Some(l[at..at + l[at..].find('"')?].to_owned())
    };
    // Every flow followed, and each has sent a second's probes since.
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let text = loop {
        let text = scrape();
        let followed = text
            .lines()
            .filter(|l| l.starts_with("prober_path_flow{"))
            .count();
        let sent = text
            .lines()
            .filter(|l| l.starts_with("prober_probes_sent_total{"))
            .map(value)
            .fold(f64::INFINITY, f64::min);
        if followed == 12 && sent >= 40.0 {
            break text;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{followed} of 12 flows followed:\n{text}\n{}",
            log()
        );
        std::thread::sleep(Duration::from_millis(500));
    };
    // Which branch goes through r1: its second hop.
    let via_r1 = text
        .lines()
        .find(|l| {
            l.starts_with("prober_path_hop_info{")
                && l.contains(&format!("hop=\"2\",addr=\"{R1}\""))
        })
        .and_then(|l| label(l, "path"))
        .unwrap_or_else(|| panic!("no branch through r1:\n{text}"));
    let series_of = |name: &str, target: &str| {
        text.lines()
            .find(|l| {
                l.starts_with(&format!("{name}{{")) && l.contains(&format!("target=\"{target}\""))
            })
            .map_or(0.0, value)
    };
    let mut through = [0, 0];
    for l in text.lines().filter(|l| l.starts_with("prober_path_flow{")) {
        let target = label(l, "target").unwrap();
        assert_eq!(label(l, "source").as_deref(), Some("10.213.0.1"), "{l}");
        let ok = series_of("prober_probes_ok_total", &target);
        let lost = series_of("prober_probes_timeout_total", &target);
        if label(l, "path").as_deref() == Some(via_r1.as_str()) {
            through[0] += 1;
            assert!(
                ok == 0.0 && lost > 0.0,
                "{target} is followed through r1 but got {ok} replies:\n{text}"
            );
        } else {
            through[1] += 1;
            assert!(
                ok > 0.0 && lost == 0.0,
                "{target} is followed through r2 but lost {lost}:\n{text}"
            );
        }
    }
    assert!(
        through[0] > 0 && through[1] > 0,
        "12 flows all on one branch: {through:?}"
    );

    // r0 now routes everything through r2: one branch, a path change.
    f.r0.sh(&format!("ip route replace {DEST}/32 via {R2} dev r02"));
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let line = loop {
        let lines = std::fs::read_to_string(&jsonl).unwrap_or_default();
        if let Some(l) = lines
            .lines()
            .find(|l| l.contains("\"type\":\"path_change\""))
        {
            break l.to_owned();
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no path_change line in {jsonl}; the daemon's log:\n{}",
            log()
        );
        std::thread::sleep(Duration::from_millis(500));
    };
    let v: serde_json::Value = serde_json::from_str(&line).unwrap();
    assert_eq!(v["job"], "mesh");
    assert_eq!(v["target"], format!("udp://{DEST}:8707"));
    assert_eq!(v["old"].as_array().map(Vec::len), Some(2), "{v}");
    assert_eq!(v["new"], serde_json::json!([[R0, R2, DEST]]), "{v}");
}

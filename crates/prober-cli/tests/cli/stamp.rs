//! `stamp://` against `prober serve --stamp`, Wireshark's dissector, a
//! STAMP peer written in Python from the RFC, and loss in one direction.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

use serde_json::Value;

use crate::support::{Netns, fails, of_type, ok_json, prober, run};

/// A `prober serve --stamp` child; killed on drop.
struct Reflector {
    child: Child,
    addr: String,
}

impl Reflector {
    fn start(wrapper: &[&str], args: &[&str]) -> Self {
        let mut cmd = if wrapper.is_empty() {
            prober()
        } else {
            let mut c = Command::new(wrapper[0]);
            c.args(&wrapper[1..]).arg(env!("CARGO_BIN_EXE_prober"));
            c
        };
        let mut child = cmd
            .args(["serve", "--quiet"])
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("prober serve starts");
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let line = lines.next().expect("a listening line").unwrap();
        let addr = line
            .strip_prefix("listening stamp ")
            .expect(&line)
            .to_owned();
        Self { child, addr }
    }
}

impl Drop for Reflector {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn summary(lines: &[Value]) -> &Value {
    of_type(lines, "summary")[0]
}

#[test]
fn stamp_run_shows_the_rtt_the_split_and_loss_by_direction() {
    let r = Reflector::start(&[], &["--stamp", "127.0.0.1:0", "--stamp-rate", "0"]);
    let target = format!("stamp://{}", r.addr);
    let lines = ok_json(&run(&[
        "run",
        "-c",
        "100",
        "-i",
        "2ms",
        "-o",
        "json",
        "--stamp-tlv",
        "all",
        &target,
    ]));
    let probes = of_type(&lines, "probe");
    assert_eq!(probes.len(), 100);
    for p in &probes {
        assert_eq!(p["outcome"], "ok");
        assert_eq!(p["ttl"], 255, "the reflector saw our TTL of 255");
        let turnaround = p["responder_turnaround_ns"].as_u64().expect("T3 − T2");
        // T3 − T2 is a turnaround, not a handler's dwell: one name each.
        assert!(p["server_dwell_ns"].is_null(), "{p}");
        let parts = &p["parts"];
        if let (Some(a), Some(b), Some(c)) = (
            parts["client_send_ns"].as_u64(),
            parts["network_ns"].as_u64(),
            parts["client_wake_ns"].as_u64(),
        ) {
            assert_eq!(a + b + turnaround + c, p["rtt_ns"].as_u64().unwrap());
        }
        assert!(
            p.get("forward_ns").is_none(),
            "no --clock-synced: one-way unknown"
        );
    }
    let s = summary(&lines);
    assert_eq!(s["ok"], 100);
    let d = &s["direction_loss"];
    assert_eq!(
        (d["forward"].as_u64(), d["backward"].as_u64()),
        (Some(0), Some(0))
    );
    assert!(s["parts"]["responder_turnaround"]["p50"].as_u64().unwrap() > 0);
    assert!(
        s["split"]["complete"].as_u64().unwrap() > 90,
        "{}",
        s["split"]
    );

    // The human summary says where the time goes and the loss by direction.
    let out = run(&[
        "run",
        "-c",
        "20",
        "-i",
        "2ms",
        "-q",
        &target,
        "--clock-synced",
    ]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("lost      forward 0, backward 0"), "{text}");
    assert!(text.contains("as it reports it: STAMP's T3 − T2"), "{text}");
}

#[test]
fn stamp_options_are_checked_before_any_socket_opens() {
    let t = "stamp://127.0.0.1:9";
    fails(
        &["run", "-c", "1", "--stamp-ptp", "udp://127.0.0.1:9"],
        "applies only to stamp:// targets",
    );
    fails(&["run", "-c", "1", "--size", "46", t], "--size 46");
    fails(
        &["run", "-c", "1", "--stamp-tlv", "bogus", t],
        "unknown TLV \"bogus\"",
    );
    fails(
        &["run", "-c", "1", "--stamp-key", "/nonexistent/key", t],
        "reading the STAMP key",
    );
}

/// Days since 1970-01-01 of a civil date (H. Hinnant's algorithm).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// "Nov 23, 2026 15:59:50.543494903 UTC" (tshark with TZ=UTC) in ns.
fn wireshark_time(s: &str) -> i64 {
    let months = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let w: Vec<&str> = s.split_whitespace().collect();
    let m = months.iter().position(|x| *x == w[0]).unwrap() as i64 + 1;
    let d: i64 = w[1].trim_end_matches(',').parse().unwrap();
    let y: i64 = w[2].parse().unwrap();
    let (hms, frac) = w[3].split_once('.').unwrap();
    let t: Vec<i64> = hms.split(':').map(|x| x.parse().unwrap()).collect();
    let ns: i64 = format!("{frac:0<9}")[..9].parse().unwrap();
    ((days_from_civil(y, m, d) * 86_400 + t[0] * 3600 + t[1] * 60 + t[2]) * 1_000_000_000) + ns
}

#[test]
fn wireshark_decodes_what_prober_sends_and_reflects() {
    if !crate::support::require_tools(
        &["tshark", "tcpdump"],
        "tshark check: tshark or tcpdump is not installed (.ci/run installs them)",
    ) {
        return;
    }
    let Some(ns) = Netns::new("stamp-tshark") else {
        return;
    };
    let _r = Reflector::start(
        &["ip", "netns", "exec", &ns.name],
        &["--stamp", "127.0.0.1:862", "--stamp-rate", "0"],
    );
    let file = std::env::temp_dir().join(format!("{}.pcap", ns.name));
    let dump = ns.tcpdump(&file, &["--immediate-mode"], "udp port 862");
    // The default port is STAMP's 862.
    let out = ns.prober(
        &[],
        &[
            "run",
            "-c",
            "20",
            "-i",
            "5ms",
            "-o",
            "json",
            "stamp://127.0.0.1",
        ],
    );
    let lines = ok_json(&out);
    std::thread::sleep(std::time::Duration::from_millis(500));
    crate::support::stop(dump);
    let decoded = Command::new("tshark")
        .env("TZ", "UTC")
        .arg("-r")
        .arg(&file)
        .args([
            "-d",
            "udp.port==862,twamp.test",
            "-T",
            "fields",
            "-E",
            "separator=|",
        ])
        .args(["-e", "udp.srcport", "-e", "twamp.test.seq_number"])
        .args([
            "-e",
            "twamp.test.sender_seq_number",
            "-e",
            "twamp.test.timestamp",
        ])
        .args([
            "-e",
            "twamp.test.receive_timestamp",
            "-e",
            "twamp.test.sender_timestamp",
        ])
        .args([
            "-e",
            "_ws.malformed",
            "-e",
            "_ws.expert.severity",
            "-e",
            "frame.protocols",
        ])
        .output()
        .unwrap();
    let _ = std::fs::remove_file(&file);
    let text = String::from_utf8_lossy(&decoded.stdout);
    let rows: Vec<Vec<&str>> = text.lines().map(|l| l.split('|').collect()).collect();
    assert_eq!(rows.len(), 40, "20 requests and 20 replies: {text}");
    let sent: Vec<i64> = of_type(&lines, "probe")
        .iter()
        .map(|p| p["sent_unix_ns"].as_i64().unwrap())
        .collect();
    let mut requests = Vec::new();
    let mut reflector_seqs = Vec::new();
    for r in &rows {
        assert!(r[8].contains("twamp.test"), "decoded as TWAMP-Test: {r:?}");
        assert_eq!(
            (r[6], r[7]),
            ("", ""),
            "no malformed packet, no expert warning: {r:?}"
        );
        if r[0] == "862" {
            // A reply: it echoes a request's sequence number and timestamp,
            // and T1 ≤ T2 ≤ T3.
            let (t1, t2, t3) = (
                wireshark_time(r[5]),
                wireshark_time(r[4]),
                wireshark_time(r[3]),
            );
            assert!(
                requests.contains(&(r[2].to_owned(), t1)),
                "{r:?} answers a request"
            );
            assert!(t1 <= t2 && t2 <= t3, "{r:?}");
            reflector_seqs.push(r[1].parse::<u32>().unwrap());
        } else {
            requests.push((r[1].to_owned(), wireshark_time(r[3])));
        }
    }
    // Our requests count up by one; the stateful reflector counts from 0.
    let first: u32 = requests[0].0.parse().unwrap();
    for (i, (seq, t1)) in requests.iter().enumerate() {
        assert_eq!(seq.parse::<u32>().unwrap(), first + i as u32);
        assert!(
            (t1 - sent[i]).abs() < 1_000_000,
            "T1 is the send time: {t1} vs {}",
            sent[i]
        );
    }
    assert_eq!(reflector_seqs, (0..20).collect::<Vec<u32>>());
}

#[test]
fn a_stamp_peer_written_from_the_rfc_interoperates() {
    if !crate::support::require_tools(&["python3"], "python3 is not installed") {
        return;
    }
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/cli/stamp_peer.py");
    // prober's sender against the Python reflector (stateless).
    let mut peer = Command::new("python3")
        .args([script, "reflect", "0", "30"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(peer.stdout.take().unwrap()).lines();
    let port = out
        .next()
        .unwrap()
        .unwrap()
        .strip_prefix("listening ")
        .unwrap()
        .to_owned();
    let lines = ok_json(&run(&[
        "run",
        "-c",
        "30",
        "-i",
        "5ms",
        "-o",
        "json",
        &format!("stamp://127.0.0.1:{port}"),
    ]));
    let _ = peer.wait();
    let s = summary(&lines);
    assert_eq!(s["ok"], 30);
    assert!(
        s.get("direction_loss").is_none(),
        "a stateless reflector: direction unknown"
    );
    for p in of_type(&lines, "probe") {
        assert_eq!(p["ttl"], 255);
        let t = p["responder_turnaround_ns"].as_u64().unwrap();
        assert!(t < p["rtt_ns"].as_u64().unwrap());
    }

    // The Python sender against prober's reflector (stateful).
    let r = Reflector::start(&[], &["--stamp", "127.0.0.1:0", "--stamp-rate", "0"]);
    let port = r.addr.rsplit_once(':').unwrap().1;
    let out = Command::new("python3")
        .args([script, "send", port, "20"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let replies: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(replies.len(), 20);
    for (i, r) in replies.iter().enumerate() {
        assert_eq!(r["len"], 44);
        assert_eq!(r["reflector_seq"], i, "stateful: its own count from 0");
        assert_eq!(r["sender_seq"], i);
        assert_eq!(r["ssid"], 0x4242, "the SSID is copied");
        assert_eq!(r["sender_ts_echoed"], true);
        assert_eq!(r["ttl"], 64, "Linux's default TTL, as received");
        let (rtt, turn) = (
            r["rtt_ns"].as_i64().unwrap(),
            r["turnaround_ns"].as_i64().unwrap(),
        );
        assert!(turn >= 0 && turn < rtt, "{r}");
        assert!(r["t2_after_t1_ns"].as_i64().unwrap() >= 0, "{r}");
        assert_ne!(r["multiplier"], 0);
    }
}

/// Drops 20% of packets in one direction only (nftables in a namespace)
/// and checks the sender puts the loss on that side, within 4σ.
#[test]
fn loss_in_one_direction_is_attributed_to_it() {
    if !crate::support::require_tools(&["nft"], "nft is not installed (.ci/run installs nftables)")
    {
        return;
    }
    let n: u64 = 2000;
    let p = 0.2;
    let sigma = (n as f64 * p * (1.0 - p)).sqrt();
    for (dir, rule) in [("forward", "udp dport 862"), ("backward", "udp sport 862")] {
        let Some(ns) = Netns::new(&format!("stamp-{dir}")) else {
            return;
        };
        ns.sh("nft add table inet t && nft add chain inet t in '{ type filter hook input priority 0; }'");
        ns.sh(&format!(
            "nft add rule inet t in {rule} numgen random mod 100 '<' 20 drop"
        ));
        let _r = Reflector::start(
            &["ip", "netns", "exec", &ns.name],
            &["--stamp", "127.0.0.1:862", "--stamp-rate", "0"],
        );
        let out = ns.prober(
            &[],
            &[
                "run",
                "-c",
                &n.to_string(),
                "-i",
                "1ms",
                "-W",
                "300ms",
                "-q",
                "-o",
                "json",
                "stamp://127.0.0.1",
            ],
        );
        let lines = crate::support::json_lines(&out);
        let s = summary(&lines);
        let d = &s["direction_loss"];
        let (fwd, back, unknown) = (
            d["forward"].as_u64().unwrap(),
            d["backward"].as_u64().unwrap(),
            d["unknown"].as_u64().unwrap(),
        );
        let lost = s["sent"].as_u64().unwrap() - s["ok"].as_u64().unwrap();
        assert_eq!(
            fwd + back + unknown,
            lost,
            "every lost probe is put somewhere: {d}"
        );
        let (hit, other) = if dir == "forward" {
            (fwd, back)
        } else {
            (back, fwd)
        };
        let expect = n as f64 * p;
        assert!(
            (hit as f64 - expect).abs() <= 4.0 * sigma,
            "{dir}: {hit} lost, expected {expect} ± {:.0}",
            4.0 * sigma
        );
        assert_eq!(other, 0, "{dir} drop put nothing on the other side: {d}");
        eprintln!("{dir} drop 20% of {n}: forward {fwd}, backward {back}, unknown {unknown}");
    }
}

/// The daemon: `[serve] stamp`, a STAMP job against it, and both on
/// `/metrics` (the reflector's counters, loss by direction, the turnaround
/// as a part).
#[test]
fn the_daemon_reflects_and_probes_stamp() {
    use crate::daemon::{free_port, http_get};
    let dir = std::env::temp_dir().join(format!("prober-stamp-daemon-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let (p, m) = (free_port(), free_port());
    let config = format!(
        "[serve]\nstamp = \"127.0.0.1:{p}\"\nstamp_rate = 0\n[metrics]\nlisten = \"127.0.0.1:{m}\"\nparts = true\n\
         [[job]]\nname = \"routers\"\ninterval = \"10ms\"\ntargets = [\"stamp://127.0.0.1:{p}\"]\n"
    );
    std::fs::write(dir.join("prober.toml"), config).unwrap();
    let mut child = prober()
        .args(["serve", "--quiet", "--config"])
        .arg(dir.join("prober.toml"))
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    for want in ["listening stamp", "listening metrics"] {
        let l = lines.next().expect("a listening line").unwrap();
        assert!(l.starts_with(want), "{l}");
    }
    std::thread::sleep(std::time::Duration::from_millis(1500));
    let metrics = http_get(&format!("127.0.0.1:{m}"), "/metrics");
    let _ = child.kill();
    let _ = child.wait();
    let _ = std::fs::remove_dir_all(&dir);
    let value = |prefix: &str| -> f64 {
        metrics
            .lines()
            .find(|l| l.starts_with(prefix))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("{prefix} in\n{metrics}"))
    };
    assert!(value("prober_stamp_reflector_reflected_total") >= 50.0);
    assert_eq!(
        value("prober_stamp_reflector_dropped_total{reason=\"short\"}"),
        0.0
    );
    assert!(value("prober_probes_ok_total{") >= 50.0);
    assert!(metrics.contains("prober_lost_total{"), "{metrics}");
    assert!(metrics.contains("direction=\"forward\""), "{metrics}");
    assert!(
        metrics.contains("part=\"responder_turnaround\""),
        "{metrics}"
    );
}

/// A daemon job's `[job.stamp]` table is STAMP's own options type, and its
/// `size` is checked against them before anything is probed, as `prober
/// run --size` is; a bad table names its line.
#[test]
fn a_job_stamp_table_is_checked_with_the_jobs_size() {
    let f = crate::support::Files::new("stamp-job-table");
    for (extra, want) in [
        (
            "size = 50\n[job.stamp]\ntlvs = \"all\"\n",
            "job[0] (\"a\").stamp: size 50: a STAMP request",
        ),
        ("[job.stamp]\ntlvs = \"nope\"\n", "job[0] (\"a\").stamp:"),
        (
            "[job.stamp]\nkey = \"k\"\n",
            "line 4: job[0] (\"a\").stamp: unknown field `key`",
        ),
    ] {
        let path = f.write(
            "prober.toml",
            &format!("[[job]]\nname = \"a\"\ntargets = [\"stamp://127.0.0.1:862\"]\n{extra}"),
        );
        fails(&["serve", "--config", &path, "--check-config"], want);
    }
}

//! DNS end to end: `prober run` against dnsmasq (from the Debian
//! packages) serving a zone the test writes, and against servers that
//! misbehave on purpose.

use std::net::UdpSocket;

use crate::support::{Files, fails, of_type, run_json};

/// dnsmasq on a loopback port, answering for `test.lan` from a hosts file
/// and records given here; `fail.lan` is forwarded to an upstream that
/// answers SERVFAIL. Killed on drop.
struct Dnsmasq {
    _server: crate::support::Dnsmasq,
    port: u16,
    _files: Files,
}

impl Dnsmasq {
    /// With `auth`, dnsmasq is also authoritative for test.lan (SOA, NS,
    /// AA=1); it then refuses what it would forward (fail.lan).
    fn start(tag: &str, auth: bool) -> Option<Self> {
        if !crate::support::have_dnsmasq() {
            return None;
        }
        let files = Files::new(&format!("dns-{tag}"));
        let hosts = files.write(
            "hosts",
            "192.0.2.10 www.test.lan\n2001:db8::10 www.test.lan\n",
        );
        let up_port = crate::support::servfail_upstream();
        let port = crate::support::free_udp_port();
        let mut args = vec![
            format!("--addn-hosts={hosts}"),
            "--local=/test.lan/".to_owned(),
            format!("--server=/fail.lan/127.0.0.1#{up_port}"),
            "--mx-host=test.lan,mail.test.lan,10".to_owned(),
            "--txt-record=txt.test.lan,hello world".to_owned(),
            "--srv-host=_probe._tcp.test.lan,www.test.lan,8707".to_owned(),
            "--log-facility=-".to_owned(),
        ];
        if auth {
            args.push("--auth-zone=test.lan".to_owned());
            args.push("--auth-server=ns.test.lan,127.0.0.1".to_owned());
        }
        // Eight 120-byte TXT records: more than 512 bytes, so a UDP reply
        // without EDNS comes back truncated.
        for i in 0..8 {
            args.push(format!(
                "--txt-record=big.test.lan,{}",
                format!("{i:02}").repeat(60)
            ));
        }
        Some(Self {
            _server: crate::support::Dnsmasq::start(port, &files, &args),
            port,
            _files: files,
        })
    }

    fn target(&self, path: &str) -> String {
        format!("dns://127.0.0.1:{}/{path}", self.port)
    }
}

#[test]
fn record_types_over_udp_and_tcp_against_dnsmasq() {
    let Some(d) = Dnsmasq::start("types", true) else {
        return;
    };
    let targets: Vec<String> = [
        "www.test.lan",
        "www.test.lan?type=AAAA",
        "test.lan?type=MX",
        "txt.test.lan?type=TXT",
        "_probe._tcp.test.lan?type=SRV",
        "test.lan?type=SOA",
        "test.lan?type=NS",
        "www.test.lan?type=A&tcp",
    ]
    .iter()
    .map(|p| d.target(p))
    .chain([format!("dns+tcp://127.0.0.1:{}/test.lan?type=MX", d.port)])
    .collect();
    let mut args = vec!["run", "-c", "5", "-i", "10ms", "-o", "json"];
    args.extend(targets.iter().map(String::as_str));
    let (code, lines, err) = run_json(&args);
    assert_eq!(code, Some(0), "{err}");
    for s in of_type(&lines, "summary") {
        assert_eq!(
            (s["sent"].as_u64(), s["ok"].as_u64()),
            (Some(5), Some(5)),
            "{s}"
        );
        assert!(s["rtt"]["p50"].as_u64().unwrap() > 0, "{s}");
        // dnsmasq in authoritative mode may close a kept TCP connection
        // after an answer: the next query goes on a new one, counted as a
        // reconnect and never as an error (RFC 7766 §6.2.3).
        let t = s["target"].as_str().unwrap();
        let tcp = t.contains("tcp://") || t.ends_with("&tcp");
        let reconnects = s["reconnects"].as_u64().unwrap();
        assert!(if tcp { reconnects < 5 } else { reconnects == 0 }, "{s}");
    }
    for p in of_type(&lines, "probe") {
        assert_eq!(p["dns_rcode"], 0, "{p}");
        assert!(p["dns_answers"].as_u64().unwrap() >= 1, "{p}");
        assert_eq!(p["dns_tc"], false, "{p}");
        assert_eq!(
            p["dns_aa"], true,
            "dnsmasq is authoritative for test.lan: {p}"
        );
        let t = p["target"].as_str().unwrap();
        assert_eq!(
            p["dns_tcp"],
            t.contains("tcp://") || t.ends_with("&tcp"),
            "{p}"
        );
    }
    // An expected answer, and one that is not there.
    let t = d.target("www.test.lan");
    let (code, _, err) = run_json(&[
        "run",
        "-c",
        "2",
        "-i",
        "5ms",
        "-o",
        "json",
        "--expect-answer",
        r"IN\s+A\s+192\.0\.2\.10",
        &t,
    ]);
    assert_eq!(code, Some(0), "{err}");
    let (code, lines, _) = run_json(&[
        "run",
        "-c",
        "2",
        "-i",
        "5ms",
        "-o",
        "json",
        "--expect-answer",
        "198.51.100.1",
        &t,
    ]);
    assert_eq!(code, Some(1));
    assert_eq!(of_type(&lines, "summary")[0]["errors"]["content"], 2);
}

#[test]
fn nxdomain_servfail_and_truncation_are_counted_outcomes() {
    let Some(d) = Dnsmasq::start("outcomes", false) else {
        return;
    };
    let (nx, fail, big) = (
        d.target("nothing.test.lan"),
        d.target("x.fail.lan"),
        d.target("big.test.lan?type=TXT"),
    );
    let (code, lines, _) = run_json(&[
        "run", "-c", "3", "-i", "10ms", "-W", "2s", "-o", "json", &nx, &fail, &big,
    ]);
    assert_eq!(code, Some(1));
    let sums = of_type(&lines, "summary");
    for (s, kind) in sums.iter().zip(["status", "status", "truncated"]) {
        assert_eq!(
            (s["sent"].as_u64(), s["error"].as_u64()),
            (Some(3), Some(3)),
            "{s}"
        );
        assert_eq!(s["errors"][kind], 3, "{s}");
    }
    let msgs: Vec<&str> = of_type(&lines, "probe")
        .iter()
        .filter_map(|p| p["error"].as_str())
        .collect();
    assert!(
        msgs.iter().any(|m| m.contains("rcode NXDOMAIN")),
        "{msgs:?}"
    );
    assert!(
        msgs.iter().any(|m| m.contains("rcode SERVFAIL")),
        "{msgs:?}"
    );
    assert!(msgs.iter().any(|m| m.contains("TC=1")), "{msgs:?}");
    // NXDOMAIN accepted when asked for; truncation retried over TCP.
    let (code, _, err) = run_json(&[
        "run",
        "-c",
        "2",
        "-i",
        "5ms",
        "-o",
        "json",
        "--expect-rcode",
        "NXDOMAIN",
        &nx,
    ]);
    assert_eq!(code, Some(0), "{err}");
    let (code, lines, err) = run_json(&[
        "run",
        "-c",
        "3",
        "-i",
        "10ms",
        "-o",
        "json",
        "--dns-tcp-fallback",
        &big,
    ]);
    assert_eq!(code, Some(0), "{err}");
    for p in of_type(&lines, "probe") {
        assert_eq!(
            (p["dns_tcp"].as_bool(), p["dns_answers"].as_u64()),
            (Some(true), Some(8)),
            "{p}"
        );
    }
}

/// A UDP DNS server that answers each query as `mode` says.
fn bad_server(mode: &'static str) -> u16 {
    let s = UdpSocket::bind("127.0.0.1:0").unwrap();
    let port = s.local_addr().unwrap().port();
    let other = UdpSocket::bind("127.0.0.1:0").unwrap();
    std::thread::spawn(move || {
        let mut b = [0u8; 512];
        while let Ok((n, from)) = s.recv_from(&mut b) {
            let mut reply = b[..n].to_vec();
            reply[2] |= 0x80; // QR: a response, no answers, NOERROR.
            match mode {
                "short" => {
                    let _ = s.send_to(&reply[..5], from);
                }
                "malformed" => {
                    // The right ID, then a question count that runs past the end.
                    let mut m = reply[..12].to_vec();
                    m[5] = 9;
                    m.extend_from_slice(&[3, b'a', b'b']);
                    let _ = s.send_to(&m, from);
                }
                "noise" => {
                    // From another port, then a wrong ID, then a duplicate.
                    let _ = other.send_to(&reply, from);
                    let mut wrong = reply.clone();
                    wrong[0] ^= 0x55;
                    let _ = s.send_to(&wrong, from);
                    let _ = s.send_to(&reply, from);
                    let _ = s.send_to(&reply, from);
                }
                _ => {}
            }
        }
    });
    port
}

#[test]
fn malformed_spoofed_and_duplicate_replies() {
    for (mode, msg) in [
        ("short", "shorter than a header"),
        ("malformed", "malformed DNS reply"),
    ] {
        let t = format!("dns://127.0.0.1:{}/a.example", bad_server(mode));
        let (code, lines, _) = run_json(&[
            "run", "-c", "3", "-i", "10ms", "-W", "500ms", "-o", "json", &t,
        ]);
        assert_eq!(code, Some(1), "{mode}");
        let s = of_type(&lines, "summary")[0];
        assert_eq!(
            (s["error"].as_u64(), s["errors"]["protocol"].as_u64()),
            (Some(3), Some(3)),
            "{mode}: {s}"
        );
        let m = of_type(&lines, "probe")[0]["error"]
            .as_str()
            .unwrap()
            .to_owned();
        assert!(m.contains(msg), "{mode}: {m}");
    }
    let t = format!("dns://127.0.0.1:{}/a.example", bad_server("noise"));
    let (code, lines, err) = run_json(&["run", "-c", "5", "-i", "20ms", "-o", "json", &t]);
    assert_eq!(code, Some(0), "{err}");
    let s = of_type(&lines, "summary")[0];
    assert_eq!(s["ok"], 5, "{s}");
    // One duplicate per query; the last query's may come after the run
    // has its last answer and ends (seen once under the full suite's load).
    let dup = s["duplicate"].as_u64().unwrap_or(0);
    assert!((4..=5).contains(&dup), "one duplicate per query: {s}");
    // Each query drew one reply from another port and one with a wrong ID,
    // both sent before its answer.
    assert_eq!(s["unknown"], 10, "{s}");
    assert_eq!(s["rtt"]["count"], 5, "only matched replies are timed: {s}");
}

#[test]
fn bad_dns_targets_are_refused_before_any_query() {
    for (target, want) in [
        ("dns://127.0.0.1:5353/", "no name"),
        (
            "dns://127.0.0.1:5353/a.b?type=BOGUS",
            "not a DNS record type",
        ),
        ("dns://127.0.0.1:5353/a.b?color=red", "unknown parameter"),
    ] {
        fails(&["run", "-c", "1", target], want);
    }
    fails(
        &[
            "run",
            "-c",
            "1",
            "--expect-rcode",
            "NOPE",
            "dns://127.0.0.1:5353/a.b",
        ],
        "--expect-rcode",
    );
}

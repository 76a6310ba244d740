//! `prober serve --sockperf`: sockperf's own clients load prober's
//! responder as they load `sockperf server`.

use std::process::Command;

use crate::support::Serve;

fn sockperf(args: &[&str]) -> Option<String> {
    let out = Command::new("sockperf").args(args).output().ok()?;
    Some(format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    ))
}

/// `sockperf ping-pong` and `sockperf under-load` get every reply they ask
/// for, over UDP and over TCP (`--tcp`, the same port), and the listener
/// counts what it took and answered.
#[test]
fn sockperf_clients_get_their_answers() {
    if sockperf(&["--version"]).is_none() {
        prober_core::testutil::skip("sockperf is not installed (.ci/run installs it)");
        return;
    }
    // Not quiet: the counts come at exit, at info level.
    let s = Serve::start(&["--sockperf", "127.0.0.1:0"], 2);
    let addr: std::net::SocketAddr = s.addr("sockperf").parse().unwrap();
    let tcp: std::net::SocketAddr = s.addr("sockperf-tcp").parse().unwrap();
    assert_eq!(tcp, addr, "one port for both");
    let port = addr.port().to_string();
    let common = ["-i", "127.0.0.1", "-p", &port, "-m", "64", "-t", "1"];
    let pp = sockperf(&[&["ping-pong"][..], &common].concat()).unwrap();
    assert!(pp.contains("Summary: Latency is"), "{pp}");
    // "[Valid Duration] RunTime=…; SentMessages=N; ReceivedMessages=N":
    // every ping answered.
    let counts = |out: &str| -> (u64, u64) {
        let line = out
            .lines()
            .find(|l| l.contains("[Valid Duration]"))
            .unwrap_or_else(|| panic!("no counts: {out}"));
        let num = |key: &str| -> u64 {
            line.split(key).nth(1).unwrap()[1..]
                .split(|c: char| !c.is_ascii_digit())
                .next()
                .unwrap()
                .parse()
                .unwrap()
        };
        (num("SentMessages"), num("ReceivedMessages"))
    };
    let (sent, got) = counts(&pp);
    assert!(sent > 100 && got == sent, "{pp}");
    let ul = sockperf(&[&["under-load", "--mps", "2000"][..], &common].concat()).unwrap();
    assert!(ul.contains("Summary: Latency is"), "{ul}");
    let pp_tcp = sockperf(&[&["ping-pong", "--tcp"][..], &common].concat()).unwrap();
    let (sent_tcp, got_tcp) = counts(&pp_tcp);
    assert!(sent_tcp > 100 && got_tcp == sent_tcp, "{pp_tcp}");
    let ul_tcp =
        sockperf(&[&["under-load", "--tcp", "--mps", "2000"][..], &common].concat()).unwrap();
    assert!(ul_tcp.contains("Summary: Latency is"), "{ul_tcp}");
    let err = s.stop();
    let line = err
        .lines()
        .find(|l| l.contains("sockperf: received"))
        .unwrap_or_else(|| panic!("no counts at exit: {err}"));
    let answered: u64 = line
        .split("answered ")
        .nth(1)
        .and_then(|r| r.split(',').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{line}"));
    assert!(
        answered >= sent + sent_tcp,
        "{line}; ping-pong sent {sent} over UDP and {sent_tcp} over TCP"
    );
}

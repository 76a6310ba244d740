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
/// for, and the listener counts what it took and answered.
#[test]
fn sockperf_clients_get_their_answers() {
    if sockperf(&["--version"]).is_none() {
        eprintln!("SKIPPED: sockperf is not installed (.ci/run installs it)");
        return;
    }
    // Not quiet: the counts come at exit, at info level.
    let s = Serve::start(&["--sockperf", "127.0.0.1:0"], 1);
    let addr: std::net::SocketAddr = s.addr("sockperf").parse().unwrap();
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
    assert!(answered >= sent, "{line}; ping-pong sent {sent}");
}

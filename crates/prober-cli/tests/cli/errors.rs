//! Every error a user can cause: one line, exit 2, no panic.

use crate::support::{Server, fails, run};

#[test]
fn bad_settings() {
    let t = "tcp://127.0.0.1:1";
    fails(&["run", "--interval", "-5ms", t], "negative");
    fails(&["run", "--interval=-5ms", t], "negative");
    fails(
        &["run", "--interval", "fast", t],
        "does not start with a number",
    );
    // A bare number is seconds, as ping's -i (resolve::ping_habits_...).
    fails(&["run", "--interval", "10x", t], "unknown unit \"x\"");
    fails(&["run", "--interval", "1e30", t], "too long");
    fails(&["run", "--count", "0", t], "count must be at least 1");
    fails(&["run", "--duration", "soon", t], "invalid value");
    fails(
        &["run", "--timeout", "0", t],
        "timeout must be greater than zero",
    );
    fails(&["run", "--burst", "0", t], "0 is not in 1..");
    fails(
        &["run", "--fields", "mean,bogus", t],
        "unknown field \"bogus\"",
    );
    fails(&["run", "--pacing", "warp", t], "invalid value 'warp'");
}

#[test]
fn out_of_range_values_are_refused_not_saturated() {
    let t = "udp://127.0.0.1:1";
    fails(&["run", "-i", "18446744073709551616ns", t], "too large");
    fails(&["run", "-W", "18446744074s", t], "too large");
    fails(
        &["run", "--spin-budget", "0", t],
        "must be greater than zero",
    );
    fails(&["run", "--spin-budget", "1s", t], "is more than 100ms");
    fails(
        &["run", "--spin-share", "0", t],
        "not above 0 and at most 1",
    );
    fails(
        &["run", "--spin-share", "2", t],
        "not above 0 and at most 1",
    );
    fails(&["run", "--spin-share", "x", t], "is not a number");
    fails(
        &["run", "--warmup", "9223372036854775808", t],
        "more than 1000000",
    );
    // A panic (exit 134) before the bound.
    fails(
        &["run", "--threads", "100000", "-c", "1", t],
        "100000 threads is more than 1024",
    );
    fails(
        &["run", "tcp://u:p@127.0.0.1:9"],
        "has user information (u:p@)",
    );
    let long = format!("tcp://{}:1", "h".repeat(100_000));
    let out = run(&["run", &long]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        out.stderr.len() < 2_000,
        "{} bytes of error",
        out.stderr.len()
    );
}

#[test]
fn bad_sizes() {
    fails(
        &["run", "--size", "10", "tcp://127.0.0.1:1"],
        "size 10 is out of range for tcp",
    );
    fails(
        &["run", "--size", "70000", "udp://127.0.0.1:1"],
        "size 70000 is out of range for udp",
    );
    fails(
        &["run", "--size", "2000000", "tcp://127.0.0.1:1"],
        "must be 40..=1048576",
    );
    fails(
        &["run", "--size", "39", "tcp-crr://127.0.0.1:1"],
        "out of range for tcp-crr",
    );
}

#[test]
fn bad_targets() {
    fails(&["run", "ftp://127.0.0.1:1"], "unknown scheme \"ftp\"");
    fails(&["run", "tcp://127.0.0.1"], "missing a port");
    fails(&["run", "tcp://127.0.0.1:0"], "port 0 is out of range");
    fails(
        &["run", "udp://127.0.0.1:65536"],
        "port 65536 is out of range",
    );
    fails(&["run", "tcp://127.0.0.1:x"], "is not a number");
    // Invalid syntax: rejected before any DNS query.
    fails(&["run", "tcp://no..such-host:80"], "cannot resolve host");
    fails(&["run", "-6", "tcp://127.0.0.1:80"], "has no IPv6 address");
}

#[test]
fn a_bad_target_stops_the_whole_run_before_probing() {
    let srv = Server::start(&[]);
    let good = format!("tcp://{}", srv.tcp);
    fails(
        &["run", "-c", "3", &good, "tcp://host-without-port"],
        "missing a port",
    );
}

#[test]
fn serve_reports_a_busy_port() {
    let held = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = held.local_addr().unwrap().to_string();
    let out = run(&["serve", "--quiet", "--tcp", &addr]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains(&format!("binding tcp {addr}")));
}

#[test]
fn help_documents_exit_codes() {
    let out = run(&["run", "--help"]);
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("Exit status:") && text.contains("2  an error"),
        "{text}"
    );
}

#[test]
fn self_test_checks_the_size_too() {
    fails(&["run", "--size", "10"], "size 10 is out of range");
    fails(
        &[
            "run",
            "-c",
            "1",
            "--burst",
            "9",
            "--max-in-flight",
            "4",
            "tcp://127.0.0.1:1",
        ],
        "burst 9 is above the in-flight cap 4",
    );
}

#[test]
fn a_full_disk_under_stdout_leaves_whole_records_and_exit_2() {
    let Some(disk) = crate::support::TinyDisk::mount("full-stdout", 64) else {
        return;
    };
    let server = Server::start(&[]);
    let path = disk.0.join("out.jsonl");
    let out = crate::support::prober()
        .args(["run", "-o", "json", "-c", "400", "-i", "1ms"])
        .arg(format!("udp://{}", server.udp))
        .stdout(std::fs::File::create(&path).unwrap())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("No space left on device"), "{err}");
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(
        text.ends_with('\n'),
        "torn last record: …{}",
        &text[text.len() - 80..]
    );
    let lines: Vec<&str> = text.lines().collect();
    assert!(lines.len() > 10, "{} lines", lines.len());
    for l in lines {
        serde_json::from_str::<serde_json::Value>(l).expect("every record parses");
    }
}

/// The self-test (`prober run` with no target) makes its own targets,
/// certificates and requests: options for targets are refused there, not
/// ignored.
#[test]
fn target_options_without_a_target_are_refused() {
    for (args, want) in [
        (
            &["run", "-c", "5", "--flows", "4"][..],
            "--flows needs targets",
        ),
        (
            &["run", "-c", "5", "--expect-status", "404"],
            "An HTTP option",
        ),
        (&["run", "-c", "5", "--method", "DELETE"], "needs targets"),
        (
            &["run", "-c", "5", "--insecure"],
            "--insecure needs targets",
        ),
        (
            &["run", "-c", "5", "--stamp-tlv", "bogus"],
            "--stamp-tlv needs targets",
        ),
        (
            &["run", "-c", "5", "--expect-rcode", "NXDOMAIN"],
            "needs targets",
        ),
        // -D is for -o human's probe lines.
        (
            &["run", "-c", "5", "-D", "-o", "json", "udp://127.0.0.1:9"],
            "-D starts -o human",
        ),
        (
            &["run", "-c", "5", "-D", "-o", "csv", "udp://127.0.0.1:9"],
            "-D starts -o human",
        ),
    ] {
        fails(args, want);
    }
}

/// Spin settings where nothing spins are refused, not ignored.
#[test]
fn spin_settings_without_adaptive_receive_are_refused() {
    let t = "udp://127.0.0.1:9";
    for (args, want) in [
        (
            &["run", "--receive", "async", "--spin-share", "0.5", t][..],
            "--spin-share applies only to adaptive receive",
        ),
        (
            &["run", "--receive", "async", "--spin-budget", "50us", t],
            "--spin-budget applies only",
        ),
        // The self-test and serve receive async unless told.
        (&["run", "--spin-share", "0.5"], "--spin-share applies only"),
        (
            &["serve", "--spin-budget", "50us"],
            "--spin-budget applies only",
        ),
        (
            &["sweep", "--receive", "async", "--spin-share", "0.5", t],
            "--spin-share applies only",
        ),
    ] {
        fails(args, want);
    }
}

/// `serve`'s listening addresses get the hints `run`'s targets get (#42
/// item 20): brackets for IPv6, a missing port, a name.
#[test]
fn serve_addresses_say_what_is_wrong() {
    fails(
        &["serve", "--tcp", "::1:8707"],
        "put an IPv6 address in brackets before its port: [::1]:8707",
    );
    fails(
        &["serve", "--tcp", "127.0.0.1"],
        "has no port: give one, e.g. 127.0.0.1:8707",
    );
    fails(
        &["serve", "--udp", "localhost:8707"],
        "\"localhost\" is a name: listen on an address",
    );
    fails(&["serve", "--http", "[::1]"], "e.g. [::1]:8707");
}

/// `--source` with an address this host does not have is refused at start,
/// naming it (#42 item 21), not with every probe's "cannot assign".
#[test]
fn a_source_address_this_host_lacks_is_refused() {
    fails(
        &[
            "run",
            "-c",
            "1",
            "--source",
            "192.0.2.77",
            "udp://127.0.0.1:9",
        ],
        "--source 192.0.2.77 is not an address of this host",
    );
}

/// A server that answers anything with an HTTP/1.0 400 and closes, as
/// Python's `http.server` does; its port.
fn http_server() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for conn in l.incoming().take(50) {
            let Ok(mut c) = conn else { continue };
            std::thread::spawn(move || {
                use std::io::{Read as _, Write as _};
                let mut buf = [0u8; 1024];
                let _ = c.set_read_timeout(Some(std::time::Duration::from_secs(2)));
                if c.read(&mut buf).is_ok_and(|n| n > 0) {
                    let _ = c.write_all(
                        b"HTTP/1.0 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
                    );
                }
            });
        }
    });
    port
}

/// A peer that is not prober's responder gets errors that say so, in one
/// line, with what to use instead.
#[test]
fn a_foreign_server_is_named_as_such() {
    let port = http_server();
    let out = run(&[
        "run",
        "-c",
        "2",
        "-i",
        "100ms",
        "-W",
        "1s",
        &format!("tcp://127.0.0.1:{port}"),
    ]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("bad reply: frame does not start with the prober magic: is the peer `prober serve`? tcp-connect:// times the handshake of any TCP server"),
        "{text}"
    );
    let out = run(&[
        "run",
        "-c",
        "2",
        "-i",
        "100ms",
        "-W",
        "1s",
        &format!("grpc://127.0.0.1:{port}"),
    ]);
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text
        .lines()
        .find(|l| l.starts_with("seq=0"))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(line.contains("error (protocol)"), "{line}");
    assert!(line.contains("is the peer a gRPC server?"), "{line}");
    assert!(
        !line.contains("tonic::"),
        "one line, not the error's debug form: {line}"
    );
}

/// An interface this host lacks is refused at start, with exit status 2
/// and the same line, whatever the protocol (it was refused at once for
/// udp, as a vague socket error for icmp, and as failed probes for tcp).
#[test]
fn a_missing_interface_is_refused_alike_for_every_protocol() {
    for target in ["udp://127.0.0.1:9", "tcp://127.0.0.1:9", "127.0.0.1"] {
        let out = run(&["run", "-c", "1", "--interface", "nosuch0", target]);
        assert_eq!(out.status.code(), Some(2), "{target}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(
            err.trim(),
            "prober: --interface nosuch0: this host has no such network interface (`ip link` lists them)",
            "{target}"
        );
    }
}

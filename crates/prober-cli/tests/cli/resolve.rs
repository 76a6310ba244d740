//! Names that do not resolve: one bad name never keeps the other targets
//! from being probed, in `prober run` (as fping) and in the daemon (as
//! blackbox_exporter and Cloudprober), and an emptied config never stops
//! every job.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::daemon::{Daemon, free_port, http_get};
use crate::support::{Server, is_root, of_type, prober, run_json, signal};

/// The value of the series whose line starts with `prefix`, if any.
fn series(text: &str, prefix: &str) -> Option<f64> {
    text.lines()
        .find(|l| l.starts_with(prefix))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

#[test]
fn run_probes_the_targets_that_resolve_and_reports_the_one_that_does_not() {
    let srv = Server::start(&[]);
    let good = format!("udp://{}", srv.udp);
    let bad = "udp://no.such.invalid:8707";
    let (code, lines, err) = run_json(&[
        "run", "-q", "-o", "json", "-c", "2", "-i", "50ms", &good, bad,
    ]);
    // The ping rule: a target that got no reply makes it 1, not 2.
    assert_eq!(code, Some(1), "{err}");
    let said: Vec<&str> = err.lines().collect();
    assert_eq!(said.len(), 1, "one line for the bad name: {err}");
    assert!(
        said[0].contains("cannot resolve host \"no.such.invalid\"")
            && said[0].contains("probing the other targets"),
        "{err}"
    );
    // The resolver's reason once, not twice.
    assert_eq!(err.matches("Name or service not known").count(), 1, "{err}");
    let sums = of_type(&lines, "summary");
    let by = |t: &str| *sums.iter().find(|s| s["target"] == t).expect(t);
    assert_eq!(by(&good)["ok"], 2, "{}", by(&good));
    let b = by(bad);
    assert_eq!(
        (b["ok"].as_u64(), b["error"].as_u64()),
        (Some(0), Some(2)),
        "{b}"
    );
    assert_eq!(b["errors"]["resolve"], 2, "{b}");
    assert_eq!(b["addr"], "unresolved", "{b}");
}

#[test]
fn run_with_no_target_that_resolves_stops_with_the_reason() {
    let out = prober()
        .args(["run", "-c", "1", "udp://no.such.invalid:8707"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        err.trim(),
        "prober: cannot resolve host \"no.such.invalid\": Name or service not known"
    );
}

#[test]
fn the_daemon_starts_with_a_name_that_does_not_resolve_and_shows_it_down() {
    let mut d = Daemon::start(
        "unresolved",
        "[[job]]\nname = \"mesh\"\ninterval = \"100ms\"\ntargets = [\"udp://RESPONDER\", \"udp://gone.invalid:8707\"]\n",
    );
    let bad = "target=\"udp://gone.invalid:8707\"";
    let text = d.scrape_until(
        "the good target answered and the bad one failed",
        Duration::from_secs(10),
        &|t| {
            t.lines().any(|l| {
                l.starts_with("prober_probes_ok_total{")
                    && l.contains("udp://127.0.0.1")
                    && !l.ends_with(" 0")
            }) && t.lines().any(|l| {
                l.starts_with("prober_probe_errors_total{")
                    && l.contains(bad)
                    && l.contains("reason=\"resolve\"")
                    && !l.ends_with(" 0")
            })
        },
    );
    let ok = text
        .lines()
        .find(|l| l.starts_with("prober_probes_ok_total{") && l.contains(bad))
        .expect("the bad target's ok counter");
    assert!(ok.ends_with(" 0"), "{ok}");
    // It is checked with a warning, and refused with --strict.
    let cfg = d.dir.join("prober.toml");
    let check = prober()
        .args(["serve", "--check-config", "--config"])
        .arg(&cfg)
        .output()
        .unwrap();
    assert_eq!(check.status.code(), Some(0));
    let warn = String::from_utf8_lossy(&check.stderr);
    assert!(
        warn.contains("warning") && warn.contains("gone.invalid"),
        "{warn}"
    );
    let strict = prober()
        .args(["serve", "--check-config", "--strict", "--config"])
        .arg(&cfg)
        .output()
        .unwrap();
    assert_eq!(strict.status.code(), Some(2));
    let err = String::from_utf8_lossy(&strict.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("invalid with --strict") && err.contains("gone.invalid"),
        "{err}"
    );
    let (code, err) = d.stop();
    assert_eq!(code, Some(0), "{err}");
}

#[test]
fn a_reload_that_finds_no_jobs_is_refused_unless_allowed() {
    let mut d = Daemon::start(
        "emptied",
        "[[job]]\nname = \"a\"\ninterval = \"100ms\"\ntargets = [\"udp://RESPONDER\"]\n",
    );
    let path = d.dir.join("prober.toml");
    let full = std::fs::read_to_string(&path).unwrap();
    let sent = |t: &str| series(t, "prober_probes_sent_total{probe=\"a\"").unwrap_or(0.0);
    d.scrape_until("probing", Duration::from_secs(10), &|t| sent(t) > 0.0);
    // A config tool truncated the file mid-write.
    std::fs::write(&path, "").unwrap();
    d.hup();
    let text = d.scrape_until("the reload refused", Duration::from_secs(10), &|t| {
        series(t, "prober_config_last_reload_successful") == Some(0.0)
    });
    let before = sent(&text);
    let later = d.scrape_until("still probing", Duration::from_secs(10), &|t| {
        sent(t) > before
    });
    assert!(sent(&later) > before);
    // Said on purpose: every job stops.
    let header = full.split("[[job]]").next().unwrap();
    std::fs::write(&path, format!("allow_empty = true\n{header}")).unwrap();
    d.hup();
    d.scrape_until("the jobs stopped", Duration::from_secs(10), &|t| {
        series(t, "prober_config_last_reload_successful") == Some(1.0)
            && !t.contains("prober_probes_sent_total{probe=\"a\"")
    });
    let (code, err) = d.stop();
    assert_eq!(code, Some(0), "{err}");
    assert!(err.contains("the new config has no jobs"), "{err}");
}

/// A name that appears in the resolver later is probed from then on: the
/// daemon runs in a mount namespace of its own whose /etc/hosts the test
/// writes (root; in CI this must run, not be skipped).
#[test]
fn a_name_that_resolves_later_starts_probing() {
    if !crate::support::require_root("a private /etc/hosts needs root") {
        return;
    }
    let dir = std::env::temp_dir().join(format!("prober-late-name-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let hosts = dir.join("hosts");
    std::fs::write(&hosts, "127.0.0.1 localhost\n").unwrap();
    let (udp, metrics) = (free_port(), free_port());
    let cfg = dir.join("prober.toml");
    std::fs::write(
        &cfg,
        format!(
            "[serve]\nudp = \"127.0.0.1:{udp}\"\n[metrics]\nlisten = \"127.0.0.1:{metrics}\"\n\
             [[job]]\nname = \"late\"\ninterval = \"100ms\"\ntargets = [\"udp://prober-late-name:{udp}\"]\n"
        ),
    )
    .unwrap();
    let exe = env!("CARGO_BIN_EXE_prober");
    let script = format!(
        "mount --bind {} /etc/hosts && exec {exe} serve --quiet --config {}",
        hosts.display(),
        cfg.display()
    );
    let mut child = Command::new("unshare")
        .args(["--mount", "--propagation", "private", "sh", "-c", &script])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("unshare runs");
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    for _ in 0..2 {
        let l = lines.next().expect("a listening line").unwrap();
        assert!(l.starts_with("listening "), "{l}");
    }
    let addr = format!("127.0.0.1:{metrics}");
    let ok = |t: &str| series(t, "prober_probes_ok_total{probe=\"late\"").unwrap_or(0.0);
    let errors = |t: &str| {
        t.lines()
            .find(|l| {
                l.starts_with("prober_probe_errors_total{probe=\"late\"")
                    && l.contains("reason=\"resolve\"")
            })
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    let wait = |what: &str, cond: &dyn Fn(&str) -> bool| {
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        loop {
            let text = http_get(&addr, "/metrics");
            if cond(&text) {
                return text;
            }
            assert!(std::time::Instant::now() < deadline, "{what}:\n{text}");
            std::thread::sleep(Duration::from_millis(100));
        }
    };
    wait("down with reason resolve", &|t| {
        errors(t) > 0.0 && ok(t) == 0.0
    });
    // The name appears (written in place: the bind mount keeps the inode).
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(&hosts)
        .unwrap();
    std::io::Write::write_all(&mut f, b"127.0.0.1 prober-late-name\n").unwrap();
    drop(f);
    wait("probing once the name resolves", &|t| ok(t) > 0.0);
    signal(child.id(), "TERM");
    let status = child.wait().unwrap();
    let mut err = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
    assert!(status.success(), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// ping's habits work: `-i 0.05` and `-W 1` are seconds, `-t` is the TTL,
/// `-I` an address to send from (or an interface), `-n` changes nothing.
#[test]
fn ping_habits_mean_what_they_mean_to_ping() {
    let srv = Server::start(&[]);
    let t = format!("udp://{}", srv.udp);
    let (code, lines, err) = run_json(&[
        "run",
        "-q",
        "-o",
        "json",
        "-n",
        "-c",
        "2",
        "-i",
        "0.05",
        "-W",
        "1",
        "-I",
        "127.0.0.1",
        &t,
    ]);
    assert_eq!(code, Some(0), "{err}");
    let meta = of_type(&lines, "meta")[0];
    assert_eq!(meta["interval_ns"], 50_000_000, "{meta}");
    assert_eq!(meta["timeout_ns"], 1_000_000_000, "{meta}");
    assert_eq!(of_type(&lines, "summary")[0]["ok"], 2);
    // -I with an interface name, and -t, on ICMP (root in CI: a raw
    // socket; without it the kernel may refuse the ICMP socket).
    if is_root() {
        let (code, lines, err) = run_json(&[
            "run",
            "-q",
            "-o",
            "json",
            "-c",
            "1",
            "-t",
            "9",
            "-I",
            "lo",
            "127.0.0.1",
        ]);
        assert_eq!(code, Some(0), "{err}");
        assert_eq!(of_type(&lines, "summary")[0]["ok"], 1, "{lines:?}");
    } else {
        prober_core::testutil::skip("-I lo and -t on ICMP need root for a raw socket");
    }
    // A negative number is still refused, with the reason.
    let out = prober().args(["run", "-i", "-1", &t]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("duration"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

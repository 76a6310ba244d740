//! What a new user of ping, fping, netperf or blackbox_exporter meets in
//! the first hour: files other tools read, honest empty results, ping-like
//! output, options refused rather than ignored, errors that point the right
//! way, clean logs and help.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::daemon::{Daemon, jsonl};
use crate::support::{Server, closed_port, json_lines, of_type, prober, run};

fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn stdout(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn refused(args: &[&str], want: &str) {
    let out = run(args);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
    assert!(err.contains(want), "{args:?}: {err:?} lacks {want:?}");
    assert!(out.stdout.is_empty(), "{args:?} printed results");
}

// === files that other tools read ===

#[test]
fn hlog_is_read_by_python_hdrh_with_exact_intervals() {
    let mut d = Daemon::start(
        "hdrh",
        r#"
[[job]]
name = "h"
interval = "10ms"
timeout = "200ms"
targets = ["udp://RESPONDER", "tcp://RESPONDER"]
sinks = { jsonl = { path = "h.jsonl" }, hlog = { path = "h.hlog", interval = "250ms" } }
"#,
    );
    std::thread::sleep(Duration::from_millis(1400));
    let dir = d.dir.clone();
    let (code, _) = d.stop();
    assert_eq!(code, Some(0));
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/cli/read_hlog.py");
    let out = Command::new("python3")
        .arg(script)
        .arg(dir.join("h.hlog"))
        .output()
        .expect("python3 runs");
    if stderr(&out).contains("No module named 'hdrh'") {
        // .ci/run installs it; a developer machine may not have it.
        prober_core::testutil::skip("hdrh check: pip install hdrhistogram==0.10.8");
        return;
    }
    assert!(out.status.success(), "read_hlog.py: {}", stderr(&out));
    let read: Value = serde_json::from_slice(&out.stdout).unwrap();
    // Every ok probe is in the log, under its target's tag.
    let lines = jsonl(&dir.join("h.jsonl"));
    let tags = read["tags"].as_object().unwrap();
    // The udp target's split has parts, each with a tag of its own.
    assert!(
        tags.keys()
            .any(|t| t.starts_with("udp://") && t.ends_with("#client_wake")),
        "{tags:?}"
    );
    for (tag, summary) in tags.iter().filter(|(t, _)| !t.contains('#')) {
        let ok: Vec<u64> = lines
            .iter()
            .filter(|l| l["target"] == tag.as_str() && l["outcome"] == "ok")
            .map(|l| l["rtt_ns"].as_u64().unwrap())
            .collect();
        assert_eq!(summary["count"].as_u64(), Some(ok.len() as u64), "{tag}");
        let max = *ok.iter().max().unwrap();
        let got = summary["max"].as_u64().unwrap();
        // Three significant digits: within 0.1 %.
        assert!(
            got.abs_diff(max) <= max / 1000 + 1,
            "{tag}: max {got} vs {max}"
        );
    }
    assert_eq!(tags.keys().filter(|t| !t.contains('#')).count(), 2);
    // Every interval but the last (closed at shutdown) is 250 ms long, on
    // boundaries 250 ms apart.
    let lengths: Vec<f64> = read["lengths"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_f64().unwrap())
        .collect();
    let starts: Vec<f64> = read["starts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_f64().unwrap())
        .collect();
    let last_start = starts.iter().copied().fold(f64::MIN, f64::max);
    let full: Vec<f64> = lengths
        .iter()
        .zip(&starts)
        .filter(|(_, s)| **s < last_start)
        .map(|(l, _)| *l)
        .collect();
    assert!(full.len() >= 6, "{lengths:?}");
    for l in &full {
        assert!((l - 0.25).abs() < 0.002, "interval of {l} s: {lengths:?}");
    }
    let mut distinct: Vec<f64> = starts.clone();
    distinct.dedup();
    for w in distinct.windows(2) {
        assert!((w[1] - w[0] - 0.25).abs() < 0.002, "starts {distinct:?}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_dead_target_has_no_statistics_not_zeros() {
    let t = format!("udp://127.0.0.1:{}", closed_port());
    let out = run(&[
        "run", "-c", "3", "-i", "10ms", "-W", "100ms", "-o", "json", &t,
    ]);
    assert_eq!(
        out.status.code(),
        Some(1),
        "no reply at all: {}",
        stderr(&out)
    );
    let lines = json_lines(&out);
    let meta = of_type(&lines, "meta")[0];
    assert_eq!(meta["schema"], 3);
    let s = of_type(&lines, "summary")[0];
    assert!(s["rtt"].is_null() && s["latency"].is_null(), "{s}");
    assert_eq!(s["loss_pct"], 100.0);
    assert_eq!(s["errors"]["refused"], 3, "{s}");
    let human = run(&["run", "-c", "3", "-i", "10ms", "-W", "100ms", "-q", &t]);
    let text = stdout(&human);
    let row = text.lines().last().unwrap();
    assert!(row.contains(" - ") && !row.contains("0.0  0.0"), "{text}");
    assert!(text.contains("rtt       no samples"), "{text}");
    let csv = run(&[
        "run",
        "-c",
        "3",
        "-i",
        "10ms",
        "-W",
        "100ms",
        "-o",
        "csv",
        "-f",
        "target,p50,max",
        &t,
    ]);
    let text = stdout(&csv);
    assert!(text.lines().nth(1).unwrap().ends_with(",,"), "{text}");
}

// === output that behaves like ping ===

#[test]
fn probe_lines_arrive_with_their_replies() {
    let srv = Server::start(&[]);
    let t = format!("udp://{}", srv.udp);
    let start = Instant::now();
    let mut child = prober()
        .args(["run", "-c", "2", "-i", "2s", "-D", &t])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let first = loop {
        let l = lines.next().unwrap().unwrap();
        if l.contains("seq=0") {
            break l;
        }
    };
    let waited = start.elapsed();
    assert!(
        waited < Duration::from_millis(1500),
        "seq=0 after {waited:?}"
    );
    // -D: [unix seconds.micros] as ping -D.
    let stamp = first
        .strip_prefix('[')
        .and_then(|r| r.split_once(']'))
        .unwrap()
        .0;
    let secs: f64 = stamp.parse().unwrap();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    assert!((now - secs).abs() < 5.0, "{first}");
    assert!(child.wait().unwrap().success());
}

#[test]
fn sigquit_prints_interim_statistics_and_goes_on() {
    let srv = Server::start(&[]);
    let t = format!("udp://{}", srv.udp);
    let child = prober()
        .args(["run", "-q", "-c", "40", "-i", "20ms", &t])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(400));
    let ok = Command::new("kill")
        .args(["-QUIT", &child.id().to_string()])
        .status()
        .unwrap()
        .success();
    assert!(ok);
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0), "not killed by SIGQUIT");
    let text = stdout(&out);
    assert_eq!(text.matches("statistics ---").count(), 2, "{text}");
    assert!(text.contains("40 sent, 40 ok"), "{text}");
    // The interim block is headed as such, with the time so far, and comes
    // before the final one.
    let head = text
        .find("=== interim statistics after ")
        .unwrap_or_else(|| panic!("no interim heading: {text}"));
    assert!(text[head..].contains("s; the run goes on ==="), "{text}");
    assert!(head < text.find("40 sent, 40 ok").unwrap(), "{text}");
    assert_eq!(text.matches("=== interim").count(), 1, "{text}");
}

/// A back-to-back run says how many round trips a second it made, as
/// netperf's TCP_RR does, in the table, the JSON summary and `--fields`.
#[test]
fn a_run_reports_its_rate_and_elapsed_time() {
    let srv = Server::start(&[]);
    let t = format!("udp://{}", srv.udp);
    let out = run(&["run", "-q", "-o", "json", "-c", "300", "-i", "0", &t]);
    let lines = json_lines(&out);
    let s = &of_type(&lines, "summary")[0];
    let (elapsed, rate) = (
        s["elapsed_s"].as_f64().unwrap(),
        s["rate"].as_f64().unwrap(),
    );
    assert!(elapsed > 0.0 && rate > 0.0, "{s}");
    // rate is the answered probes over the elapsed time.
    let ok = s["ok"].as_f64().unwrap();
    assert!((rate * elapsed - ok).abs() < 1e-6 * ok, "{s}");
    let out = run(&[
        "run",
        "-q",
        "-c",
        "50",
        "-i",
        "0",
        "-f",
        "target,ok,elapsed,rate",
        &t,
    ]);
    let text = stdout(&out);
    let header = text.lines().find(|l| l.starts_with("target")).unwrap();
    assert!(
        header.contains("elapsed") && header.contains("rate"),
        "{text}"
    );
    let out = run(&["run", "-c", "20", "-i", "0", &t]);
    let text = stdout(&out);
    assert!(text.contains(" answered/s over "), "{text}");
}

#[test]
fn targets_come_from_a_file_and_durations_compound() {
    let srv = Server::start(&[]);
    let dir = std::env::temp_dir().join(format!("prober-file-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("targets.txt");
    std::fs::write(
        &file,
        format!(
            "# fping -f style\nudp://{}\n\ntcp://{}  # comment\n",
            srv.udp, srv.tcp
        ),
    )
    .unwrap();
    let out = run(&[
        "run",
        "-q",
        "-o",
        "json",
        "-c",
        "2",
        "-i",
        "10ms",
        "-d",
        "1m30s",
        "--file",
        file.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let lines = json_lines(&out);
    assert_eq!(of_type(&lines, "summary").len(), 2);
    assert_eq!(of_type(&lines, "meta")[0]["duration_ns"], 90_000_000_000u64);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn missed_slots_are_in_the_table_and_the_exit_status() {
    let srv = Server::start(&["--grpc-delay", "5ms"]);
    let t = format!("grpc://{}", srv.grpc);
    let args = [
        "run",
        "-q",
        "-c",
        "200",
        "-i",
        "100us",
        "--max-in-flight",
        "2",
        &t,
    ];
    let out = run(&args);
    let text = stdout(&out);
    let header = text.lines().rev().nth(1).unwrap();
    assert!(header.contains("missed"), "{text}");
    let row: Vec<&str> = text.lines().last().unwrap().split_whitespace().collect();
    let col = header
        .split_whitespace()
        .position(|c| c == "missed")
        .unwrap();
    let missed: u64 = row[col].parse().unwrap();
    assert!(missed > 0, "{text}");
    // Replies arrived: 0, as ping; missed slots count as lost for
    // --fail-on-loss.
    assert_eq!(out.status.code(), Some(0), "{text}");
    let mut strict = args.to_vec();
    strict.extend(["--fail-on-loss", "5"]);
    assert_eq!(run(&strict).status.code(), Some(1));
}

// === options that do not apply are refused, not ignored ===

#[test]
fn options_that_do_not_apply_are_refused() {
    let srv = Server::start(&[]);
    let udp = format!("udp://{}", srv.udp);
    let grpc = format!("grpc://{}", srv.grpc);
    let connect = format!("tcp-connect://{}", srv.tcp);
    refused(
        &["run", "-c", "1", "--ttl", "3", &udp],
        "--ttl applies only to icmp",
    );
    refused(
        &["run", "-c", "1", "-o", "json", "-f", "target,p50", &udp],
        "--fields chooses the columns",
    );
    refused(&["run", "-c", "1", "--insecure", &grpc], "TLS targets");
    refused(
        &["run", "-c", "1", "--size", "100", &connect],
        "--size applies only to targets that send a payload",
    );
    // A target without payload shows no size, in the header and the CSV.
    let out = run(&["run", "-c", "1", &connect]);
    assert!(
        stdout(&out).contains("via tcp-connect, no payload"),
        "{}",
        stdout(&out)
    );
    assert!(!stdout(&out).contains("size 64"), "{}", stdout(&out));
    let csv = run(&["run", "-c", "1", "-o", "csv", "-f", "target,size", &connect]);
    assert!(
        stdout(&csv).lines().nth(1).unwrap().ends_with(','),
        "{}",
        stdout(&csv)
    );
}

// === errors that point the right way ===

#[test]
fn errors_say_what_to_do() {
    refused(
        &["run", "tcp://::1:18707"],
        "IPv6 literals go in brackets: tcp://[::1]:18707",
    );
    refused(
        &["run", "127.0.0.1:18707"],
        "did you mean tcp://127.0.0.1:18707 or udp://127.0.0.1:18707?",
    );
    refused(
        &["run", "-c", "0", "tcp://127.0.0.1:1"],
        "count must be at least 1",
    );
    let out = run(&["run", "-f", "bogus", "tcp://127.0.0.1:1"]);
    for field in ["count", "unknown", "corrupt", "reconnects", "missed"] {
        assert!(stderr(&out).contains(field), "{field}: {}", stderr(&out));
    }
    // grpcs:// against a plaintext server names the cause.
    let srv = Server::start(&[]);
    let t = format!("grpcs://{}", srv.grpc);
    let out = run(&["run", "-c", "1", "-o", "json", "--insecure", &t]);
    let lines = json_lines(&out);
    let probe = of_type(&lines, "probe")[0];
    let error = probe["error"].as_str().unwrap();
    assert!(error.contains("does not speak TLS; try grpc://"), "{error}");
    assert_eq!(probe["error_kind"], "tls");
}

// === logs and help ===

#[test]
fn logs_are_plain_and_said_once() {
    let t = format!("tcp://127.0.0.1:{}", closed_port());
    let out = run(&["run", "-c", "1", &t]);
    let err = stderr(&out);
    assert!(!err.contains('\u{1b}'), "colour codes in a pipe: {err:?}");
    assert!(!err.contains("target=0"), "a target named by index: {err}");
    let text = stdout(&out);
    let lines = text.lines().filter(|l| l.contains("refused")).count();
    assert_eq!(lines, 2, "the probe line and the errors line: {text}");
    assert!(text.contains("errors    refused 1"), "{text}");
}

#[test]
fn the_responder_does_not_log_every_connection() {
    let mut child = prober()
        .args(["serve", "--tcp", "127.0.0.1:0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let line = lines.next().unwrap().unwrap();
    let addr = line.strip_prefix("listening tcp ").unwrap().to_owned();
    let out = run(&[
        "run",
        "-q",
        "-c",
        "20",
        "-i",
        "1ms",
        &format!("tcp-crr://{addr}"),
    ]);
    assert_eq!(out.status.code(), Some(0));
    let (_, err) = crate::support::term_and_stderr(&mut child);
    assert!(err.lines().count() <= 2, "{err}");
}

#[test]
fn quiet_keeps_the_daemons_lifecycle() {
    let mut d = Daemon::start(
        "quiet",
        "[[job]]\nname = \"q\"\ninterval = \"50ms\"\ntargets = [\"udp://RESPONDER\"]\n",
    );
    std::thread::sleep(Duration::from_millis(200));
    d.hup();
    std::thread::sleep(Duration::from_millis(400));
    let dir = d.dir.clone();
    let (code, err) = d.stop();
    assert_eq!(code, Some(0));
    assert!(err.contains("config reloaded"), "{err}");
    assert!(err.contains("daemon stopped"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn help_says_what_prober_is() {
    let top = stdout(&run(&["--help"]));
    assert!(
        top.contains("daemon") && top.contains("metrics") && top.contains("ICMP"),
        "{top}"
    );
    let serve = stdout(&run(&["serve", "--help"]));
    assert!(serve.contains("stopped by SIGINT or SIGTERM"), "{serve}");
    assert!(
        !serve.contains("answered at least one probe"),
        "run's exit codes: {serve}"
    );
    let run_help = stdout(&run(&["run", "--help"]));
    for scheme in ["tcp-connect://", "grpc-health://", "grpcs", "icmp://"] {
        assert!(run_help.contains(scheme), "{scheme}: {run_help}");
    }
}

#[test]
fn reserved_label_names_are_refused() {
    let dir = std::env::temp_dir().join(format!("prober-labels-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for name in ["le", "quantile", "instance", "__x", "job"] {
        let path = dir.join("p.toml");
        std::fs::write(
            &path,
            format!("[[job]]\nname = \"a\"\ntargets = [\"udp://127.0.0.1:1\"]\nlabels = {{ {name} = \"x\" }}\n"),
        )
        .unwrap();
        refused(
            &[
                "serve",
                "--config",
                path.to_str().unwrap(),
                "--check-config",
            ],
            &format!("labels.{name}"),
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_quiet_run_shows_progress_on_a_terminal_only() {
    if !crate::support::require_tools(
        &["script"],
        "progress check: script(1) is not installed (util-linux)",
    ) {
        return;
    }
    let srv = Server::start(&[]);
    let t = format!("udp://{}", srv.udp);
    let bin = env!("CARGO_BIN_EXE_prober");
    // script(1) gives the run a terminal, as a person has.
    let tty = Command::new("script")
        .args([
            "-qfec",
            &format!("{bin} run -q -c 30 -i 20ms {t}"),
            "/dev/null",
        ])
        .output()
        .unwrap();
    let screen = stdout(&tty);
    assert!(tty.status.success(), "{screen}");
    assert!(screen.contains("/30 probes"), "{screen}");
    // Piped: no progress line at all.
    let piped = run(&["run", "-q", "-c", "30", "-i", "20ms", &t]);
    assert!(!stderr(&piped).contains("probes"), "{}", stderr(&piped));
}

/// The long flags a command's `--help` lists.
fn help_flags(command: &str) -> std::collections::BTreeSet<String> {
    let out = run(&[command, "--help"]);
    stdout(&out)
        .lines()
        .filter_map(|l| {
            let l = l.trim_start();
            let l = l
                .strip_prefix('-')
                .filter(|r| !r.starts_with('-'))
                .map_or(l, |r| r.split_once(", ").map_or(r, |(_, rest)| rest));
            let flag = l.strip_prefix("--")?;
            let name: String = flag
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '-' || *c == '.')
                .collect();
            (!name.is_empty() && name != "help").then(|| format!("--{name}"))
        })
        .collect()
}

/// docs/cli.md, the option reference, names every flag each command's
/// `--help` has, and its option tables name no flag that none has.
#[test]
fn the_option_reference_lists_exactly_the_flags_help_has() {
    let doc = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/cli.md"),
    )
    .unwrap();
    let mut every = std::collections::BTreeSet::new();
    for command in ["run", "sweep", "serve", "report"] {
        let flags = help_flags(command);
        assert!(flags.len() > 5, "{command}: {flags:?}");
        for flag in &flags {
            let named = doc.match_indices(flag.as_str()).any(|(i, _)| {
                !doc[i + flag.len()..]
                    .chars()
                    .next()
                    .is_some_and(|c| c.is_ascii_alphanumeric() || c == '-')
            });
            assert!(named, "docs/cli.md does not name `prober {command} {flag}`");
        }
        every.extend(flags);
    }
    // The option tables' rows: `| `-c, --count N` | ...`.
    for row in doc.lines().filter(|l| l.starts_with("| `-")) {
        let cell = row.split('|').nth(1).unwrap_or_default();
        for word in cell.split(['`', ' ', ',', '/']) {
            if let Some(name) = word.strip_prefix("--") {
                let flag = format!("--{name}");
                assert!(
                    every.contains(&flag),
                    "docs/cli.md documents {flag}, which no command's --help has: {row}"
                );
            }
        }
    }
}

/// `-h` fits an 80-column terminal, groups its options under headings,
/// lists the target schemes, and each command lists only options it takes.
#[test]
fn help_is_wrapped_grouped_and_honest() {
    let help = |args: &[&str]| {
        let out = prober().args(args).env("COLUMNS", "80").output().unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let run_h = help(&["run", "-h"]);
    let long: Vec<&str> = run_h.lines().filter(|l| l.chars().count() > 80).collect();
    assert!(long.is_empty(), "lines over 80 columns: {long:?}");
    for heading in [
        "Schedule:",
        "Requests:",
        "Output:",
        "Receive:",
        "TLS:",
        "STAMP:",
        "HTTP:",
        "DNS:",
        "Tuning:",
        "Targets:",
    ] {
        assert!(
            run_h.lines().any(|l| l == heading),
            "no {heading} in run -h: {run_h}"
        );
    }
    assert!(
        run_h.contains("dns://") && run_h.contains("stamp://"),
        "{run_h}"
    );
    let top = help(&["--help"]);
    for protocol in ["HTTP", "DNS", "STAMP"] {
        assert!(top.contains(protocol), "{top}");
    }
    let serve = help(&["serve", "-h"]);
    assert!(
        serve.contains("--threads") && serve.contains("--http"),
        "{serve}"
    );
}

/// The shares in "where the time goes" add up to 100 %: they are of the
/// parts' means (medians of parts do not add up).
#[test]
fn the_split_shares_add_up() {
    let srv = Server::start(&[]);
    let out = run(&[
        "run",
        "-q",
        "-c",
        "50",
        "-i",
        "5ms",
        &format!("udp://{}", srv.udp),
    ]);
    let text = stdout(&out);
    let block: Vec<&str> = text
        .lines()
        .skip_while(|l| !l.starts_with("where the time goes"))
        .take_while(|l| !l.trim_start().starts_with("split:"))
        .collect();
    assert!(block[0].contains("share of the parts' means"), "{text}");
    let shares: Vec<f64> = block
        .iter()
        .skip(1)
        .filter_map(|l| l.split_whitespace().find(|w| w.ends_with('%')))
        .map(|w| w.trim_end_matches('%').parse().unwrap())
        .collect();
    assert!(shares.len() >= 4, "{block:?}");
    let sum: f64 = shares.iter().sum();
    assert!(
        (sum - 100.0).abs() < 0.5,
        "shares add up to {sum}: {block:?}"
    );
}

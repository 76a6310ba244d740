//! Daemon mode end to end: files, metrics, reload and shutdown.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::support::{prober, sigterm};

/// A daemon child with its config folder; killed on drop.
pub(crate) struct Daemon {
    pub(crate) child: Child,
    pub(crate) dir: PathBuf,
    pub(crate) metrics: String,
    pub(crate) udp: String,
}

pub(crate) fn free_port() -> u16 {
    // Below the kernel's ephemeral range (32768-60999), which the other
    // tests' connections draw their source ports from: a port from there
    // could be taken by one of them between this check and the daemon's
    // bind. Free for TCP and UDP both, as the daemon binds it for both.
    for _ in 0..10_000 {
        let port = fastrand::u16(20_000..32_000);
        let tcp = std::net::TcpListener::bind(("127.0.0.1", port));
        let udp = std::net::UdpSocket::bind(("127.0.0.1", port));
        if tcp.is_ok() && udp.is_ok() {
            return port;
        }
    }
    panic!("no free port in 20000..32000");
}

impl Daemon {
    /// Writes `jobs` (TOML `[[job]]` tables) after a header that serves UDP
    /// and TCP and metrics on fresh loopback ports, and starts the daemon.
    pub(crate) fn start(tag: &str, jobs: &str) -> Self {
        Self::start_with_files(tag, jobs, &[])
    }

    /// As [`Daemon::start`], with `files` (name, text) written beside the
    /// config first; RESPONDER in them is the responder's address too.
    pub(crate) fn start_with_files(tag: &str, jobs: &str, files: &[(&str, &str)]) -> Self {
        // A port found free can be taken by another test before the daemon
        // binds it: then the daemon says so and exits, and it is tried
        // again on other ports. Any other failure to start is the test's.
        for attempt in 0..5 {
            match Self::try_start(tag, jobs, files) {
                Ok(d) => return d,
                Err(err) if err.contains("in use") && attempt < 4 => {}
                Err(err) => panic!("the daemon did not start: {err}"),
            }
        }
        unreachable!("the last attempt panics")
    }

    fn try_start(tag: &str, jobs: &str, files: &[(&str, &str)]) -> Result<Self, String> {
        let dir = std::env::temp_dir().join(format!("prober-daemon-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let (p, m) = (free_port(), free_port());
        let udp = format!("127.0.0.1:{p}");
        for (name, text) in files {
            std::fs::write(dir.join(name), text.replace("RESPONDER", &udp)).unwrap();
        }
        let tcp = udp.clone();
        let metrics = format!("127.0.0.1:{m}");
        let header = format!(
            "[serve]\nudp = \"{udp}\"\ntcp = \"{tcp}\"\n[metrics]\nlisten = \"{metrics}\"\n"
        );
        std::fs::write(
            dir.join("prober.toml"),
            format!("{header}{}", jobs.replace("RESPONDER", &udp)),
        )
        .unwrap();
        let mut child = prober()
            .args(["serve", "--quiet", "--config"])
            .arg(dir.join("prober.toml"))
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        // tcp, udp, metrics listening lines, then the daemon runs.
        for _ in 0..3 {
            match lines.next() {
                Some(Ok(l)) => assert!(l.starts_with("listening "), "{l}"),
                _ => {
                    let _ = child.wait();
                    let mut err = String::new();
                    if let Some(mut e) = child.stderr.take() {
                        let _ = std::io::Read::read_to_string(&mut e, &mut err);
                    }
                    return Err(err);
                }
            }
        }
        Ok(Self {
            child,
            dir,
            metrics,
            udp,
        })
    }

    pub(crate) fn rewrite(&self, jobs: &str) {
        let path = self.dir.join("prober.toml");
        let text = std::fs::read_to_string(&path).unwrap();
        let header: String = text.split("[[job]]").next().unwrap().to_owned();
        std::fs::write(
            &path,
            format!("{header}{}", jobs.replace("RESPONDER", &self.udp)),
        )
        .unwrap();
        self.hup();
    }

    pub(crate) fn hup(&self) {
        crate::support::signal(self.child.id(), "HUP");
    }

    /// A scrape as Prometheus with native histograms asks for it: the
    /// length-delimited protobuf.
    pub(crate) fn scrape_protobuf(&self) -> Vec<u8> {
        let out = Command::new("curl")
            .args([
                "-sf",
                "-H",
                "Accept: application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited",
                &format!("http://{}/metrics", self.metrics),
            ])
            .output()
            .unwrap();
        assert!(out.status.success(), "a protobuf scrape");
        out.stdout
    }

    pub(crate) fn scrape(&self) -> String {
        let out = Command::new("curl")
            .args(["-sf", &format!("http://{}/metrics", self.metrics)])
            .output();
        match out {
            Ok(o) if o.status.success() => String::from_utf8(o.stdout).unwrap(),
            _ => http_get(&self.metrics, "/metrics"),
        }
    }

    /// Scrapes every 100 ms until `ok` holds of the text, which it returns;
    /// fails naming `what` after `within`.
    pub(crate) fn scrape_until(
        &self,
        what: &str,
        within: Duration,
        ok: &dyn Fn(&str) -> bool,
    ) -> String {
        let deadline = Instant::now() + within;
        loop {
            let text = self.scrape();
            if ok(&text) {
                return text;
            }
            assert!(Instant::now() < deadline, "{what}:\n{text}");
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    pub(crate) fn stop(&mut self) -> (Option<i32>, String) {
        self.stop_with("TERM")
    }

    /// Stops it with `kill -SIG` and returns its exit code and stderr. Its
    /// directory stays until the `Daemon` is dropped, for the test to read.
    pub(crate) fn stop_with(&mut self, sig: &str) -> (Option<i32>, String) {
        crate::support::signal(self.child.id(), sig);
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(st) = self.child.try_wait().unwrap() {
                let mut err = String::new();
                use std::io::Read as _;
                let _ = self.child.stderr.take().unwrap().read_to_string(&mut err);
                return (st.code(), err);
            }
            assert!(Instant::now() < deadline, "daemon did not stop");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A minimal HTTP GET without curl.
pub(crate) fn http_get(addr: &str, path: &str) -> String {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut body = String::new();
    s.read_to_string(&mut body).unwrap();
    body.split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default()
}

pub(crate) fn jsonl(path: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    text.lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("bad line {l:?}: {e}")))
        .collect()
}

/// Per target, the seqs seen, asserting each appears exactly once.
fn seqs_once(lines: &[Value]) -> BTreeMap<String, BTreeSet<u64>> {
    let mut out: BTreeMap<String, BTreeSet<u64>> = BTreeMap::new();
    for l in lines {
        let t = l["target"].as_str().unwrap().to_owned();
        let seq = l["seq"].as_u64().unwrap();
        assert!(
            out.entry(t.clone()).or_default().insert(seq),
            "{t} seq {seq} twice"
        );
    }
    out
}

fn contiguous(seqs: &BTreeSet<u64>) -> bool {
    seqs.iter().copied().eq(0..seqs.len() as u64)
}

const JOBS: &str = r#"
[[job]]
name = "loop"
interval = "20ms"
timeout = "200ms"
targets = ["udp://RESPONDER", "tcp-connect://RESPONDER", "tcp://RESPONDER"]
labels = { site = "lab" }
sinks = { jsonl = { path = "loop.jsonl" }, csv = { path = "loop.csv" }, hlog = { path = "loop.hlog", interval = "200ms" } }
"#;

/// SIGTERM or SIGINT at 20 random moments: every probe once in every
/// sink, whole lines, an interval log that parses.
#[test]
fn sigterm_or_sigint_at_random_moments_loses_no_probe_in_any_sink() {
    let mut m = crate::faults::Moments::new("daemon stopped at random moments");
    for trial in 0..20 {
        let sig = ["TERM", "INT"][(m.next() % 2) as usize];
        let wait = m.millis(150, 1200);
        let mut d = Daemon::start(&format!("term{trial}"), JOBS);
        std::thread::sleep(wait);
        let dir = d.dir.clone();
        let (code, err) = d.stop_with(sig);
        assert_eq!(
            code,
            Some(0),
            "trial {trial}, SIG{sig} after {wait:?}: {err}"
        );
        let lines = jsonl(&dir.join("loop.jsonl"));
        let seqs = seqs_once(&lines);
        assert_eq!(seqs.len(), 3, "{seqs:?}");
        for (t, s) in &seqs {
            assert!(contiguous(s), "{t}: {s:?}");
            assert!(!s.is_empty(), "{t}: trial {trial}");
        }
        assert!(
            lines
                .iter()
                .all(|l| l["probe"] == "loop" && l["outcome"] == "ok"),
            "all answered"
        );
        // The CSV has the same probes, once each, after one header.
        let csv = std::fs::read_to_string(dir.join("loop.csv")).unwrap();
        let mut rows = csv.lines();
        assert!(rows.next().unwrap().starts_with("probe,target,protocol"));
        let mut csv_seqs: BTreeMap<String, BTreeSet<u64>> = BTreeMap::new();
        for r in rows {
            let f: Vec<&str> = r.split(',').collect();
            assert!(
                csv_seqs
                    .entry(f[1].to_owned())
                    .or_default()
                    .insert(f[4].parse().unwrap())
            );
        }
        assert_eq!(csv_seqs, seqs);
        // The interval log parses and carries a tag per target.
        let tags = hlog_tags(&dir.join("loop.hlog"));
        assert_eq!(tags.len(), 3, "{tags:?}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}

fn hlog_tags(path: &Path) -> BTreeSet<String> {
    let hlog = std::fs::read(path).unwrap();
    hdrhistogram::serialization::interval_log::IntervalLogIterator::new(&hlog)
        .map(|e| e.unwrap_or_else(|e| panic!("{}: {e:?}", path.display())))
        .filter_map(|e| match e {
            // A target's own tag; its parts' tags are `target#part`.
            hdrhistogram::serialization::interval_log::LogEntry::Interval(h) => h
                .tag()
                .map(|t| t.as_str().to_owned())
                .filter(|t| !t.contains('#')),
            _ => None,
        })
        .collect()
}

/// logrotate's default: move the files away, send SIGHUP, expect new files.
#[test]
fn sighup_reopens_sink_files_moved_away() {
    let mut d = Daemon::start("rotate", JOBS);
    std::thread::sleep(Duration::from_millis(400));
    let dir = d.dir.clone();
    for f in ["loop.jsonl", "loop.csv", "loop.hlog"] {
        std::fs::rename(dir.join(f), dir.join(format!("{f}.1"))).unwrap();
    }
    d.hup();
    std::thread::sleep(Duration::from_millis(500));
    let (code, err) = d.stop();
    assert_eq!(code, Some(0), "{err}");
    // Every probe once, in the old file or the new one, none lost.
    let (old, new) = (
        jsonl(&dir.join("loop.jsonl.1")),
        jsonl(&dir.join("loop.jsonl")),
    );
    assert!(
        !old.is_empty() && !new.is_empty(),
        "{} / {}",
        old.len(),
        new.len()
    );
    let all: Vec<Value> = old.into_iter().chain(new).collect();
    for (t, s) in &seqs_once(&all) {
        assert!(contiguous(s), "{t}: {s:?}");
    }
    // The new CSV starts with its header; both interval logs parse.
    let csv = std::fs::read_to_string(dir.join("loop.csv")).unwrap();
    assert!(csv.starts_with("probe,target,protocol"), "{csv:.80}");
    assert_eq!(hlog_tags(&dir.join("loop.hlog.1")).len(), 3);
    assert_eq!(hlog_tags(&dir.join("loop.hlog")).len(), 3);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn metrics_agree_with_the_files_and_pass_promtool() {
    let mut d = Daemon::start("metrics", JOBS);
    std::thread::sleep(Duration::from_millis(600));
    let text = d.scrape();
    assert!(
        text.contains("# TYPE prober_probes_sent_total counter"),
        "{text}"
    );
    assert!(
        text.contains("prober_rtt_seconds_bucket{le=\"0.00025\",probe=\"loop\",target=\"udp://"),
        "{text}"
    );
    assert!(text.contains("site=\"lab\""));
    assert!(text.contains("# TYPE prober_build_info gauge"), "{text}");
    assert_eq!(http_get(&d.metrics, "/healthz").trim_end(), "ok");
    assert_eq!(http_get(&d.metrics, "/readyz").trim_end(), "ready");
    assert!(text.contains("prober_build_info{version=\""), "{text}");
    // The series budget (docs/config.md): text scrapes get one classic
    // histogram, RTT's; latency and send lag go native to protobuf
    // scrapes only, loss bursts are off.
    for family in [
        "prober_latency_seconds",
        "prober_send_lag_seconds",
        "prober_loss_burst_length",
    ] {
        assert!(
            !text.contains(&format!("# TYPE {family} histogram")),
            "{family}"
        );
    }
    let proto = d.scrape_protobuf();
    let has = |name: &str| proto.windows(name.len()).any(|w| w == name.as_bytes());
    assert!(has("prober_latency_seconds") && has("prober_send_lag_seconds"));
    assert!(!has("prober_loss_burst_length"));
    if let Ok(out) = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
    {
        use std::io::Write;
        let mut child = out;
        child
            .stdin
            .take()
            .unwrap()
            .write_all(text.as_bytes())
            .unwrap();
        let res = child.wait_with_output().unwrap();
        assert!(
            res.status.success(),
            "promtool: {}{}",
            String::from_utf8_lossy(&res.stdout),
            String::from_utf8_lossy(&res.stderr)
        );
    } else {
        prober_core::testutil::skip(
            "promtool check: promtool is not installed (.ci/run installs it)",
        );
    }
    let dir = d.dir.clone();
    let (code, _) = d.stop();
    assert_eq!(code, Some(0));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn reload_adds_removes_and_changes_targets() {
    let mut d = Daemon::start("reload", JOBS);
    // Remove tcp-connect, add udp to another port of the same responder... a
    // new job "extra", and change nothing else in "loop": loop's udp target
    // keeps its counters.
    let sent = |text: &str, t: &str| -> Option<u64> {
        text.lines()
            .find(|l| {
                l.starts_with("prober_probes_sent_total") && l.contains(&format!("target=\"{t}\""))
            })
            .and_then(|l| l.rsplit(' ').next()?.parse().ok())
    };
    let udp_target = format!("udp://{}", d.udp);
    // Each step waits for what it must see, not for a fixed time: a reload
    // on a loaded machine may take longer than any sleep.
    let wait = Duration::from_secs(10);
    let before = d.scrape_until("both jobs probing", wait, &|t| {
        t.contains("target=\"tcp-connect://") && sent(t, &udp_target).is_some_and(|n| n > 0)
    });
    let udp_before = sent(&before, &udp_target).unwrap();
    d.rewrite(r#"
[[job]]
name = "loop"
interval = "20ms"
timeout = "200ms"
targets = ["udp://RESPONDER", "tcp://RESPONDER"]
labels = { site = "lab" }
sinks = { jsonl = { path = "loop.jsonl" }, csv = { path = "loop.csv" }, hlog = { path = "loop.hlog", interval = "200ms" } }

[[job]]
name = "extra"
interval = "50ms"
targets = ["tcp-connect://RESPONDER"]
"#);
    // Half a second of probes more than before: the restart below is told
    // by a count that starts over, which must not catch up with this one
    // between the reload and the scrape that sees it (a loaded CI machine
    // scraped 2 probes here and 2 after the restart).
    let after = d.scrape_until("the first reload", wait, &|t| {
        t.contains("probe=\"extra\",target=\"tcp-connect://")
            && sent(t, &udp_target).is_some_and(|n| n > udp_before + 25)
    });
    assert!(
        sent(&after, &udp_target).unwrap() > udp_before,
        "udp kept counting"
    );
    assert!(
        !after.contains("probe=\"loop\",target=\"tcp-connect://"),
        "removed target gone: {after}"
    );
    assert!(
        after.contains("probe=\"extra\",target=\"tcp-connect://"),
        "added target present"
    );
    // A changed job (new interval) restarts its targets: counters start over.
    d.rewrite(
        r#"
[[job]]
name = "loop"
interval = "25ms"
timeout = "200ms"
targets = ["udp://RESPONDER"]
labels = { site = "lab" }
sinks = { jsonl = { path = "loop.jsonl" } }
"#,
    );
    let changed = d.scrape_until("the second reload", wait, &|t| {
        !t.contains("probe=\"extra\"")
    });
    assert!(
        sent(&changed, &udp_target).unwrap() < sent(&after, &udp_target).unwrap(),
        "restarted"
    );
    assert!(!changed.contains("probe=\"extra\""));
    // An invalid config is rejected and the old one keeps running.
    d.rewrite("[[job]]\nname = \"loop\"\nbogus = true\ntargets = [\"udp://RESPONDER\"]\n");
    let still = d.scrape_until("the rejected reload", wait, &|t| {
        series(t, "prober_config_last_reload_successful ") == Some(0.0)
            && sent(t, &udp_target) > sent(&changed, &udp_target)
    });
    assert!(sent(&still, &udp_target).unwrap() > sent(&changed, &udp_target).unwrap());
    // The metric says so too, and the last good load's time stays.
    assert_eq!(
        series(&changed, "prober_config_last_reload_successful "),
        Some(1.0)
    );
    assert_eq!(
        series(&still, "prober_config_last_reload_successful "),
        Some(0.0),
        "{still}"
    );
    let good_at = "prober_config_last_reload_success_timestamp_seconds ";
    assert_eq!(series(&still, good_at), series(&changed, good_at));
    let dir = d.dir.clone();
    let (code, err) = d.stop();
    assert_eq!(code, Some(0));
    assert!(
        err.contains("config rejected, keeping the old one")
            && err.contains("unknown field `bogus`"),
        "{err}"
    );
    // Every sample of every incarnation reached the jsonl file exactly once
    // per (target, run): seqs restart at 0 when a target restarts.
    let lines = jsonl(&dir.join("loop.jsonl"));
    assert!(!lines.is_empty());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn bad_config_fails_at_start_with_exit_2() {
    let dir = std::env::temp_dir().join(format!("prober-daemon-bad-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("bad.toml");
    std::fs::write(
        &path,
        "[[job]]\nname = \"x\"\ninterval = \"soon\"\ntargets = [\"udp://127.0.0.1:9\"]\n",
    )
    .unwrap();
    let out = prober()
        .args(["serve", "--config"])
        .arg(&path)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("bad.toml") && err.contains("job[0] (\"x\").interval"),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_listener_on_the_command_line_is_work_for_the_daemon() {
    let dir = std::env::temp_dir().join(format!("prober-daemon-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("metrics-only.toml");
    let metrics = format!("127.0.0.1:{}", free_port());
    std::fs::write(&path, format!("[metrics]\nlisten = \"{metrics}\"\n")).unwrap();
    let udp = format!("127.0.0.1:{}", free_port());
    let check = |extra: &[&str]| {
        prober()
            .args(["serve", "--check-config", "--config"])
            .arg(&path)
            .args(extra)
            .output()
            .unwrap()
    };
    let out = check(&[]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("nothing to do"));
    assert_eq!(check(&["--udp", &udp]).status.code(), Some(0));
    let mut child = prober()
        .args(["serve", "--quiet", "--config"])
        .arg(&path)
        .args(["--udp", &udp])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let first = lines.next().expect("a listening line").unwrap();
    assert_eq!(first, format!("listening udp {udp}"));
    let out = crate::support::run(&["run", "-c", "3", "-i", "10ms", &format!("udp://{udp}")]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    sigterm(child.id());
    assert_eq!(child.wait().unwrap().code(), Some(0));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn check_config_refuses_sink_paths_that_would_fail_at_start() {
    let dir = std::env::temp_dir().join(format!("prober-daemon-paths-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("a-directory")).unwrap();
    std::fs::write(dir.join("a-file"), "").unwrap();
    for (path, why) in [
        ("a-directory", "is a directory"),
        ("a-file/x.jsonl", "is not a directory"),
    ] {
        let cfg = dir.join("c.toml");
        std::fs::write(
            &cfg,
            format!("[[job]]\nname = \"a\"\ntargets = [\"udp://127.0.0.1:9\"]\n[job.sinks.jsonl]\npath = \"{path}\"\n"),
        )
        .unwrap();
        let out = prober()
            .args(["serve", "--check-config", "--config"])
            .arg(&cfg)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{path}: {err}");
        assert!(err.to_lowercase().contains(why), "{path}: {err}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

fn curl(url: &str) -> Option<String> {
    let out = Command::new("curl")
        .args(["-sf", "--max-time", "2", url])
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Prometheus's answer to an instant query (at `time`, Unix seconds, if
/// given): its `data.result` series.
fn prom_query(port: u16, query: &str, time: Option<f64>) -> Option<Vec<Value>> {
    let mut url = format!("http://127.0.0.1:{port}/api/v1/query?query={query}");
    if let Some(t) = time {
        url.push_str(&format!("&time={t:.3}"));
    }
    let v: Value = serde_json::from_str(&curl(&url)?).ok()?;
    v["data"]["result"].as_array().cloned()
}

/// A real Prometheus, with native histograms on, scrapes the daemon every
/// second (so in the protobuf format). The counters it stores agree with
/// the daemon's own JSON lines within one scrape interval, and
/// `histogram_quantile` over the native RTT histogram agrees with the p50
/// and p99 of the same probes in the JSON lines, within one native bucket.
#[test]
fn real_prometheus_scrapes_what_the_files_say() {
    if !crate::support::require_tools(
        &["prometheus"],
        "prometheus is not installed (.ci/run installs Debian's prometheus)",
    ) {
        return;
    }
    let mut d = Daemon::start("prom", JOBS);
    let prom_dir = d.dir.join("prom");
    std::fs::create_dir_all(&prom_dir).unwrap();
    let prom_port = free_port();
    std::fs::write(
        prom_dir.join("prometheus.yml"),
        format!(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nscrape_configs:\n  - job_name: prober\n    static_configs:\n      - targets: [\"{}\"]\n",
            d.metrics
        ),
    )
    .unwrap();
    let mut prom = Command::new("prometheus")
        .arg(format!(
            "--config.file={}",
            prom_dir.join("prometheus.yml").display()
        ))
        .arg(format!(
            "--storage.tsdb.path={}",
            prom_dir.join("data").display()
        ))
        .arg(format!("--web.listen-address=127.0.0.1:{prom_port}"))
        .arg("--enable-feature=native-histograms")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // The raw samples of the last 10 s, each with its scrape's own time: the
    // bounds below are anchored there, not at the query's time, which may
    // come any time after the scrape (%5B %5D: the brackets, which curl
    // would glob).
    let query = format!(
        "http://127.0.0.1:{prom_port}/api/v1/query?query=prober_probes_sent_total%5B10s%5D"
    );
    let deadline = Instant::now() + Duration::from_secs(60);
    let result = loop {
        assert!(
            Instant::now() < deadline,
            "prometheus never saw the daemon's counters"
        );
        std::thread::sleep(Duration::from_millis(500));
        let Some(body) = curl(&query) else { continue };
        let v: Value = serde_json::from_str(&body).unwrap();
        let r = v["data"]["result"].as_array().cloned().unwrap_or_default();
        // Each series' newest sample, as an instant query's `value`.
        let r: Vec<Value> = r
            .into_iter()
            .filter_map(|mut s| {
                let last = s["values"].as_array()?.last()?.clone();
                s["value"] = last;
                Some(s)
            })
            .collect();
        if r.len() == 3
            && r.iter()
                .all(|s| s["value"][1].as_str().is_some_and(|n| n != "0"))
        {
            break r;
        }
    };
    // The native histograms, once every target has 100 answers in one
    // scrape: quantiles and counts evaluated at that scrape's time.
    let number = |s: &Value| s["value"][1].as_str().unwrap().parse::<f64>().unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    let (at, counts) = loop {
        assert!(
            Instant::now() < deadline,
            "prometheus never had 100 answers per target in a native histogram"
        );
        std::thread::sleep(Duration::from_millis(500));
        let Some(r) = prom_query(prom_port, "histogram_count(prober_rtt_seconds)", None) else {
            continue;
        };
        if r.len() == 3 && r.iter().all(|s| number(s) >= 100.0) {
            // The newest scrape (the query's own time is later).
            let at = prom_query(prom_port, "timestamp(prober_probes_ok_total)", None).unwrap();
            let at = at.iter().map(number).fold(f64::INFINITY, f64::min);
            let counts = prom_query(prom_port, "histogram_count(prober_rtt_seconds)", Some(at));
            break (at, counts.unwrap());
        }
    };
    let quantiles: Vec<(f64, Vec<Value>)> = [0.5, 0.99]
        .iter()
        .map(|q| {
            let query = format!("histogram_quantile({q},prober_rtt_seconds)");
            (*q, prom_query(prom_port, &query, Some(at)).unwrap())
        })
        .collect();
    let _ = prom.kill();
    let _ = prom.wait();
    let dir = d.dir.clone();
    let (code, _) = d.stop();
    assert_eq!(code, Some(0));
    let lines = jsonl(&dir.join("loop.jsonl"));
    for series in result {
        let target = series["metric"]["target"].as_str().unwrap();
        assert_eq!(
            series["metric"]["probe"], "loop",
            "the probe label names the daemon's job"
        );
        assert_eq!(
            series["metric"]["job"], "prober",
            "Prometheus's job label is the scrape job's, without honor_labels"
        );
        let at_ns = (series["value"][0].as_f64().unwrap() * 1e9) as u64;
        let scraped: u64 = series["value"][1].as_str().unwrap().parse().unwrap();
        // Probes the daemon had finished by the query time, per its own file.
        let done_by = |t_ns: u64| {
            lines
                .iter()
                .filter(|l| l["target"] == target)
                .filter(|l| {
                    l["sent_unix_ns"].as_u64().unwrap()
                        + l["rtt_ns"].as_u64().unwrap_or(200_000_000)
                        <= t_ns
                })
                .count() as u64
        };
        // At the scrape's time: what had been recorded by then (probes that
        // ended up to 200 ms before may still have been on their way to the
        // collector) and no more than had ended by the time the scrape's
        // answer could have been made (1 s on a loaded machine).
        let (low, high) = (
            done_by(at_ns.saturating_sub(200_000_000)),
            done_by(at_ns + 1_000_000_000),
        );
        assert!(
            low <= scraped && scraped <= high,
            "{target}: prometheus {scraped}, files {low}..={high}"
        );
        // The histogram at `at` holds the target's first n answers, in the
        // order the daemon wrote them.
        let of_target = |r: &[Value]| {
            r.iter()
                .find(|s| s["metric"]["target"] == target)
                .map(number)
                .unwrap_or_else(|| panic!("{target}: no series in {r:?}"))
        };
        let n = of_target(&counts) as usize;
        let mut rtts: Vec<f64> = lines
            .iter()
            .filter(|l| l["target"] == target && l["type"] == "probe")
            .filter_map(|l| l["rtt_ns"].as_u64())
            .take(n)
            .map(|ns| ns as f64 / 1e9)
            .collect();
        assert_eq!(
            rtts.len(),
            n,
            "{target}: the files have the histogram's answers"
        );
        rtts.sort_by(f64::total_cmp);
        for (q, result) in &quantiles {
            let theirs = of_target(result);
            // Nearest rank, as the summaries'.
            let ours = rtts[((q * n as f64).ceil() as usize).clamp(1, n) - 1];
            // Native buckets of factor 1.1 are 2^(1/8) wide (schema 3): a
            // quantile is known to within one such bucket.
            let ratio = theirs / ours;
            eprintln!(
                "{target}: p{} prometheus {:.1} µs, files {:.1} µs (n {n}, ratio {ratio:.4})",
                q * 100.0,
                theirs * 1e6,
                ours * 1e6
            );
            let width = 2f64.powf(1.0 / 8.0);
            assert!(
                (1.0 / width..=width).contains(&ratio),
                "{target}: histogram_quantile({q}) {theirs} s against {ours} s from the files"
            );
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_job_removed_by_reload_completes_its_files() {
    let mut d = Daemon::start(
        "jobgone",
        r#"
[[job]]
name = "gone"
interval = "20ms"
timeout = "200ms"
targets = ["udp://RESPONDER"]
sinks = { jsonl = { path = "gone.jsonl" }, hlog = { path = "gone.hlog", interval = "60s" } }

[[job]]
name = "stays"
interval = "20ms"
targets = ["tcp-connect://RESPONDER"]
"#,
    );
    std::thread::sleep(Duration::from_millis(500));
    d.rewrite(
        "[[job]]\nname = \"stays\"\ninterval = \"20ms\"\ntargets = [\"tcp-connect://RESPONDER\"]\n",
    );
    // The removed job's last probes end within their timeout; then its
    // files are closed: the hlog gets its (only, partial) interval, while
    // the daemon goes on running.
    std::thread::sleep(Duration::from_millis(1000));
    let tags = hlog_tags(&d.dir.join("gone.hlog"));
    assert_eq!(
        tags.len(),
        1,
        "the removed job's interval was written: {tags:?}"
    );
    let lines = jsonl(&d.dir.join("gone.jsonl"));
    let seqs: BTreeSet<u64> = lines.iter().map(|l| l["seq"].as_u64().unwrap()).collect();
    assert_eq!(seqs.len(), lines.len(), "each probe once");
    assert!(contiguous(&seqs), "{seqs:?}");
    let dir = d.dir.clone();
    let (code, _) = d.stop();
    assert_eq!(code, Some(0));
    let _ = std::fs::remove_dir_all(&dir);
}

/// The value of the series `name{labels}` in a scrape.
pub(crate) fn series(text: &str, name_and_labels: &str) -> Option<f64> {
    text.lines()
        .find(|l| l.starts_with(name_and_labels))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
}

/// A sink file on a full disk: probing and the job's other file go on, the
/// failure is logged once (not per sample) and counted, and writing
/// resumes when space returns.
#[test]
fn a_full_disk_under_one_sink_file_spares_probing_and_the_other_files() {
    let Some(disk) = crate::support::TinyDisk::mount("tiny-sink-disk", 128) else {
        return;
    };
    // Leave a few KiB free: the JSON lines fill it within a second.
    let filler = disk.0.join("filler");
    std::fs::write(&filler, vec![0u8; 120 * 1024]).unwrap();
    let jsonl_path = disk.0.join("loop.jsonl");
    let mut d = Daemon::start(
        "full",
        &format!(
            r#"
[[job]]
name = "loop"
interval = "10ms"
timeout = "200ms"
targets = ["udp://RESPONDER"]
sinks = {{ jsonl = {{ path = "{}" }}, csv = {{ path = "loop.csv" }} }}
"#,
            jsonl_path.display()
        ),
    );
    let failing = r#"prober_sink_failing{probe="loop"}"#;
    let wait_for = |want: f64| {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let text = d.scrape();
            if series(&text, failing) == Some(want) {
                return text;
            }
            assert!(Instant::now() < deadline, "{failing} never {want}:\n{text}");
            std::thread::sleep(Duration::from_millis(50));
        }
    };
    let full = wait_for(1.0);
    // Full for a while longer: many failed writes, still one log line.
    std::thread::sleep(Duration::from_millis(700));
    let errors_full = series(&full, r#"prober_sink_write_errors_total{probe="loop"}"#).unwrap();
    assert!(errors_full >= 1.0, "{full}");
    std::fs::remove_file(&filler).unwrap();
    let again = wait_for(0.0);
    std::thread::sleep(Duration::from_millis(300));
    let errors = series(&again, r#"prober_sink_write_errors_total{probe="loop"}"#).unwrap();
    assert!(errors > errors_full, "{errors} after {errors_full}");
    let sent = series(&again, r#"prober_probes_sent_total{probe="loop""#).unwrap();
    let dir = d.dir.clone();
    let (code, err) = d.stop();
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(
        err.matches("probing goes on").count(),
        1,
        "one line when the failures start:\n{err}"
    );
    assert_eq!(
        err.matches("sink files are written again").count(),
        1,
        "{err}"
    );
    // The CSV has every probe, the JSON lines file whole lines with a gap.
    let csv = std::fs::read_to_string(dir.join("loop.csv")).unwrap();
    let csv_seqs: Vec<u64> = csv
        .lines()
        .skip(1)
        .map(|r| r.split(',').nth(4).unwrap().parse().unwrap())
        .collect();
    assert!(csv_seqs.len() as f64 >= sent, "{} < {sent}", csv_seqs.len());
    assert!(
        csv_seqs.iter().enumerate().all(|(i, &s)| s == i as u64),
        "the csv has every seq once, in order"
    );
    let text = std::fs::read_to_string(&jsonl_path).unwrap();
    assert!(
        text.ends_with('\n'),
        "torn: …{}",
        &text[text.len().saturating_sub(80)..]
    );
    let seqs: Vec<u64> = text
        .lines()
        .map(|l| {
            let v: Value = serde_json::from_str(l).expect("whole records");
            v["seq"].as_u64().unwrap()
        })
        .collect();
    let last = *csv_seqs.last().unwrap();
    assert!(
        seqs.len() < csv_seqs.len() && seqs.last() == Some(&last),
        "a gap, then writing resumed up to the last probe ({} of {} lines, last {:?} vs {last})",
        seqs.len(),
        csv_seqs.len(),
        seqs.last()
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Targets from a Prometheus file_sd file, with their group's labels; the
/// file changed under the running daemon adds and removes targets without
/// a restart (the others keep their counters), and a broken file keeps
/// the last good set and says so in the reload metric.
#[test]
fn file_sd_targets_follow_the_file() {
    let mut d = Daemon::start_with_files(
        "file-sd",
        r#"
[[job]]
name = "sd"
interval = "20ms"
timeout = "200ms"
file_sd = ["targets.json"]
file_sd_scheme = "udp"
"#,
        &[(
            "targets.json",
            r#"[{"targets": ["RESPONDER"], "labels": {"zone": "a", "__meta_ignored": "x"}}]"#,
        )],
    );
    let udp = format!(
        r#"prober_probes_sent_total{{probe="sd",target="udp://{}",protocol="udp",zone="a"}}"#,
        d.udp
    );
    let tcp = format!(
        r#"prober_probes_sent_total{{probe="sd",target="tcp://{}",protocol="tcp",zone="b"}}"#,
        d.udp
    );
    let wait_for =
        |what: &str, ok: &dyn Fn(&str) -> bool| d.scrape_until(what, Duration::from_secs(10), ok);
    let first = wait_for("the udp target with its label", &|t| {
        series(t, &udp).is_some_and(|n| n > 0.0)
    });
    assert!(!first.contains("__meta_ignored"), "{first}");
    // Replaced atomically (as Prometheus recommends): a second group.
    let replace = |text: &str| {
        let tmp = d.dir.join("targets.json.tmp");
        std::fs::write(&tmp, text.replace("RESPONDER", &d.udp)).unwrap();
        std::fs::rename(&tmp, d.dir.join("targets.json")).unwrap();
    };
    let before = series(&first, &udp).unwrap();
    replace(
        r#"[{"targets": ["RESPONDER"], "labels": {"zone": "a"}}, {"targets": ["tcp://RESPONDER"], "labels": {"zone": "b"}}]"#,
    );
    let both = wait_for("the tcp target added", &|t| series(t, &tcp).is_some());
    assert!(
        series(&both, &udp).unwrap() > before,
        "the udp target kept its counters"
    );
    // A broken file: the last good set runs on, and the metric says so.
    replace(r#"[{"targets": ["RESPONDER"]"#);
    let broken = wait_for("the reload rejected", &|t| {
        series(t, "prober_config_last_reload_successful ") == Some(0.0)
    });
    assert!(series(&broken, &tcp).is_some(), "{broken}");
    // The tcp group removed: its target goes.
    replace(r#"[{"targets": ["RESPONDER"], "labels": {"zone": "a"}}]"#);
    let after = wait_for("the tcp target removed", &|t| {
        series(t, &tcp).is_none() && series(t, "prober_config_last_reload_successful ") == Some(1.0)
    });
    assert!(series(&after, &udp).unwrap() > series(&both, &udp).unwrap());
    let dir = d.dir.clone();
    let (code, err) = d.stop();
    assert_eq!(code, Some(0), "{err}");
    assert!(err.contains("a target file changed"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// The status page as a person sees it: headless Chromium loads it from a
/// running daemon with a live target and a dead one; the rows say which is
/// which, with the dead one's error, and a screenshot is written
/// (`PROBER_KEEP_SHOT=path` keeps it for a look).
#[test]
fn the_status_page_shows_live_and_dead_targets_in_a_browser() {
    let Some(bin) = crate::report::chromium() else {
        return;
    };
    let dead = free_port();
    // The dead target comes from a file_sd group with a label of its own,
    // as a mesh's dns_sd targets carry `dns_name`.
    let sd = format!(
        r#"[{{"targets": ["udp://127.0.0.1:{dead}"], "labels": {{"dns_name": "h4-2.hosts.fleet.lab"}}}}]"#
    );
    let mut d = Daemon::start_with_files(
        "status",
        r#"
[[job]]
name = "loop"
interval = "20ms"
timeout = "200ms"
labels = { zone = "<a&b>" }
targets = ["udp://RESPONDER", "tcp://RESPONDER"]
file_sd = ["sd.json"]
"#,
        &[("sd.json", &sd)],
    );
    // Long enough for every target's window to fill past a few probes.
    std::thread::sleep(Duration::from_millis(1500));
    let profile = d.dir.join("chromium");
    let url = format!("http://{}/", d.metrics);
    let (dom, console) = crate::report::headless_url(bin, &url, "--dump-dom", &profile.join("a"));
    assert!(console.is_empty(), "{console:?}");
    assert!(dom.contains("<li>config: loaded</li>"), "{dom}");
    let row = |target: &str| -> String {
        dom.split("<tr class=")
            .find(|r| r.contains(&format!("<code>{target}</code>")))
            .unwrap_or_else(|| panic!("no row for {target}:\n{dom}"))
            .to_owned()
    };
    for live in [format!("udp://{}", d.udp), format!("tcp://{}", d.udp)] {
        let r = row(&live);
        assert!(r.starts_with("\"ok\""), "{r}");
        // Last minute and last hour: no loss, a p50 and a p99 each.
        assert_eq!(r.matches(">0.0% of ").count(), 2, "{r}");
        // "189.0 / 224.8 µs": the unit once where both share it.
        assert_eq!(r.matches(" / ").count(), 2, "{r}");
        assert!(
            r.contains("<svg class=\"spark\"") && r.contains("<polyline points=\"0.0,"),
            "{r}"
        );
        assert!(
            r.contains("client wake "),
            "the last round trip's parts: {r}"
        );
        // A label every row shares is said once above the table.
        assert!(!r.contains("zone="), "{r}");
    }
    assert!(
        dom.contains("labels of every target below: <code>zone=&lt;a&amp;b&gt;</code>"),
        "labels escaped, said once: {dom}"
    );
    let r = row(&format!("udp://127.0.0.1:{dead}"));
    assert!(r.starts_with("\"down\""), "{r}");
    // A row's own labels sit under its target, not in a column of their
    // own that would push the last column off 1280 px.
    assert!(
        r.contains(&format!(
            "<code>udp://127.0.0.1:{dead}</code><div class=\"lb\">dns_name=h4-2.hosts.fleet.lab</div></td>"
        )),
        "{r}"
    );
    assert!(dom.contains(">target and its own labels</th>"), "{dom}");
    assert!(!dom.contains(">labels</th>"), "{dom}");
    assert_eq!(r.matches(">100.0% of ").count(), 2, "{r}");
    // The latest probe in a column of its own, and why it was lost in the
    // last column, whole on hover.
    assert!(r.contains("refused") && r.contains(">lost<"), "{r}");
    assert!(r.contains("<div class=\"clip\" title=\""), "{r}");
    assert!(dom.contains("3 targets: <b>1</b> down"), "{dom}");
    let shot = std::env::var("PROBER_KEEP_SHOT")
        .map_or_else(|_| d.dir.join("status.png"), std::path::PathBuf::from);
    crate::report::headless_sized(
        bin,
        &url,
        &format!("--screenshot={}", shot.display()),
        &profile.join("b"),
        "1280,360",
    );
    // Three rows on a wide page: 2.95 % of its pixels inked once (a blank
    // page has none), so the floor is 2 %.
    crate::report::assert_not_blank(&shot, 2.0, 0.3);
    let dir = d.dir.clone();
    let (code, err) = d.stop();
    assert_eq!(code, Some(0), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// The HTTP status curl got for `path`, with `args` (credentials) added.
fn status_of(addr: &str, path: &str, args: &[&str]) -> (String, String) {
    let out = Command::new("curl")
        .args(["-s", "--max-time", "5", "-o", "/dev/null", "-D", "-"])
        .args(args)
        .arg(format!("http://{addr}{path}"))
        .output()
        .unwrap();
    let head = String::from_utf8_lossy(&out.stdout).into_owned();
    let code = head.split_whitespace().nth(1).unwrap_or("").to_owned();
    (code, head)
}

/// With `[metrics] basic_auth` or `bearer_token_file`, the metrics, the
/// status page and every other path refuse a client without the right
/// credentials (401 and a challenge), except Kubernetes' health checks.
#[test]
fn the_metrics_port_refuses_wrong_credentials() {
    let job = "[[job]]\nname = \"a\"\ninterval = \"100ms\"\ntargets = [\"udp://RESPONDER\"]\n";
    let mut basic = Daemon::start_with_files(
        "auth-basic",
        &format!("basic_auth = {{ user = \"prom\", password_file = \"pass\" }}\n{job}"),
        &[("pass", "s3cret\n")],
    );
    let m = basic.metrics.clone();
    for path in ["/metrics", "/", "/status", "/nothing"] {
        for args in [
            &[][..],
            &["-u", "prom:wrong"][..],
            &["-u", "other:s3cret"][..],
            &["-u", "prom:s3cret2"][..],
            &["-H", "Authorization: Bearer s3cret"][..],
        ] {
            let (code, head) = status_of(&m, path, args);
            assert_eq!(code, "401", "{path} {args:?}: {head}");
            assert!(
                head.to_lowercase()
                    .contains("www-authenticate: basic realm=\"prober\""),
                "{head}"
            );
        }
    }
    for path in ["/metrics", "/", "/status"] {
        assert_eq!(
            status_of(&m, path, &["-u", "prom:s3cret"]).0,
            "200",
            "{path}"
        );
    }
    // The scheme in any case (RFC 9110), the credentials exactly.
    let (code, _) = status_of(
        &m,
        "/metrics",
        &["-H", "Authorization: basic cHJvbTpzM2NyZXQ="],
    );
    assert_eq!(code, "200");
    for path in ["/healthz", "/readyz"] {
        assert_eq!(
            status_of(&m, path, &[]).0,
            "200",
            "{path} needs no credentials"
        );
    }
    let basic_dir = basic.dir.clone();
    let (code, err) = basic.stop();
    assert_eq!(code, Some(0), "{err}");

    let mut bearer = Daemon::start_with_files(
        "auth-bearer",
        &format!("bearer_token_file = \"token\"\n{job}"),
        &[("token", "t0ken")],
    );
    let m = bearer.metrics.clone();
    for args in [
        &[][..],
        &["-H", "Authorization: Bearer t0ke"][..],
        &["-H", "Authorization: Bearer t0kenX"][..],
        &["-u", "x:t0ken"][..],
    ] {
        let (code, head) = status_of(&m, "/metrics", args);
        assert_eq!(code, "401", "{args:?}: {head}");
        assert!(
            head.to_lowercase().contains("www-authenticate: bearer"),
            "{head}"
        );
    }
    let (code, _) = status_of(&m, "/metrics", &["-H", "Authorization: Bearer t0ken"]);
    assert_eq!(code, "200");
    let bearer_dir = bearer.dir.clone();
    let (code, err) = bearer.stop();
    assert_eq!(code, Some(0), "{err}");
    for dir in [basic_dir, bearer_dir] {
        let _ = std::fs::remove_dir_all(dir);
    }
}

/// A daemon that only probes receives adaptively unless its file says
/// otherwise; one that also answers (`[serve]`) parks in epoll, since a
/// spin on its one thread would hold up the answers due meanwhile.
#[test]
fn a_daemon_that_only_probes_receives_adaptively() {
    let responder = crate::support::Serve::start(&["--quiet", "--udp", "127.0.0.1:0"], 1);
    let files = crate::support::Files::new("daemon-adaptive");
    let config = files.write(
        "prober.toml",
        &format!(
            "[metrics]\nlisten = \"127.0.0.1:0\"\n\n[[job]]\nname = \"only\"\ninterval = \"20ms\"\ntargets = [\"udp://{}\"]\n",
            responder.addr("udp")
        ),
    );
    let daemon = crate::support::Serve::start(&["--quiet", "--config", &config], 1);
    let metrics = daemon.addr("metrics").to_owned();
    let spin = "prober_receive_spin_seconds_total{";
    let deadline = Instant::now() + Duration::from_secs(20);
    let text = loop {
        let text = http_get(&metrics, "/metrics");
        if text.contains(spin) {
            break text;
        }
        assert!(
            Instant::now() < deadline,
            "no spin counter from a daemon that only probes:\n{text}"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(text.contains("probe=\"only\""), "{text}");
    daemon.stop();

    // The same job in a daemon that answers too: no spins.
    let mut d = Daemon::start("answers", &JOBS.replace("20ms", "10ms"));
    let text = d.scrape_until("probes counted", Duration::from_secs(20), &|t| {
        t.contains("prober_probes_sent_total{")
    });
    assert!(!text.contains(spin), "a daemon that answers spun:\n{text}");
    let (code, err) = d.stop();
    assert_eq!(code, Some(0), "{err}");
}

/// `--check-config` merges `[serve]` with the command line's listeners as
/// starting the daemon does, and refuses what starting it would refuse.
#[test]
fn check_config_refuses_what_starting_would_refuse() {
    let files = crate::support::Files::new("daemon-check-serve");
    for (serve, extra, why) in [
        ("rate_limit = 5\n", &[][..], "nothing to do"),
        ("https = \"127.0.0.1:0\"\n", &[], "--https needs --tls-cert"),
        (
            "stamp = \"127.0.0.1:0\"\nstamp_key = \"/nonexistent/stamp.key\"\n",
            &[],
            "/nonexistent/stamp.key",
        ),
        (
            "stamp = \"127.0.0.1:0\"\nstamp_rate = 10\n",
            &["--stamp", "127.0.0.1:0"],
            "whose stamp_rate would then be ignored: set it in one place",
        ),
    ] {
        let cfg = files.write("c.toml", &format!("[serve]\n{serve}"));
        for check in [true, false] {
            // Bounded: a daemon that started after all would run on.
            let mut cmd = Command::new("timeout");
            cmd.args(["20", env!("CARGO_BIN_EXE_prober")])
                .env_remove("RUST_LOG")
                .args(["serve", "--quiet", "--config", &cfg])
                .args(extra);
            if check {
                cmd.arg("--check-config");
            }
            let out = cmd.output().unwrap();
            let err = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(2), "{serve} (check {check}): {err}");
            assert!(
                err.to_lowercase().contains(&why.to_lowercase()),
                "{serve} (check {check}): {err}"
            );
        }
    }
}

/// A scrape storm: 50 clients fetching `/metrics` and the status page in a
/// loop, against three targets at 20 ms. Exporting must not disturb
/// measuring: every slot is sent, the send lag stays low (a generous bound:
/// the goals are BENCHMARKS.md's, "Scrapes and the send lag"), the excess
/// scrapes get 503 at once and are counted, and the daemon still answers
/// a scrape afterwards.
#[test]
fn a_scrape_storm_does_not_disturb_the_probes() {
    let _machine = crate::support::loads_machine();
    let mut d = Daemon::start(
        "storm",
        r#"
[[job]]
name = "storm"
interval = "20ms"
timeout = "500ms"
targets = ["udp://RESPONDER", "tcp://RESPONDER", "udp://127.0.0.2:1"]
sinks = { jsonl = { path = "storm.jsonl" } }
"#,
    );
    std::thread::sleep(Duration::from_millis(300));
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let answers = std::sync::Arc::new(std::sync::Mutex::new(BTreeMap::<u16, u64>::new()));
    let clients: Vec<_> = (0..50)
        .map(|i| {
            let (stop, answers) = (stop.clone(), answers.clone());
            let addr = d.metrics.clone();
            // Each client keeps its connection, as a scraper does: a new
            // one per request would run through the ephemeral ports.
            std::thread::spawn(move || {
                let path = if i % 10 == 0 { "/" } else { "/metrics" };
                let mut conn = None;
                // Bounded: at most 2,000 requests a client, and the stop.
                for _ in 0..2000 {
                    if stop.load(std::sync::atomic::Ordering::Relaxed) {
                        break;
                    }
                    if conn.is_none() {
                        conn = std::net::TcpStream::connect(&addr)
                            .ok()
                            .map(std::io::BufReader::new);
                    }
                    let Some(c) = conn.as_mut() else { continue };
                    let code = keep_alive_get(c, path).unwrap_or_else(|| {
                        conn = None;
                        0
                    });
                    *answers.lock().unwrap().entry(code).or_default() += 1;
                }
            })
        })
        .collect();
    std::thread::sleep(Duration::from_secs(3));
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for c in clients {
        c.join().unwrap();
    }
    let answers = answers.lock().unwrap().clone();
    assert!(answers.get(&200).copied().unwrap_or(0) > 0, "{answers:?}");
    assert!(answers.get(&503).copied().unwrap_or(0) > 0, "{answers:?}");
    assert!(
        answers.keys().all(|c| *c == 200 || *c == 503),
        "only 200 and 503: {answers:?}"
    );
    let after = d.scrape();
    let refused: f64 = after
        .lines()
        .find(|l| l.starts_with("prober_scrapes_refused_total"))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
        .expect("the refused counter");
    assert!(refused >= answers[&503] as f64, "{refused} {answers:?}");
    let dir = d.dir.clone();
    let (code, err) = d.stop();
    assert_eq!(code, Some(0), "{err}");
    let lines = jsonl(&dir.join("storm.jsonl"));
    let mut lags: Vec<u64> = lines
        .iter()
        .map(|p| p["send_lag_ns"].as_u64().unwrap())
        .collect();
    lags.sort_unstable();
    // Every slot sent: each target's seqs run from 0 without a gap.
    let mut last: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    for p in &lines {
        last.entry(p["target"].as_str().unwrap().to_owned())
            .or_default()
            .push(p["seq"].as_u64().unwrap());
    }
    assert_eq!(last.len(), 3);
    for (t, mut seqs) in last {
        seqs.sort_unstable();
        let n = seqs.len() as u64;
        assert!(n >= 100, "{t}: {n} probes in 3.3 s at 20 ms");
        assert_eq!(seqs, (0..n).collect::<Vec<_>>(), "{t}: a slot missed");
    }
    let p50 = lags[lags.len() / 2];
    // Before the HTTP side had its own thread, 161 scrapes/s put the p50
    // at 15 ms; the goal (benchmark) is under 1 ms.
    assert!(p50 < 5_000_000, "send lag p50 {p50} ns under the storm");
    let _ = std::fs::remove_dir_all(&dir);
}

/// One GET on a kept connection: its status, having read its body (by its
/// Content-Length); `None` if the connection failed.
fn keep_alive_get(c: &mut std::io::BufReader<std::net::TcpStream>, path: &str) -> Option<u16> {
    use std::io::{BufRead, Read, Write};
    write!(c.get_mut(), "GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").ok()?;
    let mut line = String::new();
    c.read_line(&mut line).ok()?;
    let code = line.split_whitespace().nth(1)?.parse().ok()?;
    let (mut length, mut chunked) = (0usize, false);
    loop {
        line.clear();
        if c.read_line(&mut line).ok()? == 0 {
            return None;
        }
        let l = line.trim_end();
        if l.is_empty() {
            break;
        }
        if let Some((k, v)) = l.split_once(':') {
            if k.eq_ignore_ascii_case("content-length") {
                length = v.trim().parse().ok()?;
            } else if k.eq_ignore_ascii_case("transfer-encoding") {
                chunked = v.trim().eq_ignore_ascii_case("chunked");
            }
        }
    }
    if !chunked {
        let mut body = vec![0; length];
        c.read_exact(&mut body).ok()?;
        return Some(code);
    }
    // `/metrics` streams its body: chunks, each its size in hex, a
    // zero-sized one last.
    loop {
        line.clear();
        c.read_line(&mut line).ok()?;
        let size = usize::from_str_radix(line.trim_end(), 16).ok()?;
        let mut chunk = vec![0; size + 2];
        if size == 0 {
            line.clear();
            c.read_line(&mut line).ok()?;
            return Some(code);
        }
        c.read_exact(&mut chunk).ok()?;
    }
}

/// A thread's scheduling policy and realtime priority, from
/// `/proc/PID/task/TID/stat` (fields 41 and 40); `None` once it is gone
/// (a runtime's idle blocking thread ends after a while).
fn sched_of(pid: u32, tid: &str) -> Option<(u32, u32)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/stat")).ok()?;
    let fields: Vec<&str> = stat[stat.rfind(')')? + 2..].split(' ').collect();
    // Field 3 (the state) is the first after the name.
    Some((fields[41 - 3].parse().ok()?, fields[40 - 3].parse().ok()?))
}

/// Whether this process may use `SCHED_FIFO` (`CAP_SYS_NICE`, bit 23 of
/// its effective capabilities).
fn may_be_realtime() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            let hex = s
                .lines()
                .find_map(|l| l.strip_prefix("CapEff:"))?
                .trim()
                .to_owned();
            u64::from_str_radix(&hex, 16).ok()
        })
        .is_some_and(|caps| caps & (1 << 23) != 0)
}

/// `[probing] realtime_priority`: the probing thread under SCHED_FIFO, and
/// nothing else of the daemon; without `CAP_SYS_NICE` it says so and
/// probes; a priority out of range refused by `--check-config` and at
/// start with the key's name.
#[test]
fn the_probing_thread_runs_at_the_realtime_priority_asked_for() {
    if !may_be_realtime() {
        prober_core::testutil::skip("SCHED_FIFO needs CAP_SYS_NICE (CI runs as root)");
        return;
    }
    let mut d = Daemon::start(
        "realtime",
        &format!("[probing]\nrealtime_priority = 3\n{JOBS}"),
    );
    d.scrape_until("probes counted", Duration::from_secs(20), &|t| {
        t.contains("prober_probes_sent_total{")
    });
    let pid = d.child.id();
    const SCHED_FIFO: u32 = 1;
    // The main thread sends and receives the probes (a one-thread runtime).
    assert_eq!(sched_of(pid, &pid.to_string()), Some((SCHED_FIFO, 3)));
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).unwrap();
    for task in tasks {
        let tid = task.unwrap().file_name().into_string().unwrap();
        let name = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/comm"));
        if let (false, Some((policy, _)), Ok(name)) =
            (tid == pid.to_string(), sched_of(pid, &tid), name)
        {
            assert_eq!(policy, 0, "{} is realtime too", name.trim());
        }
    }
    let (code, err) = d.stop();
    assert_eq!(code, Some(0), "{err}");

    // Not allowed (no CAP_SYS_NICE, no realtime rlimit): it says so, and
    // probes.
    let files = crate::support::Files::new("daemon-realtime-range");
    let cfg = files.write(
        "c.toml",
        "[probing]\nrealtime_priority = 3\n[metrics]\nlisten = \"127.0.0.1:0\"\n[[job]]\nname = \"x\"\ntargets = [\"udp://127.0.0.1:9\"]\n",
    );
    // Bounded: a daemon that never says it started would run on.
    let mut child = Command::new("timeout")
        .args(["20", "prlimit", "--rtprio=0", "setpriv"])
        .args(["--inh-caps=-sys_nice", "--ambient-caps=-sys_nice"])
        .args(["--bounding-set=-sys_nice"])
        .arg(env!("CARGO_BIN_EXE_prober"))
        .env_remove("RUST_LOG")
        .args(["serve", "--quiet", "--config", &cfg])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = String::new();
    for line in BufReader::new(child.stderr.take().unwrap()).lines() {
        let Ok(line) = line else { break };
        err.push_str(&line);
        err.push('\n');
        if line.contains("daemon started") {
            break;
        }
    }
    // SIGTERM, which `timeout` passes on to the daemon: a SIGKILL would
    // end `timeout` alone and leave the daemon running.
    crate::support::sigterm(child.id());
    let _ = child.wait();
    assert!(
        err.contains(
            "cannot run the probing thread at realtime priority 3: Operation not permitted"
        ),
        "{err}"
    );
    assert!(err.contains("daemon started targets=1"), "{err}");
    for bad in ["0", "100", "-1"] {
        let cfg = files.write("c.toml", &format!("[probing]\nrealtime_priority = {bad}\n"));
        for check in [true, false] {
            let out = Command::new("timeout")
                .args(["20", env!("CARGO_BIN_EXE_prober")])
                .env_remove("RUST_LOG")
                .args(["serve", "--quiet", "--config", &cfg])
                .args(check.then_some("--check-config"))
                .output()
                .unwrap();
            let err = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(2), "{bad} (check {check}): {err}");
            assert!(
                err.contains(&format!(
                    "probing.realtime_priority: must be 1 to 99 (a SCHED_FIFO priority), not {bad}"
                )),
                "{bad} (check {check}): {err}"
            );
        }
    }
}

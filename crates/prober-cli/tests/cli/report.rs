//! `prober report` and `prober sweep`: the page opened in headless
//! Chromium, bad input, and a sweep against the responder.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

use crate::support::{Server, run};

fn tmp(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("prober-report-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// The Chromium binary, or `None` outside CI when it is not installed
/// (`.ci/run` installs it, so CI always runs the browser test).
pub(crate) fn chromium() -> Option<&'static str> {
    for bin in ["chromium", "chromium-browser", "google-chrome"] {
        if Command::new(bin)
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success())
        {
            return Some(bin);
        }
    }
    prober_core::testutil::skip("no Chromium (.ci/run installs chromium)");
    None
}

/// Runs headless Chromium on the file `page` with `mode` (`--dump-dom` or
/// `--screenshot=…`); returns (stdout, the console messages it logged).
fn headless(bin: &str, page: &Path, mode: &str, profile: &Path) -> (String, Vec<String>) {
    headless_url(bin, &format!("file://{}", page.display()), mode, profile)
}

/// [`headless`] on any URL (a page a daemon serves).
pub(crate) fn headless_url(
    bin: &str,
    url: &str,
    mode: &str,
    profile: &Path,
) -> (String, Vec<String>) {
    headless_sized(bin, url, mode, profile, "1100,5000")
}

/// [`headless_url`] in a window of `size` (`"W,H"`).
pub(crate) fn headless_sized(
    bin: &str,
    url: &str,
    mode: &str,
    profile: &Path,
    size: &str,
) -> (String, Vec<String>) {
    let out = Command::new("timeout")
        .args(["120", bin])
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            // A screenshot of a frame whose every stage was drawn: a CI run
            // here caught the status page with its table's header painted
            // and its rows not yet (238 coloured pixels), the DOM whole.
            "--run-all-compositor-stages-before-draw",
            "--hide-scrollbars",
            "--no-first-run",
            "--enable-logging=stderr",
            "--v=0",
        ])
        .arg(format!("--window-size={size}"))
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg(mode)
        .arg(url)
        .output()
        .expect("chromium runs");
    assert!(out.status.success(), "chromium failed: {}", stderr(&out));
    let console = stderr(&out)
        .lines()
        .filter(|l| l.contains("CONSOLE"))
        .map(str::to_owned)
        .collect();
    (String::from_utf8_lossy(&out.stdout).into_owned(), console)
}

/// Every `<figure data-chart=…>`: its chart name and the SVG inside.
fn figures(dom: &str) -> Vec<(String, String)> {
    dom.split("<figure data-chart=\"")
        .skip(1)
        .map(|rest| {
            let (name, body) = rest.split_once('"').unwrap();
            let body = body.split("</figure>").next().unwrap();
            (name.to_owned(), body.to_owned())
        })
        .collect()
}

/// Drawn marks in an SVG: shapes and lines.
fn marks(svg: &str) -> usize {
    [
        "<path",
        "<rect",
        "<polyline",
        "<polygon",
        "<circle",
        "<line",
    ]
    .iter()
    .map(|m| svg.matches(m).count())
    .sum()
}

/// The stats table's cells: series → stat → ns.
fn table(dom: &str) -> BTreeMap<String, BTreeMap<String, f64>> {
    let table = dom
        .split("<table id=\"stats\">")
        .nth(1)
        .unwrap()
        .split("</table>")
        .next()
        .unwrap();
    let mut out = BTreeMap::new();
    for row in table.split("<tr data-series=\"").skip(1) {
        let (series, cells) = row.split_once('"').unwrap();
        let mut stats = BTreeMap::new();
        for cell in cells.split("<td data-stat=\"").skip(1) {
            let (stat, rest) = cell.split_once('"').unwrap();
            let attr = rest.split('>').next().unwrap();
            let value = attr
                .split("data-ns=\"")
                .nth(1)
                .or_else(|| attr.split("data-value=\"").nth(1))
                .and_then(|v| v.split('"').next())
                .filter(|v| !v.is_empty());
            if let Some(v) = value {
                stats.insert(stat.to_owned(), v.parse::<f64>().unwrap());
            }
        }
        out.insert(series.replace("&amp;", "&"), stats);
    }
    out
}

#[test]
fn report_opens_in_a_real_browser_with_every_chart_and_the_runs_numbers() {
    let Some(bin) = chromium() else { return };
    let dir = tmp("browser");
    // Every protocol against the in-process responder, and a dead target.
    let live = run(&["run", "-o", "json", "-c", "300", "-i", "1ms"]);
    assert!(live.status.success(), "{}", stderr(&live));
    std::fs::write(dir.join("live.json"), &live.stdout).unwrap();
    let dead = run(&[
        "run",
        "-o",
        "json",
        "-c",
        "20",
        "-i",
        "5ms",
        "-W",
        "50ms",
        "udp://127.0.0.1:9",
    ]);
    assert_eq!(dead.status.code(), Some(1), "{}", stderr(&dead));
    std::fs::write(dir.join("dead.json"), &dead.stdout).unwrap();
    let page = dir.join("page.html");
    let o = run(&[
        "report",
        dir.join("live.json").to_str().unwrap(),
        dir.join("dead.json").to_str().unwrap(),
        "-o",
        page.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let html = std::fs::read_to_string(&page).unwrap();
    // Self-contained: nothing to fetch, no script.
    for bad in ["<script", "src=\"http", "href=\"http", "@import", "url("] {
        assert!(!html.contains(bad), "the page holds {bad}");
    }

    // The console check itself works: a page that logs an error is caught.
    let canary = dir.join("canary.html");
    std::fs::write(
        &canary,
        "<html><body><script>console.error('canary-error')</script></body></html>",
    )
    .unwrap();
    let (_, console) = headless(bin, &canary, "--dump-dom", &dir.join("profile0"));
    assert!(
        console.iter().any(|l| l.contains("canary-error")),
        "{console:?}"
    );

    let (dom, console) = headless(bin, &page, "--dump-dom", &dir.join("profile1"));
    assert!(console.is_empty(), "the page logged: {console:?}");
    let figs = figures(&dom);
    let names: Vec<&str> = figs.iter().map(|(n, _)| n.as_str()).collect();
    // The self-test's targets (however many protocols the binary has) and
    // the dead one; a target without an answer may have no row.
    let live_targets = String::from_utf8_lossy(&live.stdout)
        .lines()
        .filter(|l| l.contains("\"type\":\"summary\""))
        .count();
    let targets = live_targets + 1;
    let series = table(&dom).len();
    assert!(
        series == targets || series == targets - 1,
        "{series} rows of {targets}"
    );
    for want in ["box", "violin", "percentiles", "parts"] {
        assert_eq!(names.iter().filter(|n| **n == want).count(), 1, "{names:?}");
    }
    assert_eq!(
        names.iter().filter(|n| **n == "timeseries").count(),
        series,
        "{names:?}"
    );
    for (name, svg) in &figs {
        assert_eq!(svg.matches("<svg").count(), 1, "{name}");
        // Axes and mesh alone are a few dozen marks; data adds more.
        assert!(marks(svg) > 20, "{name}: {} marks", marks(svg));
    }
    let boxes = &figs.iter().find(|(n, _)| n == "box").unwrap().1;
    assert!(
        boxes.contains("no successful probes"),
        "the dead target's box says so"
    );

    // The table's numbers are the run's own summary numbers.
    let cells = table(&dom);
    let mut checked = 0;
    for line in String::from_utf8_lossy(&live.stdout)
        .lines()
        .chain(String::from_utf8_lossy(&dead.stdout).lines())
    {
        let v: Value = serde_json::from_str(line).unwrap();
        if v["type"] != "summary" {
            continue;
        }
        let target = v["target"].as_str().unwrap();
        let row = &cells[target];
        assert_eq!(row["count"], v["ok"].as_f64().unwrap(), "{target}");
        if v["rtt"].is_null() {
            assert_eq!(v["ok"], 0);
            assert_eq!(row["loss"], 100.0, "{target}");
            assert!(!row.contains_key("p50"));
            continue;
        }
        for stat in [
            "mean", "std", "min", "p25", "p50", "p75", "p90", "p99", "p99.9", "max",
        ] {
            let want = v["rtt"][stat].as_f64().unwrap();
            let got = row[stat];
            assert!(
                (got - want).abs() <= want.abs() * 1e-12,
                "{target} {stat}: page {got}, summary {want}"
            );
        }
        checked += 1;
    }
    assert!(checked >= 7, "{checked} summaries compared");

    // A screenshot a person would see: not blank.
    let shot = dir.join("shot.png");
    headless(
        bin,
        &page,
        &format!("--screenshot={}", shot.display()),
        &dir.join("profile2"),
    );
    assert_not_blank(&shot, 1.0, 0.2);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A screenshot a person would call drawn: more than `inked_pct` % of its
/// pixels dark enough to read, and more than `coloured_pct` % in colour.
pub(crate) fn assert_not_blank(shot: &Path, inked_pct: f64, coloured_pct: f64) {
    let decoder = png::Decoder::new(std::io::BufReader::new(std::fs::File::open(shot).unwrap()));
    let mut reader = decoder.read_info().unwrap();
    let mut buf = vec![0; reader.output_buffer_size().unwrap()];
    let info = reader.next_frame(&mut buf).unwrap();
    let channels = info.color_type.samples();
    let pixels = &buf[..info.buffer_size()];
    let total = pixels.len() / channels;
    let inked = pixels
        .chunks(channels)
        .filter(|p| p[..3].iter().any(|&c| c < 200))
        .count();
    let coloured = pixels
        .chunks(channels)
        .filter(|p| p[..3].iter().max().unwrap() - p[..3].iter().min().unwrap() > 60)
        .count();
    let pct = |n: usize| 100.0 * n as f64 / total as f64;
    assert!(
        pct(inked) > inked_pct,
        "only {inked} of {total} pixels are drawn"
    );
    assert!(
        pct(coloured) > coloured_pct,
        "only {coloured} of {total} pixels have colour"
    );
}

#[test]
fn report_reads_what_it_can_and_says_why_for_the_rest() {
    let dir = tmp("bad");
    let good = run(&["run", "-o", "json", "-c", "50", "-i", "1ms", "-q"]);
    // -q keeps probe lines out: a file with summaries only draws nothing.
    assert!(good.status.success());
    std::fs::write(dir.join("summaries.json"), &good.stdout).unwrap();
    let live = run(&["run", "-o", "json", "-c", "50", "-i", "1ms"]);
    let mut text = String::from_utf8(live.stdout).unwrap();
    // Two runs in one file: each target of each run is its own series.
    std::fs::write(dir.join("mixed.json"), format!("{text}{text}")).unwrap();
    // A run killed mid-write: the last line is cut off.
    let cut = text.rfind("{\"type\":\"summary\"").unwrap() + 40;
    text.truncate(cut);
    std::fs::write(dir.join("truncated.json"), &text).unwrap();
    std::fs::write(dir.join("empty.json"), "").unwrap();
    std::fs::write(
        dir.join("foreign.json"),
        "{\"name\":\"x\",\"value\":1}\n{\"name\":\"y\"}\n",
    )
    .unwrap();
    std::fs::write(dir.join("binary.bin"), [0u8, 159, 146, 150]).unwrap();
    // An hlog with RTT, a known part and an unknown tag.
    let hlog = dir.join("d.hlog");
    {
        use hdrhistogram::serialization::V2DeflateSerializer;
        use hdrhistogram::serialization::interval_log::{IntervalLogWriterBuilder, Tag};
        let mut f = std::fs::File::create(&hlog).unwrap();
        let mut ser = V2DeflateSerializer::new();
        let mut w = IntervalLogWriterBuilder::new()
            .with_base_time(std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_700_000_000))
            .begin_log_with(&mut f, &mut ser)
            .unwrap();
        for k in 0..5u64 {
            let mut h = hdrhistogram::Histogram::<u64>::new(3).unwrap();
            for v in 0..200 {
                h.record(40_000 + v * 100 + k).unwrap();
            }
            let start = std::time::Duration::from_secs(k * 10);
            let len = std::time::Duration::from_secs(10);
            w.write_histogram(&h, start, len, Tag::new("tcp://10.0.0.1:8707"))
                .unwrap();
            w.write_histogram(&h, start, len, Tag::new("tcp://10.0.0.1:8707#network"))
                .unwrap();
            w.write_histogram(&h, start, len, Tag::new("tcp://10.0.0.1:8707#warp_drive"))
                .unwrap();
        }
    }
    // A daemon killed mid-line and restarted onto the same file: a line
    // that does not parse in the middle; the intervals after it still count.
    let text = std::fs::read_to_string(&hlog).unwrap();
    let mut lines: Vec<&str> = text.lines().collect();
    let at = lines.len() - 6;
    lines.insert(at, "12.3,1.");
    std::fs::write(&hlog, lines.join("\n") + "\n").unwrap();
    let page = dir.join("page.html");
    let path = |n: &str| dir.join(n).to_str().unwrap().to_owned();
    let o = run(&["report", &path("mixed.json"), "-o", page.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stderr(&o).contains("holds 2 runs"), "{}", stderr(&o));
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(html.contains("tcp://") && html.contains(" (run 1)") && html.contains(" (run 2)"));
    let o = run(&[
        "report",
        &path("truncated.json"),
        &path("empty.json"),
        &path("foreign.json"),
        &path("binary.bin"),
        &path("summaries.json"),
        &path("d.hlog"),
        "-o",
        page.to_str().unwrap(),
    ]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("empty.json: the file is empty"), "{err}");
    assert!(err.contains("foreign.json: no prober probe lines"), "{err}");
    assert!(
        err.contains("binary.bin: neither JSON lines nor an HdrHistogram log"),
        "{err}"
    );
    assert!(
        err.contains("summaries.json: no prober probe lines"),
        "{err}"
    );
    assert!(err.contains("last line is cut off"), "{err}");
    assert!(err.contains("warp_drive"), "{err}");
    assert!(err.contains("does not parse: \"12.3,1.\""), "{err}");
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(html.contains("only histogram-based charts are possible"));
    assert!(html.contains("tcp://10.0.0.1:8707"));
    assert!(
        html.contains("data-chart=\"parts\""),
        "the hlog's network part is drawn"
    );
    // The hlog's table row: 5 × 200 values, median near 50 µs.
    let cells = table(&html);
    let row = &cells["tcp://10.0.0.1:8707"];
    assert_eq!(row["count"], 1000.0);
    assert!((row["p50"] - 50_000.0).abs() < 200.0, "{}", row["p50"]);

    // Filters: --target keeps one series, --since/--until cut by time.
    let o = run(&[
        "report",
        &path("d.hlog"),
        "--since",
        "1700000020",
        "--until",
        "1700000040",
        "--table",
        "csv",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let csv = String::from_utf8(o.stdout).unwrap();
    assert!(
        csv.lines()
            .nth(1)
            .unwrap()
            .starts_with("tcp://10.0.0.1:8707,400,400,"),
        "{csv}"
    );
    let o = run(&[
        "report",
        &path("d.hlog"),
        "--target",
        "nothing-like-it",
        "-o",
        page.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("none that --target/--since/--until keep"),
        "{}",
        stderr(&o)
    );
    // Nothing readable at all: exit 2.
    let o = run(&["report", &path("empty.json"), "-o", page.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("nothing to draw"));
    let o = run(&["report", &path("nope.json")]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("nope.json"), "{}", stderr(&o));
    // Markdown table, SVG and PNG chart files.
    let o = run(&["report", &path("d.hlog"), "--table", "md"]);
    assert!(String::from_utf8_lossy(&o.stdout).starts_with("| series | count | loss |"));
    let charts = dir.join("charts");
    let o = run(&[
        "report",
        &path("d.hlog"),
        "--format",
        "svg",
        "-o",
        charts.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        std::fs::read_to_string(charts.join("box.svg"))
            .unwrap()
            .starts_with("<svg")
    );
    let o = run(&[
        "report",
        &path("d.hlog"),
        "--format",
        "png",
        "-o",
        charts.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        std::fs::read(charts.join("percentiles.png"))
            .unwrap()
            .starts_with(b"\x89PNG")
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn sweep_runs_every_point_per_round_and_report_draws_the_curve() {
    let server = Server::start(&[]);
    let dir = tmp("sweep");
    let target = format!("tcp://{}", server.tcp);
    let o = run(&[
        "sweep",
        "--intervals",
        "1ms,5ms",
        "-c",
        "20",
        "--warmup",
        "2",
        "--rounds",
        "2",
        "--seed",
        "7",
        "-o",
        "json",
        &target,
        &format!("udp://{}", server.udp),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = String::from_utf8(o.stdout.clone()).unwrap();
    let lines: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines[0]["type"], "sweep");
    let order = lines[0]["order"].as_array().unwrap();
    assert_eq!(order.len(), 2 * 2 * 2);
    let mut probes: BTreeMap<(String, u64), usize> = BTreeMap::new();
    for l in &lines[1..] {
        let iv = l["sweep"]["interval_ns"]
            .as_u64()
            .expect("every record carries its interval");
        if l["type"] == "probe" {
            *probes
                .entry((l["target"].as_str().unwrap().to_owned(), iv))
                .or_default() += 1;
        }
    }
    // 20 probes × 2 rounds at each of the 4 (target, interval) points.
    assert_eq!(probes.len(), 4, "{probes:?}");
    assert!(probes.values().all(|&n| n == 40), "{probes:?}");
    // Each point receives as `prober run` at that interval does.
    let metas: Vec<&Value> = lines.iter().filter(|l| l["type"] == "meta").collect();
    assert_eq!(metas.len(), 8);
    assert!(
        metas.iter().all(|m| m["receive"] == "adaptive"),
        "{metas:?}"
    );
    // The table on stderr (stdout holds the JSON).
    let err = stderr(&o);
    assert!(
        err.contains("1.00 ms") && err.contains("5.00 ms") && err.contains("p50"),
        "{err}"
    );
    std::fs::write(dir.join("sweep.json"), &text).unwrap();
    let page = dir.join("sweep.html");
    let r = run(&[
        "report",
        dir.join("sweep.json").to_str().unwrap(),
        "-o",
        page.to_str().unwrap(),
    ]);
    assert!(r.status.success(), "{}", stderr(&r));
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(html.contains("data-chart=\"sweep\""));
    // Each point's distribution too, not only the curve: a box per target
    // and interval.
    let points = html
        .split("data-chart=\"points\"")
        .nth(1)
        .expect("a box per sweep point")
        .split("</figure>")
        .next()
        .unwrap();
    assert_eq!(points.matches(" @ 1.00 ms").count(), 2, "{points:.300}");
    assert_eq!(points.matches(" @ 5.00 ms").count(), 2, "{points:.300}");
    let table = html.split("sweep-table").nth(1).unwrap();
    assert_eq!(table.matches("<tr><td class=\"name\">").count(), 4);
    // Each point's p50 in the report is the sweep's own: the same
    // HdrHistogram over the same probes (every round, in file order).
    let table = table.split("</table>").next().unwrap();
    for row in table.split("<tr><td class=\"name\">").skip(1) {
        let ns: Vec<f64> = row
            .split("data-ns=\"")
            .skip(1)
            .map(|c| c.split('"').next().unwrap().parse().unwrap())
            .collect();
        let (interval, p50) = (ns[0] as u64, ns[2]);
        let target = [&target, &format!("udp://{}", server.udp)]
            .into_iter()
            .find(|t| row.contains(t.as_str()))
            .unwrap()
            .clone();
        let mut d = prober_core::stats::Dist::default();
        for l in &lines[1..] {
            if l["type"] == "probe"
                && l["target"] == target.as_str()
                && l["sweep"]["interval_ns"] == interval
                && l["outcome"] == "ok"
            {
                d.record_ns(l["rtt_ns"].as_u64().unwrap());
            }
        }
        assert_eq!(
            p50,
            d.summary().unwrap().p50 as f64,
            "{target} at {interval} ns: {row}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// `prober report` with a time limit, so a hang fails instead of stalling CI.
fn report_within(args: &[&str]) -> Output {
    Command::new("timeout")
        .arg("60")
        .arg(env!("CARGO_BIN_EXE_prober"))
        .arg("report")
        .args(args)
        .output()
        .unwrap()
}

#[test]
fn report_draws_dead_targets_and_dead_sweeps() {
    let dir = tmp("dead");
    let dead = run(&[
        "run",
        "-o",
        "json",
        "-c",
        "3",
        "-i",
        "5ms",
        "-W",
        "50ms",
        "udp://127.0.0.1:9",
    ]);
    std::fs::write(dir.join("dead.json"), &dead.stdout).unwrap();
    let sweep = run(&[
        "sweep",
        "--intervals",
        "1ms,10ms",
        "-c",
        "3",
        "--warmup",
        "0",
        "-W",
        "50ms",
        "-o",
        "json",
        "udp://127.0.0.1:9",
    ]);
    assert_eq!(sweep.status.code(), Some(1), "{}", stderr(&sweep));
    std::fs::write(dir.join("sweep.json"), &sweep.stdout).unwrap();
    for args in [
        vec!["--log", "dead.json"],
        vec!["dead.json"],
        vec!["sweep.json"],
    ] {
        let mut all: Vec<String> = args
            .iter()
            .map(|a| {
                if a.ends_with(".json") {
                    dir.join(a).to_str().unwrap().to_owned()
                } else {
                    (*a).to_owned()
                }
            })
            .collect();
        all.extend([
            "-o".to_owned(),
            dir.join("page.html").to_str().unwrap().to_owned(),
        ]);
        let all: Vec<&str> = all.iter().map(String::as_str).collect();
        let o = report_within(&all);
        assert!(
            o.status.success(),
            "{args:?}: {:?} {}",
            o.status,
            stderr(&o)
        );
        let html = std::fs::read_to_string(dir.join("page.html")).unwrap();
        assert!(html.contains("</html>"));
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn sweep_refuses_bad_intervals_and_long_points_before_running() {
    let cases: [(&[&str], &str); 5] = [
        (&["--intervals", "10ms,1ms"], "ascending"),
        (&["--intervals", "1ms,1ms"], "given twice"),
        (&["--intervals", "0,1ms"], "closed loop"),
        (
            &["--intervals", "1s", "-c", "1000"],
            "use --count 59 or fewer",
        ),
        (&["--intervals", "1ms", "-d", "2m"], "shorter --duration"),
    ];
    for (args, want) in cases {
        let mut all = vec!["sweep"];
        all.extend_from_slice(args);
        all.push("tcp://127.0.0.1:9");
        let o = run(&all);
        assert_eq!(o.status.code(), Some(2), "{args:?}");
        assert!(stderr(&o).contains(want), "{args:?}: {}", stderr(&o));
    }
}

/// The settings table says what each series' RTT runs between and which
/// kernel stamps its run took, and the banner names a difference in
/// either; series measured alike get no banner.
#[test]
fn report_names_settings_that_differ_between_series() {
    let dir = tmp("settings");
    let server = Server::start(&[]);
    let target = format!("udp://{}", server.udp);
    let out = run(&["run", "-o", "json", "-c", "30", "-i", "1ms", &target]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains("\"timestamps\":\"user\"") && text.contains("\"kernel_stamps\":\"rx+tx\"")
    );
    let path = |n: &str| dir.join(n).to_str().unwrap().to_owned();
    std::fs::write(path("now.json"), &text).unwrap();
    std::fs::write(path("again.json"), &text).unwrap();
    // As a schema 1 file put an ICMP series: RTT to the kernel's receive
    // stamp, and no kernel_stamps in its meta line.
    let old = text
        .replace("\"timestamps\":\"user\"", "\"timestamps\":\"kernel\"")
        .replace(",\"kernel_stamps\":\"rx+tx\"", "");
    std::fs::write(path("old.json"), old).unwrap();
    let rx = text.replace("\"kernel_stamps\":\"rx+tx\"", "\"kernel_stamps\":\"rx\"");
    std::fs::write(path("rx.json"), rx).unwrap();
    let page = |files: &[&str]| {
        let html = path("page.html");
        let mut args: Vec<String> = files.iter().map(|f| path(f)).collect();
        args.extend(["-o".to_owned(), html.clone()]);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let o = report_within(&args);
        assert!(o.status.success(), "{}", stderr(&o));
        std::fs::read_to_string(html).unwrap()
    };
    let alike = page(&["now.json", "again.json"]);
    assert!(alike.contains(">user to user<"), "{alike}");
    assert!(!alike.contains("settings-differ"), "series measured alike");
    let banner = |html: &str| {
        let at = html.find("id=\"settings-differ\"").expect("a banner");
        html[at..].split("</p>").next().unwrap().to_owned()
    };
    let old = page(&["now.json", "old.json"]);
    assert!(old.contains(">user to kernel receive<"), "{old}");
    let b = banner(&old);
    assert!(b.contains("rtt") && !b.contains("kernel stamps"), "{b}");
    let b = banner(&page(&["now.json", "rx.json"]));
    assert!(b.contains("kernel stamps") && !b.contains("rtt"), "{b}");
}

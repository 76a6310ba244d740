//! The page: one self-contained HTML file (inline SVG and CSS, no script, no
//! font or other fetch), plus the stats table alone as Markdown or CSV.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use crate::charts::{self, BoxRow, Bucket, PartsBar, PercentileCurve, SweepCurve, ViolinRow};
use crate::input::{InputFile, PART_NAMES, ProbeOutcome, Series, Settings};
use crate::stats::{Describe, Values, describe, format_ns};

/// What to draw.
#[derive(Debug, Default)]
pub struct Page {
    /// Files that were read.
    pub files: Vec<InputFile>,
    /// Files that gave nothing, with the reason, one line each.
    pub failed: Vec<String>,
    /// Draw the violins on a log axis, over every value.
    pub log_violin: bool,
    /// Time buckets of the time-series charts.
    pub buckets: usize,
}

/// The drawn page.
#[derive(Debug, Default)]
pub struct Rendered {
    /// The HTML document.
    pub html: String,
    /// Every chart: (file stem such as `box` or `timeseries-2`, SVG).
    pub charts: Vec<(String, String)>,
    /// The statistics table as Markdown.
    pub table_md: String,
    /// The statistics table as CSV (values in ns).
    pub table_csv: String,
}

/// Columns of the statistics table: (heading, statistic name).
const COLUMNS: [(&str, &str); 11] = [
    ("mean", "mean"),
    ("std", "std"),
    ("min", "min"),
    ("25%", "p25"),
    ("50%", "p50"),
    ("75%", "p75"),
    ("90%", "p90"),
    ("99%", "p99"),
    ("99.9%", "p99.9"),
    ("max", "max"),
    ("p5", "p5"),
];

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

struct Row<'a> {
    label: String,
    index: usize,
    series: &'a Series,
    d: Describe,
    values: Values,
}

/// Draws the page.
pub fn render_page(page: &Page) -> Result<Rendered, Box<dyn std::error::Error + Send + Sync>> {
    let all: Vec<&Series> = page.files.iter().flat_map(|f| &f.series).collect();
    // A label names its file when the same label comes from several files.
    let mut seen: BTreeMap<&str, std::collections::BTreeSet<&std::path::Path>> = BTreeMap::new();
    for s in &all {
        seen.entry(&s.label).or_default().insert(&s.file);
    }
    let label = |s: &Series, interval: bool| {
        let base = match s.sweep_interval_ns {
            Some(i) if interval => format!("{} @ {}", s.label, format_ns(i as f64)),
            _ => s.label.clone(),
        };
        if seen[s.label.as_str()].len() > 1 {
            let name = s
                .file
                .file_name()
                .map_or_else(String::new, |n| n.to_string_lossy().into_owned());
            format!("{base} [{name}]")
        } else {
            base
        }
    };
    let rows: Vec<Row<'_>> = all
        .iter()
        .filter(|s| s.sweep_interval_ns.is_none())
        .enumerate()
        .map(|(index, s)| Row {
            label: label(s, true),
            index,
            series: s,
            d: describe(s),
            values: Values::rtt(s),
        })
        .collect();
    let sweep: Vec<&Series> = all
        .iter()
        .copied()
        .filter(|s| s.sweep_interval_ns.is_some())
        .collect();

    let mut out = Rendered::default();
    let mut h = String::new();
    h.push_str(HEAD);
    let _ = write!(
        h,
        "<h1>prober report</h1>\n<section id=\"inputs\"><h2>Inputs</h2><ul>"
    );
    for f in &page.files {
        let _ = write!(
            h,
            "<li><code>{}</code>: {}, {} series",
            esc(&f.path.display().to_string()),
            if f.format == "hlog" {
                "HdrHistogram log"
            } else {
                "JSON lines"
            },
            f.series.len()
        );
        for n in &f.notes {
            let _ = write!(h, "<div class=\"note\">{}</div>", esc(n));
        }
        h.push_str("</li>");
    }
    for e in &page.failed {
        let _ = write!(h, "<li class=\"error\">not drawn: {}</li>", esc(e));
    }
    h.push_str("</ul>");
    let hist_only: Vec<&str> = rows
        .iter()
        .filter(|r| r.series.histogram_only())
        .map(|r| r.label.as_str())
        .collect();
    if !hist_only.is_empty() {
        let _ = write!(
            h,
            "<p class=\"note\">From HdrHistogram logs ({}): only histogram-based charts are possible. \
             Their statistics and charts come from histogram buckets (3 significant digits), not from \
             each probe; the log holds replies only, so loss is unknown, and the time series has one \
             point per logged interval.</p>",
            esc(&hist_only.join(", "))
        );
    }
    h.push_str("</section>\n");

    if !rows.is_empty() {
        settings_table(&mut h, &rows);
        stats_table(&mut h, &rows, &mut out);
        charts_for(&mut h, &rows, page, &mut out)?;
    }
    if !sweep.is_empty() {
        sweep_section(&mut h, &sweep, &label, &mut out)?;
    }
    let _ = writeln!(
        h,
        "<footer>Made by prober {} <code>prober report</code>.</footer></body></html>",
        env!("CARGO_PKG_VERSION")
    );
    out.html = h;
    Ok(out)
}

/// The settings as (name, value) pairs for the page, "?" where unknown.
fn settings_rows(st: &Settings) -> Vec<(&'static str, String)> {
    let s = |v: &Option<String>| v.clone().unwrap_or_else(|| "?".to_owned());
    vec![
        (
            "interval",
            st.interval_ns
                .map_or_else(|| "?".to_owned(), |n| format_ns(n as f64)),
        ),
        ("pacing", s(&st.pacing)),
        ("receive", s(&st.receive)),
        (
            "rtt",
            match st.timestamps.as_deref() {
                Some("user") => "user to user".to_owned(),
                Some("kernel") => "user to kernel receive".to_owned(),
                other => s(&other.map(str::to_owned)),
            },
        ),
        ("kernel stamps", s(&st.kernel_stamps)),
        (
            "size",
            st.size.map_or_else(|| "?".to_owned(), |n| format!("{n} B")),
        ),
        ("host", s(&st.hostname)),
        ("kernel", s(&st.kernel)),
        ("prober", s(&st.version)),
    ]
}

fn settings_table(h: &mut String, rows: &[Row<'_>]) {
    let table: Vec<Vec<(&str, String)>> = rows
        .iter()
        .map(|r| settings_rows(&r.series.settings))
        .collect();
    let mut differing = Vec::new();
    for (k, (name, _)) in table[0].iter().enumerate() {
        let known: std::collections::BTreeSet<&str> = table
            .iter()
            .map(|t| t[k].1.as_str())
            .filter(|v| *v != "?")
            .collect();
        // A different host or kernel is the point of some comparisons; a
        // different measurement setting is what makes one misleading.
        // Size differs between protocols by nature (an ICMP payload, a TCP
        // frame). The RTT's ends differ only between an ICMP series of a
        // schema 1 file (to the kernel's receive stamp) and a newer one.
        if known.len() > 1 && !matches!(*name, "host" | "kernel" | "size") {
            differing.push(*name);
        }
    }
    h.push_str("<section id=\"settings\"><h2>Settings</h2>");
    if !differing.is_empty() {
        let _ = write!(
            h,
            "<p class=\"warn\" id=\"settings-differ\">These series were measured with different settings ({}): \
             differences between them may come from the settings, not the targets.</p>",
            differing.join(", ")
        );
    }
    h.push_str("<div class=\"scroll\"><table><tr><th>series</th>");
    for (name, _) in &table[0] {
        let _ = write!(h, "<th>{name}</th>");
    }
    h.push_str("</tr>");
    for (r, t) in rows.iter().zip(&table) {
        let _ = write!(
            h,
            "<tr><td class=\"name\">{}</td>",
            swatch(r.index, &r.label)
        );
        for (name, v) in t {
            let class = if differing.contains(name) {
                " class=\"differs\""
            } else {
                ""
            };
            let _ = write!(h, "<td{class}>{}</td>", esc(v));
        }
        h.push_str("</tr>");
    }
    h.push_str("</table></div></section>\n");
}

fn swatch(index: usize, label: &str) -> String {
    let c = charts::colour(index);
    format!(
        "<span class=\"sw\" style=\"background:rgb({},{},{})\"></span>{}",
        c.0,
        c.1,
        c.2,
        esc(label)
    )
}

fn stats_table(h: &mut String, rows: &[Row<'_>], out: &mut Rendered) {
    let heads = ["count", "loss"]
        .into_iter()
        .chain(COLUMNS.iter().take(10).map(|c| c.0));
    h.push_str("<section><h2>Statistics</h2><p>RTT (user send to user receive) of the ok probes; loss = timeouts and errors of all probes. The same numbers as the run's own summary (HdrHistogram quantiles, exact mean, std, min and max).</p><div class=\"scroll\"><table id=\"stats\"><tr><th>series</th>");
    let mut md = String::from("| series |");
    let mut csv = String::from("series,sent,count,loss_pct");
    for head in heads {
        let _ = write!(h, "<th>{head}</th>");
        let _ = write!(md, " {head} |");
    }
    for (_, stat) in COLUMNS.iter().take(10) {
        let _ = write!(csv, ",{stat}_ns");
    }
    md.push_str("\n|---|");
    md.push_str(&"---:|".repeat(12));
    md.push('\n');
    csv.push('\n');
    h.push_str("</tr>");
    for r in rows {
        let loss =
            r.d.loss_pct
                .map_or_else(|| "?".to_owned(), |l| format!("{l:.2} %"));
        let _ = write!(
            h,
            "<tr data-series=\"{}\"><td class=\"name\">{}</td><td data-stat=\"count\" data-value=\"{}\">{}</td><td data-stat=\"loss\" data-value=\"{}\">{}</td>",
            esc(&r.series.target),
            swatch(r.index, &r.label),
            r.d.ok,
            r.d.ok,
            r.d.loss_pct.map_or_else(String::new, |l| l.to_string()),
            loss
        );
        let _ = write!(
            md,
            "| {} | {} | {} |",
            r.label.replace('|', "\\|"),
            r.d.ok,
            loss
        );
        let _ = write!(
            csv,
            "{},{},{},{}",
            csv_quote(&r.label),
            r.d.sent,
            r.d.ok,
            r.d.loss_pct.map_or_else(String::new, |l| format!("{l:.4}"))
        );
        for (_, stat) in COLUMNS.iter().take(10) {
            match r.d.rtt.as_ref().and_then(|d| d.get(stat)) {
                Some(v) => {
                    let _ = write!(
                        h,
                        "<td data-stat=\"{stat}\" data-ns=\"{v}\">{}</td>",
                        format_ns(v)
                    );
                    let _ = write!(md, " {} |", format_ns(v));
                    let _ = write!(csv, ",{v}");
                }
                None => {
                    let _ = write!(h, "<td data-stat=\"{stat}\">–</td>");
                    md.push_str(" – |");
                    csv.push(',');
                }
            }
        }
        h.push_str("</tr>");
        md.push('\n');
        csv.push('\n');
    }
    h.push_str("</table></div></section>\n");
    out.table_md = md;
    out.table_csv = csv;
}

fn csv_quote(s: &str) -> String {
    if s.contains([',', '"', '\n']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_owned()
    }
}

fn figure(h: &mut String, out: &mut Rendered, name: &str, svg: String, caption: &str) {
    let _ = writeln!(
        h,
        "<figure data-chart=\"{}\">{svg}<figcaption>{caption}</figcaption></figure>",
        name.split('-').next().unwrap_or(name)
    );
    out.charts.push((name.to_owned(), svg));
}

fn charts_for(
    h: &mut String,
    rows: &[Row<'_>],
    page: &Page,
    out: &mut Rendered,
) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    // Box plot, on the z-trimmed values.
    let trimmed: Vec<(Values, u64)> = rows.iter().map(|r| r.values.trim_z()).collect();
    let boxes: Vec<BoxRow> = rows
        .iter()
        .zip(&trimmed)
        .map(|(r, (kept, _))| BoxRow {
            label: r.label.clone(),
            colour: r.index,
            stats: (!kept.is_empty()).then(|| {
                let q = kept.quantiles(&[0.05, 0.25, 0.5, 0.75, 0.95]);
                [q[0], q[1], q[2], q[3], q[4]]
            }),
        })
        .collect();
    let removed: Vec<String> = rows
        .iter()
        .zip(&trimmed)
        .map(|(r, (_, n))| format!("{}: {n} of {}", esc(&r.label), r.values.len()))
        .collect();
    h.push_str("<section><h2>Distribution</h2>");
    figure(
        h,
        out,
        "box",
        charts::box_plot(&boxes)?,
        &format!(
            "Box plot: the box spans the 25th to 75th percentile with a line at the median; whiskers at the 5th and 95th percentiles. \
             Outliers are removed first by two passes of a z-score cut: values with |z| &gt; 3 are dropped, the mean and standard \
             deviation are recomputed on the rest, and |z| &gt; 3 is dropped again. Removed: {}.",
            removed.join("; ")
        ),
    );
    // Violins.
    let violins: Vec<ViolinRow> = rows
        .iter()
        .zip(&trimmed)
        .map(|(r, (kept, _))| {
            let (v, f): (&Values, fn(f64) -> f64) = if page.log_violin {
                (&r.values, |x: f64| x.max(1.0).log10())
            } else {
                (kept, |x| x)
            };
            ViolinRow {
                label: r.label.clone(),
                kde: v.kde(f, 240),
                median: r.values.quantile(0.5),
            }
        })
        .collect();
    let violin_caption = if page.log_violin {
        "Violin plot of every ok RTT on a log axis: a Gaussian kernel density estimate of log10(RTT) with Silverman's rule-of-thumb bandwidth (0.9 · min(σ, IQR/1.34) · n^−1/5); the black tick is the median."
    } else {
        "Violin plot of the same trimmed values as the box plot: a Gaussian kernel density estimate with Silverman's rule-of-thumb bandwidth (0.9 · min(σ, IQR/1.34) · n^−1/5); the black tick is the median of all values. <code>--log</code> draws every value on a log axis instead."
    };
    figure(
        h,
        out,
        "violin",
        charts::violin_plot(&violins, page.log_violin)?,
        violin_caption,
    );
    // Percentiles.
    let grid: Vec<f64> = (0..=250)
        .map(|k| 1.0 - 10f64.powf(-(k as f64) * 5.0 / 250.0))
        .collect();
    let curves: Vec<PercentileCurve> = rows
        .iter()
        .filter(|r| !r.values.is_empty())
        .map(|r| {
            let n = r.values.len() as f64;
            let ps: Vec<f64> = grid
                .iter()
                .copied()
                .filter(|p| *p <= 1.0 - 1.0 / n.max(2.0))
                .collect();
            let vs = r.values.quantiles(&ps);
            PercentileCurve {
                label: r.label.clone(),
                index: r.index,
                points: ps.into_iter().zip(vs).collect(),
            }
        })
        .collect();
    figure(
        h,
        out,
        "percentiles",
        charts::percentile_plot(&curves)?,
        "Percentile distribution, as HdrHistogram plots it: x is the percentile on a log scale of 1/(1 − p), so each step right adds a nine. A curve ends where its samples run out (the top percentile a series can show is 1 − 1/n).",
    );
    h.push_str("</section>\n<section><h2>Over time</h2>");
    let t0 = rows
        .iter()
        .filter_map(|r| {
            // Lines are written as probes end, so a timeout comes after
            // later replies: the earliest send, not the first line.
            r.series
                .probes
                .iter()
                .map(|p| p.sent_unix_ns)
                .min()
                .or_else(|| r.series.windows.iter().map(|w| w.0).min())
        })
        .min()
        .unwrap_or(0);
    for r in rows {
        let buckets = buckets(r.series, t0, page.buckets.max(10));
        figure(
            h,
            out,
            &format!("timeseries-{}", r.index),
            charts::time_series(&r.label, r.index, &buckets)?,
            &format!(
                "{}: p50 and p99 of the ok RTTs per time bucket ({}), on a log axis so that a p99 spike does not flatten p50; red triangles mark buckets with timeouts or errors, grey bands buckets in which no probe got a reply.",
                esc(&r.label),
                if r.series.histogram_only() {
                    "one per logged interval".to_owned()
                } else {
                    format!("{} buckets", buckets.len())
                }
            ),
        );
    }
    h.push_str("</section>\n");
    // Where the time goes.
    let bars: Vec<PartsBar> = rows
        .iter()
        .filter_map(|r| {
            let mut parts = [None; 6];
            for (k, name) in PART_NAMES.iter().enumerate() {
                parts[k] = match r.series.part_hists.get(*name) {
                    Some(hist) => Values::from_histogram(hist).quantile(0.5),
                    None => crate::stats::median(
                        r.series
                            .probes
                            .iter()
                            .filter_map(|p| p.part(k))
                            .map(|n| n as f64)
                            .collect(),
                    ),
                };
            }
            parts.iter().any(Option::is_some).then(|| PartsBar {
                label: r.label.clone(),
                parts,
                rtt_p50: r.values.quantile(0.5).unwrap_or(0.0),
            })
        })
        .collect();
    if !bars.is_empty() {
        h.push_str("<section><h2>Where the time goes</h2>");
        figure(
            h,
            out,
            "parts",
            charts::parts_bars(&bars)?,
            "The median of each part of the round trip (docs/timestamps.md), stacked, with the median RTT as a black tick. A part the probe could not measure is left out, so the gap between the bar and the tick is time no stamp could attribute; medians of parts need not add up to the median of their sum.",
        );
        h.push_str("</section>\n");
    }
    Ok(())
}

/// The time buckets of one series: hlog intervals as they are, probes
/// bucketed from `t0` to the series' last probe.
fn buckets(s: &Series, t0: u64, n: usize) -> Vec<Bucket> {
    let secs = |ns: u64| ns.saturating_sub(t0) as f64 / 1e9;
    if s.histogram_only() {
        return s
            .windows
            .iter()
            .map(|(start, len, hist)| {
                let v = Values::from_histogram(hist);
                Bucket {
                    start_s: secs(*start),
                    end_s: secs(start + len),
                    sent: None,
                    lost: 0,
                    p50_p99: (!v.is_empty()).then(|| {
                        let q = v.quantiles(&[0.5, 0.99]);
                        (q[0], q[1])
                    }),
                }
            })
            .collect();
    }
    let Some(last) = s.probes.iter().map(|p| p.sent_unix_ns).max() else {
        return Vec::new();
    };
    let span = last.saturating_sub(t0).max(1);
    let width = span.div_ceil(n as u64).max(1);
    let mut raw: Vec<(u64, u64, Vec<f64>)> = vec![(0, 0, Vec::new()); n];
    for p in &s.probes {
        let i = (p.sent_unix_ns.saturating_sub(t0) / width).min(n as u64 - 1) as usize;
        raw[i].0 += 1;
        match (p.outcome, p.rtt_ns) {
            (ProbeOutcome::Ok, Some(r)) => raw[i].2.push(r as f64),
            (ProbeOutcome::Ok, None) => {}
            _ => raw[i].1 += 1,
        }
    }
    raw.into_iter()
        .enumerate()
        .filter(|(_, (sent, _, _))| *sent > 0)
        .map(|(i, (sent, lost, ok))| {
            let v = Values::from_values(ok);
            Bucket {
                start_s: (i as u64 * width) as f64 / 1e9,
                end_s: ((i as u64 + 1) * width) as f64 / 1e9,
                sent: Some(sent),
                lost,
                p50_p99: (!v.is_empty()).then(|| {
                    let q = v.quantiles(&[0.5, 0.99]);
                    (q[0], q[1])
                }),
            }
        })
        .collect()
}

fn sweep_section(
    h: &mut String,
    points: &[&Series],
    label: &dyn Fn(&Series, bool) -> String,
    out: &mut Rendered,
) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    // Curves by target (label without the interval), in order of appearance.
    let mut order: Vec<String> = Vec::new();
    let mut by: BTreeMap<String, Vec<&Series>> = BTreeMap::new();
    for s in points {
        let name = label(s, false);
        if !by.contains_key(&name) {
            order.push(name.clone());
        }
        by.entry(name).or_default().push(s);
    }
    h.push_str("<section id=\"sweep\"><h2>Latency against probe interval</h2>");
    if let Some(first) = points.first() {
        let st = &first.settings;
        let _ = write!(
            h,
            "<p>Each target alone at each interval; pacing {}, receive {}, host {}, kernel {}, prober {}.</p>",
            esc(st.pacing.as_deref().unwrap_or("?")),
            esc(st.receive.as_deref().unwrap_or("?")),
            esc(st.hostname.as_deref().unwrap_or("?")),
            esc(st.kernel.as_deref().unwrap_or("?")),
            esc(st.version.as_deref().unwrap_or("?")),
        );
    }
    h.push_str("<p>The table's quantiles are HdrHistogram's, over every round, as the sweep's own table and JSON compute them; the chart's are exact (interpolated).</p>");
    h.push_str("<div class=\"scroll\"><table id=\"sweep-table\"><tr><th>target</th><th>interval</th><th>count</th><th>loss</th><th>p25</th><th>p50</th><th>p75</th><th>p99</th><th>mean</th></tr>");
    let mut curves = Vec::new();
    for (index, name) in order.iter().enumerate() {
        let mut pts = by[name].clone();
        pts.sort_by_key(|s| s.sweep_interval_ns);
        let mut curve = Vec::new();
        for s in pts {
            let d = describe(s);
            let v = Values::rtt(s);
            let q = v.quantiles(&[0.25, 0.5, 0.75, 0.99]);
            let iv = s.sweep_interval_ns.unwrap_or(0) as f64;
            let cell = |x: f64| {
                if x.is_finite() {
                    format!("<td data-ns=\"{x}\">{}</td>", format_ns(x))
                } else {
                    "<td>–</td>".to_owned()
                }
            };
            let _ = write!(
                h,
                "<tr><td class=\"name\">{}</td><td data-ns=\"{iv}\">{}</td><td>{}</td><td>{}</td>{}{}{}{}{}</tr>",
                swatch(index, name),
                format_ns(iv),
                d.ok,
                d.loss_pct
                    .map_or_else(|| "?".to_owned(), |l| format!("{l:.2} %")),
                // The table's numbers are the sweep's own (its table and
                // JSON): HdrHistogram quantiles over the same probes, as
                // the statistics table above; the curve keeps the exact ones.
                cell(d.rtt.map_or(f64::NAN, |r| r.p25 as f64)),
                cell(d.rtt.map_or(f64::NAN, |r| r.p50 as f64)),
                cell(d.rtt.map_or(f64::NAN, |r| r.p75 as f64)),
                cell(d.rtt.map_or(f64::NAN, |r| r.p99 as f64)),
                cell(d.rtt.map_or(f64::NAN, |r| r.mean)),
            );
            if q[1].is_finite() {
                curve.push((iv.max(1.0), q[0], q[1], q[2]));
            }
        }
        curves.push(SweepCurve {
            label: name.clone(),
            index,
            points: curve,
        });
    }
    h.push_str("</table></div>");
    // Each point's distribution, not only its median and quartiles: a box
    // per target and interval, in the curve's order.
    let mut boxes = Vec::new();
    for (index, name) in order.iter().enumerate() {
        let mut pts = by[name].clone();
        pts.sort_by_key(|s| s.sweep_interval_ns);
        for s in pts {
            let (kept, _) = Values::rtt(s).trim_z();
            boxes.push(BoxRow {
                colour: index,
                label: format!(
                    "{name} @ {}",
                    format_ns(s.sweep_interval_ns.unwrap_or(0) as f64)
                ),
                stats: (!kept.is_empty()).then(|| {
                    let q = kept.quantiles(&[0.05, 0.25, 0.5, 0.75, 0.95]);
                    [q[0], q[1], q[2], q[3], q[4]]
                }),
            });
        }
    }
    figure(
        h,
        out,
        "points",
        charts::box_plot(&boxes)?,
        "Each point's distribution (every round), coloured by target: the box spans the 25th to 75th percentile with a line at the median, whiskers at the 5th and 95th percentiles, after a two-pass z-score cut (values with |z| &gt; 3 dropped, then again on the rest).",
    );
    figure(
        h,
        out,
        "sweep",
        charts::sweep_plot(&curves)?,
        "RTT against the probe interval, both axes logarithmic: the line is the median, the band the 25th to 75th percentile, one colour per target. Quantiles are exact (interpolated, as pandas) over every round of the sweep.",
    );
    h.push_str("</section>\n");
    Ok(())
}

const HEAD: &str = r#"<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>prober report</title>
<style>
body { font-family: sans-serif; margin: 1.5em auto; max-width: 1000px; color: #222; padding: 0 1em; }
h1 { font-size: 1.6em; } h2 { font-size: 1.25em; border-bottom: 1px solid #ddd; padding-bottom: .2em; margin-top: 1.6em; }
table { border-collapse: collapse; font-size: .88em; }
th, td { border: 1px solid #ccc; padding: .25em .5em; text-align: right; white-space: nowrap; }
th { background: #f3f3f3; } td.name { text-align: left; }
td.differs { background: #fff1c7; }
.scroll { overflow-x: auto; }
.sw { display: inline-block; width: .8em; height: .8em; margin-right: .4em; border-radius: 2px; vertical-align: baseline; }
.note { color: #555; font-size: .9em; } .error { color: #a00; }
.warn { background: #fff1c7; border-left: 4px solid #e0a800; padding: .4em .6em; }
figure { margin: 1em 0; } figure svg { max-width: 100%; height: auto; display: block; }
figcaption { font-size: .88em; color: #444; margin-top: .3em; }
footer { margin-top: 2em; font-size: .8em; color: #777; }
</style></head><body>
"#;

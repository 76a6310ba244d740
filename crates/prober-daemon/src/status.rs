//! The status page (`GET /` and `/status` on the metrics port): every
//! target's last result, a sparkline of its last probes, loss and RTT
//! quantiles over the last minute and hour, the parts of its last round
//! trip, and the state of config reloads and DNS discovery, in one HTML page
//! for a person at a browser (Goldpinger's and Cloudprober's status pages
//! answer the same "which targets are bad right now?"). No external assets;
//! it reads fine with JavaScript off, and reloads every 5 s with it on.

use std::fmt::Write as _;

use std::sync::Arc;

use prober_sinks::prometheus::{PrometheusSink, RECENT, StatusKey, StatusRow};
use prober_sinks::window::WindowStats;

/// Rows on one page: at 10,000 targets the whole table was 9 MB, which a
/// browser reloading it every 5 s (and the daemon rendering it) should not
/// have to carry; the worst rows come first, so page 1 is what a person
/// looks for, and `?target=TEXT` finds any other.
pub(crate) const PAGE_ROWS: usize = 200;

/// Which rows a request asks for: `?page=N` (from 1) and `?target=TEXT`
/// (targets whose URL contains it).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct View {
    pub(crate) page: usize,
    pub(crate) target: Option<String>,
}

impl View {
    /// From a query string: unknown keys and bad numbers are ignored (a
    /// page a person typed should still show something).
    pub(crate) fn from_query(query: Option<&str>) -> Self {
        let mut v = Self::default();
        for (k, val) in form_urlencoded::parse(query.unwrap_or("").as_bytes()) {
            match &*k {
                "page" => v.page = val.parse::<usize>().unwrap_or(1).saturating_sub(1),
                "target" if !val.is_empty() => v.target = Some(val.into_owned()),
                _ => {}
            }
        }
        v
    }

    fn query(&self, page: usize) -> String {
        let mut q = format!("?page={}", page + 1);
        if let Some(t) = &self.target {
            q.push_str("&amp;target=");
            q.extend(form_urlencoded::byte_serialize(t.as_bytes()));
        }
        q
    }
}

/// What the page shows besides the rows.
#[derive(Debug, Clone)]
pub(crate) struct StatusPage {
    pub(crate) sink: PrometheusSink,
    pub(crate) version: String,
    pub(crate) host: String,
    pub(crate) discovery: Arc<crate::dns_sd::Discovery>,
    pub(crate) reload: LastReload,
    /// The traced targets' paths (`trace_every`).
    pub(crate) paths: Arc<crate::paths::Paths>,
}

/// Why the last config reload was rejected (`None` once one works): set
/// where the reload gauges are, read by the page.
#[derive(Debug, Clone, Default)]
pub(crate) struct LastReload(Arc<std::sync::Mutex<Option<String>>>);

impl LastReload {
    fn lock(&self) -> std::sync::MutexGuard<'_, Option<String>> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    pub(crate) fn set(&self, error: Option<&str>) {
        *self.lock() = error.map(str::to_owned);
    }

    pub(crate) fn get(&self) -> Option<String> {
        self.lock().clone()
    }
}

/// An inline SVG of the last probes: RTT on a log scale from the lowest
/// to the highest, a red tick for each lost probe.
fn sparkline(rtts: &[Option<f32>]) -> String {
    const W: f64 = 80.0;
    const H: f64 = 22.0;
    let ok: Vec<f64> = rtts
        .iter()
        .flatten()
        .map(|v| f64::from(*v).max(0.001).ln())
        .collect();
    let (lo, hi) = ok
        .iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), v| {
            (a.min(*v), b.max(*v))
        });
    let step = W / (RECENT.max(2) - 1) as f64;
    let mut line = String::new();
    let mut lost = String::new();
    for (i, r) in rtts.iter().enumerate() {
        let x = i as f64 * step;
        match r {
            Some(v) => {
                let v = f64::from(*v).max(0.001).ln();
                let y = if hi > lo {
                    H - 2.0 - (v - lo) / (hi - lo) * (H - 4.0)
                } else {
                    H / 2.0
                };
                let _ = write!(line, "{x:.1},{y:.1} ");
            }
            None => {
                let _ = write!(lost, "M{x:.1} {H}V{:.1}", H - 8.0);
            }
        }
    }
    format!(
        r##"<svg class="spark" width="{W}" height="{H}" viewBox="0 0 {W} {H}" role="img" aria-label="last {n} probes"><polyline points="{line}" fill="none" stroke="#2563a8" stroke-width="1.2"/><path d="{lost}" stroke="#c81e1e" stroke-width="1.5"/></svg>"##,
        n = rtts.len(),
        line = line.trim_end(),
    )
}

/// Loss and quantiles of a window: `0.0% · 48.2 µs / 96.1 µs`.
fn window_cells(w: &WindowStats) -> String {
    if w.probes == 0 {
        return r#"<td class="n">-</td><td class="n">-</td>"#.to_owned();
    }
    let q = |v: Option<f64>| v.map_or_else(|| "-".to_owned(), human_us);
    let (p50, p99) = (q(w.p50_us), q(w.p99_us));
    // The unit once where both share it: "189.0 / 224.8 µs".
    let p50 = match (p50.rsplit_once(' '), p99.rsplit_once(' ')) {
        (Some((n, u)), Some((_, u2))) if u == u2 => n.to_owned(),
        _ => p50,
    };
    format!(
        r#"<td class="n">{:.1}% of {}</td><td class="n">{p50} / {p99}</td>"#,
        100.0 * w.lost as f64 / w.probes as f64,
        w.probes,
    )
}

fn esc(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '&' => out.push_str("&amp;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// A duration in µs as people read it: `48.2 µs`, `1.53 ms`, `2.10 s`.
fn human_us(us: f64) -> String {
    if us < 1_000.0 {
        format!("{us:.1} µs")
    } else if us < 1_000_000.0 {
        format!("{:.2} ms", us / 1e3)
    } else {
        format!("{:.2} s", us / 1e6)
    }
}

/// A target's state from its last probes: `down` (every one lost), `loss`
/// (some), `ok`.
fn state_of(recent: usize, lost: usize) -> &'static str {
    if recent > 0 && lost == recent {
        "down"
    } else if lost > 0 {
        "loss"
    } else {
        "ok"
    }
}

/// A row's state (see [`state_of`]).
fn state(r: &StatusRow) -> &'static str {
    let lost = r.recent_rtts.iter().filter(|v| v.is_none()).count();
    state_of(r.recent_rtts.len(), lost)
}

impl StatusPage {
    pub(crate) fn render(&self, view: &View) -> String {
        // The worst first: down, then losing, then fine; by labels within.
        // Sorted, counted and filtered on the index; rows only for the page.
        let mut keys = self.sink.status_index();
        let key_state = |k: &StatusKey| state_of(k.recent, k.lost);
        keys.sort_by_key(|k| match key_state(k) {
            "down" => 0,
            "loss" => 1,
            _ => 2,
        });
        let count = |s: &str| keys.iter().filter(|k| key_state(k) == s).count();
        let (down, loss) = (count("down"), count("loss"));
        let total = keys.len();
        if let Some(t) = &view.target {
            keys.retain(|k| {
                k.labels
                    .pairs
                    .iter()
                    .any(|(k, v)| k == "target" && v.contains(t.as_str()))
            });
        }
        let pages = keys.len().div_ceil(PAGE_ROWS).max(1);
        let page = view.page.min(pages - 1);
        let shown = keys.len();
        let ids: Vec<usize> = keys
            .iter()
            .skip(page * PAGE_ROWS)
            .take(PAGE_ROWS)
            .map(|k| k.id)
            .collect();
        drop(keys);
        let rows: Vec<StatusRow> = self.sink.status_rows(&ids);
        let mut h = String::with_capacity(4096 + rows.len() * 1500);
        let _ = write!(
            h,
            r#"<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<title>prober on {host}</title>
<style>
body {{ font: 14px/1.4 system-ui, sans-serif; margin: 1.5em; color: #222; }}
h1 {{ font-size: 1.3em; margin: 0 0 .2em; }}
p.summary {{ margin: 0 0 1em; color: #555; }}
div.scroll {{ overflow-x: auto; }}
table {{ border-collapse: collapse; width: 100%; }}
th, td {{ padding: .25em .5em; border-bottom: 1px solid #ddd; text-align: left; }}
th {{ background: #f3f3f3; position: sticky; top: 0; }}
td.n {{ text-align: right; font-variant-numeric: tabular-nums; }}
td.n, td.l {{ white-space: nowrap; }}
div.lb {{ font-size: .85em; color: #555; overflow-wrap: anywhere; }}
tr.down td {{ background: #fbd5d5; }}
tr.loss td {{ background: #fdf0c8; }}
span.badge {{ font-weight: 600; }}
tr.down span.badge {{ color: #a00; }}
tr.loss span.badge {{ color: #8a6100; }}
tr.ok span.badge {{ color: #167a2e; }}
td.err {{ color: #a00; min-width: 12em; max-width: 26em; }}
td.t {{ min-width: 13em; max-width: 26em; }}
td.t code {{ overflow-wrap: anywhere; }}
div.clip {{ display: -webkit-box; -webkit-line-clamp: 2; -webkit-box-orient: vertical; overflow: hidden; overflow-wrap: anywhere; }}
code {{ font-size: .95em; }}
svg.spark {{ vertical-align: middle; }}
td.parts {{ font-size: .85em; color: #444; min-width: 10em; max-width: 18em; }}
th.group {{ text-align: center; }}
ul.state {{ margin: 0 0 1em; padding-left: 1.2em; }}
li.bad {{ color: #a00; }}
</style>
<script>setTimeout(function () {{ location.reload(); }}, 5000);</script>
</head><body>
<h1>prober on {host}</h1>
<p class="summary">{n} targets: <b>{down}</b> down, <b>{loss}</b> losing probes, {ok} fine (state over each target's last {recent} probes). prober {version}; <a href="/metrics">metrics</a>. With JavaScript on, this page reloads every 5 s.</p>
"#,
            host = esc(&self.host),
            n = total,
            ok = total - down - loss,
            recent = RECENT,
            version = esc(&self.version),
        );
        self.daemon_state(&mut h);
        self.pager(&mut h, view, (page, pages, shown));
        // Labels that every row on the page shares (a DaemonSet's node and
        // rack, on every target of the node) are said once above the
        // table; a labels column only where some row has labels of its own
        // beyond those: on 1280 px every column counts (in the fleet lab a
        // column repeating `node=h2-1 rack=leaf2` pushed the hour off it).
        let own = |k: &str| !matches!(k, "probe" | "target" | "protocol");
        let common: Vec<(String, String)> = rows.first().map_or_else(Vec::new, |first| {
            first
                .labels
                .iter()
                .filter(|(k, v)| {
                    own(k)
                        && rows
                            .iter()
                            .all(|r| r.labels.iter().any(|(k2, v2)| k2 == k && v2 == v))
                })
                .cloned()
                .collect()
        });
        let varying =
            |k: &str, v: &str| own(k) && !common.iter().any(|(ck, cv)| ck == k && cv == v);
        let with_labels = rows
            .iter()
            .any(|r| r.labels.iter().any(|(k, v)| varying(k, v)));
        if !common.is_empty() {
            let said: Vec<String> = common
                .iter()
                .map(|(k, v)| format!("<code>{}={}</code>", esc(k), esc(v)))
                .collect();
            let _ = writeln!(
                h,
                r#"<p class="summary">labels of every target below: {}</p>"#,
                said.join(" ")
            );
        }
        // A row's own labels go under its target, small, wrapping where
        // they must: a column of them (a mesh's `dns_name=h3-1.hosts...`)
        // pushed the last column off 1280 px.
        h.push_str(if with_labels {
            r#"<div class="scroll"><table>
<thead><tr><th rowspan="2">state</th><th rowspan="2">probe</th><th rowspan="2">target and its own labels</th><th rowspan="2">sent</th>"#
        } else {
            r#"<div class="scroll"><table>
<thead><tr><th rowspan="2">state</th><th rowspan="2">probe</th><th rowspan="2">target</th><th rowspan="2">sent</th>"#
        });
        h.push_str(
            r#"<th rowspan="2">last probes</th><th rowspan="2">latest</th><th colspan="2" class="group">last minute</th><th colspan="2" class="group">last hour</th><th rowspan="2">the latest round trip, by part, or the last error</th></tr>
<tr><th>lost</th><th>RTT p50 / p99</th><th>lost</th><th>RTT p50 / p99</th></tr></thead>
<tbody>
"#,
        );
        for r in &rows {
            let label = |k: &str| {
                r.labels
                    .iter()
                    .find(|(n, _)| n == k)
                    .map_or("", |(_, v)| v.as_str())
            };
            let extra: Vec<String> = r
                .labels
                .iter()
                .filter(|(k, v)| varying(k, v))
                .map(|(k, v)| format!("{}={}", esc(k), esc(v)))
                .collect();
            // A traced target's path under its target: branches and hops,
            // each branch on hover (every flow of a target is one trace).
            let traced = self
                .paths
                .summary(
                    label("probe"),
                    label("target").split('#').next().unwrap_or(""),
                )
                .map(|(n, hops, all)| {
                    format!(
                        r#"<div class="lb" title="{}">{n} path{}, {hops} hop{}</div>"#,
                        esc(&all),
                        if n == 1 { "" } else { "s" },
                        if hops == 1 { "" } else { "s" },
                    )
                })
                .unwrap_or_default();
            let st = state(r);
            let last = match r.recent_rtts.last() {
                None => "-".to_owned(),
                Some(Some(us)) => human_us(f64::from(*us)),
                Some(None) => "lost".to_owned(),
            };
            let parts: Vec<String> = r
                .last_parts
                .iter()
                .map(|(name, ns)| {
                    format!("{} {}", name.replace('_', " "), human_us(*ns as f64 / 1e3))
                })
                .collect();
            let _ = writeln!(
                h,
                r#"<tr class="{st}"><td><span class="badge">{st}</span></td><td>{probe}</td><td class="t"><code>{target}</code>{extra}{traced}</td><td class="n">{sent}</td><td class="l">{spark}</td><td class="n">{last}</td>{minute}{hour}{detail}</tr>"#,
                probe = esc(label("probe")),
                target = esc(label("target")),
                extra = if extra.is_empty() {
                    String::new()
                } else {
                    format!(r#"<div class="lb">{}</div>"#, extra.join(" "))
                },
                sent = r.tally.sent,
                spark = sparkline(&r.recent_rtts),
                minute = window_cells(&r.minute),
                hour = window_cells(&r.hour),
                // One column for both: a lost latest probe shows why (its
                // error, two lines at most, all of it on hover), an answered
                // one its parts, so the page fits 1280 px without scrolling.
                detail = match (r.recent_rtts.last(), r.last_error.as_deref()) {
                    (Some(None), Some(err)) => format!(
                        r#"<td class="err"><div class="clip" title="{e}">{e}</div></td>"#,
                        e = esc(err)
                    ),
                    _ => format!(r#"<td class="parts">{}</td>"#, parts.join(" · ")),
                },
            );
        }
        h.push_str("</tbody></table></div>\n");
        if pages > 1 {
            self.pager(&mut h, view, (page, pages, shown));
        }
        h.push_str("</body></html>\n");
        h
    }

    /// Where this page is among the others, and a search by target.
    fn pager(&self, h: &mut String, view: &View, (page, pages, shown): (usize, usize, usize)) {
        let first = page * PAGE_ROWS;
        let last = (first + PAGE_ROWS).min(shown);
        let _ = write!(
            h,
            r#"<form class="pager" method="get" action="/"><p>rows {} to {last} of {shown}{}, worst first; page {} of {pages}"#,
            if shown == 0 { 0 } else { first + 1 },
            view.target
                .as_deref()
                .map(|t| format!(" whose target contains <code>{}</code>", esc(t)))
                .unwrap_or_default(),
            page + 1,
        );
        if page > 0 {
            let _ = write!(h, r#" · <a href="/{}">previous</a>"#, view.query(page - 1));
        }
        if page + 1 < pages {
            let _ = write!(h, r#" · <a href="/{}">next</a>"#, view.query(page + 1));
        }
        let _ = writeln!(
            h,
            r#" · <label>target contains <input name="target" value="{}" size="24"></label> <button>find</button></p></form>"#,
            esc(view.target.as_deref().unwrap_or(""))
        );
    }

    /// The config's last (re)load, and each job's DNS discovery.
    fn daemon_state(&self, h: &mut String) {
        h.push_str("<ul class=\"state\">\n");
        match self.reload.get() {
            None => h.push_str("<li>config: loaded</li>\n"),
            Some(e) => {
                let _ = writeln!(
                    h,
                    r#"<li class="bad">config: the last reload was rejected, the one before runs on: {}</li>"#,
                    esc(&e)
                );
            }
        }
        for (job, s) in self.discovery.stats() {
            // Jobs with nothing to tell (no dns_sd, no names that moved).
            if s == crate::dns_sd::JobStats::default() {
                continue;
            }
            let class = if s.failures > 0 || s.over_limit > 0 {
                " class=\"bad\""
            } else {
                ""
            };
            let _ = writeln!(
                h,
                "<li{class}>discovery for <b>{}</b>: {} targets, {} failed lookups, {} over max_targets, {} address changes</li>",
                esc(&job),
                s.targets,
                s.failures,
                s.over_limit,
                s.address_changes
            );
        }
        h.push_str("</ul>\n");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_is_escaped_and_durations_read_well() {
        assert_eq!(
            esc(r#"<a href="x">&'"#),
            "&lt;a href=&quot;x&quot;&gt;&amp;&#39;"
        );
        assert_eq!(human_us(48.24), "48.2 µs");
        assert_eq!(human_us(1534.0), "1.53 ms");
        assert_eq!(human_us(2_100_000.0), "2.10 s");
    }

    #[test]
    fn a_view_is_read_from_the_query() {
        assert_eq!(View::from_query(None), View::default());
        let v = View::from_query(Some("page=3&target=udp%3A%2F%2Fa+b&x=1"));
        assert_eq!((v.page, v.target.as_deref()), (2, Some("udp://a b")));
        assert_eq!(View::from_query(Some("page=zero")).page, 0);
        assert_eq!(v.query(0), "?page=1&amp;target=udp%3A%2F%2Fa+b");
    }

    #[test]
    fn an_empty_daemon_has_a_page() {
        let page = StatusPage {
            sink: PrometheusSink::new(),
            version: "0.1.0".to_owned(),
            host: "h<1>".to_owned(),
            discovery: Arc::default(),
            reload: LastReload::default(),
            paths: Arc::default(),
        }
        .render(&View::default());
        assert!(page.contains("prober on h&lt;1&gt;"), "{page}");
        assert!(page.contains("0 targets"), "{page}");
    }
}

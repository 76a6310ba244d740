//! The status page (`GET /status` on the metrics port): every target's
//! counters, recent loss and RTT quantiles in one HTML table, for a person
//! at a browser (Goldpinger's and Cloudprober's status pages answer the
//! same "which targets are bad right now?"). It reloads itself every 5 s
//! and needs no script.

use std::fmt::Write as _;

use prober_sinks::prometheus::{PrometheusSink, RECENT, StatusRow};

/// What the page shows besides the rows.
#[derive(Debug, Clone)]
pub(crate) struct StatusPage {
    pub(crate) sink: PrometheusSink,
    pub(crate) version: String,
    pub(crate) host: String,
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

/// A row's state: `down` (every recent probe lost), `loss` (some), `ok`.
fn state(r: &StatusRow) -> &'static str {
    if r.recent > 0 && r.recent_lost == r.recent {
        "down"
    } else if r.recent_lost > 0 {
        "loss"
    } else {
        "ok"
    }
}

impl StatusPage {
    pub(crate) fn render(&self) -> String {
        // The worst first: down, then losing, then fine; by labels within.
        let mut rows = self.sink.status();
        rows.sort_by_key(|r| match state(r) {
            "down" => 0,
            "loss" => 1,
            _ => 2,
        });
        let count = |s: &str| rows.iter().filter(|r| state(r) == s).count();
        let (down, loss) = (count("down"), count("loss"));
        let mut h = String::with_capacity(1024 + rows.len() * 400);
        let _ = write!(
            h,
            r#"<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="refresh" content="5">
<title>prober on {host}</title>
<style>
body {{ font: 14px/1.4 system-ui, sans-serif; margin: 1.5em; color: #222; }}
h1 {{ font-size: 1.3em; margin: 0 0 .2em; }}
p.summary {{ margin: 0 0 1em; color: #555; }}
table {{ border-collapse: collapse; }}
th, td {{ padding: .25em .7em; border-bottom: 1px solid #ddd; text-align: left; }}
th {{ background: #f3f3f3; position: sticky; top: 0; }}
td.n {{ text-align: right; font-variant-numeric: tabular-nums; }}
th, td.n, td.l {{ white-space: nowrap; }}
tr.down td {{ background: #fbd5d5; }}
tr.loss td {{ background: #fdf0c8; }}
span.badge {{ font-weight: 600; }}
tr.down span.badge {{ color: #a00; }}
tr.loss span.badge {{ color: #8a6100; }}
tr.ok span.badge {{ color: #167a2e; }}
td.err {{ color: #a00; max-width: 32em; overflow-wrap: anywhere; }}
code {{ font-size: .95em; }}
</style></head><body>
<h1>prober on {host}</h1>
<p class="summary">{n} targets: <b>{down}</b> down, <b>{loss}</b> losing probes, {ok} fine (over each target's last {recent} probes). prober {version}; <a href="/metrics">metrics</a>. This page reloads every 5 s.</p>
<table>
<thead><tr><th>state</th><th>probe</th><th>target</th><th>labels</th><th>sent</th><th>lost (recent)</th><th>RTT p50</th><th>RTT p99</th><th>last error</th></tr></thead>
<tbody>
"#,
            host = esc(&self.host),
            n = rows.len(),
            ok = rows.len() - down - loss,
            recent = RECENT,
            version = esc(&self.version),
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
                .filter(|(k, _)| !matches!(k.as_str(), "probe" | "target" | "protocol"))
                .map(|(k, v)| format!("{}={}", esc(k), esc(v)))
                .collect();
            let st = state(r);
            let lost = if r.recent == 0 {
                "-".to_owned()
            } else {
                format!(
                    "{} of {} ({:.0}%)",
                    r.recent_lost,
                    r.recent,
                    100.0 * r.recent_lost as f64 / r.recent as f64
                )
            };
            let q = |v: Option<f64>| v.map_or_else(|| "-".to_owned(), human_us);
            let _ = writeln!(
                h,
                r#"<tr class="{st}"><td><span class="badge">{st}</span></td><td>{probe}</td><td><code>{target}</code></td><td class="l">{extra}</td><td class="n">{sent}</td><td class="n">{lost}</td><td class="n">{p50}</td><td class="n">{p99}</td><td class="err">{err}</td></tr>"#,
                probe = esc(label("probe")),
                target = esc(label("target")),
                extra = extra.join(" "),
                sent = r.tally.sent,
                p50 = q(r.p50_us),
                p99 = q(r.p99_us),
                err = r.last_error.as_deref().map(esc).unwrap_or_default(),
            );
        }
        h.push_str("</tbody></table>\n</body></html>\n");
        h
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
    fn an_empty_daemon_has_a_page() {
        let page = StatusPage {
            sink: PrometheusSink::new(),
            version: "0.1.0".to_owned(),
            host: "h<1>".to_owned(),
        }
        .render();
        assert!(page.contains("prober on h&lt;1&gt;"), "{page}");
        assert!(page.contains("0 targets"), "{page}");
    }
}

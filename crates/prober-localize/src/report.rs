//! One localization as a person or a program reads it: a table, one JSON
//! object, or a small page. [`localize`] gathers the flows and ranks
//! their links; [`serve`] answers each request to its page or its JSON
//! with a fresh one, from the same Prometheus, so the localizer can sit
//! beside the fleet's dashboards with no server of its own keeping state.

use std::fmt::Write as _;
use std::future::Future;
use std::sync::Arc;

use http_body_util::Full;
use hyper::body::Bytes;
use hyper::{Request, Response, StatusCode};

use crate::prometheus::{Prometheus, gather};
use crate::vote::{Settings, Suspect, rank};

/// What to localize.
#[derive(Debug, Clone)]
pub struct Ask {
    /// The jobs whose flows count (a regular expression of `probe`).
    pub probe: String,
    /// The window of loss to explain (a Prometheus duration).
    pub window: String,
    /// The window's end (RFC 3339 or Unix seconds); now if `None`.
    pub at: Option<String>,
    /// When a link is named.
    pub settings: Settings,
    /// Links to list.
    pub top: usize,
}

/// What can go wrong localizing.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Reading Prometheus.
    #[error(transparent)]
    Prometheus(#[from] crate::prometheus::Error),
    /// No flow had a followed path.
    #[error(
        "no probe flow with a followed path in {url} (jobs matching {probe:?}): the daemons' udp:// jobs need trace_every and trace_hops = true, and a trace done (docs/path.md)"
    )]
    NoFlows {
        /// The Prometheus asked.
        url: String,
        /// The jobs asked for.
        probe: String,
    },
}

/// One localization.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Report {
    /// `localize`.
    #[serde(rename = "type")]
    pub kind_of_record: &'static str,
    /// The window explained.
    pub window: String,
    /// Its end, if not now.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub at: Option<String>,
    /// Flows with a followed path.
    pub flows: usize,
    /// Those that lost probes.
    pub lossy_flows: usize,
    /// UDP flows without a followed path (their loss is laid on no link).
    pub unmapped_flows: usize,
    /// Links named.
    pub named: usize,
    /// The most suspect links, ranked.
    pub links: Vec<Suspect>,
}

/// Reads the flows of `ask` from `p` and ranks their links.
///
/// # Errors
/// Prometheus unreachable or refusing a query, or no flow with a path.
pub async fn localize(p: &Prometheus, ask: &Ask) -> Result<Report, Error> {
    let got = gather(p, &ask.probe, &ask.window, ask.at.as_deref()).await?;
    if got.flows.is_empty() {
        return Err(Error::NoFlows {
            url: p.url().to_owned(),
            probe: ask.probe.clone(),
        });
    }
    let mut links = rank(&got.flows, ask.settings);
    let named = links.iter().filter(|s| s.named).count();
    links.truncate(ask.top);
    Ok(Report {
        kind_of_record: "localize",
        window: ask.window.clone(),
        at: ask.at.clone(),
        flows: got.flows.len(),
        lossy_flows: got.flows.iter().filter(|f| f.lossy()).count(),
        unmapped_flows: got.unmapped,
        named,
        links,
    })
}

impl Report {
    /// The line that sums it up.
    pub fn headline(&self) -> String {
        format!(
            "{} flows over {}{} ({} lossy, {} without a followed path); {} links named",
            self.flows,
            self.window,
            self.at
                .as_ref()
                .map_or_else(String::new, |at| format!(" to {at}")),
            self.lossy_flows,
            self.unmapped_flows,
            self.named
        )
    }

    /// The table a person reads in a terminal.
    pub fn table(&self) -> String {
        let mut out = self.headline();
        out.push('\n');
        if !self.links.is_empty() {
            let _ = writeln!(
                out,
                "{:>4}  {:<36} {:>8} {:>6} {:>6} {:>8} {:>8} {:>7}  named",
                "rank", "link", "votes", "lossy", "clean", "loss%", "others%", "conf%"
            );
        }
        for s in &self.links {
            let _ = writeln!(
                out,
                "{:>4}  {:<36} {:>8.1} {:>6} {:>6} {:>8.3} {:>8.3} {:>7.3}  {}",
                s.rank,
                s.link.to_string(),
                s.votes,
                s.lossy_flows,
                s.clean_flows,
                s.loss * 100.0,
                s.others_loss * 100.0,
                s.confidence * 100.0,
                if s.named { "yes" } else { "" }
            );
        }
        out
    }

    /// The page: the headline and the table, named links marked.
    pub fn html(&self) -> String {
        let mut rows = String::new();
        for s in &self.links {
            let _ = writeln!(
                rows,
                "<tr{}><td>{}</td><td>{}</td><td>{:.1}</td><td>{}</td><td>{}</td><td>{:.3}</td><td>{:.3}</td><td>{:.3}</td><td>{}</td></tr>",
                if s.named { " class=named" } else { "" },
                s.rank,
                escape(&s.link.to_string()),
                s.votes,
                s.lossy_flows,
                s.clean_flows,
                s.loss * 100.0,
                s.others_loss * 100.0,
                s.confidence * 100.0,
                if s.named { "named" } else { "" },
            );
        }
        let table = if self.links.is_empty() {
            "<p>No flow lost a probe: no link to suspect.</p>".to_owned()
        } else {
            format!(
                "<table><tr><th>rank</th><th>link</th><th>votes</th><th>lossy flows</th><th>clean flows</th><th>loss %</th><th>others' loss %</th><th>confidence %</th><th></th></tr>\n{rows}</table>"
            )
        };
        page(
            &escape(&self.headline()),
            &table,
            &self.window,
            self.at.as_deref(),
        )
    }
}

/// The page around `body`, with links to other windows (ending at `at`
/// too, if given).
fn page(headline: &str, body: &str, window: &str, at: Option<&str>) -> String {
    let end: String = at.map_or_else(String::new, |at| {
        let q: String = form_urlencoded::byte_serialize(at.as_bytes()).collect();
        format!("&amp;at={q}")
    });
    let windows: String = ["5m", "15m", "1h", "6h"]
        .iter()
        .map(|w| {
            if *w == window {
                format!("<b>{w}</b> ")
            } else {
                format!("<a href=\"?window={w}{end}\">{w}</a> ")
            }
        })
        .collect();
    format!(
        "<!doctype html><html><head><meta charset=utf-8><meta http-equiv=refresh content=30><title>prober localize</title><style>\
body{{font-family:sans-serif;margin:1.5em}}table{{border-collapse:collapse}}td,th{{border:1px solid #ccc;padding:.3em .6em;text-align:right}}\
td:nth-child(2),th:nth-child(2){{text-align:left;font-family:monospace}}tr.named{{background:#fdd;font-weight:bold}}.error{{color:#a00}}</style></head>\
<body><h1>Which link loses the mesh's probes</h1><p>{headline}</p><p>Window: {windows}(<a href=\"localize.json?window={}{end}\">JSON</a>)</p>{body}\
<p>007's vote over each flow's followed path; a link is named when the flows crossing it lose more than the rest at the confidence asked, and enough of them are lossy (docs/path.md).</p></body></html>\n",
        escape(window)
    )
}

/// Text made safe for HTML.
fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// Whether `w` reads as a Prometheus duration (`5m`, `90s`, `1h30m`).
fn is_duration(w: &str) -> bool {
    let mut digits = false;
    let mut rest = w;
    if w.is_empty() {
        return false;
    }
    while !rest.is_empty() {
        let n = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        if n == 0 {
            return false;
        }
        digits = true;
        rest = &rest[n..];
        let unit = ["ms", "s", "m", "h", "d", "w", "y"]
            .into_iter()
            .find(|u| rest.starts_with(u));
        let Some(u) = unit else { return false };
        rest = &rest[u.len()..];
    }
    digits
}

/// Answers HTTP on `listener` until `stop` resolves: `/` the page,
/// `/localize.json` the JSON, each localized afresh (`?window=` another
/// window, `?at=` another end), one at a time so that a crowd of readers asks Prometheus
/// once each in turn, not at once. An error reading Prometheus is a 502
/// that says it.
///
/// # Errors
/// None once listening: a connection that fails is dropped alone.
pub async fn serve(
    listener: tokio::net::TcpListener,
    p: Prometheus,
    ask: Ask,
    stop: impl Future<Output = ()>,
) -> std::io::Result<()> {
    let shared = Arc::new((p, ask, tokio::sync::Mutex::new(())));
    let mut stop = std::pin::pin!(stop);
    loop {
        let (stream, _) = tokio::select! {
            r = listener.accept() => match r {
                Ok(c) => c,
                Err(_) => continue,
            },
            () = &mut stop => return Ok(()),
        };
        let shared = Arc::clone(&shared);
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |req: Request<_>| {
                let shared = Arc::clone(&shared);
                let uri = req.uri().clone();
                async move {
                    let (p, ask, one) = &*shared;
                    Ok::<_, std::convert::Infallible>(answer(&uri, p, ask, one).await)
                }
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                .await;
        });
    }
}

/// One request's answer.
async fn answer(
    uri: &hyper::Uri,
    p: &Prometheus,
    ask: &Ask,
    one: &tokio::sync::Mutex<()>,
) -> Response<Full<Bytes>> {
    let json = match uri.path() {
        "/" => false,
        "/localize.json" => true,
        _ => {
            return reply(
                StatusCode::NOT_FOUND,
                "text/plain",
                "not found: try / or /localize.json\n".to_owned(),
            );
        }
    };
    let mut ask = ask.clone();
    let param = |name: &str| {
        uri.query().and_then(|q| {
            form_urlencoded::parse(q.as_bytes())
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.into_owned())
        })
    };
    if let Some(at) = param("at") {
        // Prometheus reads it (and refuses what is not a time).
        ask.at = Some(at);
    }
    if let Some(w) = param("window") {
        if !is_duration(&w) {
            return reply(
                StatusCode::BAD_REQUEST,
                "text/plain",
                format!("window={w:?} is not a Prometheus duration (5m, 1h)\n"),
            );
        }
        ask.window = w;
    }
    let got = {
        let _turn = one.lock().await;
        localize(p, &ask).await
    };
    match (got, json) {
        (Ok(r), true) => reply(
            StatusCode::OK,
            "application/json",
            serde_json::to_string(&r).unwrap_or_default(),
        ),
        (Ok(r), false) => reply(StatusCode::OK, "text/html; charset=utf-8", r.html()),
        (Err(e), true) => reply(
            StatusCode::BAD_GATEWAY,
            "application/json",
            serde_json::json!({ "error": e.to_string() }).to_string(),
        ),
        (Err(e), false) => reply(
            StatusCode::BAD_GATEWAY,
            "text/html; charset=utf-8",
            page(
                &format!("<span class=error>{}</span>", escape(&e.to_string())),
                "",
                &ask.window,
                ask.at.as_deref(),
            ),
        ),
    }
}

fn reply(status: StatusCode, kind: &str, body: String) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(body)));
    *r.status_mut() = status;
    if let Ok(v) = hyper::header::HeaderValue::from_str(kind) {
        r.headers_mut().insert(hyper::header::CONTENT_TYPE, v);
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_are_prometheus_durations() {
        for ok in ["5m", "90s", "1h30m", "250ms", "2d"] {
            assert!(is_duration(ok), "{ok}");
        }
        for bad in ["", "5", "m", "5x", "-5m", "5m)", "1h 5m"] {
            assert!(!is_duration(bad), "{bad}");
        }
    }

    #[test]
    fn the_page_escapes_what_it_shows() {
        assert_eq!(
            escape("<a href=\"x\">&"),
            "&lt;a href=&quot;x&quot;&gt;&amp;"
        );
        let p = page("h", "<table></table>", "15m", None);
        assert!(
            p.contains("<b>15m</b>") && p.contains("href=\"?window=5m\""),
            "{p}"
        );
        // A look back keeps its end in the other windows' links.
        let p = page("h", "", "5m", Some("2026-11-29T02:02:05Z"));
        assert!(
            p.contains("href=\"?window=1h&amp;at=2026-11-29T02%3A02%3A05Z\""),
            "{p}"
        );
    }
}

//! The flows, their loss and their paths, from Prometheus's HTTP API
//! (`/api/v1/query`): the series every daemon already exports, so the
//! localizer needs nothing but the Prometheus that scrapes the fleet.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::time::Duration;

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;

use crate::vote::Flow;

/// What can go wrong reading Prometheus.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The URL is not `http://host:port[/prefix]`.
    #[error("--prometheus {0:?}: give http://HOST:PORT (https is not supported)")]
    Url(String),
    /// It could not be reached, or did not answer in time.
    #[error("cannot reach Prometheus at {url}: {why}")]
    Reach {
        /// Where.
        url: String,
        /// Why.
        why: String,
    },
    /// It answered, but not with a vector.
    #[error("Prometheus refused {query:?}: {why}")]
    Query {
        /// The query.
        query: String,
        /// Its error, or the status.
        why: String,
    },
}

/// One series of an instant vector: its labels and value.
pub type Sample = (BTreeMap<String, String>, f64);

/// A Prometheus server's query API.
#[derive(Debug, Clone)]
pub struct Prometheus {
    authority: String,
    prefix: String,
    url: String,
    timeout: Duration,
}

impl Prometheus {
    /// The server at `url` (`http://host:port`, with a path prefix if it
    /// serves under one).
    ///
    /// # Errors
    /// A URL that is not plain `http://`.
    pub fn new(url: &str, timeout: Duration) -> Result<Self, Error> {
        let uri: http::Uri = url.parse().map_err(|_| Error::Url(url.to_owned()))?;
        if uri.scheme_str() != Some("http") {
            return Err(Error::Url(url.to_owned()));
        }
        let authority = uri.authority().ok_or_else(|| Error::Url(url.to_owned()))?;
        let host = authority.host();
        let port = authority.port_u16().unwrap_or(80);
        Ok(Self {
            authority: format!("{host}:{port}"),
            prefix: uri.path().trim_end_matches('/').to_owned(),
            url: url.to_owned(),
            timeout,
        })
    }

    /// The URL it was given.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// An instant query's vector at `at` (RFC 3339 or Unix seconds, as
    /// Prometheus reads its `time` parameter), or now.
    ///
    /// # Errors
    /// Unreachable, a refused query, or not a vector.
    pub async fn query(&self, expr: &str, at: Option<&str>) -> Result<Vec<Sample>, Error> {
        let reach = |why: String| Error::Reach {
            url: self.url.clone(),
            why,
        };
        let refused = |why: String| Error::Query {
            query: expr.to_owned(),
            why,
        };
        // Built in a block: the serializer is not Sync, and must not be
        // held across an await.
        let body = {
            let mut form = form_urlencoded::Serializer::new(String::new());
            form.append_pair("query", expr);
            if let Some(at) = at {
                form.append_pair("time", at);
            }
            form.finish()
        };
        let request = http::Request::post(format!("{}/api/v1/query", self.prefix))
            .header(http::header::HOST, &self.authority)
            .header(
                http::header::CONTENT_TYPE,
                "application/x-www-form-urlencoded",
            )
            .body(Full::new(Bytes::from(body)))
            .map_err(|e| refused(e.to_string()))?;
        let answer = async {
            let tcp = tokio::net::TcpStream::connect(&self.authority)
                .await
                .map_err(|e| reach(e.to_string()))?;
            let (mut send, conn) =
                hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tcp))
                    .await
                    .map_err(|e| reach(e.to_string()))?;
            tokio::spawn(conn);
            let response = send
                .send_request(request)
                .await
                .map_err(|e| reach(e.to_string()))?;
            let status = response.status();
            let bytes = response
                .into_body()
                .collect()
                .await
                .map_err(|e| reach(e.to_string()))?
                .to_bytes();
            Ok::<_, Error>((status, bytes))
        };
        let (status, bytes) = tokio::time::timeout(self.timeout, answer)
            .await
            .map_err(|_| reach(format!("no answer in {:?}", self.timeout)))??;
        let v: serde_json::Value = serde_json::from_slice(&bytes)
            .map_err(|_| refused(format!("HTTP {status}, not the query API's JSON")))?;
        if v["status"] != "success" {
            return Err(refused(
                v["error"].as_str().unwrap_or("no error given").to_owned(),
            ));
        }
        let Some(results) = v["data"]["result"].as_array() else {
            return Err(refused("not an instant vector".to_owned()));
        };
        Ok(results
            .iter()
            .filter_map(|r| {
                let labels = r["metric"]
                    .as_object()?
                    .iter()
                    .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_owned())))
                    .collect();
                let value = r["value"][1].as_str()?.parse::<f64>().ok()?;
                Some((labels, value))
            })
            .collect())
    }
}

/// What the flows were read from, for the report.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct Gathered {
    /// Flows with a path and counters.
    pub flows: Vec<Flow>,
    /// UDP flows that had counters but no followed path (not traced yet,
    /// or `trace_hops` off): their loss is not laid on any link. Other
    /// protocols' flows are not followed and not counted.
    pub unmapped: usize,
}

/// The flows of the jobs matching `probe` (a regular expression of the
/// `probe` label), their loss over `window` (a Prometheus duration) up to
/// `at` (as [`Prometheus::query`]; now if `None`), and their paths then.
///
/// # Errors
/// As [`Prometheus::query`].
pub async fn gather(
    p: &Prometheus,
    probe: &str,
    window: &str,
    at: Option<&str>,
) -> Result<Gathered, Error> {
    let sel = format!("probe=~{}", quote(probe));
    let hops = p
        .query(&format!("prober_path_hop_info{{{sel}}}"), at)
        .await?;
    let flows = p.query(&format!("prober_path_flow{{{sel}}}"), at).await?;
    let by = "sum by (instance, target)";
    let sent = p
        .query(
            &format!("{by} (increase(prober_probes_sent_total{{{sel}}}[{window}]))"),
            at,
        )
        .await?;
    let mut lost = BTreeMap::new();
    for metric in ["prober_probes_timeout_total", "prober_probes_error_total"] {
        for (l, v) in p
            .query(&format!("{by} (increase({metric}{{{sel}}}[{window}]))"), at)
            .await?
        {
            *lost.entry(key(&l)).or_insert(0.0) += v;
        }
    }
    // (instance, base target, path) -> hop -> address.
    let mut branches: BTreeMap<(String, String, String), BTreeMap<u32, IpAddr>> = BTreeMap::new();
    for (l, _) in &hops {
        let (Some(hop), Some(addr)) = (
            l.get("hop").and_then(|h| h.parse().ok()),
            l.get("addr").and_then(|a| a.parse().ok()),
        ) else {
            continue;
        };
        let (i, t) = key(l);
        branches
            .entry((i, t, l.get("path").cloned().unwrap_or_default()))
            .or_default()
            .insert(hop, addr);
    }
    // (instance, flow target) -> path.
    let mut paths: BTreeMap<(String, String), Vec<IpAddr>> = BTreeMap::new();
    for (l, _) in &flows {
        let (i, t) = key(l);
        let base = t.split("#flow=").next().unwrap_or(&t).to_owned();
        let (Some(source), Some(hops)) = (
            l.get("source").and_then(|s| s.parse::<IpAddr>().ok()),
            branches.get(&(i.clone(), base, l.get("path").cloned().unwrap_or_default())),
        ) else {
            continue;
        };
        let mut path = vec![source];
        path.extend(hops.values().copied());
        paths.insert((i, t), path);
    }
    let mut out = Gathered::default();
    for (l, sent) in sent {
        let k = key(&l);
        let Some(path) = paths.remove(&k) else {
            // Only a UDP flow can be followed.
            out.unmapped += usize::from(k.1.starts_with("udp://"));
            continue;
        };
        out.flows.push(Flow {
            lost: lost.get(&k).copied().unwrap_or(0.0),
            instance: k.0,
            target: k.1,
            path,
            sent,
        });
    }
    Ok(out)
}

/// A series' (instance, target).
fn key(l: &BTreeMap<String, String>) -> (String, String) {
    (
        l.get("instance").cloned().unwrap_or_default(),
        l.get("target").cloned().unwrap_or_default(),
    )
}

/// A PromQL string literal.
fn quote(s: &str) -> String {
    format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\""))
}

//! `prober serve --http`: the HTTP responder. HTTP/1.1 and h2c share one
//! port (hyper-util's auto builder tells them apart by the HTTP/2
//! preface); with a certificate it speaks TLS and ALPN picks the version.
//!
//! Paths:
//! - `GET /echo?size=N`: a body of N bytes (default 64, at most 16 MiB);
//!   `POST /echo` sends the request body back (at most 1 MiB).
//! - `/status/CODE`: answers with that status.
//! - `/redirect/N`: a 302 to `/redirect/N-1`, and `/redirect/0` to
//!   `/echo`.
//!
//! Every response carries `Server-Timing: dwell;dur=D, turnaround;dur=T`
//! in milliseconds with nanosecond digits: the handler's own time (dwell)
//! and the time from the kernel's receive stamp of the request's last read
//! to the handler's return (turnaround, the responder part of the split).
//!
//! A request with `Prober-Send-Time: SEQ` (prober's client, with kernel
//! stamps on) asks for its response's send part (t3k − t3, its stamp comes
//! only after the response): the response says `send-later`, and the next
//! response on the connection carries it as `send;desc=SEQ;dur=S` (no
//! `dur` where the kernel gave no stamp), as NTP's interleaved mode does.
//! `GET /prober/send-time?seq=SEQ` asks for it at once
//! (docs/timestamps.md).

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response, StatusCode, header};
use http_body_util::{BodyExt as _, Full, Limited};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use prober_core::clock::unix_now_ns;
use prober_net::stream::{ServerRx, ServerStream};
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;

/// The response header that carries the responder's times.
pub const SERVER_TIMING: &str = "server-timing";

/// The request header that asks for the response's send part: the
/// probe's seq.
pub(crate) const SEND_TIME: &str = "prober-send-time";

/// The path that answers a send part asked for: `?seq=SEQ`.
pub(crate) const SEND_TIME_PATH: &str = "/prober/send-time";

/// The largest `GET /echo?size=N` body.
const MAX_ECHO: usize = 16 << 20;
/// The largest request body `POST /echo` reads.
const MAX_REQUEST_BODY: usize = 1 << 20;
/// The default `GET /echo` body.
const DEFAULT_ECHO: usize = 64;

/// How the HTTP responder answers.
#[derive(Debug, Clone, Default)]
pub struct HttpServerConfig {
    /// Serve TLS with this configuration (ALPN `h2`, `http/1.1`).
    pub tls: Option<Arc<rustls::ServerConfig>>,
    /// Log each connection's end (at debug level).
    pub log_clients: bool,
    /// Connection caps and timeouts for a public address.
    pub limits: prober_net::guard::Limits,
    /// What the limits refused.
    pub stats: Arc<prober_net::guard::GuardStats>,
}

/// Serves HTTP on `listener` until `stop` is cancelled.
///
/// # Errors
/// Accepting failed for a reason other than a client's (the listener
/// itself broke).
pub async fn serve_http(
    listener: TcpListener,
    cfg: HttpServerConfig,
    stop: CancellationToken,
) -> std::io::Result<()> {
    let acceptor = cfg.tls.clone().map(TlsAcceptor::from);
    let gate = prober_net::guard::Gate::new(cfg.limits, Arc::clone(&cfg.stats));
    loop {
        let (stream, peer) = tokio::select! {
            () = stop.cancelled() => return Ok(()),
            res = listener.accept() => match res {
                Ok(x) => x,
                // A client that went away before accept, or a full fd table
                // for a moment: keep serving.
                Err(e) => {
                    tracing::debug!("http accept: {e}");
                    tokio::time::sleep(Duration::from_millis(5)).await;
                    continue;
                }
            },
        };
        let Some(permit) = gate.admit_or_warn(peer, "http") else {
            continue;
        };
        let _ = stream.set_nodelay(true);
        let (acceptor, stop, log) = (acceptor.clone(), stop.clone(), cfg.log_clients);
        let (first, stats) = (cfg.limits.request_timeout, Arc::clone(&cfg.stats));
        tokio::spawn(async move {
            let _permit = permit;
            // A client that connects and sends nothing (no TLS hello, no
            // HTTP/2 preface, no request line) is closed.
            if tokio::time::timeout(first, stream.peek(&mut [0u8; 1]))
                .await
                .is_err()
            {
                stats
                    .request_timeouts
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                return;
            }
            // Under TLS, a write of control frames alone is a record longer.
            let stream = if acceptor.is_some() {
                ServerStream::new(stream).under_tls()
            } else {
                ServerStream::new(stream)
            };
            let rx = stream.rx();
            let service = service_fn(move |req| handle(req, Arc::clone(&rx)));
            let mut builder = auto::Builder::new(TokioExecutor::new());
            builder
                .http1()
                .timer(hyper_util::rt::TokioTimer::new())
                // Half a request line or header block: closed after the
                // request timeout too (hyper's own default is 30 s).
                .header_read_timeout(first);
            builder
                .http2()
                .max_concurrent_streams(prober_net::guard::H2_MAX_CONCURRENT_STREAMS)
                .max_header_list_size(prober_net::guard::H2_MAX_HEADER_LIST)
                .max_pending_accept_reset_streams(prober_net::guard::H2_MAX_PENDING_RESETS);
            let res = match acceptor {
                Some(a) => match tokio::time::timeout(first, a.accept(stream)).await {
                    Ok(Ok(tls)) => {
                        let conn = builder.serve_connection(TokioIo::new(tls), service);
                        drive(conn, &stop).await
                    }
                    Ok(Err(e)) => Err(format!("TLS handshake: {e}")),
                    Err(_) => {
                        stats
                            .request_timeouts
                            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        Err("TLS handshake took too long".to_owned())
                    }
                },
                None => {
                    let conn = builder.serve_connection(TokioIo::new(stream), service);
                    drive(conn, &stop).await
                }
            };
            if let Err(e) = res
                && log
            {
                tracing::debug!("http client {peer}: {e}");
            }
        });
    }
}

/// Runs one connection until it ends or `stop` is cancelled.
async fn drive<F, E>(conn: F, stop: &CancellationToken) -> Result<(), String>
where
    F: std::future::Future<Output = Result<(), E>>,
    E: std::fmt::Display,
{
    tokio::select! {
        () = stop.cancelled() => Ok(()),
        res = conn => res.map_err(|e| e.to_string()),
    }
}

fn ms(ns: u64) -> String {
    format!("{}.{:06}", ns / 1_000_000, ns % 1_000_000)
}

async fn handle(
    req: Request<Incoming>,
    rx: Arc<ServerRx>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let t2 = unix_now_ns();
    let t2k = rx.last();
    let path = req.uri().path().to_owned();
    let query = req.uri().query().unwrap_or("").to_owned();
    let method = req.method().clone();
    let want = req
        .headers()
        .get(SEND_TIME)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    // The previous response's send part, carried in this one; or the one
    // asked for.
    let asked = (path == SEND_TIME_PATH).then(|| query_number::<u64>(&query, "seq"));
    let carried = match asked {
        Some(Some(seq)) => rx.take_send(Some(seq)),
        Some(None) => None,
        None if want.is_some() => rx.take_send(None),
        None => None,
    };
    let mut resp = if asked.is_some() {
        if asked.flatten().is_some() {
            status(StatusCode::NO_CONTENT)
        } else {
            status(StatusCode::BAD_REQUEST)
        }
    } else if path == "/echo" {
        if method == http::Method::GET || method == http::Method::HEAD {
            let size = query_number::<usize>(&query, "size")
                .unwrap_or(DEFAULT_ECHO)
                .min(MAX_ECHO);
            if method == http::Method::HEAD {
                // The GET's length and no body: hyper leaves a HEAD's body
                // in place over HTTP/2, where a client then finds DATA
                // past a content-length of 0 and resets the stream.
                let mut r = Response::new(Full::new(Bytes::new()));
                r.headers_mut()
                    .insert(header::CONTENT_LENGTH, header::HeaderValue::from(size));
                r
            } else {
                Response::new(Full::new(Bytes::from(vec![b'x'; size])))
            }
        } else {
            match Limited::new(req.into_body(), MAX_REQUEST_BODY)
                .collect()
                .await
            {
                Ok(body) => Response::new(Full::new(body.to_bytes())),
                Err(_) => status(StatusCode::PAYLOAD_TOO_LARGE),
            }
        }
    } else if let Some(code) = path.strip_prefix("/status/") {
        match code
            .parse::<u16>()
            .ok()
            .and_then(|c| StatusCode::from_u16(c).ok())
        {
            Some(c) => status(c),
            None => status(StatusCode::BAD_REQUEST),
        }
    } else if let Some(n) = path.strip_prefix("/redirect/") {
        match n.parse::<u32>() {
            Ok(n) => {
                let to = if n == 0 {
                    "/echo".to_owned()
                } else {
                    format!("/redirect/{}", n - 1)
                };
                let mut r = status(StatusCode::FOUND);
                if let Ok(v) = header::HeaderValue::from_str(&to) {
                    r.headers_mut().insert(header::LOCATION, v);
                }
                r
            }
            Err(_) => status(StatusCode::BAD_REQUEST),
        }
    } else {
        status(StatusCode::NOT_FOUND)
    };
    let t3 = unix_now_ns();
    let mut timing = format!("dwell;dur={}", ms(t3.saturating_sub(t2)));
    if let Some(k) = t2k.filter(|k| *k <= t3) {
        timing.push_str(&format!(", turnaround;dur={}", ms(t3 - k)));
    }
    if let Some((seq, send)) = carried {
        timing.push_str(&format!(", send;desc={seq}"));
        if let Some(send) = send {
            timing.push_str(&format!(";dur={}", ms(send)));
        }
    }
    if let Some(seq) = want
        && asked.is_none()
        && rx.want_send_times()
    {
        timing.push_str(", send-later");
        rx.sent(seq, t3);
    }
    if let Ok(v) = header::HeaderValue::from_str(&timing) {
        resp.headers_mut().insert(SERVER_TIMING, v);
    }
    Ok(resp)
}

/// The number after `KEY=` in a query string, if it is there and one.
fn query_number<T: std::str::FromStr>(query: &str, key: &str) -> Option<T> {
    query
        .split('&')
        .find_map(|kv| kv.strip_prefix(key)?.strip_prefix('='))
        .and_then(|v| v.parse().ok())
}

fn status(code: StatusCode) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::new()));
    *r.status_mut() = code;
    r
}

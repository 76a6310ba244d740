//! The responders: `--h3 ADDR` answers `h3://` (`/echo`, `/status/CODE`)
//! and `--quic ADDR` echoes every stream of every connection; both over
//! QUIC with `--tls-cert` and `--tls-key`.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use prober_core::responder::{Responder, ServeEnv, ServeError, ServeFuture, Serving, Tls};
use prober_net::responder::Common;
use tokio_util::sync::CancellationToken;

/// The echo's body, as the HTTP responder's.
const ECHO: &[u8] = &[b'x'; 64];

/// The largest request header section the HTTP/3 responder takes (as the
/// HTTP/2 responders' limit, docs/security.md).
const MAX_HEADERS: u64 = 16 * 1024;

/// How long a request's headers may take to come.
const REQUEST_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// The most bytes the echo responder reads from one stream.
const MAX_ECHO: usize = 64 * 1024;

fn server_config(env: &ServeEnv, alpn: &[&[u8]]) -> Result<quinn::ServerConfig, ServeError> {
    let c = env.options::<Common>();
    let Some(files) = &c.tls else {
        return Err(ServeError::Config(
            "QUIC needs TLS: give --tls-cert and --tls-key".to_owned(),
        ));
    };
    let mut cfg = crate::tls::server(&files.cert, &files.key, alpn).map_err(ServeError::Config)?;
    // A responder left where others reach it: bounded streams per
    // connection, and idle connections closed (quinn's defaults are 100
    // streams and no idle limit of the server's own).
    let mut t = quinn::TransportConfig::default();
    t.max_concurrent_bidi_streams(100u32.into());
    t.max_idle_timeout(Some(
        quinn::IdleTimeout::try_from(c.limits.idle_timeout)
            .unwrap_or_else(|_| quinn::VarInt::from_u32(300_000).into()),
    ));
    cfg.transport_config(Arc::new(t));
    Ok(cfg)
}

fn check_h3(env: &ServeEnv) -> Result<(), ServeError> {
    server_config(env, H3_ALPNS).map(drop)
}

fn check_quic(env: &ServeEnv) -> Result<(), ServeError> {
    server_config(env, ECHO_ALPNS).map(drop)
}

/// What each responder offers in ALPN.
const H3_ALPNS: &[&[u8]] = &[crate::protocol::H3_ALPN];
const ECHO_ALPNS: &[&[u8]] = &[ECHO_ALPN, crate::protocol::H3_ALPN];

/// ALPN of the echo responder (and `h3`, so that a `quic://` handshake
/// with the default ALPN reaches it too).
const ECHO_ALPN: &[u8] = b"prober-echo";

fn bind(
    name: &'static str,
    addr: SocketAddr,
    cfg: quinn::ServerConfig,
) -> Result<(quinn::Endpoint, SocketAddr), ServeError> {
    let endpoint = quinn::Endpoint::server(cfg, addr)
        .map_err(|e| ServeError::io(format!("binding {name} {addr}"), e))?;
    let at = endpoint
        .local_addr()
        .map_err(|e| ServeError::io(format!("reading the address of {name}"), e))?;
    Ok((endpoint, at))
}

/// Accepts connections until `stop`; each handshake and then `handle` run
/// in a task of their own, so a slow client holds up no other.
async fn accept<F, Fut>(
    endpoint: quinn::Endpoint,
    stop: CancellationToken,
    handle: F,
) -> std::io::Result<()>
where
    F: Fn(quinn::Connection, CancellationToken) -> Fut + Copy + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    loop {
        let incoming = tokio::select! {
            () = stop.cancelled() => break,
            i = endpoint.accept() => match i {
                Some(i) => i,
                None => break,
            },
        };
        let stop = stop.clone();
        tokio::spawn(async move {
            match incoming.await {
                Ok(conn) => handle(conn, stop).await,
                Err(e) => tracing::debug!("QUIC handshake: {e}"),
            }
        });
    }
    endpoint.close(0u32.into(), b"stopping");
    Ok(())
}

async fn h3_conn(conn: quinn::Connection, stop: CancellationToken) {
    let mut h3c =
        // A header section larger than this is refused before it is
        // buffered (h3's default takes any size a client announces).
        match h3::server::builder()
            .max_field_section_size(MAX_HEADERS)
            .build::<_, Bytes>(h3_quinn::Connection::new(conn))
            .await
        {
            Ok(c) => c,
            Err(e) => {
                tracing::debug!("HTTP/3 connection: {e}");
                return;
            }
        };
    loop {
        let resolver = tokio::select! {
            () = stop.cancelled() => return,
            r = h3c.accept() => match r {
                Ok(Some(r)) => r,
                Ok(None) => return,
                Err(e) => {
                    tracing::debug!("HTTP/3 accept: {e}");
                    return;
                }
            },
        };
        tokio::spawn(async move {
            // A request's headers come within the request timeout, or the
            // stream is dropped (a client trickling bytes holds nothing).
            let (req, mut stream) =
                match tokio::time::timeout(REQUEST_TIMEOUT, resolver.resolve_request()).await {
                    Ok(Ok(x)) => x,
                    Ok(Err(e)) => {
                        tracing::debug!("HTTP/3 request: {e}");
                        return;
                    }
                    Err(_) => {
                        tracing::debug!("HTTP/3 request: no headers in time");
                        return;
                    }
                };
            let t2 = Instant::now();
            let path = req.uri().path();
            let status = if path == "/echo" {
                200
            } else {
                path.strip_prefix("/status/")
                    .and_then(|c| c.parse::<u16>().ok())
                    .filter(|c| (200..600).contains(c))
                    .unwrap_or(404)
            };
            let dwell_ms = t2.elapsed().as_secs_f64() * 1e3;
            let resp = http::Response::builder()
                .status(status)
                .header("server-timing", format!("dwell;dur={dwell_ms:.6}"))
                .body(())
                .unwrap_or_default();
            let sent = async {
                stream.send_response(resp).await?;
                if status == 200 {
                    stream.send_data(Bytes::from_static(ECHO)).await?;
                }
                stream.finish().await
            };
            if let Err(e) = sent.await {
                tracing::debug!("HTTP/3 response: {e}");
            }
        });
    }
}

async fn echo_conn(conn: quinn::Connection, stop: CancellationToken) {
    loop {
        let (mut send, mut recv) = tokio::select! {
            () = stop.cancelled() => return,
            s = conn.accept_bi() => match s {
                Ok(s) => s,
                Err(_) => return,
            },
        };
        tokio::spawn(async move {
            if let Ok(Ok(data)) =
                tokio::time::timeout(REQUEST_TIMEOUT, recv.read_to_end(MAX_ECHO)).await
            {
                let _ = send.write_all(&data).await;
                let _ = send.finish();
            }
        });
    }
}

/// Binds `name`'s endpoint with these ALPNs and accepts its connections,
/// each handled by `handle`.
fn start<F, Fut>(
    name: &'static str,
    alpn: &[&[u8]],
    addr: SocketAddr,
    env: &ServeEnv,
    handle: F,
) -> Result<Serving, ServeError>
where
    F: Fn(quinn::Connection, CancellationToken) -> Fut + Copy + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let cfg = server_config(env, alpn)?;
    let (endpoint, at) = bind(name, addr, cfg)?;
    Ok(Serving {
        bound: vec![(name, at)],
        tasks: vec![Box::pin(accept(endpoint, env.stop.clone(), handle))],
        stats: Vec::new(),
    })
}

fn h3(addr: SocketAddr, env: &ServeEnv) -> ServeFuture<'_> {
    Box::pin(async move { start("h3", H3_ALPNS, addr, env, h3_conn) })
}

fn quic(addr: SocketAddr, env: &ServeEnv) -> ServeFuture<'_> {
    Box::pin(async move { start("quic", ECHO_ALPNS, addr, env, echo_conn) })
}

/// `--h3 ADDR`: answers `h3://` (and `quic://` handshakes).
pub const H3_RESPONDER: Responder = Responder {
    name: "h3",
    default_port: None,
    tls: Tls::Required,
    help: "Serve HTTP/3 over QUIC on this UDP address (GET /echo, /status/CODE), with --tls-cert and --tls-key.",
    hidden: false,
    check: check_h3,
    serve: h3,
    own: None,
};

/// `--quic ADDR`: accepts QUIC connections and echoes their streams.
pub const QUIC_RESPONDER: Responder = Responder {
    name: "quic",
    default_port: None,
    tls: Tls::Required,
    help: "Accept QUIC on this UDP address and echo every stream (ALPN prober-echo or h3), with --tls-cert and --tls-key.",
    hidden: false,
    check: check_quic,
    serve: quic,
    own: None,
};

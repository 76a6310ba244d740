//! The descriptors of this crate's responders (see
//! [`prober_core::responder::Responder`]): HTTP/1.1 and h2c, and HTTPS.

use std::net::SocketAddr;
use std::sync::Arc;

use prober_core::responder::{Responder, ServeEnv, ServeError, ServeFuture, Serving, Tls};
use prober_net::responder::{Common, bind_tcp};

use crate::{HttpServerConfig, serve_http, server_config};

/// The server's TLS, where this listener serves it.
fn tls(env: &ServeEnv) -> Result<Option<Arc<rustls::ServerConfig>>, ServeError> {
    let c = env.options::<Common>();
    match (&c.tls, env.tls) {
        (Some(f), true) => server_config(&f.cert, &f.key)
            .map(|c| Some(Arc::new(c)))
            .map_err(|e| ServeError::Config(e.to_string())),
        _ => Ok(None),
    }
}

fn check(env: &ServeEnv) -> Result<(), ServeError> {
    tls(env).map(drop)
}

fn serve<'a>(name: &'static str, addr: SocketAddr, env: &'a ServeEnv) -> ServeFuture<'a> {
    Box::pin(async move {
        let tls = tls(env)?;
        let (listener, at) = bind_tcp(name, addr).await?;
        let c = env.options::<Common>();
        let cfg = HttpServerConfig {
            tls,
            log_clients: c.log_clients,
            limits: c.limits,
            stats: Arc::clone(&c.guard),
        };
        Ok(Serving {
            bound: vec![(name, at)],
            tasks: vec![Box::pin(serve_http(listener, cfg, env.stop.clone()))],
            stats: Vec::new(),
        })
    })
}

fn http(addr: SocketAddr, env: &ServeEnv) -> ServeFuture<'_> {
    serve("http", addr, env)
}

fn https(addr: SocketAddr, env: &ServeEnv) -> ServeFuture<'_> {
    serve("https", addr, env)
}

/// `--http ADDR`: answers `http://` and `h2c://`.
pub const HTTP_RESPONDER: Responder = Responder {
    name: "http",
    default_port: None,
    tls: Tls::No,
    help: "Serve HTTP/1.1 and h2c on this address (GET /echo, /status/CODE, /redirect/N; docs/http.md).",
    hidden: false,
    check,
    serve: http,
    own: None,
};

/// `--https ADDR`: answers `https://`, with `--tls-cert` and `--tls-key`.
pub const HTTPS_RESPONDER: Responder = Responder {
    name: "https",
    tls: Tls::Required,
    help: "Serve HTTPS (HTTP/2 or HTTP/1.1 by ALPN) on this address, with --tls-cert and --tls-key.",
    serve: https,
    ..HTTP_RESPONDER
};

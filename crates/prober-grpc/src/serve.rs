//! The descriptors of this crate's responders (see
//! [`prober_core::responder::Responder`]): gRPC, with TLS when given, and
//! gRPC over TLS beside plaintext gRPC (the self-test's ladder).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use prober_core::responder::{Responder, ServeEnv, ServeError, ServeFuture, Serving, Tls};
use prober_net::responder::{Common, bind_tcp};

use crate::{DEFAULT_PORT, ServerConfig, ServerTls, serve_grpc};

/// The gRPC responder's own settings (`serve --grpc-delay`, a hidden
/// flag for tests; no `[serve]` key).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Deserialize, clap::Args)]
#[serde(deny_unknown_fields)]
pub struct GrpcServeOptions {
    /// Impairment for tests: hold every gRPC request this long.
    #[arg(long, hide = true, value_parser = prober_core::duration::parse_duration, default_value = "0")]
    #[serde(skip)]
    pub grpc_delay: Duration,
}

prober_net::own_options!(GrpcServeOptions, as_is);

/// The gRPC responders' own settings.
static GRPC_SERVE_OPTIONS: prober_net::options::ProtocolOptions =
    prober_net::options::ProtocolOptions::of::<GrpcServeOptions>("serve", "--grpc-delay", "--grpc");

/// The server's TLS, where this listener serves it.
fn tls(env: &ServeEnv) -> Result<Option<ServerTls>, ServeError> {
    let c = env.options::<Common>();
    match (&c.tls, env.tls) {
        (Some(f), true) => ServerTls::from_files(&f.cert, &f.key, f.client_ca.as_deref())
            .map(Some)
            .map_err(|e| ServeError::Config(e.to_string())),
        _ => Ok(None),
    }
}

fn check(env: &ServeEnv) -> Result<(), ServeError> {
    tls(env).map(drop)
}

fn grpc(addr: SocketAddr, env: &ServeEnv) -> ServeFuture<'_> {
    Box::pin(async move {
        let tls = tls(env)?;
        let (listener, at) = bind_tcp("grpc", addr).await?;
        let name = if tls.is_some() { "grpcs" } else { "grpc" };
        let c = env.options::<Common>();
        let cfg = ServerConfig {
            tls,
            delay: env.options::<GrpcServeOptions>().grpc_delay,
            limits: c.limits,
            stats: Arc::clone(&c.guard),
        };
        let stop = env.stop.clone();
        Ok(Serving {
            bound: vec![(name, at)],
            tasks: vec![Box::pin(async move {
                serve_grpc(listener, cfg, stop)
                    .await
                    .map_err(std::io::Error::other)
            })],
            stats: Vec::new(),
        })
    })
}

/// `--grpc ADDR`: answers `grpc://`, `grpc+stream://` and
/// `grpc-health://` (over TLS with `--tls-cert`).
pub const GRPC_RESPONDER: Responder = Responder {
    name: "grpc",
    default_port: Some(DEFAULT_PORT),
    tls: Tls::Optional {
        plain_beside: Some("grpcs"),
    },
    help: "Serve gRPC (Echo and grpc.health.v1) on this address.",
    hidden: false,
    check,
    serve: grpc,
    own: Some(&GRPC_SERVE_OPTIONS),
};

/// gRPC over TLS beside plaintext gRPC: the self-test's `grpcs://` rung.
pub const GRPCS_RESPONDER: Responder = Responder {
    name: "grpcs",
    default_port: None,
    tls: Tls::Required,
    help: "Serve gRPC over TLS beside plaintext gRPC.",
    hidden: true,
    ..GRPC_RESPONDER
};

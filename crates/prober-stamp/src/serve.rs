//! The descriptor of the STAMP reflector (see
//! [`prober_core::responder::Responder`]).

use std::net::SocketAddr;
use std::sync::Arc;

use prober_core::responder::{Responder, ServeEnv, ServeFuture, Serving, Tls, no_check};
use prober_net::responder::bind_udp;

use crate::{ReflectorConfig, ReflectorStats, serve_stamp};

fn stamp(addr: SocketAddr, env: &ServeEnv) -> ServeFuture<'_> {
    Box::pin(async move {
        let (socket, at) = bind_udp("stamp", addr).await?;
        let stats = Arc::new(ReflectorStats::default());
        let cfg = ReflectorConfig::clone(&env.options::<ReflectorConfig>());
        Ok(Serving {
            bound: vec![("stamp", at)],
            tasks: vec![Box::pin(serve_stamp(
                socket,
                cfg,
                Arc::clone(&stats),
                env.stop.clone(),
            ))],
            stats: vec![stats],
        })
    })
}

/// `--stamp ADDR`: a STAMP reflector, with the [`ReflectorConfig`] put in
/// its environment (its defaults otherwise).
pub const STAMP_RESPONDER: Responder = Responder {
    name: "stamp",
    default_port: None,
    tls: Tls::No,
    help: "Run a STAMP reflector (RFC 8762/8972) on this address (the standard port is 862).",
    hidden: false,
    check: no_check,
    serve: stamp,
};

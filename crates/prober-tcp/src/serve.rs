//! The descriptors of this crate's responders (see
//! [`prober_core::responder::Responder`]): TCP, UDP and sockperf's.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use prober_core::responder::{
    Responder, ServeEnv, ServeError, ServeFuture, Serving, Tls, no_check,
};
use prober_net::responder::{Common, bind_tcp, bind_udp};

use crate::sockperf::{SockperfStats, serve_sockperf_tcp, serve_sockperf_udp};
use crate::{DEFAULT_PORT, ResponderConfig, serve_tcp, serve_udp};

/// Impairments the TCP and UDP responders add, for tests and experiments
/// (`serve --drop-every`, `--duplicate-every`, `--delay-every`, `--delay`):
/// hidden flags, and no `[serve]` keys (the fault tests' relay adds
/// impairments a deployment would want).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Deserialize, clap::Args)]
#[serde(deny_unknown_fields)]
pub struct Impairments {
    /// Impairment for tests: do not answer every k-th request.
    #[arg(long, hide = true, value_name = "K")]
    #[serde(skip)]
    pub drop_every: Option<u64>,
    /// Impairment for tests: answer every k-th request twice.
    #[arg(long, hide = true, value_name = "K")]
    #[serde(skip)]
    pub duplicate_every: Option<u64>,
    /// Impairment for tests: hold every k-th request for --delay.
    #[arg(long, hide = true, value_name = "K")]
    #[serde(skip)]
    pub delay_every: Option<u64>,
    /// How long --delay-every holds a request.
    #[arg(long, hide = true, value_parser = prober_core::duration::parse_duration, default_value = "0")]
    #[serde(skip)]
    pub delay: Duration,
}

prober_net::own_options!(Impairments, as_is);

/// The TCP and UDP responders' impairments.
static IMPAIRMENTS: prober_net::options::ProtocolOptions =
    prober_net::options::ProtocolOptions::of::<Impairments>(
        "serve",
        "--drop-every, --duplicate-every, --delay-every and --delay",
        "--tcp and --udp",
    );

fn config(env: &ServeEnv) -> ResponderConfig {
    let c = env.options::<Common>();
    let i = env.options::<Impairments>();
    ResponderConfig {
        log_clients: c.log_clients,
        drop_every: i.drop_every,
        duplicate_every: i.duplicate_every,
        delay_every: i.delay_every,
        delay: i.delay,
        busy_poll: c.busy_poll,
        limits: c.limits,
        stats: Arc::clone(&c.guard),
        udp_follow_ups: c.udp_follow_ups,
        receive: c.receive.clone(),
    }
}

fn tcp(addr: SocketAddr, env: &ServeEnv) -> ServeFuture<'_> {
    Box::pin(async move {
        let (listener, at) = bind_tcp("tcp", addr).await?;
        Ok(Serving {
            bound: vec![("tcp", at)],
            tasks: vec![Box::pin(serve_tcp(listener, config(env), env.stop.clone()))],
            stats: Vec::new(),
        })
    })
}

fn udp(addr: SocketAddr, env: &ServeEnv) -> ServeFuture<'_> {
    Box::pin(async move {
        let (socket, at) = bind_udp("udp", addr).await?;
        Ok(Serving {
            bound: vec![("udp", at)],
            tasks: vec![Box::pin(serve_udp(socket, config(env), env.stop.clone()))],
            stats: Vec::new(),
        })
    })
}

fn sockperf(addr: SocketAddr, env: &ServeEnv) -> ServeFuture<'_> {
    Box::pin(async move {
        // UDP and TCP on one port, as sockperf's clients take one port for
        // either (`--tcp`); port 0 gets the UDP socket's port for both, and
        // another one if a TCP socket already holds that port.
        let mut attempts = 0;
        let (socket, at, listener, tcp_at) = loop {
            let (socket, at) = bind_udp("sockperf", addr).await?;
            let tcp_addr = SocketAddr::new(addr.ip(), at.port());
            match tokio::net::TcpListener::bind(tcp_addr).await {
                Ok(listener) => {
                    let tcp_at = listener
                        .local_addr()
                        .map_err(|e| ServeError::io("reading the address of sockperf tcp", e))?;
                    break (socket, at, listener, tcp_at);
                }
                Err(e)
                    if addr.port() == 0
                        && e.kind() == std::io::ErrorKind::AddrInUse
                        && attempts < 16 =>
                {
                    attempts += 1;
                }
                Err(e) => {
                    return Err(ServeError::io(
                        format!("binding sockperf tcp {tcp_addr}"),
                        e,
                    ));
                }
            }
        };
        let stats = Arc::new(SockperfStats::default());
        let cfg = config(env);
        Ok(Serving {
            bound: vec![("sockperf", at), ("sockperf-tcp", tcp_at)],
            tasks: vec![
                Box::pin(serve_sockperf_tcp(
                    listener,
                    cfg.clone(),
                    Arc::clone(&stats),
                    env.stop.clone(),
                )),
                Box::pin(serve_sockperf_udp(
                    socket,
                    cfg,
                    Arc::clone(&stats),
                    env.stop.clone(),
                )),
            ],
            stats: vec![stats],
        })
    })
}

/// `--tcp ADDR`: answers `tcp://`, `tcp-crr://` and `tcp-connect://`.
pub const TCP_RESPONDER: Responder = Responder {
    name: "tcp",
    default_port: Some(DEFAULT_PORT),
    tls: Tls::No,
    help: "Serve TCP on this address.",
    hidden: false,
    check: no_check,
    serve: tcp,
    own: Some(&IMPAIRMENTS),
};

/// `--udp ADDR`: answers `udp://`.
pub const UDP_RESPONDER: Responder = Responder {
    name: "udp",
    help: "Serve UDP on this address.",
    serve: udp,
    ..TCP_RESPONDER
};

/// `--sockperf ADDR`: answers sockperf's own clients.
pub const SOCKPERF_RESPONDER: Responder = Responder {
    name: "sockperf",
    default_port: None,
    help: "Answer sockperf's clients (`sockperf ping-pong`, `under-load`, `throughput`) over UDP and TCP (`--tcp`) on this address, as `sockperf server` does (docs/sockperf.md).",
    serve: sockperf,
    own: None,
    ..TCP_RESPONDER
};

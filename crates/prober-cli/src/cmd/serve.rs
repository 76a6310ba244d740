//! `prober serve`: the echo responder.

use std::io::Write as _;
use std::net::{Ipv4Addr, SocketAddr};
use std::process::ExitCode;

use anyhow::Context as _;
use prober_grpc::{ServerConfig, ServerTls, serve_grpc};
use prober_tcp::{DEFAULT_PORT, ResponderConfig, serve_tcp, serve_udp};
use tokio::net::{TcpListener, UdpSocket};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::cli::ServeArgs;
use crate::signal::cancel_on_signals;

/// Runs `prober serve` until SIGINT or SIGTERM. The bound addresses are
/// printed on stdout (`listening tcp 0.0.0.0:8707`), so scripts can bind
/// port 0 and read the port back.
pub(crate) async fn serve(args: ServeArgs) -> anyhow::Result<ExitCode> {
    if let Some(path) = args.config.clone() {
        return crate::daemon::run(&path, &args).await;
    }
    let default = SocketAddr::from((Ipv4Addr::UNSPECIFIED, DEFAULT_PORT));
    let default_grpc = SocketAddr::from((Ipv4Addr::UNSPECIFIED, prober_grpc::DEFAULT_PORT));
    let (tcp, udp, grpc) = match (args.tcp, args.udp, args.grpc) {
        (None, None, None) => (Some(default), Some(default), Some(default_grpc)),
        given => given,
    };
    let stop = CancellationToken::new();
    let mut set = start_listeners(&args, tcp, udp, grpc, &stop).await?;
    let _signals = cancel_on_signals(stop.clone());
    while let Some(res) = set.join_next().await {
        if let Err(e) = res.context("responder task failed").and_then(|r| Ok(r?)) {
            stop.cancel();
            return Err(e);
        }
    }
    tracing::info!("responder stopped");
    Ok(ExitCode::SUCCESS)
}

/// Binds and starts the responders asked for, printing each bound address
/// on stdout. They stop when `stop` is cancelled.
pub(crate) async fn start_listeners(
    args: &ServeArgs,
    tcp: Option<SocketAddr>,
    udp: Option<SocketAddr>,
    grpc: Option<SocketAddr>,
    stop: &CancellationToken,
) -> anyhow::Result<JoinSet<std::io::Result<()>>> {
    let tls = match (&args.tls_cert, &args.tls_key) {
        (Some(cert), Some(key)) => Some(ServerTls::from_files(
            cert,
            key,
            args.tls_client_ca.as_deref(),
        )?),
        _ => None,
    };
    if tls.is_some() && grpc.is_none() {
        anyhow::bail!("--tls-cert applies to gRPC only; add --grpc ADDR");
    }
    let cfg = ResponderConfig {
        log_clients: !args.quiet,
        drop_every: args.drop_every,
        duplicate_every: args.duplicate_every,
        delay_every: args.delay_every,
        delay: args.delay,
        busy_poll: args.busy_poll,
    };
    let mut set = JoinSet::new();
    let mut out = std::io::stdout();
    if let Some(addr) = tcp {
        let listener = TcpListener::bind(addr)
            .await
            .with_context(|| format!("binding tcp {addr}"))?;
        writeln!(out, "listening tcp {}", listener.local_addr()?)?;
        set.spawn(serve_tcp(listener, cfg.clone(), stop.clone()));
    }
    if let Some(addr) = udp {
        let socket = UdpSocket::bind(addr)
            .await
            .with_context(|| format!("binding udp {addr}"))?;
        writeln!(out, "listening udp {}", socket.local_addr()?)?;
        set.spawn(serve_udp(socket, cfg, stop.clone()));
    }
    if let Some(addr) = grpc {
        let listener = TcpListener::bind(addr)
            .await
            .with_context(|| format!("binding grpc {addr}"))?;
        let scheme = if tls.is_some() { "grpcs" } else { "grpc" };
        writeln!(out, "listening {scheme} {}", listener.local_addr()?)?;
        let grpc_cfg = ServerConfig {
            tls,
            delay: args.grpc_delay,
        };
        let stop = stop.clone();
        set.spawn(async move {
            serve_grpc(listener, grpc_cfg, stop)
                .await
                .map_err(std::io::Error::other)
        });
    }
    out.flush()?;
    Ok(set)
}

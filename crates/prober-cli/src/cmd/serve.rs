//! `prober serve`: the echo responder.

use std::io::Write as _;
use std::net::{Ipv4Addr, SocketAddr};
use std::process::ExitCode;

use anyhow::Context as _;
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
    let default = SocketAddr::from((Ipv4Addr::UNSPECIFIED, DEFAULT_PORT));
    let (tcp, udp) = match (args.tcp, args.udp) {
        (None, None) => (Some(default), Some(default)),
        given => given,
    };
    let cfg = ResponderConfig {
        log_clients: !args.quiet,
        drop_every: args.drop_every,
        duplicate_every: args.duplicate_every,
        delay_every: args.delay_every,
        delay: args.delay,
    };
    let stop = CancellationToken::new();
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
    out.flush()?;
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

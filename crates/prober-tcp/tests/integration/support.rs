//! Shared helpers: start a responder, run one probe to completion.

use std::net::SocketAddr;

use prober_core::testutil::run_probe;
use prober_core::{Probe, RunConfig, Sample, Summary};
use prober_tcp::{ResponderConfig, serve_tcp, serve_udp};
use tokio::net::{TcpListener, UdpSocket};
use tokio_util::sync::CancellationToken;

pub(crate) use prober_core::testutil::config;

/// A running responder; stops when dropped.
pub(crate) struct Responder {
    pub(crate) tcp: SocketAddr,
    pub(crate) udp: SocketAddr,
    stop: CancellationToken,
}

impl Drop for Responder {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

pub(crate) async fn responder_on(ip: &str, cfg: ResponderConfig) -> Responder {
    let stop = CancellationToken::new();
    let listener = TcpListener::bind((ip, 0)).await.unwrap();
    let socket = UdpSocket::bind((ip, 0)).await.unwrap();
    let (tcp, udp) = (listener.local_addr().unwrap(), socket.local_addr().unwrap());
    tokio::spawn(serve_tcp(listener, cfg.clone(), stop.clone()));
    tokio::spawn(serve_udp(socket, cfg, stop.clone()));
    Responder { tcp, udp, stop }
}

pub(crate) async fn responder(cfg: ResponderConfig) -> Responder {
    responder_on("127.0.0.1", cfg).await
}

/// Runs `probe` with `cfg` and returns its summary and samples sorted by seq.
pub(crate) async fn run<P: Probe>(probe: P, cfg: RunConfig) -> (Summary, Vec<Sample>) {
    run_probe(probe, cfg, CancellationToken::new()).await
}

pub(crate) fn seqs(samples: &[Sample]) -> Vec<u64> {
    samples.iter().map(|s| s.seq).collect()
}

//! gRPC probes against the Echo responder on loopback.

mod probes;
mod split;
mod tls;

use std::net::SocketAddr;
use std::time::Duration;

use prober_core::RunConfig;
use prober_grpc::{ClientConfig, ClientTls, ServerConfig, serve_grpc};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

/// A responder on a runtime of its own, so stopping it drops every
/// connection at once, as a process that exits would.
pub(crate) struct Server {
    pub(crate) addr: SocketAddr,
    runtime: Option<tokio::runtime::Runtime>,
}

impl Server {
    pub(crate) async fn start(cfg: ServerConfig) -> Self {
        Self::start_on("127.0.0.1:0".parse().unwrap(), cfg).await
    }

    pub(crate) async fn start_on(addr: SocketAddr, cfg: ServerConfig) -> Self {
        let listener = loop {
            match std::net::TcpListener::bind(addr) {
                Ok(l) => break l,
                // The previous server on this port may still be closing.
                Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
            }
        };
        listener.set_nonblocking(true).unwrap();
        let addr = listener.local_addr().unwrap();
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        runtime.spawn(async move {
            let listener = TcpListener::from_std(listener).unwrap();
            serve_grpc(listener, cfg, CancellationToken::new()).await
        });
        Self {
            addr,
            runtime: Some(runtime),
        }
    }

    /// Kills the server and every connection it has.
    pub(crate) async fn stop(mut self) {
        if let Some(rt) = self.runtime.take() {
            rt.shutdown_background();
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(rt) = self.runtime.take() {
            rt.shutdown_background();
        }
    }
}

pub(crate) fn client(addr: SocketAddr, tls: Option<ClientTls>) -> ClientConfig {
    ClientConfig {
        addr,
        host: "localhost".into(),
        tls,
        timeout: Duration::from_millis(500),
        connect_timeout: Duration::from_millis(500),
        size: 64,
        tx_stamps: true,
        receive: prober_core::spin::Receive::Event,
        spare: true,
    }
}

pub(crate) fn config(count: u64, interval: Duration) -> RunConfig {
    RunConfig {
        timeout: Duration::from_millis(500),
        ..prober_core::testutil::config(count, interval)
    }
}

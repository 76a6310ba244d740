//! Shared helpers for the prober benches: a loopback responder.

#![forbid(unsafe_code)]

use std::net::SocketAddr;

use prober_tcp::{ResponderConfig, serve_tcp, serve_udp};
use tokio::net::{TcpListener, UdpSocket};
use tokio::runtime::Runtime;
use tokio_util::sync::CancellationToken;

/// A TCP and UDP responder on loopback ephemeral ports, running on `rt`;
/// stops when dropped.
#[derive(Debug)]
pub struct LoopbackResponder {
    /// The TCP address.
    pub tcp: SocketAddr,
    /// The UDP address.
    pub udp: SocketAddr,
    /// The gRPC address.
    pub grpc: SocketAddr,
    stop: CancellationToken,
}

impl LoopbackResponder {
    /// Starts the responder on `rt`.
    ///
    /// # Panics
    /// If loopback ports cannot be bound.
    pub fn start(rt: &Runtime) -> Self {
        let stop = CancellationToken::new();
        let (tcp, udp, grpc) = rt.block_on(async {
            let l = TcpListener::bind("127.0.0.1:0")
                .await
                .expect("bind loopback tcp");
            let u = UdpSocket::bind("127.0.0.1:0")
                .await
                .expect("bind loopback udp");
            let g = TcpListener::bind("127.0.0.1:0")
                .await
                .expect("bind loopback grpc");
            let addrs = (
                l.local_addr().expect("tcp addr"),
                u.local_addr().expect("udp addr"),
                g.local_addr().expect("grpc addr"),
            );
            tokio::spawn(serve_tcp(l, ResponderConfig::default(), stop.clone()));
            tokio::spawn(serve_udp(u, ResponderConfig::default(), stop.clone()));
            let grpc_cfg = prober_grpc::ServerConfig::default();
            tokio::spawn(prober_grpc::serve_grpc(g, grpc_cfg, stop.clone()));
            addrs
        });
        Self {
            tcp,
            udp,
            grpc,
            stop,
        }
    }
}

impl Drop for LoopbackResponder {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

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
    /// The thread of a responder apart ([`responder_apart`]).
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Drop for Responder {
    fn drop(&mut self) {
        self.stop.cancel();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

pub(crate) async fn responder_on(ip: &str, cfg: ResponderConfig) -> Responder {
    let stop = CancellationToken::new();
    let listener = TcpListener::bind((ip, 0)).await.unwrap();
    let socket = UdpSocket::bind((ip, 0)).await.unwrap();
    let (tcp, udp) = (listener.local_addr().unwrap(), socket.local_addr().unwrap());
    tokio::spawn(serve_tcp(listener, cfg.clone(), stop.clone()));
    tokio::spawn(serve_udp(socket, cfg, stop.clone()));
    Responder {
        tcp,
        udp,
        stop,
        thread: None,
    }
}

/// A responder on a runtime and thread of its own, as one in another
/// process would be: for probes that spin. A spin holds its worker, and a
/// target's probes are polled by one task, which launches late probes back
/// to back without handing the worker back. A responder on the probes'
/// runtime can have its tasks on that worker, and answers only when the
/// spins stop (seen: 24 spins in a row ran their whole 5 ms budget, and
/// both of the responder's connections went on, on the probes' worker,
/// the moment they stopped; in CI, a test with all 30 uncaught failed).
pub(crate) fn responder_apart(cfg: ResponderConfig) -> Responder {
    let stop = CancellationToken::new();
    let until = stop.clone();
    let (tx, rx) = std::sync::mpsc::channel();
    let thread = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let r = responder_on("127.0.0.1", cfg).await;
            tx.send((r.tcp, r.udp)).unwrap();
            until.cancelled().await;
        });
    });
    let (tcp, udp) = rx.recv().expect("the responder's thread binds its sockets");
    Responder {
        tcp,
        udp,
        stop,
        thread: Some(thread),
    }
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

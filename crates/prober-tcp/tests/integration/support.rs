//! Shared helpers: start a responder, run one probe to completion.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use prober_core::runner::{Clock, EVENT_CHANNEL};
use prober_core::{
    Probe, RunConfig, RunMeta, Sample, Sink, Summary, TargetInfo, collect, run_target,
};
use prober_tcp::{ResponderConfig, serve_tcp, serve_udp};
use tokio::net::{TcpListener, UdpSocket};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

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

pub(crate) fn config(count: u64, interval: Duration) -> RunConfig {
    RunConfig {
        interval,
        count: Some(count),
        timeout: Duration::from_millis(300),
        ..RunConfig::default()
    }
}

struct Keep(Arc<std::sync::Mutex<Vec<Sample>>>);

impl Sink for Keep {
    fn record(&mut self, _t: &TargetInfo, s: &Sample) -> std::io::Result<()> {
        self.0.lock().unwrap().push(s.clone());
        Ok(())
    }
    fn finish(&mut self, _s: &[Summary]) -> std::io::Result<()> {
        Ok(())
    }
}

/// Runs `probe` with `cfg` and returns its summary and samples sorted by seq.
pub(crate) async fn run<P: Probe>(probe: P, cfg: RunConfig) -> (Summary, Vec<Sample>) {
    let targets = [TargetInfo::new(0, "t", "p", "a", 64)];
    let (tx, rx) = mpsc::channel(EVENT_CHANNEL);
    let task = tokio::spawn(run_target(
        Arc::new(probe),
        0,
        cfg.clone(),
        Duration::ZERO,
        tx,
        CancellationToken::new(),
    ));
    let kept = Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut sinks: Vec<Box<dyn Sink>> = vec![Box::new(Keep(Arc::clone(&kept)))];
    let meta = RunMeta::new("test", &cfg);
    let (mut summaries, res) = collect(rx, &targets, &meta, Clock::now(), &mut sinks).await;
    res.unwrap();
    task.await.unwrap();
    let mut samples = kept.lock().unwrap().clone();
    samples.sort_by_key(|s| s.seq);
    let summary = summaries.remove(0);
    assert_eq!(
        summary.sent,
        summary.ok + summary.timeout + summary.error,
        "accounting identity"
    );
    (summary, samples)
}

pub(crate) fn seqs(samples: &[Sample]) -> Vec<u64> {
    samples.iter().map(|s| s.seq).collect()
}

//! The responder's send part (t3k − t3): carried by its next reply on the
//! connection when probes come often, asked for when they do not, and
//! with it every part of the round trip known and adding up to the RTT.

use std::time::Duration;

use prober_core::testutil::run_probe;
use prober_core::{Outcome, Parts, Probe, Sample};
use prober_grpc::{GrpcProbe, GrpcStreamProbe, ServerConfig};
use tokio_util::sync::CancellationToken;

use crate::{Server, client, config};

/// Each answered probe's parts.
pub(crate) fn parts(samples: &[Sample]) -> Vec<Parts> {
    samples
        .iter()
        .filter_map(|s| match &s.outcome {
            Outcome::Ok(r) => Some(r.stamps.parts(r.rtt())),
            _ => None,
        })
        .collect()
}

/// Most of `n` probes have all six parts, adding up to the RTT, with a
/// send part that is never 0 (a write is stamped after the handler returns
/// it). The others are what a busy machine makes of them: a send part
/// that came too late for its wait (the turnaround then stands for the
/// responder's parts). On a quiet machine all but the odd one have six
/// parts; beside two busy loops, one run in five had 10-20 % without.
pub(crate) fn assert_complete(what: &str, n: usize, parts: &[Parts]) {
    let full: Vec<&Parts> = parts
        .iter()
        .filter(|p| p.list().iter().all(Option::is_some))
        .collect();
    for p in &full {
        let sum: u64 = p.list().iter().map(|x| x.unwrap()).sum();
        assert_eq!(Some(sum), p.rtt, "{what}: {p:?}");
        assert!(p.responder_send.unwrap() > 0, "{what}: {p:?}");
        assert_eq!(p.responder_turnaround, None, "{what}: {p:?}");
    }
    let late: Vec<&Parts> = parts
        .iter()
        .filter(|p| p.responder_send.is_none() && p.responder_turnaround.is_some())
        .collect();
    assert!(
        full.len() * 10 >= n * 7 && (full.len() + late.len()) * 10 >= n * 9,
        "{what}: {} of {n} with all six parts, {} with the turnaround for a late send part",
        full.len(),
        late.len()
    );
}

async fn split_of(probe: impl Probe + 'static, n: u64, interval: Duration) -> Vec<Parts> {
    let (s, samples) = run_probe(probe, config(n, interval), CancellationToken::new()).await;
    assert_eq!(s.ok, n, "{s:?}");
    parts(&samples)
}

/// Back to back, each reply carries the one before's send part; the last
/// probe's is asked for. At 10 ms, each is asked for right after its
/// reply.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unary_and_stream_probes_get_the_responder_send_part() {
    let srv = Server::start(ServerConfig::default()).await;
    for (interval, n) in [(Duration::ZERO, 200), (Duration::from_millis(10), 40)] {
        let what = format!("unary every {interval:?}");
        let p = split_of(GrpcProbe::new(client(srv.addr, None)), n, interval).await;
        assert_complete(&what, n as usize, &p);
        let what = format!("stream every {interval:?}");
        let p = split_of(GrpcStreamProbe::new(client(srv.addr, None)), n, interval).await;
        assert_complete(&what, n as usize, &p);
    }
}

/// A client that does not ask (kernel stamps off, or an older prober)
/// gets the replies it always got: no transmit stamps on the responder's
/// side, and no send part.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_does_not_ask_gets_no_send_part() {
    let srv = Server::start(ServerConfig::default()).await;
    let mut cfg = client(srv.addr, None);
    cfg.tx_stamps = false;
    let p = split_of(GrpcProbe::new(cfg), 20, Duration::ZERO).await;
    assert!(p.iter().all(|p| p.responder_send.is_none()), "{p:?}");
    assert!(p.iter().all(|p| p.client_send.is_none()), "{p:?}");
}

/// Calls that overlap on the connection (a 4 ms hold at a 1 ms interval)
/// cannot tell their stamps apart: they get the responder's dwell, and no
/// send part or other responder stamp that may be another call's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overlapping_calls_get_no_responder_stamps() {
    let srv = Server::start(ServerConfig {
        delay: Duration::from_millis(4),
        ..ServerConfig::default()
    })
    .await;
    let p = split_of(
        GrpcProbe::new(client(srv.addr, None)),
        40,
        Duration::from_millis(1),
    )
    .await;
    for p in &p {
        assert!(p.responder_dwell.is_some(), "{p:?}");
        if p.responder_send.is_some() || p.responder_wake.is_some() {
            assert!(p.client_send.is_some(), "a window of its own: {p:?}");
        }
    }
    let overlapped = p.iter().filter(|p| p.responder_wake.is_none()).count();
    assert!(overlapped >= 30, "{overlapped} of 40 overlapped");
}

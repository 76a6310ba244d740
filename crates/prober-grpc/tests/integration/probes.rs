//! Unary, stream and health probes; deadlines; a responder restart.

use std::time::Duration;

use prober_core::testutil::run_probe;
use prober_core::{Outcome, Probe};
use prober_grpc::{GrpcHealthProbe, GrpcProbe, GrpcStreamProbe, ServerConfig};
use tokio_util::sync::CancellationToken;

use crate::{Server, client, config};

const MS: Duration = Duration::from_millis(1);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unary_answers_every_probe_with_dwell() {
    let srv = Server::start(ServerConfig::default()).await;
    let (s, samples) = run_probe(
        GrpcProbe::new(client(srv.addr, None)),
        config(40, 2 * MS),
        CancellationToken::new(),
    )
    .await;
    assert_eq!((s.sent, s.ok), (40, 40), "{s:?}");
    assert_eq!(
        samples.iter().map(|x| x.seq).collect::<Vec<_>>(),
        (0..40).collect::<Vec<_>>()
    );
    let dwell = s.server_dwell.expect("echo replies carry dwell");
    assert_eq!(dwell.count, 40);
    assert!(
        dwell.p50 < s.rtt.unwrap().p50,
        "dwell {} < rtt {}",
        dwell.p50,
        s.rtt.unwrap().p50
    );
    assert!(samples.iter().all(|x| x.bytes == 64));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stream_answers_every_probe() {
    let srv = Server::start(ServerConfig::default()).await;
    let (s, samples) = run_probe(
        GrpcStreamProbe::new(client(srv.addr, None)),
        config(40, 2 * MS),
        CancellationToken::new(),
    )
    .await;
    assert_eq!((s.sent, s.ok, s.reconnects), (40, 40, 0), "{s:?}");
    assert_eq!(
        samples.iter().map(|x| x.seq).collect::<Vec<_>>(),
        (0..40).collect::<Vec<_>>()
    );
    assert!(s.server_dwell.is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn closed_loop_unary_and_stream() {
    let srv = Server::start(ServerConfig::default()).await;
    let (s, _) = run_probe(
        GrpcProbe::new(client(srv.addr, None)),
        config(200, Duration::ZERO),
        CancellationToken::new(),
    )
    .await;
    assert_eq!(s.ok, 200);
    let (s, _) = run_probe(
        GrpcStreamProbe::new(client(srv.addr, None)),
        config(200, Duration::ZERO),
        CancellationToken::new(),
    )
    .await;
    assert_eq!(s.ok, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_check_serving_and_unknown_service() {
    let srv = Server::start(ServerConfig::default()).await;
    let (s, _) = run_probe(
        GrpcHealthProbe::new(client(srv.addr, None), ""),
        config(5, 2 * MS),
        CancellationToken::new(),
    )
    .await;
    assert_eq!(s.ok, 5);
    let (s, _) = run_probe(
        GrpcHealthProbe::new(client(srv.addr, None), "prober.v1.Echo"),
        config(5, 2 * MS),
        CancellationToken::new(),
    )
    .await;
    assert_eq!(s.ok, 5);
    let (s, samples) = run_probe(
        GrpcHealthProbe::new(client(srv.addr, None), "no.such.Service"),
        config(3, 2 * MS),
        CancellationToken::new(),
    )
    .await;
    assert_eq!(s.error, 3);
    match &samples[0].outcome {
        Outcome::Error(e) => assert!(e.message().contains("NotFound"), "{e}"),
        other => panic!("{other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deadline_exceeded_is_a_timeout() {
    let srv = Server::start(ServerConfig {
        delay: Duration::from_millis(300),
        ..Default::default()
    })
    .await;
    let mut c = client(srv.addr, None);
    c.timeout = Duration::from_millis(60);
    let mut cfg = config(4, 10 * MS);
    cfg.timeout = Duration::from_millis(100);
    // The server sees grpc-timeout 60 ms and gives up first, so the probes
    // end as DEADLINE_EXCEEDED, which counts as a timeout, not an error.
    let (s, _) = run_probe(
        GrpcProbe::new(c.clone()),
        cfg.clone(),
        CancellationToken::new(),
    )
    .await;
    assert_eq!((s.timeout, s.error), (4, 0), "{s:?}");
    let (s, _) = run_probe(GrpcStreamProbe::new(c), cfg, CancellationToken::new()).await;
    assert_eq!(s.timeout, 4, "{s:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_connection_is_an_error_not_a_panic() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let (s, samples) = run_probe(
        GrpcProbe::new(client(port, None)),
        config(3, 5 * MS),
        CancellationToken::new(),
    )
    .await;
    assert_eq!(s.error, 3);
    match &samples[0].outcome {
        Outcome::Error(e) => assert!(
            e.message().contains("refused") || e.message().contains("next attempt"),
            "{e}"
        ),
        other => panic!("{other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn survives_a_responder_restart() {
    for stream in [false, true] {
        let srv = Server::start(ServerConfig::default()).await;
        let addr = srv.addr;
        let stop = CancellationToken::new();
        let mut cfg = config(150, 10 * MS);
        cfg.timeout = Duration::from_millis(200);
        let run = tokio::spawn(async move {
            if stream {
                run_probe(GrpcStreamProbe::new(client(addr, None)), cfg, stop).await
            } else {
                run_probe(GrpcProbe::new(client(addr, None)), cfg, stop).await
            }
        });
        tokio::time::sleep(Duration::from_millis(400)).await;
        srv.stop().await;
        tokio::time::sleep(Duration::from_millis(300)).await;
        let again = Server::start_on(addr, ServerConfig::default()).await;
        let (s, samples) = run.await.unwrap();
        drop(again);
        assert_eq!(s.sent, 150, "stream={stream} {s:?}");
        assert!(
            s.error + s.timeout >= 10,
            "stream={stream}: downtime shows: {s:?}"
        );
        assert!(s.ok >= 60, "stream={stream}: recovered: {s:?}");
        assert!(s.reconnects >= 1, "stream={stream} {s:?}");
        assert!(
            samples
                .last()
                .is_some_and(|x| matches!(x.outcome, Outcome::Ok(_))),
            "stream={stream}: ends healthy"
        );
    }
}

#[tokio::test]
async fn probe_reports_reconnects_through_anomalies() {
    let srv = Server::start(ServerConfig::default()).await;
    let p = GrpcProbe::new(client(srv.addr, None));
    assert!(p.probe(0).await.is_ok());
    assert_eq!(p.anomalies().reconnects, 0);
}

/// `--receive adaptive`: the connection's reads spin while a probe waits,
/// the spins are counted, and they end with the response. A spin that ran
/// on after it (its look at the socket blind to the response) would miss
/// the response every time, and add its whole grant (the pool grants at
/// most 5 ms at once) to every RTT.
#[tokio::test(flavor = "current_thread")]
async fn adaptive_receive_spins_while_a_call_waits_and_no_longer() {
    use prober_core::spin::{Receive, SpinPool};
    let srv = Server::start(ServerConfig::default()).await;
    let budget = Duration::from_millis(10);
    let mut cfg = client(srv.addr, None);
    // A whole CPU's worth of pool, so few spins are cut short for lack of
    // it (on a loaded machine some still are: spins of 3 ms every 2 ms).
    cfg.receive = Receive::Adaptive(SpinPool::new(budget, 1000));
    let p = GrpcProbe::new(cfg);
    let (s, samples) = run_probe(p, config(40, 2 * MS), CancellationToken::new()).await;
    assert_eq!((s.sent, s.ok), (40, 40), "{s:?}");
    let spin = s.spin.expect("adaptive receive reports its spins");
    assert!(
        (1..=40).contains(&spin.probes),
        "a probe counts once: {spin:?}"
    );
    // Most spins see their response (a blind one sees none).
    assert!(spin.caught <= spin.probes, "{spin:?}");
    assert!(spin.caught * 2 >= spin.probes, "{spin:?}");
    assert!(spin.ns <= spin.probes * 10_000_000, "{spin:?}");
    // No bound on the RTTs themselves: beside a busy loop they ran 0.7-16
    // ms with the median at 6 ms (the scheduler's slices), where a blind
    // spin would add at most the pool's 5 ms. The spins' own count above
    // tells a blind spin (it never sees its response) from a slow machine.
    for x in &samples {
        assert!(matches!(x.outcome, Outcome::Ok(_)), "{x:?}");
    }
    // The default waits in epoll and reports no spin at all.
    let (s, _) = run_probe(
        GrpcProbe::new(client(srv.addr, None)),
        config(5, 2 * MS),
        CancellationToken::new(),
    )
    .await;
    assert_eq!(s.spin, None, "{s:?}");
}

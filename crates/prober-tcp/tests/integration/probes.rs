//! Each probe against the responder, with and without impairments.

use std::time::Duration;

use prober_core::Outcome;
use prober_tcp::{ResponderConfig, TcpConnectProbe, TcpCrrProbe, TcpProbe, UdpProbe};
use tokio::net::TcpListener;

use crate::support::{config, responder, responder_on, run, seqs};

const MS: Duration = Duration::from_millis(1);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tcp_rr_answers_every_probe() {
    let r = responder(ResponderConfig::default()).await;
    let (s, samples) = run(TcpProbe::new(r.tcp, 100), config(50, MS)).await;
    assert_eq!((s.sent, s.ok), (50, 50));
    assert_eq!(seqs(&samples), (0..50).collect::<Vec<_>>());
    assert_eq!((s.late, s.duplicate, s.reconnects), (0, 0, 0));
    assert!(s.server_dwell.is_some());
    assert!(samples.iter().all(|x| x.bytes == 100));
    // Each read is stamped by the kernel: a receive wake-up per reply,
    // unless the next reply was already queued behind it when it was read
    // (on a loaded machine): TCP may have merged the two, so that stamp is
    // dropped.
    assert!(s.rx_wake.is_some_and(|w| w.count >= 40), "{:?}", s.rx_wake);
    for x in &samples {
        let Outcome::Ok(r) = &x.outcome else {
            panic!("seq {} not ok", x.seq)
        };
        assert!(r.rx_wake.is_none_or(|w| w <= r.rtt()), "seq {}", x.seq);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tcp_rr_closed_loop() {
    let r = responder(ResponderConfig::default()).await;
    let (s, samples) = run(TcpProbe::new(r.tcp, 64), config(200, Duration::ZERO)).await;
    assert_eq!((s.sent, s.ok), (200, 200));
    assert_eq!(seqs(&samples), (0..200).collect::<Vec<_>>());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tcp_rr_pipelines_when_the_interval_is_short() {
    // Every reply is held 5 ms, the interval is 1 ms: requests pile up on
    // the connection, and the responder answers them in order.
    let cfg = ResponderConfig {
        delay_every: Some(1),
        delay: 5 * MS,
        ..Default::default()
    };
    let r = responder(cfg).await;
    let mut run_cfg = config(20, MS);
    run_cfg.timeout = Duration::from_secs(2);
    let (s, _) = run(TcpProbe::new(r.tcp, 64), run_cfg).await;
    assert_eq!(s.ok, 20);
    // The sends kept to the schedule although replies took 5 ms or more each.
    assert!(
        s.rtt.unwrap().min >= 5_000_000,
        "rtt min {}",
        s.rtt.unwrap().min
    );
    assert!(
        s.send_lag.unwrap().p50 < 5_000_000,
        "send lag p50 {}",
        s.send_lag.unwrap().p50
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tcp_rr_drops_every_kth_exactly() {
    let r = responder(ResponderConfig {
        drop_every: Some(5),
        ..Default::default()
    })
    .await;
    let mut cfg = config(50, 2 * MS);
    cfg.timeout = 100 * MS;
    let (s, samples) = run(TcpProbe::new(r.tcp, 64), cfg).await;
    assert_eq!((s.ok, s.timeout, s.error), (40, 10, 0));
    let timed_out: Vec<u64> = samples
        .iter()
        .filter(|x| x.outcome == Outcome::Timeout)
        .map(|x| x.seq)
        .collect();
    assert_eq!(timed_out, [4, 9, 14, 19, 24, 29, 34, 39, 44, 49]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn udp_answers_every_probe() {
    let r = responder(ResponderConfig::default()).await;
    let probe = UdpProbe::connect(r.udp, 1200).await.unwrap();
    let (s, samples) = run(probe, config(100, MS)).await;
    assert_eq!((s.sent, s.ok), (100, 100));
    assert_eq!(seqs(&samples), (0..100).collect::<Vec<_>>());
    // The kernel stamps every reply: the wake-up is part of each RTT.
    for x in &samples {
        let Outcome::Ok(r) = &x.outcome else {
            panic!("seq {} not ok", x.seq)
        };
        let wake = r.rx_wake.expect("a kernel receive timestamp");
        assert!(
            wake <= r.rtt(),
            "seq {}: wake {wake:?} > rtt {:?}",
            x.seq,
            r.rtt()
        );
    }
    assert_eq!(s.rx_wake.map(|w| w.count), Some(100));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn udp_drops_every_kth_exactly() {
    let r = responder(ResponderConfig {
        drop_every: Some(4),
        ..Default::default()
    })
    .await;
    let probe = UdpProbe::connect(r.udp, 64).await.unwrap();
    let mut cfg = config(40, 2 * MS);
    cfg.timeout = 100 * MS;
    let (s, _) = run(probe, cfg).await;
    assert_eq!((s.ok, s.timeout, s.error), (30, 10, 0));
    assert!((s.loss_pct.unwrap() - 25.0).abs() < 1e-9);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn udp_counts_duplicates_and_never_as_ok() {
    let r = responder(ResponderConfig {
        duplicate_every: Some(2),
        ..Default::default()
    })
    .await;
    let probe = UdpProbe::connect(r.udp, 64).await.unwrap();
    let (s, _) = run(probe, config(20, 5 * MS)).await;
    assert_eq!((s.sent, s.ok), (20, 20));
    assert_eq!(s.duplicate, 10);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn udp_counts_late_and_reordered_replies() {
    // Every 3rd reply is held 130 ms: 30 ms past the 100 ms timeout, and
    // after the replies to later requests.
    let cfg = ResponderConfig {
        delay_every: Some(3),
        delay: 130 * MS,
        ..Default::default()
    };
    let r = responder(cfg).await;
    let probe = UdpProbe::connect(r.udp, 64).await.unwrap();
    let mut run_cfg = config(30, 10 * MS);
    run_cfg.timeout = 100 * MS;
    let (s, _) = run(probe, run_cfg).await;
    assert_eq!((s.ok, s.timeout), (20, 10));
    // Delayed replies to seq 2, 5, ..., 29 come 130 ms after their
    // request; the run ends when seq 29 times out (about 390 ms), so the one
    // to 29 comes after it, and the one to 26 nothing before it (under load,
    // after it too). The ones to 2..=20 are late with 60 ms to spare (with
    // a 150 ms hold they had 40, and a loaded run once counted 6), and each
    // comes 30 ms after its timeout (a stall of the probe longer than that
    // would make it an answer).
    assert!(s.late >= 7 && s.late <= 10, "late {}", s.late);
    assert!(s.reordered >= 7, "reordered {}", s.reordered);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tcp_connect_works_against_a_plain_listener() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    // Accept and drop, like any server would.
    tokio::spawn(async move {
        while let Ok((s, _)) = listener.accept().await {
            drop(s);
        }
    });
    let (s, _) = run(TcpConnectProbe::new(addr), config(30, MS)).await;
    assert_eq!((s.sent, s.ok), (30, 30));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tcp_crr_against_the_responder() {
    let r = responder(ResponderConfig::default()).await;
    let (s, _) = run(TcpCrrProbe::new(r.tcp, 64), config(30, MS)).await;
    assert_eq!((s.sent, s.ok), (30, 30));
    assert!(s.server_dwell.is_some());
}

async fn closed_port() -> std::net::SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    drop(l);
    addr
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_connections_are_errors() {
    let addr = closed_port().await;
    for (name, (s, samples)) in [
        ("tcp", run(TcpProbe::new(addr, 64), config(5, MS)).await),
        (
            "tcp-connect",
            run(TcpConnectProbe::new(addr), config(5, MS)).await,
        ),
        (
            "tcp-crr",
            run(TcpCrrProbe::new(addr, 64), config(5, MS)).await,
        ),
    ] {
        assert_eq!((s.sent, s.error), (5, 5), "{name}");
        match &samples[0].outcome {
            Outcome::Error(e) => {
                assert!(e.message().contains("refused"), "{name}: {e}");
                assert_eq!(e.kind(), prober_core::ErrorKind::Refused, "{name}: {e}");
            }
            other => panic!("{name}: {other:?}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn udp_port_unreachable_is_an_error_or_timeout() {
    let sock = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let addr = sock.local_addr().unwrap();
    drop(sock);
    let probe = UdpProbe::connect(addr, 64).await.unwrap();
    let (s, _) = run(probe, config(5, 20 * MS)).await;
    assert_eq!(s.ok, 0);
    assert!(s.error >= 4, "errors {}", s.error);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tcp_reconnects_after_the_responder_restarts() {
    // The first responder answers twice: the duplicate is counted on the
    // first connection's matcher and must still be counted after it is gone.
    let r = responder(ResponderConfig {
        duplicate_every: Some(1),
        ..ResponderConfig::default()
    })
    .await;
    let addr = r.tcp;
    let probe = std::sync::Arc::new(TcpProbe::new(addr, 64));
    use prober_core::Probe;
    assert!(probe.probe(0).await.is_ok());
    tokio::time::sleep(20 * MS).await;
    assert_eq!(probe.anomalies().duplicate, 1);
    drop(r);
    tokio::time::sleep(20 * MS).await;
    assert!(probe.probe(1).await.is_err());
    // A new responder on the same port.
    let listener = loop {
        match tokio::net::TcpListener::bind(addr).await {
            Ok(l) => break l,
            Err(_) => tokio::time::sleep(10 * MS).await,
        }
    };
    let stop = tokio_util::sync::CancellationToken::new();
    tokio::spawn(prober_tcp::serve_tcp(
        listener,
        ResponderConfig::default(),
        stop.clone(),
    ));
    assert!(probe.probe(2).await.is_ok());
    // Probes on the new connection are not failed by the old one's end, and
    // the counts of both connections add up.
    assert!(probe.probe(3).await.is_ok());
    let a = probe.anomalies();
    assert_eq!((a.reconnects, a.duplicate), (1, 1));
    stop.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ipv6_loopback_when_available() {
    if std::net::UdpSocket::bind("[::1]:0").is_err() {
        prober_core::testutil::skip("::1 is not configured on this host");
        return;
    }
    let r = responder_on("::1", ResponderConfig::default()).await;
    let (s, _) = run(TcpProbe::new(r.tcp, 64), config(10, MS)).await;
    assert_eq!(s.ok, 10);
    let (s, _) = run(UdpProbe::connect(r.udp, 64).await.unwrap(), config(10, MS)).await;
    assert_eq!(s.ok, 10);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn busy_poll_probes_and_responder() {
    let r = responder(ResponderConfig {
        busy_poll: true,
        drop_every: Some(10),
        ..Default::default()
    })
    .await;
    let mut cfg = config(50, MS);
    cfg.timeout = 100 * MS;
    let (s, _) = run(TcpProbe::with_busy_poll(r.tcp, 64, true), cfg.clone()).await;
    assert_eq!((s.ok, s.timeout), (45, 5), "{s:?}");
    let (s, _) = run(UdpProbe::connect_with(r.udp, 64, true).await.unwrap(), cfg).await;
    assert_eq!((s.ok, s.timeout), (45, 5), "{s:?}");
}

/// A responder that holds every reply 300 µs, so replies come after the
/// send returns, while the probe spins (on loopback the send alone can
/// outlast an answer), and adaptive receive with room to spin 20 ms. Apart
/// from the probes' runtime, which their spins hold.
fn delayed_responder() -> (crate::support::Responder, prober_core::spin::Receive) {
    let r = crate::support::responder_apart(ResponderConfig {
        delay_every: Some(1),
        delay: Duration::from_micros(300),
        ..Default::default()
    });
    let pool = prober_core::spin::SpinPool::new(20 * MS, 1000);
    (r, prober_core::spin::Receive::Adaptive(pool))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn adaptive_receive_spins_for_replies_and_gives_up_on_silence() {
    use prober_core::spin::{Receive, SpinPool};
    let (r, receive) = delayed_responder();
    let probe = UdpProbe::connect(r.udp, 64)
        .await
        .unwrap()
        .with_receive(&receive);
    let (s, _) = run(probe, config(30, 2 * MS)).await;
    assert_eq!(s.ok, 30, "{s:?}");
    let spin = s.spin.expect("adaptive receive reports its spins");
    assert_eq!(spin.probes, 30, "{spin:?}");
    assert!(spin.caught > 0 && spin.ns > 0, "{spin:?}");

    // A target that never answers: every probe spins its whole budget
    // (1 ms, the pool has room) and catches nothing, then times out.
    let silent = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let receive = Receive::Adaptive(SpinPool::new(MS, 1000));
    let probe = UdpProbe::connect(silent.local_addr().unwrap(), 64)
        .await
        .unwrap()
        .with_receive(&receive);
    let mut cfg = config(10, 5 * MS);
    cfg.timeout = 20 * MS;
    let (s, _) = run(probe, cfg).await;
    assert_eq!((s.ok, s.timeout), (0, 10), "{s:?}");
    let spin = s.spin.expect("spins are counted for a silent target too");
    assert_eq!((spin.probes, spin.caught), (10, 0), "{spin:?}");
    assert!(
        spin.ns >= 10 * 1_000_000,
        "each probe spun its budget: {spin:?}"
    );

    // Parking (the default) spins never.
    let probe = UdpProbe::connect(r.udp, 64).await.unwrap();
    let (s, _) = run(probe, config(5, MS)).await;
    assert_eq!((s.ok, s.spin), (5, None));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn adaptive_receive_on_tcp_spins_until_the_reply_is_readable() {
    let (r, receive) = delayed_responder();
    // Transmit stamps on, as `prober run` has them.
    let probe = TcpProbe::new(r.tcp, 64)
        .with_stamps(true, Duration::from_secs(1))
        .with_receive(&receive);
    let (s, samples) = run(probe, config(30, 2 * MS)).await;
    assert_eq!(s.ok, 30, "{s:?}");
    assert_eq!(seqs(&samples), (0..30).collect::<Vec<_>>());
    let spin = s.spin.expect("adaptive receive reports its spins");
    assert_eq!(spin.probes, 30, "{spin:?}");
    assert!(spin.caught > 0 && spin.ns > 0, "{spin:?}");
    // Every reply is held 300 µs, so a spin lasts about that long. The
    // request's own transmit stamp on the error queue must not end it:
    // that made every spin 1 µs long and "caught".
    assert!(
        spin.ns / spin.probes >= 150_000,
        "spins end when the reply is there, not before: {spin:?}"
    );
    // Busy-poll already spins: no second spin on top.
    let probe = TcpProbe::with_busy_poll(r.tcp, 64, true).with_receive(&receive);
    let (s, _) = run(probe, config(5, MS)).await;
    assert_eq!((s.ok, s.spin), (5, None));
}

/// `serve --receive adaptive`: a responder that polls for the next
/// request after each answer still answers every probe, closed loop and
/// paced, over TCP and UDP, with the replies' server parts intact.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_adaptive_responder_answers_every_probe() {
    use prober_core::spin::{Receive, SpinPool};
    let r = responder(ResponderConfig {
        receive: Receive::Adaptive(SpinPool::new(Duration::from_micros(200), 1000)),
        ..Default::default()
    })
    .await;
    for interval in [Duration::ZERO, 2 * MS] {
        let (s, samples) = run(TcpProbe::new(r.tcp, 64), config(100, interval)).await;
        assert_eq!((s.sent, s.ok), (100, 100), "tcp at {interval:?}");
        assert_eq!(seqs(&samples), (0..100).collect::<Vec<_>>());
        assert!(s.server_dwell.is_some());
        let probe = UdpProbe::connect(r.udp, 64).await.unwrap();
        let (s, samples) = run(probe, config(100, interval)).await;
        assert_eq!((s.sent, s.ok), (100, 100), "udp at {interval:?}");
        assert_eq!(seqs(&samples), (0..100).collect::<Vec<_>>());
    }
}

//! The responder refuses what it must not answer.

use std::time::Duration;

use prober_tcp::ResponderConfig;
use prober_tcp::wire::{self, HEADER_LEN, MAX_TCP_FRAME};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpStream, UdpSocket};

use crate::support::responder;

async fn udp_reply(to: std::net::SocketAddr, frame: &[u8]) -> Option<Vec<u8>> {
    let sock = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    sock.send_to(frame, to).await.unwrap();
    let mut buf = vec![0u8; 70_000];
    match tokio::time::timeout(Duration::from_millis(100), sock.recv(&mut buf)).await {
        Ok(Ok(n)) => Some(buf[..n].to_vec()),
        _ => None,
    }
}

#[tokio::test]
async fn udp_echoes_requests_only() {
    let r = responder(ResponderConfig::default()).await;
    let mut req = Vec::new();
    wire::encode_request(&mut req, 80, 9, 77);
    let reply = udp_reply(r.udp, &req).await.expect("a request is answered");
    assert_eq!(reply.len(), 80);
    let h = wire::Header::decode(&reply, 80).unwrap();
    assert_eq!((h.kind, h.seq, h.nonce), (wire::Kind::Response, 9, 77));

    assert_eq!(
        udp_reply(r.udp, &reply).await,
        None,
        "a response is never answered"
    );
    let mut bad = req.clone();
    bad[0] = b'Z';
    assert_eq!(udp_reply(r.udp, &bad).await, None, "no magic, no answer");
    assert_eq!(udp_reply(r.udp, &req[..20]).await, None, "short frame");
    let mut lying = req.clone();
    lying[8..12].copy_from_slice(&200u32.to_be_bytes());
    assert_eq!(
        udp_reply(r.udp, &lying).await,
        None,
        "length field disagrees"
    );
}

async fn closes_after(frame: &[u8]) -> bool {
    let r = responder(ResponderConfig::default()).await;
    let mut s = TcpStream::connect(r.tcp).await.unwrap();
    s.write_all(frame).await.unwrap();
    let mut buf = [0u8; 64];
    matches!(
        tokio::time::timeout(Duration::from_secs(2), s.read(&mut buf)).await,
        Ok(Ok(0) | Err(_))
    )
}

#[tokio::test]
async fn tcp_closes_on_bad_frames() {
    let mut resp = Vec::new();
    wire::encode_request(&mut resp, 64, 1, 1);
    wire::make_response(&mut resp, 0);
    assert!(closes_after(&resp).await, "response frame");
    assert!(closes_after(&[b'X'; HEADER_LEN]).await, "no magic");
    let mut huge = Vec::new();
    wire::encode_request(&mut huge, 64, 1, 1);
    huge[8..12].copy_from_slice(&(MAX_TCP_FRAME as u32 + 1).to_be_bytes());
    assert!(closes_after(&huge[..HEADER_LEN]).await, "oversized frame");
}

/// Reads one frame of `len` bytes, or `None` if nothing comes within 5 s
/// (a frame that must come may be late on a loaded machine).
async fn frame(s: &mut TcpStream, len: usize) -> Option<Vec<u8>> {
    frame_within(s, len, Duration::from_secs(5)).await
}

/// [`frame`] waiting `wait`: 50 ms where nothing must come.
async fn frame_within(s: &mut TcpStream, len: usize, wait: Duration) -> Option<Vec<u8>> {
    let mut buf = vec![0u8; len];
    match tokio::time::timeout(wait, s.read_exact(&mut buf)).await {
        Ok(Ok(_)) => Some(buf),
        _ => None,
    }
}

/// How long a check that nothing comes waits.
const NOTHING: Duration = Duration::from_millis(50);

/// A follow-up frame comes unasked to a client that asked for follow-ups
/// the first way (no ask), and only after the ask to one that said it
/// will ask, both on one connection.
#[tokio::test]
async fn tcp_follow_ups_come_unasked_or_on_ask_as_the_request_says() {
    let r = responder(ResponderConfig::default()).await;
    let mut s = TcpStream::connect(r.tcp).await.unwrap();
    s.set_nodelay(true).unwrap();
    // Unasked (clients before the ask, and the follow-up's first form).
    let mut req = Vec::new();
    wire::encode_request(&mut req, 64, 1, 5);
    wire::want_follow_up(&mut req);
    s.write_all(&req).await.unwrap();
    let resp = frame(&mut s, 64).await.expect("the response");
    assert!(wire::follow_up_promised(&resp) && !wire::waits_for_ask(&resp));
    let f = frame(&mut s, wire::FOLLOW_UP_LEN)
        .await
        .expect("the follow-up, unasked");
    let h = wire::Header::decode(&f, MAX_TCP_FRAME).unwrap();
    assert_eq!((h.kind, h.seq, h.nonce), (wire::Kind::FollowUp, 1, 5));
    assert!(wire::follow_up_send(&f).is_some(), "loopback stamps sends");
    // On ask: nothing until the ask.
    wire::encode_request(&mut req, 64, 2, 5);
    wire::want_follow_up_on_ask(&mut req);
    s.write_all(&req).await.unwrap();
    let resp = frame(&mut s, 64).await.expect("the response");
    assert!(wire::waits_for_ask(&resp));
    assert_eq!(
        frame_within(&mut s, 1, NOTHING).await,
        None,
        "no follow-up before the ask"
    );
    let mut ask = Vec::new();
    wire::encode_ask(&mut ask, 2, 5);
    s.write_all(&ask).await.unwrap();
    let f = frame(&mut s, wire::FOLLOW_UP_LEN)
        .await
        .expect("the follow-up, asked");
    let h = wire::Header::decode(&f, MAX_TCP_FRAME).unwrap();
    assert_eq!((h.kind, h.seq), (wire::Kind::FollowUp, 2));
    // An ask for nothing pending is ignored, and the connection goes on.
    wire::encode_ask(&mut ask, 99, 5);
    s.write_all(&ask).await.unwrap();
    wire::encode_request(&mut req, 64, 3, 5);
    s.write_all(&req).await.unwrap();
    let resp = frame(&mut s, 64).await.expect("still answered");
    assert_eq!(wire::Header::decode(&resp, MAX_TCP_FRAME).unwrap().seq, 3);
}

/// Interleaved: a response's transmit stamp rides in the client's next
/// response, with no frame of its own; the last one comes on ask.
#[tokio::test]
async fn tcp_interleaved_stamps_ride_in_the_next_response_or_come_on_ask() {
    let r = responder(ResponderConfig::default()).await;
    let mut s = TcpStream::connect(r.tcp).await.unwrap();
    s.set_nodelay(true).unwrap();
    let mut req = Vec::new();
    for seq in 1..=3u64 {
        wire::encode_request(&mut req, 64, seq, 5);
        wire::want_interleaved(&mut req);
        s.write_all(&req).await.unwrap();
        let resp = frame(&mut s, 64).await.expect("the response");
        assert!(wire::interleaved(&resp), "seq {seq}: interleaved");
        assert!(!wire::waits_for_ask(&resp));
        match seq {
            1 => assert_eq!(wire::carried(&resp), None, "nothing before the first"),
            _ => {
                let (prev, send) = wire::carried(&resp).expect("the previous one's stamp");
                assert_eq!(prev, seq - 1);
                assert!(send.is_some(), "loopback stamps sends");
            }
        }
        assert_eq!(
            frame_within(&mut s, 1, NOTHING).await,
            None,
            "no frame of its own"
        );
    }
    // The last one, asked for.
    let mut ask = Vec::new();
    wire::encode_ask(&mut ask, 3, 5);
    s.write_all(&ask).await.unwrap();
    let f = frame(&mut s, wire::FOLLOW_UP_LEN)
        .await
        .expect("the follow-up");
    let h = wire::Header::decode(&f, MAX_TCP_FRAME).unwrap();
    assert_eq!((h.kind, h.seq), (wire::Kind::FollowUp, 3));
    // Asked for, it is carried no more.
    wire::encode_request(&mut req, 64, 4, 5);
    wire::want_interleaved(&mut req);
    s.write_all(&req).await.unwrap();
    let resp = frame(&mut s, 64).await.expect("the response");
    assert_eq!(wire::carried(&resp), None);
    // A frame too short for the block asks the earlier way: on ask.
    wire::encode_request(&mut req, 48, 5, 5);
    wire::want_interleaved(&mut req);
    s.write_all(&req).await.unwrap();
    let resp = frame(&mut s, 48).await.expect("the response");
    assert!(!wire::interleaved(&resp) && wire::waits_for_ask(&resp));
}

#[tokio::test]
async fn udp_interleaved_stamps_ride_in_the_next_response_or_come_on_ask() {
    let r = responder(ResponderConfig::default()).await;
    let sock = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    sock.connect(r.udp).await.unwrap();
    let mut buf = vec![0u8; 2048];
    // A datagram that must come may be late on a loaded machine: 5 s; 50 ms
    // where nothing must come.
    let mut next = async |sock: &UdpSocket, wait: Duration| -> Option<Vec<u8>> {
        match tokio::time::timeout(wait, sock.recv(&mut buf)).await {
            Ok(Ok(n)) => Some(buf[..n].to_vec()),
            _ => None,
        }
    };
    let must = Duration::from_secs(5);
    let mut req = Vec::new();
    for seq in 1..=3u64 {
        wire::encode_request(&mut req, 64, seq, 6);
        wire::want_interleaved(&mut req);
        sock.send(&req).await.unwrap();
        let resp = next(&sock, must).await.expect("the response");
        assert_eq!(resp.len(), 64, "never more bytes than the request");
        assert!(wire::interleaved(&resp), "seq {seq}: interleaved");
        if seq > 1 {
            let (prev, send) = wire::carried(&resp).expect("the previous one's stamp");
            assert_eq!(prev, seq - 1);
            assert!(send.is_some(), "loopback stamps sends");
        }
        assert_eq!(next(&sock, NOTHING).await, None, "no datagram of its own");
    }
    // An ask for one carried already gets nothing; for the last, its
    // follow-up.
    let mut ask = Vec::new();
    wire::encode_ask(&mut ask, 2, 6);
    sock.send(&ask).await.unwrap();
    assert_eq!(next(&sock, NOTHING).await, None, "carried already");
    wire::encode_ask(&mut ask, 3, 6);
    sock.send(&ask).await.unwrap();
    let f = next(&sock, must).await.expect("the follow-up");
    let h = wire::Header::decode(&f, wire::MAX_UDP_FRAME).unwrap();
    assert_eq!((h.kind, h.seq, h.nonce), (wire::Kind::FollowUp, 3, 6));
    assert!(wire::follow_up_send(&f).is_some());
}

/// The sockperf listener answers a client's pong request with its bytes and
/// the client flag cleared, and nothing else (docs/sockperf.md).
#[tokio::test]
async fn sockperf_answers_pong_requests_only() {
    use prober_tcp::sockperf::{self, FLAG_CLIENT, FLAG_PONG_REQUEST, FLAG_WARMUP};
    let stop = tokio_util::sync::CancellationToken::new();
    let socket = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let addr = socket.local_addr().unwrap();
    let stats = std::sync::Arc::new(sockperf::SockperfStats::default());
    let task = tokio::spawn(sockperf::serve_sockperf_udp(
        socket,
        ResponderConfig::default(),
        std::sync::Arc::clone(&stats),
        stop.clone(),
    ));
    let message = |seq: u64, flags: u16| {
        let mut m = vec![7u8; 64];
        m[..8].copy_from_slice(&seq.to_be_bytes());
        m[8..10].copy_from_slice(&flags.to_be_bytes());
        m[10..14].copy_from_slice(&64u32.to_be_bytes());
        m
    };
    let ping = message(42, FLAG_CLIENT | FLAG_PONG_REQUEST);
    let pong = udp_reply(addr, &ping).await.expect("answered");
    assert_eq!(pong.len(), 64);
    assert_eq!(sockperf::header(&pong), Some((FLAG_PONG_REQUEST, 64)));
    assert_eq!(pong[..8], ping[..8]);
    assert_eq!(pong[14..], ping[14..]);
    for flags in [
        FLAG_CLIENT,
        FLAG_PONG_REQUEST,
        FLAG_CLIENT | FLAG_PONG_REQUEST | FLAG_WARMUP,
    ] {
        assert_eq!(
            udp_reply(addr, &message(1, flags)).await,
            None,
            "flags {flags}"
        );
    }
    // Received: the ping and the client's message without a pong request.
    assert_eq!(stats.received.load(std::sync::atomic::Ordering::Relaxed), 2);
    assert_eq!(stats.answered.load(std::sync::atomic::Ordering::Relaxed), 1);
    stop.cancel();
    tokio::time::timeout(Duration::from_secs(2), task)
        .await
        .expect("the listener stops within its read timeout")
        .unwrap()
        .unwrap();

    // Dropped without `stop` (another listener failed to start): its
    // thread ends too, and lets the port go.
    let socket = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let addr = socket.local_addr().unwrap();
    let task = tokio::spawn(sockperf::serve_sockperf_udp(
        socket,
        ResponderConfig::default(),
        std::sync::Arc::new(sockperf::SockperfStats::default()),
        tokio_util::sync::CancellationToken::new(),
    ));
    tokio::time::sleep(Duration::from_millis(50)).await;
    task.abort();
    let mut freed = false;
    for _ in 0..40 {
        if std::net::UdpSocket::bind(addr).is_ok() {
            freed = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert!(
        freed,
        "the thread of an aborted listener still holds {addr}"
    );
}

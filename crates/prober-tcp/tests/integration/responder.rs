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

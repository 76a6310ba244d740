//! STAMP packets byte for byte against the RFC figures, the reflector's
//! TLV handling, parser robustness, and a sender against a live reflector.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use prober_core::Probe;
use prober_stamp::packet::{AUTH_LEN, Key, Mode, OPEN_LEN, ReflectorPacket, Reject, SenderPacket};
use prober_stamp::time::{ErrorEstimate, Format};
use prober_stamp::tlv::{self, Fill, kind};
use prober_stamp::{ReflectorConfig, ReflectorStats, SenderOptions, StampProbe, TlvChoice};
use tokio::net::UdpSocket;
use tokio_util::sync::CancellationToken;

fn sender() -> SenderPacket {
    SenderPacket {
        seq: 0x0102_0304,
        timestamp: 0x1112_1314_1516_1718,
        error: ErrorEstimate(0x8001),
        ssid: 0xabcd,
    }
}

/// RFC 8762 §4.2.1 with the SSID of RFC 8972 §3: Seq, Timestamp, Error
/// Estimate, SSID, 28 octets MBZ.
#[test]
fn unauthenticated_sender_packet_is_the_figure() {
    let mut buf = vec![0xee; OPEN_LEN];
    sender().write(&mut buf, Mode::Open, None);
    let mut want = vec![
        1, 2, 3, 4, 0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x18, 0x80, 0x01, 0xab, 0xcd,
    ];
    want.resize(OPEN_LEN, 0);
    assert_eq!(buf, want);
    assert_eq!(SenderPacket::read(&buf, Mode::Open, None), Ok(sender()));
}

/// RFC 8762 §4.2.2: Seq, 12 MBZ, Timestamp, Error Estimate, SSID, 68 MBZ,
/// HMAC over the first 96 octets.
#[test]
fn authenticated_sender_packet_is_the_figure() {
    let key = Key::new(b"key");
    let mut buf = vec![0xee; AUTH_LEN];
    sender().write(&mut buf, Mode::Authenticated, Some(&key));
    let mut want = vec![1, 2, 3, 4];
    want.resize(16, 0);
    want.extend([
        0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x18, 0x80, 0x01, 0xab, 0xcd,
    ]);
    want.resize(96, 0);
    assert_eq!(&buf[..96], &want[..]);
    assert_eq!(&buf[96..], &key.tag(&want)[..]);
    assert_eq!(
        SenderPacket::read(&buf, Mode::Authenticated, Some(&key)),
        Ok(sender())
    );
    buf[20] ^= 1;
    assert_eq!(
        SenderPacket::read(&buf, Mode::Authenticated, Some(&key)),
        Err(Reject::Hmac)
    );
    assert_eq!(
        SenderPacket::read(&buf[..100], Mode::Authenticated, Some(&key)),
        Err(Reject::Short)
    );
}

fn reflector() -> ReflectorPacket {
    ReflectorPacket {
        seq: 0x0a0b_0c0d,
        timestamp: 0x3132_3334_3536_3738,
        error: ErrorEstimate(0x0001),
        ssid: 0xabcd,
        receive: 0x2122_2324_2526_2728,
        sender_seq: 0x0102_0304,
        sender_timestamp: 0x1112_1314_1516_1718,
        sender_error: ErrorEstimate(0x8001),
        sender_ttl: 254,
    }
}

/// RFC 8762 §4.3.1: Seq, Timestamp, Error Estimate, SSID, Receive
/// Timestamp, Session-Sender Seq, Timestamp, Error Estimate, 2 MBZ, TTL, 3
/// MBZ.
#[test]
fn unauthenticated_reflector_packet_is_the_figure() {
    let mut buf = vec![0xee; OPEN_LEN];
    reflector().write(&mut buf, Mode::Open, None);
    let want: Vec<u8> = [
        &[0x0a, 0x0b, 0x0c, 0x0d][..],
        &[0x31, 0x32, 0x33, 0x34, 0x35, 0x36, 0x37, 0x38],
        &[0x00, 0x01, 0xab, 0xcd],
        &[0x21, 0x22, 0x23, 0x24, 0x25, 0x26, 0x27, 0x28],
        &[1, 2, 3, 4],
        &[0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x18],
        &[0x80, 0x01, 0, 0],
        &[254, 0, 0, 0],
    ]
    .concat();
    assert_eq!(buf, want);
    assert_eq!(
        ReflectorPacket::read(&buf, Mode::Open, None),
        Ok(reflector())
    );
}

/// RFC 8762 §4.3.2: the same fields spaced by MBZ octets, HMAC at 96.
#[test]
fn authenticated_reflector_packet_is_the_figure() {
    let key = Key::new(b"key");
    let mut buf = vec![0xee; AUTH_LEN];
    reflector().write(&mut buf, Mode::Authenticated, Some(&key));
    let mut want = vec![0u8; 96];
    want[..4].copy_from_slice(&[0x0a, 0x0b, 0x0c, 0x0d]);
    want[16..24].copy_from_slice(&[0x31, 0x32, 0x33, 0x34, 0x35, 0x36, 0x37, 0x38]);
    want[24..28].copy_from_slice(&[0x00, 0x01, 0xab, 0xcd]);
    want[32..40].copy_from_slice(&[0x21, 0x22, 0x23, 0x24, 0x25, 0x26, 0x27, 0x28]);
    want[48..52].copy_from_slice(&[1, 2, 3, 4]);
    want[64..72].copy_from_slice(&[0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x18]);
    want[72..74].copy_from_slice(&[0x80, 0x01]);
    want[80] = 254;
    assert_eq!(&buf[..96], &want[..]);
    assert_eq!(&buf[96..], &key.tag(&want)[..]);
    assert_eq!(
        ReflectorPacket::read(&buf, Mode::Authenticated, Some(&key)),
        Ok(reflector())
    );
}

/// A request with the given TLVs after an unauthenticated base packet.
fn request_with(tlvs: &[(u8, Vec<u8>)]) -> Vec<u8> {
    let mut buf = vec![0u8; OPEN_LEN];
    sender().write(&mut buf, Mode::Open, None);
    for (k, v) in tlvs {
        let at = tlv::push(&mut buf, *k, v.len());
        buf[at..at + v.len()].copy_from_slice(v);
    }
    buf
}

fn reflect(req: &[u8], fill: &Fill, key: Option<&Key>) -> (Vec<u8>, tlv::Reflected) {
    let mut reply = req.to_vec();
    let walk = tlv::walk(&reply, OPEN_LEN).unwrap();
    let r = tlv::reflect(&mut reply, OPEN_LEN, &walk, fill, key);
    (reply, r)
}

/// RFC 8972 §4: the TLV header, the U flag set by the sender and cleared by
/// a reflector that knows the type; an unknown type comes back copied with
/// U set.
#[test]
fn tlv_headers_and_unknown_types() {
    let req = request_with(&[(kind::EXTRA_PADDING, vec![7; 8]), (200, vec![1, 2, 3])]);
    assert_eq!(&req[44..48], &[0x80, 1, 0, 8]);
    assert_eq!(&req[56..60], &[0x80, 200, 0, 3]);
    let (reply, r) = reflect(&req, &Fill::default(), None);
    assert_eq!(reply.len(), req.len());
    assert_eq!(reply[44], 0, "a known type has U cleared");
    assert_eq!(&reply[48..56], &[7; 8], "padding is copied");
    assert_eq!(reply[56], tlv::FLAG_U);
    assert_eq!(&reply[60..63], &[1, 2, 3], "an unknown value is copied");
    assert_eq!(r.unrecognised, 1);
}

/// A wrong length for a type, or a length past the end: M set there, and
/// the rest copied as it came.
#[test]
fn malformed_tlvs_set_m_and_stop() {
    let req = request_with(&[
        (kind::TIMESTAMP_INFO, vec![0; 3]),
        (kind::DIRECT_MEASUREMENT, vec![0; 12]),
    ]);
    let fill = Fill {
        counters: (5, 6),
        ..Fill::default()
    };
    let (reply, r) = reflect(&req, &fill, None);
    assert!(r.malformed);
    assert_eq!(reply[44], tlv::FLAG_M);
    assert_eq!(&reply[51..], &req[51..], "after the malformed TLV, a copy");
    // A length running past the end.
    let mut req = request_with(&[(kind::EXTRA_PADDING, vec![0; 4])]);
    req[47] = 200;
    let walk = tlv::walk(&req, OPEN_LEN).unwrap();
    assert_eq!(walk.broken, Some(44));
    let (reply, r) = reflect(&req, &Fill::default(), None);
    assert!(r.malformed);
    assert_eq!(reply[44] & tlv::FLAG_M, tlv::FLAG_M);
    assert_eq!(reply.len(), req.len());
}

/// Zero-length TLVs: fine for Extra Padding (copied), malformed for a type
/// with a fixed length (M set), and never read past.
#[test]
fn zero_length_tlvs() {
    let req = request_with(&[
        (kind::EXTRA_PADDING, Vec::new()),
        (kind::DIRECT_MEASUREMENT, Vec::new()),
        (kind::FOLLOW_UP, vec![0; 16]),
    ]);
    let (reply, r) = reflect(&req, &Fill::default(), None);
    assert_eq!(reply.len(), req.len());
    assert_eq!(reply[44], 0, "zero-length padding is well formed");
    assert_eq!(reply[48], tlv::FLAG_M, "Direct Measurement needs 12 octets");
    assert!(r.malformed);
    assert_eq!(&reply[52..], &req[52..], "the rest is copied as it came");
}

/// An HMAC TLV that fails, or that comes with no key (an unauthenticated
/// reflector): I set in every TLV, nothing processed.
#[test]
fn a_failed_hmac_tlv_sets_i_everywhere() {
    let req = request_with(&[
        (kind::DIRECT_MEASUREMENT, vec![0; 12]),
        (kind::HMAC, vec![9; 16]),
    ]);
    for key in [None, Some(Key::new(b"k"))] {
        let (reply, r) = reflect(&req, &Fill::default(), key.as_ref());
        assert!(r.integrity);
        assert_eq!(reply[44], 0x80 | tlv::FLAG_I);
        assert_eq!(reply[60], 0x80 | tlv::FLAG_I);
        assert_eq!(&reply[48..60], &req[48..60], "not processed");
    }
    // A good one verifies and is re-signed over the reply.
    let key = Key::new(b"k");
    let mut req = request_with(&[
        (kind::DIRECT_MEASUREMENT, vec![0; 12]),
        (kind::HMAC, vec![0; 16]),
    ]);
    tlv::sign_hmac_tlv(&mut req, OPEN_LEN, 64, &key);
    let walk = tlv::walk(&req, OPEN_LEN).unwrap();
    assert!(tlv::hmac_ok(&req, OPEN_LEN, &walk.tlvs, 1, Some(&key)));
    let (mut reply, r) = reflect(
        &req,
        &Fill {
            counters: (1, 1),
            ..Fill::default()
        },
        Some(&key),
    );
    assert!(!r.integrity);
    assert_eq!(r.hmac_at, Some(64));
    tlv::sign_hmac_tlv(&mut reply, OPEN_LEN, 64, &key);
    let walk = tlv::walk(&reply, OPEN_LEN).unwrap();
    assert!(tlv::hmac_ok(&reply, OPEN_LEN, &walk.tlvs, 1, Some(&key)));
}

/// The values the reflector fills (RFC 8972 §4.2–§4.7).
#[test]
fn reflector_fills_the_tlvs_it_knows() {
    let mut loc = vec![0u8; 4];
    for k in [tlv::location::DEST_IP, tlv::location::SOURCE_IP] {
        loc.extend([0x80, k, 0, 16]);
        loc.extend([0u8; 16]);
    }
    let req = request_with(&[
        (kind::LOCATION, loc),
        (kind::TIMESTAMP_INFO, vec![0; 4]),
        (kind::CLASS_OF_SERVICE, vec![46 << 2, 0, 0, 0]),
        (
            kind::DIRECT_MEASUREMENT,
            vec![0, 0, 0, 9, 0, 0, 0, 0, 0, 0, 0, 0],
        ),
        (kind::FOLLOW_UP, vec![0; 16]),
    ]);
    let fill = Fill {
        ports: (862, 40000),
        addrs: Some(("127.0.0.2".parse().unwrap(), "127.0.0.1".parse().unwrap())),
        sync_source: tlv::sync::LOCAL,
        rx_method: tlv::method::SW_LOCAL,
        tx_method: tlv::method::CONTROL_PLANE,
        tos: Some((10 << 2) | 1),
        counters: (8, 9),
        previous: Some((7, 0x1122_3344_5566_7788, tlv::method::SW_LOCAL)),
    };
    let (reply, r) = reflect(&req, &fill, None);
    assert_eq!(r.dscp, Some(46));
    let walk = tlv::walk(&reply, OPEN_LEN).unwrap();
    let v = |i: usize| walk.tlvs[i].value(&reply).to_vec();
    let loc = v(0);
    assert_eq!(&loc[..4], &[0x03, 0x5e, 0x9c, 0x40]);
    assert_eq!(&loc[4..8], &[0, tlv::location::DEST_IPV4, 0, 16]);
    assert_eq!(&loc[8..12], &[127, 0, 0, 2]);
    assert_eq!(&loc[24..28], &[0, tlv::location::SOURCE_IPV4, 0, 16]);
    assert_eq!(&loc[28..32], &[127, 0, 0, 1]);
    assert_eq!(v(1), vec![5, 2, 5, 3]);
    // DSCP1 46 kept; DSCP2 10 and ECN 1 as received; RP 0.
    let word = u16::from_be_bytes([v(2)[0], v(2)[1]]);
    assert_eq!(
        (word >> 10, (word >> 4) & 0x3f, (word >> 2) & 3, word & 3),
        (46, 10, 1, 0)
    );
    assert_eq!(v(3), vec![0, 0, 0, 9, 0, 0, 0, 8, 0, 0, 0, 9]);
    let f = v(4);
    assert_eq!(&f[..4], &[0, 0, 0, 7]);
    assert_eq!(&f[4..12], &0x1122_3344_5566_7788u64.to_be_bytes());
    assert_eq!(f[12], tlv::method::SW_LOCAL);
}

/// 10,000 TLVs in one datagram are refused before any is processed.
#[test]
fn ten_thousand_tlvs_are_refused() {
    let tlvs: Vec<(u8, Vec<u8>)> = (0..10_000)
        .map(|_| (kind::EXTRA_PADDING, Vec::new()))
        .collect();
    let req = request_with(&tlvs);
    assert_eq!(tlv::walk(&req, OPEN_LEN), Err(Reject::TooManyTlvs));
}

/// Random and mutated packets through every parser: no panic, and a
/// reflected reply is always the request's length.
#[test]
fn random_packets_never_panic_and_never_grow() {
    let mut rng = fastrand::Rng::with_seed(8762);
    let key = Key::new(b"fuzz");
    let seeds = [
        request_with(&[
            (kind::LOCATION, vec![0; 44]),
            (kind::FOLLOW_UP, vec![0; 16]),
        ]),
        request_with(&[
            (kind::CLASS_OF_SERVICE, vec![0; 4]),
            (kind::HMAC, vec![0; 16]),
        ]),
        request_with(&[]),
    ];
    for i in 0..200_000u32 {
        let mut buf = if i % 3 == 0 {
            let n = rng.usize(0..600);
            (0..n).map(|_| rng.u8(..)).collect::<Vec<u8>>()
        } else {
            let mut b = seeds[rng.usize(..seeds.len())].clone();
            for _ in 0..rng.usize(1..6) {
                if b.is_empty() {
                    break;
                }
                let at = rng.usize(..b.len());
                match rng.u8(..3) {
                    0 => b[at] = rng.u8(..),
                    1 => b.truncate(at),
                    _ => b.insert(at, rng.u8(..)),
                }
            }
            b
        };
        let len = buf.len();
        for mode in [Mode::Open, Mode::Authenticated] {
            let _ = SenderPacket::read(&buf, mode, Some(&key));
            let _ = ReflectorPacket::read(&buf, mode, Some(&key));
            if let Ok(walk) = tlv::walk(&buf, mode.base_len()) {
                let _ = tlv::reflect(
                    &mut buf,
                    mode.base_len(),
                    &walk,
                    &Fill::default(),
                    Some(&key),
                );
                assert_eq!(buf.len(), len);
            }
        }
    }
}

async fn reflector_on(
    cfg: ReflectorConfig,
) -> (SocketAddr, Arc<ReflectorStats>, CancellationToken) {
    let socket = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let addr = socket.local_addr().unwrap();
    let stats = Arc::new(ReflectorStats::default());
    let stop = CancellationToken::new();
    tokio::spawn(prober_stamp::serve_stamp(
        socket,
        cfg,
        Arc::clone(&stats),
        stop.clone(),
    ));
    (addr, stats, stop)
}

/// A sender against a live stateful reflector: the split adds up, the TTL
/// is the reflector's view of ours (255 on loopback), loss by direction is
/// known and zero.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sender_and_reflector_split_a_round_trip() {
    let cfg = ReflectorConfig {
        rate: 0,
        clock_synced: true,
        ..ReflectorConfig::default()
    };
    let (addr, stats, stop) = reflector_on(cfg).await;
    let opts = SenderOptions {
        clock_synced: true,
        tlvs: TlvChoice::parse("all").unwrap(),
        ..SenderOptions::default()
    };
    let size = opts.min_size() + 40;
    let probe = StampProbe::connect(addr, size, opts, true).await.unwrap();
    for seq in 0..50 {
        let r = tokio::time::timeout(Duration::from_secs(2), probe.probe(seq))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(r.ttl, Some(255));
        assert_eq!(r.bytes, size);
        let p = r.parts();
        let turnaround = p.responder_turnaround.expect("T3 − T2");
        // A turnaround, not a handler's dwell.
        assert_eq!(r.server_dwell, None, "{turnaround}");
        if p.complete() {
            let sum =
                p.client_send.unwrap() + p.network.unwrap() + turnaround + p.client_wake.unwrap();
            assert_eq!(sum, p.rtt.unwrap(), "parts add up");
        }
        let resp = r.stamps.responder.unwrap();
        assert!(
            resp.forward.is_some() && resp.backward.is_some(),
            "both clocks synced"
        );
    }
    let a = probe.anomalies();
    let d = a.direction.expect("a stateful reflector");
    assert_eq!((d.forward, d.backward, d.unknown), (0, 0, 0));
    // The reflector counts a reply once its send call returned.
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(stats.reflected.load(Ordering::Relaxed), 50);
    stop.cancel();
}

/// Against a stateless reflector, loss by direction is unknown, not zero;
/// without the reflector's S bit, one-way delays are unknown.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stateless_reflector_gives_no_direction() {
    let cfg = ReflectorConfig {
        rate: 0,
        stateful: false,
        ..ReflectorConfig::default()
    };
    let (addr, _, stop) = reflector_on(cfg).await;
    let opts = SenderOptions {
        clock_synced: true,
        ..SenderOptions::default()
    };
    let probe = StampProbe::connect(addr, 44, opts, true).await.unwrap();
    for seq in 0..5 {
        let r = probe.probe(seq).await.unwrap();
        assert_eq!(r.stamps.responder.unwrap().forward, None);
    }
    assert_eq!(probe.anomalies().direction, None);
    stop.cancel();
}

/// Authenticated mode end to end; a sender with the wrong key gets
/// nothing, and the reflector counts why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn authenticated_mode_and_a_wrong_key() {
    let cfg = ReflectorConfig {
        rate: 0,
        key: Some(Key::new(b"right")),
        ..ReflectorConfig::default()
    };
    let (addr, stats, stop) = reflector_on(cfg).await;
    let good = SenderOptions {
        key: Some(Key::new(b"right")),
        tlvs: TlvChoice::parse("direct").unwrap(),
        ..SenderOptions::default()
    };
    assert_eq!(good.min_size(), AUTH_LEN + 16 + 20);
    let probe = StampProbe::connect(addr, good.min_size(), good, true)
        .await
        .unwrap();
    probe.probe(0).await.unwrap();
    let bad = SenderOptions {
        key: Some(Key::new(b"wrong")),
        ..SenderOptions::default()
    };
    let probe = StampProbe::connect(addr, AUTH_LEN, bad, true)
        .await
        .unwrap();
    let r = tokio::time::timeout(Duration::from_millis(300), probe.probe(0)).await;
    assert!(r.is_err(), "no reply to a bad HMAC");
    let dropped = stats.dropped();
    assert!(dropped.contains(&("hmac", 1)), "{dropped:?}");
    stop.cancel();
}

/// Garbage, short packets and a flood from one source: every reply is no
/// longer than its request, and every datagram is reflected or counted as
/// dropped with a reason.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_reflector_drops_what_it_must_and_says_why() {
    let cfg = ReflectorConfig {
        rate: 50,
        ..ReflectorConfig::default()
    };
    let (addr, stats, stop) = reflector_on(cfg).await;
    let client = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    client.connect(addr).await.unwrap();
    let mut rng = fastrand::Rng::with_seed(8972);
    let mut sent = 0u64;
    let mut longest = 0;
    for i in 0..400usize {
        let pkt = match i % 4 {
            0 => (0..rng.usize(0..44)).map(|_| rng.u8(..)).collect(),
            1 => {
                let tlvs: Vec<(u8, Vec<u8>)> = (0..300)
                    .map(|_| (kind::EXTRA_PADDING, Vec::new()))
                    .collect();
                request_with(&tlvs)
            }
            _ => request_with(&[(kind::EXTRA_PADDING, vec![0; rng.usize(0..100)])]),
        };
        longest = longest.max(pkt.len());
        client.send(&pkt).await.unwrap();
        sent += 1;
        if i % 16 == 15 {
            // Keep the reflector's receive buffer from overflowing: wait
            // until it has taken what was sent (a loaded machine may not
            // run it within a fixed pause).
            let until = tokio::time::Instant::now() + Duration::from_secs(5);
            while stats.received.load(Ordering::Relaxed) < sent
                && tokio::time::Instant::now() < until
            {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        }
    }
    let mut buf = [0u8; 2048];
    let mut replies = 0;
    while let Ok(Ok(n)) =
        tokio::time::timeout(Duration::from_millis(200), client.recv(&mut buf)).await
    {
        assert!(n <= longest && n >= OPEN_LEN);
        replies += 1;
    }
    let dropped: u64 = stats.dropped().iter().map(|(_, n)| n).sum();
    assert_eq!(stats.received.load(Ordering::Relaxed), sent);
    assert_eq!(stats.reflected.load(Ordering::Relaxed) + dropped, sent);
    assert_eq!(stats.reflected.load(Ordering::Relaxed), replies);
    let by: std::collections::HashMap<_, _> = stats.dropped().into_iter().collect();
    assert_eq!(by["short"], 100);
    assert_eq!(by["too_many_tlvs"], 100);
    assert!(by["rate_limited"] > 100, "{by:?}");
    stop.cancel();
}

/// Follow-Up Telemetry carries the previous reply's kernel transmit stamp,
/// which is no earlier than the T3 written in that reply.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn follow_up_telemetry_gives_the_previous_transmit_time() {
    let cfg = ReflectorConfig {
        rate: 0,
        ..ReflectorConfig::default()
    };
    let (addr, _, stop) = reflector_on(cfg).await;
    let client = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    client.connect(addr).await.unwrap();
    let req = request_with(&[(kind::FOLLOW_UP, vec![0; 16])]);
    let mut buf = [0u8; 256];
    client.send(&req).await.unwrap();
    let n = client.recv(&mut buf).await.unwrap();
    let first = ReflectorPacket::read(&buf[..n], Mode::Open, None).unwrap();
    let walk = tlv::walk(&buf[..n], OPEN_LEN).unwrap();
    assert_eq!(
        walk.tlvs[0].value(&buf[..n]),
        &[0u8; 16][..],
        "no previous reply yet"
    );
    client.send(&req).await.unwrap();
    let n = client.recv(&mut buf).await.unwrap();
    let walk = tlv::walk(&buf[..n], OPEN_LEN).unwrap();
    let v = walk.tlvs[0].value(&buf[..n]);
    assert_eq!(u32::from_be_bytes(v[..4].try_into().unwrap()), first.seq);
    let t3k = u64::from_be_bytes(v[4..12].try_into().unwrap());
    assert_eq!(v[12], tlv::method::SW_LOCAL, "the kernel's stamp");
    let d = Format::Ntp.diff_ns(first.timestamp, t3k).unwrap();
    assert!((0..1_000_000_000).contains(&d), "t3k − t3 = {d} ns");
    stop.cancel();
}

/// An authenticated request at an unauthenticated reflector is dropped as
/// the other mode; two sessions from one socket address's host to one
/// reflector keep their own sequence numbers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn modes_and_sessions_do_not_mix() {
    let (addr, stats, stop) = reflector_on(ReflectorConfig {
        rate: 0,
        ..ReflectorConfig::default()
    })
    .await;
    let auth = SenderOptions {
        key: Some(Key::new(b"k")),
        ..SenderOptions::default()
    };
    let probe = StampProbe::connect(addr, AUTH_LEN, auth, true)
        .await
        .unwrap();
    let r = tokio::time::timeout(Duration::from_millis(300), probe.probe(0)).await;
    assert!(r.is_err());
    assert!(
        stats.dropped().contains(&("mode", 1)),
        "{:?}",
        stats.dropped()
    );
    let a = StampProbe::connect(addr, 44, SenderOptions::default(), true)
        .await
        .unwrap();
    let b = StampProbe::connect(addr, 44, SenderOptions::default(), true)
        .await
        .unwrap();
    assert_ne!(a.ssid(), b.ssid());
    for seq in 0..10 {
        a.probe(seq).await.unwrap();
        if seq % 2 == 0 {
            b.probe(seq).await.unwrap();
        }
    }
    let (da, db) = (
        a.anomalies().direction.unwrap(),
        b.anomalies().direction.unwrap(),
    );
    assert_eq!((da.forward, da.backward), (0, 0));
    assert_eq!(
        (db.forward, db.backward),
        (0, 0),
        "b's session counts only b's requests"
    );
    stop.cancel();
}

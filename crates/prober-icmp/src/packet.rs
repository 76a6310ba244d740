//! Echo requests, the payload prober puts in them, and parsing what comes
//! back. Packets are built with `pnet_packet` and classified with surge-ping's
//! decoders; the payload check is prober's own, since surge-ping does not
//! expose payloads.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use pnet_packet::Packet as _;
use pnet_packet::icmp::{self, IcmpPacket, IcmpTypes};
use pnet_packet::icmpv6::{Icmpv6Types, echo_request::MutableEchoRequestPacket as MutableEcho6};
use socket2::Type;
use surge_ping::{Icmpv4Packet, Icmpv6Packet};

/// First bytes of every payload prober sends.
pub const PAYLOAD_MAGIC: [u8; 4] = *b"PRBI";
/// Smallest payload: magic, nonce and 64-bit seq.
pub const MIN_PAYLOAD: usize = 20;
/// Largest payload (65535 - 20 IPv4 header - 8 ICMP header), as ping's `-s`.
pub const MAX_PAYLOAD: usize = 65_507;
/// Default payload, as ping.
pub const DEFAULT_PAYLOAD: usize = 56;
/// ICMP echo header length.
const ECHO_HEADER: usize = 8;

/// Fills `buf` with the payload for probe `seq`: magic, nonce, the full
/// 64-bit seq (the ICMP header only has 16 bits), then a byte pattern.
///
/// # Panics
/// If `buf` is shorter than [`MIN_PAYLOAD`]; callers validate sizes.
pub fn encode_payload(buf: &mut [u8], nonce: u64, seq: u64) {
    buf[..4].copy_from_slice(&PAYLOAD_MAGIC);
    buf[4..12].copy_from_slice(&nonce.to_be_bytes());
    buf[12..20].copy_from_slice(&seq.to_be_bytes());
    for (i, b) in buf[MIN_PAYLOAD..].iter_mut().enumerate() {
        *b = i as u8;
    }
}

/// What a payload says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PayloadCheck {
    /// Not a prober payload (another ping, or truncated).
    Foreign,
    /// A prober payload; `intact` is false if the pattern was altered.
    Ours {
        /// The sender's nonce.
        nonce: u64,
        /// The full sequence number.
        seq: u64,
        /// Whether the padding pattern came back unchanged.
        intact: bool,
    },
}

/// Reads a payload written by [`encode_payload`].
/// The nonce and seq of our echo request inside a frame the kernel looped
/// back with its transmit stamp (link, IP and ICMP headers included, their
/// lengths depending on the interface and socket kind).
pub fn find_payload(frame: &[u8]) -> Option<(u64, u64)> {
    let at = frame
        .windows(PAYLOAD_MAGIC.len())
        .position(|w| w == PAYLOAD_MAGIC)?;
    match check_payload(&frame[at..]) {
        PayloadCheck::Ours { nonce, seq, .. } => Some((nonce, seq)),
        PayloadCheck::Foreign => None,
    }
}

/// Checks a payload for our magic, nonce and pattern.
pub fn check_payload(p: &[u8]) -> PayloadCheck {
    if p.len() < MIN_PAYLOAD || p[..4] != PAYLOAD_MAGIC {
        return PayloadCheck::Foreign;
    }
    let nonce = u64::from_be_bytes(p[4..12].try_into().expect("8 bytes"));
    let seq = u64::from_be_bytes(p[12..20].try_into().expect("8 bytes"));
    let intact = p[MIN_PAYLOAD..]
        .iter()
        .enumerate()
        .all(|(i, b)| *b == i as u8);
    PayloadCheck::Ours { nonce, seq, intact }
}

/// An ICMPv4 echo request with a valid checksum (datagram sockets let the
/// kernel rewrite identifier and checksum).
pub fn echo_request_v4(ident: u16, seq: u16, payload: &[u8]) -> Vec<u8> {
    let mut buf = vec![0u8; ECHO_HEADER + payload.len()];
    let mut p = icmp::echo_request::MutableEchoRequestPacket::new(&mut buf)
        .expect("buffer holds the echo header");
    p.set_icmp_type(IcmpTypes::EchoRequest);
    p.set_identifier(ident);
    p.set_sequence_number(seq);
    p.set_payload(payload);
    let sum = icmp::checksum(&IcmpPacket::new(p.packet()).expect("buffer holds a header"));
    p.set_checksum(sum);
    buf
}

/// An ICMPv6 echo request; the kernel computes the checksum (RFC 3542).
pub fn echo_request_v6(ident: u16, seq: u16, payload: &[u8]) -> Vec<u8> {
    let mut buf = vec![0u8; ECHO_HEADER + payload.len()];
    let mut p = MutableEcho6::new(&mut buf).expect("buffer holds the echo header");
    p.set_icmpv6_type(Icmpv6Types::EchoRequest);
    p.set_identifier(ident);
    p.set_sequence_number(seq);
    p.set_payload(payload);
    buf
}

/// A received ICMP message, as far as prober cares.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Received<'a> {
    /// An echo reply.
    EchoReply {
        /// Who answered.
        from: IpAddr,
        /// Echo identifier.
        ident: u16,
        /// Low 16 bits of the seq.
        seq16: u16,
        /// The echoed payload.
        payload: &'a [u8],
        /// ICMP message length.
        len: usize,
    },
    /// An ICMP error about one of our requests.
    Error {
        /// The address the failed request was sent to.
        target: IpAddr,
        /// Who sent the error (a router, or the host itself).
        from: IpAddr,
        /// Identifier of the failed request.
        ident: u16,
        /// Low 16 bits of its seq.
        seq16: u16,
        /// ICMP type and code.
        icmp_type: u8,
        /// ICMP code.
        code: u8,
        /// As much of the failed request's payload as was quoted.
        quoted: &'a [u8],
    },
    /// Anything else: our own requests seen on a raw socket, other ICMP.
    Other,
}

/// Parses an ICMPv4 message. `raw` sockets deliver the IPv4 header too.
pub fn parse_v4(buf: &[u8], raw: bool, from: Ipv4Addr) -> Received<'_> {
    let sock_type = if raw { Type::RAW } else { Type::DGRAM };
    let Ok(pkt) = Icmpv4Packet::decode(buf, sock_type, from, Ipv4Addr::UNSPECIFIED) else {
        return Received::Other;
    };
    let ihl = |b: &[u8]| b.first().map_or(0, |v| usize::from(v & 0x0f) * 4);
    let icmp = if raw {
        buf.get(ihl(buf)..).unwrap_or_default()
    } else {
        buf
    };
    let icmp_type = pkt.get_icmp_type().0;
    match icmp_type {
        0 => Received::EchoReply {
            from: IpAddr::V4(from),
            ident: pkt.get_identifier().0,
            seq16: pkt.get_sequence().0,
            payload: icmp.get(ECHO_HEADER..).unwrap_or_default(),
            len: icmp.len(),
        },
        3 | 11 => {
            // Quoted: IPv4 header of our request, then its ICMP header and payload.
            let quoted_ip = icmp.get(ECHO_HEADER..).unwrap_or_default();
            let quoted = quoted_ip
                .get(ihl(quoted_ip) + ECHO_HEADER..)
                .unwrap_or_default();
            Received::Error {
                target: IpAddr::V4(pkt.get_real_dest()),
                from: IpAddr::V4(from),
                ident: pkt.get_identifier().0,
                seq16: pkt.get_sequence().0,
                icmp_type,
                code: pkt.get_icmp_code().0,
                quoted,
            }
        }
        _ => Received::Other,
    }
}

/// Parses an ICMPv6 message (sockets never include the IPv6 header).
pub fn parse_v6(buf: &[u8], from: Ipv6Addr) -> Received<'_> {
    let Ok(pkt) = Icmpv6Packet::decode(buf, from) else {
        return Received::Other;
    };
    let icmp_type = pkt.get_icmpv6_type().0;
    match icmp_type {
        129 => Received::EchoReply {
            from: IpAddr::V6(from),
            ident: pkt.get_identifier().0,
            seq16: pkt.get_sequence().0,
            payload: buf.get(ECHO_HEADER..).unwrap_or_default(),
            len: buf.len(),
        },
        1 | 3 => {
            // Quoted: the 40-byte IPv6 header, then the echo header and payload
            // (extension headers, if any, make this best effort).
            let quoted = buf
                .get(ECHO_HEADER + 40 + ECHO_HEADER..)
                .unwrap_or_default();
            Received::Error {
                target: IpAddr::V6(pkt.get_real_dest()),
                from: IpAddr::V6(from),
                ident: pkt.get_identifier().0,
                seq16: pkt.get_sequence().0,
                icmp_type,
                code: pkt.get_icmpv6_code().0,
                quoted,
            }
        }
        _ => Received::Other,
    }
}

/// A readable name for an ICMP error type.
pub fn describe_error(v6: bool, icmp_type: u8, code: u8) -> String {
    let what = match (v6, icmp_type) {
        (false, 3) | (true, 1) => "destination unreachable",
        (false, 11) | (true, 3) => "time exceeded",
        _ => "icmp error",
    };
    format!("{what} (type {icmp_type}, code {code})")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reply_from(req: &[u8]) -> Vec<u8> {
        let mut r = req.to_vec();
        r[0] = 0; // echo reply
        r[2..4].fill(0);
        let sum = icmp::checksum(&IcmpPacket::new(&r).unwrap());
        r[2..4].copy_from_slice(&sum.to_be_bytes());
        r
    }

    #[test]
    fn payload_round_trips() {
        let mut p = vec![0u8; DEFAULT_PAYLOAD];
        encode_payload(&mut p, 0xdead_beef, (1 << 40) + 3);
        assert_eq!(
            check_payload(&p),
            PayloadCheck::Ours {
                nonce: 0xdead_beef,
                seq: (1 << 40) + 3,
                intact: true
            }
        );
        p[40] ^= 1;
        assert!(matches!(
            check_payload(&p),
            PayloadCheck::Ours { intact: false, .. }
        ));
        assert_eq!(check_payload(&p[..19]), PayloadCheck::Foreign);
        assert_eq!(check_payload(&[0u8; 56]), PayloadCheck::Foreign);
    }

    #[test]
    fn parses_a_v4_reply_from_a_datagram_socket() {
        let mut payload = vec![0u8; 30];
        encode_payload(&mut payload, 7, 65_536 + 9);
        let req = echo_request_v4(0x1234, 9, &payload);
        let from = Ipv4Addr::LOCALHOST;
        match parse_v4(&reply_from(&req), false, from) {
            Received::EchoReply {
                ident,
                seq16,
                payload: p,
                len,
                ..
            } => {
                assert_eq!((ident, seq16, len), (0x1234, 9, 38));
                assert_eq!(
                    check_payload(p),
                    PayloadCheck::Ours {
                        nonce: 7,
                        seq: 65_545,
                        intact: true
                    }
                );
            }
            other => panic!("{other:?}"),
        }
        // Our own request (seen by raw sockets on loopback) is not a reply.
        assert_eq!(parse_v4(&req, false, from), Received::Other);
    }

    #[test]
    fn parses_a_v4_reply_with_ip_header_from_a_raw_socket() {
        let mut payload = vec![0u8; 20];
        encode_payload(&mut payload, 1, 2);
        let icmp = reply_from(&echo_request_v4(5, 2, &payload));
        let mut ip = vec![
            0x45, 0, 0, 0, 0, 0, 0, 0, 64, 1, 0, 0, 127, 0, 0, 1, 127, 0, 0, 1,
        ];
        let total = (ip.len() + icmp.len()) as u16;
        ip[2..4].copy_from_slice(&total.to_be_bytes());
        ip.extend_from_slice(&icmp);
        match parse_v4(&ip, true, Ipv4Addr::LOCALHOST) {
            Received::EchoReply {
                ident: 5,
                seq16: 2,
                payload: p,
                ..
            } => {
                assert!(matches!(
                    check_payload(p),
                    PayloadCheck::Ours {
                        nonce: 1,
                        seq: 2,
                        ..
                    }
                ));
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn parses_a_v4_unreachable_with_the_quoted_request() {
        let mut payload = vec![0u8; 24];
        encode_payload(&mut payload, 99, 4);
        let req = echo_request_v4(0x0101, 4, &payload);
        let dst = Ipv4Addr::new(127, 0, 0, 2);
        let mut quoted_ip = vec![0x45, 0, 0, 0, 0, 0, 0, 0, 64, 1, 0, 0, 127, 0, 0, 1];
        quoted_ip.extend_from_slice(&dst.octets());
        let total = (quoted_ip.len() + req.len()) as u16;
        quoted_ip[2..4].copy_from_slice(&total.to_be_bytes());
        let mut err = vec![3, 1, 0, 0, 0, 0, 0, 0];
        err.extend_from_slice(&quoted_ip);
        err.extend_from_slice(&req);
        match parse_v4(&err, false, Ipv4Addr::LOCALHOST) {
            Received::Error {
                target,
                ident,
                seq16,
                icmp_type,
                code,
                quoted,
                ..
            } => {
                assert_eq!(
                    (target, ident, seq16, icmp_type, code),
                    (IpAddr::V4(dst), 0x0101, 4, 3, 1)
                );
                assert!(matches!(
                    check_payload(quoted),
                    PayloadCheck::Ours {
                        nonce: 99,
                        seq: 4,
                        ..
                    }
                ));
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(
            describe_error(false, 3, 1),
            "destination unreachable (type 3, code 1)"
        );
    }

    #[test]
    fn parses_a_v6_reply() {
        let mut payload = vec![0u8; 56];
        encode_payload(&mut payload, 3, 70_000);
        let mut r = echo_request_v6(8, 70_000u64 as u16, &payload);
        r[0] = 129;
        match parse_v6(&r, Ipv6Addr::LOCALHOST) {
            Received::EchoReply {
                ident: 8,
                seq16,
                payload: p,
                ..
            } => {
                assert_eq!(seq16, 70_000u64 as u16);
                assert!(matches!(
                    check_payload(p),
                    PayloadCheck::Ours { seq: 70_000, .. }
                ));
            }
            other => panic!("{other:?}"),
        }
    }
}

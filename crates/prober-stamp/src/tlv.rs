//! STAMP TLVs (RFC 8972 §4): what follows the base packet. Each TLV is a
//! 4-octet header (flags, type, length of the value) and its value.
//!
//! The reflector answers with the request's TLVs in the same order and of
//! the same lengths, filling the values it is asked for ([`reflect`]), so a
//! reply is never longer than its request. Lengths are checked before any
//! value is read.

use crate::packet::{HMAC_LEN, Key, Reject};

/// Octets of a TLV header.
pub const HEADER: usize = 4;
/// Most TLVs accepted in one packet; a packet with more is dropped (and
/// counted) before any is processed.
pub const MAX_TLVS: usize = 256;

/// Unrecognised: the reflector does not know the type (RFC 8972 §4).
pub const FLAG_U: u8 = 0x80;
/// Malformed: the TLV's length is wrong for its type.
pub const FLAG_M: u8 = 0x40;
/// Integrity: the HMAC TLV did not verify.
pub const FLAG_I: u8 = 0x20;

/// TLV types (IANA "STAMP TLV Types").
pub mod kind {
    /// Extra Padding (RFC 8972 §4.1).
    pub const EXTRA_PADDING: u8 = 1;
    /// Location (§4.2).
    pub const LOCATION: u8 = 2;
    /// Timestamp Information (§4.3).
    pub const TIMESTAMP_INFO: u8 = 3;
    /// Class of Service (§4.4).
    pub const CLASS_OF_SERVICE: u8 = 4;
    /// Direct Measurement (§4.5).
    pub const DIRECT_MEASUREMENT: u8 = 5;
    /// Access Report (§4.6).
    pub const ACCESS_REPORT: u8 = 6;
    /// Follow-Up Telemetry (§4.7).
    pub const FOLLOW_UP: u8 = 7;
    /// HMAC (§4.8).
    pub const HMAC: u8 = 8;
}

/// Value length of the fixed-length types; `None` for variable ones.
fn fixed_len(k: u8) -> Option<usize> {
    match k {
        kind::TIMESTAMP_INFO | kind::CLASS_OF_SERVICE | kind::ACCESS_REPORT => Some(4),
        kind::DIRECT_MEASUREMENT => Some(12),
        kind::FOLLOW_UP => Some(16),
        kind::HMAC => Some(HMAC_LEN),
        _ => None,
    }
}

/// One TLV found in a packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tlv {
    /// Offset of its header in the packet.
    pub at: usize,
    /// Its flags octet.
    pub flags: u8,
    /// Its type.
    pub kind: u8,
    /// Length of its value.
    pub len: usize,
}

impl Tlv {
    /// Offset of its value in the packet.
    pub fn value_at(&self) -> usize {
        self.at + HEADER
    }

    /// Its value.
    pub fn value<'a>(&self, buf: &'a [u8]) -> &'a [u8] {
        &buf[self.value_at()..self.value_at() + self.len]
    }

    /// True when its length is wrong for its type.
    pub fn malformed(&self) -> bool {
        fixed_len(self.kind).is_some_and(|n| n != self.len)
            || (self.kind == kind::LOCATION && self.len < 4)
    }
}

/// The TLVs of a packet, as [`walk`] found them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Walk {
    /// The well-formed TLVs, in order.
    pub tlvs: Vec<Tlv>,
    /// Where a TLV starts whose header or value runs past the end of the
    /// packet: the reflector stops there, sets its M flag and copies the
    /// rest as it came (RFC 8972 §4).
    pub broken: Option<usize>,
}

/// The TLVs of `buf` from `start` (the end of the base packet). No value is
/// read: only headers, each checked against the packet's end first.
///
/// A TLV area that is all zeros is legacy padding, as TWAMP-Light senders
/// add it, and holds no TLVs.
///
/// # Errors
/// [`Reject::TooManyTlvs`] past [`MAX_TLVS`].
pub fn walk(buf: &[u8], start: usize) -> Result<Walk, Reject> {
    let mut out = Walk::default();
    let area = buf.get(start..).unwrap_or_default();
    if area.iter().all(|b| *b == 0) {
        return Ok(out);
    }
    let mut at = start;
    while at < buf.len() {
        if out.tlvs.len() == MAX_TLVS {
            return Err(Reject::TooManyTlvs);
        }
        let Some(header) = buf.get(at..at + HEADER) else {
            out.broken = Some(at);
            break;
        };
        let len = usize::from(u16::from_be_bytes([header[2], header[3]]));
        if at + HEADER + len > buf.len() {
            out.broken = Some(at);
            break;
        }
        out.tlvs.push(Tlv {
            at,
            flags: header[0],
            kind: header[1],
            len,
        });
        at += HEADER + len;
    }
    Ok(out)
}

/// Appends a TLV header and a zeroed value of `len` octets to `buf`;
/// returns the offset of the value.
pub fn push(buf: &mut Vec<u8>, k: u8, len: usize) -> usize {
    let len16 = u16::try_from(len).unwrap_or(u16::MAX);
    // The sender sets U; the reflector clears it for a type it knows.
    buf.extend_from_slice(&[FLAG_U, k]);
    buf.extend_from_slice(&len16.to_be_bytes());
    let at = buf.len();
    buf.resize(at + usize::from(len16), 0);
    at
}

/// Timestamp Information codes (IANA): synchronisation sources.
pub mod sync {
    /// NTP.
    pub const NTP: u8 = 1;
    /// PTP.
    pub const PTP: u8 = 2;
    /// Free-running local clock.
    pub const LOCAL: u8 = 5;
}

/// Timestamp Information codes (IANA): timestamping methods.
pub mod method {
    /// Hardware assisted.
    pub const HW: u8 = 1;
    /// Software local (the kernel's stamp).
    pub const SW_LOCAL: u8 = 2;
    /// Control plane (a user-space read of the clock).
    pub const CONTROL_PLANE: u8 = 3;
}

/// What the reflector knows about one request and its session, to fill the
/// TLVs of its reply.
#[derive(Debug, Clone, Copy, Default)]
pub struct Fill {
    /// The request's destination and source UDP ports (the reflector's and
    /// the sender's).
    pub ports: (u16, u16),
    /// The request's destination and source IP addresses.
    pub addrs: Option<(std::net::IpAddr, std::net::IpAddr)>,
    /// The reflector's synchronisation source ([`sync`]).
    pub sync_source: u8,
    /// How T2 was taken ([`method`]).
    pub rx_method: u8,
    /// How T3 is taken ([`method`]).
    pub tx_method: u8,
    /// The request's DSCP and ECN as received, if known.
    pub tos: Option<u8>,
    /// Requests received and replies sent in this session, this one
    /// included (Direct Measurement).
    pub counters: (u32, u32),
    /// The previous reply of this session: its seq, its transmit time in
    /// the reflector's timestamp format, and how that was taken
    /// (Follow-Up Telemetry); `None` before the first.
    pub previous: Option<(u32, u64, u8)>,
}

/// What reflecting the TLVs found.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Reflected {
    /// TLVs of an unknown type, returned with the U flag.
    pub unrecognised: u32,
    /// A TLV of a wrong length, or running past the end, returned with the
    /// M flag (processing stops there).
    pub malformed: bool,
    /// An HMAC TLV that did not verify, or that is not last but for Extra
    /// Padding, or one with no key to check it: every TLV is returned
    /// unprocessed with the I flag.
    pub integrity: bool,
    /// The DSCP the sender asked the reply to carry (Class of Service).
    pub dscp: Option<u8>,
    /// Where the HMAC TLV is, to sign the reply's TLVs once its base packet
    /// is written ([`sign_hmac_tlv`]).
    pub hmac_at: Option<usize>,
}

/// The octets an HMAC TLV at `at` covers: the base packet's Sequence Number
/// and every TLV before it, headers included (RFC 8972 §4.8).
fn hmac_input(buf: &[u8], base: usize, at: usize) -> Vec<u8> {
    let mut v = Vec::with_capacity(4 + at - base);
    v.extend_from_slice(&buf[..4]);
    v.extend_from_slice(&buf[base..at]);
    v
}

/// True when the HMAC TLV at `tlvs[i]` is in its place (after every other
/// TLV but Extra Padding) and verifies with `key`.
pub fn hmac_ok(buf: &[u8], base: usize, tlvs: &[Tlv], i: usize, key: Option<&Key>) -> bool {
    let t = &tlvs[i];
    let last = tlvs[i + 1..].iter().all(|x| x.kind == kind::EXTRA_PADDING);
    last && t.len == HMAC_LEN
        && key.is_some_and(|k| k.verify(&hmac_input(buf, base, t.at), t.value(buf)))
}

/// Writes the HMAC of the TLVs before the HMAC TLV whose value is at
/// `value_at` (and of the Sequence Number) into it.
pub fn sign_hmac_tlv(buf: &mut [u8], base: usize, value_at: usize, key: &Key) {
    let tag = key.tag(&hmac_input(buf, base, value_at - HEADER));
    buf[value_at..value_at + HMAC_LEN].copy_from_slice(&tag);
}

/// Fills the TLVs of a reply in place (RFC 8972 §4). `reply` is a copy of
/// the request (of the same length: a reply is never longer); the base
/// packet is written over it afterwards. `key` is the authenticated mode's.
pub fn reflect(
    reply: &mut [u8],
    base: usize,
    walk: &Walk,
    fill: &Fill,
    key: Option<&Key>,
) -> Reflected {
    let mut out = Reflected::default();
    let tlvs = &walk.tlvs;
    if let Some(h) = tlvs.iter().position(|t| t.kind == kind::HMAC) {
        if !hmac_ok(reply, base, tlvs, h, key) {
            for t in tlvs {
                reply[t.at] |= FLAG_I;
            }
            out.integrity = true;
            return out;
        }
        out.hmac_at = Some(tlvs[h].value_at());
    }
    for t in tlvs {
        reply[t.at] = 0;
        if t.malformed() {
            reply[t.at] |= FLAG_M;
            out.malformed = true;
            return out;
        }
        let v = t.value_at();
        match t.kind {
            kind::EXTRA_PADDING | kind::ACCESS_REPORT | kind::HMAC => {}
            kind::LOCATION => fill_location(reply, t, fill),
            kind::TIMESTAMP_INFO => {
                reply[v] = fill.sync_source;
                reply[v + 1] = fill.rx_method;
                reply[v + 2] = fill.sync_source;
                reply[v + 3] = fill.tx_method;
            }
            kind::CLASS_OF_SERVICE => {
                // DSCP1 is what the sender asks the reply to carry; DSCP2
                // and ECN are what arrived (erratum 8199). Every DSCP is
                // allowed here, so RP stays 0.
                out.dscp = Some(reply[v] >> 2);
                let word = u16::from_be_bytes([reply[v], reply[v + 1]]);
                let (dscp2, ecn) = fill
                    .tos
                    .map_or((0, 0), |tos| (u16::from(tos >> 2), u16::from(tos & 3)));
                let word = (word & 0xfc00) | (dscp2 << 4) | (ecn << 2);
                reply[v..v + 2].copy_from_slice(&word.to_be_bytes());
            }
            kind::DIRECT_MEASUREMENT => {
                reply[v + 4..v + 8].copy_from_slice(&fill.counters.0.to_be_bytes());
                reply[v + 8..v + 12].copy_from_slice(&fill.counters.1.to_be_bytes());
            }
            kind::FOLLOW_UP => {
                // A stateless reflector zeroes both fields.
                let (seq, ts, mode) = fill.previous.unwrap_or((0, 0, 0));
                reply[v..v + 4].copy_from_slice(&seq.to_be_bytes());
                reply[v + 4..v + 12].copy_from_slice(&ts.to_be_bytes());
                reply[v + 12] = mode;
                reply[v + 13..v + 16].fill(0);
            }
            _ => {
                reply[t.at] |= FLAG_U;
                out.unrecognised += 1;
            }
        }
    }
    if let Some(at) = walk.broken {
        reply[at] |= FLAG_M;
        out.malformed = true;
    }
    out
}

/// Location sub-TLV types (RFC 8972 §4.2): what a request asks for, and
/// what the reflector answers with.
pub mod location {
    /// Source MAC (request); answered as Source EUI-48.
    pub const SOURCE_MAC: u8 = 1;
    /// Source EUI-48.
    pub const SOURCE_EUI48: u8 = 2;
    /// Destination IP (request).
    pub const DEST_IP: u8 = 4;
    /// Destination IPv4.
    pub const DEST_IPV4: u8 = 5;
    /// Destination IPv6.
    pub const DEST_IPV6: u8 = 6;
    /// Source IP (request).
    pub const SOURCE_IP: u8 = 7;
    /// Source IPv4.
    pub const SOURCE_IPV4: u8 = 8;
    /// Source IPv6.
    pub const SOURCE_IPV6: u8 = 9;
}

/// Fills a Location TLV: the request's destination and source ports, and
/// its addresses in the sub-TLVs that ask for them (the MAC is not known
/// to a UDP socket and stays zero).
fn fill_location(reply: &mut [u8], t: &Tlv, fill: &Fill) {
    let v = t.value_at();
    reply[v..v + 2].copy_from_slice(&fill.ports.0.to_be_bytes());
    reply[v + 2..v + 4].copy_from_slice(&fill.ports.1.to_be_bytes());
    let end = v + t.len;
    let mut at = v + 4;
    while at + HEADER <= end {
        let len = usize::from(u16::from_be_bytes([reply[at + 2], reply[at + 3]]));
        if at + HEADER + len > end {
            reply[at] |= FLAG_M;
            return;
        }
        reply[at] = 0;
        let val = at + HEADER;
        let addr = |dst: bool| fill.addrs.map(|(d, s)| if dst { d } else { s });
        let (kind, ip) = match reply[at + 1] {
            location::DEST_IP => (None, addr(true)),
            location::SOURCE_IP => (None, addr(false)),
            location::SOURCE_MAC => (Some(location::SOURCE_EUI48), None),
            _ => (None, None),
        };
        if len == 16
            && let Some(ip) = ip
        {
            let dst = reply[at + 1] == location::DEST_IP;
            reply[val..val + 16].fill(0);
            reply[at + 1] = match (ip, dst) {
                (std::net::IpAddr::V4(a), true) => {
                    reply[val..val + 4].copy_from_slice(&a.octets());
                    location::DEST_IPV4
                }
                (std::net::IpAddr::V4(a), false) => {
                    reply[val..val + 4].copy_from_slice(&a.octets());
                    location::SOURCE_IPV4
                }
                (std::net::IpAddr::V6(a), true) => {
                    reply[val..val + 16].copy_from_slice(&a.octets());
                    location::DEST_IPV6
                }
                (std::net::IpAddr::V6(a), false) => {
                    reply[val..val + 16].copy_from_slice(&a.octets());
                    location::SOURCE_IPV6
                }
            };
        } else if let Some(k) = kind {
            reply[at + 1] = k;
        }
        at += HEADER + len;
    }
}

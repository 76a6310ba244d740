//! The base STAMP test packets (RFC 8762 §4.2 and §4.3, with the SSID of
//! RFC 8972 §3), in unauthenticated (44 octets) and authenticated (112
//! octets, HMAC-SHA-256 truncated to 128 bits) mode. TLVs follow the base
//! packet (see [`crate::tlv`]).

use std::fmt;
use std::path::Path;

use ring::hmac;

use crate::time::ErrorEstimate;

/// Length of an unauthenticated base packet, sender's and reflector's.
pub const OPEN_LEN: usize = 44;
/// Length of an authenticated base packet, sender's and reflector's.
pub const AUTH_LEN: usize = 112;
/// Octets the base packet's HMAC covers in authenticated mode: everything
/// before it (RFC 8762 §4.2.2, §4.3.2).
pub const HMAC_COVERS: usize = 96;
/// Length of the (truncated) HMAC.
pub const HMAC_LEN: usize = 16;

/// Unauthenticated or authenticated mode (RFC 8762 §4.2.1, §4.2.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Mode {
    /// No HMAC; 44-octet base packets.
    #[default]
    Open,
    /// HMAC-SHA-256 over the base packet (and an HMAC TLV over the TLVs);
    /// 112-octet base packets.
    Authenticated,
}

impl Mode {
    /// Authenticated when there is a key.
    pub fn of(key: Option<&Key>) -> Self {
        if key.is_some() {
            Self::Authenticated
        } else {
            Self::Open
        }
    }

    /// Length of this mode's base packet.
    pub fn base_len(self) -> usize {
        match self {
            Self::Open => OPEN_LEN,
            Self::Authenticated => AUTH_LEN,
        }
    }

    /// `unauthenticated` or `authenticated`, as shown in settings.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Open => "unauthenticated",
            Self::Authenticated => "authenticated",
        }
    }
}

/// The HMAC key of authenticated mode. RFC 8762 leaves key management out
/// of scope; prober reads the key from a file (never from the command line,
/// where `ps` shows it): the file's bytes, without one trailing newline.
#[derive(Clone)]
pub struct Key(hmac::Key);

impl fmt::Debug for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Key(..)")
    }
}

impl Key {
    /// A key of these bytes.
    pub fn new(bytes: &[u8]) -> Self {
        Self(hmac::Key::new(hmac::HMAC_SHA256, bytes))
    }

    /// Reads the key file.
    ///
    /// # Errors
    /// A file that cannot be read, or that is empty.
    pub fn from_file(path: &Path) -> Result<Self, String> {
        let bytes = std::fs::read(path)
            .map_err(|e| format!("reading the STAMP key {}: {e}", path.display()))?;
        let bytes = bytes.strip_suffix(b"\n").unwrap_or(&bytes);
        let bytes = bytes.strip_suffix(b"\r").unwrap_or(bytes);
        if bytes.is_empty() {
            return Err(format!("the STAMP key file {} is empty", path.display()));
        }
        Ok(Self::new(bytes))
    }

    /// HMAC-SHA-256 of `data`, truncated to 128 bits.
    pub fn tag(&self, data: &[u8]) -> [u8; HMAC_LEN] {
        let full = hmac::sign(&self.0, data);
        let mut out = [0u8; HMAC_LEN];
        out.copy_from_slice(&full.as_ref()[..HMAC_LEN]);
        out
    }

    /// True when `tag` is the truncated HMAC of `data`, compared in
    /// constant time.
    pub fn verify(&self, data: &[u8], tag: &[u8]) -> bool {
        use subtle::ConstantTimeEq as _;
        tag.len() == HMAC_LEN && bool::from(self.tag(data).ct_eq(tag))
    }
}

/// Why a packet was not accepted. The reflector counts drops by
/// [`Reject::reason`]; the sender counts a rejected reply as corrupt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reject {
    /// Shorter than the mode's base packet.
    Short,
    /// A packet of the other mode: an authenticated one (zeros where an
    /// unauthenticated packet has its timestamp and error estimate) at an
    /// unauthenticated reflector, or the reverse.
    Mode,
    /// The base packet's HMAC does not match.
    Hmac,
    /// More TLVs than [`crate::tlv::MAX_TLVS`].
    TooManyTlvs,
    /// The Error Estimate's multiplier is 0 (RFC 4656 forbids it), or a PTP
    /// timestamp's nanoseconds are a second or more.
    BadTimestamp,
}

impl Reject {
    /// Every reason, for counters that show zeros too.
    pub const ALL: [Self; 5] = [
        Self::Short,
        Self::Mode,
        Self::Hmac,
        Self::TooManyTlvs,
        Self::BadTimestamp,
    ];

    /// The reason as a label: `short`, `mode`, `hmac`, ...
    pub fn reason(self) -> &'static str {
        match self {
            Self::Short => "short",
            Self::Mode => "mode",
            Self::Hmac => "hmac",
            Self::TooManyTlvs => "too_many_tlvs",
            Self::BadTimestamp => "bad_timestamp",
        }
    }
}

impl fmt::Display for Reject {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Short => "shorter than a STAMP base packet",
            Self::Mode => "a packet of the other mode (authenticated or not)",
            Self::Hmac => "HMAC does not match",
            Self::TooManyTlvs => "too many TLVs",
            Self::BadTimestamp => "malformed timestamp or error estimate",
        })
    }
}

/// Where each field sits in a base packet of one mode and direction.
struct Layout {
    seq: usize,
    ts: usize,
    err: usize,
    ssid: usize,
    // Reflector only.
    recv: usize,
    sseq: usize,
    sts: usize,
    serr: usize,
    ttl: usize,
}

const OPEN: Layout = Layout {
    seq: 0,
    ts: 4,
    err: 12,
    ssid: 14,
    recv: 16,
    sseq: 24,
    sts: 28,
    serr: 36,
    ttl: 40,
};

const AUTH: Layout = Layout {
    seq: 0,
    ts: 16,
    err: 24,
    ssid: 26,
    recv: 32,
    sseq: 48,
    sts: 64,
    serr: 72,
    ttl: 80,
};

fn layout(mode: Mode) -> &'static Layout {
    match mode {
        Mode::Open => &OPEN,
        Mode::Authenticated => &AUTH,
    }
}

fn get_u16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}

fn get_u32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

fn get_u64(b: &[u8], at: usize) -> u64 {
    let mut x = [0u8; 8];
    x.copy_from_slice(&b[at..at + 8]);
    u64::from_be_bytes(x)
}

fn put(b: &mut [u8], at: usize, v: &[u8]) {
    b[at..at + v.len()].copy_from_slice(v);
}

/// Writes the HMAC of the base packet's first 96 octets after them.
fn sign(buf: &mut [u8], key: &Key) {
    let tag = key.tag(&buf[..HMAC_COVERS]);
    put(buf, HMAC_COVERS, &tag);
}

/// Checks a base packet's length and, in authenticated mode, its HMAC.
fn check(buf: &[u8], mode: Mode, key: Option<&Key>) -> Result<(), Reject> {
    if buf.len() < mode.base_len() {
        return Err(Reject::Short);
    }
    match (mode, key) {
        (Mode::Authenticated, Some(key))
            if !key.verify(&buf[..HMAC_COVERS], &buf[HMAC_COVERS..AUTH_LEN]) =>
        {
            Err(Reject::Hmac)
        }
        _ => Ok(()),
    }
}

/// A Session-Sender test packet's base fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SenderPacket {
    /// Sequence Number.
    pub seq: u32,
    /// T1 as the sender wrote it.
    pub timestamp: u64,
    /// The sender's Error Estimate.
    pub error: ErrorEstimate,
    /// STAMP Session Identifier (RFC 8972 §3).
    pub ssid: u16,
}

impl SenderPacket {
    /// Writes the base packet into `buf[..mode.base_len()]` (MBZ fields
    /// zeroed) and, in authenticated mode, its HMAC.
    ///
    /// # Panics
    /// If `buf` is shorter than the base packet.
    pub fn write(&self, buf: &mut [u8], mode: Mode, key: Option<&Key>) {
        let l = layout(mode);
        buf[..mode.base_len()].fill(0);
        put(buf, l.seq, &self.seq.to_be_bytes());
        put(buf, l.ts, &self.timestamp.to_be_bytes());
        put(buf, l.err, &self.error.0.to_be_bytes());
        put(buf, l.ssid, &self.ssid.to_be_bytes());
        if let (Mode::Authenticated, Some(key)) = (mode, key) {
            sign(buf, key);
        }
    }

    /// Reads a sender packet's base fields, checking the HMAC in
    /// authenticated mode.
    ///
    /// # Errors
    /// A packet shorter than the base packet, or a wrong HMAC.
    pub fn read(buf: &[u8], mode: Mode, key: Option<&Key>) -> Result<Self, Reject> {
        if buf.len() < mode.base_len() {
            return Err(Reject::Short);
        }
        // The first 16 octets tell the modes apart: an authenticated packet
        // has 12 MBZ octets where an unauthenticated one has its timestamp
        // and error estimate, which are never all zero.
        let other_mode = buf[4..14].iter().all(|b| *b == 0);
        if other_mode == (mode == Mode::Open) {
            return Err(Reject::Mode);
        }
        check(buf, mode, key)?;
        let l = layout(mode);
        Ok(Self {
            seq: get_u32(buf, l.seq),
            timestamp: get_u64(buf, l.ts),
            error: ErrorEstimate(get_u16(buf, l.err)),
            ssid: get_u16(buf, l.ssid),
        })
    }
}

/// A Session-Reflector test packet's base fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReflectorPacket {
    /// The reflector's Sequence Number: its own count in stateful mode, the
    /// sender's in stateless mode.
    pub seq: u32,
    /// T3: the reflector's transmit time.
    pub timestamp: u64,
    /// The reflector's Error Estimate (its format is T2's and T3's).
    pub error: ErrorEstimate,
    /// The session's SSID, copied from the request.
    pub ssid: u16,
    /// T2: the reflector's receive time.
    pub receive: u64,
    /// The sender's Sequence Number, copied.
    pub sender_seq: u32,
    /// T1 as the sender wrote it, copied.
    pub sender_timestamp: u64,
    /// The sender's Error Estimate, copied.
    pub sender_error: ErrorEstimate,
    /// The request's IP TTL or hop limit as the reflector received it.
    pub sender_ttl: u8,
}

impl ReflectorPacket {
    /// Writes the base packet into `buf[..mode.base_len()]` (MBZ fields
    /// zeroed) and, in authenticated mode, its HMAC.
    ///
    /// # Panics
    /// If `buf` is shorter than the base packet.
    pub fn write(&self, buf: &mut [u8], mode: Mode, key: Option<&Key>) {
        let l = layout(mode);
        buf[..mode.base_len()].fill(0);
        put(buf, l.seq, &self.seq.to_be_bytes());
        put(buf, l.ts, &self.timestamp.to_be_bytes());
        put(buf, l.err, &self.error.0.to_be_bytes());
        put(buf, l.ssid, &self.ssid.to_be_bytes());
        put(buf, l.recv, &self.receive.to_be_bytes());
        put(buf, l.sseq, &self.sender_seq.to_be_bytes());
        put(buf, l.sts, &self.sender_timestamp.to_be_bytes());
        put(buf, l.serr, &self.sender_error.0.to_be_bytes());
        buf[l.ttl] = self.sender_ttl;
        if let (Mode::Authenticated, Some(key)) = (mode, key) {
            sign(buf, key);
        }
    }

    /// Reads a reflector packet's base fields, checking the HMAC in
    /// authenticated mode.
    ///
    /// # Errors
    /// A packet shorter than the base packet, or a wrong HMAC.
    pub fn read(buf: &[u8], mode: Mode, key: Option<&Key>) -> Result<Self, Reject> {
        check(buf, mode, key)?;
        let l = layout(mode);
        Ok(Self {
            seq: get_u32(buf, l.seq),
            timestamp: get_u64(buf, l.ts),
            error: ErrorEstimate(get_u16(buf, l.err)),
            ssid: get_u16(buf, l.ssid),
            receive: get_u64(buf, l.recv),
            sender_seq: get_u32(buf, l.sseq),
            sender_timestamp: get_u64(buf, l.sts),
            sender_error: ErrorEstimate(get_u16(buf, l.serr)),
            sender_ttl: buf[l.ttl],
        })
    }
}

//! The request/response frame used by `tcp://`, `tcp-crr://` and `udp://`.
//! The layout is documented in `docs/wire-format.md`.

use std::fmt;

/// First four bytes of every frame.
pub const MAGIC: [u8; 4] = *b"PRBR";
/// The only version this build speaks.
pub const VERSION: u8 = 1;
/// Bytes of the fixed header; the smallest legal frame.
pub const HEADER_LEN: usize = 40;
/// Largest frame over TCP (1 MiB); larger frames close the connection.
pub const MAX_TCP_FRAME: usize = 1 << 20;
/// Largest frame over UDP: the largest IPv4 UDP payload.
pub const MAX_UDP_FRAME: usize = 65_507;

/// Whether a frame asks or answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Sent by the prober; the responder answers it.
    Request = 1,
    /// Sent by the responder; never answered.
    Response = 2,
    /// Sent by the responder after a response whose request asked for it
    /// ([`FLAG_WANT_FOLLOW_UP`]): the response's transmit stamp.
    FollowUp = 3,
    /// Sent by the prober over TCP once it has read a response whose
    /// follow-up waits for it ([`FLAG_WAITS_FOR_ASK`]): send it now.
    Ask = 4,
}

/// The decoded fixed header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// Request or response.
    pub kind: Kind,
    /// Total frame length in bytes, header included.
    pub len: u32,
    /// The probe's sequence number.
    pub seq: u64,
    /// Per-run random number, so replies to another run are not matched.
    pub nonce: u64,
    /// Responder's receive-to-send time in ns (0 in requests).
    pub dwell_ns: u64,
}

/// Why bytes are not a frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FrameError {
    /// Fewer bytes than a header.
    #[error("frame of {0} bytes is shorter than the {HEADER_LEN}-byte header")]
    Short(usize),
    /// The magic is not `PRBR`.
    #[error("frame does not start with the prober magic")]
    BadMagic,
    /// An unknown version.
    #[error("unsupported frame version {0}")]
    BadVersion(u8),
    /// An unknown kind.
    #[error("unknown frame kind {0}")]
    BadKind(u8),
    /// The length field is below the header or above the limit.
    #[error("frame length {len} is outside {HEADER_LEN}..={max}")]
    BadLength {
        /// The length field.
        len: u32,
        /// The limit that applied.
        max: usize,
    },
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Request => "request",
            Self::Response => "response",
            Self::FollowUp => "follow-up",
            Self::Ask => "ask",
        })
    }
}

fn be64(b: &[u8]) -> u64 {
    u64::from_be_bytes(b[..8].try_into().expect("slice of 8 bytes"))
}

impl Header {
    /// Decodes the header at the start of `buf`, accepting lengths up to `max`.
    ///
    /// # Errors
    /// A [`FrameError`] naming the first problem.
    pub fn decode(buf: &[u8], max: usize) -> Result<Self, FrameError> {
        if buf.len() < HEADER_LEN {
            return Err(FrameError::Short(buf.len()));
        }
        if buf[..4] != MAGIC {
            return Err(FrameError::BadMagic);
        }
        if buf[4] != VERSION {
            return Err(FrameError::BadVersion(buf[4]));
        }
        let kind = match buf[5] {
            1 => Kind::Request,
            2 => Kind::Response,
            3 => Kind::FollowUp,
            4 => Kind::Ask,
            k => return Err(FrameError::BadKind(k)),
        };
        let len = u32::from_be_bytes(buf[8..12].try_into().expect("slice of 4 bytes"));
        if (len as usize) < HEADER_LEN || len as usize > max {
            return Err(FrameError::BadLength { len, max });
        }
        Ok(Self {
            kind,
            len,
            seq: be64(&buf[16..]),
            nonce: be64(&buf[24..]),
            dwell_ns: be64(&buf[32..]),
        })
    }

    /// Writes this header into the first [`HEADER_LEN`] bytes of `buf`.
    ///
    /// # Panics
    /// If `buf` is shorter than the header.
    pub fn encode(&self, buf: &mut [u8]) {
        buf[..4].copy_from_slice(&MAGIC);
        buf[4] = VERSION;
        buf[5] = self.kind as u8;
        buf[6..8].fill(0);
        buf[8..12].copy_from_slice(&self.len.to_be_bytes());
        buf[12..16].fill(0);
        buf[16..24].copy_from_slice(&self.seq.to_be_bytes());
        buf[24..32].copy_from_slice(&self.nonce.to_be_bytes());
        buf[32..40].copy_from_slice(&self.dwell_ns.to_be_bytes());
    }
}

/// Request flag (bytes 6..8): the client asks for the responder's
/// timestamps (version 2 of the exchange, still sent as version 1 so that
/// version 1 responders answer it; they echo the flag and nothing more).
pub const FLAG_WANT_STAMPS: u16 = 0x0001;

/// Response flag: the responder filled in its timestamps.
pub const FLAG_STAMPS: u16 = 0x0002;

/// Smallest frame that carries the responder's timestamps: the header, then
/// `wake_ns` (u32, t2 − t2k, `u32::MAX` when unknown) and 4 reserved bytes.
pub const STAMPED_LEN: usize = HEADER_LEN + 8;

/// The flags of a frame (bytes 6..8).
pub fn flags(frame: &[u8]) -> u16 {
    frame
        .get(6..8)
        .map_or(0, |b| u16::from_be_bytes([b[0], b[1]]))
}

/// Asks the responder for its timestamps, if the frame has room for them.
pub fn want_stamps(frame: &mut [u8]) {
    if frame.len() >= STAMPED_LEN {
        let f = flags(frame) | FLAG_WANT_STAMPS;
        frame[6..8].copy_from_slice(&f.to_be_bytes());
    }
}

/// Request flag: send the response's transmit stamp (t3k − t3) in a
/// follow-up frame.
pub const FLAG_WANT_FOLLOW_UP: u16 = 0x0004;

/// Response flag: a follow-up frame with this response's transmit stamp
/// comes next.
pub const FLAG_FOLLOW_UP: u16 = 0x0008;

/// Length of a follow-up frame: the header and the timestamp block.
pub const FOLLOW_UP_LEN: usize = STAMPED_LEN;

/// Sets [`FLAG_WANT_FOLLOW_UP`] (with [`FLAG_WANT_STAMPS`]) in a request of
/// at least [`STAMPED_LEN`] bytes.
pub fn want_follow_up(frame: &mut [u8]) {
    if frame.len() >= STAMPED_LEN {
        let f = flags(frame) | FLAG_WANT_STAMPS | FLAG_WANT_FOLLOW_UP;
        frame[6..8].copy_from_slice(&f.to_be_bytes());
    }
}

/// Request flag (TCP): send the follow-up frame only when I ask for it
/// with an [`Kind::Ask`] frame, which I send once I have read the
/// response. A follow-up sent right behind a response often arrives before
/// the client has read the response; TCP then merges the two segments and
/// the response's receive stamp becomes the follow-up's.
pub const FLAG_FOLLOW_UP_ON_ASK: u16 = 0x0010;

/// Response flag: the follow-up this response promises waits for an ask.
pub const FLAG_WAITS_FOR_ASK: u16 = 0x0020;

/// Length of an ask frame: the header alone.
pub const ASK_LEN: usize = HEADER_LEN;

/// Sets [`FLAG_FOLLOW_UP_ON_ASK`] (with [`want_follow_up`]'s flags) in a
/// request of at least [`STAMPED_LEN`] bytes.
pub fn want_follow_up_on_ask(frame: &mut [u8]) {
    if frame.len() >= STAMPED_LEN {
        want_follow_up(frame);
        let f = flags(frame) | FLAG_FOLLOW_UP_ON_ASK;
        frame[6..8].copy_from_slice(&f.to_be_bytes());
    }
}

/// True when a response's follow-up waits for an [`Kind::Ask`] frame.
pub fn waits_for_ask(frame: &[u8]) -> bool {
    follow_up_promised(frame) && flags(frame) & FLAG_WAITS_FOR_ASK != 0
}

/// Writes the ask frame for the response to (`seq`, `nonce`).
pub fn encode_ask(buf: &mut Vec<u8>, seq: u64, nonce: u64) {
    buf.clear();
    buf.resize(ASK_LEN, 0);
    Header {
        kind: Kind::Ask,
        len: ASK_LEN as u32,
        seq,
        nonce,
        dwell_ns: 0,
    }
    .encode(buf);
}

/// Request flag: the response's transmit stamp may instead ride in a later
/// response on the same flow (the UDP source, the TCP connection), as in
/// NTP's interleaved mode, or come in a follow-up frame when asked for. A
/// closed loop then sends no extra frame at all. Set with
/// [`want_follow_up_on_ask`]'s flags, in requests of at least
/// [`INTERLEAVED_LEN`] bytes.
pub const FLAG_WANT_INTERLEAVED: u16 = 0x0040;

/// Response flag: this response's transmit stamp comes in a later
/// response's carried block, or in a follow-up frame once asked for.
pub const FLAG_INTERLEAVED: u16 = 0x0080;

/// Response flag: bytes 48..64 carry an earlier response's transmit
/// stamp: its seq (u64) and send_ns (u32, t3k − t3, `u32::MAX` when
/// unknown), then 4 reserved bytes.
pub const FLAG_CARRIES: u16 = 0x0100;

/// Smallest frame that takes part in the interleaved exchange: the
/// stamped header and the carried block.
pub const INTERLEAVED_LEN: usize = STAMPED_LEN + 16;

/// Sets [`FLAG_WANT_INTERLEAVED`] (with [`want_follow_up_on_ask`]'s flags,
/// so that a responder from before it asks for an ask instead) in a
/// request of at least [`INTERLEAVED_LEN`] bytes; a shorter one gets the
/// ask's flags alone.
pub fn want_interleaved(frame: &mut [u8]) {
    want_follow_up_on_ask(frame);
    if frame.len() >= INTERLEAVED_LEN {
        let f = flags(frame) | FLAG_WANT_INTERLEAVED;
        frame[6..8].copy_from_slice(&f.to_be_bytes());
    }
}

/// True when a request (or its response) asks for the interleaved
/// exchange and has room for it.
pub fn wants_interleaved(frame: &[u8]) -> bool {
    flags(frame) & FLAG_WANT_INTERLEAVED != 0 && frame.len() >= INTERLEAVED_LEN
}

/// True when a response's transmit stamp comes later: in a later
/// response's carried block, or on ask.
pub fn interleaved(frame: &[u8]) -> bool {
    follow_up_promised(frame) && flags(frame) & FLAG_INTERLEAVED != 0
}

/// Writes an earlier response's seq and transmit stamp into a response to
/// a request that asked for the interleaved exchange, and says so with
/// [`FLAG_CARRIES`]. False (and the frame unchanged) where the request did
/// not ask or has no room.
pub fn carry(frame: &mut [u8], seq: u64, send_ns: Option<u64>) -> bool {
    if !wants_interleaved(frame) {
        return false;
    }
    let f = flags(frame) | FLAG_CARRIES;
    frame[6..8].copy_from_slice(&f.to_be_bytes());
    frame[STAMPED_LEN..STAMPED_LEN + 8].copy_from_slice(&seq.to_be_bytes());
    let v = send_ns.map_or(u32::MAX, |s| u32::try_from(s).unwrap_or(u32::MAX));
    frame[STAMPED_LEN + 8..STAMPED_LEN + 12].copy_from_slice(&v.to_be_bytes());
    frame[STAMPED_LEN + 12..INTERLEAVED_LEN].fill(0);
    true
}

/// The earlier response's seq and transmit stamp (t3k − t3) that a
/// response carries, if it does.
pub fn carried(frame: &[u8]) -> Option<(u64, Option<u64>)> {
    if flags(frame) & FLAG_CARRIES == 0 || frame.len() < INTERLEAVED_LEN {
        return None;
    }
    let seq = be64(&frame[STAMPED_LEN..STAMPED_LEN + 8]);
    let v = u32::from_be_bytes(frame[STAMPED_LEN + 8..STAMPED_LEN + 12].try_into().ok()?);
    Some((seq, (v != u32::MAX).then_some(u64::from(v))))
}

/// True when a response promises a follow-up frame.
pub fn follow_up_promised(frame: &[u8]) -> bool {
    flags(frame) & FLAG_FOLLOW_UP != 0
}

/// Writes the follow-up frame for the response to (`seq`, `nonce`):
/// `send_ns` = t3k − t3, the responder's send call to its kernel's
/// transmit stamp (`None`: its kernel gave no stamp).
pub fn encode_follow_up(buf: &mut Vec<u8>, seq: u64, nonce: u64, send_ns: Option<u64>) {
    buf.clear();
    buf.resize(FOLLOW_UP_LEN, 0);
    Header {
        kind: Kind::FollowUp,
        len: FOLLOW_UP_LEN as u32,
        seq,
        nonce,
        dwell_ns: 0,
    }
    .encode(buf);
    buf[6..8].copy_from_slice(&FLAG_STAMPS.to_be_bytes());
    let v = send_ns.map_or(u32::MAX, |s| u32::try_from(s).unwrap_or(u32::MAX));
    buf[HEADER_LEN..HEADER_LEN + 4].copy_from_slice(&v.to_be_bytes());
}

/// The responder send part (t3k − t3) a follow-up frame carries.
pub fn follow_up_send(frame: &[u8]) -> Option<u64> {
    let v = u32::from_be_bytes(frame.get(HEADER_LEN..HEADER_LEN + 4)?.try_into().ok()?);
    (v != u32::MAX).then_some(u64::from(v))
}

/// The responder's wake-up (t2 − t2k, ns) a version 2 response carries.
pub fn responder_wake(frame: &[u8]) -> Option<u64> {
    if flags(frame) & FLAG_STAMPS == 0 {
        return None;
    }
    let w = u32::from_be_bytes(frame.get(HEADER_LEN..HEADER_LEN + 4)?.try_into().ok()?);
    (w != u32::MAX).then_some(u64::from(w))
}

/// Fills `buf` with a request frame of `size` bytes (zero padding).
///
/// # Panics
/// If `size` is below [`HEADER_LEN`] or does not fit in 32 bits; callers
/// validate sizes up front.
pub fn encode_request(buf: &mut Vec<u8>, size: usize, seq: u64, nonce: u64) {
    assert!(size >= HEADER_LEN, "frame size below the header");
    buf.clear();
    buf.resize(size, 0);
    let len = u32::try_from(size).expect("frame size fits in u32");
    Header {
        kind: Kind::Request,
        len,
        seq,
        nonce,
        dwell_ns: 0,
    }
    .encode(buf);
}

/// Turns a request frame in place into its response: kind and dwell change,
/// the rest (seq, nonce, padding) is echoed.
pub fn make_response(frame: &mut [u8], dwell_ns: u64) {
    frame[5] = Kind::Response as u8;
    frame[32..40].copy_from_slice(&dwell_ns.to_be_bytes());
}

/// As [`make_response`]; a request that asks for timestamps (and has room)
/// also gets the responder's wake-up (t2 − t2k, `None` when its kernel gave
/// no stamp) and the [`FLAG_STAMPS`] flag.
pub fn make_stamped_response(frame: &mut [u8], dwell_ns: u64, wake_ns: Option<u64>) {
    make_followed_response(frame, dwell_ns, wake_ns, false, false);
}

/// As [`make_stamped_response`]; with `follow_up` (the responder will send
/// this response's transmit stamp) the response says a follow-up comes,
/// where the request asked for one; with `on_ask` too (a TCP responder
/// that can hold it), that it waits for an ask, where the request said so.
pub fn make_followed_response(
    frame: &mut [u8],
    dwell_ns: u64,
    wake_ns: Option<u64>,
    follow_up: bool,
    on_ask: bool,
) {
    make_response(frame, dwell_ns);
    if flags(frame) & FLAG_WANT_STAMPS != 0 && frame.len() >= STAMPED_LEN {
        let mut f = flags(frame) | FLAG_STAMPS;
        if follow_up && f & FLAG_WANT_FOLLOW_UP != 0 {
            f |= FLAG_FOLLOW_UP;
            if wants_interleaved(frame) {
                f |= FLAG_INTERLEAVED;
            } else if on_ask && f & FLAG_FOLLOW_UP_ON_ASK != 0 {
                f |= FLAG_WAITS_FOR_ASK;
            }
        }
        frame[6..8].copy_from_slice(&f.to_be_bytes());
        // A wake-up too long for the field is unknown, not clamped.
        let w = wake_ns.map_or(u32::MAX, |w| u32::try_from(w).unwrap_or(u32::MAX));
        frame[HEADER_LEN..HEADER_LEN + 4].copy_from_slice(&w.to_be_bytes());
        frame[HEADER_LEN + 4..STAMPED_LEN].fill(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ask_is_negotiated_both_ways() {
        let mut req = Vec::new();
        encode_request(&mut req, 64, 7, 9);
        want_follow_up_on_ask(&mut req);
        // A responder from before the ask sends its follow-up unasked, and
        // its response says only that one comes: the client does not ask.
        let mut old = req.clone();
        make_followed_response(&mut old, 1_000, Some(2_000), true, false);
        assert!(follow_up_promised(&old) && !waits_for_ask(&old));
        // One that waits says so.
        let mut new = req.clone();
        make_followed_response(&mut new, 1_000, Some(2_000), true, true);
        assert!(waits_for_ask(&new));
        // A client that does not say it will ask is never made to wait.
        let mut plain = Vec::new();
        encode_request(&mut plain, 64, 7, 9);
        want_follow_up(&mut plain);
        make_followed_response(&mut plain, 1_000, Some(2_000), true, true);
        assert!(follow_up_promised(&plain) && !waits_for_ask(&plain));
        // No room for stamps: no flags at all.
        let mut small = Vec::new();
        encode_request(&mut small, HEADER_LEN, 7, 9);
        want_follow_up_on_ask(&mut small);
        assert_eq!(flags(&small), 0);
        // The ask frame decodes as such.
        let mut ask = Vec::new();
        encode_ask(&mut ask, 7, 9);
        let h = Header::decode(&ask, MAX_TCP_FRAME).unwrap();
        assert_eq!((h.kind, h.seq, h.nonce, h.len), (Kind::Ask, 7, 9, 40));
    }

    #[test]
    fn stamps_are_negotiated_both_ways() {
        // A version 2 client asks; a version 1 responder only echoes.
        let mut req = Vec::new();
        encode_request(&mut req, 64, 7, 9);
        want_stamps(&mut req);
        let mut v1 = req.clone();
        make_response(&mut v1, 1_000);
        assert_eq!(
            responder_wake(&v1),
            None,
            "a v1 responder carries no stamps"
        );
        assert_eq!(Header::decode(&v1, MAX_UDP_FRAME).unwrap().dwell_ns, 1_000);
        // A version 2 responder fills them in.
        let mut v2 = req.clone();
        make_stamped_response(&mut v2, 1_000, Some(2_500));
        assert_eq!(responder_wake(&v2), Some(2_500));
        let mut unknown = req;
        make_stamped_response(&mut unknown, 1_000, None);
        assert_eq!(responder_wake(&unknown), None);
        assert_eq!(flags(&unknown) & FLAG_STAMPS, FLAG_STAMPS);
        // A version 1 client does not ask: the v2 response is a v1 response.
        let mut old = Vec::new();
        encode_request(&mut old, 64, 7, 9);
        let (mut a, mut b) = (old.clone(), old);
        make_response(&mut a, 1_000);
        make_stamped_response(&mut b, 1_000, Some(2_500));
        assert_eq!(a, b, "byte for byte");
        // A frame too short for the block never asks.
        let mut short = Vec::new();
        encode_request(&mut short, HEADER_LEN, 1, 1);
        want_stamps(&mut short);
        assert_eq!(flags(&short), 0);
    }

    #[test]
    fn the_interleaved_exchange_is_negotiated_both_ways() {
        let mut req = Vec::new();
        encode_request(&mut req, 64, 7, 9);
        want_interleaved(&mut req);
        assert!(wants_interleaved(&req));
        assert_eq!(
            flags(&req),
            FLAG_WANT_STAMPS | FLAG_WANT_FOLLOW_UP | FLAG_FOLLOW_UP_ON_ASK | FLAG_WANT_INTERLEAVED
        );
        // A responder from before it answers as it did to the ask's flags:
        // the client asks at once.
        let mut before = req.clone();
        before[6..8].copy_from_slice(&(flags(&req) & !FLAG_WANT_INTERLEAVED).to_be_bytes());
        make_followed_response(&mut before, 1_000, None, true, true);
        let f = flags(&before) | FLAG_WANT_INTERLEAVED; // as echoed
        before[6..8].copy_from_slice(&f.to_be_bytes());
        assert!(waits_for_ask(&before) && !interleaved(&before));
        assert_eq!(carried(&before), None);
        // A version 1 responder echoes every flag and promises nothing.
        let mut v1 = req.clone();
        make_response(&mut v1, 1_000);
        assert!(!interleaved(&v1) && !follow_up_promised(&v1));
        assert_eq!(carried(&v1), None);
        // One that knows it, over TCP or UDP.
        for on_ask in [true, false] {
            let mut now = req.clone();
            make_followed_response(&mut now, 1_000, Some(2_000), true, on_ask);
            assert!(interleaved(&now) && !waits_for_ask(&now));
            assert_eq!(carried(&now), None, "nothing carried yet");
            assert!(carry(&mut now, 6, Some(3_000)));
            assert_eq!(carried(&now), Some((6, Some(3_000))));
            assert_eq!(responder_wake(&now), Some(2_000), "the block is apart");
            assert!(carry(&mut now, 6, None));
            assert_eq!(carried(&now), Some((6, None)));
        }
        // No room: the ask's flags alone, and nothing is carried.
        let mut short = Vec::new();
        encode_request(&mut short, 48, 7, 9);
        want_interleaved(&mut short);
        assert!(!wants_interleaved(&short));
        make_followed_response(&mut short, 1_000, None, true, true);
        assert!(waits_for_ask(&short) && !interleaved(&short));
        assert!(!carry(&mut short, 6, Some(1)));
        // A request that did not ask never carries.
        let mut plain = Vec::new();
        encode_request(&mut plain, 64, 7, 9);
        want_follow_up_on_ask(&mut plain);
        make_followed_response(&mut plain, 1_000, None, true, true);
        assert!(!carry(&mut plain, 6, Some(1)));
        assert_eq!(carried(&plain), None);
    }

    #[test]
    fn follow_ups_are_negotiated_both_ways() {
        let mut req = Vec::new();
        encode_request(&mut req, 64, 7, 9);
        want_follow_up(&mut req);
        assert_eq!(flags(&req), FLAG_WANT_STAMPS | FLAG_WANT_FOLLOW_UP);
        // A version 1 responder echoes the flags: no promise, no wait.
        let mut v1 = req.clone();
        make_response(&mut v1, 1_000);
        assert!(!follow_up_promised(&v1));
        // A responder without transmit stamps answers, promising nothing.
        let mut no_tx = req.clone();
        make_followed_response(&mut no_tx, 1_000, Some(2_000), false, false);
        assert!(!follow_up_promised(&no_tx));
        assert_eq!(responder_wake(&no_tx), Some(2_000));
        let mut v2 = req.clone();
        make_followed_response(&mut v2, 1_000, Some(2_000), true, false);
        assert!(follow_up_promised(&v2));
        // A request that did not ask gets no promise.
        let mut plain = Vec::new();
        encode_request(&mut plain, 64, 7, 9);
        want_stamps(&mut plain);
        make_followed_response(&mut plain, 1_000, None, true, false);
        assert!(!follow_up_promised(&plain));
        // The follow-up frame itself.
        let mut f = Vec::new();
        encode_follow_up(&mut f, 7, 9, Some(4_321));
        assert_eq!(f.len(), FOLLOW_UP_LEN);
        let h = Header::decode(&f, MAX_UDP_FRAME).unwrap();
        assert_eq!((h.kind, h.seq, h.nonce, h.len), (Kind::FollowUp, 7, 9, 48));
        assert_eq!(follow_up_send(&f), Some(4_321));
        encode_follow_up(&mut f, 7, 9, None);
        assert_eq!(follow_up_send(&f), None);
    }

    #[test]
    fn request_round_trips() {
        let mut buf = Vec::new();
        encode_request(&mut buf, 100, 0x0102_0304_0506_0708, 42);
        assert_eq!(buf.len(), 100);
        let h = Header::decode(&buf, MAX_UDP_FRAME).unwrap();
        assert_eq!(
            h,
            Header {
                kind: Kind::Request,
                len: 100,
                seq: 0x0102_0304_0506_0708,
                nonce: 42,
                dwell_ns: 0
            }
        );
        make_response(&mut buf, 1234);
        let r = Header::decode(&buf, MAX_UDP_FRAME).unwrap();
        assert_eq!(
            (r.kind, r.seq, r.nonce, r.dwell_ns),
            (Kind::Response, h.seq, 42, 1234)
        );
    }

    #[test]
    fn layout_is_big_endian_at_documented_offsets() {
        let mut buf = Vec::new();
        encode_request(&mut buf, HEADER_LEN, 1, 2);
        assert_eq!(&buf[..8], b"PRBR\x01\x01\x00\x00");
        assert_eq!(&buf[8..12], &40u32.to_be_bytes());
        assert_eq!(buf[23], 1);
        assert_eq!(buf[31], 2);
    }

    #[test]
    fn rejects_bad_frames() {
        let mut good = Vec::new();
        encode_request(&mut good, 64, 1, 2);
        assert_eq!(Header::decode(&good[..39], 64), Err(FrameError::Short(39)));
        let mut b = good.clone();
        b[0] = b'X';
        assert_eq!(Header::decode(&b, 64), Err(FrameError::BadMagic));
        let mut b = good.clone();
        b[4] = 9;
        assert_eq!(Header::decode(&b, 64), Err(FrameError::BadVersion(9)));
        let mut b = good.clone();
        b[5] = 7;
        assert_eq!(Header::decode(&b, 64), Err(FrameError::BadKind(7)));
        assert_eq!(
            Header::decode(&good, 63),
            Err(FrameError::BadLength { len: 64, max: 63 })
        );
        let mut b = good.clone();
        b[8..12].copy_from_slice(&10u32.to_be_bytes());
        assert!(matches!(
            Header::decode(&b, 64),
            Err(FrameError::BadLength { len: 10, .. })
        ));
    }
}

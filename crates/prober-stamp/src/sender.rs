//! The Session-Sender: `stamp://host[:port]`.
//!
//! Each target is one STAMP session: a connected UDP socket and a random
//! SSID, so several sessions to one reflector never mix. Requests carry T1
//! as read right before the send call; the split uses the kernel's transmit
//! stamp (t1k) where the socket gives it, and the reply's kernel receive
//! stamp (t4k). Sequence numbers start at a random offset, so a stateful
//! reflector (whose numbers start at 0) can be told from a stateless one
//! (which copies ours); with a stateful one, loss is split into forward and
//! backward.

use std::io;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use prober_core::{
    Anomalies, DirectionLoss, ErrorKind, Gate, Matcher, Probe, ProbeError, Reply, ResponderTimes,
    Stamps,
};
use prober_sys::rx;
use tokio::io::Interest;
use tokio::net::UdpSocket;
use tokio::time::Instant;
use tokio_util::task::AbortOnDropHandle;

use crate::packet::{Key, Mode, ReflectorPacket, SenderPacket};
use crate::time::{ErrorEstimate, Format};
use crate::tlv::{self, kind};

/// Which optional TLVs requests carry (RFC 8972 §4); Extra Padding is added
/// whenever `--size` is above the base packet.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TlvChoice {
    /// Location, with sub-TLVs asking for both IP addresses.
    pub location: bool,
    /// Timestamp Information.
    pub timestamp_info: bool,
    /// Class of Service: the DSCP asked for the reply.
    pub class_of_service: Option<u8>,
    /// Direct Measurement (packet counters).
    pub direct_measurement: bool,
    /// Access Report (ID 2, non-3GPP, network available).
    pub access_report: bool,
    /// Follow-Up Telemetry (the previous reply's precise transmit time).
    pub follow_up: bool,
    /// An HMAC TLV over the TLVs (always in authenticated mode when there
    /// are TLVs other than Extra Padding).
    pub hmac: bool,
}

impl TlvChoice {
    /// Parses a comma-separated list: `location`, `timestamp-info`,
    /// `cos=DSCP`, `direct`, `access-report`, `follow-up`, `hmac`, or `all`.
    ///
    /// # Errors
    /// An unknown name, or a DSCP above 63.
    pub fn parse(s: &str) -> Result<Self, String> {
        let mut c = Self::default();
        for item in s.split(',').map(str::trim).filter(|x| !x.is_empty()) {
            match item {
                "location" => c.location = true,
                "timestamp-info" => c.timestamp_info = true,
                "direct" => c.direct_measurement = true,
                "access-report" => c.access_report = true,
                "follow-up" => c.follow_up = true,
                "hmac" => c.hmac = true,
                "cos" => c.class_of_service = Some(0),
                "all" => {
                    c = Self {
                        location: true,
                        timestamp_info: true,
                        class_of_service: Some(0),
                        direct_measurement: true,
                        access_report: true,
                        follow_up: true,
                        hmac: c.hmac,
                    };
                }
                other => match other.strip_prefix("cos=") {
                    Some(d) => {
                        let d: u8 = d
                            .parse()
                            .ok()
                            .filter(|d| *d < 64)
                            .ok_or_else(|| format!("--stamp-tlv {other}: a DSCP is 0..=63"))?;
                        c.class_of_service = Some(d);
                    }
                    None => {
                        return Err(format!(
                            "--stamp-tlv: unknown TLV {other:?} (known: location, timestamp-info, cos[=DSCP], direct, access-report, follow-up, hmac, all)"
                        ));
                    }
                },
            }
        }
        Ok(c)
    }

    fn any(&self) -> bool {
        self.location
            || self.timestamp_info
            || self.class_of_service.is_some()
            || self.direct_measurement
            || self.access_report
            || self.follow_up
    }
}

/// The sender's settings as text: `prober run`'s and `prober sweep`'s
/// flags (this type is their clap definition, and a serde one for config
/// tables); [`StampSpec::build`] reads the key and checks the TLVs.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Deserialize, clap::Args)]
#[serde(default, deny_unknown_fields)]
#[command(next_help_heading = "STAMP")]
pub struct StampSpec {
    /// STAMP authenticated mode (RFC 8762 §4.2.2): the HMAC-SHA-256 key is
    /// this file's bytes (one trailing newline dropped); never on the
    /// command line.
    #[arg(long = "stamp-key", value_name = "FILE")]
    pub key_file: Option<std::path::PathBuf>,

    /// STAMP timestamps in PTPv2 truncated format instead of NTP.
    #[arg(long = "stamp-ptp")]
    pub ptp: bool,

    /// Say this host's clock is synchronised to UTC (the S bit of STAMP's
    /// Error Estimate): one-way delays are reported when the reflector says
    /// so too.
    #[arg(long)]
    pub clock_synced: bool,

    /// Optional STAMP TLVs (RFC 8972) in each request, comma separated:
    /// location, timestamp-info, cos[=DSCP], direct, access-report,
    /// follow-up, hmac, or all.
    #[arg(long = "stamp-tlv", value_name = "LIST")]
    pub tlvs: Option<String>,
}

/// The STAMP flags, as messages name them.
pub const STAMP_FLAGS: &str = "--stamp-key, --stamp-ptp, --clock-synced and --stamp-tlv";

prober_net::own_options!(
    StampSpec,
    rebase = |s: &mut StampSpec, base: &std::path::Path| {
        if let Some(file) = &mut s.key_file {
            *file = base.join(&*file); // an absolute path stays as it is
        }
    }
);

/// STAMP's own options: `--stamp-key`, ... and a job's `[job.stamp]`.
pub(crate) static STAMP_OPTIONS: prober_net::options::ProtocolOptions =
    prober_net::options::ProtocolOptions::of::<StampSpec>("stamp", STAMP_FLAGS, "stamp targets");

impl StampSpec {
    /// Reads the key and the TLVs, checks a request size given for STAMP
    /// targets against them, and puts the [`SenderOptions`] where the
    /// builder finds them (see [`prober_net::options::OwnOptions::put`]).
    ///
    /// # Errors
    /// A key file that cannot be read, an unknown TLV, a size too small.
    pub fn put_into(
        &self,
        store: &prober_core::shared::Shared,
        size: Option<usize>,
        table: Option<&str>,
    ) -> Result<(), String> {
        let within = |e: String| match table {
            Some(t) => format!("{t}: {e}"),
            None => e,
        };
        let options = self.build().map_err(within)?;
        if let Some(size) = size {
            // A job's `size` key where the table is a config's.
            options.check_size(size).map_err(|e| match table {
                Some(t) => format!("{t}: {}", e.replacen("--size", "size", 1)),
                None => e,
            })?;
        }
        store.put(options);
        Ok(())
    }

    /// Reads the key file and parses the TLV list.
    ///
    /// # Errors
    /// A key file that cannot be read, or an unknown TLV.
    pub fn build(&self) -> Result<SenderOptions, String> {
        Ok(SenderOptions {
            key: self.key_file.as_deref().map(Key::from_file).transpose()?,
            format: if self.ptp { Format::Ptp } else { Format::Ntp },
            clock_synced: self.clock_synced,
            tlvs: match &self.tlvs {
                Some(list) => TlvChoice::parse(list)?,
                None => TlvChoice::default(),
            },
        })
    }
}

/// The sender's settings (`--stamp-key`, `--stamp-ptp`, `--clock-synced`,
/// `--stamp-tlv`), shared by every `stamp://` target of a run.
#[derive(Debug, Clone, Default)]
pub struct SenderOptions {
    /// Authenticated mode with this key.
    pub key: Option<Key>,
    /// Timestamp format of T1.
    pub format: Format,
    /// The operator says this host's clock is synchronised (the S bit):
    /// one-way delays are reported when the reflector says so too.
    pub clock_synced: bool,
    /// Optional TLVs.
    pub tlvs: TlvChoice,
}

impl SenderOptions {
    /// Authenticated or unauthenticated.
    pub fn mode(&self) -> Mode {
        Mode::of(self.key.as_ref())
    }

    /// Checks that a request of `size` octets can be made: the base packet
    /// and the TLVs exactly, or with an Extra Padding TLV (its header
    /// alone is 4 octets).
    ///
    /// # Errors
    /// A message naming `--size` and the sizes that work.
    pub fn check_size(&self, size: usize) -> Result<(), String> {
        let min = self.min_size();
        if size < min || (size > min && size < min + tlv::HEADER) {
            return Err(format!(
                "--size {size}: a STAMP request in {} mode with these TLVs is {min} octets, or {} and more (Extra Padding has a {}-octet header)",
                self.mode().as_str(),
                min + tlv::HEADER,
                tlv::HEADER
            ));
        }
        Ok(())
    }

    /// Smallest request these options make: the base packet and the TLVs.
    pub fn min_size(&self) -> usize {
        self.template(0).len()
    }

    /// A request of at least `size` octets with zeroed fields, and where its
    /// Direct Measurement and HMAC TLVs are (to fill per request).
    fn template(&self, size: usize) -> Vec<u8> {
        let mode = self.mode();
        let mut buf = vec![0u8; mode.base_len()];
        let t = &self.tlvs;
        if t.location {
            let at = tlv::push(&mut buf, kind::LOCATION, 4 + 2 * (tlv::HEADER + 16));
            let mut sub = at + 4;
            for k in [tlv::location::DEST_IP, tlv::location::SOURCE_IP] {
                buf[sub + 1] = k;
                buf[sub + 3] = 16;
                sub += tlv::HEADER + 16;
            }
        }
        if t.timestamp_info {
            tlv::push(&mut buf, kind::TIMESTAMP_INFO, 4);
        }
        if let Some(dscp) = t.class_of_service {
            let at = tlv::push(&mut buf, kind::CLASS_OF_SERVICE, 4);
            buf[at] = dscp << 2;
        }
        if t.direct_measurement {
            tlv::push(&mut buf, kind::DIRECT_MEASUREMENT, 12);
        }
        if t.access_report {
            let at = tlv::push(&mut buf, kind::ACCESS_REPORT, 4);
            buf[at] = 2 << 4; // non-3GPP
            buf[at + 1] = 1; // network available
        }
        if t.follow_up {
            tlv::push(&mut buf, kind::FOLLOW_UP, 16);
        }
        let hmac = t.hmac || (mode == Mode::Authenticated && t.any());
        if hmac {
            tlv::push(&mut buf, kind::HMAC, crate::packet::HMAC_LEN);
        }
        // Extra Padding last (the one TLV allowed after the HMAC TLV).
        if size >= buf.len() + tlv::HEADER {
            let pad = size - buf.len() - tlv::HEADER;
            tlv::push(&mut buf, kind::EXTRA_PADDING, pad);
        }
        buf
    }
}

/// A reply as the receive loop read it.
#[derive(Debug, Clone, Copy)]
struct Got {
    received: Instant,
    t4k: Option<u64>,
    t4: u64,
    reply: ReflectorPacket,
}

/// A reply, or why the session failed.
type Arrival = Result<Got, ProbeError>;

/// What the session has seen, for loss by direction.
#[derive(Debug, Default)]
struct Session {
    /// Replies received (first replies only).
    replies: u64,
    /// The highest request index answered, and the reflector's sequence
    /// number in that answer.
    newest: Option<(u32, u32)>,
    /// Some reply carried a reflector sequence number different from ours:
    /// the reflector is stateful.
    stateful: bool,
    /// Requests sent (measured and warm-up).
    sent: u64,
}

impl Session {
    fn direction(&self) -> Option<DirectionLoss> {
        if !self.stateful {
            return None;
        }
        let (idx, rseq) = self.newest?;
        let (idx, rseq) = (u64::from(idx), u64::from(rseq));
        Some(DirectionLoss {
            forward: idx.saturating_sub(rseq),
            backward: (rseq + 1).saturating_sub(self.replies),
            unknown: self.sent.saturating_sub(idx + 1),
        })
    }
}

/// Slots of the ring that maps a request's index back to its probe seq.
const RING: usize = 1 << 16;

struct Shared {
    opts: SenderOptions,
    size: usize,
    ssid: u16,
    /// Our first sequence number.
    base: u32,
    matcher: Arc<Matcher<Arrival>>,
    /// (request index, probe seq, answered) by index modulo [`RING`].
    ring: Mutex<Vec<(u32, u64, bool)>>,
    session: Mutex<Session>,
    tx: prober_sys::rx::TxStamps,
    tx_on: bool,
    /// Where [`Shared::drain`] reads queued requests: made once, not per
    /// call (it runs up to three times per probe).
    scratch: Mutex<Vec<u8>>,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared")
            .field("ssid", &self.ssid)
            .finish_non_exhaustive()
    }
}

/// A STAMP Session-Sender probe (see the module docs).
#[derive(Debug)]
pub struct StampProbe {
    socket: Arc<UdpSocket>,
    shared: Arc<Shared>,
    next: AtomicU32,
    /// A request with every field that does not change zeroed.
    template: Vec<u8>,
    /// Where the Direct Measurement and HMAC TLVs' values are in it, found
    /// once rather than per request.
    direct_at: Option<usize>,
    hmac_at: Option<usize>,
    /// The Error Estimate every request carries.
    error: ErrorEstimate,
    _reader: AbortOnDropHandle<()>,
}

impl StampProbe {
    /// Opens the session's socket to `addr` and starts its receive loop.
    ///
    /// # Errors
    /// If the socket cannot be opened, or `size` is below what the options
    /// need (or 1–3 octets above it: a TLV header is 4).
    pub async fn connect(
        addr: SocketAddr,
        size: usize,
        opts: SenderOptions,
        tx_stamps: bool,
    ) -> io::Result<Self> {
        opts.check_size(size)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        let local: SocketAddr = if addr.is_ipv4() {
            (Ipv4Addr::UNSPECIFIED, 0).into()
        } else {
            (Ipv6Addr::UNSPECIFIED, 0).into()
        };
        let socket = UdpSocket::bind(local).await?;
        socket.connect(addr).await?;
        // The reflector reports the TTL it received: start from 255, as
        // STAMP senders do, so that 255 − TTL is the hop count.
        let sref = socket2::SockRef::from(&socket);
        if addr.is_ipv4() {
            sref.set_ttl_v4(255)?;
        } else {
            sref.set_unicast_hops_v6(255)?;
        }
        rx::enable_timestamps(socket.as_fd())?;
        let tx_on = tx_stamps && rx::tx_timestamps_or_notice(socket.as_fd(), "stamp");
        let template = opts.template(size);
        let tlvs =
            tlv::walk(&template, opts.mode().base_len()).map_or_else(|_| Vec::new(), |w| w.tlvs);
        let value_of = |k: u8| tlvs.iter().find(|t| t.kind == k).map(tlv::Tlv::value_at);
        let (direct_at, hmac_at) = (value_of(kind::DIRECT_MEASUREMENT), value_of(kind::HMAC));
        let error = ErrorEstimate::new(opts.format, opts.clock_synced, 1_000_000);
        let shared = Arc::new(Shared {
            opts,
            size,
            ssid: fastrand::u16(1..),
            base: fastrand::u32(1 << 20..1 << 31),
            matcher: Matcher::new(),
            ring: Mutex::new(vec![(u32::MAX, 0, false); RING]),
            session: Mutex::new(Session::default()),
            tx: prober_sys::rx::TxStamps::default(),
            tx_on,
            scratch: Mutex::new(vec![0u8; size + 128]),
        });
        let socket = Arc::new(socket);
        let reader = tokio::spawn(read_replies(Arc::clone(&socket), Arc::clone(&shared)));
        Ok(Self {
            socket,
            shared,
            next: AtomicU32::new(0),
            template,
            direct_at,
            hmac_at,
            error,
            _reader: AbortOnDropHandle::new(reader),
        })
    }

    /// The session's SSID.
    pub fn ssid(&self) -> u16 {
        self.shared.ssid
    }
}

impl Shared {
    fn lock_session(&self) -> std::sync::MutexGuard<'_, Session> {
        self.session.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The probe seq of request index `idx`, if it is still in the ring,
    /// and whether this is its first reply (marking it answered).
    fn answer(&self, idx: u32) -> Option<(u64, bool)> {
        let mut ring = self.ring.lock().unwrap_or_else(PoisonError::into_inner);
        let slot = &mut ring[idx as usize % RING];
        if slot.0 != idx {
            return None;
        }
        let first = !slot.2;
        slot.2 = true;
        Some((slot.1, first))
    }

    /// Files transmit stamps from the error queue by request index (the
    /// queued copy of a request ends with our payload).
    fn drain(&self, fd: std::os::fd::BorrowedFd<'_>) {
        if !self.tx_on {
            return;
        }
        let mut buf = self.scratch.lock().unwrap_or_else(PoisonError::into_inner);
        let mode = self.opts.mode();
        for _ in 0..64 {
            let Ok((n, Some(t1k))) = rx::recv_tx_stamp(fd, &mut buf) else {
                break;
            };
            let Some(payload) = n.checked_sub(self.size).map(|at| &buf[at..n]) else {
                continue;
            };
            if let Ok(p) = SenderPacket::read(payload, mode, None)
                && p.ssid == self.ssid
            {
                self.tx.put(u64::from(p.seq.wrapping_sub(self.base)), t1k);
            }
        }
    }

    fn on_datagram(&self, buf: &[u8], rx: (Option<u64>, u64), received: Instant) {
        let opts = &self.opts;
        let mode = opts.mode();
        let reply = match ReflectorPacket::read(buf, mode, opts.key.as_ref()) {
            Ok(r) if r.ssid == self.ssid => r,
            Ok(r) => {
                tracing::debug!(ssid = r.ssid, "stamp: ignoring a reply of another session");
                return;
            }
            Err(reject) => {
                tracing::debug!(%reject, "stamp: ignoring a malformed reply");
                self.matcher.count_corrupt();
                return;
            }
        };
        if !self.tlvs_ok(buf) {
            self.matcher.count_corrupt();
            return;
        }
        let idx = reply.sender_seq.wrapping_sub(self.base);
        let Some((seq, first)) = self.answer(idx) else {
            self.matcher.count_unknown();
            return;
        };
        // Counted before the probe is woken, so that its run's final counts
        // include its reply.
        if first {
            let mut s = self.lock_session();
            s.replies += 1;
            s.stateful |= reply.seq != reply.sender_seq;
            if s.newest.is_none_or(|(i, _)| idx > i) {
                s.newest = Some((idx, reply.seq));
            }
        }
        let got = Got {
            received,
            t4k: rx.0,
            t4: rx.1,
            reply,
        };
        self.matcher.deliver(seq, Ok(got));
    }

    /// Checks the reply's TLVs as RFC 8972 §4 asks of a sender: an I flag
    /// or a wrong HMAC TLV voids them (the reply counts as corrupt); U and
    /// M flags mean the reflector did not fill a TLV, which is no error.
    fn tlvs_ok(&self, buf: &[u8]) -> bool {
        let base = self.opts.mode().base_len();
        let Ok(walk) = tlv::walk(buf, base) else {
            return false;
        };
        if walk.tlvs.iter().any(|t| t.flags & tlv::FLAG_I != 0) {
            return false;
        }
        match walk.tlvs.iter().position(|t| t.kind == kind::HMAC) {
            Some(h) => tlv::hmac_ok(buf, base, &walk.tlvs, h, self.opts.key.as_ref()),
            None => true,
        }
    }
}

async fn read_replies(socket: Arc<UdpSocket>, shared: Arc<Shared>) {
    let mut buf = vec![0u8; 65_536];
    loop {
        let read = socket
            .async_io(Interest::READABLE | Interest::ERROR, || {
                shared.drain(socket.as_fd());
                rx::recv_stamped::<()>(socket.as_fd(), &mut buf)
            })
            .await;
        let t4 = prober_core::clock::unix_now_ns();
        match read {
            Ok((n, _, stamp)) => {
                let t4k = stamp.and_then(rx::unix_ns);
                shared.on_datagram(&buf[..n], (t4k, t4), Instant::now());
            }
            Err(e) => {
                let err = if e.kind() == io::ErrorKind::ConnectionRefused {
                    ProbeError::new(
                        ErrorKind::Refused,
                        "connection refused (ICMP port unreachable): no STAMP reflector there",
                    )
                } else {
                    ProbeError::io("receive", &e)
                };
                shared.matcher.fail_all(|| Err(err.clone()));
                if e.kind() != io::ErrorKind::ConnectionRefused {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            }
        }
    }
}

impl Probe for StampProbe {
    async fn probe_at(&self, seq: u64, gate: Gate) -> Result<Reply, ProbeError> {
        let sh = &self.shared;
        let idx = self.next.fetch_add(1, Ordering::Relaxed);
        {
            let mut ring = sh.ring.lock().unwrap_or_else(PoisonError::into_inner);
            ring[idx as usize % RING] = (idx, seq, false);
        }
        sh.lock_session().sent += 1;
        let mut buf = self.template.clone();
        let opts = &sh.opts;
        let mode = opts.mode();
        let base = mode.base_len();
        // Direct Measurement: S_TxC counts requests sent, this one included.
        if let Some(v) = self.direct_at {
            buf[v..v + 4].copy_from_slice(&idx.wrapping_add(1).to_be_bytes());
        }
        sh.drain(self.socket.as_fd());
        let mut waiter = sh.matcher.register(seq);
        gate.pass().await;
        let sent = Instant::now();
        let t1 = prober_core::clock::unix_now_ns();
        let packet = SenderPacket {
            seq: sh.base.wrapping_add(idx),
            timestamp: opts.format.encode(t1),
            error: self.error,
            ssid: sh.ssid,
        };
        packet.write(&mut buf, mode, opts.key.as_ref());
        if let (Some(at), Some(key)) = (self.hmac_at, opts.key.as_ref()) {
            tlv::sign_hmac_tlv(&mut buf, base, at, key);
        }
        match self.socket.send(&buf).await {
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => {
                return Err(ProbeError::new(
                    ErrorKind::Refused,
                    "connection refused (ICMP port unreachable): no STAMP reflector there",
                ));
            }
            Err(e) => return Err(ProbeError::io("send", &e)),
        }
        let got = waiter.reply().await?;
        sh.drain(self.socket.as_fd());
        let t1k = sh.tx.take(u64::from(idx));
        Ok(reply(sh, sent, t1, t1k, &got, buf.len()))
    }

    fn anomalies(&self) -> Anomalies {
        let mut a = self.shared.matcher.anomalies();
        a.direction = self.shared.lock_session().direction();
        a
    }
}

/// A reply's measurements: the reflector's turnaround T3 − T2 (its dwell,
/// as the split counts it), and the one-way delays when both clocks say
/// they are synchronised.
fn reply(sh: &Shared, sent: Instant, t1: u64, t1k: Option<u64>, got: &Got, bytes: usize) -> Reply {
    let r = &got.reply;
    let format = r.error.format();
    let turnaround = format
        .diff_ns(r.receive, r.timestamp)
        .and_then(|d| u64::try_from(d).ok());
    let synced = sh.opts.clock_synced && r.error.synced();
    let (forward, backward) = if synced {
        let t2 = format.decode(r.receive, t1);
        let t3 = format.decode(r.timestamp, t1);
        let (a, d) = (t1k.unwrap_or(t1), got.t4k.unwrap_or(got.t4));
        (
            t2.and_then(|t2| t2.checked_sub(a)),
            t3.and_then(|t3| d.checked_sub(t3)),
        )
    } else {
        (None, None)
    };
    let stamps = Stamps {
        t1: Some(t1),
        t1k,
        t4k: got.t4k,
        t4: Some(got.t4),
        responder: Some(ResponderTimes {
            turnaround,
            forward,
            backward,
            ..ResponderTimes::default()
        }),
        kernel_peer: false,
        handshake: None,
    };
    Reply {
        sent,
        received: got.received,
        // Not "dwell": that is a handler's own time (tcp://, udp://,
        // grpc://); T3 − T2 is the reflector's whole turnaround, reported as
        // `responder_turnaround_ns` and the split's responder part.
        server_dwell: None,
        rx_wake: rx::wake_ns(got.t4k, got.t4).map(Duration::from_nanos),
        bytes,
        ttl: Some(r.sender_ttl),
        stamps,
        app: Default::default(),
    }
}

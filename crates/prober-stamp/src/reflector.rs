//! The Session-Reflector: `prober serve --stamp ADDR` and the daemon's
//! `[serve] stamp`.
//!
//! - **T2** is the kernel's receive stamp of the request (SO_TIMESTAMPNS),
//!   or the time of the read where the kernel gives none.
//! - **T3** is read from the wall clock right before the send call: the
//!   latest moment a time can be written into the packet. The reply then
//!   still goes through the reflector's send path (the part the split calls
//!   responder send, t3k − t3) before it leaves; the sender's network part
//!   includes it. The precise transmit time (t3k, the kernel's transmit
//!   stamp) is known only once the reply has left: a sender that includes a
//!   Follow-Up Telemetry TLV gets the previous reply's t3k in it (RFC 8972
//!   §4.7).
//! - **Stateless** mode copies the sender's sequence number; **stateful**
//!   mode (RFC 8762 §4.3) keeps a count per session (sender address, port
//!   and SSID), from 0, which lets the sender tell forward loss from
//!   backward loss.
//! - A reply is never longer than its request. Packets that are too short,
//!   fail the HMAC, carry malformed TLV lengths or too many TLVs, or exceed
//!   the per-source rate, or are of the other mode, are dropped and counted
//!   by reason.

use std::collections::HashMap;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::{AsFd, AsRawFd};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use nix::sys::socket::{ControlMessage, MsgFlags, SockaddrStorage, sendmsg};
use tokio::io::Interest;
use tokio::net::UdpSocket;
use tokio_util::sync::CancellationToken;

use crate::packet::{Key, Mode, ReflectorPacket, Reject, SenderPacket};
use crate::time::{ErrorEstimate, Format};
use crate::tlv::{self, Fill, method, sync};

/// How the reflector answers.
#[derive(Debug, Clone)]
pub struct ReflectorConfig {
    /// Authenticated mode with this key; unauthenticated without.
    pub key: Option<Key>,
    /// Keep a sequence number per session (RFC 8762 §4.3).
    pub stateful: bool,
    /// Replies per second per source address (burst as many); 0 for no
    /// limit.
    pub rate: u32,
    /// Timestamp format of T2 and T3.
    pub format: Format,
    /// The operator says this host's clock is synchronised to UTC (the S
    /// bit; one-way delays need it at both ends).
    pub clock_synced: bool,
    /// Most sessions kept; when full, sessions idle for a minute are
    /// forgotten, and if none is, new sessions are refused (counted).
    pub max_sessions: usize,
}

impl Default for ReflectorConfig {
    fn default() -> Self {
        Self {
            key: None,
            stateful: true,
            rate: 1000,
            format: Format::Ntp,
            clock_synced: false,
            max_sessions: 10_000,
        }
    }
}

impl ReflectorConfig {
    /// Authenticated or unauthenticated.
    pub fn mode(&self) -> Mode {
        Mode::of(self.key.as_ref())
    }
}

/// What the reflector counted, readable while it runs.
#[derive(Debug, Default)]
pub struct ReflectorStats {
    /// Datagrams received.
    pub received: AtomicU64,
    /// Replies sent.
    pub reflected: AtomicU64,
    /// Dropped: [`Reject`] reasons in [`Reject::ALL`] order, then rate
    /// limited, then sessions full.
    dropped: [AtomicU64; 7],
    /// TLVs returned with the U flag.
    pub tlv_unrecognised: AtomicU64,
    /// TLVs returned with the M flag.
    pub tlv_malformed: AtomicU64,
    /// HMAC TLVs returned with the I flag.
    pub tlv_integrity: AtomicU64,
}

/// A reason a datagram was dropped besides a [`Reject`].
const RATE: usize = Reject::ALL.len();
const SESSIONS: usize = RATE + 1;

impl ReflectorStats {
    /// Drops by reason (`short`, `mode`, `hmac`, `too_many_tlvs`,
    /// `bad_timestamp`, `rate_limited`, `sessions_full`), zeros included.
    pub fn dropped(&self) -> Vec<(&'static str, u64)> {
        Reject::ALL
            .iter()
            .map(|r| r.reason())
            .chain(["rate_limited", "sessions_full"])
            .zip(&self.dropped)
            .map(|(r, n)| (r, n.load(Ordering::Relaxed)))
            .collect()
    }

    fn count_drop(&self, i: usize) {
        self.dropped[i].fetch_add(1, Ordering::Relaxed);
    }
}

/// One session's state.
#[derive(Debug)]
struct Session {
    /// The reflector's next sequence number (stateful mode).
    next_seq: u32,
    /// Requests received, replies sent (Direct Measurement).
    rx: u32,
    tx: u32,
    /// The previous reply: its seq, its send counter, T3 as written.
    previous: Option<(u32, u32, u64)>,
    seen: Instant,
}

struct State {
    cfg: ReflectorConfig,
    /// The HMAC key, shared so that a packet borrows it cheaply.
    key: Option<Arc<Key>>,
    /// The Error Estimate of every reply (T2's and T3's).
    error: ErrorEstimate,
    stats: Arc<ReflectorStats>,
    sessions: HashMap<(SocketAddr, u16), Session>,
    buckets: prober_net::guard::RateLimiter,
    /// Kernel transmit stamps by send counter (OPT_ID), most recent last.
    tx_stamps: std::collections::VecDeque<(u32, u64)>,
    /// Datagrams sent so far: the next send's OPT_ID.
    sent: u32,
    tx_on: bool,
    local: SocketAddr,
}

const KEEP_TX_STAMPS: usize = 4096;
const IDLE: Duration = Duration::from_secs(60);

impl State {
    fn allow(&mut self, ip: IpAddr, now: Instant) -> bool {
        // 0 turns the limit off.
        self.buckets.allow(ip, Some(self.cfg.rate), now)
    }

    fn session(
        sessions: &mut HashMap<(SocketAddr, u16), Session>,
        max: usize,
        key: (SocketAddr, u16),
        now: Instant,
    ) -> Option<&mut Session> {
        if !sessions.contains_key(&key) && sessions.len() >= max {
            sessions.retain(|_, s| now.duration_since(s.seen) < IDLE);
            if sessions.len() >= max {
                return None;
            }
        }
        let s = sessions.entry(key).or_insert(Session {
            next_seq: 0,
            rx: 0,
            tx: 0,
            previous: None,
            seen: now,
        });
        s.seen = now;
        Some(s)
    }

    fn drain_tx_stamps(&mut self, fd: std::os::fd::BorrowedFd<'_>) {
        if !self.tx_on {
            return;
        }
        let kept = &mut self.tx_stamps;
        prober_sys::rx::drain_tx_stamps_id(fd, 256, |key, stamp| {
            if kept.len() == KEEP_TX_STAMPS {
                kept.pop_front();
            }
            kept.push_back((key, stamp));
        });
    }

    /// Builds the reply to `req` in `buf` (a copy of the request); `None`
    /// when the request is dropped.
    fn answer(&mut self, buf: &mut [u8], meta: &Request) -> Option<Answer> {
        let now = Instant::now();
        let mode = self.cfg.mode();
        let key = self.key.clone();
        let key = key.as_deref();
        let req = match SenderPacket::read(buf, mode, key) {
            Ok(r) => r,
            Err(reject) => return self.reject(reject),
        };
        if req.error.error_ns().is_none() {
            return self.reject(Reject::BadTimestamp);
        }
        let walk = match tlv::walk(buf, mode.base_len()) {
            Ok(t) => t,
            Err(reject) => return self.reject(reject),
        };
        if !self.allow(meta.from.ip(), now) {
            self.stats.count_drop(RATE);
            return None;
        }
        let (stateful, format, synced, tx_on, local) = (
            self.cfg.stateful,
            self.cfg.format,
            self.cfg.clock_synced,
            self.tx_on,
            self.local,
        );
        let next_id = self.sent;
        // The previous reply's transmit time, for Follow-Up Telemetry.
        let stamps = &self.tx_stamps;
        let max = self.cfg.max_sessions;
        let Some(session) = Self::session(&mut self.sessions, max, (meta.from, req.ssid), now)
        else {
            self.stats.count_drop(SESSIONS);
            return None;
        };
        session.rx = session.rx.wrapping_add(1);
        let seq = if stateful {
            let s = session.next_seq;
            session.next_seq = s.wrapping_add(1);
            s
        } else {
            req.seq
        };
        let previous = session.previous.filter(|_| stateful).map(|(pseq, id, t3)| {
            match stamps.iter().rev().find(|(i, _)| *i == id) {
                Some((_, t3k)) => (pseq, format.encode(*t3k), method::SW_LOCAL),
                None => (pseq, t3, method::CONTROL_PLANE),
            }
        });
        let t2 = meta.t2.unwrap_or(meta.read);
        let fill = Fill {
            ports: (local.port(), meta.from.port()),
            addrs: meta.dst.map(|d| (d, meta.from.ip())),
            sync_source: if synced { sync::NTP } else { sync::LOCAL },
            rx_method: if meta.t2.is_some() {
                method::SW_LOCAL
            } else {
                method::CONTROL_PLANE
            },
            tx_method: if tx_on {
                method::SW_LOCAL
            } else {
                method::CONTROL_PLANE
            },
            tos: meta.tos,
            counters: (session.rx, session.tx.wrapping_add(1)),
            previous,
        };
        let reflected = tlv::reflect(buf, mode.base_len(), &walk, &fill, key);
        let t3 = prober_core::clock::unix_now_ns();
        session.tx = session.tx.wrapping_add(1);
        session.previous = Some((seq, next_id, format.encode(t3)));
        let reply = ReflectorPacket {
            seq,
            timestamp: format.encode(t3),
            error: self.error,
            ssid: req.ssid,
            receive: format.encode(t2),
            sender_seq: req.seq,
            sender_timestamp: req.timestamp,
            sender_error: req.error,
            sender_ttl: meta.ttl.unwrap_or(0),
        };
        reply.write(buf, mode, key);
        if let (Some(at), Some(key)) = (reflected.hmac_at, key) {
            tlv::sign_hmac_tlv(buf, mode.base_len(), at, key);
        }
        let st = &self.stats;
        st.tlv_unrecognised
            .fetch_add(u64::from(reflected.unrecognised), Ordering::Relaxed);
        st.tlv_malformed
            .fetch_add(u64::from(reflected.malformed), Ordering::Relaxed);
        st.tlv_integrity
            .fetch_add(u64::from(reflected.integrity), Ordering::Relaxed);
        Some(Answer {
            dscp: reflected.dscp,
        })
    }

    fn reject(&self, r: Reject) -> Option<Answer> {
        let i = Reject::ALL.iter().position(|x| *x == r).unwrap_or(0);
        self.stats.count_drop(i);
        tracing::debug!(reason = r.reason(), "stamp: dropped a request: {r}");
        None
    }
}

/// One received request's metadata.
#[derive(Debug)]
struct Request {
    from: SocketAddr,
    dst: Option<IpAddr>,
    t2: Option<u64>,
    read: u64,
    ttl: Option<u8>,
    tos: Option<u8>,
}

/// How to send a reply.
#[derive(Debug)]
struct Answer {
    /// The DSCP asked for in a Class of Service TLV.
    dscp: Option<u8>,
}

/// Answers STAMP test packets on `socket` until `stop` is cancelled;
/// `stats` counts what it did.
///
/// # Errors
/// If the socket's options cannot be set.
pub async fn serve_stamp(
    socket: UdpSocket,
    cfg: ReflectorConfig,
    stats: Arc<ReflectorStats>,
    stop: CancellationToken,
) -> io::Result<()> {
    let local = socket.local_addr()?;
    let v6 = local.is_ipv6();
    prober_sys::rx::enable_timestamps(socket.as_fd())?;
    prober_sys::rx::enable_ttl(socket.as_fd(), v6)?;
    if let Err(error) = prober_sys::rx::enable_tos_and_dst(socket.as_fd(), v6) {
        tracing::debug!(%error, "stamp: no TOS or destination address of requests");
    }
    let tx_on = prober_sys::rx::enable_tx_timestamps_id(socket.as_fd()).is_ok();
    let mut state = State {
        key: cfg.key.clone().map(Arc::new),
        error: ErrorEstimate::new(cfg.format, cfg.clock_synced, 1_000_000),
        cfg,
        stats,
        sessions: HashMap::new(),
        buckets: prober_net::guard::RateLimiter::default(),
        tx_stamps: std::collections::VecDeque::new(),
        sent: 0,
        tx_on,
        local,
    };
    let mut buf = vec![0u8; 65_536];
    loop {
        let read = tokio::select! {
            () = stop.cancelled() => return Ok(()),
            r = socket.async_io(Interest::READABLE | Interest::ERROR, || {
                state.drain_tx_stamps(socket.as_fd());
                prober_sys::rx::recv_meta::<SockaddrStorage>(socket.as_fd(), &mut buf)
            }) => r,
        };
        let m = match read {
            Ok(m) => m,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
            Err(error) => {
                tracing::debug!(%error, "stamp: receive failed");
                continue;
            }
        };
        let read_at = prober_core::clock::unix_now_ns();
        state.stats.received.fetch_add(1, Ordering::Relaxed);
        let Some(from) = m.from.as_ref().and_then(prober_sys::rx::socket_addr) else {
            continue;
        };
        let req = Request {
            from,
            dst: m.dst,
            t2: m.stamp.and_then(prober_sys::rx::unix_ns),
            read: read_at,
            ttl: m.ttl,
            tos: m.tos,
        };
        let len = m.len.min(buf.len());
        let Some(answer) = state.answer(&mut buf[..len], &req) else {
            continue;
        };
        match send(&socket, &buf[..len], from, answer.dscp, v6) {
            Ok(()) => {
                state.sent = state.sent.wrapping_add(1);
                state.stats.reflected.fetch_add(1, Ordering::Relaxed);
            }
            Err(error) => tracing::debug!(%error, %from, "stamp: send failed"),
        }
    }
}

/// Sends one reply, with the DSCP the sender asked for (keeping ECN at 0).
fn send(
    socket: &UdpSocket,
    buf: &[u8],
    to: SocketAddr,
    dscp: Option<u8>,
    v6: bool,
) -> io::Result<()> {
    let iov = [io::IoSlice::new(buf)];
    let addr = SockaddrStorage::from(to);
    let tos = dscp.map(|d| d << 2);
    let tclass = tos.map(i32::from);
    let cmsgs: Vec<ControlMessage<'_>> = match (tos.as_ref(), tclass.as_ref(), v6) {
        (Some(t), _, false) => vec![ControlMessage::Ipv4Tos(t)],
        (_, Some(t), true) => vec![ControlMessage::Ipv6TClass(t)],
        _ => Vec::new(),
    };
    sendmsg(
        socket.as_fd().as_raw_fd(),
        &iov,
        &cmsgs,
        MsgFlags::MSG_DONTWAIT,
        Some(&addr),
    )
    .map(|_| ())
    .map_err(io::Error::from)
}

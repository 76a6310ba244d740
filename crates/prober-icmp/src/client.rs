//! One shared socket per address family, the receive loop that dispatches
//! replies to probes, and the [`IcmpProbe`] itself.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime};

use prober_core::clock::unix_now_ns;
use prober_core::{Anomalies, ErrorKind, Gate, Matcher, Probe, ProbeError, Reply, Stamps};
use prober_sys::busy::{Reader, SpinThread, Step};
use tokio::time::Instant;
use tokio_util::task::AbortOnDropHandle;

use crate::IcmpError;
use crate::packet::{
    self, MAX_PAYLOAD, PayloadCheck, Received, check_payload, describe_error, encode_payload,
};
use crate::socket::{IcmpSocket, Queued, SocketKind};

/// What the receive loop hands a waiting probe about its reply.
#[derive(Debug, Clone, Copy)]
struct Got {
    /// Right after the read, on the monotonic clock (t4, for the RTT).
    received: Instant,
    /// The same moment on the wall clock, ns since the epoch (t4).
    t4: u64,
    /// The kernel's receive stamp (t4k), if it gave one.
    t4k: Option<u64>,
    /// Reply length.
    len: usize,
    /// Reply TTL (hop limit).
    ttl: Option<u8>,
}

/// A reply, or why the probe failed.
type Arrival = Result<Got, ProbeError>;

/// One target's state as the receive loop sees it.
#[derive(Debug)]
struct Slot {
    addr: IpAddr,
    matcher: Arc<Matcher<Arrival>>,
    corrupt: AtomicU64,
    /// Kernel transmit stamps (t1k) by seq.
    tx: prober_sys::rx::TxStamps,
}

/// Probes of one address family keyed by nonce.
type Registry = Mutex<HashMap<u64, Arc<Slot>>>;

#[derive(Debug)]
struct Family {
    socket: Arc<IcmpSocket>,
    registry: Arc<Registry>,
    /// Sends whose transmit stamp has not been read from the error queue
    /// yet: a send drains the queue first only when this is above zero.
    queued: Arc<AtomicU64>,
    /// Held by each reader of the error queue from its read to its filing.
    drains: Arc<prober_sys::rx::DrainLock>,
    _reader: Reader,
    _errors: Option<AbortOnDropHandle<()>>,
}

/// Opens and shares the ICMP sockets of a run: at most one per address
/// family, however many targets.
#[derive(Debug)]
pub struct IcmpClient {
    kind: SocketKind,
    ttl: Option<u32>,
    marks: prober_core::protocol::Marks,
    busy_poll: bool,
    tx_stamps: bool,
    v4: Mutex<Option<Arc<Family>>>,
    v6: Mutex<Option<Arc<Family>>>,
}

impl IcmpClient {
    /// A client that will open sockets of `kind` with this TTL (hop limit).
    pub fn new(kind: SocketKind, ttl: Option<u32>) -> Arc<Self> {
        Self::with_busy_poll(kind, ttl, false)
    }

    /// As [`IcmpClient::new`]; with `busy_poll` each socket is read by a
    /// thread spinning on it (a core per address family in use).
    pub fn with_busy_poll(kind: SocketKind, ttl: Option<u32>, busy_poll: bool) -> Arc<Self> {
        Self::with_options(
            kind,
            ttl,
            prober_core::protocol::Marks::default(),
            busy_poll,
            true,
        )
    }

    /// As [`IcmpClient::with_busy_poll`]; `marks` say where and how the
    /// requests leave (TOS byte, source, interface, firewall mark), and
    /// `tx_stamps` asks the kernel for transmit stamps (the client send
    /// part of the split).
    pub fn with_options(
        kind: SocketKind,
        ttl: Option<u32>,
        marks: prober_core::protocol::Marks,
        busy_poll: bool,
        tx_stamps: bool,
    ) -> Arc<Self> {
        Arc::new(Self {
            kind,
            ttl,
            marks,
            busy_poll,
            tx_stamps,
            v4: Mutex::new(None),
            v6: Mutex::new(None),
        })
    }

    fn family(&self, v6: bool) -> Result<Arc<Family>, IcmpError> {
        let slot = if v6 { &self.v6 } else { &self.v4 };
        let mut guard = slot.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(f) = guard.as_ref() {
            return Ok(Arc::clone(f));
        }
        let socket = Arc::new(IcmpSocket::open(
            v6,
            self.kind,
            self.ttl,
            &self.marks,
            self.tx_stamps,
        )?);
        tracing::debug!(
            v6,
            raw = socket.raw,
            ident = socket.ident,
            "opened icmp socket"
        );
        let registry: Arc<Registry> = Arc::default();
        let reader = if self.busy_poll {
            let (sock, reg) = (Arc::clone(&socket), Arc::clone(&registry));
            let mut buf = vec![0u8; MAX_PAYLOAD + 128];
            let spin =
                SpinThread::spawn("prober-icmp-poll", move || match sock.try_recv(&mut buf) {
                    Ok((n, Some(from), stamp, ttl, t4)) => {
                        dispatch(&sock, &reg, &buf[..n], from, got(n, stamp, ttl, t4));
                        Step::Busy
                    }
                    Ok(_) => Step::Busy,
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => Step::Idle,
                    Err(_) => Step::Busy,
                })
                .map_err(|source| IcmpError::Setup {
                    what: "busy-poll thread",
                    source,
                })?;
            Reader::Spin(spin)
        } else {
            Reader::Task(AbortOnDropHandle::new(tokio::spawn(read_replies(
                Arc::clone(&socket),
                Arc::clone(&registry),
            ))))
        };
        // ICMP errors come on the error queue of datagram sockets, so a task
        // waits on it; transmit stamps come there too, and each probe takes
        // its own after its reply (`drain_tx`): on a raw socket no task is
        // woken per stamp (that cost 25 % more CPU with 10,000 targets).
        let queued = Arc::new(AtomicU64::new(0));
        let drains = Arc::new(prober_sys::rx::DrainLock::default());
        let errors = (!socket.raw).then(|| {
            tokio::spawn(read_error_queue(
                Arc::clone(&socket),
                Arc::clone(&registry),
                Arc::clone(&queued),
                Arc::clone(&drains),
            ))
        });
        let fam = Arc::new(Family {
            socket,
            registry,
            queued,
            drains,
            _reader: reader,
            _errors: errors.map(AbortOnDropHandle::new),
        });
        *guard = Some(Arc::clone(&fam));
        Ok(fam)
    }
}

fn lock(r: &Registry) -> std::sync::MutexGuard<'_, HashMap<u64, Arc<Slot>>> {
    r.lock().unwrap_or_else(PoisonError::into_inner)
}

/// What a read gave, as a probe needs it. The kernel stamp stays on the
/// wall clock and is only compared with `t4`, read on that clock right
/// after the read: converting it to the monotonic clock with a fresh pair of
/// clock reads per packet put ICMP RTTs below what the wire allows (20 of
/// 800,000 under load, 18 of them at exactly 0).
fn got(len: usize, kernel: Option<SystemTime>, ttl: Option<u8>, t4: u64) -> Got {
    Got {
        received: Instant::now(),
        t4,
        t4k: kernel.and_then(prober_sys::rx::unix_ns),
        len,
        ttl,
    }
}

async fn read_replies(socket: Arc<IcmpSocket>, registry: Arc<Registry>) {
    let mut buf = vec![0u8; MAX_PAYLOAD + 128];
    loop {
        let (n, from, stamp, ttl, t4) = match socket.recv(&mut buf).await {
            Ok(r) => r,
            Err(error) => {
                // With IP_RECVERR a pending ICMP error is also reported here
                // once; the error queue reader handles the details.
                tracing::debug!(%error, "icmp receive error");
                continue;
            }
        };
        let Some(from) = from else { continue };
        dispatch(&socket, &registry, &buf[..n], from, got(n, stamp, ttl, t4));
    }
}

fn dispatch(socket: &IcmpSocket, registry: &Registry, buf: &[u8], from: IpAddr, arrived: Got) {
    let msg = match from {
        IpAddr::V4(a) => packet::parse_v4(buf, socket.raw, a),
        IpAddr::V6(a) => packet::parse_v6(buf, a),
    };
    match msg {
        Received::EchoReply {
            from,
            ident,
            seq16,
            payload,
            len,
        } => {
            // Raw sockets see every echo reply on the host; datagram sockets
            // only their own.
            if socket.raw && ident != socket.ident {
                return;
            }
            let PayloadCheck::Ours { nonce, seq, intact } = check_payload(payload) else {
                return;
            };
            let Some(slot) = lock(registry).get(&nonce).cloned() else {
                return;
            };
            if slot.addr != from || seq as u16 != seq16 || !intact {
                slot.corrupt.fetch_add(1, Ordering::Relaxed);
                return;
            }
            slot.matcher.deliver(seq, Ok(Got { len, ..arrived }));
        }
        Received::Error {
            target,
            from,
            ident,
            seq16,
            icmp_type,
            code,
            quoted,
        } => {
            if socket.raw && ident != socket.ident {
                return;
            }
            let why = format!("{} from {from}", describe_error(socket.v6, icmp_type, code));
            let err = ProbeError::new(error_kind(socket.v6, icmp_type, code), why);
            deliver_error(registry, target, seq16, check_payload(quoted), &err);
        }
        Received::Other => tracing::trace!(len = buf.len(), "ignoring an icmp message"),
    }
}

/// The kind of an ICMP error: port (or protocol) unreachable is a refusal,
/// as for TCP; every other error says the destination is not reachable.
fn error_kind(v6: bool, icmp_type: u8, code: u8) -> ErrorKind {
    match (v6, icmp_type, code) {
        (false, 3, 2 | 3) | (true, 1, 4) => ErrorKind::Refused,
        _ => ErrorKind::Unreachable,
    }
}

/// Fails the probe an ICMP error is about: by the quoted nonce and seq when
/// the quote is long enough, else the newest pending probe of that address
/// whose seq has the same low 16 bits.
fn deliver_error(
    registry: &Registry,
    target: IpAddr,
    seq16: u16,
    quoted: PayloadCheck,
    err: &ProbeError,
) {
    if let PayloadCheck::Ours { nonce, seq, .. } = quoted {
        if let Some(slot) = lock(registry).get(&nonce) {
            slot.matcher.deliver(seq, Err(err.clone()));
        }
        return;
    }
    // Cloned out so that no matcher is called under the registry lock.
    let slots: Vec<Arc<Slot>> = lock(registry).values().cloned().collect();
    for slot in slots.iter().filter(|s| s.addr == target) {
        if let Some(seq) = slot.matcher.newest_pending(|s| s as u16 == seq16) {
            slot.matcher.deliver(seq, Err(err.clone()));
            return;
        }
    }
}

/// Files a transmit stamp with the probe whose request `frame` is.
fn deliver_tx(registry: &Registry, frame: &[u8], t1k: u64) {
    if let Some((nonce, seq)) = packet::find_payload(frame)
        && let Some(slot) = lock(registry).get(&nonce).cloned()
    {
        slot.tx.put(seq, t1k);
    } else {
        tracing::trace!(len = frame.len(), "a transmit stamp of no probe");
    }
}

/// Reads what the error queue holds now, without waiting, and files each
/// entry: a probe takes its transmit stamp after its reply, and every probe
/// drains before it sends, so stamps of probes that never got a reply (which
/// count against the socket's receive buffer) cannot pile up.
/// Returns when `until` (a slot and seq) has its stamp, when the queue is
/// empty, or after 256 entries. The socket is shared by every target, and
/// another worker's probe or the error task may be reading the queue too:
/// the drain lock is held throughout.
fn drain_tx(fam: &Family, until: Option<(&Slot, u64)>) {
    let mut buf = vec![0u8; MAX_PAYLOAD + 128];
    let _held = fam.drains.hold();
    for _ in 0..256 {
        match fam.socket.try_recv_error(&mut buf) {
            Ok((n, Some(queued))) => {
                if matches!(queued, Queued::TxStamp(_)) {
                    // Saturating: a stamp of a send before this count began.
                    let _ = fam
                        .queued
                        .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |q| {
                            Some(q.saturating_sub(1))
                        });
                }
                on_queued(&fam.socket, &fam.registry, &buf[..n.min(buf.len())], queued);
                if until.is_some_and(|(slot, seq)| slot.tx.has(seq)) {
                    return;
                }
            }
            Ok((_, None)) => {}
            Err(_) => return,
        }
    }
}

/// Files one error-queue entry: a transmit stamp with its probe, an ICMP
/// error with the probe it is about.
fn on_queued(socket: &IcmpSocket, registry: &Registry, bytes: &[u8], queued: Queued) {
    match queued {
        Queued::TxStamp(t1k) => deliver_tx(registry, bytes, t1k),
        Queued::Icmp(err) => {
            tracing::trace!(n = bytes.len(), ?err, "icmp error queued");
            // The queued bytes are our own echo request: header, then payload.
            let seq16 = bytes
                .get(6..8)
                .map_or(0, |b| u16::from_be_bytes([b[0], b[1]]));
            let quoted = check_payload(bytes.get(8..).unwrap_or_default());
            let from = err
                .offender
                .map_or_else(String::new, |a| format!(" from {a}"));
            let why = format!(
                "{}{from}",
                describe_error(socket.v6, err.icmp_type, err.code)
            );
            let target = err.target.or(err.offender).unwrap_or(if socket.v6 {
                IpAddr::V6(std::net::Ipv6Addr::UNSPECIFIED)
            } else {
                IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED)
            });
            let err = ProbeError::new(error_kind(socket.v6, err.icmp_type, err.code), why);
            deliver_error(registry, target, seq16, quoted, &err);
        }
    }
}

async fn read_error_queue(
    socket: Arc<IcmpSocket>,
    registry: Arc<Registry>,
    count: Arc<AtomicU64>,
    drains: Arc<prober_sys::rx::DrainLock>,
) {
    let mut buf = vec![0u8; MAX_PAYLOAD + 128];
    loop {
        let read = socket
            .recv_error_with(&drains, &mut buf, |bytes, queued| {
                if matches!(queued, Queued::TxStamp(_)) {
                    let _ = count.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |q| {
                        Some(q.saturating_sub(1))
                    });
                }
                on_queued(&socket, &registry, bytes, queued);
            })
            .await;
        match read {
            Ok(()) => {}
            Err(error) => {
                tracing::debug!(%error, "icmp error queue");
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    }
}

/// `icmp://host`: ICMP echo request/reply. Replies are matched by address,
/// identifier, sequence and a per-probe nonce in the payload, which also
/// carries the full 64-bit seq, so the 16-bit ICMP sequence can wrap without
/// misattributing a reply. The RTT uses the kernel's receive timestamp
/// (SO_TIMESTAMPNS), as ping does.
#[derive(Debug)]
pub struct IcmpProbe {
    family: Arc<Family>,
    slot: Arc<Slot>,
    nonce: u64,
    size: usize,
    /// Adaptive receive's budget (`--receive adaptive`); `None`: park.
    spin: Option<prober_core::spin::SpinBudget>,
}

impl IcmpProbe {
    /// A probe of `addr` with `size` payload bytes on `client`'s socket for
    /// the address family, opening it if needed.
    ///
    /// # Errors
    /// If no ICMP socket can be opened ([`IcmpError::Open`] names the remedies).
    pub fn new(client: &IcmpClient, addr: IpAddr, size: usize) -> Result<Self, IcmpError> {
        let family = client.family(addr.is_ipv6())?;
        let slot = Arc::new(Slot {
            addr,
            matcher: Matcher::new(),
            corrupt: AtomicU64::new(0),
            tx: prober_sys::rx::TxStamps::default(),
        });
        let mut nonce = fastrand::u64(..);
        {
            let mut reg = lock(&family.registry);
            while reg.contains_key(&nonce) {
                nonce = fastrand::u64(..);
            }
            reg.insert(nonce, Arc::clone(&slot));
        }
        Ok(Self {
            family,
            slot,
            nonce,
            size,
            spin: None,
        })
    }

    /// Receives replies as `receive` says: with `adaptive`, each probe polls
    /// the family's socket for up to its spin budget after the send, and
    /// hands whatever it reads (other targets' replies too) to their
    /// probes. No effect with busy-poll, whose thread already spins.
    #[must_use]
    pub fn with_receive(mut self, receive: &prober_core::spin::Receive) -> Self {
        if matches!(self.family._reader, Reader::Task(_)) {
            self.spin = receive.budget();
        }
        self
    }

    /// Polls the socket without blocking until `waiter` has its reply or
    /// the budget runs out.
    fn spin_for_reply(
        &self,
        budget: &prober_core::spin::SpinBudget,
        waiter: &prober_core::Waiter<Result<Got, ProbeError>>,
    ) {
        thread_local! {
            // Whole datagrams of any size: the socket is shared, and a
            // short buffer would truncate another target's reply.
            static BUF: std::cell::RefCell<Vec<u8>> =
                std::cell::RefCell::new(vec![0u8; MAX_PAYLOAD + 128]);
        }
        let socket = &self.family.socket;
        let spun = BUF.with_borrow_mut(|buf| {
            budget.spin(|| {
                if let Ok((n, Some(from), stamp, ttl, t4)) = socket.try_recv(buf) {
                    dispatch(
                        socket,
                        &self.family.registry,
                        &buf[..n],
                        from,
                        got(n, stamp, ttl, t4),
                    );
                }
                waiter.is_answered()
            })
        });
        if let Some((used, caught)) = spun {
            self.slot.matcher.count_spin(used, caught);
        }
    }
}

impl Drop for IcmpProbe {
    fn drop(&mut self) {
        lock(&self.family.registry).remove(&self.nonce);
    }
}

impl Probe for IcmpProbe {
    async fn probe_at(&self, seq: u64, gate: Gate) -> Result<Reply, ProbeError> {
        let mut payload = vec![0u8; self.size];
        encode_payload(&mut payload, self.nonce, seq);
        let socket = &self.family.socket;
        let pkt = if socket.v6 {
            packet::echo_request_v6(socket.ident, seq as u16, &payload)
        } else {
            packet::echo_request_v4(socket.ident, seq as u16, &payload)
        };
        // Stamps of sends whose probe never took them (no reply) count
        // against the socket's receive buffer: read them before sending.
        if socket.tx_stamps && self.family.queued.load(Ordering::Relaxed) > 0 {
            drain_tx(&self.family, None);
        }
        let mut waiter = self.slot.matcher.register(seq);
        gate.pass().await;
        let sent = Instant::now();
        // t1 on the wall clock, next to the send call: kernel stamps are only
        // ever compared with it, never converted.
        let t1 = unix_now_ns();
        // Counted before the send, so its stamp is never read before it is
        // counted (a send that fails is taken back).
        if socket.tx_stamps {
            self.family.queued.fetch_add(1, Ordering::Relaxed);
        }
        if let Err(e) = socket
            .sock
            .send_to(&pkt, SocketAddr::new(self.slot.addr, 0))
            .await
        {
            if socket.tx_stamps {
                let _ =
                    self.family
                        .queued
                        .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |q| {
                            Some(q.saturating_sub(1))
                        });
            }
            return Err(ProbeError::io("send", &e));
        }
        if let Some(budget) = &self.spin {
            self.spin_for_reply(budget, &waiter);
        }
        let got = waiter.reply().await?;
        if let Some(budget) = &self.spin {
            budget.record(got.received.saturating_duration_since(sent));
        }
        let mut t1k = self.slot.tx.take(seq);
        if t1k.is_none() && socket.tx_stamps {
            drain_tx(&self.family, Some((&self.slot, seq)));
            t1k = self.slot.tx.take(seq);
        }
        let stamps = Stamps {
            t1: Some(t1),
            t1k,
            t4k: got.t4k,
            t4: Some(got.t4),
            responder: None,
            kernel_peer: true,
            handshake: None,
        };
        Ok(Reply {
            sent,
            received: got.received,
            server_dwell: None,
            rx_wake: prober_sys::rx::wake_ns(got.t4k, got.t4).map(Duration::from_nanos),
            bytes: got.len,
            ttl: got.ttl,
            stamps,
            app: Default::default(),
        })
    }

    fn anomalies(&self) -> Anomalies {
        let mut a = self.slot.matcher.anomalies();
        a.corrupt = self.slot.corrupt.load(Ordering::Relaxed);
        a
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prober_core::Delivery;
    use std::net::Ipv4Addr;

    fn fake_got(at: Instant) -> Got {
        Got {
            received: at,
            t4: 0,
            t4k: None,
            len: 0,
            ttl: None,
        }
    }

    fn registry_with(addr: IpAddr, nonce: u64) -> (Registry, Arc<Slot>) {
        let slot = Arc::new(Slot {
            addr,
            matcher: Matcher::new(),
            corrupt: AtomicU64::new(0),
            tx: prober_sys::rx::TxStamps::default(),
        });
        let reg = Mutex::new(HashMap::from([(nonce, Arc::clone(&slot))]));
        (reg, slot)
    }

    fn fake_socket_reply(nonce: u64, seq: u64, seq16: u16) -> Vec<u8> {
        let mut payload = vec![0u8; 56];
        encode_payload(&mut payload, nonce, seq);
        let mut r = packet::echo_request_v4(1, seq16, &payload);
        r[0] = 0;
        r
    }

    /// A datagram-socket stand-in for `dispatch`, which never reads from it.
    async fn fake_socket() -> IcmpSocket {
        IcmpSocket {
            sock: tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap(),
            raw: false,
            v6: false,
            ident: 1,
            tx_stamps: false,
        }
    }

    #[tokio::test]
    async fn matches_by_nonce_and_full_seq_across_wraps() {
        let lo = IpAddr::V4(Ipv4Addr::LOCALHOST);
        let (reg, slot) = registry_with(lo, 42);
        let socket = fake_socket().await;
        // seq 5 and seq 65541 share the low 16 bits.
        let mut old = slot.matcher.register(5);
        let mut new = slot.matcher.register(65_541);
        let now = Instant::now();
        dispatch(
            &socket,
            &reg,
            &fake_socket_reply(42, 65_541, 5),
            lo,
            fake_got(now),
        );
        assert_eq!(new.recv().await.unwrap().unwrap().len, 64);
        dispatch(
            &socket,
            &reg,
            &fake_socket_reply(42, 5, 5),
            lo,
            fake_got(now),
        );
        assert!(old.recv().await.unwrap().is_ok());
        // A second copy is a duplicate; a reply to a dropped waiter is late.
        dispatch(
            &socket,
            &reg,
            &fake_socket_reply(42, 5, 5),
            lo,
            fake_got(now),
        );
        drop(slot.matcher.register(7));
        dispatch(
            &socket,
            &reg,
            &fake_socket_reply(42, 7, 7),
            lo,
            fake_got(now),
        );
        let a = slot.matcher.anomalies();
        assert_eq!((a.duplicate, a.late), (1, 1));
    }

    #[tokio::test]
    async fn wrong_nonce_is_ignored_and_bad_payload_is_corrupt() {
        let lo = IpAddr::V4(Ipv4Addr::LOCALHOST);
        let (reg, slot) = registry_with(lo, 42);
        let socket = fake_socket().await;
        let w = slot.matcher.register(3);
        dispatch(
            &socket,
            &reg,
            &fake_socket_reply(41, 3, 3),
            lo,
            fake_got(Instant::now()),
        );
        assert_eq!(
            slot.matcher.pending(),
            1,
            "another run's reply must not match"
        );
        let mut bad = fake_socket_reply(42, 3, 3);
        let last = bad.len() - 1;
        bad[last] ^= 0xff;
        dispatch(&socket, &reg, &bad, lo, fake_got(Instant::now()));
        // The header seq disagrees with the payload seq: corrupt too.
        dispatch(
            &socket,
            &reg,
            &fake_socket_reply(42, 3, 4),
            lo,
            fake_got(Instant::now()),
        );
        // From another address: corrupt.
        dispatch(
            &socket,
            &reg,
            &fake_socket_reply(42, 3, 3),
            IpAddr::V4(Ipv4Addr::new(127, 0, 0, 9)),
            fake_got(Instant::now()),
        );
        assert_eq!(slot.corrupt.load(Ordering::Relaxed), 3);
        assert_eq!(slot.matcher.pending(), 1);
        assert_eq!(
            slot.matcher.deliver(3, Ok(fake_got(Instant::now()))),
            Delivery::Matched
        );
        drop(w);
    }

    #[test]
    fn a_kernel_stamp_never_moves_the_receive_time() {
        // Before, the receive instant was now − (wall now − kernel stamp),
        // two clock reads apart: a stall between them moved it earlier, down
        // to the send and below (recorded as RTT 0). Now the receive instant
        // is the read's own, and the stamp stays on the wall clock.
        let before = Instant::now();
        let stamp = SystemTime::now() - Duration::from_millis(5);
        let g = got(64, Some(stamp), Some(64), unix_now_ns());
        assert!(g.received >= before);
        assert_eq!(g.t4k, prober_sys::rx::unix_ns(stamp));
        assert_eq!(got(64, None, None, 0).t4k, None);
    }

    #[test]
    fn transmit_stamps_are_filed_by_the_payload() {
        let lo = IpAddr::V4(Ipv4Addr::LOCALHOST);
        let (reg, slot) = registry_with(lo, 42);
        let mut payload = vec![0u8; 56];
        encode_payload(&mut payload, 42, 7);
        // As looped back on `lo`: 14 bytes of link header, then IP and ICMP.
        let mut frame = vec![0u8; 14 + 20 + 8];
        frame.extend_from_slice(&payload);
        deliver_tx(&reg, &frame, 123_456);
        assert_eq!(slot.tx.take(7), Some(123_456));
        assert_eq!(slot.tx.take(7), None);
        deliver_tx(&reg, &frame[..30], 1);
        assert_eq!(slot.tx.take(7), None, "a truncated frame files nothing");
    }
}

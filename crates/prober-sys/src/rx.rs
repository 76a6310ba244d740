//! Kernel receive timestamps (SO_TIMESTAMPNS): reading a socket with the
//! time the kernel received each message, and the receive wake-up they give
//! (how long after that the reader got to it).

use std::io::{self, IoSliceMut};
use std::os::fd::{AsRawFd, BorrowedFd};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use nix::sys::socket::{ControlMessageOwned, MsgFlags, SockaddrLike, recvmsg, setsockopt, sockopt};

/// Turns on kernel receive timestamps for `fd`, for [`recv_stamped`].
///
/// # Errors
/// If the socket refuses the option.
pub fn enable_timestamps(fd: BorrowedFd<'_>) -> io::Result<()> {
    keep_timestamping_on();
    setsockopt(&fd, sockopt::ReceiveTimestampns, &true).map_err(io::Error::from)
}

/// Keeps the kernel's receive timestamping switched on for as long as the
/// process runs, with one socket of its own that asks for it and is never
/// closed.
///
/// The kernel stamps received packets only while some socket wants it: the
/// first socket to ask switches a global static key on, and when the last
/// one closes it is switched off again. Switching patches kernel code and
/// takes tens of microseconds, inside the `setsockopt` of the socket that
/// asks. A probe that opens a connection per request (`--new-connection`,
/// `tcp-crr://`) with no other stamping socket alive paid that on every
/// probe: measured with `prober run --new-connection http://…`, the connect
/// phase's p50 was 251 µs alone and 189 µs with another stamping socket
/// open (a 60–100 µs difference over three runs).
fn keep_timestamping_on() {
    static HOLD: std::sync::OnceLock<Option<socket2::Socket>> = std::sync::OnceLock::new();
    HOLD.get_or_init(|| {
        let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::DGRAM, None).ok()?;
        setsockopt(&s, sockopt::ReceiveTimestampns, &true).ok()?;
        Some(s)
    });
}

/// Receives one message without blocking: its length, its sender (for an
/// address type `S`; `()` for a connected socket) and the kernel's receive
/// time, if it stamped it (for TCP, that of the last segment read). Reports
/// `WouldBlock` when there is nothing to read.
///
/// # Errors
/// Whatever `recvmsg` reports, `WouldBlock` included.
pub fn recv_stamped<S: SockaddrLike>(
    fd: BorrowedFd<'_>,
    buf: &mut [u8],
) -> io::Result<(usize, Option<S>, Option<SystemTime>)> {
    recv_stamped_ttl(fd, buf).map(|(n, from, stamp, _)| (n, from, stamp))
}

/// Asks the kernel to pass each datagram's IP TTL (IPv6 hop limit) with it,
/// for [`recv_stamped_ttl`].
///
/// # Errors
/// If the socket refuses the option.
pub fn enable_ttl(fd: BorrowedFd<'_>, v6: bool) -> io::Result<()> {
    if v6 {
        setsockopt(&fd, sockopt::Ipv6RecvHopLimit, &true)?;
    } else {
        setsockopt(&fd, sockopt::Ipv4RecvTtl, &true)?;
    }
    Ok(())
}

/// What [`recv_stamped_ttl`] read: length, sender, kernel receive time, TTL.
pub type Stamped<S> = (usize, Option<S>, Option<SystemTime>, Option<u8>);

/// As [`recv_stamped`], with the datagram's TTL or hop limit where
/// [`enable_ttl`] asked for it.
///
/// # Errors
/// Whatever `recvmsg` reports, `WouldBlock` included.
pub fn recv_stamped_ttl<S: SockaddrLike>(
    fd: BorrowedFd<'_>,
    buf: &mut [u8],
) -> io::Result<Stamped<S>> {
    recv_meta(fd, buf).map(|m| (m.len, m.from, m.stamp, m.ttl))
}

/// Asks the kernel to pass each datagram's TOS octet (IPv6 traffic class)
/// and destination address with it, for [`recv_meta`].
///
/// # Errors
/// If the socket refuses an option.
pub fn enable_tos_and_dst(fd: BorrowedFd<'_>, v6: bool) -> io::Result<()> {
    if v6 {
        setsockopt(&fd, sockopt::Ipv6RecvTClass, &true)?;
        setsockopt(&fd, sockopt::Ipv6RecvPacketInfo, &true)?;
    } else {
        setsockopt(&fd, sockopt::IpRecvTos, &true)?;
        setsockopt(&fd, sockopt::Ipv4PacketInfo, &true)?;
    }
    Ok(())
}

/// One datagram as [`recv_meta`] read it.
#[derive(Debug, Clone, Copy)]
pub struct Meta<S> {
    /// Its length.
    pub len: usize,
    /// Its sender.
    pub from: Option<S>,
    /// The kernel's receive time.
    pub stamp: Option<SystemTime>,
    /// Its IP TTL or hop limit ([`enable_ttl`]).
    pub ttl: Option<u8>,
    /// Its TOS octet or traffic class: DSCP and ECN
    /// ([`enable_tos_and_dst`]).
    pub tos: Option<u8>,
    /// The address it was sent to ([`enable_tos_and_dst`]).
    pub dst: Option<std::net::IpAddr>,
}

/// Room for one receive's control messages, on the stack and aligned as
/// `cmsghdr` needs: `nix::cmsg_space!` allocated a `Vec` for every
/// datagram, and allocation was about a tenth of the daemon's CPU at
/// 10,000 targets (BENCHMARKS.md). 640 bytes hold SCM_TIMESTAMPNS,
/// SCM_TIMESTAMPING (three timespecs), an extended error with its offender
/// address, the TTL, TOS and packet info with room to spare: a truncated
/// control message (MSG_CTRUNC) would lose them all.
#[derive(Debug)]
#[repr(C, align(8))]
pub struct CmsgBuf(pub [u8; 640]);

impl CmsgBuf {
    /// An empty one.
    #[must_use]
    pub const fn new() -> Self {
        Self([0; 640])
    }
}

impl Default for CmsgBuf {
    fn default() -> Self {
        Self::new()
    }
}

/// Receives one datagram without blocking, with every control message
/// prober asks for: kernel stamp, TTL, TOS and destination address.
///
/// # Errors
/// Whatever `recvmsg` reports, `WouldBlock` included.
pub fn recv_meta<S: SockaddrLike>(fd: BorrowedFd<'_>, buf: &mut [u8]) -> io::Result<Meta<S>> {
    let mut iov = [IoSliceMut::new(buf)];
    let mut cmsg = CmsgBuf::new();
    let msg = recvmsg::<S>(
        fd.as_raw_fd(),
        &mut iov,
        Some(&mut cmsg.0),
        MsgFlags::MSG_DONTWAIT,
    )
    .map_err(io::Error::from)?;
    let mut m = Meta {
        len: msg.bytes,
        from: None,
        stamp: None,
        ttl: None,
        tos: None,
        dst: None,
    };
    if let Ok(cmsgs) = msg.cmsgs() {
        for c in cmsgs {
            match c {
                ControlMessageOwned::ScmTimestampns(ts) => m.stamp = system_time(&ts),
                ControlMessageOwned::ScmTimestampsns(ts) if m.stamp.is_none() => {
                    m.stamp = system_time(&ts.system);
                }
                ControlMessageOwned::Ipv4Ttl(t) | ControlMessageOwned::Ipv6HopLimit(t) => {
                    m.ttl = u8::try_from(t).ok();
                }
                ControlMessageOwned::Ipv4Tos(t) => m.tos = Some(t),
                ControlMessageOwned::Ipv6TClass(t) => m.tos = u8::try_from(t).ok(),
                ControlMessageOwned::Ipv4PacketInfo(p) => {
                    m.dst = Some(std::net::Ipv4Addr::from(u32::from_be(p.ipi_addr.s_addr)).into());
                }
                ControlMessageOwned::Ipv6PacketInfo(p) => {
                    m.dst = Some(std::net::Ipv6Addr::from(p.ipi6_addr.s6_addr).into());
                }
                _ => {}
            }
        }
    }
    m.from = msg.address;
    Ok(m)
}

/// A kernel timespec on CLOCK_REALTIME as a `SystemTime`; `None` for zero.
pub fn system_time(ts: &nix::sys::time::TimeSpec) -> Option<SystemTime> {
    let (s, ns) = (
        u64::try_from(ts.tv_sec()).ok()?,
        u32::try_from(ts.tv_nsec()).ok()?,
    );
    (s > 0 || ns > 0).then(|| UNIX_EPOCH + Duration::new(s, ns))
}

/// Nanoseconds since the Unix epoch of a wall-clock time.
pub fn unix_ns(t: SystemTime) -> Option<u64> {
    u64::try_from(t.duration_since(UNIX_EPOCH).ok()?.as_nanos()).ok()
}

/// The IPv4 or IPv6 address a datagram came from, as `recvmsg` gave it.
pub fn socket_addr(a: &nix::sys::socket::SockaddrStorage) -> Option<std::net::SocketAddr> {
    if let Some(v4) = a.as_sockaddr_in() {
        return Some((v4.ip(), v4.port()).into());
    }
    a.as_sockaddr_in6().map(|v6| (v6.ip(), v6.port()).into())
}

/// [`enable_tx_timestamps`] for a probe that can do without: `false`, and
/// one notice per process (a warning-level log line, shown by default),
/// when the kernel or socket type refuses. The parts that need the stamps
/// (client send, network) then stay unknown; it is never an error.
pub fn tx_timestamps_or_notice(fd: BorrowedFd<'_>, socket: &str) -> bool {
    or_notice(enable_tx_timestamps(fd), socket)
}

/// As [`tx_timestamps_or_notice`], with the stamps numbered
/// ([`enable_tx_timestamps_id`]).
pub fn tx_timestamps_id_or_notice(fd: BorrowedFd<'_>, socket: &str) -> bool {
    or_notice(enable_tx_timestamps_id(fd), socket)
}

fn or_notice(enabled: io::Result<()>, socket: &str) -> bool {
    static NOTICE: std::sync::Once = std::sync::Once::new();
    match enabled {
        Ok(()) => true,
        Err(error) => {
            NOTICE.call_once(|| {
                tracing::warn!(
                    "notice: no kernel transmit stamps on {socket} sockets ({error}); the client send and network parts stay unknown"
                );
            });
            false
        }
    }
}

/// Asks for kernel software transmit stamps (SO_TIMESTAMPING with
/// `SOF_TIMESTAMPING_TX_SOFTWARE`), queued with a copy of the packet on the
/// socket's error queue; read them with `MSG_ERRQUEUE`.
///
/// # Errors
/// If the socket refuses the option.
pub fn enable_tx_timestamps(fd: BorrowedFd<'_>) -> io::Result<()> {
    use nix::sys::socket::TimestampingFlag as F;
    set_timestamping(
        fd,
        F::SOF_TIMESTAMPING_TX_SOFTWARE | F::SOF_TIMESTAMPING_SOFTWARE,
    )
}

/// The kernel refused `OPT_RX_FILTER` once: older than 6.12.
static NO_FILTER: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Sets `SO_TIMESTAMPING` to `flags`, with `OPT_RX_FILTER` where the kernel
/// has it (Linux 6.12).
///
/// `SOF_TIMESTAMPING_SOFTWARE` asks for software stamps to be reported,
/// and without the filter that means received data too: every read of a
/// socket with transmit stamps on also carried an `SCM_TIMESTAMPING`
/// control message (48 bytes) beside the `SCM_TIMESTAMPNS` it reads, on
/// both ends of every round trip. The filter keeps the report to the
/// error queue's transmit stamps. Measured on gRPC back to back (pinned,
/// 21 rounds of 10,000 calls): see BENCHMARKS.md, "Transmit stamps".
fn set_timestamping(
    fd: BorrowedFd<'_>,
    flags: nix::sys::socket::TimestampingFlag,
) -> io::Result<()> {
    use nix::sys::socket::TimestampingFlag as F;
    use std::sync::atomic::Ordering;
    if NO_FILTER.load(Ordering::Relaxed) {
        return setsockopt(&fd, sockopt::Timestamping, &flags).map_err(io::Error::from);
    }
    let filtered = flags | F::from_bits_retain(nix::libc::SOF_TIMESTAMPING_OPT_RX_FILTER);
    match setsockopt(&fd, sockopt::Timestamping, &filtered) {
        // EINVAL is also a TCP socket's answer to OPT_ID once it is closed
        // (a connection the peer reset): only a kernel that takes the same
        // flags without the filter lacks it.
        Err(nix::errno::Errno::EINVAL) => {
            setsockopt(&fd, sockopt::Timestamping, &flags)?;
            NO_FILTER.store(true, Ordering::Relaxed);
            Ok(())
        }
        other => other.map_err(io::Error::from),
    }
}

/// Reads one entry of the socket's error queue without blocking: the bytes
/// queued (the packet as sent, link header included) and, for a transmit
/// stamp, the stamp in ns since the Unix epoch (`None` for other entries,
/// such as ICMP errors). `WouldBlock` when the queue is empty.
///
/// # Errors
/// Whatever `recvmsg` reports.
pub fn recv_tx_stamp(fd: BorrowedFd<'_>, buf: &mut [u8]) -> io::Result<(usize, Option<u64>)> {
    recv_error_entry(fd, buf).map(|(n, stamp)| (n, stamp.map(|(_, t)| t)))
}

/// Reads one error-queue entry without blocking into `buf`: its length and,
/// for a transmit stamp, its `OPT_ID` key (`ee_data`) and stamp.
fn recv_error_entry(fd: BorrowedFd<'_>, buf: &mut [u8]) -> io::Result<(usize, Option<(u32, u64)>)> {
    Ok(match recv_error_queue(fd, buf)? {
        ErrorEntry::TxStamp { key, ns, len } => (len, Some((key, ns))),
        ErrorEntry::Icmp { len, .. } | ErrorEntry::Other { len } => (len, None),
    })
}

/// Asks for kernel software transmit stamps without a copy of the packet
/// (`OPT_TSONLY`), each numbered by the socket's send counter (`OPT_ID`:
/// datagrams sent since this call, from 0), for [`recv_tx_stamp_id`].
///
/// # Errors
/// If the socket refuses the option.
pub fn enable_tx_timestamps_id(fd: BorrowedFd<'_>) -> io::Result<()> {
    use nix::sys::socket::TimestampingFlag as F;
    let flags = F::SOF_TIMESTAMPING_TX_SOFTWARE
        | F::SOF_TIMESTAMPING_SOFTWARE
        | F::SOF_TIMESTAMPING_OPT_ID
        | F::SOF_TIMESTAMPING_OPT_TSONLY;
    set_timestamping(fd, flags)
}

/// As [`enable_tx_timestamps_id`], on a TCP connection that has written
/// already: its keys count bytes from the next one written
/// (`OPT_ID_TCP`, Linux 6.2), where plain `OPT_ID` counts them from the
/// first byte not yet acknowledged, which a reply in flight moves.
///
/// # Errors
/// If the socket refuses the option (an older kernel).
pub fn enable_tx_timestamps_id_tcp(fd: BorrowedFd<'_>) -> io::Result<()> {
    use nix::sys::socket::TimestampingFlag as F;
    let flags = F::SOF_TIMESTAMPING_TX_SOFTWARE
        | F::SOF_TIMESTAMPING_SOFTWARE
        | F::SOF_TIMESTAMPING_OPT_ID
        | F::SOF_TIMESTAMPING_OPT_TSONLY
        | F::from_bits_retain(nix::libc::SOF_TIMESTAMPING_OPT_ID_TCP);
    set_timestamping(fd, flags)
}

/// Reads one transmit stamp of [`enable_tx_timestamps_id`] without
/// blocking: the send counter of the datagram and its stamp (ns since the
/// epoch); `Ok(None)` for an entry that is not a stamp (an ICMP error).
/// `WouldBlock` when the queue is empty.
///
/// # Errors
/// Whatever `recvmsg` reports.
pub fn recv_tx_stamp_id(fd: BorrowedFd<'_>) -> io::Result<Option<(u32, u64)>> {
    // OPT_TSONLY: no copy of the packet, only the stamp.
    let mut buf = [0u8; 64];
    recv_error_entry(fd, &mut buf).map(|(_, stamp)| stamp)
}

/// Reads up to `max` entries of the error queue without blocking and hands
/// each transmit stamp numbered by [`enable_tx_timestamps_id`] to `file`
/// as (key, ns since the epoch); entries without a stamp are skipped.
pub fn drain_tx_stamps_id(fd: BorrowedFd<'_>, max: usize, mut file: impl FnMut(u32, u64)) {
    drain_tx_stamps_id_until(fd, max, |key, stamp| {
        file(key, stamp);
        false
    });
}

/// As [`drain_tx_stamps_id`], and stops after the stamp for which `file`
/// returns true: the queue is in order, so a reader that has the stamp it
/// waits for leaves nothing behind it, and saves the read that would find
/// the queue empty.
pub fn drain_tx_stamps_id_until(
    fd: BorrowedFd<'_>,
    max: usize,
    mut file: impl FnMut(u32, u64) -> bool,
) {
    for _ in 0..max {
        match recv_tx_stamp_id(fd) {
            Ok(Some((key, stamp))) => {
                if file(key, stamp) {
                    break;
                }
            }
            Ok(None) => {}
            Err(_) => break,
        }
    }
}

/// Keeps the readers of one socket's error queue apart: held by a drain
/// from its first read of the queue to its last filing.
///
/// A probe that finds its transmit stamp missing drains the queue itself,
/// while another reader (a busy-poll thread, another probe on another
/// worker, an error-queue task) may be draining too. Without the lock, the
/// other reader can have taken the stamp off the queue and not filed it
/// yet: the probe's drain then finds the queue empty and its stamp nowhere
/// (two busy-polled TCP probes in 100 lost their client send part so in a
/// CI run). Held, the probe's drain waits until the stamp is filed.
/// One per socket; [`KeyedTxStamps`] holds its keys' lock the same way.
#[derive(Debug, Default)]
pub struct DrainLock(std::sync::Mutex<()>);

impl DrainLock {
    /// Holds the queue until the guard drops. Never across an `.await`.
    pub fn hold(&self) -> std::sync::MutexGuard<'_, ()> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// Transmit stamps the kernel numbers ([`enable_tx_timestamps_id`]: by
/// byte on TCP, by datagram on UDP), filed under the seq of the probe each
/// number belongs to.
#[derive(Debug, Default)]
pub struct KeyedTxStamps {
    /// (key, seq) of probes whose stamp has not been read yet.
    keys: std::sync::Mutex<std::collections::VecDeque<(u32, u64)>>,
    stamps: TxStamps,
}

impl KeyedTxStamps {
    /// Says that the stamp numbered `key` is the one of `seq`. Call it
    /// before the send: the stamp may be read before the send returns.
    pub fn expect(&self, key: u32, seq: u64) {
        let mut keys = self
            .keys
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if keys.len() >= TxStamps::KEPT {
            keys.pop_front();
        }
        keys.push_back((key, seq));
    }

    /// Reads the error queue without blocking and files each stamp under
    /// its probe's seq.
    ///
    /// The keys' lock is held from the first read of the queue to the last
    /// filing, as a [`DrainLock`] would be: a second drain waits until the
    /// stamps the first took off the queue are filed.
    pub fn drain(&self, fd: BorrowedFd<'_>) {
        let mut keys = self
            .keys
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        drain_tx_stamps_id(fd, 64, |key, stamp| {
            if let Some(at) = keys.iter().position(|k| k.0 == key)
                && let Some((_, seq)) = keys.remove(at)
            {
                self.stamps.put(seq, stamp);
            }
        });
    }

    /// Takes the stamp of `seq`.
    pub fn take(&self, seq: u64) -> Option<u64> {
        self.stamps.take(seq)
    }
}

/// Kernel transmit stamps (ns since the epoch) by probe seq, filed as they
/// are read from an error queue and kept until their probe takes them.
/// Bounded: a probe that got no reply never takes its stamp, so the oldest
/// go first.
#[derive(Debug, Default)]
pub struct TxStamps {
    kept: std::sync::Mutex<std::collections::VecDeque<(u64, u64)>>,
}

impl TxStamps {
    /// Stamps kept at most.
    pub const KEPT: usize = 1024;

    fn lock(&self) -> std::sync::MutexGuard<'_, std::collections::VecDeque<(u64, u64)>> {
        self.kept
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Files the stamp of `seq`.
    pub fn put(&self, seq: u64, stamp: u64) {
        let mut kept = self.lock();
        if kept.len() >= Self::KEPT {
            kept.pop_front();
        }
        kept.push_back((seq, stamp));
    }

    /// True when the stamp of `seq` is filed.
    pub fn has(&self, seq: u64) -> bool {
        self.lock().iter().any(|(s, _)| *s == seq)
    }

    /// Takes the stamp of `seq`.
    pub fn take(&self, seq: u64) -> Option<u64> {
        let mut kept = self.lock();
        let at = kept.iter().position(|(s, _)| *s == seq)?;
        kept.remove(at).map(|(_, t)| t)
    }
}

/// The receive wake-up, in ns: the wall-clock time `read` taken right after
/// the read minus the kernel's receive stamp `kernel` (both ns since the
/// epoch). `None` without a stamp, or for a stamp after the read or more
/// than a second before it, which means the wall clock moved.
pub fn wake_ns(kernel: Option<u64>, read: u64) -> Option<u64> {
    read.checked_sub(kernel?).filter(|w| *w < 1_000_000_000)
}

#[cfg(test)]
mod tests {
    use std::io::Write as _;
    use std::os::fd::AsFd as _;

    use super::*;

    #[test]
    fn wake_ns_rejects_clock_jumps() {
        let read = 10_000_000_000;
        assert_eq!(wake_ns(Some(read - 5_000_000), read), Some(5_000_000));
        assert_eq!(wake_ns(Some(read - 2_000_000_000), read), None);
        assert_eq!(wake_ns(Some(read + 1), read), None);
        assert_eq!(wake_ns(None, read), None);
    }

    /// A socket with transmit stamps on reads its data with the receive
    /// stamp it asked for (`SO_TIMESTAMPNS`) and no second, unasked-for
    /// `SCM_TIMESTAMPING` beside it, where the kernel has the filter.
    #[test]
    fn transmit_stamps_add_nothing_to_a_read() {
        use std::net::{TcpListener, TcpStream};
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let mut client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (server, _) = listener.accept().unwrap();
        enable_timestamps(server.as_fd()).unwrap();
        enable_tx_timestamps_id(server.as_fd()).unwrap();
        // The kernel switches receive stamping on from a work queue.
        std::thread::sleep(std::time::Duration::from_millis(50));
        client.write_all(b"hi").unwrap();
        let mut buf = [0u8; 8];
        let mut iov = [IoSliceMut::new(&mut buf)];
        let mut cmsg = CmsgBuf::new();
        let msg = recvmsg::<()>(
            server.as_raw_fd(),
            &mut iov,
            Some(&mut cmsg.0),
            MsgFlags::empty(),
        )
        .unwrap();
        let kinds: Vec<_> = msg
            .cmsgs()
            .unwrap()
            .map(|c| matches!(c, ControlMessageOwned::ScmTimestampns(_)))
            .collect();
        if NO_FILTER.load(std::sync::atomic::Ordering::Relaxed) {
            // An older kernel: both, as before.
            assert_eq!(kinds.len(), 2, "{kinds:?}");
        } else {
            assert_eq!(kinds, [true]);
        }
    }

    /// A probe that finds its transmit stamp missing and drains the queue
    /// itself finds it, even while a reader thread drains the same queue
    /// without pause (as the busy-poll reader does): a stamp the reader
    /// took off the queue is filed before the probe's drain returns.
    #[test]
    fn a_stamp_drained_by_another_thread_is_never_lost() {
        use std::net::{TcpListener, TcpStream};
        use std::sync::atomic::{AtomicBool, Ordering};
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let mut client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (mut server, _) = listener.accept().unwrap();
        client.set_nodelay(true).unwrap();
        client.set_nonblocking(true).unwrap();
        enable_tx_timestamps_id(client.as_fd()).unwrap();
        /// Stops the reader thread however the test ends.
        struct Stop(std::sync::Arc<AtomicBool>);
        impl Drop for Stop {
            fn drop(&mut self) {
                self.0.store(true, Ordering::Relaxed);
            }
        }
        let stamps = std::sync::Arc::new(KeyedTxStamps::default());
        let stop = Stop(std::sync::Arc::new(AtomicBool::new(false)));
        let reader = {
            let (stamps, stop) = (stamps.clone(), stop.0.clone());
            let fd = client.try_clone().unwrap();
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    stamps.drain(fd.as_fd());
                }
            })
        };
        // Bounded: 20,000 one-byte writes, or 10 s.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let (mut lost, mut sent, mut filed_by_reader) = (0u32, 0u32, 0u32);
        let mut sink = [0u8; 1];
        for seq in 0..20_000u64 {
            if std::time::Instant::now() > deadline {
                break;
            }
            stamps.expect(sent, seq);
            client.write_all(b"x").unwrap();
            sent += 1;
            // As a probe takes its stamp once the reply is in: the byte
            // has arrived, so it was sent and its stamp raised.
            std::io::Read::read_exact(&mut server, &mut sink).unwrap();
            let found = stamps.take(seq);
            filed_by_reader += u32::from(found.is_some());
            let found = found.or_else(|| {
                stamps.drain(client.as_fd());
                stamps.take(seq)
            });
            lost += u32::from(found.is_none());
        }
        drop(stop);
        reader.join().unwrap();
        assert!(sent > 1000, "only {sent} writes in 10 s");
        // The two drained the same queue: the reader filed some stamps.
        assert!(filed_by_reader > 0, "the reader filed none of {sent}");
        assert_eq!(lost, 0, "{lost} of {sent} stamps lost");
    }

    #[test]
    fn reads_with_or_without_a_stamp() {
        let (mut a, b) = std::os::unix::net::UnixStream::pair().unwrap();
        b.set_nonblocking(true).unwrap();
        let mut buf = [0u8; 8];
        let e = recv_stamped::<()>(b.as_fd(), &mut buf).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::WouldBlock);
        a.write_all(b"hi").unwrap();
        // A Unix stream socket gives no stamp and no address worth naming.
        let (n, _, stamp) = recv_stamped::<()>(b.as_fd(), &mut buf).unwrap();
        assert_eq!((n, stamp, &buf[..2]), (2, None, &b"hi"[..]));
    }
}

/// Asks for the ICMP errors about this socket's datagrams (Time Exceeded,
/// Destination Unreachable) on its error queue (`IP_RECVERR`,
/// `IPV6_RECVERR`), each with its sender and the quoted datagram: what
/// tracepath reads, with no privilege.
///
/// # Errors
/// If the socket refuses the option.
pub fn enable_recv_errors(fd: BorrowedFd<'_>, v6: bool) -> io::Result<()> {
    if v6 {
        setsockopt(&fd, sockopt::Ipv6RecvErr, &true).map_err(io::Error::from)
    } else {
        setsockopt(&fd, sockopt::Ipv4RecvErr, &true).map_err(io::Error::from)
    }
}

/// One entry of a socket's error queue, read by [`recv_error_queue`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorEntry {
    /// A transmit stamp numbered by [`enable_tx_timestamps_id`]: the send
    /// counter of the datagram and the stamp (ns since the epoch).
    TxStamp {
        /// The datagram's number.
        key: u32,
        /// When the kernel sent it.
        ns: u64,
        /// The length of what was queued with it (the packet as sent, unless
        /// `OPT_TSONLY`).
        len: usize,
    },
    /// An ICMP or ICMPv6 error about a datagram this socket sent
    /// ([`enable_recv_errors`]); the payload the error quoted (as much of
    /// the datagram's payload as the router sent back) is at the start of
    /// the buffer.
    Icmp {
        /// Who sent the error (a router, or the destination itself).
        from: Option<std::net::IpAddr>,
        /// ICMPv6 rather than ICMP.
        v6: bool,
        /// Its type (11 or 3 for ICMP, 3 or 1 for ICMPv6) and code.
        icmp_type: u8,
        /// Its code.
        code: u8,
        /// When the kernel received it (ns since the epoch), with receive
        /// stamps on ([`enable_timestamps`]).
        ns: Option<u64>,
        /// The length of the quoted payload in the buffer.
        len: usize,
    },
    /// Anything else (a local error).
    Other {
        /// The length of what was queued with it.
        len: usize,
    },
}

/// Reads one entry of the socket's error queue without blocking into
/// `buf`. `WouldBlock` when the queue is empty.
///
/// # Errors
/// Whatever `recvmsg` reports.
pub fn recv_error_queue(fd: BorrowedFd<'_>, buf: &mut [u8]) -> io::Result<ErrorEntry> {
    use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
    let mut iov = [IoSliceMut::new(buf)];
    let mut cmsg = CmsgBuf::new();
    let msg = recvmsg::<()>(
        fd.as_raw_fd(),
        &mut iov,
        Some(&mut cmsg.0),
        MsgFlags::MSG_ERRQUEUE | MsgFlags::MSG_DONTWAIT,
    )
    .map_err(io::Error::from)?;
    let (mut stamp, mut entry) = (None, ErrorEntry::Other { len: msg.bytes });
    if let Ok(cmsgs) = msg.cmsgs() {
        for c in cmsgs {
            match c {
                ControlMessageOwned::ScmTimestampsns(ts) => {
                    stamp = system_time(&ts.system).and_then(unix_ns);
                }
                ControlMessageOwned::ScmTimestampns(ts) => {
                    stamp = system_time(&ts).and_then(unix_ns);
                }
                ControlMessageOwned::Ipv4RecvErr(e, _) | ControlMessageOwned::Ipv6RecvErr(e, _)
                    if e.ee_origin == nix::libc::SO_EE_ORIGIN_TIMESTAMPING =>
                {
                    entry = ErrorEntry::TxStamp {
                        key: e.ee_data,
                        ns: 0,
                        len: msg.bytes,
                    };
                }
                ControlMessageOwned::Ipv4RecvErr(e, from)
                    if e.ee_origin == nix::libc::SO_EE_ORIGIN_ICMP =>
                {
                    entry = ErrorEntry::Icmp {
                        from: from
                            .map(|a| IpAddr::V4(Ipv4Addr::from(u32::from_be(a.sin_addr.s_addr)))),
                        v6: false,
                        icmp_type: e.ee_type,
                        code: e.ee_code,
                        ns: None,
                        len: msg.bytes,
                    };
                }
                ControlMessageOwned::Ipv6RecvErr(e, from)
                    if e.ee_origin == nix::libc::SO_EE_ORIGIN_ICMP6 =>
                {
                    entry = ErrorEntry::Icmp {
                        from: from.map(|a| IpAddr::V6(Ipv6Addr::from(a.sin6_addr.s6_addr))),
                        v6: true,
                        icmp_type: e.ee_type,
                        code: e.ee_code,
                        ns: None,
                        len: msg.bytes,
                    };
                }
                _ => {}
            }
        }
    }
    Ok(match entry {
        ErrorEntry::TxStamp { key, len, .. } => match stamp {
            Some(ns) => ErrorEntry::TxStamp { key, ns, len },
            None => ErrorEntry::Other { len },
        },
        ErrorEntry::Icmp {
            from,
            v6,
            icmp_type,
            code,
            len,
            ..
        } => ErrorEntry::Icmp {
            from,
            v6,
            icmp_type,
            code,
            ns: stamp,
            len,
        },
        other @ ErrorEntry::Other { .. } => other,
    })
}

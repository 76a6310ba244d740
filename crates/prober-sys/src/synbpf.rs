//! Kernel stamps for TCP handshakes from a small BPF program on the
//! interface's transmit (and receive) hook, the cheap alternative to
//! [`crate::syntap`]'s packet socket.
//!
//! Why: a packet socket makes the kernel clone every packet the host sends
//! and run its filter on every packet it sends or receives, which cost a
//! loopback `connect()` more than the stamps' bound (3 % or 0.5 µs) for
//! `tcp-connect://`. This program runs only on the probed interface, clones
//! nothing and keeps its stamps in a shared array that is read without a
//! system call. `benches/src/bin/hookcost.rs` measures both without
//! prober's runtime; BENCHMARKS.md has the figures.
//!
//! Where it stamps: on the device's `tcx` egress hook, where the device
//! takes the SYN (next to the packet socket's outgoing copy), and on its
//! ingress hook, where the SYN-ACK arrives (after the packet sockets'
//! incoming copies). On loopback only the egress hook is attached: the
//! SYN-ACK's transmit there is its arrival, since loopback hands each
//! packet it sends to `netif_rx` in the same call. The clock is
//! `bpf_ktime_get_tai_ns`, the real-time clock plus the TAI offset (whole
//! seconds), so a stamp converts exactly to the wall clock the other
//! stamps use.
//!
//! Written in C (`bpf/synstamp.bpf.c`), built with Debian's clang into the
//! object committed beside it (`bpf/build.sh`; CI rebuilds it and checks
//! the bytes are the same), and loaded and attached with aya. Needs
//! `CAP_BPF` and `CAP_NET_ADMIN` (root) and Linux 6.6 or later (`tcx`);
//! without either [`SynBpf::open`] fails and the caller falls back to the
//! packet socket.

use std::io;
#[cfg(test)]
use std::net::SocketAddr;
use std::net::{IpAddr, UdpSocket};
use std::os::fd::{AsFd as _, AsRawFd as _};
use std::sync::atomic::{AtomicU16, AtomicU32, AtomicU64, Ordering};

use crate::syntap::{Handshake, SynTap};

/// Bytes of one slot of the stamps array, indexed by the local port:
/// the SYN's stamp (u64, TAI ns), the SYN-ACK's (u64), the peer's address
/// (16 bytes, an IPv4 one in the first 4), the peer's port (u16, network
/// order), how many SYNs the handshake sent (u16), 4 bytes of padding.
const SLOT: usize = 40;
const SLOTS: u32 = 65_536;

/// The program, as `bpf/build.sh` builds it from `bpf/synstamp.bpf.c`:
/// for a SYN leaving this host to a port that `ports` counts (its entry,
/// by port, is not 0), or a SYN-ACK coming from one, it stamps the slot of
/// the local port in `stamps`. It never changes or drops a packet.
static OBJECT: &[u8] = aya::include_bytes_aligned!("../bpf/synstamp.bpf.o");

/// The program's name in [`OBJECT`].
const PROGRAM: &str = "prober_syn";

/// The interface traffic to `peer` leaves by, and whether it is loopback:
/// the one holding the source address the kernel picks for it (a UDP
/// socket's `connect` picks it and sends nothing).
fn interface_to(peer: IpAddr) -> io::Result<(u32, bool)> {
    let any: IpAddr = if peer.is_ipv4() {
        std::net::Ipv4Addr::UNSPECIFIED.into()
    } else {
        std::net::Ipv6Addr::UNSPECIFIED.into()
    };
    let udp = UdpSocket::bind((any, 0))?;
    udp.connect((peer, 9))?;
    let local = udp.local_addr()?.ip();
    let lo = |name: &str| nix::net::if_::if_nametoindex(name).map_err(io::Error::from);
    if peer.is_loopback() || local == peer {
        return Ok((lo("lo")?, true));
    }
    for ifa in nix::ifaddrs::getifaddrs().map_err(io::Error::from)? {
        let Some(addr) = ifa.address else { continue };
        let ip = addr
            .as_sockaddr_in()
            .map(|a| IpAddr::from(a.ip()))
            .or_else(|| addr.as_sockaddr_in6().map(|a| IpAddr::from(a.ip())));
        if ip == Some(local) {
            let loopback = ifa
                .flags
                .contains(nix::net::if_::InterfaceFlags::IFF_LOOPBACK);
            return Ok((lo(&ifa.interface_name)?, loopback));
        }
    }
    Err(io::Error::new(
        io::ErrorKind::NotFound,
        format!("no interface holds {local}, the source address for {peer}"),
    ))
}

/// The program on one interface's hooks, the array it stamps and the ports
/// it watches: one per interface for the whole process, whatever number of
/// targets share it, so each packet runs one program. Detached when the
/// last [`SynBpf`] on the interface is dropped.
struct Hook {
    ifindex: u32,
    stamps: memmap2::MmapRaw,
    /// A u32 per port, 8 bytes apart: how many [`SynBpf`]s watch it. Changed under
    /// [`HOOKS`]'s lock.
    ports: memmap2::MmapRaw,
    /// The loaded program, its maps and its links: dropping it detaches
    /// the program. Dropped after the mappings above.
    _ebpf: aya::Ebpf,
}

impl std::fmt::Debug for Hook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hook")
            .field("ifindex", &self.ifindex)
            .finish_non_exhaustive()
    }
}

/// The hooks this process has attached, by interface.
static HOOKS: std::sync::Mutex<Vec<std::sync::Weak<Hook>>> = std::sync::Mutex::new(Vec::new());

/// The values of the array map `name` of `ebpf`, mapped into memory: the
/// program's maps are `BPF_F_MMAPABLE`, so they are read and written here
/// without a system call.
fn mapped(ebpf: &aya::Ebpf, name: &str, value_size: usize) -> io::Result<memmap2::MmapRaw> {
    let Some(aya::maps::Map::Array(data)) = ebpf.map(name) else {
        return Err(io::Error::other(format!(
            "the BPF object has no array {name}"
        )));
    };
    memmap2::MmapOptions::new()
        .len(value_size * SLOTS as usize)
        .map_raw(data.fd().as_fd().as_raw_fd())
}

/// An aya error as an `io::Error`, keeping the system call's error kind
/// (a missing capability stays `PermissionDenied`) and the verifier's last
/// word where it refused the program.
fn aya_error(what: &str, e: impl std::error::Error + 'static) -> io::Error {
    let mut kind = io::ErrorKind::Other;
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(&e);
    while let Some(err) = source {
        if let Some(io) = err.downcast_ref::<io::Error>() {
            kind = io.kind();
            break;
        }
        source = err.source();
    }
    let text = e.to_string();
    let last = text
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty() && !l.starts_with("processed "))
        .unwrap_or("");
    io::Error::new(kind, format!("{what}: {last}"))
}

impl Hook {
    fn attach(ifindex: u32, loopback: bool) -> io::Result<Self> {
        use aya::programs::tc::{SchedClassifier, TcAttachOptions, TcAttachType};
        let mut ebpf = aya::EbpfLoader::new()
            .load(OBJECT)
            .map_err(|e| aya_error("loading the BPF object", e))?;
        let stamps = mapped(&ebpf, "stamps", SLOT)?;
        // An array's values are 8-byte aligned in its mapping: a u32 count
        // in each 8 bytes.
        let ports = mapped(&ebpf, "ports", 8)?;
        let name = nix::net::if_::if_indextoname(ifindex).map_err(io::Error::from)?;
        let name = name.to_string_lossy();
        let prog: &mut SchedClassifier = ebpf
            .program_mut(PROGRAM)
            .ok_or_else(|| io::Error::other(format!("the BPF object has no {PROGRAM}")))?
            .try_into()
            .map_err(|e| aya_error("the BPF program", e))?;
        prog.load()
            .map_err(|e| aya_error("the kernel refused the program", e))?;
        let hooks: &[TcAttachType] = if loopback {
            &[TcAttachType::Egress]
        } else {
            &[TcAttachType::Egress, TcAttachType::Ingress]
        };
        for &hook in hooks {
            prog.attach_with_options(
                &name,
                hook,
                TcAttachOptions::TcxOrder(aya::programs::links::LinkOrder::default()),
            )
            .map_err(|e| aya_error("attaching the program to the tcx hook", e))?;
        }
        Ok(Self {
            ifindex,
            stamps,
            ports,
            _ebpf: ebpf,
        })
    }

    /// Adds `by` to the count of `port` (under [`HOOKS`]'s lock).
    fn watch(&self, port: u16, by: i32) {
        #[allow(unsafe_code)]
        // SAFETY: the mapping holds SLOTS 8-byte values and lives as long
        // as self; any u16 port's is within it, and 4-byte aligned (the
        // mapping is page aligned). The program only reads it; an atomic
        // store makes the new count visible to it at once.
        let count = unsafe {
            &*self
                .ports
                .as_mut_ptr()
                .add(usize::from(port) * 8)
                .cast::<AtomicU32>()
        };
        let n = count.load(Ordering::Relaxed);
        count.store(n.saturating_add_signed(by), Ordering::Release);
    }
}

/// Handshake stamps for one target (a remote port), from the program on
/// the interface its connections leave by; the port is unwatched when it
/// is dropped.
#[derive(Debug)]
pub struct SynBpf {
    hook: std::sync::Arc<Hook>,
    port: u16,
}

impl SynBpf {
    /// Stamps the handshakes to `port` on `peer` on the interface they
    /// leave by, attaching the program there unless this process already
    /// has.
    ///
    /// # Errors
    /// Without `CAP_BPF`/`CAP_NET_ADMIN` (`PermissionDenied`), on a kernel
    /// without `tcx` hooks (before 6.6), or when no interface holds the
    /// source address.
    pub fn open(peer: IpAddr, port: u16) -> io::Result<Self> {
        if port == 0 {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "port 0"));
        }
        let (ifindex, loopback) = interface_to(peer)?;
        let mut hooks = HOOKS
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        hooks.retain(|h| h.strong_count() > 0);
        let hook = match hooks
            .iter()
            .filter_map(std::sync::Weak::upgrade)
            .find(|h| h.ifindex == ifindex)
        {
            Some(h) => h,
            None => {
                let h = std::sync::Arc::new(Hook::attach(ifindex, loopback)?);
                hooks.push(std::sync::Arc::downgrade(&h));
                h
            }
        };
        hook.watch(port, 1);
        Ok(Self { hook, port })
    }

    /// The stamps of the handshake from `local` port to `peer`, once
    /// `connect` returned, as ns since the Unix epoch; the slot is then
    /// cleared.
    pub fn take(&self, local: u16, peer: IpAddr) -> Handshake {
        let at = usize::from(local) * SLOT;
        #[allow(unsafe_code)]
        // SAFETY: the mapping is SLOT * SLOTS bytes and lives as long as
        // the hook; `at + SLOT` is within it for any u16 port, each field
        // read is aligned to its size (SLOT and the field offsets are
        // multiples of 8, 8, 8, 8, 2, 2). The program writes the slot from
        // the kernel while the handshake is on the wire: atomic loads with
        // Acquire, after `connect` returned, see its writes.
        let slot = unsafe {
            let p = self.hook.stamps.as_mut_ptr().add(at);
            let word = |i: usize| (*p.add(i).cast::<AtomicU64>()).load(Ordering::Acquire);
            let half = |i: usize| &*p.add(i).cast::<AtomicU16>();
            let mut slot = [0u8; SLOT];
            for i in (0..32).step_by(8) {
                slot[i..i + 8].copy_from_slice(&word(i).to_ne_bytes());
            }
            slot[32..34].copy_from_slice(&half(32).load(Ordering::Acquire).to_ne_bytes());
            slot[34..36].copy_from_slice(&half(34).load(Ordering::Acquire).to_ne_bytes());
            // Clear the peer's port: the next SYN from this port starts
            // afresh even to the same peer.
            half(32).store(0, Ordering::Release);
            slot
        };
        let u64_at = |i: usize| u64::from_ne_bytes(slot[i..i + 8].try_into().unwrap_or_default());
        let mut addr = [0u8; 16];
        match peer {
            IpAddr::V4(a) => addr[..4].copy_from_slice(&a.octets()),
            IpAddr::V6(a) => addr.copy_from_slice(&a.octets()),
        }
        let rport = u16::from_be_bytes([slot[32], slot[33]]);
        let syns = u16::from_ne_bytes([slot[34], slot[35]]);
        if slot[16..32] != addr || rport != self.port {
            return Handshake::default();
        }
        let tai = tai_offset_ns();
        let wall = |t: u64| (t != 0).then(|| t.checked_sub(tai)).flatten();
        Handshake {
            syn_tx: if syns == 1 { wall(u64_at(0)) } else { None },
            syn_ack_rx: wall(u64_at(8)),
        }
    }
}

impl Drop for SynBpf {
    fn drop(&mut self) {
        let _hooks = HOOKS
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        self.hook.watch(self.port, -1);
    }
}

/// Where a target's handshake stamps come from: the BPF program where
/// the kernel allows it (it costs a loopback connect about a fifth of what
/// a packet socket does), else a packet socket.
#[derive(Debug)]
pub enum Stamper {
    /// [`SynBpf`].
    Bpf(SynBpf),
    /// [`SynTap`].
    Packet(SynTap),
}

impl Stamper {
    /// The BPF program for handshakes to `addr`, else a packet socket.
    ///
    /// # Errors
    /// Neither could be opened (not root): both reasons, in one line.
    pub fn open(addr: std::net::SocketAddr) -> Result<Self, String> {
        let bpf = match SynBpf::open(addr.ip(), addr.port()) {
            Ok(b) => return Ok(Self::Bpf(b)),
            Err(e) => e,
        };
        tracing::debug!("handshake stamps from a packet socket: no BPF program ({bpf})");
        SynTap::open(addr.port()).map(Self::Packet).map_err(|e| {
            format!("no BPF program ({bpf}), no packet socket ({e}: it needs CAP_NET_RAW)")
        })
    }

    /// The stamps of the handshake from `local` port to `peer`, once
    /// `connect` returned.
    pub fn take(&self, local: u16, peer: IpAddr) -> Handshake {
        match self {
            Self::Bpf(b) => b.take(local, peer),
            Self::Packet(t) => t.take(local, peer),
        }
    }
}

/// CLOCK_TAI − CLOCK_REALTIME: whole seconds (0 unless a time daemon set
/// it), so the nearest second of two reads is exact.
fn tai_offset_ns() -> u64 {
    use nix::time::{ClockId, clock_gettime};
    let ns = |c| {
        clock_gettime(c)
            .map(|t| i128::from(t.tv_sec()) * 1_000_000_000 + i128::from(t.tv_nsec()))
            .unwrap_or(0)
    };
    let (real, tai) = (ns(ClockId::CLOCK_REALTIME), ns(ClockId::CLOCK_TAI));
    let secs = (tai - real + 500_000_000).div_euclid(1_000_000_000);
    u64::try_from(secs * 1_000_000_000).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Needs root (the tests run as root in CI) and Linux 6.6; skipped
    /// without either.
    #[test]
    fn stamps_a_loopback_handshake() {
        stamps_a_handshake("127.0.0.1:0");
        stamps_a_handshake("[::1]:0");
    }

    fn stamps_a_handshake(bind: &str) {
        let l = std::net::TcpListener::bind(bind).unwrap();
        let peer = l.local_addr().unwrap().ip();
        let port = l.local_addr().unwrap().port();
        let tap = match SynBpf::open(peer, port) {
            Ok(t) => t,
            Err(e) => {
                prober_core::testutil::skip(format_args!("{e}"));
                return;
            }
        };
        // Other traffic to other ports leaves no stamp.
        let other = std::net::TcpListener::bind(bind).unwrap();
        let o = std::net::TcpStream::connect(other.local_addr().unwrap()).unwrap();
        assert_eq!(
            tap.take(o.local_addr().unwrap().port(), peer),
            Handshake::default()
        );
        let t1 = prober_core::clock::unix_now_ns();
        let c = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let t4 = prober_core::clock::unix_now_ns();
        let local = c.local_addr().unwrap().port();
        let h = tap.take(local, peer);
        let (tx, rx) = (
            h.syn_tx.expect("SYN stamp"),
            h.syn_ack_rx.expect("SYN-ACK stamp"),
        );
        assert!(t1 <= tx && tx <= rx && rx <= t4, "{t1} {tx} {rx} {t4}");
        // Taken once.
        assert_eq!(tap.take(local, peer), Handshake::default());
    }

    /// Two targets on one interface share its program; each port is
    /// stamped while one of them watches it.
    #[test]
    fn targets_share_one_program_per_interface() {
        let a = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let b = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let (pa, pb) = (a.local_addr().unwrap(), b.local_addr().unwrap());
        let Ok(ta) = SynBpf::open(pa.ip(), pa.port()) else {
            prober_core::testutil::skip("no BPF program");
            return;
        };
        let tb = SynBpf::open(pb.ip(), pb.port()).unwrap();
        assert!(std::sync::Arc::ptr_eq(&ta.hook, &tb.hook));
        let stamped = |t: &SynBpf, to: SocketAddr| {
            let c = std::net::TcpStream::connect(to).unwrap();
            t.take(c.local_addr().unwrap().port(), to.ip())
                .rtt()
                .is_some()
        };
        assert!(stamped(&ta, pa) && stamped(&tb, pb));
        // A's port is no longer watched once A is gone; B's still is.
        let hook = std::sync::Arc::clone(&ta.hook);
        drop(ta);
        let watching_a = SynBpf {
            hook,
            port: pa.port(),
        };
        assert!(
            !stamped(&watching_a, pa),
            "an unwatched port is not stamped"
        );
        std::mem::forget(watching_a); // it never counted itself in
        assert!(stamped(&tb, pb));
    }
}

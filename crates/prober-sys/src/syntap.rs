//! Kernel stamps for TCP handshakes, which no TCP socket gives: a packet
//! socket sees each SYN as it leaves and each SYN-ACK as it arrives, with
//! the stamps the kernel puts on them there.
//!
//! A TCP socket stamps data only: `SO_TIMESTAMPING` has no transmit stamp
//! for a SYN and no receive stamp for a SYN-ACK, and `TCP_INFO`'s first RTT
//! sample starts when TCP builds the SYN, before the IP layer and the
//! device, which on this project's test VM took 30 µs at a 10 ms interval
//! (docs/timestamps.md). A packet socket's outgoing copy is stamped where
//! the device takes the SYN (`dev_queue_xmit_nit`, next to where transmit
//! software stamps are taken) and its incoming copy where the receive path
//! stamps it (`netif_rx`, the value `SO_TIMESTAMPNS` would give): the same
//! points as t1k and t4k of the other protocols. Except over loopback:
//! there the SYN-ACK still carries its sender's TCP
//! departure time (a monotonic delivery time, `skb_clear_tstamp` keeps
//! it), `netif_rx` stamps nothing, and each packet socket stamps it as the
//! packet is handed to that socket (`skb_clear_delivery_time`), after the
//! receive backlog.
//!
//! Written by hand on socket2 (`AF_PACKET`, a classic BPF filter) because
//! no crate in the tree opens packet sockets; the filter passes only SYNs
//! to or from one port, so the socket sees nothing else. Opening it needs
//! `CAP_NET_RAW`; without it the handshake's parts stay unknown. While it is
//! open the kernel clones every packet the host sends for it to filter (as
//! it does for tcpdump).

use std::collections::HashMap;
use std::io;
use std::net::IpAddr;
use std::os::fd::AsFd;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use nix::sys::socket::LinkAddr;
use socket2::{Domain, SockFilter, Socket, Type};

/// `sll_pkttype` of a packet this host sends.
const PACKET_OUTGOING: u8 = 4;
/// `sll_pkttype` of a packet addressed to this host.
const PACKET_HOST: u8 = 0;

/// How long a handshake nobody took is kept.
const KEEP: Duration = Duration::from_secs(10);

/// The classic BPF program: IPv4 (unfragmented) or IPv6 (TCP right after
/// the fixed header) TCP with `port` as source or destination, and either
/// a SYN leaving this host or a SYN-ACK coming to it (on loopback each
/// packet passes a tap twice, once each way). Offsets are from the network
/// header (a `SOCK_DGRAM` packet socket).
fn filter(port: u16) -> Vec<SockFilter> {
    const LDB_ABS: u16 = 0x30; // A = byte [k]
    const LDH_ABS: u16 = 0x28; // A = half [k]
    const LDW_ABS: u16 = 0x20; // A = word [k] (here: an ancillary field)
    const LDH_IND: u16 = 0x48; // A = half [X + k]
    const LDB_IND: u16 = 0x50; // A = byte [X + k]
    const LDX_MSH: u16 = 0xb1; // X = 4 * ([k] & 0xf)
    const LDX_IMM: u16 = 0x01; // X = k
    const RSH: u16 = 0x74; // A >>= k
    const JEQ: u16 = 0x15; // A == k
    const JSET: u16 = 0x45; // A & k
    const RET: u16 = 0x06;
    // SKF_AD_OFF + SKF_AD_PKTTYPE: the packet's sll_pkttype.
    const PKTTYPE: u32 = 0xffff_f000 + 4;
    // Jump targets, as instruction numbers.
    const V6: u8 = 12;
    const FLAGS: u8 = 20;
    const SYN_ACK: u8 = 25;
    const KEEP: u8 = 27;
    const DROP: u8 = 28;
    const NEXT: u8 = u8::MAX;
    let p = u32::from(port);
    // (code, jump if true, jump if false, k), jumps as absolute targets.
    let prog: [(u16, u8, u8, u32); 29] = [
        (LDB_ABS, 0, 0, 0),          // 0: version and IHL
        (RSH, 0, 0, 4),              // 1: version
        (JEQ, NEXT, V6, 4),          // 2: IPv4?
        (LDB_ABS, 0, 0, 9),          // 3: protocol
        (JEQ, NEXT, DROP, 6),        // 4: TCP?
        (LDH_ABS, 0, 0, 6),          // 5: fragment offset
        (JSET, DROP, NEXT, 0x1fff),  // 6: a later fragment
        (LDX_MSH, 0, 0, 0),          // 7: X = IPv4 header length
        (LDH_IND, 0, 0, 0),          // 8: source port
        (JEQ, FLAGS, NEXT, p),       // 9
        (LDH_IND, 0, 0, 2),          // 10: destination port
        (JEQ, FLAGS, DROP, p),       // 11
        (JEQ, NEXT, DROP, 6),        // 12 (V6): IPv6?
        (LDB_ABS, 0, 0, 6),          // 13: next header
        (JEQ, NEXT, DROP, 6),        // 14: TCP?
        (LDX_IMM, 0, 0, 40),         // 15: X = IPv6 header length
        (LDH_IND, 0, 0, 0),          // 16: source port
        (JEQ, FLAGS, NEXT, p),       // 17
        (LDH_IND, 0, 0, 2),          // 18: destination port
        (JEQ, FLAGS, DROP, p),       // 19
        (LDB_IND, 0, 0, 13),         // 20 (FLAGS): TCP flags
        (JSET, NEXT, DROP, 0x02),    // 21: SYN?
        (JSET, SYN_ACK, NEXT, 0x10), // 22: and ACK?
        (LDW_ABS, 0, 0, PKTTYPE),    // 23: a SYN ...
        (JEQ, KEEP, DROP, 4),        // 24: ... leaving (PACKET_OUTGOING)
        (LDW_ABS, 0, 0, PKTTYPE),    // 25 (SYN_ACK): a SYN-ACK ...
        (JEQ, KEEP, DROP, 0),        // 26: ... arriving (PACKET_HOST)
        (RET, 0, 0, 128),            // 27 (KEEP): the headers
        (RET, 0, 0, 0),              // 28 (DROP)
    ];
    let rel = |pc: usize, to: u8| match to {
        NEXT => 0,
        // Forward only: a backward jump underflows, which panics in the
        // tests' debug builds.
        to => u8::try_from(usize::from(to) - pc - 1).unwrap_or(0),
    };
    prog.iter()
        .enumerate()
        .map(|(pc, &(code, t, f, k))| {
            let is_jump = code & 0x07 == 0x05;
            let (jt, jf) = if is_jump {
                (rel(pc, t), rel(pc, f))
            } else {
                (0, 0)
            };
            SockFilter::new(code, jt, jf, k)
        })
        .collect()
}

/// One SYN or SYN-ACK, parsed from its network header on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Syn {
    /// The SYN-ACK (SYN and ACK set), else the SYN.
    ack: bool,
    src: IpAddr,
    dst: IpAddr,
    sport: u16,
    dport: u16,
}

fn parse(pkt: &[u8]) -> Option<Syn> {
    let (src, dst, tcp): (IpAddr, IpAddr, &[u8]) = match pkt.first()? >> 4 {
        4 => {
            let ihl = usize::from(pkt[0] & 0x0f) * 4;
            let a: [u8; 4] = pkt.get(12..16)?.try_into().ok()?;
            let b: [u8; 4] = pkt.get(16..20)?.try_into().ok()?;
            (a.into(), b.into(), pkt.get(ihl..)?)
        }
        6 => {
            let a: [u8; 16] = pkt.get(8..24)?.try_into().ok()?;
            let b: [u8; 16] = pkt.get(24..40)?.try_into().ok()?;
            (a.into(), b.into(), pkt.get(40..)?)
        }
        _ => return None,
    };
    let flags = *tcp.get(13)?;
    (flags & 0x02 != 0).then(|| Syn {
        ack: flags & 0x10 != 0,
        src,
        dst,
        sport: u16::from_be_bytes([tcp[0], tcp[1]]),
        dport: u16::from_be_bytes([tcp[2], tcp[3]]),
    })
}

/// What the tap saw of one connection, by its local port.
#[derive(Debug, Clone, Copy)]
struct Seen {
    /// The SYN's stamp as it left, ns since the Unix epoch; `None` once a
    /// second SYN (a retransmission) made it ambiguous.
    syn: Option<u64>,
    syns: u32,
    /// The first SYN-ACK's stamp as it arrived.
    syn_ack: Option<u64>,
    at: Instant,
}

impl Seen {
    fn new(at: Instant) -> Self {
        Self {
            syn: None,
            syns: 0,
            syn_ack: None,
            at,
        }
    }
}

/// A handshake's kernel stamps: the SYN as it left (t1k) and the SYN-ACK as
/// it arrived (t4k), ns since the Unix epoch.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Handshake {
    /// The SYN's transmit stamp; `None` if it was sent more than once.
    pub syn_tx: Option<u64>,
    /// The SYN-ACK's receive stamp.
    pub syn_ack_rx: Option<u64>,
}

impl Handshake {
    /// SYN-ACK receive − SYN transmit, where both are known.
    pub fn rtt(&self) -> Option<u64> {
        self.syn_ack_rx?.checked_sub(self.syn_tx?)
    }
}

/// A packet socket that stamps the handshakes with one remote port.
#[derive(Debug)]
pub struct SynTap {
    sock: Socket,
    /// By (local port, remote address).
    seen: Mutex<HashMap<(u16, IpAddr), Seen>>,
}

impl SynTap {
    /// Opens the tap for connections to `port` on any host and interface.
    ///
    /// # Errors
    /// Without `CAP_NET_RAW` (`PermissionDenied`), or what the socket calls
    /// report.
    pub fn open(port: u16) -> io::Result<Self> {
        #[allow(clippy::cast_possible_truncation)] // ETH_P_ALL is 3
        let all = (nix::libc::ETH_P_ALL as u16).to_be();
        let sock = Socket::new(Domain::PACKET, Type::DGRAM, Some(i32::from(all).into()))?;
        sock.attach_filter(&filter(port))?;
        sock.set_nonblocking(true)?;
        crate::rx::enable_timestamps(sock.as_fd())?;
        // Packets that came in before the filter was attached: not ours.
        let mut buf = [0u8; 256];
        while crate::rx::recv_stamped::<LinkAddr>(sock.as_fd(), &mut buf).is_ok() {}
        Ok(Self {
            sock,
            seen: Mutex::new(HashMap::new()),
        })
    }

    /// The stamps of the handshake from `local` port to `peer`, once
    /// `connect` returned: reads what the tap has queued without blocking,
    /// files other connections' packets for their probes, and takes this
    /// one's.
    pub fn take(&self, local: u16, peer: IpAddr) -> Handshake {
        let mut seen = self
            .seen
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let now = Instant::now();
        let mut buf = [0u8; 256];
        // A bounded drain: packets of other connections to the port keep
        // coming on a busy host.
        for _ in 0..64 {
            let Ok((n, Some(from), Some(at))) =
                crate::rx::recv_stamped::<LinkAddr>(self.sock.as_fd(), &mut buf)
            else {
                break;
            };
            let (Some(syn), Some(at)) = (parse(&buf[..n]), crate::rx::unix_ns(at)) else {
                continue;
            };
            match (syn.ack, from.pkttype()) {
                (false, PACKET_OUTGOING) => {
                    let e = seen.entry((syn.sport, syn.dst)).or_insert_with(|| Seen {
                        syn: Some(at),
                        ..Seen::new(now)
                    });
                    e.syns += 1;
                    if e.syns > 1 {
                        e.syn = None;
                    }
                }
                (true, PACKET_HOST) => {
                    let e = seen
                        .entry((syn.dport, syn.src))
                        .or_insert_with(|| Seen::new(now));
                    e.syn_ack.get_or_insert(at);
                }
                _ => {}
            }
        }
        seen.retain(|_, s| now.duration_since(s.at) < KEEP);
        seen.remove(&(local, peer))
            .map(|s| Handshake {
                syn_tx: s.syn,
                syn_ack_rx: s.syn_ack,
            })
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ipv4_syn(flags: u8, sport: u16, dport: u16) -> Vec<u8> {
        let mut p = vec![0u8; 40];
        p[0] = 0x45;
        p[9] = 6;
        p[12..16].copy_from_slice(&[127, 0, 0, 1]);
        p[16..20].copy_from_slice(&[127, 0, 0, 2]);
        p[20..22].copy_from_slice(&sport.to_be_bytes());
        p[22..24].copy_from_slice(&dport.to_be_bytes());
        p[33] = flags;
        p
    }

    #[test]
    fn parses_syns_and_syn_acks_and_nothing_else() {
        let s = parse(&ipv4_syn(0x02, 40_000, 8707)).unwrap();
        assert_eq!((s.ack, s.sport, s.dport), (false, 40_000, 8707));
        assert_eq!(s.dst, IpAddr::from([127, 0, 0, 2]));
        assert!(parse(&ipv4_syn(0x12, 8707, 40_000)).unwrap().ack);
        assert_eq!(parse(&ipv4_syn(0x10, 8707, 40_000)), None, "an ACK");
        assert_eq!(parse(&ipv4_syn(0x02, 1, 2)[..30]), None, "cut short");
        assert_eq!(parse(&[]), None);
    }

    /// Needs CAP_NET_RAW (the tests run as root in CI); skipped without.
    /// The filter is checked by what it lets through: only the handshake
    /// with its port, IPv4 and IPv6.
    #[test]
    fn stamps_a_loopback_handshake() {
        stamps_a_handshake("127.0.0.1:0");
        stamps_a_handshake("[::1]:0");
    }

    fn stamps_a_handshake(bind: &str) {
        let l = std::net::TcpListener::bind(bind).unwrap();
        let peer = l.local_addr().unwrap().ip();
        let port = l.local_addr().unwrap().port();
        let tap = match SynTap::open(port) {
            Ok(t) => t,
            Err(e) if e.kind() == io::ErrorKind::PermissionDenied => return,
            Err(e) => panic!("{e}"),
        };
        // The kernel switches packet stamps on from a work item after the
        // first socket asks; until then packets are stamped when read
        // (the probes keep only stamps inside their connect).
        std::thread::sleep(std::time::Duration::from_millis(100));
        // Other traffic to other ports is filtered out.
        let other = std::net::TcpListener::bind(bind).unwrap();
        let _o = std::net::TcpStream::connect(other.local_addr().unwrap()).unwrap();
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
        assert_eq!(h.rtt(), Some(rx - tx));
        // Taken once.
        assert_eq!(tap.take(local, peer), Handshake::default());
        assert!(tap.seen.lock().unwrap().len() <= 1, "only ours was filed");
        // Of the four copies loopback shows the taps (each packet leaving
        // and arriving), the filter passes the SYN leaving and the SYN-ACK
        // arriving.
        let _c = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let mut buf = [0u8; 256];
        let mut kinds = Vec::new();
        while let Ok((n, Some(from), _)) =
            crate::rx::recv_stamped::<LinkAddr>(tap.sock.as_fd(), &mut buf)
        {
            kinds.push((parse(&buf[..n]).map(|s| s.ack), from.pkttype()));
        }
        assert_eq!(
            kinds,
            [(Some(false), PACKET_OUTGOING), (Some(true), PACKET_HOST)]
        );
    }
}

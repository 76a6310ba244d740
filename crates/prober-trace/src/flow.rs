//! One flow of a trace: a socket of its own with a flow identifier of its
//! own, so that every probe it sends hashes to the same ECMP branch (Paris
//! traceroute's rule: the fields routers hash on stay the same, only the
//! TTL changes). Three ways to probe ([`Method`]):
//!
//! - **UDP** (traceroute's, no privilege): a UDP socket with a source port
//!   of its own. A datagram carries its probe's number; the ICMP errors
//!   routers send about it come back on the socket's error queue
//!   (`IP_RECVERR`), quoting that number.
//! - **TCP SYN** (tcptraceroute's and `mtr -T`'s; root or `CAP_NET_RAW`):
//!   SYN segments from a raw TCP socket, from a source port of the flow's
//!   own, the probe's number in the sequence number (within the 8 bytes
//!   every router quotes). Routers' errors come back on the raw socket's
//!   error queue; the destination answers with a SYN-ACK (open port) or a
//!   reset (closed), which the raw socket is given a copy of.
//! - **ICMP echo** (ping's and mtr's default; root or `CAP_NET_RAW`): echo
//!   requests from a raw ICMP socket, the flow's identifier in the echo
//!   identifier, the probe's number in the sequence number and payload,
//!   and the checksum held the same for all of a flow's probes (routers
//!   that hash an ICMP message's first four bytes as if they were ports
//!   see one flow), as Paris traceroute does. Errors and replies are read
//!   from the raw socket.
//!
//! The kernel stamps each send and each answer.

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::AsFd;

use prober_sys::rx::ErrorEntry;
use tokio::io::Interest;
use tokio::net::UdpSocket;
use tokio::sync::mpsc;

/// The start of every probe's payload.
const MAGIC: [u8; 4] = *b"PRTR";

/// A probe's payload: [`MAGIC`] and the probe's number.
pub(crate) const PAYLOAD: usize = 8;

/// How a trace probes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Method {
    /// UDP datagrams to a closed port (traceroute's; no privilege).
    #[default]
    Udp,
    /// TCP SYN segments to a port (root or `CAP_NET_RAW`).
    Tcp,
    /// ICMP echo requests (root or `CAP_NET_RAW`).
    Icmp,
}

impl Method {
    /// Its name in reports: `udp`, `tcp`, `icmp`.
    pub fn name(self) -> &'static str {
        match self {
            Self::Udp => "udp",
            Self::Tcp => "tcp",
            Self::Icmp => "icmp",
        }
    }
}

/// What answered a probe.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// A router on the way: ICMP Time Exceeded.
    TimeExceeded,
    /// The destination: ICMP Port Unreachable (nothing listens on the
    /// port), or a TCP reset (a closed port).
    PortUnreachable,
    /// Destination Unreachable with another code (host, network,
    /// administratively prohibited): the path ends there.
    Unreachable(u8),
    /// The destination answered: a datagram (a service on the port that
    /// echoes), a SYN-ACK (an open TCP port) or an echo reply.
    Reply,
}

impl Kind {
    /// Whether the path ends here (the destination, or a router that
    /// refuses to go on).
    pub fn ends(self) -> bool {
        !matches!(self, Self::TimeExceeded)
    }

    /// Whether the destination itself answered (Port Unreachable, or a
    /// datagram back): the path reached it.
    pub fn is_destination(self) -> bool {
        matches!(self, Self::PortUnreachable | Self::Reply)
    }

    /// The ICMP type and code, as this kind.
    pub(crate) fn of(v6: bool, icmp_type: u8, code: u8) -> Option<Self> {
        match (v6, icmp_type, code) {
            (false, 11, _) | (true, 3, _) => Some(Self::TimeExceeded),
            (false, 3, 3) | (true, 1, 4) => Some(Self::PortUnreachable),
            (false, 3, c) | (true, 1, c) => Some(Self::Unreachable(c)),
            _ => None,
        }
    }

    /// How mtr and traceroute mark it.
    pub fn mark(self) -> &'static str {
        match self {
            Self::TimeExceeded | Self::PortUnreachable | Self::Reply => "",
            Self::Unreachable(0 | 2 | 3 | 5 | 6 | 7 | 11 | 12) => " !N",
            Self::Unreachable(1 | 4) => " !H",
            Self::Unreachable(_) => " !X",
        }
    }
}

/// Something a flow's socket heard.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Heard {
    /// The kernel's transmit stamp of the flow's `key`-th datagram.
    Sent { flow: usize, key: u32, ns: u64 },
    /// An answer to probe `id` (`None`: a quote too short to say which).
    Answer {
        id: Option<u32>,
        from: Option<IpAddr>,
        kind: Kind,
        /// The kernel's receive stamp, else the time it was read.
        ns: u64,
        /// `ns` is the kernel's stamp.
        kernel: bool,
    },
}

/// One flow's socket.
#[derive(Debug)]
pub(crate) struct Flow {
    /// A UDP socket, or a raw one registered with the runtime as one
    /// (prober-icmp does the same: tokio only polls the descriptor).
    socket: UdpSocket,
    /// Its identifier: the UDP or TCP source port, the ICMP echo
    /// identifier. The flow's name in reports.
    pub(crate) port: u16,
    method: Method,
    /// The address it leaves from (a TCP checksum covers it).
    from: IpAddr,
    to: SocketAddr,
}

impl Flow {
    /// A socket for a new flow to `to`, bound to `from` (for TCP and ICMP
    /// [`source_for`]'s address: a TCP checksum covers it, and the raw
    /// socket then hears only its own), its errors and stamps on. A TCP or
    /// ICMP flow is named `id` (a port, an echo identifier): the caller
    /// gives each flow of a trace its own.
    pub(crate) fn open(to: SocketAddr, from: IpAddr, method: Method, id: u16) -> io::Result<Self> {
        let v6 = to.is_ipv6();
        let domain = socket2::Domain::for_address(to);
        let (kind, proto) = match method {
            Method::Udp => (socket2::Type::DGRAM, socket2::Protocol::UDP),
            Method::Tcp => (socket2::Type::RAW, socket2::Protocol::TCP),
            Method::Icmp if v6 => (socket2::Type::RAW, socket2::Protocol::ICMPV6),
            Method::Icmp => (socket2::Type::RAW, socket2::Protocol::ICMPV4),
        };
        let s = socket2::Socket::new(domain, kind, Some(proto)).map_err(|e| {
            if method == Method::Udp {
                e
            } else {
                io::Error::new(
                    e.kind(),
                    format!(
                        "a raw socket for {} traces: {e} (they need root or CAP_NET_RAW; UDP traces need neither)",
                        method.name()
                    ),
                )
            }
        })?;
        s.set_nonblocking(true)?;
        s.bind(&SocketAddr::new(from, 0).into())?;
        // ICMP flows read errors as the ICMP messages they are; the others
        // from the error queue. A raw socket is given a copy of every TCP
        // segment or ICMP message to its address: a filter keeps the
        // flow's own (the host's other traffic would wake every flow).
        match method {
            Method::Udp => prober_sys::rx::enable_recv_errors(s.as_fd(), v6)?,
            Method::Tcp => {
                prober_sys::rx::enable_recv_errors(s.as_fd(), v6)?;
                s.attach_filter(&prober_sys::icmp::tcp_port_filter(v6, id))?;
            }
            Method::Icmp => s.attach_filter(&prober_sys::icmp::echo_filter(v6, id))?,
        }
        // Stamps are a refinement: without them, RTTs are read in user space.
        let _ = prober_sys::rx::enable_timestamps(s.as_fd());
        let _ = prober_sys::rx::enable_tx_timestamps_id(s.as_fd());
        let port = match method {
            Method::Udp => s.local_addr()?.as_socket().map_or(0, |a| a.port()),
            _ => id,
        };
        Ok(Self {
            socket: UdpSocket::from_std(std::net::UdpSocket::from(s))?,
            port,
            method,
            from,
            to,
        })
    }

    /// Sends probe `id` with this TTL (IPv6 hop limit).
    pub(crate) fn send(&self, ttl: u8, id: u32) -> io::Result<()> {
        let s = socket2::SockRef::from(&self.socket);
        if self.to.is_ipv6() {
            s.set_unicast_hops_v6(u32::from(ttl))?;
        } else {
            s.set_ttl_v4(u32::from(ttl))?;
        }
        let mut buf = [0u8; 24];
        let (packet, to): (&[u8], SocketAddr) = match self.method {
            Method::Udp => {
                buf[..4].copy_from_slice(&MAGIC);
                buf[4..PAYLOAD].copy_from_slice(&id.to_be_bytes());
                (&buf[..PAYLOAD], self.to)
            }
            Method::Tcp => {
                syn(&mut buf[..20], self.port, self.to.port(), id);
                let sum = checksum(&buf[..20], pseudo_sum(self.from, self.to.ip(), 6, 20));
                buf[16..18].copy_from_slice(&sum.to_be_bytes());
                // A raw socket's address has no port: the header has it.
                (&buf[..20], SocketAddr::new(self.to.ip(), 0))
            }
            Method::Icmp => {
                echo(&mut buf[..18], self.to.is_ipv6(), self.port, id);
                (&buf[..18], SocketAddr::new(self.to.ip(), 0))
            }
        };
        // An ICMP error about an earlier probe is reported once by the
        // next call on the socket (its entry stays on the error queue): a
        // second try sends. A third failure is this send's own.
        let mut tries = 0;
        loop {
            // A plain non-blocking send.
            match s.send_to(packet, &to.into()) {
                Ok(_) => return Ok(()),
                Err(e) if tries < 2 && e.kind() != io::ErrorKind::WouldBlock => tries += 1,
                Err(e) => return Err(e),
            }
        }
    }

    /// Reads what the socket hears and hands it to `out`, until `out` is
    /// closed.
    pub(crate) async fn listen(&self, flow: usize, out: mpsc::UnboundedSender<Heard>) {
        let mut buf = [0u8; 1500];
        loop {
            let heard = self
                .socket
                .async_io(Interest::READABLE | Interest::ERROR, || {
                    self.read_one(flow, &mut buf)
                })
                .await;
            let Ok(heard) = heard else {
                tokio::time::sleep(std::time::Duration::from_millis(1)).await;
                continue;
            };
            if let Some(h) = heard
                && out.send(h).is_err()
            {
                return;
            }
        }
    }

    /// One entry of the error queue, else one packet; `WouldBlock` when
    /// there is neither. `None` for what is not this flow's (a raw socket
    /// hears every TCP segment or ICMP message to its address).
    fn read_one(&self, flow: usize, buf: &mut [u8]) -> io::Result<Option<Heard>> {
        let fd = self.socket.as_fd();
        match prober_sys::rx::recv_error_queue(fd, buf) {
            Ok(ErrorEntry::TxStamp { key, ns, .. }) => {
                return Ok(Some(Heard::Sent { flow, key, ns }));
            }
            Ok(ErrorEntry::Icmp {
                from,
                v6,
                icmp_type,
                code,
                ns,
                len,
            }) => {
                let Some(kind) = Kind::of(v6, icmp_type, code) else {
                    return Ok(None);
                };
                let quote = &buf[..len.min(buf.len())];
                let id = match self.method {
                    Method::Tcp => match tcp_quote(quote, self.port, self.to.port()) {
                        Quoted::Mine(id) => Some(id),
                        Quoted::Short => None,
                        Quoted::Other => return Ok(None),
                    },
                    _ => id_of(quote),
                };
                return Ok(Some(Heard::Answer {
                    id,
                    from,
                    kind,
                    ns: ns.unwrap_or_else(now_ns),
                    kernel: ns.is_some(),
                }));
            }
            Ok(ErrorEntry::Other { .. }) => return Ok(None),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(e) => return Err(e),
        }
        match prober_sys::rx::recv_stamped::<nix::sys::socket::SockaddrStorage>(fd, buf) {
            Ok((n, from, stamp)) => {
                let from = from
                    .as_ref()
                    .and_then(prober_sys::rx::socket_addr)
                    .map(|a| a.ip());
                let heard = |id, kind| Heard::Answer {
                    kernel: stamp.is_some(),
                    id,
                    from,
                    kind,
                    ns: stamp
                        .and_then(prober_sys::rx::unix_ns)
                        .unwrap_or_else(now_ns),
                };
                let packet = &buf[..n.min(buf.len())];
                Ok(match self.method {
                    Method::Udp => Some(heard(id_of(packet), Kind::Reply)),
                    Method::Tcp => {
                        if from != Some(self.to.ip()) {
                            return Ok(None);
                        }
                        self.payload(packet)
                            .and_then(|t| tcp_answer(t, self.port, self.to.port()))
                            .map(|(id, kind)| heard(Some(id), kind))
                    }
                    Method::Icmp => {
                        let v6 = self.to.is_ipv6();
                        match self.payload(packet).map(|m| icmp_answer(m, v6, self.port)) {
                            Some(Some((Quoted::Mine(id), kind))) => Some(heard(Some(id), kind)),
                            Some(Some((Quoted::Short, kind))) => Some(heard(None, kind)),
                            _ => None,
                        }
                    }
                })
            }
            // The error the socket reports once for an ICMP error whose
            // entry waits on the error queue.
            Err(e) if e.kind() != io::ErrorKind::WouldBlock => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// What a raw socket's packet carries: an IPv4 one comes with its IP
    /// header, an IPv6 one without.
    fn payload<'a>(&self, packet: &'a [u8]) -> Option<&'a [u8]> {
        if self.to.is_ipv6() {
            Some(packet)
        } else {
            past_ipv4_header(packet)
        }
    }
}

/// The address this host sends to `to` from (the route's choice): what a
/// connected UDP socket is bound to. No packet is sent.
pub(crate) fn source_for(to: SocketAddr) -> io::Result<IpAddr> {
    let any = prober_sys::mark::bind_addr(&Default::default(), to.is_ipv6());
    let u = std::net::UdpSocket::bind(any)?;
    u.connect(SocketAddr::new(to.ip(), 9))?;
    Ok(u.local_addr()?.ip())
}

/// A SYN segment (20 bytes, no options) from `sport` to `dport`, probe
/// `id` its sequence number; the checksum left 0.
fn syn(b: &mut [u8], sport: u16, dport: u16, id: u32) {
    b.fill(0);
    b[0..2].copy_from_slice(&sport.to_be_bytes());
    b[2..4].copy_from_slice(&dport.to_be_bytes());
    b[4..8].copy_from_slice(&id.to_be_bytes());
    b[12] = 5 << 4; // header length: 5 words
    b[13] = 0x02; // SYN
    b[14..16].copy_from_slice(&1024u16.to_be_bytes()); // window
}

/// An echo request (18 bytes) of flow `ident`, probe `id`: sequence number
/// the id's low 16 bits, payload [`MAGIC`], the id and two bytes that hold
/// the ones' complement sum of the message, so its checksum, the same for
/// every probe of the flow (IPv6's pseudo-header, which the kernel adds,
/// is the same for them too).
fn echo(b: &mut [u8], v6: bool, ident: u16, id: u32) {
    b.fill(0);
    b[0] = if v6 { 128 } else { 8 };
    b[4..6].copy_from_slice(&ident.to_be_bytes());
    b[6..8].copy_from_slice(&id.to_be_bytes()[2..4]);
    b[8..12].copy_from_slice(&MAGIC);
    b[12..16].copy_from_slice(&id.to_be_bytes());
    // The flow's sum: any value the flow alone has.
    let want = u32::from(ident ^ 0x5a5a);
    let have = ones_sum(b, 0);
    // want = have + filler (ones' complement): filler = want - have.
    let filler = fold(want + (!have & 0xffff));
    b[16..18].copy_from_slice(&filler.to_be_bytes());
    if !v6 {
        // IPv4's ICMP checksum is the sender's; IPv6's the kernel's.
        let sum = checksum(b, 0);
        b[2..4].copy_from_slice(&sum.to_be_bytes());
    }
}

/// The 16-bit ones' complement sum of `b` (odd length padded) added to
/// `start`, folded.
fn ones_sum(b: &[u8], start: u32) -> u32 {
    let mut sum = start;
    for c in b.chunks(2) {
        let w = u16::from_be_bytes([c[0], c.get(1).copied().unwrap_or(0)]);
        sum += u32::from(w);
        sum = (sum & 0xffff) + (sum >> 16);
    }
    sum
}

/// `sum` folded to 16 bits.
fn fold(mut sum: u32) -> u16 {
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    u16::try_from(sum).unwrap_or(u16::MAX)
}

/// The Internet checksum of `b`, `pseudo` the pseudo-header's sum.
fn checksum(b: &[u8], pseudo: u32) -> u16 {
    !fold(ones_sum(b, pseudo))
}

/// The sum of a TCP pseudo-header (IPv4 or IPv6).
fn pseudo_sum(from: IpAddr, to: IpAddr, proto: u8, len: u16) -> u32 {
    let mut sum = 0;
    for a in [from, to] {
        sum = match a {
            IpAddr::V4(a) => ones_sum(&a.octets(), sum),
            IpAddr::V6(a) => ones_sum(&a.octets(), sum),
        };
    }
    ones_sum(&[0, proto], ones_sum(&len.to_be_bytes(), sum))
}

/// What an IPv4 packet carries, past its header.
fn past_ipv4_header(p: &[u8]) -> Option<&[u8]> {
    let ihl = usize::from(p.first()? & 0x0f) * 4;
    (ihl >= 20).then(|| p.get(ihl..)).flatten()
}

/// What a quoted probe says about whose it is.
#[derive(Debug, PartialEq, Eq)]
enum Quoted {
    /// This flow's probe, this number.
    Mine(u32),
    /// This flow's, quoted too short to say which probe.
    Short,
    /// Another's.
    Other,
}

/// A router's quote of a SYN (the TCP header's first bytes).
fn tcp_quote(q: &[u8], sport: u16, dport: u16) -> Quoted {
    if q.len() < 4 || q[0..2] != sport.to_be_bytes() || q[2..4] != dport.to_be_bytes() {
        return Quoted::Other;
    }
    match q.get(4..8) {
        Some(s) => Quoted::Mine(u32::from_be_bytes([s[0], s[1], s[2], s[3]])),
        None => Quoted::Short,
    }
}

/// The destination's answer to a SYN of this flow: the probe (the
/// acknowledgement number less one) and a SYN-ACK ([`Kind::Reply`]) or a
/// reset ([`Kind::PortUnreachable`]).
fn tcp_answer(t: &[u8], sport: u16, dport: u16) -> Option<(u32, Kind)> {
    if t.len() < 20 || t[0..2] != dport.to_be_bytes() || t[2..4] != sport.to_be_bytes() {
        return None;
    }
    let ack = u32::from_be_bytes([t[8], t[9], t[10], t[11]]);
    let flags = t[13];
    let kind = if flags & 0x04 != 0 {
        Kind::PortUnreachable
    } else if flags & 0x12 == 0x12 {
        Kind::Reply
    } else {
        return None;
    };
    Some((ack.wrapping_sub(1), kind))
}

/// An ICMP message about an echo request of flow `ident`: an echo reply
/// ([`Kind::Reply`]), or an error (Time Exceeded, Unreachable) quoting one.
fn icmp_answer(m: &[u8], v6: bool, ident: u16) -> Option<(Quoted, Kind)> {
    let (&kind, &code) = (m.first()?, m.get(1)?);
    let (reply, request) = if v6 { (129, 128) } else { (0, 8) };
    if kind == reply {
        return (m.get(4..6)? == ident.to_be_bytes()).then(|| (echo_id(m), Kind::Reply));
    }
    let k = Kind::of(v6, kind, code)?;
    // The quote: the probe's IP header, then the echo request.
    let inner = m.get(8..)?;
    let inner = if v6 {
        // A fixed header of 40 bytes; an ICMPv6 probe has no extension.
        (inner.get(6) == Some(&58))
            .then(|| inner.get(40..))
            .flatten()?
    } else {
        (inner.get(9) == Some(&1))
            .then(|| past_ipv4_header(inner))
            .flatten()?
    };
    if inner.first() != Some(&request) || inner.get(4..6)? != ident.to_be_bytes() {
        return None;
    }
    Some((echo_id(inner), k))
}

/// The probe number an echo (request, reply or quote) carries in its
/// payload.
fn echo_id(m: &[u8]) -> Quoted {
    match m.get(8..).and_then(id_of) {
        Some(id) => Quoted::Mine(id),
        None => Quoted::Short,
    }
}

/// The probe number a payload (as sent, or as quoted) carries.
fn id_of(payload: &[u8]) -> Option<u32> {
    (payload.len() >= PAYLOAD && payload[..4] == MAGIC)
        .then(|| u32::from_be_bytes([payload[4], payload[5], payload[6], payload[7]]))
}

/// Now, in ns since the Unix epoch.
pub(crate) fn now_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn icmp_types_read_as_kinds() {
        assert_eq!(Kind::of(false, 11, 0), Some(Kind::TimeExceeded));
        assert_eq!(Kind::of(false, 3, 3), Some(Kind::PortUnreachable));
        assert_eq!(Kind::of(false, 3, 1), Some(Kind::Unreachable(1)));
        assert_eq!(Kind::of(true, 3, 0), Some(Kind::TimeExceeded));
        assert_eq!(Kind::of(true, 1, 4), Some(Kind::PortUnreachable));
        assert_eq!(Kind::of(false, 0, 0), None);
        assert_eq!(Kind::Unreachable(1).mark(), " !H");
        assert!(Kind::PortUnreachable.ends() && !Kind::TimeExceeded.ends());
    }

    #[test]
    fn a_syn_carries_its_probe_and_its_answers_name_it() {
        let mut b = [0u8; 20];
        syn(&mut b, 40000, 80, 7);
        let from: IpAddr = "10.0.0.1".parse().unwrap();
        let to: IpAddr = "10.0.0.2".parse().unwrap();
        let sum = checksum(&b, pseudo_sum(from, to, 6, 20));
        b[16..18].copy_from_slice(&sum.to_be_bytes());
        // A segment with its checksum in sums to all ones.
        assert_eq!(fold(ones_sum(&b, pseudo_sum(from, to, 6, 20))), 0xffff);
        assert_eq!(tcp_quote(&b[..8], 40000, 80), Quoted::Mine(7));
        assert_eq!(tcp_quote(&b[..6], 40000, 80), Quoted::Short);
        assert_eq!(tcp_quote(&b, 40001, 80), Quoted::Other);
        // A SYN-ACK and a reset from the destination, acknowledging 7.
        let mut a = [0u8; 20];
        a[0..2].copy_from_slice(&80u16.to_be_bytes());
        a[2..4].copy_from_slice(&40000u16.to_be_bytes());
        a[8..12].copy_from_slice(&8u32.to_be_bytes());
        a[13] = 0x12;
        assert_eq!(tcp_answer(&a, 40000, 80), Some((7, Kind::Reply)));
        a[13] = 0x14;
        assert_eq!(tcp_answer(&a, 40000, 80), Some((7, Kind::PortUnreachable)));
        assert_eq!(tcp_answer(&a, 40001, 80), None);
    }

    #[test]
    fn a_flows_echo_requests_share_one_checksum_and_answers_name_the_probe() {
        let mut a = [0u8; 18];
        let mut b = [0u8; 18];
        echo(&mut a, false, 33000, 1);
        echo(&mut b, false, 33000, 0x0102_0304);
        assert_eq!(a[0..4], b[0..4], "type, code and checksum stay");
        assert_eq!(fold(ones_sum(&b, 0)), 0xffff, "a valid checksum");
        let mut c = [0u8; 18];
        echo(&mut c, false, 33001, 1);
        assert_ne!(a[2..4], c[2..4], "another flow, another checksum");
        // Its echo reply.
        let mut reply = b;
        reply[0] = 0;
        assert_eq!(
            icmp_answer(&reply, false, 33000),
            Some((Quoted::Mine(0x0102_0304), Kind::Reply))
        );
        assert_eq!(icmp_answer(&reply, false, 33001), None);
        // Time Exceeded quoting it: 8 bytes of ICMP, 20 of IP, the request.
        let mut te = vec![11, 0, 0, 0, 0, 0, 0, 0, 0x45, 0, 0, 0, 0, 0, 0, 0, 1, 1];
        te.extend_from_slice(&[0; 10]);
        te.extend_from_slice(&b);
        assert_eq!(
            icmp_answer(&te, false, 33000),
            Some((Quoted::Mine(0x0102_0304), Kind::TimeExceeded))
        );
        // A router that quotes 8 bytes of the request: this flow's, no number.
        assert_eq!(
            icmp_answer(&te[..36], false, 33000),
            Some((Quoted::Short, Kind::TimeExceeded))
        );
        // ICMPv6: Time Exceeded (3) quoting a 40-byte header, next header 58.
        let mut v6 = [0u8; 18];
        echo(&mut v6, true, 33000, 9);
        let mut te6 = vec![3, 0, 0, 0, 0, 0, 0, 0];
        let mut h = [0u8; 40];
        h[6] = 58;
        te6.extend_from_slice(&h);
        te6.extend_from_slice(&v6);
        assert_eq!(
            icmp_answer(&te6, true, 33000),
            Some((Quoted::Mine(9), Kind::TimeExceeded))
        );
    }

    #[test]
    fn a_probe_number_is_read_from_a_quote_long_enough() {
        let mut p = [0u8; PAYLOAD];
        p[..4].copy_from_slice(&MAGIC);
        p[4..].copy_from_slice(&7u32.to_be_bytes());
        assert_eq!(id_of(&p), Some(7));
        assert_eq!(id_of(&p[..6]), None);
        assert_eq!(id_of(b"XXXX\0\0\0\x07"), None);
    }
}

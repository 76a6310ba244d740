//! One flow of a trace: a UDP socket with a source port of its own, so
//! that every datagram it sends hashes to the same ECMP branch (Paris
//! traceroute's rule: the fields routers hash on stay the same, only the
//! TTL changes). A datagram carries its probe's number; the ICMP errors
//! routers send about it come back on the socket's error queue
//! (`IP_RECVERR`, no privilege needed), quoting that number, with the
//! kernel's receive stamp, and the kernel stamps each send.

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

/// What answered a probe.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// A router on the way: ICMP Time Exceeded.
    TimeExceeded,
    /// The destination: ICMP Port Unreachable (nothing listens on the port).
    PortUnreachable,
    /// Destination Unreachable with another code (host, network,
    /// administratively prohibited): the path ends there.
    Unreachable(u8),
    /// The destination answered with a datagram (a service on the port
    /// that echoes).
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
    socket: UdpSocket,
    /// Its source port: the flow's name in reports.
    pub(crate) port: u16,
    v6: bool,
    to: SocketAddr,
}

impl Flow {
    /// A socket for a new flow to `to`, its errors and stamps on.
    pub(crate) fn open(to: SocketAddr) -> io::Result<Self> {
        let v6 = to.is_ipv6();
        let s = socket2::Socket::new(
            socket2::Domain::for_address(to),
            socket2::Type::DGRAM,
            Some(socket2::Protocol::UDP),
        )?;
        s.set_nonblocking(true)?;
        let any: SocketAddr = if v6 {
            (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
        } else {
            (std::net::Ipv4Addr::UNSPECIFIED, 0).into()
        };
        s.bind(&any.into())?;
        prober_sys::rx::enable_recv_errors(s.as_fd(), v6)?;
        // Stamps are a refinement: without them, RTTs are read in user space.
        let _ = prober_sys::rx::enable_timestamps(s.as_fd());
        let _ = prober_sys::rx::enable_tx_timestamps_id(s.as_fd());
        let socket = UdpSocket::from_std(std::net::UdpSocket::from(s))?;
        let port = socket.local_addr()?.port();
        Ok(Self {
            socket,
            port,
            v6,
            to,
        })
    }

    /// Sends probe `id` with this TTL (IPv6 hop limit).
    pub(crate) fn send(&self, ttl: u8, id: u32) -> io::Result<()> {
        let s = socket2::SockRef::from(&self.socket);
        if self.v6 {
            s.set_unicast_hops_v6(u32::from(ttl))?;
        } else {
            s.set_ttl_v4(u32::from(ttl))?;
        }
        let mut payload = [0u8; PAYLOAD];
        payload[..4].copy_from_slice(&MAGIC);
        payload[4..].copy_from_slice(&id.to_be_bytes());
        // An ICMP error about an earlier probe is reported once by the
        // next call on the socket (its entry stays on the error queue): a
        // second try sends. A third failure is this send's own.
        let mut tries = 0;
        loop {
            // A plain non-blocking send: tokio's try_send_to says WouldBlock
            // until the runtime has seen the socket writable once.
            match s.send_to(&payload, &self.to.into()) {
                Ok(_) => return Ok(()),
                Err(e) if tries < 2 && e.kind() != io::ErrorKind::WouldBlock => tries += 1,
                Err(e) => return Err(e),
            }
        }
    }

    /// Reads what the socket hears and hands it to `out`, until `out` is
    /// closed.
    pub(crate) async fn listen(&self, flow: usize, out: mpsc::UnboundedSender<Heard>) {
        let mut buf = [0u8; 512];
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

    /// One entry of the error queue, else one datagram; `WouldBlock` when
    /// there is neither.
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
                return Ok(Some(Heard::Answer {
                    id: id_of(&buf[..len.min(buf.len())]),
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
            Ok((n, from, stamp)) => Ok(Some(Heard::Answer {
                kernel: stamp.is_some(),
                id: id_of(&buf[..n]),
                from: from
                    .as_ref()
                    .and_then(prober_sys::rx::socket_addr)
                    .map(|a| a.ip()),
                kind: Kind::Reply,
                ns: stamp
                    .and_then(prober_sys::rx::unix_ns)
                    .unwrap_or_else(now_ns),
            })),
            // The error the socket reports once for an ICMP error whose
            // entry waits on the error queue.
            Err(e) if e.kind() != io::ErrorKind::WouldBlock => Ok(None),
            Err(e) => Err(e),
        }
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
    fn a_probe_number_is_read_from_a_quote_long_enough() {
        let mut p = [0u8; PAYLOAD];
        p[..4].copy_from_slice(&MAGIC);
        p[4..].copy_from_slice(&7u32.to_be_bytes());
        assert_eq!(id_of(&p), Some(7));
        assert_eq!(id_of(&p[..6]), None);
        assert_eq!(id_of(b"XXXX\0\0\0\x07"), None);
    }
}

//! Which branch a given flow takes: the mesh's own probe flows, not the
//! trace's. A flow is its 5-tuple, so the only way to learn its branch is
//! to send TTL-limited datagrams with exactly its addresses and ports, as
//! 007 (NSDI 2018) traces the flows that lost packets. The flow's own
//! socket is busy probing, so these are written from a raw UDP socket
//! (root, or `CAP_NET_RAW`) with the flow's source port in the UDP
//! header; the routers' Time Exceeded comes back to that raw socket's
//! error queue (`IP_RECVERR`), quoting the header. A datagram only needs
//! to reach a TTL where the branches differ, so it never reaches the
//! flow's responder.
//!
//! The flow's socket sees the same ICMP errors, but a connected UDP
//! socket without `IP_RECVERR` (every probe socket) ignores Time Exceeded
//! (a soft error), so its probing is not disturbed.

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::AsFd;
use std::time::Duration;

use prober_sys::rx::ErrorEntry;

use crate::flow::Kind;

/// The start of a follow probe's payload (after the UDP header).
const MAGIC: [u8; 4] = *b"PRFL";

/// Tries per TTL: a router's ICMP limit may let the first go unanswered.
const TRIES: u32 = 3;

/// What [`follow`] found for each flow.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Followed {
    /// The flow takes this branch (an index into the branches given).
    Branch(usize),
    /// A router answered that is on none of the branches: the path has
    /// changed since they were traced.
    Unknown,
    /// No answer at a TTL that would have told.
    Silent,
}

/// The TTLs (1 up) at which the branches' hops differ: where one answer
/// tells branches apart. A hop without an answer tells nothing.
pub fn telling_ttls(branches: &[Vec<Option<IpAddr>>]) -> Vec<u8> {
    let longest = branches.iter().map(Vec::len).max().unwrap_or(0);
    (0..longest)
        .filter(|&i| {
            let mut seen: Vec<IpAddr> = branches
                .iter()
                .filter_map(|b| b.get(i).copied().flatten())
                .collect();
            seen.sort();
            seen.dedup();
            seen.len() > 1
        })
        .filter_map(|i| u8::try_from(i + 1).ok())
        .collect()
}

/// Which of `branches` (each the hops' addresses by TTL, `None` for a
/// silent hop) each flow takes: a flow is a `source` address and port of
/// this host to `to`. One branch, or none, needs no probe. Each flow is
/// probed at the TTLs where the branches differ, one datagram in flight
/// at a time, `timeout` for each answer, until one branch is left.
///
/// # Errors
/// If the raw socket cannot be opened (no `CAP_NET_RAW`) or a send fails.
pub async fn follow(
    branches: &[Vec<Option<IpAddr>>],
    to: SocketAddr,
    sources: &[SocketAddr],
    timeout: Duration,
) -> io::Result<Vec<Followed>> {
    if branches.len() < 2 {
        let one = if branches.is_empty() {
            Followed::Unknown
        } else {
            Followed::Branch(0)
        };
        return Ok(vec![one; sources.len()]);
    }
    let ttls = telling_ttls(branches);
    let mut out = Vec::with_capacity(sources.len());
    let mut id: u32 = 0;
    // One raw socket for each address the flows leave from (one datagram
    // is in flight at a time, so they share it).
    let mut sockets: Vec<RawUdp> = Vec::new();
    for source in sources {
        let socket = match sockets.iter().position(|r| r.from == source.ip()) {
            Some(i) => &sockets[i],
            None => {
                sockets.push(RawUdp::open(source.ip(), to)?);
                &sockets[sockets.len() - 1]
            }
        };
        let port = source.port();
        let mut left: Vec<usize> = (0..branches.len()).collect();
        let mut verdict = None;
        for &ttl in &ttls {
            let mut answer = None;
            for _ in 0..TRIES {
                id = id.wrapping_add(1);
                socket.send(port, ttl, id)?;
                answer = socket.answer(port, id, timeout).await;
                if answer.is_some() {
                    break;
                }
            }
            let Some(addr) = answer else {
                verdict = Some(Followed::Silent);
                break;
            };
            let i = usize::from(ttl - 1);
            // A silent hop of a branch matches whatever answered.
            left.retain(|&b| {
                branches[b]
                    .get(i)
                    .is_none_or(|h| h.is_none_or(|a| a == addr))
            });
            if left.len() <= 1 {
                break;
            }
        }
        out.push(verdict.unwrap_or(match left.as_slice() {
            [one] => Followed::Branch(*one),
            _ => Followed::Unknown,
        }));
    }
    Ok(out)
}

/// A raw UDP socket that writes the datagrams of the flows that leave
/// from one address.
struct RawUdp {
    socket: socket2::Socket,
    from: IpAddr,
    to: SocketAddr,
}

impl RawUdp {
    fn open(from: IpAddr, to: SocketAddr) -> io::Result<Self> {
        let domain = socket2::Domain::for_address(to);
        let socket = socket2::Socket::new(domain, socket2::Type::RAW, Some(socket2::Protocol::UDP))
            .map_err(|e| {
                io::Error::new(
                    e.kind(),
                    format!("a raw UDP socket, to send as the probe flows ({e}; needs root or CAP_NET_RAW)"),
                )
            })?;
        // A raw UDP socket is given a copy of every UDP datagram the host
        // receives: drop them all at once (`ret #0`); the error queue,
        // which this reads, is not filtered.
        socket.attach_filter(&[socket2::SockFilter::new(0x06, 0, 0, 0)])?;
        socket.set_nonblocking(true)?;
        socket.bind(&SocketAddr::new(from, 0).into())?;
        prober_sys::rx::enable_recv_errors(socket.as_fd(), to.is_ipv6())?;
        Ok(Self { socket, from, to })
    }

    /// The datagram `id` of the flow from `port`, with this TTL: its UDP
    /// header (no checksum: it never reaches a host that would check it),
    /// then [`MAGIC`] and `id`.
    fn send(&self, port: u16, ttl: u8, id: u32) -> io::Result<()> {
        if self.to.is_ipv6() {
            self.socket.set_unicast_hops_v6(u32::from(ttl))?;
        } else {
            self.socket.set_ttl_v4(u32::from(ttl))?;
        }
        let mut d = [0u8; 16];
        d[0..2].copy_from_slice(&port.to_be_bytes());
        d[2..4].copy_from_slice(&self.to.port().to_be_bytes());
        d[4..6].copy_from_slice(&16u16.to_be_bytes());
        d[8..12].copy_from_slice(&MAGIC);
        d[12..16].copy_from_slice(&id.to_be_bytes());
        // The port is the UDP header's; a raw socket's address has none.
        self.socket
            .send_to(&d, &SocketAddr::new(self.to.ip(), 0).into())?;
        Ok(())
    }

    /// Who answered datagram `id` of the flow from `port` with Time
    /// Exceeded, within `timeout`. A quote too short to carry the number
    /// counts when its ports are the flow's (one datagram is in flight).
    async fn answer(&self, port: u16, id: u32, timeout: Duration) -> Option<IpAddr> {
        let end = tokio::time::Instant::now() + timeout;
        let mut buf = [0u8; 256];
        loop {
            while let Ok(e) = prober_sys::rx::recv_error_queue(self.socket.as_fd(), &mut buf) {
                let ErrorEntry::Icmp {
                    from: Some(from),
                    v6,
                    icmp_type,
                    code,
                    len,
                    ..
                } = e
                else {
                    continue;
                };
                if self.answers(&buf[..len.min(buf.len())], port, id)
                    && Kind::of(v6, icmp_type, code) == Some(Kind::TimeExceeded)
                {
                    return Some(from);
                }
            }
            if tokio::time::Instant::now() >= end {
                return None;
            }
            // Polled rather than awaited on readiness: a flow's answer
            // comes in about a round trip, and this runs a few seconds a
            // trace period.
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }

    /// Whether a quoted datagram is `id` of the flow from `port`.
    fn answers(&self, quote: &[u8], port: u16, id: u32) -> bool {
        if quote.len() < 4
            || quote[0..2] != port.to_be_bytes()
            || quote[2..4] != self.to.port().to_be_bytes()
        {
            return false;
        }
        quote.len() < 16 || (quote[8..12] == MAGIC && quote[12..16] == id.to_be_bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b(paths: &[&[Option<&str>]]) -> Vec<Vec<Option<IpAddr>>> {
        paths
            .iter()
            .map(|p| p.iter().map(|h| h.map(|a| a.parse().unwrap())).collect())
            .collect()
    }

    #[test]
    fn branches_are_told_apart_where_their_hops_differ() {
        let two = b(&[
            &[Some("10.0.0.1"), Some("10.1.0.1"), Some("10.0.9.9")],
            &[Some("10.0.0.1"), Some("10.2.0.1"), Some("10.0.9.9")],
        ]);
        assert_eq!(telling_ttls(&two), vec![2]);
        let silent = b(&[
            &[None, Some("10.1.0.1")],
            &[Some("10.0.0.1"), Some("10.2.0.1")],
        ]);
        assert_eq!(telling_ttls(&silent), vec![2]);
        assert!(telling_ttls(&b(&[&[Some("10.0.0.1")]])).is_empty());
    }
}

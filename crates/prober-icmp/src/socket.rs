//! Opening ICMP sockets (datagram or raw) and receiving with kernel
//! timestamps and, on datagram sockets, the error queue.

use std::io::{self, IoSliceMut};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::os::fd::{AsFd, AsRawFd};
use std::time::SystemTime;

use nix::sys::socket::{
    ControlMessageOwned, MsgFlags, SockaddrStorage, recvmsg, setsockopt, sockopt,
};
use prober_sys::rx;
use socket2::{Domain, Protocol, Socket, Type};
use tokio::io::Interest;
use tokio::net::UdpSocket;

use crate::IcmpError;

/// Which kind of ICMP socket to use (`--icmp-socket`; `auto`, `dgram` or
/// `raw` in a config).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SocketKind {
    /// Datagram if allowed, else raw.
    #[default]
    Auto,
    /// Only the datagram ("ping") socket; needs net.ipv4.ping_group_range.
    Dgram,
    /// Only a raw socket; needs root or CAP_NET_RAW.
    Raw,
}

/// What one receive gives: length, sender, kernel receive time, TTL, and the
/// wall-clock time right after the read.
pub(crate) type Recv = (usize, Option<IpAddr>, Option<SystemTime>, Option<u8>, u64);

/// An open ICMP socket of one address family.
#[derive(Debug)]
pub(crate) struct IcmpSocket {
    pub(crate) sock: UdpSocket,
    pub(crate) raw: bool,
    pub(crate) v6: bool,
    /// Echo identifier: the kernel's for datagram sockets, random for raw.
    pub(crate) ident: u16,
    /// Whether the kernel queues transmit stamps (SO_TIMESTAMPING).
    pub(crate) tx_stamps: bool,
}

/// What the error queue held.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Queued {
    /// An ICMP error (datagram sockets); the bytes are the failed request.
    Icmp(QueuedError),
    /// A transmit stamp (ns since the Unix epoch); the bytes are the frame
    /// as sent, link header included.
    TxStamp(u64),
}

/// An ICMP error read from a datagram socket's error queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct QueuedError {
    pub(crate) icmp_type: u8,
    pub(crate) code: u8,
    pub(crate) offender: Option<IpAddr>,
    /// Where the failed request was going (the error queue's msg_name).
    pub(crate) target: Option<IpAddr>,
}

fn new_socket(v6: bool, ty: Type) -> io::Result<Socket> {
    let (domain, proto) = if v6 {
        (Domain::IPV6, Protocol::ICMPV6)
    } else {
        (Domain::IPV4, Protocol::ICMPV4)
    };
    Socket::new(domain, ty, Some(proto))
}

impl IcmpSocket {
    /// Opens a socket of `kind` for IPv4 or IPv6, with the TTL (hop limit) set.
    /// Must be called inside a tokio runtime.
    pub(crate) fn open(
        v6: bool,
        kind: SocketKind,
        ttl: Option<u32>,
        marks: &prober_core::protocol::Marks,
        want_tx: bool,
    ) -> Result<Self, IcmpError> {
        let (sock, raw) = match kind {
            SocketKind::Dgram => (
                new_socket(v6, Type::DGRAM).map_err(|e| IcmpError::Open {
                    v6,
                    dgram: Some(e),
                    raw: None,
                })?,
                false,
            ),
            SocketKind::Raw => (
                new_socket(v6, Type::RAW).map_err(|e| IcmpError::Open {
                    v6,
                    dgram: None,
                    raw: Some(e),
                })?,
                true,
            ),
            SocketKind::Auto => match new_socket(v6, Type::DGRAM) {
                Ok(s) => (s, false),
                Err(dgram) => match new_socket(v6, Type::RAW) {
                    Ok(s) => (s, true),
                    Err(raw) => {
                        return Err(IcmpError::Open {
                            v6,
                            dgram: Some(dgram),
                            raw: Some(raw),
                        });
                    }
                },
            },
        };
        let setup = |what: &'static str| move |e: io::Error| IcmpError::Setup { what, source: e };
        sock.set_nonblocking(true)
            .map_err(setup("non-blocking mode"))?;
        if let Some(ttl) = ttl {
            if v6 {
                sock.set_unicast_hops_v6(ttl).map_err(setup("hop limit"))?;
            } else {
                sock.set_ttl_v4(ttl).map_err(setup("TTL"))?;
            }
        }
        prober_sys::mark::apply(&sock, v6, marks).map_err(setup("marking the socket"))?;
        rx::enable_timestamps(sock.as_fd()).map_err(setup("SO_TIMESTAMPNS"))?;
        rx::enable_ttl(sock.as_fd(), v6).map_err(setup("IP_RECVTTL"))?;
        // Transmit stamps give the client send part (t1k − t1); a kernel
        // without them leaves that part unknown, it is no error.
        let tx_stamps = want_tx && rx::tx_timestamps_or_notice(sock.as_fd(), "icmp");
        let mut ident = fastrand::u16(..);
        if !raw {
            if v6 {
                setsockopt(&sock, sockopt::Ipv6RecvErr, &true)
                    .map_err(|e| setup("IPV6_RECVERR")(e.into()))?;
            } else {
                setsockopt(&sock, sockopt::Ipv4RecvErr, &true)
                    .map_err(|e| setup("IP_RECVERR")(e.into()))?;
            }
            // Binding picks the echo identifier the kernel will use.
            sock.bind(&prober_sys::mark::bind_addr(marks, v6).into())
                .map_err(setup("bind"))?;
        } else if marks.source.is_some() {
            // A raw socket sends from the address it is bound to.
            sock.bind(&prober_sys::mark::bind_addr(marks, v6).into())
                .map_err(setup("binding the source address"))?;
            ident = sock
                .local_addr()
                .ok()
                .and_then(|a| a.as_socket())
                .map_or(ident, |a| a.port());
        }
        if raw
            && !v6
            && let Err(error) = set_icmp_filter(&sock)
        {
            tracing::debug!(%error, "cannot set ICMP_FILTER");
        }
        if raw && let Err(error) = sock.attach_filter(&prober_sys::icmp::echo_filter(v6, ident)) {
            // Filtering in user space still works, at the cost of wake-ups.
            tracing::debug!(%error, "cannot attach the icmp socket filter");
        }
        let std_sock: std::net::UdpSocket = sock.into();
        let sock = UdpSocket::from_std(std_sock).map_err(setup("registering with the runtime"))?;
        Ok(Self {
            sock,
            raw,
            v6,
            ident,
            tx_stamps,
        })
    }

    /// Receives one message without blocking: its length, sender, kernel
    /// receive time, TTL (hop limit) and the wall-clock time right after the
    /// read (t4), or `WouldBlock`.
    pub(crate) fn try_recv(&self, buf: &mut [u8]) -> io::Result<Recv> {
        let (n, from, stamp, ttl) =
            rx::recv_stamped_ttl::<SockaddrStorage>(self.sock.as_fd(), buf)?;
        let t4 = prober_core::clock::unix_now_ns();
        Ok((n, from.as_ref().and_then(ip_of), stamp, ttl, t4))
    }

    /// Receives one message: its length, sender, kernel receive time and
    /// TTL (hop limit).
    pub(crate) async fn recv(&self, buf: &mut [u8]) -> io::Result<Recv> {
        self.sock
            .async_io(Interest::READABLE, || self.try_recv(&mut *buf))
            .await
    }

    /// Waits for the error queue and reads one entry: an ICMP error
    /// (datagram sockets) or a transmit stamp, handed with the bytes queued
    /// to `file` while `drains` is held, so that a probe draining the queue
    /// beside this read never finds it empty before the entry is filed.
    pub(crate) async fn recv_error_with(
        &self,
        drains: &prober_sys::rx::DrainLock,
        buf: &mut [u8],
        mut file: impl FnMut(&[u8], Queued),
    ) -> io::Result<()> {
        self.sock
            .async_io(Interest::ERROR, || {
                let _held = drains.hold();
                let (n, queued) = self.try_recv_error(&mut *buf)?;
                if let Some(queued) = queued {
                    file(&buf[..n.min(buf.len())], queued);
                }
                Ok(())
            })
            .await
    }

    /// Reads one entry of the error queue without blocking (`WouldBlock`
    /// when empty); `None` for an entry of neither kind.
    pub(crate) fn try_recv_error(&self, buf: &mut [u8]) -> io::Result<(usize, Option<Queued>)> {
        let fd = self.sock.as_raw_fd();
        let mut iov = [IoSliceMut::new(buf)];
        // An error or stamp, its offender address, SCM_TIMESTAMPING, and
        // the TTL and hop-limit options: a truncated control message
        // (MSG_CTRUNC) would lose the whole entry, so leave room to spare.
        let mut cmsg = prober_sys::rx::CmsgBuf::new();
        let msg = recvmsg::<SockaddrStorage>(
            fd,
            &mut iov,
            Some(&mut cmsg.0),
            MsgFlags::MSG_ERRQUEUE | MsgFlags::MSG_DONTWAIT,
        )
        .map_err(io::Error::from)?;
        let (mut found, mut stamp, mut is_stamp) = (None, None, false);
        if let Ok(cmsgs) = msg.cmsgs() {
            for c in cmsgs {
                let (err, offender) = match c {
                    ControlMessageOwned::ScmTimestampsns(ts) => {
                        stamp = rx::system_time(&ts.system).and_then(rx::unix_ns);
                        continue;
                    }
                    ControlMessageOwned::Ipv4RecvErr(e, a) => (
                        e,
                        a.map(|a| IpAddr::V4(Ipv4Addr::from(u32::from_be(a.sin_addr.s_addr)))),
                    ),
                    ControlMessageOwned::Ipv6RecvErr(e, a) => (
                        e,
                        a.map(|a| IpAddr::V6(Ipv6Addr::from(a.sin6_addr.s6_addr))),
                    ),
                    _ => continue,
                };
                if err.ee_origin == nix::libc::SO_EE_ORIGIN_TIMESTAMPING {
                    is_stamp = true;
                } else if err.ee_origin == nix::libc::SO_EE_ORIGIN_ICMP
                    || err.ee_origin == nix::libc::SO_EE_ORIGIN_ICMP6
                {
                    // Errors that came as ICMP messages (origin 2 or 3).
                    found = Some(Queued::Icmp(QueuedError {
                        icmp_type: err.ee_type,
                        code: err.ee_code,
                        offender,
                        target: msg.address.as_ref().and_then(ip_of),
                    }));
                }
            }
        }
        if is_stamp {
            found = stamp.map(Queued::TxStamp);
        }
        if found.is_none() {
            tracing::trace!(bytes = msg.bytes, is_stamp, "unused error queue entry");
        }
        Ok((msg.bytes, found))
    }
}

/// Sets Linux's ICMP_FILTER on a raw ICMPv4 socket, as ping does: only echo
/// replies, destination unreachable and time exceeded are queued. Unlike the
/// BPF filter below, it drops other types (our own echo requests on
/// loopback, above all) before the kernel clones the packet for the socket,
/// which happens inside our `sendto` on loopback and so inside the RTT.
fn set_icmp_filter(sock: &Socket) -> io::Result<()> {
    // Echo reply, destination unreachable, time exceeded.
    prober_sys::icmp::set_filter(sock.as_fd(), &[0, 3, 11])
}

fn ip_of(a: &SockaddrStorage) -> Option<IpAddr> {
    rx::socket_addr(a).map(|a| a.ip())
}

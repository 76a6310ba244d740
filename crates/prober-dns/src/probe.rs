//! The DNS probe: one query per probe, over UDP (IDs matched by the
//! reader) or over one kept TCP connection.

use std::io;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use std::os::fd::AsFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use hickory_proto::op::{Message, MessageType};
use nix::sys::socket::SockaddrStorage;
use prober_core::clock::unix_now_ns;
use prober_core::{
    Anomalies, AppReply, Detail, ErrorKind, Gate, Matcher, Probe, ProbeError, Reply, Stamps,
};
use prober_net::stream::{ChannelStamps, StampedStream};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _, Interest};
use tokio::net::{TcpStream, UdpSocket};
use tokio::time::Instant;
use tokio_util::task::AbortOnDropHandle;

use crate::options::{DnsOptions, rcode_name};
use crate::query::Question;

/// A reply as the reader got it: when, the kernel's stamp, the message.
#[derive(Debug)]
struct Got {
    received: Instant,
    t4: u64,
    t4k: Option<u64>,
    len: usize,
    msg: Message,
}

type Arrival = Result<Got, ProbeError>;

/// The UDP side: one unconnected socket, so that a reply from another
/// address is seen and counted rather than dropped by the kernel.
#[derive(Debug)]
struct Udp {
    socket: Arc<UdpSocket>,
    matcher: Arc<Matcher<Arrival>>,
    ids: Arc<Ids>,
    tx: Arc<TxKeys>,
    _reader: AbortOnDropHandle<()>,
}

/// Query IDs: `base + seq` modulo 2^16, so an ID comes back only after
/// 65,536 further queries; a reply's ID names the newest query sent with
/// it (docs/dns.md).
#[derive(Debug)]
struct Ids {
    base: u16,
    /// The highest seq sent, plus one (0: none yet).
    highest: AtomicU64,
}

impl Ids {
    fn id(&self, seq: u64) -> u16 {
        self.base.wrapping_add(seq as u16)
    }

    /// The newest seq sent whose ID is `id`, if any.
    fn seq(&self, id: u16) -> Option<u64> {
        let top = self.highest.load(Ordering::Acquire).checked_sub(1)?;
        let back = u64::from(self.id(top).wrapping_sub(id));
        top.checked_sub(back)
    }
}

/// Transmit stamps, numbered by the kernel per datagram (OPT_ID) in the
/// order they were sent.
#[derive(Debug, Default)]
struct TxKeys {
    on: bool,
    next: std::sync::atomic::AtomicU32,
    stamps: prober_sys::rx::KeyedTxStamps,
}

impl TxKeys {
    /// Files the number of the datagram just sent for `seq`.
    fn sent(&self, seq: u64) {
        if self.on {
            self.stamps
                .expect(self.next.fetch_add(1, Ordering::Relaxed), seq);
        }
    }

    fn drain(&self, fd: std::os::fd::BorrowedFd<'_>) {
        if self.on {
            self.stamps.drain(fd);
        }
    }
}

/// The TCP side: one kept connection, one query at a time on it.
#[derive(Debug, Default)]
struct Tcp {
    conn: tokio::sync::Mutex<Option<(StampedStream, Arc<ChannelStamps>)>>,
    opened: AtomicU64,
}

/// A `dns://` or `dns+tcp://` target.
#[derive(Debug)]
pub struct DnsProbe {
    server: SocketAddr,
    question: Question,
    opts: Arc<DnsOptions>,
    udp: Option<Udp>,
    tcp: Tcp,
    tx_stamps: bool,
}

impl DnsProbe {
    /// A probe asking `server` the `question`; starts the UDP reader unless
    /// the question goes over TCP.
    ///
    /// # Errors
    /// The UDP socket cannot be opened.
    pub async fn new(
        server: SocketAddr,
        question: Question,
        opts: Arc<DnsOptions>,
        tx_stamps: bool,
    ) -> io::Result<Self> {
        let udp = if question.tcp {
            None
        } else {
            let local: SocketAddr = if server.is_ipv4() {
                (Ipv4Addr::UNSPECIFIED, 0).into()
            } else {
                (Ipv6Addr::UNSPECIFIED, 0).into()
            };
            let socket = Arc::new(UdpSocket::bind(local).await?);
            prober_sys::rx::enable_timestamps(socket.as_fd())?;
            let tx = Arc::new(TxKeys {
                on: tx_stamps && prober_sys::rx::enable_tx_timestamps_id(socket.as_fd()).is_ok(),
                ..TxKeys::default()
            });
            let ids = Arc::new(Ids {
                base: fastrand::u16(..),
                highest: AtomicU64::new(0),
            });
            let matcher = Matcher::new();
            let task = tokio::spawn(read_replies(
                Arc::clone(&socket),
                server,
                question.clone(),
                Arc::clone(&matcher),
                Arc::clone(&ids),
                Arc::clone(&tx),
            ));
            Some(Udp {
                socket,
                matcher,
                ids,
                tx,
                _reader: AbortOnDropHandle::new(task),
            })
        };
        Ok(Self {
            server,
            question,
            opts,
            udp,
            tcp: Tcp::default(),
            tx_stamps,
        })
    }

    async fn query_udp(
        &self,
        udp: &Udp,
        seq: u64,
        gate: Gate,
    ) -> Result<(Instant, Got, Option<u64>, u64), ProbeError> {
        let query = self.question.encode(udp.ids.id(seq), self.opts.recursion);
        udp.tx.drain(udp.socket.as_fd());
        let mut waiter = udp.matcher.register(seq);
        udp.ids.highest.fetch_max(seq + 1, Ordering::AcqRel);
        gate.pass().await;
        let sent = Instant::now();
        let t1 = unix_now_ns();
        udp.socket
            .send_to(&query, self.server)
            .await
            .map_err(|e| ProbeError::io("sending the query", &e))?;
        udp.tx.sent(seq);
        let got = waiter.reply().await?;
        udp.tx.drain(udp.socket.as_fd());
        Ok((sent, got, udp.tx.stamps.take(seq), t1))
    }

    /// One query over the kept TCP connection (opened, or reopened after
    /// a failure, first).
    async fn query_tcp(
        &self,
        gate: Option<Gate>,
    ) -> Result<(Instant, Got, Option<u64>, u64), ProbeError> {
        let id = fastrand::u16(..);
        let query = self.question.encode(id, self.opts.recursion);
        let mut framed = Vec::with_capacity(query.len() + 2);
        framed.extend_from_slice(&u16::try_from(query.len()).unwrap_or(u16::MAX).to_be_bytes());
        framed.extend_from_slice(&query);
        let mut slot = self.tcp.conn.lock().await;
        let mut gate = gate;
        let (sent, t1, window, body) = loop {
            let fresh = slot.is_none();
            if fresh {
                let tcp = TcpStream::connect(self.server).await.map_err(|e| {
                    ProbeError::io(format_args!("connecting to {}", self.server), &e)
                })?;
                let stamps = Arc::new(ChannelStamps::default());
                let stream = StampedStream::new(tcp, Arc::clone(&stamps), self.tx_stamps)
                    .map_err(|e| ProbeError::io("setting socket options", &e))?;
                self.tcp.opened.fetch_add(1, Ordering::Relaxed);
                *slot = Some((stream, stamps));
            }
            let Some((stream, stamps)) = slot.as_mut() else {
                return Err(ProbeError::new(ErrorKind::Other, "no connection"));
            };
            if let Some(gate) = gate.take() {
                gate.pass().await;
            }
            let sent = Instant::now();
            let t1 = unix_now_ns();
            let window = stamps.begin();
            let res = async {
                stream.write_all(&framed).await?;
                let mut len = [0u8; 2];
                stream.read_exact(&mut len).await?;
                let mut body = vec![0u8; usize::from(u16::from_be_bytes(len))];
                stream.read_exact(&mut body).await?;
                Ok::<_, io::Error>(body)
            }
            .await;
            match res {
                Ok(body) => break (sent, t1, window, body),
                Err(e) => {
                    *slot = None;
                    // A server may close a kept connection whenever it likes
                    // (RFC 7766 §6.2.3): a kept one that turns out closed is
                    // asked again on a new one, timed from there.
                    let closed = matches!(
                        e.kind(),
                        io::ErrorKind::UnexpectedEof
                            | io::ErrorKind::ConnectionReset
                            | io::ErrorKind::BrokenPipe
                    );
                    if fresh || !closed {
                        return Err(ProbeError::io("DNS over TCP", &e));
                    }
                }
            }
        };
        let received = Instant::now();
        let t4 = unix_now_ns();
        let w = window.end();
        let msg = Message::from_vec(&body).map_err(|e| {
            ProbeError::protocol(format!("malformed DNS reply ({} bytes): {e}", body.len()))
        })?;
        if msg.metadata.id != id || !self.question.answers(&msg) {
            *slot = None;
            return Err(ProbeError::protocol(
                "a DNS reply over TCP to another query",
            ));
        }
        let got = Got {
            received,
            t4,
            t4k: w.t4k,
            len: body.len(),
            msg,
        };
        Ok((sent, got, w.t1k, t1))
    }

    /// Checks the reply's rcode and answers; a failed check carries the
    /// reply's [`Detail`] (`over_tcp`: how it came).
    fn check(&self, msg: &Message, over_tcp: bool) -> Result<(), ProbeError> {
        self.validate(msg)
            .map_err(|e| e.with_detail(detail(msg, over_tcp)))
    }

    fn validate(&self, msg: &Message) -> Result<(), ProbeError> {
        let rcode = u16::from(msg.metadata.response_code);
        if !self.opts.rcodes.contains(&rcode) {
            let want: Vec<String> = self.opts.rcodes.iter().map(|c| rcode_name(*c)).collect();
            return Err(ProbeError::new(
                ErrorKind::Status,
                format!(
                    "rcode {}, expected {}",
                    rcode_name(rcode),
                    want.join(" or ")
                ),
            ));
        }
        if let Some(re) = &self.opts.answer
            && !msg.answers.iter().any(|r| re.is_match(&r.to_string()))
        {
            return Err(ProbeError::new(
                ErrorKind::Content,
                format!(
                    "no answer matches {} ({} answers)",
                    re.as_str(),
                    msg.answers.len()
                ),
            ));
        }
        Ok(())
    }
}

/// What a reply says beside its records: its rcode, flags and section
/// sizes.
fn detail(msg: &Message, over_tcp: bool) -> Detail {
    let count = |n: usize| u16::try_from(n).unwrap_or(u16::MAX);
    let m = &msg.metadata;
    Detail::Dns {
        rcode: u16::from(m.response_code),
        answers: count(msg.answers.len()),
        authority: count(msg.authorities.len()),
        additional: count(msg.additionals.len()),
        aa: m.authoritative,
        tc: m.truncation,
        tcp: over_tcp,
    }
}

async fn read_replies(
    socket: Arc<UdpSocket>,
    server: SocketAddr,
    question: Question,
    matcher: Arc<Matcher<Arrival>>,
    ids: Arc<Ids>,
    tx: Arc<TxKeys>,
) {
    // The largest UDP DNS message (EDNS allows up to 65,535 bytes).
    let mut buf = vec![0u8; 65_536];
    loop {
        let read = socket
            .async_io(Interest::READABLE | Interest::ERROR, || {
                tx.drain(socket.as_fd());
                prober_sys::rx::recv_stamped::<SockaddrStorage>(socket.as_fd(), &mut buf)
            })
            .await;
        let (n, from, stamp) = match read {
            Ok(x) => x,
            Err(e) => {
                tracing::debug!("dns receive: {e}");
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            }
        };
        let received = Instant::now();
        let t4 = unix_now_ns();
        let from_server = from.as_ref().and_then(prober_sys::rx::socket_addr) == Some(server);
        if !from_server {
            // Another source: never a reply, whatever its ID (spoofed).
            matcher.count_unknown();
            continue;
        }
        let bytes = &buf[..n];
        if n < 12 {
            // Too short to carry an ID: it fails the newest query waiting.
            match matcher.newest_pending(|_| true) {
                Some(seq) => {
                    let _ = matcher.deliver(
                        seq,
                        Err(ProbeError::protocol(format!(
                            "malformed DNS reply ({n} bytes, shorter than a header)"
                        ))),
                    );
                }
                None => matcher.count_corrupt(),
            }
            continue;
        }
        let id = u16::from_be_bytes([bytes[0], bytes[1]]);
        let Some(seq) = ids.seq(id) else {
            matcher.count_unknown();
            continue;
        };
        let arrival = match Message::from_vec(bytes) {
            Ok(msg)
                if msg.metadata.message_type == MessageType::Response && question.answers(&msg) =>
            {
                Ok(Got {
                    received,
                    t4,
                    t4k: stamp.and_then(prober_sys::rx::unix_ns),
                    len: n,
                    msg,
                })
            }
            Ok(_) => {
                // Our ID but not our question: someone else's reply.
                matcher.count_unknown();
                continue;
            }
            Err(e) => Err(ProbeError::protocol(format!(
                "malformed DNS reply ({n} bytes): {e}"
            ))),
        };
        let _ = matcher.deliver(seq, arrival);
    }
}

impl Probe for DnsProbe {
    async fn probe_at(&self, seq: u64, gate: Gate) -> Result<Reply, ProbeError> {
        let (sent, mut got, mut t1k, t1, mut over_tcp) = match &self.udp {
            Some(udp) => {
                let (sent, got, t1k, t1) = self.query_udp(udp, seq, gate).await?;
                (sent, got, t1k, t1, false)
            }
            None => {
                let (sent, got, t1k, t1) = self.query_tcp(Some(gate)).await?;
                (sent, got, t1k, t1, true)
            }
        };
        if got.msg.metadata.truncation && !over_tcp {
            if !self.opts.tcp_fallback {
                return Err(ProbeError::new(
                    ErrorKind::Truncated,
                    "truncated reply (TC=1) over UDP; --dns-tcp-fallback retries over TCP",
                ));
            }
            let res = self.query_tcp(None).await;
            // A fallback connection is not kept: close it, as a stub
            // resolver does.
            *self.tcp.conn.lock().await = None;
            got = res?.1;
            over_tcp = true;
            // Two queries: the kernel stamps of one do not split both.
            (t1k, got.t4k) = (None, None);
        }
        self.check(&got.msg, over_tcp)?;
        let stamps = Stamps {
            t1: Some(t1),
            t1k,
            t4k: got.t4k,
            t4: Some(got.t4),
            responder: None,
            kernel_peer: false,
            handshake: None,
        };
        Ok(Reply {
            sent,
            received: got.received,
            server_dwell: None,
            rx_wake: prober_sys::rx::wake_ns(stamps.t4k, got.t4).map(Duration::from_nanos),
            bytes: got.len,
            ttl: None,
            stamps,
            app: AppReply {
                phases: prober_core::Phases::default(),
                detail: Some(detail(&got.msg, over_tcp)),
            },
        })
    }

    fn anomalies(&self) -> Anomalies {
        let mut a = self
            .udp
            .as_ref()
            .map(|u| u.matcher.anomalies())
            .unwrap_or_default();
        if self.question.tcp {
            a.reconnects += self.tcp.opened.load(Ordering::Relaxed).saturating_sub(1);
        }
        a
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reply_id_names_the_newest_query_sent_with_it() {
        let ids = Ids {
            base: 65_530,
            highest: AtomicU64::new(0),
        };
        assert_eq!(ids.seq(65_530), None, "nothing sent yet");
        ids.highest.store(11, Ordering::Release); // seqs 0..=10 sent
        assert_eq!(ids.id(10), 4, "IDs wrap");
        assert_eq!(ids.seq(4), Some(10));
        assert_eq!(ids.seq(65_530), Some(0));
        assert_eq!(ids.seq(100), None, "an ID never sent");
        ids.highest.store(65_536 + 11, Ordering::Release);
        assert_eq!(ids.seq(65_530), Some(65_536), "after a wrap, the newest");
    }
}

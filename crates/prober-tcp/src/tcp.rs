//! TCP probes: request/response on one connection, handshake time, and
//! connect-request-response-close.

use std::io;
use std::net::SocketAddr;
use std::os::fd::AsFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use prober_core::{Anomalies, ErrorKind, Gate, Matcher, MatcherSet, Probe, ProbeError, Reply};
use socket2::SockRef;
use tokio::io::{AsyncReadExt, AsyncWriteExt, Interest};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpSocket, TcpStream};
use tokio::sync::Mutex;
use tokio::time::Instant;
use tokio_util::task::AbortOnDropHandle;

use crate::reader::{Arrival, Got, RxStamp, await_reply, recv_stamped};
use prober_net::busy::{Reader, SpinThread, Step};

use crate::wire::{self, HEADER_LEN, Header, Kind, MAX_TCP_FRAME};

/// `tcp://host:port`: request/response over one persistent connection with
/// TCP_NODELAY, like netperf TCP_RR. Requests are pipelined when the interval
/// is shorter than the RTT; replies are matched by seq. A dead connection is
/// re-opened by the next probe and counted as a reconnect.
///
/// Each connection has its own [`Matcher`]: when a connection dies, only
/// the probes sent on it fail, never those already waiting on its
/// replacement. Their anomaly counts are added up in [`Probe::anomalies`].
#[derive(Debug)]
pub struct TcpProbe {
    addr: SocketAddr,
    size: usize,
    nonce: u64,
    matchers: MatcherSet<Arrival>,
    conn: Mutex<Option<Arc<Conn>>>,
    connected_once: AtomicBool,
    busy_poll: bool,
}

#[derive(Debug)]
struct Conn {
    writer: Mutex<(OwnedWriteHalf, Vec<u8>)>,
    alive: Arc<AtomicBool>,
    matcher: Arc<Matcher<Arrival>>,
    _reader: Reader,
}

impl TcpProbe {
    /// A probe of `addr` sending frames of `size` bytes. No connection is
    /// made until [`Probe::prepare`] or the first probe.
    pub fn new(addr: SocketAddr, size: usize) -> Self {
        Self::with_busy_poll(addr, size, false)
    }

    /// As [`TcpProbe::new`]; with `busy_poll` replies are read by a thread
    /// spinning on the socket, which uses a core.
    pub fn with_busy_poll(addr: SocketAddr, size: usize, busy_poll: bool) -> Self {
        Self {
            addr,
            size,
            nonce: fastrand::u64(..),
            matchers: MatcherSet::new(),
            conn: Mutex::new(None),
            connected_once: AtomicBool::new(false),
            busy_poll,
        }
    }

    async fn connection(&self) -> Result<Arc<Conn>, ProbeError> {
        let mut slot = self.conn.lock().await;
        if let Some(conn) = slot.as_ref()
            && conn.alive.load(Ordering::Acquire)
        {
            return Ok(Arc::clone(conn));
        }
        *slot = None;
        let stream = TcpStream::connect(self.addr)
            .await
            .map_err(|e| ProbeError::io(format_args!("connect to {}", self.addr), &e))?;
        stream
            .set_nodelay(true)
            .map_err(|e| ProbeError::io("setting TCP_NODELAY", &e))?;
        prober_net::rx::enable_timestamps(stream.as_fd())
            .map_err(|e| ProbeError::io("setting SO_TIMESTAMPNS", &e))?;
        let reconnect = self.connected_once.swap(true, Ordering::Relaxed);
        let matcher = self.matchers.next(reconnect);
        let alive = Arc::new(AtomicBool::new(true));
        let spin_clone = match self.busy_poll {
            true => Some(
                SockRef::from(&stream)
                    .try_clone()
                    .map_err(|e| ProbeError::io("cloning the socket", &e))?,
            ),
            false => None,
        };
        let (reader, writer) = stream.into_split();
        let (reader_matcher, nonce, size, flag) = (
            Arc::clone(&matcher),
            self.nonce,
            self.size,
            Arc::clone(&alive),
        );
        let reader = match spin_clone {
            Some(sock) => Reader::Spin(
                spin_replies(sock.into(), reader_matcher, nonce, size, flag)
                    .map_err(|e| ProbeError::io("starting the busy-poll thread", &e))?,
            ),
            None => Reader::Task(AbortOnDropHandle::new(tokio::spawn(read_replies(
                reader,
                reader_matcher,
                nonce,
                size,
                flag,
            )))),
        };
        let conn = Arc::new(Conn {
            writer: Mutex::new((writer, Vec::with_capacity(self.size))),
            alive,
            matcher,
            _reader: reader,
        });
        *slot = Some(Arc::clone(&conn));
        Ok(conn)
    }
}

/// Splits the replies at the front of `acc` off and hands them to their
/// probes, all with the arrival `received` and receive wake-up `wake` of the
/// read that completed them. Keeps a partial frame. Fails on a frame that
/// is not one of ours.
fn take_replies(
    acc: &mut Vec<u8>,
    nonce: u64,
    size: usize,
    (received, rx): (Instant, RxStamp),
    matcher: &Matcher<Arrival>,
) -> Result<(), String> {
    let mut at = 0;
    while acc.len() - at >= HEADER_LEN {
        let h = Header::decode(&acc[at..], MAX_TCP_FRAME).map_err(|e| format!("bad reply: {e}"))?;
        if h.kind != Kind::Response || h.nonce != nonce || h.len as usize != size {
            return Err(format!(
                "bad reply: {} of {} bytes from another run or peer",
                h.kind, h.len
            ));
        }
        if acc.len() - at < size {
            break;
        }
        let got = Got {
            received,
            dwell: Duration::from_nanos(h.dwell_ns),
            rx,
            responder_wake: None,
            follow_up: false,
        };
        matcher.deliver(h.seq, Ok(got));
        at += size;
    }
    acc.drain(..at);
    Ok(())
}

async fn read_replies(
    reader: OwnedReadHalf,
    matcher: Arc<Matcher<Arrival>>,
    nonce: u64,
    size: usize,
    alive: Arc<AtomicBool>,
) {
    let stream: &TcpStream = reader.as_ref();
    let mut acc: Vec<u8> = Vec::with_capacity(64 * 1024);
    let mut chunk = vec![0u8; 64 * 1024];
    let why = loop {
        let read = stream
            .async_io(Interest::READABLE, || {
                recv_stamped(stream.as_fd(), &mut chunk)
            })
            .await;
        let (n, rx) = match read {
            Ok((0, _)) => break ProbeError::new(ErrorKind::Reset, "connection closed by peer"),
            Ok(r) => r,
            Err(e) => break ProbeError::io("receive", &e),
        };
        acc.extend_from_slice(&chunk[..n]);
        if let Err(why) = take_replies(&mut acc, nonce, size, (Instant::now(), rx), &matcher) {
            break ProbeError::protocol(why);
        }
    };
    end_connection(why, &matcher, &alive);
}

/// A connection's reader stopped: retire the connection and fail the probes
/// waiting on it (only those: each connection has its own matcher).
fn end_connection(why: ProbeError, matcher: &Matcher<Arrival>, alive: &AtomicBool) {
    alive.store(false, Ordering::Release);
    tracing::debug!(reason = %why, "tcp probe connection ended");
    matcher.fail_all(|| Err(why.clone()));
}

/// Marks a connection dead when dropped while still set (a cancelled or
/// failed write).
struct Unfinished<'a>(&'a AtomicBool, bool);

impl Drop for Unfinished<'_> {
    fn drop(&mut self) {
        if self.1 {
            self.0.store(false, Ordering::Release);
        }
    }
}

/// The busy-poll twin of `read_replies`: a thread reading the socket
/// without blocking and splitting the byte stream into frames itself.
fn spin_replies(
    stream: std::net::TcpStream,
    matcher: Arc<Matcher<Arrival>>,
    nonce: u64,
    size: usize,
    alive: Arc<AtomicBool>,
) -> io::Result<SpinThread> {
    let mut acc: Vec<u8> = Vec::with_capacity(64 * 1024);
    let mut chunk = vec![0u8; 64 * 1024];
    let fail = |why: ProbeError, matcher: &Matcher<Arrival>, alive: &AtomicBool| {
        end_connection(why, matcher, alive);
        Step::Done
    };
    SpinThread::spawn("prober-tcp-poll", move || {
        if !prober_net::busy::readable_now(stream.as_fd()) {
            return Step::Idle;
        }
        let (n, rx) = match recv_stamped(stream.as_fd(), &mut chunk) {
            Ok((0, _)) => {
                let why = ProbeError::new(ErrorKind::Reset, "connection closed by peer");
                return fail(why, &matcher, &alive);
            }
            Ok(r) => r,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Step::Idle,
            Err(e) => return fail(ProbeError::io("receive", &e), &matcher, &alive),
        };
        acc.extend_from_slice(&chunk[..n]);
        match take_replies(&mut acc, nonce, size, (Instant::now(), rx), &matcher) {
            Ok(()) => Step::Busy,
            Err(why) => fail(ProbeError::protocol(why), &matcher, &alive),
        }
    })
}

impl Probe for TcpProbe {
    async fn probe_at(&self, seq: u64, gate: Gate) -> Result<Reply, ProbeError> {
        let conn = self.connection().await?;
        let mut waiter = conn.matcher.register(seq);
        let (sent, t1) = {
            let mut guard = conn.writer.lock().await;
            let (writer, buf) = &mut *guard;
            wire::encode_request(buf, self.size, seq, self.nonce);
            // If the runner's timeout drops this future mid-write, half a
            // frame is on the wire and the stream is out of step: retire
            // the connection so the next probe opens a new one.
            let mut unfinished = Unfinished(&conn.alive, true);
            gate.pass().await;
            let sent = Instant::now();
            let t1 = prober_core::clock::unix_now_ns();
            if let Err(e) = writer.write_all(buf).await {
                return Err(ProbeError::io("send", &e));
            }
            unfinished.1 = false;
            (sent, t1)
        };
        await_reply(&mut waiter, sent, t1, self.size).await
    }

    async fn prepare(&self) -> Result<(), ProbeError> {
        self.connection().await.map(drop)
    }

    fn anomalies(&self) -> Anomalies {
        self.matchers.anomalies()
    }
}

fn new_socket(addr: SocketAddr) -> Result<TcpSocket, ProbeError> {
    let socket = if addr.is_ipv4() {
        TcpSocket::new_v4()
    } else {
        TcpSocket::new_v6()
    };
    socket.map_err(|e| ProbeError::io("creating socket", &e))
}

/// Closes with RST (SO_LINGER 0) so that thousands of probes do not leave
/// TIME_WAIT sockets behind on the prober host.
fn reset(stream: &TcpStream) {
    let _ = SockRef::from(stream).set_linger(Some(Duration::ZERO));
}

/// `tcp-connect://host:port`: time of the TCP handshake (SYN to SYN-ACK as
/// seen by `connect()`) against any TCP server. Each connection is closed at
/// once with RST (SO_LINGER 0); no data is sent.
#[derive(Debug)]
pub struct TcpConnectProbe {
    addr: SocketAddr,
}

impl TcpConnectProbe {
    /// A probe of `addr`.
    pub fn new(addr: SocketAddr) -> Self {
        Self { addr }
    }
}

impl Probe for TcpConnectProbe {
    async fn probe_at(&self, _seq: u64, gate: Gate) -> Result<Reply, ProbeError> {
        let socket = new_socket(self.addr)?;
        gate.pass().await;
        let sent = Instant::now();
        let stream = socket
            .connect(self.addr)
            .await
            .map_err(|e| ProbeError::io(format_args!("connect to {}", self.addr), &e))?;
        let received = Instant::now();
        reset(&stream);
        Ok(Reply {
            sent,
            received,
            server_dwell: None,
            rx_wake: None,
            bytes: 0,
            ttl: None,
            stamps: prober_core::sample::Stamps::default(),
        })
    }
}

/// `tcp-crr://host:port`: connect, one request/response, close, like netperf
/// TCP_CRR. The RTT runs from the start of the connect to the reply; the
/// close (RST, as for `tcp-connect://`) is not timed.
#[derive(Debug)]
pub struct TcpCrrProbe {
    addr: SocketAddr,
    size: usize,
    nonce: u64,
}

impl TcpCrrProbe {
    /// A probe of `addr` sending frames of `size` bytes.
    pub fn new(addr: SocketAddr, size: usize) -> Self {
        Self {
            addr,
            size,
            nonce: fastrand::u64(..),
        }
    }
}

impl Probe for TcpCrrProbe {
    async fn probe_at(&self, seq: u64, gate: Gate) -> Result<Reply, ProbeError> {
        let io_err = |what: &str, e: io::Error| ProbeError::io(what, &e);
        let socket = new_socket(self.addr)?;
        let mut frame = Vec::with_capacity(self.size);
        wire::encode_request(&mut frame, self.size, seq, self.nonce);
        gate.pass().await;
        let sent = Instant::now();
        let mut stream = socket
            .connect(self.addr)
            .await
            .map_err(|e| io_err(&format!("connect to {}", self.addr), e))?;
        stream
            .set_nodelay(true)
            .map_err(|e| io_err("setting TCP_NODELAY", e))?;
        stream
            .write_all(&frame)
            .await
            .map_err(|e| io_err("send", e))?;
        stream
            .read_exact(&mut frame)
            .await
            .map_err(|e| io_err("receive", e))?;
        let received = Instant::now();
        reset(&stream);
        let h = Header::decode(&frame, MAX_TCP_FRAME)
            .map_err(|e| ProbeError::protocol(format!("bad reply: {e}")))?;
        if h.kind != Kind::Response || h.nonce != self.nonce || h.seq != seq {
            return Err(ProbeError::protocol(
                "bad reply: not the response to this request",
            ));
        }
        let dwell = Some(Duration::from_nanos(h.dwell_ns));
        Ok(Reply {
            sent,
            received,
            server_dwell: dwell,
            rx_wake: None,
            bytes: self.size,
            ttl: None,
            stamps: prober_core::sample::Stamps::default(),
        })
    }
}

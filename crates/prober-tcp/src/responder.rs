//! The echo responder for `tcp://`, `tcp-crr://` and `udp://` probes.
//!
//! It answers each request frame with a frame of the same length whose kind
//! is response and whose dwell field holds the time it held the request. It
//! never answers a response, a frame without the magic or an oversized frame:
//! over TCP such a frame closes the connection, over UDP it is dropped.

use std::collections::HashSet;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use prober_net::guard::{self, Gate, GuardStats, Limits, LogLimiter, RateLimiter};
use prober_sys::busy::{SpinThread, Step};
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream, UdpSocket};
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::wire::{self, FrameError, HEADER_LEN, Header, Kind, MAX_TCP_FRAME, MAX_UDP_FRAME};

/// Most distinct UDP peers remembered for "new client" log lines.
const MAX_LOGGED_PEERS: usize = 4096;

/// Responder settings. The impairments exist for tests and experiments; a
/// plain responder leaves them `None`.
#[derive(Debug, Clone, Default)]
pub struct ResponderConfig {
    /// Log each new client at info level.
    pub log_clients: bool,
    /// Do not answer every k-th request (counted per listener, from 1).
    pub drop_every: Option<u64>,
    /// Answer every k-th request twice.
    pub duplicate_every: Option<u64>,
    /// Hold every k-th request for `delay` before answering.
    pub delay_every: Option<u64>,
    /// How long `delay_every` holds a request.
    pub delay: Duration,
    /// Read requests on threads that spin on non-blocking sockets instead
    /// of sleeping in epoll (a core per UDP socket and per TCP connection).
    /// `delay_every` is not applied in this mode.
    pub busy_poll: bool,
    /// Limits for a public address (rate, connections, timeouts, memory).
    pub limits: Limits,
    /// What the limits refused.
    pub stats: Arc<GuardStats>,
    /// Send UDP follow-up frames (the responder's transmit stamp) to
    /// sources other than loopback. A follow-up makes the answer 48 bytes
    /// longer than the request, so it is off by default: a responder on a
    /// public address never sends more than it received.
    pub udp_follow_ups: bool,
    /// How to wait for requests (`serve --receive`): with `adaptive`, after
    /// each answer the responder polls for the next request for a budget
    /// that adapts to the gaps between requests, then parks.
    pub receive: prober_core::spin::Receive,
}

/// Adaptive receive on the responder's side: a client's budget adapts to
/// its RTT, this one to the gap from an answer to the next request (the
/// client's wake-up and send), and is nothing when even the short gaps
/// outlast the cap (a client at 10 ms, say).
struct NextRequest {
    budget: Option<prober_core::spin::SpinBudget>,
    answered: Option<std::time::Instant>,
}

impl NextRequest {
    fn new(receive: &prober_core::spin::Receive) -> Self {
        Self {
            budget: receive.budget(),
            answered: None,
        }
    }

    /// A request came in: the gap since the last answer.
    fn arrived(&mut self) {
        if let (Some(b), Some(at)) = (&self.budget, self.answered.take()) {
            b.record(at.elapsed());
        }
    }

    /// Answered: polls `fd` until the next request waits there or the
    /// budget runs out. `None` if it did not spin; else how long, and
    /// whether a request came.
    fn answered(&mut self, fd: std::os::fd::BorrowedFd<'_>) -> Option<(Duration, bool)> {
        let b = self.budget.as_ref()?;
        self.answered = Some(std::time::Instant::now());
        b.spin(|| prober_sys::busy::data_waiting(fd))
    }
}

/// What to do with the n-th request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Plan {
    answer: bool,
    copies: usize,
    delay: Option<Duration>,
}

impl ResponderConfig {
    fn plan(&self, n: u64) -> Plan {
        let hit = |k: Option<u64>| k.is_some_and(|k| k > 0 && n.is_multiple_of(k));
        Plan {
            answer: !hit(self.drop_every),
            copies: if hit(self.duplicate_every) { 2 } else { 1 },
            delay: hit(self.delay_every).then_some(self.delay),
        }
    }
}

fn elapsed_ns(since: Instant) -> u64 {
    u64::try_from(since.elapsed().as_nanos()).unwrap_or(u64::MAX)
}

/// Serves TCP clients from `listener` until `stop` is cancelled, then closes
/// every connection.
///
/// # Errors
/// Only if accepting fails in a way that cannot be retried.
pub async fn serve_tcp(
    listener: TcpListener,
    cfg: ResponderConfig,
    stop: CancellationToken,
) -> io::Result<()> {
    let gate = Gate::new(cfg.limits, Arc::clone(&cfg.stats));
    let cfg = Arc::new(cfg);
    let counter = Arc::new(AtomicU64::new(0));
    let mut spinning: Vec<SpinThread> = Vec::new();
    let res = accept_loop(
        &listener,
        &gate,
        "tcp",
        cfg.log_clients,
        &stop,
        |stream, peer| {
            if cfg.busy_poll {
                spinning.retain(|t| !t.is_finished());
                match stream
                    .into_std()
                    .and_then(|s| spin_conn(s, Arc::clone(&cfg), Arc::clone(&counter)))
                {
                    Ok(t) => spinning.push(t),
                    Err(error) => tracing::warn!(%peer, %error, "cannot busy-poll tcp client"),
                }
                return None;
            }
            let (cfg, counter, gate) = (Arc::clone(&cfg), Arc::clone(&counter), Arc::clone(&gate));
            Some(async move { serve_conn(stream, &cfg, &counter, &gate).await })
        },
    )
    .await;
    drop(spinning);
    res
}

/// Accepts clients from `listener` until `stop` is cancelled, then ends
/// every connection. Each client passes `gate` first (over a cap: closed at
/// once, counted, logged once a minute), then is served by the future
/// `serve` makes for it, on a task of its own that holds the gate's permit;
/// `serve` may also take the client elsewhere and return `None`.
pub(crate) async fn accept_loop<F, Fut>(
    listener: &TcpListener,
    gate: &Arc<Gate>,
    what: &'static str,
    log_clients: bool,
    stop: &CancellationToken,
    mut serve: F,
) -> io::Result<()>
where
    F: FnMut(TcpStream, SocketAddr) -> Option<Fut>,
    Fut: std::future::Future<Output = io::Result<()>> + Send + 'static,
{
    let logs = LogLimiter::default();
    let mut conns = JoinSet::new();
    loop {
        let accepted = tokio::select! {
            () = stop.cancelled() => break,
            res = listener.accept() => res,
            Some(_) = conns.join_next(), if !conns.is_empty() => continue,
        };
        match accepted {
            Ok((stream, peer)) => {
                let Some(permit) = gate.admit_or_warn(peer, what) else {
                    continue;
                };
                if log_clients {
                    tracing::debug!(%peer, "{what} client connected");
                }
                let Some(served) = serve(stream, peer) else {
                    continue;
                };
                let stop = stop.clone();
                conns.spawn(async move {
                    let _permit = permit;
                    let res = tokio::select! {
                        () = stop.cancelled() => Ok(()),
                        res = served => res,
                    };
                    // A client that misbehaves or goes away is its own
                    // business: debug level only, so a flood cannot flood
                    // the log.
                    match res {
                        Ok(()) if log_clients => tracing::debug!(%peer, "{what} client left"),
                        Ok(()) => {}
                        Err(error) => tracing::debug!(%peer, %error, "closing {what} client"),
                    }
                });
            }
            Err(error) => {
                // EMFILE and friends: back off instead of spinning.
                if let Some(held) = logs.check("accept failed", std::time::Instant::now()) {
                    tracing::warn!(%error, held_back = held, "accept failed");
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
    conns.shutdown().await;
    Ok(())
}

/// How long a busy-poll responder keeps trying to write to a client that
/// does not read before it drops the connection (so shutdown cannot hang).
const SPIN_WRITE_LIMIT: Duration = Duration::from_secs(1);

/// Writes all of `buf` to a non-blocking socket, spinning while it is full,
/// for at most [`SPIN_WRITE_LIMIT`].
fn write_all_spin(w: &mut impl std::io::Write, mut buf: &[u8]) -> io::Result<()> {
    let start = std::time::Instant::now();
    while !buf.is_empty() {
        match w.write(buf) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => buf = &buf[n..],
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                if start.elapsed() > SPIN_WRITE_LIMIT {
                    return Err(io::ErrorKind::TimedOut.into());
                }
                std::hint::spin_loop();
            }
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// A non-blocking socket written as an [`AsyncWrite`](tokio::io::AsyncWrite)
/// that never returns `Pending`: a write that finds the socket full spins
/// for at most [`SPIN_WRITE_LIMIT`]. The busy-poll responder runs the same
/// answering code as the async one ([`Answers`]) on it, polled once.
struct SpinWriter<'a>(&'a std::net::TcpStream);

impl tokio::io::AsyncWrite for SpinWriter<'_> {
    fn poll_write(
        self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<io::Result<usize>> {
        let mut w = self.0;
        std::task::Poll::Ready(write_all_spin(&mut w, buf).map(|()| buf.len()))
    }

    fn poll_flush(
        self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<io::Result<()>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn poll_shutdown(
        self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<io::Result<()>> {
        std::task::Poll::Ready(Ok(()))
    }
}

/// Runs `f` to its end on the spinning thread: it only writes to a
/// [`SpinWriter`], which never waits, so one poll finishes it.
fn finish_now<T>(f: impl std::future::Future<Output = io::Result<T>>) -> io::Result<T> {
    let mut f = std::pin::pin!(f);
    match f
        .as_mut()
        .poll(&mut std::task::Context::from_waker(std::task::Waker::noop()))
    {
        std::task::Poll::Ready(r) => r,
        std::task::Poll::Pending => Err(io::Error::other("a busy-poll answer waited")),
    }
}

/// The busy-poll twin of `serve_conn`, on a thread of its own: the same
/// answers, receive stamps and follow-ups (through [`Answers`]); the
/// error queue is read while a response waits for its transmit stamp.
fn spin_conn(
    stream: std::net::TcpStream,
    cfg: Arc<ResponderConfig>,
    counter: Arc<AtomicU64>,
) -> io::Result<SpinThread> {
    use std::os::fd::AsFd as _;
    stream.set_nonblocking(true)?;
    stream.set_nodelay(true)?;
    let rx_on = prober_sys::rx::enable_timestamps(stream.as_fd()).is_ok();
    let mut answers = Answers::new(prober_sys::rx::enable_tx_timestamps_id(stream.as_fd()).is_ok());
    let mut acc: Vec<u8> = Vec::with_capacity(64 * 1024);
    let mut chunk = vec![0u8; 64 * 1024];
    SpinThread::spawn("prober-serve-tcp-poll", move || {
        let fd = stream.as_fd();
        // A response's stamp comes within its send on loopback, later from
        // a NIC; there is no wake-up for it here as the async loop has.
        // Looked at only while one may be there (`stamps_due`): a spin that
        // finds nothing costs a `poll`, not a syscall more.
        if answers.stamps_due() {
            match prober_sys::rx::recv_tx_stamp_id(fd) {
                Ok(Some((key, t3k))) => {
                    return match finish_now(answers.stamped(&mut SpinWriter(&stream), key, t3k)) {
                        Ok(()) => Step::Busy,
                        Err(_) => Step::Done,
                    };
                }
                Ok(None) => return Step::Busy,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => answers.read_all(),
                Err(_) => return Step::Done,
            }
        }
        if !prober_sys::busy::readable_now(fd) {
            return Step::Idle;
        }
        let (n, t2k, t2) = match prober_sys::rx::recv_stamped::<()>(fd, &mut chunk) {
            Ok((0, ..)) => return Step::Done,
            Ok((n, _, stamp)) => (
                n,
                stamp.and_then(prober_sys::rx::unix_ns),
                prober_core::clock::unix_now_ns(),
            ),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                // Readable with no data: the error queue holds something
                // (a stamp that came after the queue was last found empty,
                // a follow-up's). Read it next, or every spin would come
                // back here through a `recvmsg`.
                answers.error_queue_waits();
                return Step::Busy;
            }
            Err(_) => return Step::Done,
        };
        let received = Instant::now();
        let wake = prober_sys::rx::wake_ns(t2k, t2).filter(|_| rx_on);
        acc.extend_from_slice(&chunk[..n]);
        let mut writer = SpinWriter(&stream);
        let answered = answers.answer(&mut writer, &mut acc, (received, wake), &cfg, &counter);
        match finish_now(answered) {
            Ok(at) => {
                acc.drain(..at);
                Step::Busy
            }
            Err(_) => Step::Done,
        }
    })
}

/// What a TCP responder connection's socket had: bytes (with the kernel's
/// receive stamp of the last segment and the read time), a transmit stamp,
/// or an error-queue entry that is no stamp.
enum TcpEvent {
    Data(usize, Option<u64>, u64),
    Stamp(u32, u64),
    Nothing,
}

/// Bytes of a connection's unfinished request held against the gate's
/// budget; given back on drop.
pub(crate) struct Held<'a> {
    gate: &'a Gate,
    bytes: usize,
}

impl<'a> Held<'a> {
    /// Nothing held yet.
    pub(crate) fn new(gate: &'a Gate) -> Self {
        Self { gate, bytes: 0 }
    }

    /// Holds `now` bytes instead of what was held; false when the budget is
    /// spent.
    pub(crate) fn set(&mut self, now: usize) -> bool {
        if now > self.bytes {
            if !self.gate.reserve(now - self.bytes) {
                return false;
            }
        } else {
            self.gate.release(self.bytes - now);
        }
        self.bytes = now;
        true
    }
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        self.gate.release(self.bytes);
    }
}

/// The smallest and largest read buffer of a connection: it starts small,
/// so an idle or slow connection holds little, and doubles while reads fill
/// it.
pub(crate) const READ_MIN: usize = 2048;
pub(crate) const READ_MAX: usize = 64 * 1024;

async fn serve_conn(
    stream: TcpStream,
    cfg: &ResponderConfig,
    counter: &AtomicU64,
    gate: &Gate,
) -> io::Result<()> {
    use std::os::fd::AsFd as _;
    stream.set_nodelay(true)?;
    // Receive stamps give the responder wake part (t2 − t2k) to a client
    // that asks; transmit stamps numbered by byte (OPT_ID) the responder
    // send part (t3k − t3), in a follow-up frame. Not with delayed replies
    // (an impairment for tests).
    let rx_on = prober_sys::rx::enable_timestamps(stream.as_fd()).is_ok();
    let mut answers = Answers::new(
        cfg.delay_every.is_none()
            && prober_sys::rx::enable_tx_timestamps_id(stream.as_fd()).is_ok(),
    );
    let (reader, mut writer) = stream.into_split();
    let sock: &TcpStream = reader.as_ref();
    // Buffers grow only as bytes arrive: a header that announces a 1 MiB
    // frame costs what was sent, not 1 MiB.
    let mut acc: Vec<u8> = Vec::new();
    let mut chunk = vec![0u8; READ_MIN];
    let mut held = Held::new(gate);
    let limits = gate.limits();
    // When the connection's current wait began (its opening, the first
    // byte of a request, the end of the last one), and whether it has
    // finished a request yet: a connection must send a whole request
    // within the request timeout, and may then idle for the idle timeout.
    let mut since = Instant::now();
    let mut served = false;
    let mut next = NextRequest::new(&cfg.receive);
    loop {
        let (limit, idle) = next_wait(limits, served, !acc.is_empty());
        let event = tokio::time::timeout_at(
            since + limit,
            sock.async_io(
                tokio::io::Interest::READABLE | tokio::io::Interest::ERROR,
                || {
                    if answers.tx_on {
                        match prober_sys::rx::recv_tx_stamp_id(sock.as_fd()) {
                            Ok(Some((key, t3k))) => return Ok(TcpEvent::Stamp(key, t3k)),
                            Ok(None) => return Ok(TcpEvent::Nothing),
                            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                            Err(e) => return Err(e),
                        }
                    }
                    let (n, _, stamp) =
                        prober_sys::rx::recv_stamped::<()>(sock.as_fd(), &mut chunk)?;
                    let t2 = prober_core::clock::unix_now_ns();
                    Ok(TcpEvent::Data(
                        n,
                        stamp.and_then(prober_sys::rx::unix_ns),
                        t2,
                    ))
                },
            ),
        )
        .await;
        let Ok(event) = event else {
            return Err(timed_out(gate, idle));
        };
        let (n, t2k, t2) = match event {
            Ok(TcpEvent::Data(n, t2k, t2)) => (n, t2k, t2),
            Ok(TcpEvent::Stamp(key, t3k)) => {
                answers.stamped(&mut writer, key, t3k).await?;
                continue;
            }
            Ok(TcpEvent::Nothing) => continue,
            Err(e) if e.kind() == io::ErrorKind::ConnectionReset => return Ok(()),
            Err(e) => return Err(e),
        };
        if n == 0 {
            return Ok(());
        }
        let received = Instant::now();
        if acc.is_empty() {
            next.arrived();
        }
        let wake = prober_sys::rx::wake_ns(t2k, t2).filter(|_| rx_on);
        if acc.is_empty() {
            since = received;
        }
        acc.extend_from_slice(&chunk[..n]);
        if n == chunk.len() && chunk.len() < READ_MAX {
            chunk.resize(chunk.len() * 2, 0);
        }
        let at = answers
            .answer(&mut writer, &mut acc, (received, wake), cfg, counter)
            .await?;
        if at > 0 {
            served = true;
            since = received;
            consume(&mut acc, at);
            if acc.is_empty() {
                let _ = next.answered(sock.as_fd());
            }
        }
        if !held.set(acc.len()) {
            return Err(io::Error::other(
                "buffer budget for unfinished requests spent",
            ));
        }
    }
}

/// Drops the first `n` bytes of a connection's unread requests (whole ones,
/// answered), and the room a long one took beyond one read buffer.
pub(crate) fn consume(acc: &mut Vec<u8>, n: usize) {
    acc.drain(..n);
    if acc.capacity() > READ_MAX && acc.len() < READ_MAX {
        acc.shrink_to(READ_MAX);
    }
}

/// How long a connection may wait for its next bytes, and whether that
/// wait is idle: one that has answered requests (`served`) and holds no
/// part of another may idle for the idle timeout; otherwise it must bring
/// a whole request within the request timeout.
pub(crate) fn next_wait(limits: &Limits, served: bool, holding: bool) -> (Duration, bool) {
    let idle = served && !holding;
    let limit = if idle {
        limits.idle_timeout
    } else {
        limits.request_timeout
    };
    (limit, idle)
}

/// A connection's wait ran out: counted, and the error that closes it.
/// `idle`: it had answered requests and held no part of another.
pub(crate) fn timed_out(gate: &Gate, idle: bool) -> io::Error {
    let (counter, why) = if idle {
        (&gate.stats.idle_timeouts, "idle too long")
    } else {
        (&gate.stats.request_timeouts, "no whole request in time")
    };
    counter.fetch_add(1, Ordering::Relaxed);
    io::Error::new(io::ErrorKind::TimedOut, why)
}

/// The most responses per connection whose follow-up is still to be sent
/// (about 56 bytes each). Requests are answered in order and a client
/// asks right after it reads each response, so a well-behaved client has
/// one or two here at a time.
const MAX_PENDING: usize = 256;

/// A response whose follow-up frame is still to be sent: its transmit
/// stamp's key (the byte offset of its last byte), seq, nonce and t3; with
/// `on_ask`, it waits for the client's ask as well as for its stamp; with
/// `interleaved` too, a later response of the client may carry it instead.
#[derive(Debug)]
struct Pending {
    key: u32,
    seq: u64,
    nonce: u64,
    t3: u64,
    on_ask: bool,
    interleaved: bool,
    t3k: Option<u64>,
    asked: bool,
}

impl Pending {
    /// Takes the entry at `at` out if its follow-up can go: it has its
    /// stamp, and its ask if it waits for one.
    fn take_ready(waiting: &mut std::collections::VecDeque<Self>, at: usize) -> Option<Self> {
        let p = waiting.get(at)?;
        let ready = p.t3k.is_some() && (!p.on_ask || p.asked);
        if ready { waiting.remove(at) } else { None }
    }

    /// The responder send part (t3k − t3), once stamped.
    fn send(&self) -> Option<u64> {
        self.t3k.and_then(|k| k.checked_sub(self.t3))
    }

    /// Writes the follow-up; the bytes written.
    async fn write(
        self,
        writer: &mut (impl tokio::io::AsyncWrite + Unpin),
        buf: &mut Vec<u8>,
    ) -> io::Result<u64> {
        use tokio::io::AsyncWriteExt as _;
        wire::encode_follow_up(buf, self.seq, self.nonce, self.send());
        writer.write_all(buf).await?;
        Ok(buf.len() as u64)
    }
}

/// How a TCP responder connection answers, whether it sleeps in epoll
/// (`serve_conn`) or spins (`spin_conn`): requests, asks, and the
/// follow-ups and interleaved stamps of responses that asked for their
/// transmit stamps.
#[derive(Debug)]
struct Answers {
    /// Transmit stamps numbered by byte (OPT_ID) are on.
    tx_on: bool,
    /// Bytes written so far: OPT_ID counts from the first byte sent after
    /// it was set.
    written: u64,
    /// Responses whose follow-up is still to be sent.
    waiting: std::collections::VecDeque<Pending>,
    /// Written since the error queue was last found empty (every write is
    /// stamped).
    unread: bool,
    /// When the newest response that waits for its stamp was written.
    newest: Option<std::time::Instant>,
    /// The follow-up frame's buffer.
    follow: Vec<u8>,
}

/// How long a response's transmit stamp is looked for: one that has not
/// come in a second will not.
const STAMP_WAIT: Duration = Duration::from_secs(1);

impl Answers {
    fn new(tx_on: bool) -> Self {
        Self {
            tx_on,
            written: 0,
            waiting: std::collections::VecDeque::new(),
            unread: false,
            newest: None,
            follow: Vec::new(),
        }
    }

    /// Whether the error queue may hold a stamp or get one: something was
    /// written since it was last found empty, or the newest response that
    /// waits for its stamp was sent less than a second ago. For a loop
    /// with no wake-up for the error queue (busy-poll): stamps left there
    /// would count against the socket's receive buffer.
    fn stamps_due(&self) -> bool {
        self.tx_on
            && (self.unread
                || (self.waiting.back().is_some_and(|w| w.t3k.is_none())
                    && self.newest.is_some_and(|at| at.elapsed() < STAMP_WAIT)))
    }

    /// The error queue was found empty.
    fn read_all(&mut self) {
        self.unread = false;
    }

    /// The error queue holds something: read it next.
    fn error_queue_waits(&mut self) {
        self.unread = self.tx_on;
    }

    /// The kernel's transmit stamp `t3k` of the byte keyed `key`: a
    /// response's follow-up goes out if it was asked for (or needs no ask).
    async fn stamped(
        &mut self,
        writer: &mut (impl tokio::io::AsyncWrite + Unpin),
        key: u32,
        t3k: u64,
    ) -> io::Result<()> {
        if let Some(at) = self.waiting.iter().position(|w| w.key == key) {
            self.waiting[at].t3k = Some(t3k);
            self.follow_up_if_ready(writer, at).await?;
        }
        Ok(())
    }

    /// Sends the follow-up of the response waiting at `at` if it can go
    /// ([`Pending::take_ready`]).
    async fn follow_up_if_ready(
        &mut self,
        writer: &mut (impl tokio::io::AsyncWrite + Unpin),
        at: usize,
    ) -> io::Result<()> {
        if let Some(p) = Pending::take_ready(&mut self.waiting, at) {
            self.written += p.write(writer, &mut self.follow).await?;
            self.unread = self.tx_on;
        }
        Ok(())
    }

    /// Answers the whole frames at the front of `acc`, read at `received`
    /// with the responder wake-up `wake`: requests with responses (as
    /// `cfg` plans them, `counter` counting), asks with follow-ups. The
    /// bytes taken; a partial frame is left.
    ///
    /// # Errors
    /// A frame that is not a request or an ask, or a failed write.
    async fn answer(
        &mut self,
        writer: &mut (impl tokio::io::AsyncWrite + Unpin),
        acc: &mut [u8],
        (received, wake): (Instant, Option<u64>),
        cfg: &ResponderConfig,
        counter: &AtomicU64,
    ) -> io::Result<usize> {
        let mut at = 0;
        while acc.len() - at >= HEADER_LEN {
            let h = Header::decode(&acc[at..], MAX_TCP_FRAME).map_err(invalid)?;
            if h.kind == Kind::Ask && h.len as usize == wire::ASK_LEN {
                // The client read the response: its follow-up now, or as
                // soon as the kernel has stamped the response.
                at += wire::ASK_LEN;
                if let Some(i) = self
                    .waiting
                    .iter()
                    .position(|w| w.on_ask && w.seq == h.seq && w.nonce == h.nonce)
                {
                    self.waiting[i].asked = true;
                    self.follow_up_if_ready(writer, i).await?;
                }
                continue;
            }
            if h.kind != Kind::Request {
                return Err(invalid("peer sent a frame that is not a request"));
            }
            let len = h.len as usize;
            if acc.len() - at < len {
                break;
            }
            let frame = &mut acc[at..at + len];
            at += len;
            let plan = cfg.plan(counter.fetch_add(1, Ordering::Relaxed) + 1);
            if !plan.answer {
                continue;
            }
            // Busy-poll does not delay (there is no timer on its thread).
            if let Some(d) = plan.delay.filter(|_| !cfg.busy_poll) {
                tokio::time::sleep(d).await;
            }
            wire::make_followed_response(frame, elapsed_ns(received), wake, self.tx_on, true);
            let follows = wire::follow_up_promised(frame);
            let interleaved = wire::interleaved(frame);
            let on_ask = wire::waits_for_ask(frame) || interleaved;
            // The newest stamped response of this client that waits to be
            // carried rides in this one (interleaved): no frame of its own.
            // The newest, so that a stamp read late once does not leave
            // every later one a response behind; older ones come on ask.
            if let Some(i) = self
                .waiting
                .iter()
                .rposition(|w| w.interleaved && w.t3k.is_some() && w.nonce == h.nonce)
                && let Some(p) = self.waiting.get(i)
                && wire::carry(frame, p.seq, p.send())
            {
                self.waiting.remove(i);
            }
            for copy in 0..plan.copies {
                let t3 = prober_core::clock::unix_now_ns();
                writer.write_all(frame).await?;
                self.written += len as u64;
                self.unread = self.tx_on;
                if follows && copy == 0 {
                    // Bounded: a client that never asks (or whose asks
                    // timed out) leaves its entries here until pushed out.
                    if self.waiting.len() == MAX_PENDING {
                        self.waiting.pop_front();
                    }
                    #[allow(clippy::cast_possible_truncation)] // OPT_ID keys are 32-bit
                    let key = (self.written - 1) as u32;
                    self.newest = Some(std::time::Instant::now());
                    self.waiting.push_back(Pending {
                        key,
                        seq: h.seq,
                        nonce: h.nonce,
                        t3,
                        on_ask,
                        interleaved,
                        t3k: None,
                        asked: false,
                    });
                }
            }
        }
        Ok(at)
    }
}

fn invalid(e: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, e)
}

/// Receives one datagram without blocking: its length, sender and the
/// responder's wake-up for it (t2 − t2k: the wall clock right after the read
/// minus the kernel's receive stamp; `None` without a stamp).
fn recv_from_stamped(
    fd: std::os::fd::BorrowedFd<'_>,
    buf: &mut [u8],
) -> io::Result<(usize, SocketAddr, Option<u64>)> {
    use nix::sys::socket::SockaddrStorage;
    let (len, from, stamp) = prober_sys::rx::recv_stamped::<SockaddrStorage>(fd, buf)?;
    let t2 = prober_core::clock::unix_now_ns();
    let peer = from
        .as_ref()
        .and_then(prober_sys::rx::socket_addr)
        .ok_or_else(|| io::Error::other("a datagram without a sender address"))?;
    let wake = prober_sys::rx::wake_ns(stamp.and_then(prober_sys::rx::unix_ns), t2);
    Ok((len, peer, wake))
}

/// Serves UDP requests on `socket` until `stop` is cancelled.
///
/// # Errors
/// Only if receiving fails in a way that cannot be retried.
pub async fn serve_udp(
    socket: UdpSocket,
    cfg: ResponderConfig,
    stop: CancellationToken,
) -> io::Result<()> {
    if cfg.busy_poll {
        let std_sock: std::net::UdpSocket = socket.into_std()?;
        let spin = spin_udp(std_sock, cfg)?;
        stop.cancelled().await;
        drop(spin);
        return Ok(());
    }
    // Kernel receive stamps: a client that asks gets the responder's
    // wake-up (t2 − t2k) in its reply (wire format, version 2 flags).
    let stamps = prober_sys::rx::enable_timestamps(std::os::fd::AsFd::as_fd(&socket)).is_ok();
    // Kernel transmit stamps, numbered by send (OPT_ID), for follow-up
    // frames: the responder send part (t3k − t3). Not with delayed replies
    // (an impairment for tests), which send from other tasks and would put
    // the numbering out of step.
    let tx_on = cfg.delay_every.is_none()
        && prober_sys::rx::enable_tx_timestamps_id(std::os::fd::AsFd::as_fd(&socket)).is_ok();
    let socket = Arc::new(socket);
    let mut follow = FollowUps::default();
    let mut buf = vec![0u8; MAX_UDP_FRAME + 1];
    let mut seen: HashSet<SocketAddr> = HashSet::new();
    let mut delayed = JoinSet::new();
    let mut n = 0u64;
    let mut limiter = RateLimiter::default();
    let mut next = NextRequest::new(&cfg.receive);
    loop {
        let got = tokio::select! {
            () = stop.cancelled() => break,
            Some(_) = delayed.join_next(), if !delayed.is_empty() => continue,
            res = socket.async_io(tokio::io::Interest::READABLE | tokio::io::Interest::ERROR, || {
                let fd = std::os::fd::AsFd::as_fd(&*socket);
                if tx_on {
                    match prober_sys::rx::recv_tx_stamp_id(fd) {
                        Ok(Some((id, t3k))) => return Ok(UdpEvent::Stamp(id, t3k)),
                        Ok(None) => return Ok(UdpEvent::Nothing),
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                        Err(e) => return Err(e),
                    }
                }
                recv_from_stamped(fd, &mut buf).map(|(len, peer, wake)| UdpEvent::Datagram(len, peer, wake))
            }) => match res {
                Ok(r) => r,
                // An ICMP error for an earlier reply; nothing to do.
                Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => continue,
                Err(error) => {
                    tracing::warn!(%error, "udp receive failed");
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                }
            },
        };
        let (len, peer, wake) = match got {
            UdpEvent::Datagram(len, peer, wake) => (len, peer, wake),
            UdpEvent::Stamp(id, t3k) => {
                if let Some(frame) = follow.frame_for(id, t3k)
                    && socket.send_to(&frame.0, frame.1).await.is_ok()
                {
                    follow.count_send();
                }
                continue;
            }
            UdpEvent::Nothing => continue,
        };
        let received = Instant::now();
        next.arrived();
        let wake = wake.filter(|_| stamps);
        let frame = &mut buf[..len];
        let h = match Header::decode(frame, MAX_UDP_FRAME) {
            Ok(h) if h.kind == Kind::Request && h.len as usize == len => h,
            Ok(h) if h.kind == Kind::Ask && h.len as usize == len && len == wire::ASK_LEN => h,
            Ok(_) => {
                tracing::debug!(%peer, "dropping a udp frame that is not a request");
                continue;
            }
            Err(FrameError::BadMagic | FrameError::Short(_)) if cfg.log_clients => {
                tracing::debug!(%peer, "dropping a udp datagram that is not a prober frame");
                continue;
            }
            Err(_) => continue,
        };
        if cfg.log_clients && seen.len() < MAX_LOGGED_PEERS && seen.insert(peer) {
            tracing::debug!(%peer, "udp client seen");
        }
        let rate = cfg.limits.rate.for_source(peer.ip(), guard::DEFAULT_RATE);
        if !limiter.allow(peer.ip(), rate, received.into_std()) {
            cfg.stats.rate_limited.fetch_add(1, Ordering::Relaxed);
            continue;
        }
        // A follow-up is 48 bytes more than the request (8 more than an
        // ask): only where that cannot amplify (loopback), unless allowed.
        let may_follow = tx_on && (cfg.udp_follow_ups || guard::is_loopback(peer.ip()));
        if h.kind == Kind::Ask {
            // The client wants an interleaved transmit stamp that no later
            // request of its came to carry: now, or once stamped.
            if may_follow
                && let Some(frame) = follow.asked(peer, h.seq, h.nonce)
                && socket.send_to(&frame, peer).await.is_ok()
            {
                follow.count_send();
            }
            continue;
        }
        n += 1;
        let plan = cfg.plan(n);
        if !plan.answer {
            continue;
        }
        if let Some(d) = plan.delay {
            let mut copy = frame.to_vec();
            let socket = Arc::clone(&socket);
            delayed.spawn(async move {
                tokio::time::sleep(d).await;
                wire::make_stamped_response(&mut copy, elapsed_ns(received), wake);
                let _ = socket.send_to(&copy, peer).await;
            });
            continue;
        }
        let (follows, interleaved) =
            follow.reply(frame, &h, peer, elapsed_ns(received), wake, may_follow);
        for copy in 0..plan.copies {
            let t3 = prober_core::clock::unix_now_ns();
            match socket.send_to(frame, peer).await {
                Ok(_) => follow.sent(follows && copy == 0, peer, &h, t3, interleaved),
                Err(error) => tracing::debug!(%peer, %error, "udp send failed"),
            }
        }
        let _ = next.answered(std::os::fd::AsFd::as_fd(&*socket));
    }
    delayed.shutdown().await;
    Ok(())
}

/// What the UDP responder's socket had: a datagram, a transmit stamp of an
/// earlier send, or an error-queue entry that is no stamp.
enum UdpEvent {
    Datagram(usize, SocketAddr, Option<u64>),
    Stamp(u32, u64),
    Nothing,
}

/// Replies waiting for their transmit stamp, to send it in a follow-up
/// frame, or (interleaved) in the client's next response or when it asks
/// (docs/wire-format.md).
#[derive(Default)]
struct FollowUps {
    /// Datagrams sent so far: the OPT_ID of the next send.
    sent: u32,
    /// Replies not yet stamped, oldest first.
    waiting: std::collections::VecDeque<Unstamped>,
    /// Interleaved replies stamped and neither carried nor asked for yet,
    /// oldest first.
    stamped: std::collections::VecDeque<Stamped>,
}

/// A reply sent and not yet stamped.
struct Unstamped {
    /// Its send number (OPT_ID).
    id: u32,
    peer: SocketAddr,
    seq: u64,
    nonce: u64,
    /// Wall clock just before the send.
    t3: u64,
    /// Its stamp may wait to be carried or asked for.
    interleaved: bool,
    /// ... and has been asked for.
    asked: bool,
}

/// An interleaved reply's transmit stamp, waiting to be carried.
struct Stamped {
    peer: SocketAddr,
    seq: u64,
    nonce: u64,
    /// t3k − t3.
    send: Option<u64>,
}

impl FollowUps {
    /// Replies kept waiting at most, in each list; older ones lose their
    /// follow-up.
    const KEPT: usize = 4096;

    fn sent_reply(&mut self, peer: SocketAddr, seq: u64, nonce: u64, t3: u64, interleaved: bool) {
        if self.waiting.len() == Self::KEPT {
            self.waiting.pop_front();
        }
        self.waiting.push_back(Unstamped {
            id: self.sent,
            peer,
            seq,
            nonce,
            t3,
            interleaved,
            asked: false,
        });
    }

    /// The follow-up frame for the send numbered `id`, stamped `t3k`; an
    /// interleaved reply that was not asked for is kept to be carried.
    fn frame_for(&mut self, id: u32, t3k: u64) -> Option<(Vec<u8>, SocketAddr)> {
        let at = self.waiting.iter().position(|w| w.id == id)?;
        let w = self.waiting.remove(at)?;
        let send = t3k.checked_sub(w.t3);
        if w.interleaved && !w.asked {
            if self.stamped.len() == Self::KEPT {
                self.stamped.pop_front();
            }
            self.stamped.push_back(Stamped {
                peer: w.peer,
                seq: w.seq,
                nonce: w.nonce,
                send,
            });
            return None;
        }
        let mut buf = Vec::new();
        wire::encode_follow_up(&mut buf, w.seq, w.nonce, send);
        Some((buf, w.peer))
    }

    /// An ask from `peer` for its reply (`seq`, `nonce`): the follow-up
    /// frame if the reply is stamped; otherwise it goes once stamped. An
    /// ask for nothing waiting (carried already) gets nothing.
    fn asked(&mut self, peer: SocketAddr, seq: u64, nonce: u64) -> Option<Vec<u8>> {
        if let Some(at) = self
            .stamped
            .iter()
            .position(|s| s.peer == peer && s.seq == seq && s.nonce == nonce)
        {
            let s = self.stamped.remove(at)?;
            let mut buf = Vec::new();
            wire::encode_follow_up(&mut buf, s.seq, s.nonce, s.send);
            return Some(buf);
        }
        if let Some(w) = self
            .waiting
            .iter_mut()
            .find(|w| w.interleaved && w.peer == peer && w.seq == seq && w.nonce == nonce)
        {
            w.asked = true;
        }
        None
    }

    /// Makes the request in `frame` (header `h`, from `peer`) its reply,
    /// with the responder's stamps the client asked for, a follow-up
    /// promised if `may_follow`, and the newest stamped reply of this
    /// client that waits to be carried riding in it (interleaved): no frame
    /// of its own. Whether a follow-up was promised, and whether the reply
    /// is interleaved.
    fn reply(
        &mut self,
        frame: &mut [u8],
        h: &Header,
        peer: SocketAddr,
        dwell_ns: u64,
        wake: Option<u64>,
        may_follow: bool,
    ) -> (bool, bool) {
        wire::make_followed_response(frame, dwell_ns, wake, may_follow, false);
        if wire::wants_interleaved(frame)
            && let Some((seq, send)) = self.carry_for(peer, h.nonce)
        {
            wire::carry(frame, seq, send);
        }
        (wire::follow_up_promised(frame), wire::interleaved(frame))
    }

    /// Drops the replies sent before `before` (wall clock, Unix ns) whose
    /// stamp has not come: they get no follow-up.
    fn expire(&mut self, before: u64) {
        while self.waiting.front().is_some_and(|w| w.t3 < before) {
            self.waiting.pop_front();
        }
    }

    /// Counts a datagram sent: OPT_ID numbers every one, follow-ups too.
    fn count_send(&mut self) {
        self.sent = self.sent.wrapping_add(1);
    }

    /// Counts a reply sent; `follows`: it is the one (header `h`, sent at
    /// `t3`) whose stamp goes to `peer`.
    fn sent(&mut self, follows: bool, peer: SocketAddr, h: &Header, t3: u64, interleaved: bool) {
        if follows {
            self.sent_reply(peer, h.seq, h.nonce, t3, interleaved);
        }
        self.count_send();
    }

    /// The newest stamped reply of `peer`'s run `nonce` that waits to be
    /// carried, taken out: its seq and send part. The newest, so that a
    /// stamp read late once does not leave every later one a response
    /// behind; older ones come on ask.
    fn carry_for(&mut self, peer: SocketAddr, nonce: u64) -> Option<(u64, Option<u64>)> {
        let at = self
            .stamped
            .iter()
            .rposition(|s| s.peer == peer && s.nonce == nonce)?;
        self.stamped.remove(at).map(|s| (s.seq, s.send))
    }
}

/// The busy-poll twin of the `serve_udp` loop, on a thread of its own,
/// with the same stamps and follow-ups (delayed replies, an impairment for
/// tests, are answered at once here).
fn spin_udp(socket: std::net::UdpSocket, cfg: ResponderConfig) -> io::Result<SpinThread> {
    use std::os::fd::AsFd as _;
    socket.set_nonblocking(true)?;
    let stamps = prober_sys::rx::enable_timestamps(socket.as_fd()).is_ok();
    let tx_on = prober_sys::rx::enable_tx_timestamps_id(socket.as_fd()).is_ok();
    let mut follow = FollowUps::default();
    let mut buf = vec![0u8; MAX_UDP_FRAME + 1];
    let mut n = 0u64;
    let mut limiter = RateLimiter::default();
    // Whether the error queue may hold or get a stamp: something was sent
    // since it was last found empty, or a reply still waits for its stamp
    // (a NIC may stamp after the send returns; there is no wake-up here as
    // the async loop has). Every send is stamped, and stamps left unread
    // would count against the socket's receive buffer until requests were
    // dropped. Looked at only then, a spin that finds nothing costs one
    // syscall.
    let mut unread = false;
    SpinThread::spawn("prober-serve-udp-poll", move || {
        if unread {
            match prober_sys::rx::recv_tx_stamp_id(socket.as_fd()) {
                Ok(Some((id, t3k))) => {
                    if let Some((frame, to)) = follow.frame_for(id, t3k)
                        && socket.send_to(&frame, to).is_ok()
                    {
                        follow.count_send();
                    }
                    return Step::Busy;
                }
                Ok(None) => return Step::Busy,
                Err(_) => {
                    // A stamp that has not come in a second will not.
                    follow.expire(prober_core::clock::unix_now_ns().saturating_sub(1_000_000_000));
                    unread = !follow.waiting.is_empty();
                }
            }
        }
        let (len, peer, wake) = match recv_from_stamped(socket.as_fd(), &mut buf) {
            Ok(r) => r,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Step::Idle,
            Err(_) => return Step::Busy,
        };
        let received = Instant::now();
        let wake = wake.filter(|_| stamps);
        let frame = &mut buf[..len];
        let h = match Header::decode(frame, MAX_UDP_FRAME) {
            Ok(h) if h.kind == Kind::Request && h.len as usize == len => h,
            Ok(h) if h.kind == Kind::Ask && h.len as usize == len && len == wire::ASK_LEN => h,
            _ => return Step::Busy,
        };
        let rate = cfg.limits.rate.for_source(peer.ip(), guard::DEFAULT_RATE);
        if !limiter.allow(peer.ip(), rate, received.into_std()) {
            cfg.stats.rate_limited.fetch_add(1, Ordering::Relaxed);
            return Step::Busy;
        }
        let may_follow = tx_on && (cfg.udp_follow_ups || guard::is_loopback(peer.ip()));
        if h.kind == Kind::Ask {
            if may_follow
                && let Some(frame) = follow.asked(peer, h.seq, h.nonce)
                && socket.send_to(&frame, peer).is_ok()
            {
                follow.count_send();
                unread = tx_on;
            }
            return Step::Busy;
        }
        n += 1;
        let plan = cfg.plan(n);
        if plan.answer {
            let (follows, interleaved) =
                follow.reply(frame, &h, peer, elapsed_ns(received), wake, may_follow);
            for copy in 0..plan.copies {
                let t3 = prober_core::clock::unix_now_ns();
                if socket.send_to(frame, peer).is_ok() {
                    follow.sent(follows && copy == 0, peer, &h, t3, interleaved);
                    unread = tx_on;
                }
            }
        }
        Step::Busy
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `serve --receive adaptive`: after an answer the responder polls for
    /// the next request; it stops as soon as one waits, spins at most its
    /// budget when none comes, and the default never spins.
    #[test]
    fn the_responder_spins_for_the_next_request_within_its_budget() {
        use prober_core::spin::{Receive, SpinPool};
        use std::os::fd::AsFd as _;
        let server = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        server.set_nonblocking(true).unwrap();
        let client = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        assert!(
            NextRequest::new(&Receive::Event)
                .answered(server.as_fd())
                .is_none()
        );
        let budget = Duration::from_millis(2);
        let mut next = NextRequest::new(&Receive::Adaptive(SpinPool::new(budget, 1000)));
        // Nothing comes: the whole budget, and not without end (the upper
        // bound leaves room for a loaded machine's preemption).
        let (spun, caught) = next.answered(server.as_fd()).expect("a spin");
        assert!(!caught);
        assert!(spun >= budget && spun < Duration::from_secs(1), "{spun:?}");
        // A request waits: caught at once.
        client.send_to(b"x", server.local_addr().unwrap()).unwrap();
        std::thread::sleep(Duration::from_millis(1));
        let (spun, caught) = next.answered(server.as_fd()).expect("a spin");
        assert!(caught);
        assert!(spun < budget * 10, "{spun:?}");
        // Requests come further apart than the budget (a client at 10 ms):
        // no more spinning.
        std::thread::sleep(budget * 2);
        next.arrived();
        assert_eq!(next.answered(server.as_fd()), None);
    }

    #[test]
    fn plan_counts_from_one() {
        let cfg = ResponderConfig {
            drop_every: Some(3),
            duplicate_every: Some(4),
            ..Default::default()
        };
        let dropped: Vec<u64> = (1..=12).filter(|&n| !cfg.plan(n).answer).collect();
        assert_eq!(dropped, [3, 6, 9, 12]);
        let doubled: Vec<u64> = (1..=12).filter(|&n| cfg.plan(n).copies == 2).collect();
        assert_eq!(doubled, [4, 8, 12]);
        assert!(ResponderConfig::default().plan(1).answer);
    }
}

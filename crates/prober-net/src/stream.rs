//! A TCP stream for HTTP clients (tonic's for gRPC, hyper's for HTTP) that
//! reads with `recvmsg` and asks for transmit stamps numbered by byte
//! (`SO_TIMESTAMPING` with `OPT_ID`), so that a request gets the client's
//! kernel stamps: the transmit stamp of its last byte (t1k) and the receive
//! stamp of the response's first read (t4k). TLS runs on top of it, so the
//! stamps are those of the TLS records on the wire.
//!
//! HTTP/2 multiplexes calls on one connection, so bytes cannot be told
//! apart by call; a probe's stamps are taken from a window that only that
//! probe had open: from just before its call to its response. A window that
//! another call overlapped gets no stamps (its parts stay unknown).
//!
//! With adaptive receive ([`ChannelStamps::with_spin`]), a read that would
//! block while a probe's window is open does not park the connection's
//! task: it wakes itself and tries the socket again on its next poll, until
//! data comes or the probe's spin budget runs out. The runtime runs its
//! other ready tasks in between, so the probe that was answered closes its
//! window at once, and the spin stops there: a spin inside the read itself
//! would run on after the response, as HTTP/2 reads again as soon as it
//! has one. The wait this saves is the one Go's gRPC avoids by spinning on
//! its network poller: a grpc-go server sends a response's trailers in a
//! segment of their own, and a parked reader sleeps twice per call.

use std::collections::VecDeque;
use std::future::Future as _;
use std::io;
use std::os::fd::AsFd;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll, ready};
use std::time::{Duration, Instant};

use prober_core::spin::{SpinBudget, SpinCount};

use tokio::io::{AsyncRead, AsyncWrite, Interest, ReadBuf};
use tokio::net::TcpStream;

/// The stamps of one connection at a time, shared by the probes of one
/// channel and its stream.
#[derive(Debug, Default)]
pub struct ChannelStamps {
    state: Mutex<State>,
    /// A duplicate of the connection's socket, to read `TCP_INFO` from.
    info: Mutex<Option<socket2::Socket>>,
    /// Adaptive receive's budget; `None`: reads park as usual.
    spin: Option<SpinBudget>,
}

/// Bytes written on a connection and the kernel's transmit stamps of
/// them, keyed by byte (`OPT_ID`): what the client's stream and the
/// responder's each keep.
#[derive(Debug, Default)]
struct ByteStamps {
    /// Bytes written since the keys began.
    written: u64,
    /// Stamps read from the error queue, by key, newest last.
    stamps: VecDeque<(u32, u64)>,
}

impl ByteStamps {
    /// Counts a write of `n` bytes.
    fn wrote(&mut self, n: usize) {
        self.written += n as u64;
    }

    /// The key of the last byte written, if any.
    fn last_key(&self) -> Option<u32> {
        #[allow(clippy::cast_possible_truncation)] // OPT_ID keys are 32-bit
        self.written.checked_sub(1).map(|k| k as u32)
    }

    /// The stamp of the byte keyed `key`, if it was read.
    fn stamp(&self, key: u32) -> Option<u64> {
        self.stamps
            .iter()
            .rev()
            .find(|(x, _)| *x == key)
            .map(|(_, t)| *t)
    }

    /// Whether the last byte written has its stamp read (true when
    /// nothing was written).
    fn has_last(&self) -> bool {
        self.last_key().is_none_or(|k| self.stamp(k).is_some())
    }

    /// Files a stamp read from the error queue, keeping at most `kept`;
    /// whether it is the last byte's (the one a reader waits for).
    fn file(&mut self, key: u32, stamp: u64, kept: usize) -> bool {
        if self.stamps.len() == kept {
            self.stamps.pop_front();
        }
        self.stamps.push_back((key, stamp));
        self.last_key() == Some(key)
    }
}

#[derive(Debug, Default)]
struct State {
    /// The current connection's bytes and their transmit stamps.
    bytes: ByteStamps,
    /// When the latest write returned (wall clock, Unix ns).
    last_write_ns: u64,
    /// Windows open now.
    open: u32,
    /// The current window: no other call overlapped it so far.
    window: Option<Window>,
    /// The spin going on: since when, and how long the pool granted.
    spinning: Option<(Instant, Duration)>,
    /// What the spins cost so far.
    spun: SpinCount,
    /// Whether the current window's probe has spun, and whether a spin of
    /// it caught data: a probe counts once, however many spins it took.
    window_spun: Option<bool>,
}

#[derive(Debug, Default, Clone, Copy)]
struct Window {
    clean: bool,
    first_rx: Option<FirstRead>,
}

/// The first read with data in a window.
#[derive(Debug, Clone, Copy)]
struct FirstRead {
    /// Bytes written by then (the request's last byte is the one before).
    written: u64,
    /// Its kernel receive stamp.
    t4k: Option<u64>,
    /// When it returned, and when the last write before it returned (wall
    /// clock, Unix ns; 0: none yet): the first response byte and the
    /// request written, for an HTTP probe's phases.
    at_ns: u64,
    last_write_ns: u64,
}

/// What a probe's window saw, from [`Mark::end`].
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct WindowStamps {
    /// The kernel transmit stamp of the request's last byte.
    pub t1k: Option<u64>,
    /// The kernel receive stamp of the response's first read.
    pub t4k: Option<u64>,
    /// When the first read with data returned (wall clock, Unix ns), even
    /// if another call overlapped the window.
    pub first_read_ns: Option<u64>,
    /// When the last write before that read returned.
    pub last_write_ns: Option<u64>,
    /// No other call overlapped the window: what the responder reports of
    /// its side is this probe's.
    pub alone: bool,
}

/// A probe's window, from [`ChannelStamps::begin`]; dropped without
/// [`Mark::end`] (a failed or cancelled call), it just closes.
#[derive(Debug)]
pub struct Mark {
    stamps: Arc<ChannelStamps>,
    open: bool,
}

impl Mark {
    /// Closes the window after the response: its user times, and t1k and
    /// t4k where the window was the probe's own and the kernel gave them.
    pub fn end(mut self) -> WindowStamps {
        self.open = false;
        self.stamps.end()
    }
}

impl Drop for Mark {
    fn drop(&mut self) {
        if self.open {
            let mut s = self.stamps.lock();
            s.open = s.open.saturating_sub(1);
            s.window = None;
            self.stamps.stop_spin(&mut s, false);
        }
    }
}

/// A call that is not a probe, from [`ChannelStamps::aside`]; dropping it
/// ends it.
#[derive(Debug)]
pub struct Aside(Arc<ChannelStamps>);

impl Drop for Aside {
    fn drop(&mut self) {
        let mut s = self.0.lock();
        s.open = s.open.saturating_sub(1);
    }
}

const KEPT: usize = 256;

impl ChannelStamps {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Opens a probe's window, right before its call. Overlapping windows
    /// spoil each other: neither gets stamps.
    pub fn begin(self: &Arc<Self>) -> Mark {
        let mut s = self.lock();
        s.open += 1;
        s.window_spun = None;
        s.window = Some(Window {
            clean: s.open == 1,
            ..Window::default()
        });
        drop(s);
        Mark {
            stamps: Arc::clone(self),
            open: true,
        }
    }

    /// Opens a call that is not a probe (an ask for the responder's send
    /// time): a probe's window it overlaps gets no stamps, as with another
    /// probe's, since its bytes cannot be told apart from the probe's.
    pub fn aside(self: &Arc<Self>) -> Aside {
        let mut s = self.lock();
        s.open += 1;
        if let Some(w) = &mut s.window {
            w.clean = false;
        }
        drop(s);
        Aside(Arc::clone(self))
    }

    fn end(&self) -> WindowStamps {
        let mut s = self.lock();
        s.open = s.open.saturating_sub(1);
        self.stop_spin(&mut s, false);
        let Some((clean, first)) = s.window.take().and_then(|w| Some((w.clean, w.first_rx?)))
        else {
            return WindowStamps::default();
        };
        let user = WindowStamps {
            first_read_ns: Some(first.at_ns),
            last_write_ns: (first.last_write_ns > 0).then_some(first.last_write_ns),
            ..WindowStamps::default()
        };
        if !clean {
            return user;
        }
        let user = WindowStamps {
            alone: true,
            ..user
        };
        let key = first.written.checked_sub(1).map(|k| k as u32);
        let t1k = key.and_then(|k| s.bytes.stamp(k));
        WindowStamps {
            t1k,
            t4k: first.t4k,
            ..user
        }
    }

    /// Stamps whose reads spin with `budget` (adaptive receive) while a
    /// probe's window is open; `None`: as [`Self::default`].
    pub fn with_spin(budget: Option<SpinBudget>) -> Self {
        Self {
            spin: budget,
            ..Self::default()
        }
    }

    /// No probe's window and no ask is open on the connection: a probe
    /// that begins now has it to itself.
    pub fn idle(&self) -> bool {
        self.lock().open == 0
    }

    /// What adaptive receive spent, if it is on.
    pub fn spin_count(&self) -> Option<SpinCount> {
        self.spin.as_ref().map(|_| self.lock().spun)
    }

    /// An answered probe's RTT, which the spin budget adapts to.
    pub fn record_rtt(&self, rtt: Duration) {
        if let Some(b) = &self.spin {
            b.record(rtt);
        }
    }

    /// A read would block: whether to try again at once (spin) rather
    /// than park. Starts a spin while a window is open and the pool grants
    /// one; ends it when the window closed or the budget ran out.
    fn spin_on(&self) -> bool {
        let Some(budget) = &self.spin else {
            return false;
        };
        let mut s = self.lock();
        if s.open == 0 {
            self.stop_spin(&mut s, false);
            return false;
        }
        let now = Instant::now();
        match s.spinning {
            Some((from, granted)) if now.duration_since(from) < granted => true,
            Some(_) => {
                self.stop_spin(&mut s, false);
                false
            }
            None => {
                let granted = budget.start(now);
                if granted.is_zero() {
                    return false;
                }
                s.spinning = Some((now, granted));
                true
            }
        }
    }

    fn is_spinning(&self) -> bool {
        self.spin.is_some() && self.lock().spinning.is_some()
    }

    /// Ends the spin going on, if any: `caught` if data came within it.
    fn stop_spin(&self, s: &mut State, caught: bool) {
        let (Some(budget), Some((from, granted))) = (&self.spin, s.spinning.take()) else {
            return;
        };
        let used = from.elapsed().min(granted);
        budget.spun(granted, used);
        match s.window_spun {
            None => {
                s.spun.probes += 1;
                s.spun.caught += u64::from(caught);
            }
            Some(false) if caught => s.spun.caught += 1,
            Some(_) => {}
        }
        s.window_spun = Some(s.window_spun == Some(true) || caught);
        s.spun.ns += u64::try_from(used.as_nanos()).unwrap_or(u64::MAX);
    }

    /// The kernel's RTT estimate of the current connection.
    pub fn tcp_rtt(&self) -> Option<prober_core::TcpRtt> {
        let info = self.info.lock().unwrap_or_else(PoisonError::into_inner);
        prober_sys::tcpinfo::tcp_rtt(info.as_ref()?.as_fd()).ok()
    }

    /// A new connection: its bytes are counted from 0, as the kernel keys
    /// its transmit stamps.
    fn new_connection(&self, stream: &TcpStream) {
        *self.info.lock().unwrap_or_else(PoisonError::into_inner) =
            socket2::SockRef::from(stream).try_clone().ok();
        let mut s = self.lock();
        s.bytes = ByteStamps::default();
        if let Some(w) = &mut s.window {
            w.clean = false;
        }
    }

    fn on_write(&self, n: usize) {
        let now = prober_core::clock::unix_now_ns();
        let mut s = self.lock();
        s.bytes.wrote(n);
        s.last_write_ns = now;
    }

    fn on_read(&self, t4k: Option<u64>) {
        let mut s = self.lock();
        self.stop_spin(&mut s, true);
        let (written, last_write_ns) = (s.bytes.written, s.last_write_ns);
        if let Some(w) = &mut s.window
            && w.first_rx.is_none()
        {
            w.first_rx = Some(FirstRead {
                written,
                t4k,
                at_ns: prober_core::clock::unix_now_ns(),
                last_write_ns,
            });
        }
    }

    /// Whether the transmit stamp of the last byte written is filed (true
    /// when nothing was written).
    fn has_last_tx(&self) -> bool {
        self.lock().bytes.has_last()
    }

    /// Files the transmit stamps waiting on the error queue, up to the
    /// last byte's: the queue is in order, so nothing is left behind it,
    /// and a read past it would only find the queue empty. Every write
    /// drains (each is stamped), so stopping there saves a syscall per
    /// write: 4 extra `recvmsg` per gRPC call against grpc-go became 2.
    fn drain(&self, fd: std::os::fd::BorrowedFd<'_>) {
        prober_sys::rx::drain_tx_stamps_id_until(fd, 64, |key, stamp| {
            self.lock().bytes.file(key, stamp, KEPT)
        });
    }
}

/// Writes `held` with `send` until it is empty, dropping what each write
/// took: what [`StampedStream`] coalesces and [`ServerStream`] holds.
fn poll_write_held(
    held: &mut Vec<u8>,
    mut send: impl FnMut(&[u8]) -> Poll<io::Result<usize>>,
) -> Poll<io::Result<()>> {
    while !held.is_empty() {
        let n = ready!(send(held))?;
        if n == 0 {
            return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
        }
        held.drain(..n);
    }
    Poll::Ready(Ok(()))
}

/// A TCP stream that reads with kernel receive stamps and files its
/// transmit stamps in a [`ChannelStamps`].
#[derive(Debug)]
pub struct StampedStream {
    inner: TcpStream,
    stamps: Arc<ChannelStamps>,
    tx_on: bool,
    /// Bytes held for one write ([`Self::coalescing`]); empty otherwise.
    out: Vec<u8>,
    coalesce: bool,
    /// A flush already gave way once for these bytes.
    deferred: bool,
}

/// The most [`StampedStream::coalescing`] holds before it writes.
const COALESCE_MAX: usize = 16 * 1024;

impl StampedStream {
    /// Wraps a connected stream: no Nagle, kernel receive stamps on, and
    /// transmit stamps numbered by byte when `want_tx` and the kernel
    /// allows; `stamps` starts counting this connection's bytes.
    ///
    /// # Errors
    /// Setting a socket option failed.
    pub fn new(inner: TcpStream, stamps: Arc<ChannelStamps>, want_tx: bool) -> io::Result<Self> {
        inner.set_nodelay(true)?;
        prober_sys::rx::enable_timestamps(inner.as_fd())?;
        let tx_on = want_tx && prober_sys::rx::enable_tx_timestamps_id(inner.as_fd()).is_ok();
        stamps.new_connection(&inner);
        Ok(Self {
            inner,
            stamps,
            tx_on,
            out: Vec::new(),
            coalesce: false,
            deferred: false,
        })
    }

    /// While a probe's window is open, holds what is written until a flush,
    /// and lets that flush give way once to the runtime's other tasks, so
    /// that what they queue goes out in the same write.
    ///
    /// For gRPC: hyper's HTTP/2 client flushes a call's HEADERS frame,
    /// and its body (DATA with END_STREAM) comes from another task once
    /// the connection grants the stream capacity, so every unary call took
    /// two `sendto`s. On loopback each send also runs the receiver's TCP
    /// path, and the second one sat inside the client send part.
    #[must_use]
    pub fn coalescing(mut self) -> Self {
        self.coalesce = true;
        self
    }

    /// Writes `bytes` to the socket, counting them for the transmit
    /// stamps' keys and filing the stamps already there.
    fn poll_send(
        inner: &mut TcpStream,
        stamps: &ChannelStamps,
        tx_on: bool,
        cx: &mut Context<'_>,
        bytes: &[u8],
    ) -> Poll<io::Result<usize>> {
        let n = ready!(Pin::new(&mut *inner).poll_write(cx, bytes))?;
        stamps.on_write(n);
        if tx_on {
            stamps.drain(inner.as_fd());
        }
        Poll::Ready(Ok(n))
    }

    /// Writes what is held.
    fn poll_write_out(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let (inner, stamps, tx_on) = (&mut self.inner, &*self.stamps, self.tx_on);
        ready!(poll_write_held(&mut self.out, |b| Self::poll_send(
            inner, stamps, tx_on, cx, b
        )))?;
        self.deferred = false;
        Poll::Ready(Ok(()))
    }

    fn holding(&self) -> bool {
        self.coalesce && self.stamps.lock().open > 0
    }
}

impl AsyncRead for StampedStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let (stamps, tx_on, fd) = (&this.stamps, this.tx_on, this.inner.as_fd());
        // Transmit stamps are filed when a read finds nothing (the wait
        // after a request), not before each read: a look at the error
        // queue ahead of the response's read is a syscall inside the RTT
        // (as it was for udp:// and tcp://, BENCHMARKS.md). A response read
        // before its request's stamp was filed files it then.
        let on_block = |fd: std::os::fd::BorrowedFd<'_>| {
            // The write path files most stamps at once (`poll_send`): the
            // queue is looked at only for one still missing.
            if tx_on && !stamps.has_last_tx() {
                stamps.drain(fd);
            }
        };
        let on_data = |t: Option<u64>| {
            stamps.on_read(t);
            if tx_on && !stamps.has_last_tx() {
                stamps.drain(fd);
            }
        };
        // Straight at the socket: the runtime has not polled its events
        // since the last try, so its readiness is stale. Asked with `poll`
        // first, which takes no lock: a `recvmsg` on every spin held the
        // socket's lock against the softirq delivering the response (5.3 %
        // of a profile's samples in the lock's slow path, BENCHMARKS.md).
        if stamps.is_spinning() {
            if prober_sys::busy::data_waiting(fd) {
                let res = prober_sys::rx::recv_stamped::<()>(fd, buf.initialize_unfilled());
                if matches!(&res, Err(e) if e.kind() == io::ErrorKind::WouldBlock) {
                    on_block(fd);
                }
                if let Some(done) = filled(buf, res, on_data) {
                    return Poll::Ready(done);
                }
            } else {
                // Nothing yet: the request's stamp, if it is still missing.
                on_block(fd);
            }
        }
        let res = poll_read_stamped(&this.inner, cx, buf, on_block, on_data);
        if res.is_pending() && stamps.spin_on() {
            cx.waker().wake_by_ref();
        }
        res
    }
}

/// Reads from `inner` into `buf` with `recvmsg`, handing the kernel's
/// receive stamp of a read with data to `on_data`; `on_block` runs when an
/// attempt finds nothing (the client drains its transmit stamps there).
fn poll_read_stamped(
    inner: &TcpStream,
    cx: &mut Context<'_>,
    buf: &mut ReadBuf<'_>,
    on_block: impl Fn(std::os::fd::BorrowedFd<'_>),
    on_data: impl Fn(Option<u64>),
) -> Poll<io::Result<()>> {
    loop {
        ready!(inner.poll_read_ready(cx))?;
        let unfilled = buf.initialize_unfilled();
        let res = inner.try_io(Interest::READABLE, || {
            let res = prober_sys::rx::recv_stamped::<()>(inner.as_fd(), unfilled);
            if matches!(&res, Err(e) if e.kind() == io::ErrorKind::WouldBlock) {
                on_block(inner.as_fd());
            }
            res
        });
        if let Some(done) = filled(buf, res, &on_data) {
            return Poll::Ready(done);
        }
    }
}

/// A `recv_stamped` into `buf`'s unfilled part, taken in: the bytes
/// advanced over and the kernel stamp of a read with data handed to
/// `on_data`; `None` if it would block.
fn filled(
    buf: &mut ReadBuf<'_>,
    res: io::Result<(usize, Option<()>, Option<std::time::SystemTime>)>,
    on_data: impl FnOnce(Option<u64>),
) -> Option<io::Result<()>> {
    match res {
        Ok((n, _, stamp)) => {
            buf.advance(n);
            if n > 0 {
                on_data(stamp.and_then(prober_sys::rx::unix_ns));
            }
            Some(Ok(()))
        }
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => None,
        Err(e) => Some(Err(e)),
    }
}

impl AsyncWrite for StampedStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if this.out.len() + buf.len() > COALESCE_MAX {
            ready!(this.poll_write_out(cx))?;
        }
        if this.holding() {
            this.out.extend_from_slice(buf);
            return Poll::Ready(Ok(buf.len()));
        }
        ready!(this.poll_write_out(cx))?;
        Self::poll_send(&mut this.inner, &this.stamps, this.tx_on, cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if !this.out.is_empty() && !this.deferred && this.holding() {
            // Once: the runtime runs the tasks that are ready (the call's
            // body), then this flush again, with their bytes held too.
            this.deferred = true;
            cx.waker().wake_by_ref();
            return Poll::Pending;
        }
        ready!(this.poll_write_out(cx))?;
        Pin::new(&mut this.inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        ready!(this.poll_write_out(cx))?;
        Pin::new(&mut this.inner).poll_shutdown(cx)
    }
}

/// The responder's side of one accepted connection: the kernel receive
/// stamp of the latest read with data, which the Echo handler reads when a
/// request reaches it (t2k of that request, when one call at a time uses
/// the connection, as a probe's does); and, once a request asks for it,
/// the send part (t3k − t3) of the latest reply.
///
/// A reply's t3 is when its handler returned it; its t3k is the kernel's
/// transmit stamp of the first write that returned after that: HTTP/2
/// writes the reply's frames when the handler returns, and the client's
/// t4k is its first read of them. With several calls at once on the
/// connection, that write can be another call's; the client only uses a
/// send part of a probe that had the connection to itself.
#[derive(Debug, Default)]
pub struct ServerRx {
    last: Mutex<Option<u64>>,
    tx: Mutex<ServerTx>,
}

/// Send times of one accepted connection.
#[derive(Debug, Default)]
struct ServerTx {
    /// A request asked for send times: transmit stamps go on at the next
    /// write.
    wanted: bool,
    /// Transmit stamps are on, keyed by byte from the first write after.
    on: bool,
    /// The kernel refused them.
    refused: bool,
    /// Bytes written since they went on, and their stamps.
    bytes: ByteStamps,
    /// Writes since, newest last.
    writes: VecDeque<Write>,
    /// The latest reply whose send time was asked for: (seq, t3).
    pending: Option<(u64, u64)>,
    /// What TLS adds to each write ([`ServerStream::under_tls`]).
    record_overhead: usize,
}

/// One write of an accepted connection.
#[derive(Debug, Clone, Copy)]
struct Write {
    /// The key of its last byte.
    key: u32,
    /// When it returned (wall clock, Unix ns).
    at: u64,
    /// Its length.
    len: usize,
}

/// Writes and stamps a connection keeps for its send times: a reply's
/// write is found long before this many more.
const SERVER_KEPT: usize = 64;

/// The longest write that is nothing but HTTP/2 control frames the
/// connection sends on its own: a PING ACK (17 bytes), a WINDOW_UPDATE or
/// RST_STREAM (13), a SETTINGS ACK (9). A reply's HEADERS and DATA are
/// longer, so a write this short is never taken for a reply's.
const CONTROL_ONLY: usize = 17;

/// The most a TLS record adds to what it carries: a 5-byte header, and
/// TLS 1.2 AES-GCM's 8-byte explicit nonce and 16-byte tag (TLS 1.3 adds
/// 1 + 16).
const TLS_RECORD_OVERHEAD: usize = 29;

impl ServerTx {
    /// Whether the latest write's stamp is still on the error queue.
    fn missing(&self) -> bool {
        !self.bytes.has_last()
    }

    /// The send part of the reply handed over at `t3`: the stamp of the
    /// first write after it that is not control frames alone, less `t3`.
    fn send_of(&self, t3: u64) -> Option<u64> {
        let key = self
            .writes
            .iter()
            .find(|w| w.at >= t3 && w.len > CONTROL_ONLY + self.record_overhead)?
            .key;
        self.bytes.stamp(key)?.checked_sub(t3)
    }
}

impl ServerRx {
    fn tx(&self) -> std::sync::MutexGuard<'_, ServerTx> {
        self.tx.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The kernel receive stamp of the latest read with data.
    pub fn last(&self) -> Option<u64> {
        *self.last.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A request asks for its reply's send time: turns transmit stamps on
    /// (at the next write). False if the kernel refused them.
    pub fn want_send_times(&self) -> bool {
        let mut tx = self.tx();
        tx.wanted = true;
        !tx.refused
    }

    /// Reply `seq` was handed to HTTP/2 at `t3` (wall clock, Unix ns): its
    /// send time is the next one [`Self::take_send`] gives.
    pub fn sent(&self, seq: u64, t3: u64) {
        self.tx().pending = Some((seq, t3));
    }

    /// Takes the send part (t3k − t3) of the latest reply [`Self::sent`],
    /// or only of reply `only` where given: its seq, and the part, `None`
    /// where its write is not stamped (yet: another call's reply came
    /// first). `None` when no such reply waits.
    pub fn take_send(&self, only: Option<u64>) -> Option<(u64, Option<u64>)> {
        let mut tx = self.tx();
        let (seq, t3) = tx.pending?;
        if only.is_some_and(|s| s != seq) {
            return None;
        }
        tx.pending = None;
        Some((seq, tx.send_of(t3)))
    }

    /// Before a write: transmit stamps on, if asked for and not yet;
    /// whether they are on (the write is then [`Self::wrote`]).
    fn before_write(&self, fd: std::os::fd::BorrowedFd<'_>) -> bool {
        let mut tx = self.tx();
        if tx.wanted && !tx.on && !tx.refused {
            match prober_sys::rx::enable_tx_timestamps_id_tcp(fd) {
                Ok(()) => tx.on = true,
                Err(e) => {
                    tx.refused = true;
                    tracing::debug!("no transmit stamps on an accepted connection: {e}");
                }
            }
        }
        tx.on
    }

    /// After a write of `n` bytes with transmit stamps on.
    fn wrote(&self, n: usize) {
        if n == 0 {
            return;
        }
        let mut tx = self.tx();
        tx.bytes.wrote(n);
        let Some(key) = tx.bytes.last_key() else {
            return;
        };
        if tx.writes.len() == SERVER_KEPT {
            tx.writes.pop_front();
        }
        tx.writes.push_back(Write {
            key,
            at: prober_core::clock::unix_now_ns(),
            len: n,
        });
    }

    /// After a read (one that found nothing, or a request) or a reply's
    /// write: files the latest write's stamp, if it is not yet.
    fn after_read(&self, fd: std::os::fd::BorrowedFd<'_>) {
        if !self.tx().missing() {
            return;
        }
        prober_sys::rx::drain_tx_stamps_id_until(fd, usize::MAX, |key, stamp| {
            self.tx().bytes.file(key, stamp, SERVER_KEPT)
        });
    }
}

/// An accepted connection that reads with kernel receive stamps, and
/// stamps its writes once a request asks for send times.
///
/// A PING's ACK written alone while a request is being answered is held
/// until the answer is written with it, or [`HOLD_LIMIT`] has passed.
/// grpc-go's clients (ghz) send a PING with every request, and h2 wrote its
/// ACK ahead of the reply: two `sendto`s a call, the first inside the
/// reply's path, and two wake-ups of the client. Held, ghz's p50 against
/// the responder was 0.2-7.4 µs lower in each of 6 rounds (BENCHMARKS.md).
/// Only a PING's ACK: a lone WINDOW_UPDATE (a large upload waits for it),
/// the end of a stream, or a TLS handshake's last flight must not wait.
#[derive(Debug)]
pub struct ServerStream {
    inner: TcpStream,
    rx: Arc<ServerRx>,
    /// Bytes held for one write, starting with control frames.
    held: Vec<u8>,
    /// Until when control frames may be held; reset for each hold.
    hold_until: Option<Pin<Box<tokio::time::Sleep>>>,
    /// Data was read since the last write longer than control frames: a
    /// request is being answered.
    answering: bool,
    /// The stream carries TLS records.
    tls: bool,
}

/// An HTTP/2 PING frame with the ACK flag: 9 bytes of header (length 8,
/// type 6, flags 1, stream 0) and 8 of opaque data.
fn is_ping_ack(buf: &[u8]) -> bool {
    buf.len() == 17 && buf[..9] == [0, 0, 8, 6, 1, 0, 0, 0, 0]
}

/// A TLS record as long as one holding a PING's ACK alone: TLS 1.3
/// (header, 17 bytes, content type, tag: 39), TLS 1.2 with AES-GCM
/// (explicit nonce too: 46) or ChaCha20-Poly1305 (38).
fn is_ping_ack_record(buf: &[u8]) -> bool {
    matches!(buf.len(), 38 | 39 | 46) && buf[0] == 23
}

/// The longest a [`ServerStream`] holds control frames for a reply: tokio's
/// timer fires on millisecond ticks, so in 1-2 ms.
pub const HOLD_LIMIT: Duration = Duration::from_millis(1);

/// The most a [`ServerStream`] holds before it writes.
const HOLD_MAX: usize = 16 * 1024;

impl ServerStream {
    /// Wraps an accepted stream; without receive stamps it still serves.
    pub fn new(inner: TcpStream) -> Self {
        let _ = prober_sys::rx::enable_timestamps(inner.as_fd());
        Self {
            inner,
            rx: Arc::default(),
            held: Vec::new(),
            hold_until: None,
            answering: false,
            tls: false,
        }
    }

    /// The stream carries TLS records: a write of control frames alone is
    /// longer by a record's overhead.
    #[must_use]
    pub fn under_tls(mut self) -> Self {
        self.rx.tx().record_overhead = TLS_RECORD_OVERHEAD;
        self.tls = true;
        self
    }

    /// The longest write that is control frames alone.
    fn control_max(&self) -> usize {
        if self.tls {
            CONTROL_ONLY + TLS_RECORD_OVERHEAD
        } else {
            CONTROL_ONLY
        }
    }

    /// Whether `buf` is a PING's ACK alone, to hold.
    fn holds(&self, buf: &[u8]) -> bool {
        if self.tls {
            is_ping_ack_record(buf)
        } else {
            is_ping_ack(buf)
        }
    }

    /// Writes `buf` to the socket, stamped if a client asked.
    fn poll_send(&mut self, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        // One look at the send-time state per write where no client asked
        // for it (ghz under load, say).
        let stamped = self.rx.before_write(self.inner.as_fd());
        let n = ready!(Pin::new(&mut self.inner).poll_write(cx, buf))?;
        if stamped {
            self.rx.wrote(n);
        }
        if n > self.control_max() {
            self.answering = false;
            // A reply's stamp, read right after it left (where the kernel
            // stamps within the send, as on loopback): h2 reads next only
            // when the next request is there, and a read of the error
            // queue then was a syscall inside that request's turnaround.
            if stamped {
                self.rx.after_read(self.inner.as_fd());
            }
        }
        Poll::Ready(Ok(n))
    }

    /// Writes what is held.
    fn poll_write_held(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        // Taken out for the writes: sending borrows the whole stream.
        let mut held = std::mem::take(&mut self.held);
        let res = poll_write_held(&mut held, |b| self.poll_send(cx, b));
        self.held = held;
        res
    }

    /// Starts holding control frames until the reply or at most
    /// [`HOLD_LIMIT`]. The deadline is moved only once it has passed, not
    /// for every hold: re-arming tokio's timer for each request cost about
    /// what the hold saved. So a hold may end sooner, rarely (a reply
    /// takes tens of µs, the deadline is a millisecond away).
    fn hold(&mut self) {
        let now = tokio::time::Instant::now();
        match &mut self.hold_until {
            Some(sleep) if sleep.deadline() > now => {}
            Some(sleep) => sleep.as_mut().reset(now + HOLD_LIMIT),
            None => self.hold_until = Some(Box::pin(tokio::time::sleep_until(now + HOLD_LIMIT))),
        }
    }

    /// Where its latest kernel receive stamp and send times are kept.
    pub fn rx(&self) -> Arc<ServerRx> {
        Arc::clone(&self.rx)
    }
}

impl AsyncRead for ServerStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let rx = &this.rx;
        let before = buf.filled().len();
        // The latest reply's stamp is read when the connection next finds
        // nothing to read, right after the reply went out: not in the
        // next request's round trip. On loopback it is there by then;
        // where it comes later, the next request's read takes it.
        let res = ready!(poll_read_stamped(
            &this.inner,
            cx,
            buf,
            |fd| rx.after_read(fd),
            |t| *rx.last.lock().unwrap_or_else(PoisonError::into_inner) = t,
        ));
        if res.is_ok() && buf.filled().len() > before {
            rx.after_read(this.inner.as_fd());
            this.answering = true;
        }
        Poll::Ready(res)
    }
}

/// What is held still goes out when the connection is dropped without a
/// flush or shutdown: a TLS alert (24 bytes, under the hold's size) on a
/// handshake the server refuses, say, which tells the client why.
impl Drop for ServerStream {
    fn drop(&mut self) {
        let mut at = 0;
        while at < self.held.len() {
            match self.inner.try_write(&self.held[at..]) {
                Ok(n) if n > 0 => at += n,
                _ => break,
            }
        }
    }
}

impl AsyncWrite for ServerStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if !this.held.is_empty() && this.held.len() + buf.len() <= HOLD_MAX {
            this.held.extend_from_slice(buf);
            return Poll::Ready(Ok(buf.len()));
        }
        if this.held.is_empty() && this.answering && this.holds(buf) {
            this.held.extend_from_slice(buf);
            this.hold();
            return Poll::Ready(Ok(buf.len()));
        }
        ready!(this.poll_write_held(cx))?;
        this.poll_send(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        // Control frames alone, while a reply is on its way: they go with
        // it, or when the hold runs out (the timer wakes this task, and
        // the connection flushes again).
        if !this.held.is_empty()
            && this.holds(&this.held)
            && this.answering
            && let Some(until) = &mut this.hold_until
            && until.as_mut().poll(cx).is_pending()
        {
            return Poll::Pending;
        }
        ready!(this.poll_write_held(cx))?;
        Pin::new(&mut this.inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        ready!(this.poll_write_held(cx))?;
        Pin::new(&mut this.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

    use super::*;

    /// With a probe's window open, a coalescing stream holds writes until
    /// a flush and sends them as one; with none open, it writes at once.
    #[tokio::test]
    async fn coalescing_holds_writes_for_one_send_while_a_probe_waits() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (client, accepted) = tokio::join!(TcpStream::connect(addr), listener.accept());
        let (mut peer, _) = accepted.unwrap();
        let stamps = Arc::new(ChannelStamps::default());
        let mut s = StampedStream::new(client.unwrap(), Arc::clone(&stamps), false)
            .unwrap()
            .coalescing();
        let mut got = [0u8; 16];

        let window = stamps.begin();
        s.write_all(b"head").await.unwrap();
        s.write_all(b"body").await.unwrap();
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(
            matches!(peer.try_read(&mut got), Err(e) if e.kind() == io::ErrorKind::WouldBlock),
            "nothing leaves before the flush"
        );
        s.flush().await.unwrap();
        let n = peer.read(&mut got).await.unwrap();
        assert_eq!(&got[..n], b"headbody", "one send");
        drop(window);

        s.write_all(b"ack").await.unwrap();
        let n = peer.read(&mut got).await.unwrap();
        assert_eq!(&got[..n], b"ack", "no window: written at once");
    }

    /// A reply's send part is the stamp of the first write that returned
    /// at or after its handler did, less that time: not an earlier write's
    /// (another call's reply, a SETTINGS ACK), and not a later one's.
    #[test]
    fn a_reply_is_sent_by_the_first_write_after_its_handler_returned() {
        let rx = ServerRx::default();
        {
            let mut tx = rx.tx();
            tx.on = true;
            let w = |key, at, len| Write { key, at, len };
            tx.writes.extend([
                w(99, 1_000, 100),
                w(116, 2_100, 17),
                w(216, 2_500, 100),
                w(316, 4_000, 100),
            ]);
            tx.bytes
                .stamps
                .extend([(99, 990), (116, 2_050), (216, 2_400), (316, 3_900)]);
        }
        rx.sent(7, 2_000);
        assert_eq!(rx.take_send(Some(8)), None, "not that reply's");
        // Not the PING ACK written first.
        assert_eq!(rx.take_send(Some(7)), Some((7, Some(400))));
        assert_eq!(rx.take_send(None), None, "taken once");
        // Handed over after every write so far: not sent yet.
        rx.sent(8, 5_000);
        assert_eq!(rx.take_send(None), Some((8, None)));
    }

    /// The latest write's stamp is looked for on the error queue only
    /// until it has been read.
    #[test]
    fn the_error_queue_is_read_only_for_a_write_without_its_stamp() {
        let mut tx = ServerTx::default();
        assert!(!tx.missing(), "nothing written");
        tx.bytes.wrote(100);
        assert!(tx.missing());
        tx.bytes.stamps.push_back((99, 990));
        assert!(!tx.missing());
    }

    /// A short write while a request is being answered (a PING's ACK)
    /// waits for the reply and leaves with it; with no reply, when the
    /// hold runs out or the stream is dropped; with no request, at once.
    #[tokio::test]
    async fn control_frames_wait_for_the_reply_being_answered() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let mut client = TcpStream::connect(listener.local_addr().unwrap())
            .await
            .unwrap();
        let mut srv = ServerStream::new(listener.accept().await.unwrap().0);
        let mut buf = [0u8; 128];
        let ack = |b: u8| {
            let mut f = [b; 17];
            f[..9].copy_from_slice(&[0, 0, 8, 6, 1, 0, 0, 0, 0]);
            f
        };
        // No request being answered: a PING's ACK goes at once.
        srv.write_all(&ack(9)).await.unwrap();
        srv.flush().await.unwrap();
        assert_eq!(client.read(&mut buf).await.unwrap(), 17);
        // A request: the ACK waits for the reply, and both leave in one
        // write, so the client reads them at once.
        client.write_all(b"req1").await.unwrap();
        let _ = srv.read(&mut buf).await.unwrap();
        srv.write_all(&ack(1)).await.unwrap();
        srv.write_all(&[2u8; 40]).await.unwrap();
        srv.flush().await.unwrap();
        assert_eq!(client.read(&mut buf).await.unwrap(), 57);
        assert_eq!((buf[3], buf[16], buf[17], buf[56]), (6, 1, 2, 2));
        // Other short writes (a WINDOW_UPDATE, the end of a stream) are not
        // held, request or not.
        client.write_all(b"req2").await.unwrap();
        let _ = srv.read(&mut buf).await.unwrap();
        srv.write_all(&[0, 0, 4, 8, 0, 0, 0, 0, 0, 0, 0, 1, 0])
            .await
            .unwrap();
        srv.flush().await.unwrap();
        assert_eq!(client.read(&mut buf).await.unwrap(), 13);
        // A request with no reply: the ACK leaves when the hold runs out
        // (after the deadline of the first hold has passed: it is moved
        // only then).
        tokio::time::sleep(HOLD_LIMIT * 3).await;
        srv.write_all(&ack(3)).await.unwrap();
        let t = Instant::now();
        srv.flush().await.unwrap();
        assert!(t.elapsed() >= HOLD_LIMIT / 2, "{:?}", t.elapsed());
        assert_eq!(client.read(&mut buf).await.unwrap(), 17);
        // Held and dropped: it still goes out.
        client.write_all(b"req3").await.unwrap();
        let _ = srv.read(&mut buf).await.unwrap();
        srv.write_all(&ack(4)).await.unwrap();
        drop(srv);
        assert_eq!(client.read(&mut buf).await.unwrap(), 17);
        assert_eq!(buf[16], 4);
    }

    /// Over a real connection: once asked, the accepted stream stamps its
    /// writes, and the stamp is read when the next request comes.
    #[tokio::test]
    async fn an_accepted_stream_stamps_its_writes_once_asked() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let mut client = TcpStream::connect(listener.local_addr().unwrap())
            .await
            .unwrap();
        let mut srv = ServerStream::new(listener.accept().await.unwrap().0);
        let rx = srv.rx();
        let mut buf = [0u8; 64];
        // An exchange before stamps go on: the keys count from the first
        // byte written after, not from the connection's first.
        client.write_all(b"req0").await.unwrap();
        let _ = srv.read(&mut buf).await.unwrap();
        srv.write_all(&[0u8; 40]).await.unwrap();
        let _ = client.read(&mut buf).await.unwrap();
        client.write_all(b"req1").await.unwrap();
        let _ = srv.read(&mut buf).await.unwrap();
        assert!(rx.want_send_times());
        let t3 = prober_core::clock::unix_now_ns();
        rx.sent(1, t3);
        srv.write_all(&[1u8; 30]).await.unwrap();
        let _ = client.read(&mut buf).await.unwrap();
        client.write_all(b"req2").await.unwrap();
        let _ = srv.read(&mut buf).await.unwrap();
        let (seq, send) = rx.take_send(None).unwrap();
        assert_eq!(seq, 1);
        let send = send.expect("the reply's write was stamped (OPT_ID_TCP, Linux 6.2)");
        assert!(send < 1_000_000_000, "{send} ns");
        assert_eq!(
            rx.tx().bytes.written,
            30,
            "counted from the first write after"
        );
        assert_eq!(rx.tx().bytes.stamps.back().map(|s| s.0), Some(29));
    }
}

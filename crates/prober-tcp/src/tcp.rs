//! TCP probes: request/response on one connection, handshake time, and
//! connect-request-response-close.

use std::io;
use std::net::SocketAddr;

use prober_core::protocol::Marks;
use std::os::fd::AsFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use prober_core::clock::unix_now_ns;
use prober_core::{Anomalies, ErrorKind, Gate, Matcher, MatcherSet, Probe, ProbeError, Reply};
use socket2::SockRef;
use tokio::io::{AsyncWriteExt, Interest};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpSocket, TcpStream};
use tokio::sync::Mutex;
use tokio::time::Instant;
use tokio_util::task::AbortOnDropHandle;

use crate::reader::{Arrival, Got, RxStamp, await_got, recv_stamped};
use prober_net::follow::{
    Cadence, FOLLOW_UP_MARGIN, FOLLOW_UP_WAIT, FollowUps, INTERLEAVED_WAIT, OnSpare, SpareRetry,
    settle_interleaved,
};
use prober_sys::busy::{Reader, SpinThread, Step};
use prober_sys::synbpf::Stamper;
use prober_sys::syntap::Handshake;

use crate::wire::{self, HEADER_LEN, Header, Kind, MAX_TCP_FRAME};

/// `tcp://host:port`: request/response over one persistent connection with
/// TCP_NODELAY, like netperf TCP_RR; replies are matched by seq. With `-b`
/// above 1 requests are pipelined on it, as netperf's `-b` does (and
/// without, where more probes are under way than the two connections
/// below take one at a time). A dead connection is re-opened by the next
/// probe and counted as a reconnect.
///
/// Each connection has its own [`Matcher`]: when a connection dies, only
/// the probes sent on it fail, never those already waiting on its
/// replacement. Their anomaly counts are added up in [`Probe::anomalies`].
///
/// Once a probe went out with a reply still due, a second connection is
/// kept, opened after a reply and off any probe's clock; a probe that
/// finds a reply still due on the first and none on the second goes on
/// the second. On one connection, a reply the reader takes after the next
/// one arrived has been merged with it by TCP, and its receive stamp is
/// lost (`client_receive_stamp`): on a loaded host, where a round trip can
/// outlast the interval, that cost a share of the splits (BENCHMARKS.md,
/// "The split under load on this host"). Not with busy-poll, whose reader
/// is a spinning thread for each connection, nor with `-b` above 1.
#[derive(Debug)]
pub struct TcpProbe {
    addr: SocketAddr,
    size: usize,
    nonce: u64,
    matchers: MatcherSet<Arrival>,
    conn: Mutex<Option<Arc<Conn>>>,
    connected_once: AtomicBool,
    /// The second connection, and when it may next be tried.
    spare: Mutex<Option<Arc<Conn>>>,
    spare_retry: SpareRetry,
    /// Whether a spare may be kept at all: not where probes overlap on
    /// purpose (`-b`, pipelined on one connection as netperf's is).
    spare_on: bool,
    /// A probe went out while a reply was still due.
    overlapped: AtomicBool,
    /// Probes sent on the spare whose follow-up may be asked for later:
    /// asked there, since a responder keeps follow-ups by connection.
    on_spare: OnSpare,
    busy_poll: bool,
    /// Ask the kernel for transmit stamps (the client send part).
    tx_stamps: bool,
    /// The run's per-probe timeout, which bounds the wait for follow-ups.
    timeout: Duration,
    /// Follow-up frames (t3k − t3) by seq, filed by every connection's
    /// reader.
    follow: Arc<FollowUps>,
    /// Its packets' TOS byte and source address.
    marks: Marks,
    /// Adaptive receive's budget (`--receive adaptive`); `None`: park.
    spin: Option<prober_core::spin::SpinBudget>,
    /// Whether requests come often enough to interleave.
    cadence: Cadence,
}

/// What a connection's reader files for the probes: transmit stamps by
/// seq, found by the byte offset of each request's last byte, and the
/// follow-up frames.
#[derive(Debug)]
struct Stamped {
    tx: prober_sys::rx::KeyedTxStamps,
    /// By seq, shared by the target's connections.
    follow: Arc<FollowUps>,
}

#[derive(Debug)]
struct Conn {
    /// The write half, the frame buffer, and the bytes written so far.
    writer: Mutex<(OwnedWriteHalf, Vec<u8>, u64)>,
    alive: Arc<AtomicBool>,
    matcher: Arc<Matcher<Arrival>>,
    /// The kernel gives transmit stamps on this connection.
    tx_on: bool,
    /// What its reader files: its transmit stamps, the follow-ups.
    stamps: Arc<Stamped>,
    /// A duplicate of the socket, to read `TCP_INFO` from.
    info: Option<socket2::Socket>,
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
            spare: Mutex::new(None),
            spare_retry: SpareRetry::default(),
            spare_on: true,
            overlapped: AtomicBool::new(false),
            on_spare: OnSpare::default(),
            busy_poll,
            tx_stamps: false,
            timeout: Duration::from_secs(1),
            follow: Arc::default(),
            marks: Marks::default(),
            spin: None,
            cadence: Cadence::default(),
        }
    }

    /// Whether to keep a second connection once probes overlap (on unless
    /// the run overlaps them on purpose, `-b`).
    #[must_use]
    pub fn with_spare(mut self, on: bool) -> Self {
        self.spare_on = on;
        self
    }

    /// Waits for replies as `receive` says: with `adaptive`, after each
    /// write the probe spins until the socket is readable or its budget
    /// runs out, and the connection's reader reads the reply as usual,
    /// from a thread that never went to sleep. No effect with busy-poll.
    #[must_use]
    pub fn with_receive(mut self, receive: &prober_core::spin::Receive) -> Self {
        if !self.busy_poll {
            self.spin = receive.budget();
        }
        self
    }

    /// Marks its packets and picks their source address (`--tos`,
    /// `--dscp`, `--source`).
    #[must_use]
    pub fn with_marks(mut self, marks: Marks) -> Self {
        self.marks = marks;
        self
    }

    /// Asks for kernel transmit stamps (the client send part of the split),
    /// and sets the run's per-probe timeout, which bounds the wait for the
    /// responder's follow-up frames.
    #[must_use]
    pub fn with_stamps(mut self, tx_stamps: bool, timeout: Duration) -> Self {
        self.tx_stamps = tx_stamps;
        self.timeout = timeout;
        self
    }

    /// Asks the responder for the follow-up of `seq`'s response; false if
    /// the ask could not be written (the connection is then retired, and
    /// the probe keeps its reply without the responder send part).
    async fn ask(&self, conn: &Conn, seq: u64) -> bool {
        let mut guard = conn.writer.lock().await;
        let (writer, buf, written) = &mut *guard;
        wire::encode_ask(buf, seq, self.nonce);
        let mut unfinished = Unfinished(&conn.alive, true);
        *written += buf.len() as u64;
        if writer.write_all(buf).await.is_err() {
            return false;
        }
        unfinished.1 = false;
        true
    }

    async fn connection(&self) -> Result<Arc<Conn>, ProbeError> {
        let mut slot = self.conn.lock().await;
        if let Some(conn) = alive(&slot) {
            return Ok(Arc::clone(conn));
        }
        *slot = None;
        let reconnect = self.connected_once.swap(true, Ordering::Relaxed);
        let conn = self.open(reconnect).await?;
        *slot = Some(Arc::clone(&conn));
        Ok(conn)
    }

    /// The spare, if it is open (never waits: a probe does not connect it
    /// on its own clock, nor wait for one who does).
    fn spare_now(&self) -> Option<Arc<Conn>> {
        let slot = self.spare.try_lock().ok()?;
        alive(&slot).cloned()
    }

    /// Once probes overlapped, opens the spare (again, after it
    /// died), after a reply (its RTT is taken) and within the probe's time
    /// limit, never behind another probe's connect; a try that did not
    /// open it (failed, or cut off at the limit) is made again a second
    /// later at the soonest ([`SpareRetry`]).
    async fn keep_spare(&self) {
        if !self.spare_on || self.busy_poll || !self.overlapped.load(Ordering::Relaxed) {
            return;
        }
        let Ok(mut slot) = self.spare.try_lock() else {
            return;
        };
        if alive(&slot).is_some() || !self.spare_retry.begin() {
            return;
        }
        let reconnect = slot.is_some();
        match self.open(reconnect).await {
            Ok(conn) => {
                *slot = Some(conn);
                self.spare_retry.opened();
            }
            Err(_) => *slot = None,
        }
    }

    /// Connects, and starts the connection's reader filing into stamps of
    /// its own (its transmit stamps are keyed by its own bytes) and the
    /// target's follow-ups; `reconnect` counts one.
    async fn open(&self, reconnect: bool) -> Result<Arc<Conn>, ProbeError> {
        let stamps = Arc::new(Stamped {
            tx: prober_sys::rx::KeyedTxStamps::default(),
            follow: Arc::clone(&self.follow),
        });
        let stream = new_socket(self.addr, &self.marks)?
            .connect(self.addr)
            .await
            .map_err(|e| ProbeError::io(format_args!("connect to {}", self.addr), &e))?;
        stream
            .set_nodelay(true)
            .map_err(|e| ProbeError::io("setting TCP_NODELAY", &e))?;
        prober_sys::rx::enable_timestamps(stream.as_fd())
            .map_err(|e| ProbeError::io("setting SO_TIMESTAMPNS", &e))?;
        // Transmit stamps numbered by byte (OPT_ID), from the first byte
        // sent after this call: a request's stamp is the one of its last
        // byte. None is no error: the client send part stays unknown.
        let tx_on =
            self.tx_stamps && prober_sys::rx::tx_timestamps_id_or_notice(stream.as_fd(), "tcp");
        let info = SockRef::from(&stream).try_clone().ok();
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
                spin_replies(
                    sock.into(),
                    reader_matcher,
                    (nonce, size),
                    flag,
                    tx_on,
                    Arc::clone(&stamps),
                )
                .map_err(|e| ProbeError::io("starting the busy-poll thread", &e))?,
            ),
            None => Reader::Task(AbortOnDropHandle::new(tokio::spawn(read_replies(
                reader,
                reader_matcher,
                (nonce, size),
                flag,
                tx_on,
                Arc::clone(&stamps),
            )))),
        };
        Ok(Arc::new(Conn {
            writer: Mutex::new((writer, Vec::with_capacity(self.size), 0)),
            alive,
            matcher,
            tx_on,
            stamps,
            info,
            _reader: reader,
        }))
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
    follow: &FollowUps,
) -> Result<(), String> {
    let mut at = 0;
    while acc.len() - at >= HEADER_LEN {
        let h = Header::decode(&acc[at..], MAX_TCP_FRAME).map_err(|e| bad_reply(&e))?;
        if h.kind == Kind::FollowUp && h.nonce == nonce && h.len as usize == wire::FOLLOW_UP_LEN {
            if acc.len() - at < wire::FOLLOW_UP_LEN {
                break;
            }
            follow.put(
                h.seq,
                wire::follow_up_send(&acc[at..at + wire::FOLLOW_UP_LEN]),
            );
            at += wire::FOLLOW_UP_LEN;
            continue;
        }
        if h.kind != Kind::Response || h.nonce != nonce || h.len as usize != size {
            return Err(format!(
                "bad reply: {} of {} bytes from another run or peer",
                h.kind, h.len
            ));
        }
        if acc.len() - at < size {
            break;
        }
        let frame = &acc[at..at + size];
        let got = Got {
            received,
            dwell: Duration::from_nanos(h.dwell_ns),
            rx,
            responder_wake: wire::responder_wake(frame),
            follow_up: wire::follow_up_promised(frame),
            ask: wire::waits_for_ask(frame),
            interleaved: wire::interleaved(frame),
        };
        matcher.deliver(h.seq, Ok(got));
        // An earlier response's transmit stamp, interleaved: after the
        // delivery, so that a probe waiting on both wakes once.
        if let Some((seq, send)) = wire::carried(frame) {
            follow.put(seq, send);
        }
        at += size;
    }
    acc.drain(..at);
    Ok(())
}

async fn read_replies(
    reader: OwnedReadHalf,
    matcher: Arc<Matcher<Arrival>>,
    (nonce, size): (u64, usize),
    alive: Arc<AtomicBool>,
    tx_on: bool,
    stamps: Arc<Stamped>,
) {
    let stream: &TcpStream = reader.as_ref();
    let mut acc: Vec<u8> = Vec::with_capacity(64 * 1024);
    let mut chunk = vec![0u8; 64 * 1024];
    let why = loop {
        // ERROR too: transmit stamps wait on the error queue. Data is read
        // first and the error queue only when no data waits: a look at the
        // error queue before the reply is a syscall between its arrival and
        // its receive time, in every RTT (2 µs of client wake back to back
        // over UDP, BENCHMARKS.md). The stamp is raised inside the send, so
        // the wake it causes files it before the reply comes; `probe_at`
        // reads the error queue itself when it has not.
        let tx = tx_on.then_some(&stamps.tx);
        let read = stream
            .async_io(Interest::READABLE | Interest::ERROR, || {
                read_frame(stream.as_fd(), &acc, &mut chunk, size, tx)
            })
            .await;
        let (n, rx) = match read {
            Ok((0, _)) => break ProbeError::new(ErrorKind::Reset, "connection closed by peer"),
            Ok(r) => r,
            Err(e) => break ProbeError::io("receive", &e),
        };
        let read = (&chunk[..n], rx);
        if let Err(why) = file_read(
            stream.as_fd(),
            &mut acc,
            read,
            (nonce, size),
            &matcher,
            &stamps.follow,
        ) {
            break ProbeError::protocol(why);
        }
    };
    end_connection(why, &matcher, &alive);
}

/// Reads into `chunk` up to the end of the frame in progress (`acc` holds
/// its start) and no further: the kernel reports the stamp of the last
/// segment a read touches, and a follow-up frame right behind a response
/// must not lend it its later stamp. Finding no data, files the transmit
/// stamps waiting on the error queue into `tx`, where they are on.
///
/// # Errors
/// Whatever the read reports, `WouldBlock` included.
fn read_frame(
    fd: std::os::fd::BorrowedFd<'_>,
    acc: &[u8],
    chunk: &mut [u8],
    size: usize,
    tx: Option<&prober_sys::rx::KeyedTxStamps>,
) -> io::Result<(usize, RxStamp)> {
    let want = frame_rest(acc, size).min(chunk.len());
    let res = recv_stamped(fd, &mut chunk[..want]);
    if let (Err(e), Some(tx)) = (&res, tx)
        && e.kind() == io::ErrorKind::WouldBlock
    {
        tx.drain(fd);
    }
    res
}

/// Files what a read of `fd` brought (the bytes and their stamps) at the
/// end of `acc`, and hands the replies now whole to their probes.
///
/// # Errors
/// A frame that is not one of ours.
fn file_read(
    fd: std::os::fd::BorrowedFd<'_>,
    acc: &mut Vec<u8>,
    (bytes, rx): (&[u8], RxStamp),
    (nonce, size): (u64, usize),
    matcher: &Matcher<Arrival>,
    follow: &FollowUps,
) -> Result<(), String> {
    acc.extend_from_slice(bytes);
    let received = (Instant::now(), clean(fd, rx));
    take_replies(acc, nonce, size, received, matcher, follow)
}

/// The read's stamps, without its kernel receive stamp if more data is
/// already queued behind what it read. TCP coalesces a segment that
/// arrives while the one before it is still unread into that one, and the
/// merged segment carries the later arrival's stamp: a response followed
/// closely by its follow-up frame would report the follow-up's arrival
/// as its own. Data waiting after the read means that may have happened,
/// so the stamp is dropped (the probe's split is then partial), never
/// kept wrong.
fn clean(fd: std::os::fd::BorrowedFd<'_>, mut rx: RxStamp) -> RxStamp {
    if rx.t4k.is_some() && prober_sys::busy::data_waiting(fd) {
        rx.t4k = None;
    }
    rx
}

/// How many bytes finish the frame at the front of `acc` (a response of
/// `size` bytes when nothing of it has come yet; the rest of the header when
/// only part of it has).
fn frame_rest(acc: &[u8], size: usize) -> usize {
    if acc.is_empty() {
        return size;
    }
    if acc.len() < HEADER_LEN {
        return HEADER_LEN - acc.len();
    }
    let len = u32::from_be_bytes([acc[8], acc[9], acc[10], acc[11]]) as usize;
    len.saturating_sub(acc.len()).max(1)
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
/// without blocking and splitting the byte stream into frames itself, with
/// the same stamps: reads stop at frame ends, the error queue is read when
/// no data waits, follow-ups and interleaved stamps are filed.
fn spin_replies(
    stream: std::net::TcpStream,
    matcher: Arc<Matcher<Arrival>>,
    (nonce, size): (u64, usize),
    alive: Arc<AtomicBool>,
    tx_on: bool,
    stamps: Arc<Stamped>,
) -> io::Result<SpinThread> {
    let mut acc: Vec<u8> = Vec::with_capacity(64 * 1024);
    let mut chunk = vec![0u8; 64 * 1024];
    let fail = |why: ProbeError, matcher: &Matcher<Arrival>, alive: &AtomicBool| {
        end_connection(why, matcher, alive);
        Step::Done
    };
    SpinThread::spawn("prober-tcp-poll", move || {
        let fd = stream.as_fd();
        // Readable counts the error queue too: the request's transmit
        // stamp is filed as soon as it is there, and the spin goes back to
        // a `poll` that costs no lock of the socket.
        if !prober_sys::busy::readable_now(fd) {
            return Step::Idle;
        }
        let tx = tx_on.then_some(&stamps.tx);
        let (n, rx) = match read_frame(fd, &acc, &mut chunk, size, tx) {
            Ok((0, _)) => {
                let why = ProbeError::new(ErrorKind::Reset, "connection closed by peer");
                return fail(why, &matcher, &alive);
            }
            Ok(r) => r,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Step::Idle,
            Err(e) => return fail(ProbeError::io("receive", &e), &matcher, &alive),
        };
        let read = (&chunk[..n], rx);
        match file_read(fd, &mut acc, read, (nonce, size), &matcher, &stamps.follow) {
            Ok(()) => Step::Busy,
            Err(why) => fail(ProbeError::protocol(why), &matcher, &alive),
        }
    })
}

impl Probe for TcpProbe {
    async fn probe_at(&self, seq: u64, gate: Gate) -> Result<Reply, ProbeError> {
        // The runner's timeout started no earlier than this; waiting for a
        // follow-up must not turn an answered probe into a timeout.
        let limit = Instant::now() + self.timeout.saturating_sub(FOLLOW_UP_MARGIN);
        let first = self.connection().await?;
        // The first connection, unless a reply is still due on it and none
        // on the spare.
        let due = first.matcher.pending() > 0;
        if due {
            self.overlapped.store(true, Ordering::Relaxed);
        }
        let (conn, on_spare) = match self.spare_now() {
            Some(s) if due && s.matcher.pending() == 0 => (s, true),
            _ => (first, false),
        };
        let mut waiter = conn.matcher.register(seq);
        let (sent, t1) = {
            let mut guard = conn.writer.lock().await;
            let (writer, buf, written) = &mut *guard;
            wire::encode_request(buf, self.size, seq, self.nonce);
            // The responder's transmit stamp too, unless transmit stamps are
            // off (--no-tx-stamps).
            if self.tx_stamps && self.cadence.interleave(Instant::now()) {
                wire::want_interleaved(buf);
            } else if self.tx_stamps {
                wire::want_follow_up_on_ask(buf);
            } else {
                wire::want_stamps(buf);
            }
            // If the runner's timeout drops this future mid-write, half a
            // frame is on the wire and the stream is out of step: retire
            // the connection so the next probe opens a new one.
            let mut unfinished = Unfinished(&conn.alive, true);
            // The key of the request's last byte is filed before the write
            // (and before the clock is read): the reader may find the stamp
            // before the write call returns.
            *written += buf.len() as u64;
            if conn.tx_on {
                #[allow(clippy::cast_possible_truncation)] // OPT_ID keys are 32-bit
                conn.stamps.tx.expect((*written - 1) as u32, seq);
            }
            gate.pass().await;
            let sent = Instant::now();
            let t1 = prober_core::clock::unix_now_ns();
            if let Err(e) = writer.write_all(buf).await {
                return Err(ProbeError::io("send", &e));
            }
            unfinished.1 = false;
            // Under the writer's lock, which holds the socket open: another
            // probe of this target waits for its write at most one budget.
            // Data only: the request's own transmit stamp lands on the error
            // queue within a microsecond, and counting it ended every spin
            // there, "caught", with the reply still to come. Or the reply
            // already read: the reader task, on another thread, may take it
            // before the spin sees it, and the spin then ran its whole
            // budget (30 spins of 5 ms each, none caught, in a CI run with
            // the other tests beside it).
            if let Some(budget) = &self.spin
                && let Some((used, readable)) = budget.spin(|| {
                    waiter.is_answered() || prober_sys::busy::data_waiting(writer.as_ref().as_fd())
                })
            {
                conn.matcher.count_spin(used, readable);
            }
            (sent, t1)
        };
        let (mut reply, got) = await_got(&mut waiter, sent, t1, self.size).await?;
        // Interleaved, the transmit stamp comes later: `settle`.
        let (follow_up, ask) = (got.follow_up && !got.interleaved, got.ask);
        if let Some(budget) = &self.spin {
            budget.record(reply.rtt());
        }
        // The reader has not had the stamp's wake yet: the error queue is
        // read here, through the socket's duplicate (not the writer, whose
        // lock another probe may hold with its write).
        reply.stamps.t1k = conn.stamps.tx.take(seq).or_else(|| {
            let dup = conn.info.as_ref().filter(|_| conn.tx_on)?;
            conn.stamps.tx.drain(dup.as_fd());
            conn.stamps.tx.take(seq)
        });
        if on_spare && got.interleaved {
            self.on_spare.remember(seq);
        }
        // The response has been read: now the follow-up cannot be merged
        // into it by TCP (which would lend the response its stamp). The ask
        // waits for the writer no longer than the follow-up may be waited
        // for: the reply is in hand and must not become a timeout. (An ask
        // cut off halfway retires the connection, as a request would.)
        if ask
            && !tokio::time::timeout_at(limit, self.ask(&conn, seq))
                .await
                .unwrap_or(false)
        {
            return Ok(reply);
        }
        // Asked: a round trip away; twice this one's RTT covers it.
        let extra = if ask { 2 * reply.rtt() } else { Duration::ZERO };
        if follow_up && let Some(r) = reply.stamps.responder.as_mut() {
            r.send = self.follow.wait(seq, limit, extra).await;
        }
        // Within the probe's time: an answered probe must not become a
        // timeout while the spare connects.
        let _ = tokio::time::timeout_at(limit, self.keep_spare()).await;
        Ok(reply)
    }

    async fn settle(&self, seq: u64, reply: Reply) -> Reply {
        // Taken now, whether or not an ask follows: a send part the next
        // response carried leaves nothing to remember.
        let on_spare = self.on_spare.take(seq);
        settle_interleaved(&self.follow, seq, reply, INTERLEAVED_WAIT, || async {
            // On the connection it went on: after a reconnect the
            // responder has nothing for this seq, and the wait ends
            // unanswered.
            let asked = async {
                let conn = {
                    let slot = if on_spare {
                        self.spare.lock().await
                    } else {
                        self.conn.lock().await
                    };
                    Arc::clone(alive(&slot)?)
                };
                Some(self.ask(&conn, seq).await)
            };
            tokio::time::timeout(FOLLOW_UP_WAIT, asked)
                .await
                .ok()
                .flatten()
                .unwrap_or(false)
        })
        .await
    }

    async fn prepare(&self) -> Result<(), ProbeError> {
        self.connection().await.map(drop)
    }

    fn anomalies(&self) -> Anomalies {
        let mut a = self.matchers.anomalies();
        // The kernel's own estimate, from the connection in use (a probe
        // holding the lock just means this read waits for the next one).
        if let Ok(slot) = self.conn.try_lock()
            && let Some(info) = slot.as_ref().and_then(|c| c.info.as_ref())
        {
            a.tcp_rtt = prober_sys::tcpinfo::tcp_rtt(info.as_fd()).ok();
        }
        a
    }
}

/// The connection in `slot`, if it is still alive.
fn alive(slot: &Option<Arc<Conn>>) -> Option<&Arc<Conn>> {
    slot.as_ref().filter(|c| c.alive.load(Ordering::Acquire))
}

/// A socket for `addr`, its packets marked from the SYN on, bound to the
/// source address when one is given.
fn new_socket(addr: SocketAddr, marks: &Marks) -> Result<TcpSocket, ProbeError> {
    let socket = if addr.is_ipv4() {
        TcpSocket::new_v4()
    } else {
        TcpSocket::new_v6()
    };
    let socket = socket.map_err(|e| ProbeError::io("creating socket", &e))?;
    prober_sys::mark::apply(&socket, addr.is_ipv6(), marks)
        .map_err(|e| ProbeError::io("marking the socket", &e))?;
    if let Some(ip) = marks.source {
        socket
            .bind((ip, 0).into())
            .map_err(|e| ProbeError::io(format_args!("binding source address {ip}"), &e))?;
    }
    Ok(socket)
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
    marks: Marks,
    /// Stamp the handshakes (opened by `with_stamps`).
    tap: Tap,
}

/// A target's handshake [`Stamper`], opened by `with_stamps` before the
/// run (attaching the BPF program took 13 ms here: the kernel patches its
/// hook in, which at the first probe would hold up every target sharing
/// the thread); `None` when not asked for or when it cannot be (not root):
/// the handshake parts then stay unknown.
#[derive(Debug, Default)]
struct Tap(Option<Stamper>);

impl Tap {
    fn open(on: bool, addr: SocketAddr) -> Self {
        if !on {
            return Self(None);
        }
        match Stamper::open(addr) {
            Ok(t) => Self(Some(t)),
            Err(e) => {
                static NOTICE: std::sync::Once = std::sync::Once::new();
                NOTICE.call_once(|| {
                    tracing::warn!(
                        "notice: no kernel stamps for TCP handshakes ({e}); their parts stay unknown"
                    );
                });
                Self(None)
            }
        }
    }

    /// The stamps of the handshake `stream` just made to `peer`, each only if it lies between `t1`
    /// and `connected` (the wall clock before and after the connect). The
    /// kernel switches packet stamps on some time after the first socket
    /// asks (a deferred work item): until then a packet socket stamps a
    /// packet when it is read, after the connect. (The BPF program's
    /// stamps are taken as the packet passes, and always lie inside.)
    fn take(&self, stream: &TcpStream, peer: SocketAddr, (t1, connected): (u64, u64)) -> Handshake {
        let (Some(tap), Ok(local)) = (&self.0, stream.local_addr()) else {
            return Handshake::default();
        };
        let h = tap.take(local.port(), peer.ip());
        let inside = |t: Option<u64>| t.filter(|t| (t1..=connected).contains(t));
        Handshake {
            syn_tx: inside(h.syn_tx),
            syn_ack_rx: inside(h.syn_ack_rx),
        }
    }
}

impl TcpConnectProbe {
    /// A probe of `addr`.
    pub fn new(addr: SocketAddr) -> Self {
        Self {
            addr,
            marks: Marks::default(),
            tap: Tap::default(),
        }
    }

    /// Stamps each SYN as it leaves and each SYN-ACK as it arrives, with a
    /// BPF program on the interface's hooks, or a packet socket where the
    /// kernel refuses the program (either needs root): the client send,
    /// network and client wake parts.
    #[must_use]
    pub fn with_stamps(mut self, on: bool) -> Self {
        self.tap = Tap::open(on, self.addr);
        self
    }

    /// Marks its SYNs and picks their source address (`--tos`, `--dscp`,
    /// `--source`).
    #[must_use]
    pub fn with_marks(mut self, marks: Marks) -> Self {
        self.marks = marks;
        self
    }
}

impl Probe for TcpConnectProbe {
    async fn probe_at(&self, _seq: u64, gate: Gate) -> Result<Reply, ProbeError> {
        let socket = new_socket(self.addr, &self.marks)?;
        gate.pass().await;
        let sent = Instant::now();
        let t1 = unix_now_ns();
        let stream = socket
            .connect(self.addr)
            .await
            .map_err(|e| ProbeError::io(format_args!("connect to {}", self.addr), &e))?;
        let received = Instant::now();
        let t4 = unix_now_ns();
        // The SYN as it left and the SYN-ACK as it came: t1k and t4k. The
        // peer's kernel answers, as for ICMP.
        let h = self.tap.take(&stream, self.addr, (t1, t4));
        reset(&stream);
        Ok(Reply {
            sent,
            received,
            server_dwell: None,
            rx_wake: None,
            bytes: 0,
            ttl: None,
            stamps: prober_core::sample::Stamps {
                t1: Some(t1),
                t1k: h.syn_tx,
                t4k: h.syn_ack_rx,
                t4: Some(t4),
                kernel_peer: true,
                ..Default::default()
            },
            app: Default::default(),
        })
    }
}

/// `tcp-crr://host:port`: connect, one request/response, close, like netperf
/// TCP_CRR. The RTT runs from the start of the connect to the reply; the
/// close (RST, as for `tcp-connect://`) is not timed.
///
/// Its split: the handshake's RTT (the SYN's and SYN-ACK's kernel stamps,
/// as `tcp-connect://`) and the request's kernel
/// stamps, less the responder's own times (wire version 2 and its
/// follow-up frame), make the network part; the client send part is what
/// remains of t1k − t1 after the handshake.
#[derive(Debug)]
pub struct TcpCrrProbe {
    addr: SocketAddr,
    size: usize,
    nonce: u64,
    marks: Marks,
    /// Ask the kernel for transmit stamps, and the responder for its own.
    tx_stamps: bool,
    /// The run's per-probe timeout, which bounds the wait for a follow-up.
    timeout: Duration,
    /// Stamp the handshakes (opened by `with_stamps`).
    tap: Tap,
}

impl TcpCrrProbe {
    /// A probe of `addr` sending frames of `size` bytes.
    pub fn new(addr: SocketAddr, size: usize) -> Self {
        Self {
            addr,
            size,
            nonce: fastrand::u64(..),
            marks: Marks::default(),
            tx_stamps: false,
            timeout: Duration::from_secs(1),
            tap: Tap::default(),
        }
    }

    /// Marks its packets and picks their source address (`--tos`,
    /// `--dscp`, `--source`).
    #[must_use]
    pub fn with_marks(mut self, marks: Marks) -> Self {
        self.marks = marks;
        self
    }

    /// Asks for kernel transmit stamps and the responder's follow-up frame
    /// (the client send, network and responder send parts), and sets the
    /// run's per-probe timeout, which bounds the wait for the follow-up.
    #[must_use]
    pub fn with_stamps(mut self, tx_stamps: bool, timeout: Duration) -> Self {
        self.tx_stamps = tx_stamps;
        self.tap = Tap::open(tx_stamps, self.addr);
        self.timeout = timeout;
        self
    }
}

/// Reads exactly `buf.len()` bytes with kernel receive stamps; the stamps
/// of the read that completed them (the last segment's).
async fn read_stamped(stream: &TcpStream, buf: &mut [u8]) -> io::Result<RxStamp> {
    let mut got = 0;
    loop {
        let (n, rx) = stream
            .async_io(Interest::READABLE, || {
                recv_stamped(stream.as_fd(), &mut buf[got..])
            })
            .await?;
        if n == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        got += n;
        if got == buf.len() {
            return Ok(rx);
        }
    }
}

impl Probe for TcpCrrProbe {
    async fn probe_at(&self, seq: u64, gate: Gate) -> Result<Reply, ProbeError> {
        let io_err = |what: &str, e: io::Error| ProbeError::io(what, &e);
        let limit = Instant::now() + self.timeout.saturating_sub(FOLLOW_UP_MARGIN);
        let socket = new_socket(self.addr, &self.marks)?;
        // Every option is set before the connect, outside the timed part.
        prober_sys::rx::enable_timestamps(socket.as_fd())
            .map_err(|e| io_err("setting SO_TIMESTAMPNS", e))?;
        socket
            .set_nodelay(true)
            .map_err(|e| io_err("setting TCP_NODELAY", e))?;
        // Unnumbered: a TCP socket numbers stamps (OPT_ID) only once it is
        // connected, and a call there would be inside the RTT. The request
        // is the connection's one write, and a SYN gets no stamp, so the
        // one stamp that comes is the request's.
        let tx_on =
            self.tx_stamps && prober_sys::rx::tx_timestamps_or_notice(socket.as_fd(), "tcp");
        let mut frame = Vec::with_capacity(self.size);
        wire::encode_request(&mut frame, self.size, seq, self.nonce);
        if self.tx_stamps {
            wire::want_follow_up_on_ask(&mut frame);
        } else {
            wire::want_stamps(&mut frame);
        }
        gate.pass().await;
        let sent = Instant::now();
        let t1 = unix_now_ns();
        let mut stream = socket
            .connect(self.addr)
            .await
            .map_err(|e| io_err(&format!("connect to {}", self.addr), e))?;
        let connected = unix_now_ns();
        stream
            .write_all(&frame)
            .await
            .map_err(|e| io_err("send", e))?;
        let rx = read_stamped(&stream, &mut frame)
            .await
            .map_err(|e| io_err("receive", e))?;
        let received = Instant::now();
        let rx = clean(stream.as_fd(), rx);
        let handshake = self.tap.take(&stream, self.addr, (t1, connected)).rtt();
        let h = Header::decode(&frame, MAX_TCP_FRAME)
            .map_err(|e| ProbeError::protocol(bad_reply(&e)))?;
        if h.kind != Kind::Response || h.nonce != self.nonce || h.seq != seq {
            reset(&stream);
            return Err(ProbeError::protocol(
                "bad reply: not the response to this request",
            ));
        }
        let mut t1k = None;
        if tx_on {
            // The stamp with a copy of the packet's headers, cut short.
            let mut buf = [0u8; 128];
            for _ in 0..4 {
                match prober_sys::rx::recv_tx_stamp(stream.as_fd(), &mut buf) {
                    Ok((_, Some(at))) => t1k = Some(at),
                    Ok((_, None)) => {}
                    Err(_) => break,
                }
            }
        }
        // The follow-up comes once asked (or, from an older responder,
        // right behind the response); the close is not timed, so waiting
        // for it costs the RTT nothing.
        let mut send = None;
        if tx_on && wire::follow_up_promised(&frame) {
            if wire::waits_for_ask(&frame) {
                let mut ask = Vec::with_capacity(wire::ASK_LEN);
                wire::encode_ask(&mut ask, seq, self.nonce);
                let _ = stream.write_all(&ask).await;
            }
            let mut f = [0u8; wire::FOLLOW_UP_LEN];
            // A round trip after the ask: twice the RTT covers it.
            let rtt = received.saturating_duration_since(sent);
            let until = (Instant::now() + FOLLOW_UP_WAIT + 2 * rtt).min(limit);
            if let Ok(Ok(_)) = tokio::time::timeout_at(until, read_stamped(&stream, &mut f)).await
                && let Ok(fh) = Header::decode(&f, MAX_TCP_FRAME)
                && fh.kind == Kind::FollowUp
                && fh.nonce == self.nonce
                && fh.seq == seq
            {
                send = wire::follow_up_send(&f);
            }
        }
        reset(&stream);
        let dwell = Duration::from_nanos(h.dwell_ns);
        // Without the handshake's stamps (no CAP_NET_RAW, a retransmitted
        // SYN, the tap missed it) t1k − t1 would hold the handshake as
        // well, and the split would look complete with the handshake
        // counted as client send: leave the parts t1k gives unknown.
        let t1k = t1k.filter(|_| handshake.is_some());
        let stamps = prober_core::Stamps {
            t1: Some(t1),
            t1k,
            t4k: rx.t4k,
            t4: Some(rx.t4),
            responder: Some(prober_core::ResponderTimes {
                wake: wire::responder_wake(&frame),
                dwell: Some(h.dwell_ns),
                send,
                ..Default::default()
            }),
            kernel_peer: false,
            handshake,
        };
        Ok(Reply {
            sent,
            received,
            server_dwell: Some(dwell),
            rx_wake: prober_sys::rx::wake_ns(rx.t4k, rx.t4).map(Duration::from_nanos),
            bytes: self.size,
            ttl: None,
            stamps,
            app: Default::default(),
        })
    }
}
/// A reply that is not a prober frame, said with what to do: a peer that
/// is not `prober serve` answers in its own format (an HTTP server, say).
fn bad_reply(e: &crate::wire::FrameError) -> String {
    match e {
        crate::wire::FrameError::BadMagic => format!(
            "bad reply: {e}: is the peer `prober serve`? tcp-connect:// times the handshake of any TCP server"
        ),
        _ => format!("bad reply: {e}"),
    }
}

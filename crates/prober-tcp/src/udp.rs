//! `udp://host:port`: datagram request/response matched by seq and nonce.

use std::io;
use std::net::SocketAddr;

use prober_core::protocol::Marks;
use std::os::fd::AsFd;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::Interest;

use prober_core::{Anomalies, ErrorKind, Gate, Matcher, Probe, ProbeError, Reply, Waiter};
use prober_sys::busy::{Reader, SpinThread, Step};
use tokio::net::UdpSocket;
use tokio::time::Instant;

use crate::reader::{Arrival, Got, RxStamp, await_got, recv_stamped};
use prober_net::follow::{
    Cadence, FOLLOW_UP_MARGIN, FollowUps, INTERLEAVED_WAIT, settle_interleaved,
};
use socket2::SockRef;
use tokio_util::task::AbortOnDropHandle;

use crate::wire::{self, Header, Kind, MAX_UDP_FRAME};

/// UDP request/response over one connected socket. Late, duplicate and
/// reordered replies are counted; datagrams from another run (wrong nonce)
/// or that are not responses are ignored. An ICMP port unreachable fails the
/// probes waiting at that moment with "connection refused".
#[derive(Debug)]
pub struct UdpProbe {
    socket: Arc<UdpSocket>,
    size: usize,
    nonce: u64,
    matcher: Arc<Matcher<Arrival>>,
    /// Kernel transmit stamps by seq, filed from the error queue.
    tx: Arc<TxStamps>,
    /// The responder send parts (t3k − t3) that follow-up frames brought.
    follow: Arc<FollowUps>,
    /// The run's per-probe timeout.
    timeout: Duration,
    /// Ask the responder for its transmit stamp in a follow-up frame...
    ask_follow_up: bool,
    /// ... or interleaved, while requests come often enough.
    cadence: Cadence,
    /// Adaptive receive's budget (`--receive adaptive`); `None`: park.
    spin: Option<prober_core::spin::SpinBudget>,
    _reader: Reader,
}

/// This probe's transmit stamps: whether the kernel gives them, and those
/// read from the error queue until their probes take them.
#[derive(Debug, Default)]
struct TxStamps {
    on: bool,
    kept: prober_sys::rx::TxStamps,
    /// A probe that finds its stamp missing drains too, beside the
    /// reader's drain.
    draining: prober_sys::rx::DrainLock,
}

impl TxStamps {
    fn take(&self, seq: u64) -> Option<u64> {
        self.kept.take(seq)
    }

    /// Reads the socket's error queue without blocking and files every
    /// transmit stamp of our requests (found by the frame's magic, seq and
    /// nonce in the looped-back packet).
    fn drain(&self, fd: std::os::fd::BorrowedFd<'_>, nonce: u64) {
        if !self.on {
            return;
        }
        let _draining = self.draining.hold();
        let mut buf = [0u8; 512];
        for _ in 0..64 {
            let Ok((n, Some(t1k))) = prober_sys::rx::recv_tx_stamp(fd, &mut buf) else {
                break;
            };
            let frame = &buf[..n.min(buf.len())];
            let Some(at) = frame.windows(4).position(|w| w == wire::MAGIC) else {
                continue;
            };
            if let Ok(h) = Header::decode(&frame[at..], MAX_UDP_FRAME)
                && h.nonce == nonce
                && h.kind == Kind::Request
            {
                self.kept.put(h.seq, t1k);
            }
        }
    }
}

impl UdpProbe {
    /// Sets the run's per-probe timeout (default 1 s), which bounds the
    /// wait for a follow-up frame.
    #[must_use]
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Receives replies as `receive` says: with `adaptive`, each probe polls
    /// the socket for up to its spin budget after the send before it parks.
    /// No effect with busy-poll, whose thread already spins.
    #[must_use]
    pub fn with_receive(mut self, receive: &prober_core::spin::Receive) -> Self {
        if matches!(self._reader, Reader::Task(_)) {
            self.spin = receive.budget();
        }
        self
    }

    /// Polls the socket without blocking until `waiter` has its reply or
    /// the spin budget runs out; replies read here go through the same
    /// matcher as the reader task's. The thread does nothing else
    /// meanwhile: that is the point, and why the budget is small.
    fn spin_for_reply(&self, budget: &prober_core::spin::SpinBudget, waiter: &Waiter<Arrival>) {
        thread_local! {
            // One buffer per thread, not an allocation per probe.
            static BUF: std::cell::RefCell<Vec<u8>> =
                std::cell::RefCell::new(vec![0u8; crate::wire::MAX_UDP_FRAME + 1]);
        }
        let spun = BUF.with_borrow_mut(|all| {
            // One byte over the frame size, as the reader task reads: a
            // longer datagram is told from one that fits.
            let buf = &mut all[..(self.size + 1).min(crate::wire::MAX_UDP_FRAME + 1)];
            budget.spin(|| {
                match recv_stamped(self.socket.as_fd(), buf) {
                    Ok((n, rx)) => on_datagram(
                        &buf[..n],
                        Instant::now(),
                        rx,
                        &self.matcher,
                        &self.follow,
                        self.nonce,
                    ),
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                    Err(e) => on_error(&e, &self.matcher),
                }
                waiter.is_answered()
            })
        });
        if let Some((used, caught)) = spun {
            self.matcher.count_spin(used, caught);
        }
    }

    /// Binds an ephemeral port of `addr`'s family, connects it to `addr` and
    /// starts the receive loop.
    ///
    /// # Errors
    /// If the socket cannot be bound or connected.
    pub async fn connect(addr: SocketAddr, size: usize) -> io::Result<Self> {
        Self::connect_with(addr, size, false).await
    }

    /// As [`UdpProbe::connect`]; with `busy_poll` replies are read by a
    /// thread spinning on the socket, which uses a core.
    ///
    /// # Errors
    /// If the socket cannot be bound or connected, or the thread started.
    pub async fn connect_with(addr: SocketAddr, size: usize, busy_poll: bool) -> io::Result<Self> {
        Self::connect_stamped(addr, size, busy_poll, true, &Marks::default()).await
    }

    /// As [`UdpProbe::connect_with`]; `tx_stamps` asks the kernel for
    /// transmit stamps (the client send part of the split), and `marks`
    /// say where and how its datagrams leave.
    ///
    /// # Errors
    /// If the socket cannot be bound or connected, or the thread started.
    pub async fn connect_stamped(
        addr: SocketAddr,
        size: usize,
        busy_poll: bool,
        tx_stamps: bool,
        marks: &Marks,
    ) -> io::Result<Self> {
        let socket = UdpSocket::bind(prober_sys::mark::bind_addr(marks, addr.is_ipv6())).await?;
        prober_sys::mark::apply(&socket, addr.is_ipv6(), marks)?;
        socket.connect(addr).await?;
        // Kernel receive timestamps, for the receive wake-up (`rx_wake`),
        // and transmit stamps for the client send part, where the kernel has
        // them (none is no error: that part stays unknown).
        prober_sys::rx::enable_timestamps(socket.as_fd())?;
        let follow = Arc::new(FollowUps::default());
        let tx = Arc::new(TxStamps {
            on: tx_stamps && prober_sys::rx::tx_timestamps_or_notice(socket.as_fd(), "udp"),
            ..TxStamps::default()
        });
        let socket = Arc::new(socket);
        let nonce = fastrand::u64(..);
        let matcher = Matcher::new();
        // Replies are as long as requests; one more byte shows a longer one.
        let buf = vec![0u8; size + 1];
        let reader = if busy_poll {
            let std_sock: std::net::UdpSocket = SockRef::from(&*socket).try_clone()?.into();
            let m = Arc::clone(&matcher);
            let f = Arc::clone(&follow);
            let mut buf = buf;
            Reader::Spin(SpinThread::spawn(
                "prober-udp-poll",
                move || match recv_stamped(std_sock.as_fd(), &mut buf) {
                    Ok((n, rx)) => {
                        on_datagram(&buf[..n], Instant::now(), rx, &m, &f, nonce);
                        Step::Busy
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => Step::Idle,
                    Err(e) => {
                        on_error(&e, &m);
                        Step::Busy
                    }
                },
            )?)
        } else {
            let task = tokio::spawn(read_replies(
                Arc::clone(&socket),
                Arc::clone(&matcher),
                Arc::clone(&tx),
                Arc::clone(&follow),
                nonce,
                buf,
            ));
            Reader::Task(AbortOnDropHandle::new(task))
        };
        Ok(Self {
            socket,
            size,
            nonce,
            matcher,
            tx,
            follow,
            timeout: Duration::from_secs(1),
            ask_follow_up: tx_stamps,
            cadence: Cadence::default(),
            spin: None,
            _reader: reader,
        })
    }
}

fn on_datagram(
    buf: &[u8],
    received: Instant,
    rx: RxStamp,
    matcher: &Matcher<Arrival>,
    follow: &FollowUps,
    nonce: u64,
) {
    match Header::decode(buf, MAX_UDP_FRAME) {
        Ok(h)
            if h.kind == Kind::FollowUp && h.nonce == nonce && buf.len() == wire::FOLLOW_UP_LEN =>
        {
            follow.put(h.seq, wire::follow_up_send(buf));
        }
        Ok(h) if h.kind == Kind::Response && h.nonce == nonce && h.len as usize == buf.len() => {
            let got = Got {
                received,
                dwell: Duration::from_nanos(h.dwell_ns),
                rx,
                responder_wake: wire::responder_wake(buf),
                follow_up: wire::follow_up_promised(buf),
                // Datagrams are never merged: follow-ups come unasked, or
                // interleaved.
                ask: false,
                interleaved: wire::interleaved(buf),
            };
            matcher.deliver(h.seq, Ok(got));
            // An earlier response's transmit stamp, interleaved: after the
            // delivery, so that a probe waiting on both wakes once.
            if let Some((seq, send)) = wire::carried(buf) {
                follow.put(seq, send);
            }
        }
        // Ours (our nonce) but not what a reply can be: altered on the way.
        Ok(h) if h.nonce == nonce => {
            tracing::debug!(seq = h.seq, len = buf.len(), kind = %h.kind, "a corrupt reply");
            matcher.count_corrupt();
        }
        Ok(h) => tracing::debug!(
            seq = h.seq,
            len = buf.len(),
            "ignoring a datagram of another run"
        ),
        // Our socket is connected to the responder: a datagram that is not
        // a frame came from it, altered on the way.
        Err(error) => {
            tracing::debug!(%error, "a corrupt reply");
            matcher.count_corrupt();
        }
    }
}

fn on_error(e: &io::Error, matcher: &Matcher<Arrival>) {
    let err = if e.kind() == io::ErrorKind::ConnectionRefused {
        ProbeError::new(
            ErrorKind::Refused,
            "connection refused (ICMP port unreachable)",
        )
    } else {
        ProbeError::io("receive", e)
    };
    matcher.fail_all(|| Err(err.clone()));
}

async fn read_replies(
    socket: Arc<UdpSocket>,
    matcher: Arc<Matcher<Arrival>>,
    tx: Arc<TxStamps>,
    follow: Arc<FollowUps>,
    nonce: u64,
    mut buf: Vec<u8>,
) {
    loop {
        // ERROR too: an ICMP port unreachable makes the socket report
        // POLLERR alone, which READABLE by itself does not wake on here; and
        // transmit stamps wait on the error queue. A reply is read first and
        // the error queue only when no reply waits: a look at the error
        // queue before the reply is a syscall between the reply's arrival
        // and its receive time, in every RTT (the stamp itself was raised
        // inside the send, so the wake it caused has taken it by then;
        // `probe_at` takes a late one).
        let read = socket
            .async_io(Interest::READABLE | Interest::ERROR, || match recv_stamped(
                socket.as_fd(),
                &mut buf,
            ) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    tx.drain(socket.as_fd(), nonce);
                    Err(e)
                }
                other => other,
            })
            .await;
        match read {
            Ok((n, rx)) => on_datagram(&buf[..n], Instant::now(), rx, &matcher, &follow, nonce),
            Err(e) => {
                on_error(&e, &matcher);
                if e.kind() != io::ErrorKind::ConnectionRefused {
                    // Keep the loop from spinning on a persistent error.
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            }
        }
    }
}

impl Probe for UdpProbe {
    async fn probe_at(&self, seq: u64, gate: Gate) -> Result<Reply, ProbeError> {
        // The runner's timeout started no earlier than this; waiting for a
        // follow-up must not turn an answered probe into a timeout.
        let limit = Instant::now() + self.timeout.saturating_sub(FOLLOW_UP_MARGIN);
        let mut frame = Vec::with_capacity(self.size);
        wire::encode_request(&mut frame, self.size, seq, self.nonce);
        // The responder's transmit stamp too, unless transmit stamps are
        // off (--no-tx-stamps).
        if self.ask_follow_up && self.cadence.interleave(Instant::now()) {
            wire::want_interleaved(&mut frame);
        } else if self.ask_follow_up {
            wire::want_follow_up(&mut frame);
        } else {
            wire::want_stamps(&mut frame);
        }
        // Stamps of probes that got no reply count against the receive
        // buffer: take them before each send so they never pile up.
        self.tx.drain(self.socket.as_fd(), self.nonce);
        let mut waiter = self.matcher.register(seq);
        gate.pass().await;
        let sent = Instant::now();
        let t1 = prober_core::clock::unix_now_ns();
        match self.socket.send(&frame).await {
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => {
                return Err(ProbeError::new(
                    ErrorKind::Refused,
                    "connection refused (ICMP port unreachable)",
                ));
            }
            Err(e) => return Err(ProbeError::io("send", &e)),
        }
        // On loopback on this 2-vCPU VM the send itself takes 30-130 µs
        // (waking the responder's idle vCPU is an IPI inside it), long
        // enough for the reply to be waiting when the spin starts: a spin
        // saves the wake-up only where the reply takes longer than the send.
        if let Some(budget) = &self.spin {
            self.spin_for_reply(budget, &waiter);
        }
        let (mut reply, got) = await_got(&mut waiter, sent, t1, self.size).await?;
        if let Some(budget) = &self.spin {
            budget.record(reply.rtt());
        }
        // Filed by the reader's wake on the stamp; if that wake has not
        // come yet, read the error queue here.
        reply.stamps.t1k = self.tx.take(seq).or_else(|| {
            self.tx.drain(self.socket.as_fd(), self.nonce);
            self.tx.take(seq)
        });
        // Interleaved, the transmit stamp comes later: `settle`.
        if got.follow_up
            && !got.interleaved
            && let Some(r) = reply.stamps.responder.as_mut()
        {
            r.send = self.follow.wait(seq, limit, Duration::ZERO).await;
        }
        Ok(reply)
    }

    async fn settle(&self, seq: u64, reply: Reply) -> Reply {
        settle_interleaved(&self.follow, seq, reply, INTERLEAVED_WAIT, || async {
            let mut ask = Vec::new();
            wire::encode_ask(&mut ask, seq, self.nonce);
            // Without waiting: a full send buffer leaves the split partial
            // rather than holding the sample.
            self.socket.try_send(&ask).is_ok()
        })
        .await
    }

    fn anomalies(&self) -> Anomalies {
        self.matcher.anomalies()
    }

    fn source(&self) -> Option<std::net::SocketAddr> {
        self.socket.local_addr().ok()
    }
}

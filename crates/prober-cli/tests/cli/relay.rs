//! An impairment relay, in place of netem (which these machines do not
//! have): it sits between `prober run` and `prober serve`, forwards
//! requests as they come, and impairs the replies.
//!
//! UDP ([`Relay`]): a fixed delay plus a jitter (uniform or Pareto), loss
//! in bursts (Gilbert-Elliott), every k-th reply dropped, duplicated, held
//! back behind the next (reordered) or corrupted, plus a blackhole (replies
//! dropped) or a stall (replies held and then released) for a span of
//! time. At most one impairment applies to a reply, in that order, and the
//! relay counts each it applied (and logs the delays and loss bursts it
//! drew), so a test knows exactly what prober should report.
//!
//! TCP ([`TcpRelay`]): a byte stream cannot lose or reorder bytes, so the
//! replies are delayed (in order), stalled for a span, or the connections
//! are closed at a moment.
//!
//! Random draws come from a seed that the relay prints when it starts.

use std::collections::BinaryHeap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

/// What the relay does to replies; `None` and zero leave them alone.
#[derive(Debug, Clone, Default)]
pub(crate) struct Impair {
    pub(crate) delay: Duration,
    pub(crate) drop_every: Option<u64>,
    pub(crate) duplicate_every: Option<u64>,
    pub(crate) reorder_every: Option<u64>,
    pub(crate) corrupt_every: Option<u64>,
    /// Replies dropped from `start` after the first request, for `len`.
    pub(crate) blackhole: Option<(Duration, Duration)>,
    /// Replies held from `start` after the first request, for `len`, then
    /// released together.
    pub(crate) stall: Option<(Duration, Duration)>,
    /// A random delay added to `delay`, drawn per reply.
    pub(crate) jitter: Option<Jitter>,
    /// Replies lost in bursts.
    pub(crate) loss: Option<GilbertElliott>,
    /// The seed of every random draw.
    pub(crate) seed: u64,
}

/// A random extra delay.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Jitter {
    /// Uniform in `0..max`.
    Uniform(Duration),
    /// Pareto with minimum `scale` and tail index `shape` (a heavy tail:
    /// P(X > x) = (scale / x)^shape).
    Pareto { scale: Duration, shape: f64 },
}

/// The Gilbert-Elliott model of bursty loss in its simple (Gilbert) form:
/// a reply is lost while the channel is Bad; before each reply the channel
/// goes from Good to Bad with probability `p`, and back with `r` (mean
/// burst length 1/r).
#[derive(Debug, Clone, Copy)]
pub(crate) struct GilbertElliott {
    pub(crate) p: f64,
    pub(crate) r: f64,
}

/// SplitMix64: small, seeded, and the same on every machine.
pub(crate) struct Rng(pub(crate) u64);

impl Rng {
    pub(crate) fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in (0, 1].
    pub(crate) fn unit(&mut self) -> f64 {
        ((self.next_u64() >> 11) + 1) as f64 / (1u64 << 53) as f64
    }
}

impl Jitter {
    fn draw(self, rng: &mut Rng) -> Duration {
        match self {
            Self::Uniform(max) => max.mul_f64(1.0 - rng.unit()),
            Self::Pareto { scale, shape } => scale.mul_f64(rng.unit().powf(-1.0 / shape)),
        }
    }
}

/// What the relay did, reply by reply.
#[derive(Debug, Default)]
pub(crate) struct Counts {
    pub(crate) replies: AtomicU64,
    pub(crate) dropped: AtomicU64,
    pub(crate) duplicated: AtomicU64,
    pub(crate) reordered: AtomicU64,
    pub(crate) corrupted: AtomicU64,
    pub(crate) blackholed: AtomicU64,
    pub(crate) stalled: AtomicU64,
    /// Replies lost to the Gilbert-Elliott model.
    pub(crate) lost: AtomicU64,
    /// The extra delay drawn for each reply, in order.
    pub(crate) jitters: Mutex<Vec<Duration>>,
    /// How long each reply was actually held, from its arrival to its
    /// send, by its order of arrival: the draw plus the relay's own
    /// lateness (a busy machine wakes its threads late).
    pub(crate) held: Mutex<Vec<(u64, Duration)>>,
    /// The length of each loss burst, in order (the last may be open).
    pub(crate) bursts: Mutex<Vec<u64>>,
}

impl Counts {
    pub(crate) fn get(a: &AtomicU64) -> u64 {
        a.load(Ordering::Relaxed)
    }
}

pub(crate) struct Relay {
    pub(crate) addr: SocketAddr,
    pub(crate) counts: Arc<Counts>,
    stop: Arc<AtomicBool>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

/// A reply due at a time; the heap pops the earliest first, in order of
/// arrival among equals.
struct Due(Instant, u64, Vec<u8>, Instant);

impl PartialEq for Due {
    fn eq(&self, o: &Self) -> bool {
        (self.0, self.1) == (o.0, o.1)
    }
}
impl Eq for Due {}
impl PartialOrd for Due {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Due {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        (o.0, o.1).cmp(&(self.0, self.1))
    }
}

impl Relay {
    /// A relay on loopback to the UDP responder at `upstream`.
    pub(crate) fn start(upstream: &str, impair: Impair) -> Self {
        eprintln!("udp relay to {upstream}: {impair:?}");
        let down = UdpSocket::bind("127.0.0.1:0").unwrap();
        let up = UdpSocket::bind("127.0.0.1:0").unwrap();
        up.connect(upstream).unwrap();
        for s in [&down, &up] {
            s.set_read_timeout(Some(Duration::from_millis(20))).unwrap();
        }
        let addr = down.local_addr().unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let counts = Arc::new(Counts::default());
        let client: Arc<Mutex<Option<SocketAddr>>> = Arc::default();
        let first: Arc<Mutex<Option<Instant>>> = Arc::default();
        let (tx, rx) = mpsc::channel::<Due>();
        let mut threads = Vec::new();
        // Requests: client → responder, as they come.
        {
            let (down, up) = (down.try_clone().unwrap(), up.try_clone().unwrap());
            let (stop, client, first) =
                (Arc::clone(&stop), Arc::clone(&client), Arc::clone(&first));
            threads.push(std::thread::spawn(move || {
                let mut buf = vec![0u8; 65_536];
                while !stop.load(Ordering::Relaxed) {
                    if let Ok((n, from)) = down.recv_from(&mut buf) {
                        *client.lock().unwrap() = Some(from);
                        first.lock().unwrap().get_or_insert_with(Instant::now);
                        let _ = up.send(&buf[..n]);
                    }
                }
            }));
        }
        // Replies: impaired, then queued by when they are due.
        {
            let (stop, counts, first) =
                (Arc::clone(&stop), Arc::clone(&counts), Arc::clone(&first));
            threads.push(std::thread::spawn(move || {
                let mut buf = vec![0u8; 65_536];
                let mut n = 0u64;
                let mut order = 0u64;
                let mut held: Option<Vec<u8>> = None;
                let mut rng = Rng(impair.seed);
                let mut bad = false;
                let hit = |k: Option<u64>, n: u64| k.is_some_and(|k| n.is_multiple_of(k));
                while !stop.load(Ordering::Relaxed) {
                    let Ok(len) = up.recv(&mut buf) else { continue };
                    let now = Instant::now();
                    n += 1;
                    counts.replies.fetch_add(1, Ordering::Relaxed);
                    let since = first.lock().unwrap().map_or(Duration::ZERO, |f| now - f);
                    let within = |w: Option<(Duration, Duration)>| {
                        w.is_some_and(|(start, len)| since >= start && since < start + len)
                    };
                    let mut reply = buf[..len].to_vec();
                    let mut due = now + impair.delay;
                    if let Some(j) = impair.jitter {
                        let extra = j.draw(&mut rng);
                        counts.jitters.lock().unwrap().push(extra);
                        due += extra;
                    }
                    if let Some(ge) = impair.loss {
                        let was_bad = bad;
                        bad = if bad {
                            rng.unit() > ge.r
                        } else {
                            rng.unit() <= ge.p
                        };
                        if bad {
                            let mut bursts = counts.bursts.lock().unwrap();
                            if was_bad {
                                *bursts.last_mut().unwrap() += 1;
                            } else {
                                bursts.push(1);
                            }
                        }
                    }
                    let mut copies = 1;
                    let mut corrupted = false;
                    if within(impair.blackhole) {
                        counts.blackholed.fetch_add(1, Ordering::Relaxed);
                        continue;
                    } else if bad {
                        counts.lost.fetch_add(1, Ordering::Relaxed);
                        continue;
                    } else if let Some((start, len)) = impair.stall.filter(|_| within(impair.stall))
                    {
                        counts.stalled.fetch_add(1, Ordering::Relaxed);
                        due = due.max(now - since + start + len);
                    } else if hit(impair.drop_every, n) {
                        counts.dropped.fetch_add(1, Ordering::Relaxed);
                        continue;
                    } else if hit(impair.duplicate_every, n) {
                        counts.duplicated.fetch_add(1, Ordering::Relaxed);
                        copies = 2;
                    } else if hit(impair.reorder_every, n) && held.is_none() {
                        held = Some(reply);
                        continue;
                    } else if hit(impair.corrupt_every, n) {
                        counts.corrupted.fetch_add(1, Ordering::Relaxed);
                        reply[0] ^= 0xff;
                        corrupted = true;
                    }
                    for _ in 0..copies {
                        order += 1;
                        let _ = tx.send(Due(due, order, reply.clone(), now));
                    }
                    // The held reply goes out right behind this one: a
                    // reorder, as the client sees it, if this one reached it.
                    if let Some(h) = held.take() {
                        if !corrupted {
                            counts.reordered.fetch_add(1, Ordering::Relaxed);
                        }
                        order += 1;
                        let _ = tx.send(Due(due, order, h, now));
                    }
                }
            }));
        }
        // Sending replies when they are due.
        {
            let (stop, client, counts) =
                (Arc::clone(&stop), Arc::clone(&client), Arc::clone(&counts));
            threads.push(std::thread::spawn(move || {
                let mut queue = BinaryHeap::new();
                while !stop.load(Ordering::Relaxed) {
                    let wait = queue.peek().map_or(Duration::from_millis(20), |d: &Due| {
                        d.0.saturating_duration_since(Instant::now())
                    });
                    match rx.recv_timeout(wait) {
                        Ok(d) => queue.push(d),
                        Err(mpsc::RecvTimeoutError::Timeout) => {}
                        Err(mpsc::RecvTimeoutError::Disconnected) => break,
                    }
                    let now = Instant::now();
                    while queue.peek().is_some_and(|d| d.0 <= now) {
                        let d = queue.pop().unwrap();
                        if let Some(to) = *client.lock().unwrap() {
                            let _ = down.send_to(&d.2, to);
                            counts.held.lock().unwrap().push((d.1, d.3.elapsed()));
                        }
                    }
                }
            }));
        }
        Self {
            addr,
            counts,
            stop,
            threads,
        }
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// What the TCP relay does to the responder's bytes.
#[derive(Debug, Clone, Default)]
pub(crate) struct TcpImpair {
    /// Every chunk of reply bytes waits this long (in order).
    pub(crate) delay: Duration,
    /// Reply bytes held from `start` after the first connection, for `len`,
    /// then released.
    pub(crate) stall: Option<(Duration, Duration)>,
    /// Every open connection is closed (both ways) this long after the
    /// first one was accepted.
    pub(crate) reset_at: Option<Duration>,
}

/// A TCP relay: each accepted connection gets its own to the responder;
/// requests pass at once, replies as [`TcpImpair`] says.
pub(crate) struct TcpRelay {
    pub(crate) addr: SocketAddr,
    /// Connections accepted, and connections closed by `reset_at`.
    pub(crate) accepted: Arc<AtomicU64>,
    pub(crate) reset: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl TcpRelay {
    pub(crate) fn start(upstream: &str, impair: TcpImpair) -> Self {
        eprintln!("tcp relay to {upstream}: {impair:?}");
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let addr = listener.local_addr().unwrap();
        let upstream: SocketAddr = upstream.parse().unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let (accepted, reset) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
        let thread = {
            let (stop, accepted, reset) =
                (Arc::clone(&stop), Arc::clone(&accepted), Arc::clone(&reset));
            std::thread::spawn(move || {
                let mut first: Option<Instant> = None;
                let mut open: Vec<(TcpStream, TcpStream)> = Vec::new();
                let mut pumps = Vec::new();
                let mut reset_done = false;
                while !stop.load(Ordering::Relaxed) {
                    if let (Some(f), Some(at)) = (first, impair.reset_at)
                        && !reset_done
                        && f.elapsed() >= at
                    {
                        // Both ends see the connection closed, as after a
                        // middlebox dropped its state or a responder restart.
                        for (c, u) in open.drain(..) {
                            let _ = c.shutdown(std::net::Shutdown::Both);
                            let _ = u.shutdown(std::net::Shutdown::Both);
                            reset.fetch_add(1, Ordering::Relaxed);
                        }
                        reset_done = true;
                    }
                    let Ok((client, _)) = listener.accept() else {
                        std::thread::sleep(Duration::from_millis(1));
                        continue;
                    };
                    let started = *first.get_or_insert_with(Instant::now);
                    accepted.fetch_add(1, Ordering::Relaxed);
                    client.set_nonblocking(false).unwrap();
                    let Ok(up) = TcpStream::connect(upstream) else {
                        continue;
                    };
                    for s in [&client, &up] {
                        s.set_nodelay(true).unwrap();
                    }
                    open.push((client.try_clone().unwrap(), up.try_clone().unwrap()));
                    // Requests: as they come.
                    let (mut from, mut to) = (client.try_clone().unwrap(), up.try_clone().unwrap());
                    pumps.push(std::thread::spawn(move || {
                        let mut buf = vec![0u8; 65_536];
                        while let Ok(n @ 1..) = from.read(&mut buf) {
                            if to.write_all(&buf[..n]).is_err() {
                                break;
                            }
                        }
                        let _ = to.shutdown(std::net::Shutdown::Write);
                    }));
                    // Replies: read, then written when due, in order.
                    let (tx, rx) = mpsc::channel::<(Instant, Vec<u8>)>();
                    let mut from = up;
                    pumps.push(std::thread::spawn(move || {
                        let mut buf = vec![0u8; 65_536];
                        let mut last = Instant::now();
                        while let Ok(n @ 1..) = from.read(&mut buf) {
                            let now = Instant::now();
                            let since = now - started;
                            let mut due = now + impair.delay;
                            if let Some((start, len)) = impair.stall
                                && since >= start
                                && since < start + len
                            {
                                due = due.max(started + start + len);
                            }
                            last = last.max(due);
                            if tx.send((last, buf[..n].to_vec())).is_err() {
                                break;
                            }
                        }
                    }));
                    let mut to = client;
                    pumps.push(std::thread::spawn(move || {
                        while let Ok((due, bytes)) = rx.recv() {
                            std::thread::sleep(due.saturating_duration_since(Instant::now()));
                            if to.write_all(&bytes).is_err() {
                                break;
                            }
                        }
                        let _ = to.shutdown(std::net::Shutdown::Write);
                    }));
                }
                for (c, u) in open {
                    let _ = c.shutdown(std::net::Shutdown::Both);
                    let _ = u.shutdown(std::net::Shutdown::Both);
                }
                for p in pumps {
                    let _ = p.join();
                }
            })
        };
        Self {
            addr,
            accepted,
            reset,
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for TcpRelay {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

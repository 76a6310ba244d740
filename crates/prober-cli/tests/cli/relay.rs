//! An impairment relay for UDP, in place of netem (which these machines do
//! not have): it sits between `prober run` and `prober serve`, forwards
//! requests as they come, and impairs the replies: a delay, and every k-th
//! reply dropped, duplicated, held back behind the next (reordered) or
//! corrupted, plus a blackhole (replies dropped) or a stall (replies held
//! and then released) for a span of time. At most one impairment applies
//! to a reply, in that order, and the relay counts each it applied, so a
//! test knows exactly what prober should report.

use std::collections::BinaryHeap;
use std::net::{SocketAddr, UdpSocket};
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
struct Due(Instant, u64, Vec<u8>);

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
                    let mut copies = 1;
                    let mut corrupted = false;
                    if within(impair.blackhole) {
                        counts.blackholed.fetch_add(1, Ordering::Relaxed);
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
                        let _ = tx.send(Due(due, order, reply.clone()));
                    }
                    // The held reply goes out right behind this one: a
                    // reorder, as the client sees it, if this one reached it.
                    if let Some(h) = held.take() {
                        if !corrupted {
                            counts.reordered.fetch_add(1, Ordering::Relaxed);
                        }
                        order += 1;
                        let _ = tx.send(Due(due, order, h));
                    }
                }
            }));
        }
        // Sending replies when they are due.
        {
            let (stop, client) = (Arc::clone(&stop), Arc::clone(&client));
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

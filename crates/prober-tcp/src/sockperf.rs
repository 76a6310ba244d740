//! The server side of sockperf's protocol (`prober serve --sockperf ADDR`),
//! so that sockperf's own clients (`sockperf ping-pong`, `under-load`,
//! `throughput`) load prober's responder as they load `sockperf server`,
//! and the two can be compared the way sockperf's users compare servers.
//!
//! A message starts with a 14-byte header, big-endian: seq (u64), flags
//! (u16: 1 from a client, 2 asks for a reply, 4 warm-up) and length (u32,
//! the whole message, header included). As sockperf's server does, this
//! one answers a client's message that asks for a reply with the same
//! bytes and the client flag cleared, and answers nothing else; warm-up
//! messages are not answered. Over UDP a datagram is one message and its
//! length field must be the datagram's length, so an answer is never
//! longer than what came in. Over TCP (`sockperf --tcp`) the length field
//! frames the stream, and a length no message can have closes the
//! connection.

use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use prober_net::guard::{self, Gate, RateLimiter};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream, UdpSocket};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::ResponderConfig;
use crate::responder::{Held, READ_MAX, READ_MIN, accept_loop, consume, next_wait, timed_out};

/// The header's length: seq, flags and length, packed.
pub const HEADER_LEN: usize = 14;

/// The longest message: sockperf's own limit (the largest IPv4 UDP
/// payload).
pub const MAX_MESSAGE: usize = 65_507;

/// Flag: the message comes from a client.
pub const FLAG_CLIENT: u16 = 1;
/// Flag: the client asks for a reply.
pub const FLAG_PONG_REQUEST: u16 = 2;
/// Flag: a warm-up message, never answered.
pub const FLAG_WARMUP: u16 = 4;

/// The header's flags and length, if `msg` holds a whole header.
pub fn header(msg: &[u8]) -> Option<(u16, usize)> {
    let h = msg.get(..HEADER_LEN)?;
    let flags = u16::from_be_bytes([h[8], h[9]]);
    let len = u32::from_be_bytes([h[10], h[11], h[12], h[13]]) as usize;
    Some((flags, len))
}

/// What a whole message (`msg`, exactly its length field long) gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Answer with `msg` as it now is (the client flag cleared).
    Answer,
    /// A client's message that asks for no reply: counted, not answered.
    Count,
    /// Not a client's message, a warm-up, or malformed: not answered.
    Ignore,
}

/// Decides on one whole message, and turns it into its answer in place
/// when it gets one.
pub fn answer(msg: &mut [u8]) -> Verdict {
    let Some((flags, len)) = header(msg) else {
        return Verdict::Ignore;
    };
    if len != msg.len() || len > MAX_MESSAGE || flags & FLAG_CLIENT == 0 {
        return Verdict::Ignore;
    }
    if flags & FLAG_WARMUP != 0 {
        return Verdict::Ignore;
    }
    if flags & FLAG_PONG_REQUEST == 0 {
        return Verdict::Count;
    }
    msg[8..10].copy_from_slice(&(flags & !FLAG_CLIENT).to_be_bytes());
    Verdict::Answer
}

/// What a sockperf listener saw.
#[derive(Debug, Default)]
pub struct SockperfStats {
    /// Client messages taken (answered or only counted).
    pub received: AtomicU64,
    /// Of them, answered.
    pub answered: AtomicU64,
    /// Datagrams that were no client message of sockperf's.
    pub ignored: AtomicU64,
}

/// Answers sockperf's UDP clients on `socket` until `stop` is cancelled,
/// with the per-source rate limit of `cfg` (docs/security.md).
///
/// The socket is read by a blocking thread of its own, as sockperf's server
/// reads it, not by the runtime: under `sockperf throughput` (300,000
/// messages/s) the runtime's loop spent most of its time parking in epoll
/// and waking again, and used 0.28-0.30 cores where sockperf's server used
/// 0.21 for the same messages (BENCHMARKS.md).
///
/// # Errors
/// If the socket cannot be made blocking or the thread started.
pub async fn serve_sockperf_udp(
    socket: UdpSocket,
    cfg: ResponderConfig,
    stats: Arc<SockperfStats>,
    stop: CancellationToken,
) -> io::Result<()> {
    let socket = socket.into_std()?;
    socket.set_nonblocking(false)?;
    // How often the thread looks at `stop` when nothing comes.
    socket.set_read_timeout(Some(std::time::Duration::from_millis(100)))?;
    let stopped = Arc::new(AtomicBool::new(false));
    // Dropped with this future (a failed start elsewhere drops the task
    // without cancelling `stop`): the thread then ends as well, within one
    // read timeout, instead of holding the runtime's shutdown for ever.
    let _stop_thread = StopOnDrop(Arc::clone(&stopped));
    let watch = {
        let (stopped, stop) = (Arc::clone(&stopped), stop.clone());
        tokio::spawn(async move {
            stop.cancelled().await;
            stopped.store(true, Ordering::Relaxed);
        })
    };
    let thread = std::thread::Builder::new()
        .name("prober-sockperf".to_owned())
        .spawn(move || answer_all(&socket, &cfg, &stats, &stopped))?;
    // The thread ends within one read timeout of `stop`.
    let res = tokio::task::spawn_blocking(move || thread.join())
        .await
        .map_err(io::Error::other)?
        .map_err(|_| io::Error::other("the sockperf thread panicked"));
    watch.abort();
    res
}

/// Answers sockperf's TCP clients (`sockperf --tcp`) from `listener` until
/// `stop` is cancelled, within the TCP limits of `cfg` (connection caps,
/// request and idle timeouts, the buffer budget: docs/security.md).
///
/// On the runtime, one task a connection, as `tcp://` is served: a TCP
/// client waits for each answer, so the parking that the UDP thread avoids
/// under `throughput` does not pile up here.
///
/// # Errors
/// Only if accepting fails in a way that cannot be retried.
pub async fn serve_sockperf_tcp(
    listener: TcpListener,
    cfg: ResponderConfig,
    stats: Arc<SockperfStats>,
    stop: CancellationToken,
) -> io::Result<()> {
    let gate = Gate::new(cfg.limits, Arc::clone(&cfg.stats));
    accept_loop(
        &listener,
        &gate,
        "sockperf tcp",
        cfg.log_clients,
        &stop,
        |stream, _| {
            let (gate, stats) = (Arc::clone(&gate), Arc::clone(&stats));
            Some(async move { answer_stream(stream, &gate, &stats).await })
        },
    )
    .await
}

/// Serves one sockperf TCP client: every whole message of a read is
/// decided on, and the answers go back in one write.
async fn answer_stream(
    mut stream: TcpStream,
    gate: &Gate,
    stats: &SockperfStats,
) -> io::Result<()> {
    stream.set_nodelay(true)?;
    let limits = gate.limits();
    // Buffers grow only as bytes arrive, as for `tcp://`.
    let (mut acc, mut out): (Vec<u8>, Vec<u8>) = (Vec::new(), Vec::new());
    let mut chunk = vec![0u8; READ_MIN];
    let mut held = Held::new(gate);
    // As for `tcp://`: a whole message within the request timeout of the
    // connection's opening or of its first byte, then idle for at most the
    // idle timeout.
    let (mut since, mut served) = (Instant::now(), false);
    loop {
        let (limit, idle) = next_wait(limits, served, !acc.is_empty());
        let Ok(read) = tokio::time::timeout_at(since + limit, stream.read(&mut chunk)).await else {
            return Err(timed_out(gate, idle));
        };
        let n = match read {
            Ok(0) => return Ok(()),
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::ConnectionReset => return Ok(()),
            Err(e) => return Err(e),
        };
        let received = Instant::now();
        if acc.is_empty() {
            since = received;
        }
        acc.extend_from_slice(&chunk[..n]);
        if n == chunk.len() && chunk.len() < READ_MAX {
            chunk.resize(chunk.len() * 2, 0);
        }
        let (at, answers) = match answer_messages(&mut acc, &mut out, stats) {
            Ok(done) => done,
            Err((len, answers)) => {
                // The whole messages before it are answered first.
                if !out.is_empty() && stream.write_all(&out).await.is_ok() {
                    stats.answered.fetch_add(answers, Ordering::Relaxed);
                }
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("no sockperf message is {len} bytes long"),
                ));
            }
        };
        if at > 0 {
            served = true;
            since = received;
            consume(&mut acc, at);
        }
        if !out.is_empty() {
            stream.write_all(&out).await?;
            stats.answered.fetch_add(answers, Ordering::Relaxed);
            out.clear();
            if out.capacity() > READ_MAX {
                out.shrink_to(READ_MAX);
            }
        }
        if !held.set(acc.len()) {
            return Err(io::Error::other(
                "buffer budget for unfinished requests spent",
            ));
        }
    }
}

/// Decides on every whole message at the start of `stream` (a TCP
/// stream's unread bytes, framed by their length fields), appending the
/// answers to `out` and counting in `stats` what was received and ignored.
/// Returns the bytes the whole messages took and how many were answered.
///
/// # Errors
/// A length field no message can have (below the header's, above
/// [`MAX_MESSAGE`]): the stream cannot be framed past it. The error holds
/// that length and how many answers `out` got before it.
pub fn answer_messages(
    stream: &mut [u8],
    out: &mut Vec<u8>,
    stats: &SockperfStats,
) -> Result<(usize, u64), (usize, u64)> {
    let (mut at, mut answers) = (0, 0);
    while let Some((_, len)) = header(&stream[at..]) {
        if !(HEADER_LEN..=MAX_MESSAGE).contains(&len) {
            stats.ignored.fetch_add(1, Ordering::Relaxed);
            return Err((len, answers));
        }
        if stream.len() - at < len {
            break;
        }
        let msg = &mut stream[at..at + len];
        at += len;
        match answer(msg) {
            Verdict::Answer => {
                out.extend_from_slice(msg);
                answers += 1;
            }
            Verdict::Count => {}
            Verdict::Ignore => {
                stats.ignored.fetch_add(1, Ordering::Relaxed);
                continue;
            }
        }
        stats.received.fetch_add(1, Ordering::Relaxed);
    }
    Ok((at, answers))
}

/// Sets its flag when dropped.
struct StopOnDrop(Arc<AtomicBool>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// The blocking loop of [`serve_sockperf_udp`].
fn answer_all(
    socket: &std::net::UdpSocket,
    cfg: &ResponderConfig,
    stats: &SockperfStats,
    stopped: &AtomicBool,
) {
    let mut buf = vec![0u8; MAX_MESSAGE + 1];
    let mut limiter = RateLimiter::default();
    while !stopped.load(Ordering::Relaxed) {
        let (n, peer) = match socket.recv_from(&mut buf) {
            Ok(got) => got,
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock
                        | io::ErrorKind::TimedOut
                        | io::ErrorKind::Interrupted
                        // An ICMP error for an earlier answer.
                        | io::ErrorKind::ConnectionRefused
                ) =>
            {
                continue;
            }
            Err(error) => {
                tracing::warn!(%error, "sockperf receive failed");
                std::thread::sleep(std::time::Duration::from_millis(10));
                continue;
            }
        };
        let msg = &mut buf[..n];
        let verdict = answer(msg);
        if verdict == Verdict::Ignore {
            stats.ignored.fetch_add(1, Ordering::Relaxed);
            continue;
        }
        stats.received.fetch_add(1, Ordering::Relaxed);
        if verdict == Verdict::Count {
            continue;
        }
        let rate = cfg.limits.rate.for_source(peer.ip(), guard::DEFAULT_RATE);
        if !limiter.allow(peer.ip(), rate, std::time::Instant::now()) {
            cfg.stats.rate_limited.fetch_add(1, Ordering::Relaxed);
            continue;
        }
        match socket.send_to(msg, peer) {
            Ok(_) => {
                stats.answered.fetch_add(1, Ordering::Relaxed);
            }
            Err(error) => tracing::debug!(%peer, %error, "sockperf send failed"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(seq: u64, flags: u16, len: usize) -> Vec<u8> {
        let mut m = vec![0xab; len.max(HEADER_LEN)];
        m[..8].copy_from_slice(&seq.to_be_bytes());
        m[8..10].copy_from_slice(&flags.to_be_bytes());
        m[10..14].copy_from_slice(&u32::try_from(len).unwrap().to_be_bytes());
        m.truncate(len);
        m
    }

    #[test]
    fn answers_a_clients_pong_request_with_the_client_flag_cleared() {
        let mut m = message(7, FLAG_CLIENT | FLAG_PONG_REQUEST, 64);
        let before = m.clone();
        assert_eq!(answer(&mut m), Verdict::Answer);
        assert_eq!(header(&m), Some((FLAG_PONG_REQUEST, 64)));
        assert_eq!(m[..8], before[..8], "the seq is echoed");
        assert_eq!(m[14..], before[14..], "and the payload");
    }

    #[test]
    fn answers_nothing_else() {
        let cases = [
            (message(1, FLAG_CLIENT, 64), Verdict::Count),
            (message(1, FLAG_PONG_REQUEST, 64), Verdict::Ignore),
            (
                message(1, FLAG_CLIENT | FLAG_PONG_REQUEST | FLAG_WARMUP, 64),
                Verdict::Ignore,
            ),
            (
                message(1, FLAG_CLIENT | FLAG_PONG_REQUEST, 13),
                Verdict::Ignore,
            ),
        ];
        for (mut m, want) in cases {
            assert_eq!(answer(&mut m), want, "{m:?}");
        }
        // A length field that is not the datagram's: never an answer
        // longer (or shorter) than what came.
        let mut long = message(1, FLAG_CLIENT | FLAG_PONG_REQUEST, 64);
        long[10..14].copy_from_slice(&1000u32.to_be_bytes());
        assert_eq!(answer(&mut long), Verdict::Ignore);
        assert_eq!(answer(&mut []), Verdict::Ignore);
    }

    /// Over TCP the length field frames the stream: a message split across
    /// writes is answered once whole, pipelined messages each get their
    /// verdict (answers in order, in one write), and a length no message
    /// can have closes the connection.
    #[tokio::test]
    async fn tcp_messages_are_framed_by_their_length() {
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let stats = Arc::new(SockperfStats::default());
        let stop = CancellationToken::new();
        let server = tokio::spawn(serve_sockperf_tcp(
            listener,
            ResponderConfig::default(),
            Arc::clone(&stats),
            stop.clone(),
        ));
        let mut c = TcpStream::connect(addr).await.unwrap();
        let pong = FLAG_CLIENT | FLAG_PONG_REQUEST;
        let split = message(1, pong, 100);
        c.write_all(&split[..10]).await.unwrap();
        c.flush().await.unwrap();
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        c.write_all(&split[10..]).await.unwrap();
        let mut got = vec![0u8; 100];
        c.read_exact(&mut got).await.unwrap();
        let mut want = split.clone();
        want[8..10].copy_from_slice(&FLAG_PONG_REQUEST.to_be_bytes());
        assert_eq!(got, want);
        // No answer for a throughput message, a warm-up or a message that
        // is not a client's; answers for the two pong requests, in order.
        let batch = [
            message(2, FLAG_CLIENT, 30),
            message(3, pong, 20),
            message(4, pong | FLAG_WARMUP, 40),
            message(5, FLAG_PONG_REQUEST, 16),
            message(6, pong, 64),
        ]
        .concat();
        c.write_all(&batch).await.unwrap();
        let mut got = vec![0u8; 20 + 64];
        c.read_exact(&mut got).await.unwrap();
        assert_eq!(header(&got), Some((FLAG_PONG_REQUEST, 20)));
        assert_eq!(got[..8], 3u64.to_be_bytes());
        assert_eq!(header(&got[20..]), Some((FLAG_PONG_REQUEST, 64)));
        assert_eq!(got[20..28], 6u64.to_be_bytes());
        // A length below the header's: the stream cannot be framed. A pong
        // request before it in the same write is still answered.
        let mut bad = message(8, pong, 32);
        bad.extend_from_slice(&message(7, pong, 14)[..10]);
        bad.extend_from_slice(&[0, 0, 0, 5]);
        c.write_all(&bad).await.unwrap();
        let mut got = vec![0u8; 32];
        c.read_exact(&mut got).await.unwrap();
        assert_eq!(got[..8], 8u64.to_be_bytes());
        let mut rest = Vec::new();
        let closed =
            tokio::time::timeout(std::time::Duration::from_secs(5), c.read_to_end(&mut rest))
                .await
                .expect("closed in time");
        assert!(matches!(closed, Ok(0)), "{closed:?} {rest:?}");
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        assert_eq!(
            (
                get(&stats.received),
                get(&stats.answered),
                get(&stats.ignored)
            ),
            (5, 4, 3)
        );
        stop.cancel();
        server.await.unwrap().unwrap();
    }
}

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
//! longer than what came in.

use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use prober_net::guard::{self, RateLimiter};
use tokio::net::UdpSocket;
use tokio_util::sync::CancellationToken;

use crate::ResponderConfig;

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
}

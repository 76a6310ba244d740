//! gRPC probes: unary, bidirectional stream and health check, sharing one
//! reconnecting channel per target.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use prober_core::{
    Anomalies, ErrorKind, Gate, Matcher, MatcherSet, Probe, ProbeError, Reply, ResponderTimes,
};
use tokio::sync::{Mutex, mpsc};
use tokio::time::Instant;
use tokio_stream::wrappers::ReceiverStream;
use tokio_util::task::AbortOnDropHandle;
use tonic::transport::{Channel, Endpoint};
use tonic::{Code, Request, Status};
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;

use crate::pb::echo_client::EchoClient;
use crate::pb::{PingReply, PingRequest, SendTimeRequest};
use crate::stamped::StampedConnector;
use crate::tls::ClientTls;
use prober_core::clock::unix_now_ns;
use prober_net::follow::{
    Cadence, FOLLOW_UP_MARGIN, FOLLOW_UP_WAIT, FollowUps, ask_would_overlap, finish, interleaves,
    settle_interleaved,
};
use prober_net::stream::{ChannelStamps, WindowStamps};

use crate::error_chain;

/// First wait before reconnecting after a failed connect; doubles up to
/// [`MAX_BACKOFF`], with ±25% jitter so many probers do not reconnect in step.
pub const INITIAL_BACKOFF: Duration = Duration::from_millis(100);
/// Longest wait between reconnect attempts.
pub const MAX_BACKOFF: Duration = Duration::from_secs(2);
/// Requests queued on a stream before a probe waits to send.
const STREAM_QUEUE: usize = 1024;

/// Where and how a gRPC probe connects.
#[derive(Debug, Clone)]
pub struct ClientConfig {
    /// The resolved address to connect to.
    pub addr: SocketAddr,
    /// The host as the user wrote it: the TLS server name and `:authority`.
    pub host: String,
    /// TLS settings; `None` is plaintext HTTP/2.
    pub tls: Option<ClientTls>,
    /// Per-RPC deadline, sent to the server as `grpc-timeout`.
    pub timeout: Duration,
    /// Limit on establishing a connection (TCP and TLS).
    pub connect_timeout: Duration,
    /// Request payload bytes.
    pub size: usize,
    /// Ask the kernel for transmit stamps on the connection (the client send
    /// part of the split).
    pub tx_stamps: bool,
    /// How the connection waits for responses (`--receive`): with
    /// `adaptive`, its reads spin while a probe waits for its response
    /// (see [`prober_net::stream`]).
    pub receive: prober_core::spin::Receive,
    /// Keep a second connection once probes overlap (see [`GrpcProbe`]);
    /// off where they overlap on purpose (`-b`).
    pub spare: bool,
}

#[derive(Debug)]
struct ConnState {
    channel: Option<Channel>,
    connected_once: bool,
    backoff: Duration,
    retry_at: Option<Instant>,
    last_error: Option<String>,
}

/// One channel per target, re-established with jittered exponential backoff
/// after the connection fails.
#[derive(Debug)]
struct Conn {
    cfg: ClientConfig,
    state: Mutex<ConnState>,
    reconnects: AtomicU64,
    /// The connection's kernel stamps (see [`crate::stamped`]).
    stamps: Arc<ChannelStamps>,
    /// When the server's certificate expires, as last seen (`i64::MIN`:
    /// not yet, or no TLS).
    cert_not_after: Arc<std::sync::atomic::AtomicI64>,
    /// The responder's send parts (t3k − t3) by seq, as later replies
    /// carry them.
    follow: Arc<FollowUps>,
    /// Whether requests go out often enough for a later reply to carry
    /// a reply's send part; if not, the probe asks for it at once.
    cadence: Cadence,
    /// The server answers Echo: a new connection is warmed with one call.
    echo: bool,
    /// When the latest reply came, in ns since `since`.
    last_reply_ns: AtomicU64,
    /// The latest reply's RTT, and the gap before the latest request, ns.
    last_rtt_ns: AtomicU64,
    last_gap_ns: AtomicU64,
    since: Instant,
}

/// A probe that goes out within this long of the previous reply is back
/// to back ([`Conn::settle_runtime`]).
const BACK_TO_BACK: Duration = Duration::from_micros(100);

fn jitter(d: Duration) -> Duration {
    d.mul_f64(0.75 + fastrand::f64() * 0.5)
}

impl Conn {
    fn new(cfg: ClientConfig, echo: bool) -> Self {
        let state = ConnState {
            channel: None,
            connected_once: false,
            backoff: INITIAL_BACKOFF,
            retry_at: None,
            last_error: None,
        };
        let stamps = Arc::new(ChannelStamps::with_spin(cfg.receive.budget()));
        Self {
            cfg,
            state: Mutex::new(state),
            reconnects: AtomicU64::new(0),
            stamps,
            cert_not_after: Arc::new(std::sync::atomic::AtomicI64::new(i64::MIN)),
            follow: Arc::default(),
            cadence: Cadence::default(),
            echo,
            last_reply_ns: AtomicU64::new(u64::MAX),
            last_rtt_ns: AtomicU64::new(0),
            last_gap_ns: AtomicU64::new(0),
            since: Instant::now(),
        }
    }

    /// One Echo call (seq `u64::MAX`, outside the probes' numbers) on a
    /// new connection before its first probe, its outcome ignored. Until
    /// the server's SETTINGS and the ACK of the client's have come, a
    /// probe's first read can be those frames, and its t4k theirs: through
    /// a 4 ms relay, the first probe's network part read 3.1 ms.
    async fn warm(&self, channel: &Channel) {
        let mut client = EchoClient::new(channel.clone());
        let ping = PingRequest {
            seq: u64::MAX,
            client_send_unix_ns: unix_now_ns(),
            ..PingRequest::default()
        };
        // Part of connecting: no longer than a connect may take.
        let wait = self.cfg.timeout.min(self.cfg.connect_timeout);
        let _ = tokio::time::timeout(wait, client.ping(ping)).await;
    }

    /// Notes a reply to a request sent at `sent` that came at `at`.
    fn replied(&self, sent: Instant, at: Instant) {
        let ns = |d: Duration| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        self.last_reply_ns
            .store(ns(at - self.since), Ordering::Relaxed);
        self.last_rtt_ns.store(ns(at - sent), Ordering::Relaxed);
    }

    /// Notes a request going out now, and says whether the next reply
    /// should carry its reply's send part (interleaved) rather than the
    /// probe asking for it right after the reply. It asks when requests
    /// come more than 2.5 ms apart, and the ask's round trip (with a
    /// millisecond to spare) ends before the next request goes out: an
    /// ask open when a probe starts spoils that probe's stamps.
    fn interleave(&self) -> bool {
        let gap = self.cadence.gap(Instant::now());
        if let Some(gap) = gap {
            self.last_gap_ns.store(
                u64::try_from(gap.as_nanos()).unwrap_or(u64::MAX),
                Ordering::Relaxed,
            );
        }
        let rtt = Duration::from_nanos(self.last_rtt_ns.load(Ordering::Relaxed));
        interleaves(gap, rtt)
    }

    /// Back to back, lets the runtime's other ready tasks run before a
    /// probe's call goes out: the previous probe's sample was just handed
    /// to the collector. Those tasks ran inside the call's client send
    /// part, where the connection's write gives way once to the call's body
    /// ([`prober_net::stream`]'s coalescing). Still so after the runner
    /// stopped waking the lane for the carried send part: 11 rounds
    /// alternating, pinned, RTT p50 46.1 µs with the yield against 48.1
    /// without, client send 6.2 against 7.7 µs (BENCHMARKS.md).
    ///
    /// `prober run -i 0 -c 5000 grpc://…` against `prober serve`, 5 rounds
    /// alternating: client send p50 6.7–10.2 µs with this yield, 14.0–19.9
    /// µs without; RTT p50 59.6–67.5 µs against 67.5–73.3 (BENCHMARKS.md).
    /// Not at longer intervals: at 10 ms a yield added 15–30 µs of send
    /// lag, as the worker looks at its IO driver first. Over TCP and UDP,
    /// whose sends do not give way, the same yield (tried in the runner)
    /// made RTTs 5–10 µs longer.
    async fn settle_runtime(&self) {
        let last = self.last_reply_ns.load(Ordering::Relaxed);
        let now = u64::try_from(self.since.elapsed().as_nanos()).unwrap_or(u64::MAX);
        let back_to_back = u64::try_from(BACK_TO_BACK.as_nanos()).unwrap_or(u64::MAX);
        if now.checked_sub(last).is_some_and(|gap| gap < back_to_back) {
            tokio::task::yield_now().await;
        }
    }

    fn endpoint(&self) -> Result<Endpoint, Box<dyn std::error::Error + Send + Sync>> {
        let scheme = if self.cfg.tls.is_some() {
            "https"
        } else {
            "http"
        };
        let port = self.cfg.addr.port();
        let host = if self.cfg.host.contains(':') {
            format!("[{}]", self.cfg.host)
        } else {
            self.cfg.host.clone()
        };
        let origin: tonic::codegen::http::Uri = format!("{scheme}://{host}:{port}")
            .parse()
            .unwrap_or_else(|_| {
                format!("{scheme}://{}", self.cfg.addr)
                    .parse()
                    .expect("a socket address is a valid authority")
            });
        let mut ep = Endpoint::from_shared(format!("{scheme}://{}", self.cfg.addr))?
            .origin(origin)
            .tcp_nodelay(true)
            .connect_timeout(self.cfg.connect_timeout);
        if let Some(tls) = &self.cfg.tls {
            ep = tls.apply(ep, &self.cfg.host, Arc::clone(&self.cert_not_after))?;
        }
        Ok(ep)
    }

    async fn channel(&self) -> Result<Channel, ProbeError> {
        let mut st = self.state.lock().await;
        if let Some(ch) = &st.channel {
            return Ok(ch.clone());
        }
        if let Some(at) = st.retry_at
            && Instant::now() < at
        {
            let wait = at - Instant::now();
            let last = st.last_error.as_deref().unwrap_or("connection lost");
            let kind = if last.contains("is the peer a gRPC server?") {
                ErrorKind::Protocol
            } else {
                error_kind(last)
            };
            return Err(ProbeError::new(
                kind,
                format!("{last} (next attempt in {}ms)", wait.as_millis()),
            ));
        }
        let connector = StampedConnector {
            addr: self.cfg.addr,
            stamps: Arc::clone(&self.stamps),
            tx_stamps: self.cfg.tx_stamps,
        };
        let connected = match self.endpoint() {
            Ok(ep) => ep
                .connect_with_connector(connector)
                .await
                .map_err(Into::into),
            Err(e) => Err(e),
        };
        match connected {
            Ok(ch) => {
                if st.connected_once {
                    self.reconnects.fetch_add(1, Ordering::Relaxed);
                    tracing::info!(addr = %self.cfg.addr, "grpc reconnected");
                }
                st.connected_once = true;
                st.backoff = INITIAL_BACKOFF;
                st.retry_at = None;
                st.last_error = None;
                st.channel = Some(ch.clone());
                if self.echo {
                    self.warm(&ch).await;
                }
                Ok(ch)
            }
            Err(e) => {
                st.retry_at = Some(Instant::now() + jitter(st.backoff));
                st.backoff = (st.backoff * 2).min(MAX_BACKOFF);
                let e: &(dyn std::error::Error + 'static) = &*e;
                let mut msg = format!("connect to {}: {}", self.cfg.addr, error_chain(e));
                if self.cfg.tls.is_some()
                    && (msg.contains("InvalidContentType") || msg.contains("corrupt message"))
                {
                    // rustls read a plaintext HTTP/2 frame where a TLS record belongs.
                    msg = format!(
                        "connect to {}: the server does not speak TLS; try grpc:// instead of grpcs:// ({})",
                        self.cfg.addr,
                        error_chain(e)
                    );
                }
                st.last_error = Some(msg.clone());
                Err(ProbeError::new(error_kind(&msg), msg))
            }
        }
    }

    /// Drops the channel after a transport failure; the next probe reconnects.
    async fn broken(&self, why: &str) {
        let mut st = self.state.lock().await;
        if st.channel.take().is_some() {
            st.retry_at = Some(Instant::now() + jitter(st.backoff));
            st.last_error = Some(why.to_owned());
        }
    }

    /// Turns a failed RPC into a probe error; transport failures break the
    /// channel, a deadline the server reports is a timeout.
    async fn status_error(&self, status: &Status) -> ProbeError {
        // tonic enforces grpc-timeout on the client too, and reports its own
        // expiry as CANCELLED "Timeout expired" rather than DEADLINE_EXCEEDED.
        let client_deadline =
            status.code() == Code::Cancelled && status.message() == "Timeout expired";
        match status.code() {
            Code::DeadlineExceeded => {
                ProbeError::timeout(format!("deadline exceeded: {}", status.message()))
            }
            _ if client_deadline => ProbeError::timeout("deadline exceeded (client)"),
            Code::Unavailable | Code::Unknown | Code::Internal | Code::Cancelled => {
                // The status's message and its sources, not its Debug-like
                // Display (`code: '…', message: "…", source: tonic::…(…)`).
                let mut msg = format!("{:?}: {}", status.code(), status.message());
                if let Some(source) = std::error::Error::source(status) {
                    let chain = error_chain(source);
                    if !msg.contains(&chain) {
                        msg.push_str(": ");
                        msg.push_str(&chain);
                    }
                }
                // The kind is read from the error itself, not from a hint.
                let mut kind = error_kind(&msg);
                if status.message().contains("h2 protocol error") && self.cfg.tls.is_none() {
                    // A peer that does not speak HTTP/2 (an HTTP/1 server).
                    kind = ErrorKind::Protocol;
                    msg.push_str(" (is the peer a gRPC server? grpc:// needs one that speaks plaintext HTTP/2, as `prober serve --grpc` does)");
                }
                if self.cfg.tls.as_ref().is_some_and(|t| !t.has_identity())
                    && [
                        "connection closed",
                        "broken pipe",
                        "connection was not ready",
                    ]
                    .iter()
                    .any(|s| msg.contains(s))
                {
                    // Under TLS 1.3 a server that rejects the client's (missing)
                    // certificate may just close the connection after the handshake.
                    msg.push_str(" (the server closed the TLS connection; it may require a client certificate: --cert and --key)");
                }
                self.broken(&msg).await;
                ProbeError::new(kind, msg)
            }
            code => ProbeError::protocol(format!("{code:?}: {}", status.message())),
        }
    }

    /// The reconnect count, the only anomaly a channel-level probe has, and
    /// the kernel's RTT estimate of the connection.
    fn anomalies(&self) -> Anomalies {
        Anomalies {
            reconnects: self.reconnects.load(Ordering::Relaxed),
            tcp_rtt: self.stamps.tcp_rtt(),
            spin: self.stamps.spin_count(),
            cert_not_after: Some(self.cert_not_after.load(Ordering::Relaxed))
                .filter(|t| *t != i64::MIN),
            ..Anomalies::default()
        }
    }

    /// A probe's request: `seq`, the payload, and with kernel stamps on,
    /// the ask for the reply's send time.
    fn ping(&self, seq: u64, payload: &[u8]) -> PingRequest {
        PingRequest {
            seq,
            payload: payload.to_vec(),
            client_send_unix_ns: unix_now_ns(),
            reply_size: 0,
            want_send_time: self.cfg.tx_stamps,
        }
    }

    /// Files the send part of an earlier reply that `r` carries.
    fn file_prev(follow: &FollowUps, r: &PingReply) {
        if let Some(p) = &r.prev {
            follow.put(p.seq, p.known.then_some(p.send_ns));
        }
    }

    /// Asks the responder for reply `seq`'s send part, on the open channel
    /// (after a reconnect the responder has none for it), giving up at
    /// `until`: `Some(send)` when it answered, `send` being `None` where it
    /// had no stamp; `None` when it could not be asked.
    async fn ask_send_time(&self, seq: u64, until: Instant) -> Option<Option<u64>> {
        // Not behind a reconnect, which holds the lock for up to the
        // connect timeout.
        let channel = tokio::time::timeout_at(until, self.state.lock())
            .await
            .ok()?
            .channel
            .clone()?;
        // Its bytes are not a probe's: a probe window it overlaps gets no
        // stamps.
        let _aside = self.stamps.aside();
        let mut client = EchoClient::new(channel);
        let asked = client.send_time(SendTimeRequest { seq });
        let r = tokio::time::timeout_at(until, asked)
            .await
            .ok()?
            .ok()?
            .into_inner();
        (r.seq == seq).then(|| r.known.then_some(r.send_ns))
    }

    /// Completes `reply`'s responder send part now, when the next reply
    /// would come too late to carry it (`interleave` false): asks for it,
    /// within twice its RTT and [`FOLLOW_UP_WAIT`], and never past
    /// `limit`. Otherwise the runner settles it later.
    async fn complete(
        &self,
        seq: u64,
        mut reply: Reply,
        interleave: bool,
        limit: Instant,
    ) -> Reply {
        if interleave || !reply.stamps.responder.is_some_and(|r| r.send_later) {
            return reply;
        }
        // Decided with the previous reply's RTT: if this one's says the ask
        // would still be open when the next request goes out, the next
        // reply carries it instead (`settle`).
        let gap = Duration::from_nanos(self.last_gap_ns.load(Ordering::Relaxed));
        if ask_would_overlap(gap, reply.rtt()) {
            return reply;
        }
        let until = (Instant::now() + FOLLOW_UP_WAIT + 2 * reply.rtt()).min(limit);
        let send = self.ask_send_time(seq, until).await.flatten();
        if let Some(r) = reply.stamps.responder.as_mut() {
            finish(r, send);
        }
        reply
    }

    /// Settles a reply whose send part a later reply carries: waits for
    /// the next reply (the gap between requests, a round trip, and
    /// [`FOLLOW_UP_WAIT`]), and asks if it has not brought it by then.
    async fn settle(&self, seq: u64, reply: Reply) -> Reply {
        if !reply.stamps.responder.is_some_and(|r| r.send_later) {
            return reply;
        }
        let gap = Duration::from_nanos(self.last_gap_ns.load(Ordering::Relaxed));
        let carry = (gap + 2 * reply.rtt()).min(self.cfg.timeout) + FOLLOW_UP_WAIT;
        let rtt = reply.rtt();
        let mut reply = settle_interleaved(&self.follow, seq, reply, carry, || async {
            let until = Instant::now() + FOLLOW_UP_WAIT + 2 * rtt;
            match self.ask_send_time(seq, until).await {
                Some(send) => {
                    self.follow.put(seq, send);
                    true
                }
                None => false,
            }
        })
        .await;
        if let Some(r) = reply.stamps.responder.as_mut() {
            let send = r.send;
            finish(r, send);
        }
        reply
    }

    fn request<T>(&self, msg: T) -> Request<T> {
        let mut req = Request::new(msg);
        req.set_timeout(self.cfg.timeout);
        req
    }
}

/// `grpc://host:port` (and `grpcs://`): unary `Ping` on one HTTP/2 channel
/// per target, reused for every probe, and a second once probes overlap.
///
/// HTTP/2 multiplexes calls, so a call that begins while another (or an
/// ask for a send part) is open on the connection gets no kernel stamps:
/// on a loaded host, where a round trip can outlast the interval, whole
/// runs of probes lost their split that way (benches/stamps/under_load.sh).
/// Once a probe found a call open on the first connection, a spare
/// connection is opened after a reply, off any probe's clock, and a probe
/// that finds the first busy and the spare idle goes on the spare, as an
/// HTTP/1 client takes another kept connection. Not with `-b` above 1
/// ([`ClientConfig::spare`]), where the run overlaps calls on purpose.
#[derive(Debug)]
pub struct GrpcProbe {
    conn: Conn,
    /// The second connection, made once probes overlapped.
    spare: std::sync::OnceLock<Box<Conn>>,
    /// A probe found a call open on the first connection.
    overlapped: AtomicBool,
    /// Probes sent on the spare whose send part may still come: settled
    /// there.
    on_spare: prober_net::follow::OnSpare,
    payload: Vec<u8>,
}

impl GrpcProbe {
    /// A probe for `cfg`; connects on [`Probe::prepare`] or the first probe.
    pub fn new(cfg: ClientConfig) -> Self {
        let payload = vec![0u8; cfg.size];
        Self {
            conn: Conn::new(cfg, true),
            spare: std::sync::OnceLock::new(),
            overlapped: AtomicBool::new(false),
            on_spare: prober_net::follow::OnSpare::default(),
            payload,
        }
    }

    /// The spare and its channel, when it is connected (never waits: a
    /// probe does not connect it on its own clock).
    fn spare_channel(&self) -> Option<(&Conn, Channel)> {
        let spare = self.spare.get()?;
        let channel = spare.state.try_lock().ok()?.channel.clone()?;
        Some((spare, channel))
    }

    /// Once a probe found the first connection busy, connects the spare (or reconnects it
    /// after a failure), after a reply and not on any probe's clock.
    async fn keep_spare(&self) {
        if !self.conn.cfg.spare || !self.overlapped.load(Ordering::Relaxed) {
            return;
        }
        let spare = self
            .spare
            .get_or_init(|| Box::new(Conn::new(self.conn.cfg.clone(), true)));
        // A failure waits out its backoff; the next reply tries again.
        let _ = spare.channel().await;
    }
}

impl Probe for GrpcProbe {
    async fn probe_at(&self, seq: u64, gate: Gate) -> Result<Reply, ProbeError> {
        // The runner's timeout counts from about now.
        let limit = Instant::now() + self.conn.cfg.timeout.saturating_sub(FOLLOW_UP_MARGIN);
        let first = self.conn.channel().await?;
        let spare = self.spare_channel();
        let req = self.conn.request(self.conn.ping(seq, &self.payload));
        self.conn.settle_runtime().await;
        gate.pass().await;
        // The first connection unless a call is open on it and the spare
        // has none.
        let busy = !self.conn.stamps.idle();
        if busy {
            self.overlapped.store(true, Ordering::Relaxed);
        }
        let (conn, channel) = match spare {
            Some((s, ch)) if busy && s.stamps.idle() => (s, ch),
            _ => (&self.conn, first),
        };
        let on_spare = !std::ptr::eq(conn, &self.conn);
        let mut client = EchoClient::new(channel);
        let interleave = conn.interleave();
        let sent = Instant::now();
        let t1 = unix_now_ns();
        let window = conn.stamps.begin();
        let res = client.ping(req).await;
        let received = Instant::now();
        let t4 = unix_now_ns();
        match res {
            Ok(resp) => {
                let window = window.end();
                conn.stamps.record_rtt(received - sent);
                conn.replied(sent, received);
                let r = resp.into_inner();
                Conn::file_prev(&conn.follow, &r);
                if r.seq != seq {
                    return Err(ProbeError::protocol(format!(
                        "reply for seq {} to request {seq}",
                        r.seq
                    )));
                }
                let reply = stamped_reply(
                    (sent, t1),
                    (received, t4),
                    window,
                    responder_times(&r),
                    r.payload.len(),
                );
                let reply = conn.complete(seq, reply, interleave, limit).await;
                if on_spare && reply.stamps.responder.is_some_and(|r| r.send_later) {
                    self.on_spare.remember(seq);
                }
                // Within the probe's time: an answered probe must not
                // become a timeout while the spare connects.
                let _ = tokio::time::timeout_at(limit, self.keep_spare()).await;
                Ok(reply)
            }
            Err(status) => Err(conn.status_error(&status).await),
        }
    }

    async fn prepare(&self) -> Result<(), ProbeError> {
        self.conn.channel().await.map(drop)
    }

    async fn settle(&self, seq: u64, reply: Reply) -> Reply {
        let on_spare = self.on_spare.take(seq);
        match self.spare.get() {
            Some(spare) if on_spare => spare.settle(seq, reply).await,
            _ => self.conn.settle(seq, reply).await,
        }
    }

    fn anomalies(&self) -> Anomalies {
        let mut a = self.conn.anomalies();
        if let Some(spare) = self.spare.get() {
            let b = spare.anomalies();
            a.reconnects += b.reconnects;
            a.spin = match (a.spin, b.spin) {
                (Some(mut x), Some(y)) => {
                    x += y;
                    Some(x)
                }
                (x, y) => x.or(y),
            };
        }
        a
    }
}

/// A stream reply: when it was read (monotonic, wall), the responder's
/// times, and its size.
type Arrival = Result<(Instant, u64, Option<ResponderTimes>, usize), ProbeError>;

/// What the responder reports of its part of the round trip. One that
/// stamps its sends (prober's, asked with `want_send_time`) gives its
/// wake-up (t2 − t2k) and dwell (t3 − t2) now and its send part (t3k −
/// t3) later; one that does not gives its turnaround from its kernel
/// receive stamp to its handler's return (t3 − t2k), with its send path
/// left in the network part. None from a server that reports no times.
fn responder_times(r: &PingReply) -> Option<ResponderTimes> {
    let dwell = r.server_send_unix_ns.checked_sub(r.server_recv_unix_ns)?;
    let t2k = Some(r.server_recv_kernel_unix_ns).filter(|k| *k > 0);
    Some(if r.send_time_later {
        ResponderTimes {
            wake: t2k.and_then(|k| r.server_recv_unix_ns.checked_sub(k)),
            dwell: Some(dwell),
            send_later: true,
            ..ResponderTimes::default()
        }
    } else {
        ResponderTimes {
            dwell: Some(dwell),
            turnaround: t2k.and_then(|k| r.server_send_unix_ns.checked_sub(k)),
            ..ResponderTimes::default()
        }
    })
}

#[derive(Debug)]
struct OpenStream {
    tx: mpsc::Sender<PingRequest>,
    matcher: Arc<Matcher<Arrival>>,
    alive: Arc<AtomicBool>,
    _reader: AbortOnDropHandle<()>,
}

/// `grpc+stream://host:port` (and `grpcs+stream://`): ping-pong on one
/// bidirectional `Stream` call. Replies are matched by seq; when the stream
/// ends, the next probe opens a new one (on a new connection if needed).
#[derive(Debug)]
pub struct GrpcStreamProbe {
    conn: Conn,
    payload: Vec<u8>,
    /// One matcher per stream: a stream that ends fails only its own probes.
    matchers: MatcherSet<Arrival>,
    stream: Mutex<Option<OpenStream>>,
}

impl GrpcStreamProbe {
    /// A probe for `cfg`; opens the stream on [`Probe::prepare`] or the first probe.
    pub fn new(cfg: ClientConfig) -> Self {
        let payload = vec![0u8; cfg.size];
        Self {
            conn: Conn::new(cfg, true),
            payload,
            matchers: MatcherSet::new(),
            stream: Mutex::new(None),
        }
    }

    /// The open stream's sender and matcher, opening a stream if needed.
    async fn sender(
        &self,
    ) -> Result<(mpsc::Sender<PingRequest>, Arc<Matcher<Arrival>>), ProbeError> {
        let mut slot = self.stream.lock().await;
        if let Some(s) = slot.as_ref()
            && s.alive.load(Ordering::Acquire)
        {
            return Ok((s.tx.clone(), Arc::clone(&s.matcher)));
        }
        *slot = None;
        let mut client = EchoClient::new(self.conn.channel().await?);
        let (tx, rx) = mpsc::channel(STREAM_QUEUE);
        let mut replies = match client
            .stream(self.conn.request(ReceiverStream::new(rx)))
            .await
        {
            Ok(r) => r.into_inner(),
            Err(status) => return Err(self.conn.status_error(&status).await),
        };
        let alive = Arc::new(AtomicBool::new(true));
        let stream_matcher = self.matchers.next(false);
        let (matcher, flag) = (Arc::clone(&stream_matcher), Arc::clone(&alive));
        let follow = Arc::clone(&self.conn.follow);
        let reader = tokio::spawn(async move {
            let why = loop {
                match replies.message().await {
                    Ok(Some(r)) => {
                        let received = Instant::now();
                        let t4 = unix_now_ns();
                        Conn::file_prev(&follow, &r);
                        let got = (received, t4, responder_times(&r), r.payload.len());
                        matcher.deliver(r.seq, Ok(got));
                    }
                    Ok(None) => break "stream closed by server".to_owned(),
                    Err(status) => {
                        break format!(
                            "stream failed: {:?}: {}",
                            status.code(),
                            error_chain(&status)
                        );
                    }
                }
            };
            flag.store(false, Ordering::Release);
            let err = ProbeError::new(error_kind(&why), why);
            matcher.fail_all(|| Err(err.clone()));
        });
        *slot = Some(OpenStream {
            tx: tx.clone(),
            matcher: Arc::clone(&stream_matcher),
            alive,
            _reader: AbortOnDropHandle::new(reader),
        });
        Ok((tx, stream_matcher))
    }
}

impl Probe for GrpcStreamProbe {
    async fn probe_at(&self, seq: u64, gate: Gate) -> Result<Reply, ProbeError> {
        // The runner's timeout counts from about now.
        let limit = Instant::now() + self.conn.cfg.timeout.saturating_sub(FOLLOW_UP_MARGIN);
        let (tx, matcher) = self.sender().await?;
        let msg = self.conn.ping(seq, &self.payload);
        let mut waiter = matcher.register(seq);
        self.conn.settle_runtime().await;
        gate.pass().await;
        let interleave = self.conn.interleave();
        let sent = Instant::now();
        let t1 = unix_now_ns();
        let window = self.conn.stamps.begin();
        if tx.send(msg).await.is_err() {
            self.conn.broken("stream closed").await;
            return Err(ProbeError::new(ErrorKind::Reset, "stream closed"));
        }
        match waiter.recv().await {
            Some(Ok((received, t4, responder, bytes))) => {
                let window = window.end();
                self.conn.stamps.record_rtt(received - sent);
                self.conn.replied(sent, received);
                let reply = stamped_reply((sent, t1), (received, t4), window, responder, bytes);
                Ok(self.conn.complete(seq, reply, interleave, limit).await)
            }
            Some(Err(e)) => {
                self.conn.broken(e.message()).await;
                Err(e)
            }
            None => Err(ProbeError::new(ErrorKind::Other, "reply matcher closed")),
        }
    }

    async fn prepare(&self) -> Result<(), ProbeError> {
        self.sender().await.map(drop)
    }

    async fn settle(&self, seq: u64, reply: Reply) -> Reply {
        self.conn.settle(seq, reply).await
    }

    fn anomalies(&self) -> Anomalies {
        // The channel's (reconnects, TCP_INFO, certificate) and the
        // stream's matcher's counts.
        let c = self.conn.anomalies();
        Anomalies {
            reconnects: c.reconnects,
            tcp_rtt: c.tcp_rtt,
            cert_not_after: c.cert_not_after,
            ..self.matchers.anomalies()
        }
    }
}

/// `grpc-health://host:port[/service]`: `grpc.health.v1.Health/Check` against
/// any gRPC server, as blackbox_exporter does. Anything but SERVING is an
/// error outcome.
#[derive(Debug)]
pub struct GrpcHealthProbe {
    conn: Conn,
    service: String,
}

impl GrpcHealthProbe {
    /// A probe of `service` ("" for the whole server) for `cfg`.
    pub fn new(cfg: ClientConfig, service: impl Into<String>) -> Self {
        Self {
            conn: Conn::new(cfg, false),
            service: service.into(),
        }
    }
}

impl Probe for GrpcHealthProbe {
    async fn probe_at(&self, _seq: u64, gate: Gate) -> Result<Reply, ProbeError> {
        let mut client = HealthClient::new(self.conn.channel().await?);
        let req = self.conn.request(HealthCheckRequest {
            service: self.service.clone(),
        });
        gate.pass().await;
        let sent = Instant::now();
        let t1 = unix_now_ns();
        let window = self.conn.stamps.begin();
        let res = client.check(req).await;
        let received = Instant::now();
        let t4 = unix_now_ns();
        match res {
            Ok(resp) => {
                let window = window.end();
                self.conn.stamps.record_rtt(received - sent);
                let status = resp.into_inner().status();
                let detail = prober_core::Detail::Grpc {
                    code: 0,
                    serving: u8::try_from(status as i32).ok(),
                };
                if status == ServingStatus::Serving {
                    // Any server's health service: no responder stamps, so
                    // the network part (which would include the server) is
                    // unknown; the client's send and wake-up parts are not.
                    let mut reply = stamped_reply((sent, t1), (received, t4), window, None, 0);
                    reply.app.detail = Some(detail);
                    Ok(reply)
                } else {
                    Err(ProbeError::new(
                        ErrorKind::Status,
                        format!("health status {}", status.as_str_name()),
                    )
                    .with_detail(detail))
                }
            }
            Err(status) => {
                let code = u8::try_from(status.code() as i32).unwrap_or(u8::MAX);
                Err(self
                    .conn
                    .status_error(&status)
                    .await
                    .with_detail(prober_core::Detail::Grpc {
                        code,
                        serving: None,
                    }))
            }
        }
    }

    async fn prepare(&self) -> Result<(), ProbeError> {
        self.conn.channel().await.map(drop)
    }

    fn anomalies(&self) -> Anomalies {
        self.conn.anomalies()
    }
}

/// The kind of a gRPC transport failure, from its message (tonic and hyper
/// keep the cause as text several sources deep).
fn error_kind(msg: &str) -> ErrorKind {
    let m = msg.to_ascii_lowercase();
    if m.contains("refused") {
        ErrorKind::Refused
    } else if m.contains("certificate")
        || m.contains("tls")
        || m.contains("handshake")
        || m.contains("invalidcontenttype")
        || m.contains("corrupt message")
    {
        ErrorKind::Tls
    } else if m.contains("unreachable") || m.contains("no route") {
        ErrorKind::Unreachable
    } else if m.contains("reset") || m.contains("broken pipe") || m.contains("connection closed") {
        ErrorKind::Reset
    } else if m.contains("timed out") {
        // A connect that timed out: nothing answered (the probe's own
        // deadline is reported as a timeout outcome, not as an error).
        ErrorKind::Unreachable
    } else {
        ErrorKind::Other
    }
}

/// A unary or stream reply: sent at (monotonic, wall), received at
/// (monotonic, wall), the probe's stamp window, and the responder's times
/// ([`responder_times`]; its dwell is the reply's `server_dwell`).
fn stamped_reply(
    (sent, t1): (Instant, u64),
    (received, t4): (Instant, u64),
    window: WindowStamps,
    responder: Option<ResponderTimes>,
    bytes: usize,
) -> Reply {
    let dwell = responder.and_then(|r| r.dwell).map(Duration::from_nanos);
    // With another call overlapping the window, the responder's kernel
    // stamps may be that call's: only its dwell (its handler's own) is
    // kept.
    let responder = responder.map(|r| {
        if window.alone {
            r
        } else {
            ResponderTimes {
                dwell: r.dwell,
                ..ResponderTimes::default()
            }
        }
    });
    let stamps = prober_core::Stamps {
        t1: Some(t1),
        t1k: window.t1k,
        t4k: window.t4k,
        t4: Some(t4),
        responder,
        kernel_peer: false,
        handshake: None,
    };
    Reply {
        sent,
        received,
        server_dwell: dwell,
        rx_wake: prober_sys::rx::wake_ns(window.t4k, t4).map(Duration::from_nanos),
        bytes,
        ttl: None,
        stamps,
        app: Default::default(),
    }
}

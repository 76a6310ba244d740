//! The HTTP probe: one request per probe on a kept connection (or a new
//! one per probe), its phases, its validation and its split.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicI64, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderValue, Request, Response, Uri, header};
use http_body_util::{BodyExt as _, Full};
use hyper::body::Incoming;
use hyper::client::conn::{http1, http2};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use prober_core::clock::unix_now_ns;
use prober_core::{
    Anomalies, AppReply, Detail, ErrorKind, Gate, Phases, Probe, ProbeError, Reply, ResponderTimes,
    Stamps,
};
use prober_net::follow::{
    Cadence, FOLLOW_UP_MARGIN, FOLLOW_UP_WAIT, FollowUps, INTERLEAVED_WAIT, ask_would_overlap,
    finish, interleaves, settle_interleaved,
};
use prober_net::stream::{ChannelStamps, StampedStream, WindowStamps};
use rustls::pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio::time::Instant;
use tokio_rustls::TlsConnector;

use crate::{HttpOptions, HttpVersion};

/// Connections kept for reuse: more than one only when probes overlap.
const POOL: usize = 8;

trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}

/// Where requests go: scheme, host and port (a redirect may change them).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Origin {
    tls: bool,
    host: String,
    port: u16,
}

impl Origin {
    fn authority(&self) -> String {
        let default = if self.tls { 443 } else { 80 };
        let host = if self.host.contains(':') {
            format!("[{}]", self.host)
        } else {
            self.host.clone()
        };
        if self.port == default {
            host
        } else {
            format!("{host}:{}", self.port)
        }
    }
}

enum Sender {
    H1(http1::SendRequest<Full<Bytes>>),
    H2(http2::SendRequest<Full<Bytes>>),
}

struct Conn {
    sender: Sender,
    stamps: Arc<ChannelStamps>,
    /// A request is under way: dropped now (an error, a timeout), the
    /// connection is lost and the next one counts as a reconnect.
    busy: bool,
    lost: Arc<AtomicU64>,
    /// Connections of the target open now (this one among them).
    live: Arc<AtomicUsize>,
}

impl Drop for Conn {
    fn drop(&mut self) {
        self.live.fetch_sub(1, Ordering::Relaxed);
        if self.busy {
            self.lost.fetch_add(1, Ordering::Relaxed);
        }
    }
}

impl Conn {
    /// Which connection this is, while it lives.
    fn id(&self) -> usize {
        Arc::as_ptr(&self.stamps) as usize
    }

    fn version(&self) -> u8 {
        match self.sender {
            Sender::H1(_) => 11,
            Sender::H2(_) => 20,
        }
    }

    fn is_closed(&self) -> bool {
        match &self.sender {
            Sender::H1(s) => s.is_closed(),
            Sender::H2(s) => s.is_closed(),
        }
    }

    /// Sends `req`; on failure, the request back if none of it was sent
    /// (the connection was closed before it), so it can go on another.
    async fn send(&mut self, req: Request<Full<Bytes>>) -> Result<Response<Incoming>, Unsent> {
        let ready = match &mut self.sender {
            Sender::H1(s) => s.ready().await,
            Sender::H2(s) => s.ready().await,
        };
        if let Err(e) = ready {
            return Err((hyper_error(e), Some(req)));
        }
        let res = match &mut self.sender {
            Sender::H1(s) => s.try_send_request(req).await,
            Sender::H2(s) => s.try_send_request(req).await,
        };
        res.map_err(|mut e| {
            let req = e.take_message();
            (hyper_error(e.into_error()), req)
        })
    }
}

/// A failed send, and the request when none of it went out.
type Unsent = (ProbeError, Option<Request<Full<Bytes>>>);

/// The phases a connection's opening took: resolve, connect, TLS.
type OpenPhases = [Option<u64>; 3];

/// An `http://`, `h2c://` or `https://` target.
pub struct HttpProbe {
    origin: Origin,
    /// Where the target's host resolved when the run started.
    addr: SocketAddr,
    /// The request target: path and query.
    path: String,
    tls: Option<Arc<rustls::ClientConfig>>,
    /// `h2c://`, or `--http2` on `http://`.
    prior_knowledge: bool,
    opts: Arc<HttpOptions>,
    tx_stamps: bool,
    server_name: Option<String>,
    pool: Mutex<Vec<Conn>>,
    /// Connections lost under a request or closed while kept.
    lost: Arc<AtomicU64>,
    cert_not_after: AtomicI64,
    /// The server reports its times (`Server-Timing: dwell`): prober's
    /// responder, which is then asked for its responses' send parts.
    ours: std::sync::atomic::AtomicBool,
    /// Send parts carried by later responses (or asked for), by seq.
    follow: FollowUps,
    /// The gaps between requests: back to back, the next response carries
    /// a response's send part; further apart, the probe asks at once.
    cadence: Cadence,
    /// The per-probe timeout: an ask for a send part ends before it.
    timeout: Duration,
    /// The latest response's RTT, ns: an ask takes about as long.
    last_rtt_ns: AtomicU64,
    /// The connection each response left to settling came on (seq, the
    /// connection's [`Conn::id`]): only that one's responder knows its
    /// send part, so a settle asks only there.
    settling_on: Mutex<std::collections::VecDeque<(u64, usize)>>,
    /// Connections open now, kept or under a request.
    live: Arc<AtomicUsize>,
    /// Probes under way now, and the most there have been at once.
    in_flight: Arc<AtomicUsize>,
    peak: AtomicUsize,
    /// When the next try to open a spare may begin.
    spare_retry: prober_net::follow::SpareRetry,
}

/// Counts a probe under way for as long as it lives (a timed-out probe's
/// future is dropped).
struct InFlight(Arc<AtomicUsize>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

impl std::fmt::Debug for HttpProbe {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpProbe")
            .field("origin", &self.origin)
            .field("addr", &self.addr)
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

/// What [`HttpProbe::new`] needs besides the options.
#[derive(Debug)]
pub(crate) struct Target<'a> {
    pub(crate) host: &'a str,
    pub(crate) port: u16,
    pub(crate) addr: SocketAddr,
    pub(crate) path: &'a str,
    pub(crate) tls: Option<Arc<rustls::ClientConfig>>,
    pub(crate) prior_knowledge: bool,
    pub(crate) tx_stamps: bool,
    /// `--tls-server-name`: verified and sent as SNI instead of the host.
    pub(crate) server_name: Option<String>,
    /// The per-probe timeout.
    pub(crate) timeout: Duration,
}

impl HttpProbe {
    pub(crate) fn new(t: Target<'_>, opts: Arc<HttpOptions>) -> Self {
        Self {
            origin: Origin {
                tls: t.tls.is_some(),
                host: t
                    .host
                    .trim_start_matches('[')
                    .trim_end_matches(']')
                    .to_owned(),
                port: t.port,
            },
            addr: t.addr,
            path: format!("/{}", t.path.trim_start_matches('/')),
            tls: t.tls,
            prior_knowledge: t.prior_knowledge || opts.version == HttpVersion::Http2,
            opts,
            tx_stamps: t.tx_stamps,
            server_name: t.server_name,
            pool: Mutex::new(Vec::new()),
            lost: Arc::default(),
            cert_not_after: AtomicI64::new(i64::MIN),
            ours: std::sync::atomic::AtomicBool::new(false),
            follow: FollowUps::default(),
            cadence: Cadence::default(),
            timeout: t.timeout,
            last_rtt_ns: AtomicU64::new(0),
            settling_on: Mutex::default(),
            live: Arc::default(),
            in_flight: Arc::default(),
            peak: AtomicUsize::new(0),
            spare_retry: prober_net::follow::SpareRetry::default(),
        }
    }

    fn settling_on(&self) -> std::sync::MutexGuard<'_, std::collections::VecDeque<(u64, usize)>> {
        self.settling_on
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Asks `conn` for the send part of response `seq` (`GET
    /// /prober/send-time?seq=SEQ`) and files what it says: whether the
    /// answer was for `seq`. `None` when the ask failed or ran out of time
    /// (an HTTP/1 request given up closes its connection: not to be kept).
    async fn ask_send(&self, conn: &mut Conn, seq: u64, until: Instant) -> Option<bool> {
        let path = format!("{}?seq={seq}", crate::server::SEND_TIME_PATH);
        let h2 = conn.version() == 20;
        // Not the probe's request: no method, body or headers of the user's
        // (a Content-Length of theirs would leave this one waiting).
        let origin = &self.origin;
        let uri = if h2 {
            let scheme = if origin.tls { "https" } else { "http" };
            format!("{scheme}://{}{path}", origin.authority())
        } else {
            path
        };
        let mut builder = Request::get(uri).header(header::USER_AGENT, "prober");
        if !h2 {
            builder = builder.header(header::HOST, origin.authority());
        }
        let Ok(req) = builder.body(Full::new(Bytes::new())) else {
            return Some(false);
        };
        // Its bytes are not a probe's: a window it overlaps gets no stamps.
        let _aside = conn.stamps.aside();
        let Ok(Ok(resp)) = tokio::time::timeout_at(until, conn.send(req)).await else {
            return None;
        };
        let (parts, body) = resp.into_parts();
        if !matches!(
            tokio::time::timeout_at(until, body.collect()).await,
            Ok(Ok(_))
        ) {
            return None;
        }
        Some(
            match server_timing(parts.headers.get(crate::SERVER_TIMING)).carried {
                Some((s, send)) if s == seq => {
                    self.follow.put(seq, send);
                    true
                }
                _ => false,
            },
        )
    }

    fn pool(&self) -> std::sync::MutexGuard<'_, Vec<Conn>> {
        self.pool.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Once probes have overlapped (a late reply, or a stalled runtime
    /// sending slots in a burst), keeps one connection more than the most
    /// probes seen under way at once, opened after a reply and not on any
    /// probe's clock: a probe that finds every kept connection busy must
    /// open its own, and its round trip then holds a handshake, so it has
    /// no kernel split. A target whose probes never overlap keeps one. A
    /// try that did not open one (failed, or cut off at the probe's time
    /// limit) is made again a second later at the soonest.
    async fn keep_spare(&self) {
        let peak = self.peak.load(Ordering::Relaxed);
        if peak < 2
            || self.live.load(Ordering::Relaxed) > peak.min(POOL - 1)
            || !self.spare_retry.begin()
        {
            return;
        }
        if let Ok((conn, _)) = self.open(&self.origin, false).await {
            self.spare_retry.opened();
            self.give_back(conn);
        }
    }

    /// A kept connection that is still open.
    fn take(&self) -> Option<Conn> {
        let mut pool = self.pool();
        while let Some(c) = pool.pop() {
            if !c.is_closed() {
                return Some(c);
            }
            // Closed while idle (the server's keep-alive timeout).
            self.lost.fetch_add(1, Ordering::Relaxed);
        }
        None
    }

    /// Connection `id` if it is idle in the pool and still open: where
    /// probes overlapped, the pool holds several, and the one a response
    /// came on need not be the one a new probe would take.
    fn take_id(&self, id: usize) -> Option<Conn> {
        let mut pool = self.pool();
        let at = pool.iter().position(|c| c.id() == id)?;
        let c = pool.remove(at);
        if c.is_closed() {
            self.lost.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        Some(c)
    }

    fn give_back(&self, c: Conn) {
        if c.is_closed() {
            // Closed by the server with its answer: lost as a kept one is.
            self.lost.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let mut pool = self.pool();
        if pool.len() < POOL {
            pool.push(c);
        }
    }

    /// Opens a connection to `origin`: resolves it when `resolve` (else
    /// uses the address the run resolved), connects, shakes hands.
    async fn open(&self, origin: &Origin, resolve: bool) -> Result<(Conn, OpenPhases), ProbeError> {
        let t0 = unix_now_ns();
        let addr = if resolve || *origin != self.origin {
            tokio::net::lookup_host((origin.host.as_str(), origin.port))
                .await
                .map_err(|e| {
                    ProbeError::new(
                        ErrorKind::Unreachable,
                        format!("resolving {}: {e}", origin.host),
                    )
                })?
                .next()
                .ok_or_else(|| {
                    ProbeError::new(
                        ErrorKind::Unreachable,
                        format!("{} has no address", origin.host),
                    )
                })?
        } else {
            self.addr
        };
        let t_resolved = unix_now_ns();
        let tcp = TcpStream::connect(addr)
            .await
            .map_err(|e| ProbeError::io(format_args!("connecting to {addr}"), &e))?;
        let stamps = Arc::new(ChannelStamps::default());
        let stream = StampedStream::new(tcp, Arc::clone(&stamps), self.tx_stamps)
            .map_err(|e| ProbeError::io("setting socket options", &e))?;
        let t_connected = unix_now_ns();
        let (io, h2, tls_ns): (Box<dyn Io>, bool, Option<u64>) = match (&self.tls, origin.tls) {
            (Some(cfg), true) => {
                let host = match &self.server_name {
                    Some(n) if *origin == self.origin => n.clone(),
                    _ => origin.host.clone(),
                };
                let name = ServerName::try_from(host.clone()).map_err(|e| {
                    ProbeError::new(ErrorKind::Tls, format!("server name {host}: {e}"))
                })?;
                let tls = TlsConnector::from(Arc::clone(cfg))
                    .connect(name, stream)
                    .await
                    .map_err(|e| ProbeError::new(ErrorKind::Tls, format!("TLS handshake: {e}")))?;
                let (_, session) = tls.get_ref();
                if let Some(leaf) = session.peer_certificates().and_then(|c| c.first())
                    && let Some(t) = prober_net::tls::not_after(leaf)
                {
                    self.cert_not_after.store(t, Ordering::Relaxed);
                }
                let h2 = session.alpn_protocol() == Some(b"h2");
                (
                    Box::new(tls),
                    h2,
                    Some(unix_now_ns().saturating_sub(t_connected)),
                )
            }
            (None, true) => {
                return Err(ProbeError::new(
                    ErrorKind::Other,
                    "a redirect to https:// from an http:// target: give the https:// URL",
                ));
            }
            _ => (Box::new(stream), self.prior_knowledge, None),
        };
        let io = TokioIo::new(io);
        let sender = if h2 {
            let (sender, conn) = http2::Builder::new(TokioExecutor::new())
                .timer(TokioTimer::new())
                .handshake(io)
                .await
                .map_err(hyper_error)?;
            tokio::spawn(conn);
            Sender::H2(sender)
        } else {
            let (sender, conn) = http1::Builder::new()
                .max_buf_size(64 << 10)
                .handshake(io)
                .await
                .map_err(hyper_error)?;
            tokio::spawn(conn);
            Sender::H1(sender)
        };
        let phases = [
            Some(t_resolved.saturating_sub(t0)),
            Some(t_connected.saturating_sub(t_resolved)),
            tls_ns,
        ];
        self.live.fetch_add(1, Ordering::Relaxed);
        let conn = Conn {
            sender,
            stamps,
            busy: false,
            lost: Arc::clone(&self.lost),
            live: Arc::clone(&self.live),
        };
        Ok((conn, phases))
    }

    fn request(
        &self,
        origin: &Origin,
        path: &str,
        h2: bool,
    ) -> Result<Request<Full<Bytes>>, ProbeError> {
        let uri: Uri = if h2 {
            let scheme = if origin.tls { "https" } else { "http" };
            format!("{scheme}://{}{path}", origin.authority()).parse()
        } else {
            path.parse()
        }
        .map_err(|e| ProbeError::new(ErrorKind::Other, format!("request target {path}: {e}")))?;
        let mut req = Request::builder()
            .method(self.opts.method.clone())
            .uri(uri)
            .body(Full::new(self.opts.body.clone()))
            .map_err(|e| ProbeError::new(ErrorKind::Other, format!("building the request: {e}")))?;
        let headers = req.headers_mut();
        if !h2 && let Ok(v) = HeaderValue::from_str(&origin.authority()) {
            headers.insert(header::HOST, v);
        }
        headers.insert(header::USER_AGENT, HeaderValue::from_static("prober"));
        for (k, v) in &self.opts.headers {
            headers.insert(k.clone(), v.clone());
        }
        Ok(req)
    }

    /// Reads the body, at most `max_body` bytes.
    async fn body(&self, body: Incoming) -> Result<Bytes, ProbeError> {
        let mut body = body;
        let mut out = bytes::BytesMut::new();
        while let Some(frame) = body.frame().await {
            let frame = frame.map_err(|e| {
                let mut err = hyper_error(e);
                if err.kind() == ErrorKind::Reset {
                    err = ProbeError::new(
                        err.kind(),
                        format!("connection closed mid-body ({})", err.message()),
                    );
                } else if err.kind() == ErrorKind::Protocol {
                    err =
                        ProbeError::new(err.kind(), format!("reading the body: {}", err.message()));
                }
                err
            })?;
            if let Ok(data) = frame.into_data() {
                if out.len() + data.len() > self.opts.max_body {
                    return Err(ProbeError::new(
                        ErrorKind::TooLarge,
                        format!(
                            "body over --max-body {} bytes (connection closed)",
                            self.opts.max_body
                        ),
                    ));
                }
                out.extend_from_slice(&data);
            }
        }
        Ok(out.freeze())
    }

    /// Where a redirect points, relative to `origin` and `path`.
    fn redirect(origin: &Origin, location: &str) -> Result<(Origin, String), ProbeError> {
        let bad = || ProbeError::protocol(format!("redirect to {location:?}: not a usable URL"));
        if location.starts_with('/') && !location.starts_with("//") {
            return Ok((origin.clone(), location.to_owned()));
        }
        let uri: Uri = location.parse().map_err(|_| bad())?;
        let tls = match uri.scheme_str() {
            Some("https") => true,
            Some("http") => false,
            _ => return Err(bad()),
        };
        let host = uri
            .host()
            .ok_or_else(bad)?
            .trim_start_matches('[')
            .trim_end_matches(']');
        let port = uri.port_u16().unwrap_or(if tls { 443 } else { 80 });
        let path = uri.path_and_query().map_or("/", |p| p.as_str()).to_owned();
        Ok((
            Origin {
                tls,
                host: host.to_owned(),
                port,
            },
            path,
        ))
    }
}

/// Adds `b` to a phase total.
fn add(slot: &mut Option<u64>, b: Option<u64>) {
    if let Some(b) = b {
        *slot = Some(slot.unwrap_or(0) + b);
    }
}

/// The responder's part of a response, as its `Server-Timing` says.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct Timing {
    /// Its handler's time (t3 − t2), ns.
    dwell: Option<u64>,
    /// Its kernel receive stamp to its handler's return (t3 − t2k), ns.
    turnaround: Option<u64>,
    /// This response's send part comes later (`send-later`).
    send_later: bool,
    /// An earlier response's send part: its seq, and the part (`None`:
    /// the responder's kernel gave no stamp).
    carried: Option<(u64, Option<u64>)>,
}

/// Parses `Server-Timing: dwell;dur=0.012345, turnaround;dur=0.020000,
/// send;desc=7;dur=0.004100, send-later` (milliseconds; see the
/// responder's docs).
fn server_timing(v: Option<&HeaderValue>) -> Timing {
    let mut t = Timing::default();
    let Some(text) = v.and_then(|v| v.to_str().ok()) else {
        return t;
    };
    for metric in text.split(',') {
        let mut it = metric.split(';').map(str::trim);
        let name = it.next().unwrap_or("");
        let (mut dur, mut desc) = (None, None);
        for p in it {
            if let Some(d) = p.strip_prefix("dur=") {
                dur = ms_to_ns(d);
            } else if let Some(d) = p.strip_prefix("desc=") {
                desc = d.trim_matches('"').parse::<u64>().ok();
            }
        }
        match name {
            "dwell" => t.dwell = dur,
            "turnaround" => t.turnaround = dur,
            "send-later" => t.send_later = true,
            "send" => t.carried = desc.map(|seq| (seq, dur)),
            _ => {}
        }
    }
    t
}

/// `12.345678` ms to ns, exactly (no float rounding).
fn ms_to_ns(s: &str) -> Option<u64> {
    let (int, frac) = s.split_once('.').unwrap_or((s, ""));
    let int: u64 = int.parse().ok()?;
    let mut digits: String = frac.chars().take(6).collect();
    if !digits.chars().all(|c| c.is_ascii_digit()) {
        return None;
    }
    while digits.len() < 6 {
        digits.push('0');
    }
    Some(int.checked_mul(1_000_000)? + digits.parse::<u64>().ok()?)
}

/// A hyper error as a probe error with a kind.
fn hyper_error(e: hyper::Error) -> ProbeError {
    use std::error::Error as _;
    if e.is_parse() || e.is_parse_status() || e.is_parse_too_large() {
        return ProbeError::protocol(format!("response is not valid HTTP: {e}"));
    }
    if e.is_incomplete_message() {
        return ProbeError::new(
            ErrorKind::Reset,
            "connection closed before the response was complete",
        );
    }
    if e.is_timeout() {
        return ProbeError::timeout(format!("{e}"));
    }
    let mut src = e.source();
    while let Some(s) = src {
        if let Some(io) = s.downcast_ref::<std::io::Error>() {
            return ProbeError::io("HTTP connection", io);
        }
        if let Some(h2) = s.downcast_ref::<hyper::Error>()
            && h2.is_incomplete_message()
        {
            return ProbeError::new(ErrorKind::Reset, "connection closed mid-response");
        }
        src = s.source();
    }
    if e.is_closed() || e.is_canceled() {
        return ProbeError::new(ErrorKind::Reset, format!("connection closed: {e}"));
    }
    ProbeError::protocol(format!("HTTP: {e}"))
}

impl Probe for HttpProbe {
    async fn probe_at(&self, seq: u64, gate: Gate) -> Result<Reply, ProbeError> {
        // The runner's timeout runs from about now: an ask ends before it.
        let limit = Instant::now() + self.timeout.saturating_sub(FOLLOW_UP_MARGIN);
        // A kept connection is taken before the gate, so a probe that
        // reuses one starts its request right after it.
        let mut kept = if self.opts.new_connection {
            None
        } else {
            self.take()
        };
        let now = self.in_flight.fetch_add(1, Ordering::Relaxed) + 1;
        let _in_flight = InFlight(Arc::clone(&self.in_flight));
        self.peak.fetch_max(now, Ordering::Relaxed);
        gate.pass().await;
        let sent = Instant::now();
        let t0 = unix_now_ns();
        // prober's responder, on a kept connection: the response's send
        // part is asked for, carried by the next response back to back or
        // asked for right after the response when requests are further
        // apart than the next one could bring it.
        let want_send =
            self.tx_stamps && !self.opts.new_connection && self.ours.load(Ordering::Relaxed);
        let gap = self.cadence.gap(sent);
        let interleave = interleaves(
            gap,
            Duration::from_nanos(self.last_rtt_ns.load(Ordering::Relaxed)),
        );
        let mut phases = Phases::default();
        let (mut origin, mut path) = (self.origin.clone(), self.path.clone());
        let mut hops: u8 = 0;
        loop {
            let own = origin == self.origin && !self.opts.new_connection;
            let (mut conn, opened) = match kept.take() {
                Some(c) => (c, false),
                None => {
                    let (c, p) = self.open(&origin, self.opts.new_connection).await?;
                    for (slot, v) in phases.0.iter_mut().zip(p) {
                        add(slot, v);
                    }
                    (c, true)
                }
            };
            let version = conn.version();
            let h2 = version == 20;
            let mut req = self.request(&origin, &path, h2)?;
            let asks = want_send && hops == 0 && own && !opened;
            if asks {
                req.headers_mut()
                    .insert(crate::server::SEND_TIME, HeaderValue::from(seq));
            } else {
                req.headers_mut().remove(crate::server::SEND_TIME);
            }
            conn.busy = true;
            let t_req = unix_now_ns();
            let window = conn.stamps.begin();
            let resp = match conn.send(req).await {
                Ok(resp) => resp,
                // A kept connection the server closed before the request
                // went out (its keep-alive ran out): the request goes on a
                // new connection, as a browser's does, and the one lost is
                // counted in `reconnects`.
                Err((_, Some(_))) if !opened => {
                    drop(window);
                    drop(conn);
                    continue;
                }
                Err((e, _)) => return Err(e),
            };
            let (parts, body) = resp.into_parts();
            let body = self.body(body).await?;
            let received = Instant::now();
            let t_done = unix_now_ns();
            let w: WindowStamps = window.end();
            conn.busy = false;
            let written = w.last_write_ns.filter(|t| *t >= t_req && *t <= t_done);
            let first = w
                .first_read_ns
                .filter(|t| written.is_some_and(|wr| *t >= wr) && *t <= t_done);
            match (written, first) {
                (Some(wr), Some(fr)) => {
                    add(&mut phases.0[3], Some(wr - t_req));
                    add(&mut phases.0[4], Some(fr - wr));
                    add(&mut phases.0[5], Some(t_done - fr));
                }
                // The stream did not see this request's write and read
                // apart (another request overlapped it): the whole request
                // counts as waiting for the first byte.
                _ => add(&mut phases.0[4], Some(t_done - t_req)),
            }
            let location = parts
                .status
                .is_redirection()
                .then(|| parts.headers.get(header::LOCATION))
                .flatten()
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned);
            let timing = server_timing(parts.headers.get(crate::SERVER_TIMING));
            let rtt = received.duration_since(sent);
            if hops == 0 && own {
                if timing.dwell.is_some() {
                    self.ours.store(true, Ordering::Relaxed);
                }
                self.last_rtt_ns.store(
                    u64::try_from(rtt.as_nanos()).unwrap_or(u64::MAX),
                    Ordering::Relaxed,
                );
            }
            // Only what answers this probe's own ask counts.
            if asks && let Some((s, send)) = timing.carried {
                self.follow.put(s, send);
            }
            // Kernel stamps split the round trip only when this probe was
            // one request on a connection it did not open.
            let clean = !opened && hops == 0;
            let send_later = asks && timing.send_later && clean && location.is_none();
            // Asked for now: the next response would come too late. Not
            // when this response's RTT says the ask would still be open at
            // the next request, nor when it would not end before the
            // probe's timeout (the send part then stays unknown).
            let mut asked = None;
            let mut keep = own;
            let until = Instant::now() + FOLLOW_UP_WAIT + 2 * rtt;
            let too_close = gap.is_some_and(|g| ask_would_overlap(g, rtt));
            if send_later && !interleave && !too_close && until <= limit {
                asked = Some(match self.ask_send(&mut conn, seq, until).await {
                    Some(true) => self.follow.wait_until(seq, Instant::now()).await.flatten(),
                    Some(false) => None,
                    None => {
                        keep = false;
                        None
                    }
                });
            }
            if send_later && asked.is_none() {
                let mut on = self.settling_on();
                if on.len() >= POOL * 8 {
                    on.pop_front();
                }
                on.push_back((seq, conn.id()));
            }
            if keep {
                self.give_back(conn);
            }
            if let Some(loc) = location
                && hops < self.opts.follow
            {
                let (o, p) = Self::redirect(&origin, &loc)?;
                origin = o;
                path = p;
                hops += 1;
                if origin == self.origin && !self.opts.new_connection {
                    kept = self.take();
                }
                continue;
            }
            let detail = Detail::Http {
                status: parts.status.as_u16(),
                version,
                redirects: hops,
                tls: origin.tls,
                body: u32::try_from(body.len()).unwrap_or(u32::MAX),
                last_modified: parts
                    .headers
                    .get(header::LAST_MODIFIED)
                    .and_then(|v| v.to_str().ok())
                    .and_then(|v| httpdate::parse_http_date(v).ok())
                    .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                    .and_then(|d| i64::try_from(d.as_secs()).ok()),
            };
            self.opts
                .check(parts.status.as_u16(), &parts.headers, &body)
                .map_err(|e| e.with_detail(detail))?;
            // Time between phases (building the request, following a
            // redirect) goes to `write`, so that the phases add up to the
            // probe's time exactly.
            let total = t_done.saturating_sub(t0);
            let known: u64 = phases.0.iter().flatten().sum();
            if let Some(gap) = total.checked_sub(known)
                && gap > 0
            {
                add(&mut phases.0[3], Some(gap));
            }
            let (dwell, turnaround) = (timing.dwell, timing.turnaround);
            let responder = if send_later {
                let mut r = ResponderTimes {
                    wake: turnaround.zip(dwell).and_then(|(t, d)| t.checked_sub(d)),
                    dwell,
                    send_later: true,
                    ..ResponderTimes::default()
                };
                if let Some(send) = asked {
                    finish(&mut r, send);
                }
                Some(r)
            } else {
                (dwell.is_some() || turnaround.is_some()).then_some(ResponderTimes {
                    dwell,
                    turnaround: turnaround.filter(|_| hops == 0),
                    ..ResponderTimes::default()
                })
            };
            let stamps = Stamps {
                t1: Some(t0),
                t1k: w.t1k.filter(|_| clean),
                t4k: w.t4k.filter(|_| clean),
                t4: Some(t_done),
                responder,
                kernel_peer: false,
                handshake: None,
            };
            if keep {
                // Within the probe's time: an answered probe must not
                // become a timeout while the spare connects (a server slow
                // to accept, or one that stopped answering SYNs).
                let _ = tokio::time::timeout_at(limit, self.keep_spare()).await;
            }
            return Ok(Reply {
                sent,
                received,
                server_dwell: dwell.map(Duration::from_nanos),
                rx_wake: prober_sys::rx::wake_ns(stamps.t4k, t_done).map(Duration::from_nanos),
                bytes: body.len(),
                ttl: None,
                stamps,
                app: AppReply {
                    phases,
                    detail: Some(detail),
                },
            });
        }
    }

    /// Completes a response's send part that the next response carries
    /// (back to back): waits for it, and asks on a kept connection if it
    /// has not come.
    async fn settle(&self, seq: u64, reply: Reply) -> Reply {
        if !reply.stamps.responder.is_some_and(|r| r.send_later) {
            return reply;
        }
        let rtt = reply.rtt();
        let carry = INTERLEAVED_WAIT.min(self.timeout) + 2 * rtt;
        let on = {
            let mut settling = self.settling_on();
            let at = settling.iter().position(|(s, _)| *s == seq);
            at.and_then(|at| settling.remove(at)).map(|(_, id)| id)
        };
        let mut reply = settle_interleaved(&self.follow, seq, reply, carry, || async {
            // Only the connection the response came on, and only if it is
            // idle in the pool: another's responder does not know it.
            let Some(mut conn) = on.and_then(|id| self.take_id(id)) else {
                return false;
            };
            let until = Instant::now() + FOLLOW_UP_WAIT + 2 * rtt;
            let asked = self.ask_send(&mut conn, seq, until).await;
            if asked.is_some() {
                self.give_back(conn);
            }
            asked == Some(true)
        })
        .await;
        if let Some(r) = reply.stamps.responder.as_mut() {
            let send = r.send;
            finish(r, send);
        }
        reply
    }

    async fn prepare(&self) -> Result<(), ProbeError> {
        if self.opts.new_connection {
            return Ok(());
        }
        let (conn, _) = self.open(&self.origin, false).await?;
        self.give_back(conn);
        Ok(())
    }

    fn anomalies(&self) -> Anomalies {
        let cert = self.cert_not_after.load(Ordering::Relaxed);
        Anomalies {
            reconnects: if self.opts.new_connection {
                0
            } else {
                self.lost.load(Ordering::Relaxed)
            },
            cert_not_after: (cert != i64::MIN).then_some(cert),
            ..Anomalies::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_timing_is_read_to_the_nanosecond() {
        let v = HeaderValue::from_static("dwell;dur=0.012345, turnaround;dur=1.5");
        let t = server_timing(Some(&v));
        assert_eq!((t.dwell, t.turnaround), (Some(12_345), Some(1_500_000)));
        assert_eq!((t.send_later, t.carried), (false, None));
        let v = HeaderValue::from_static("cache;desc=hit, dwell;dur=x");
        assert_eq!(server_timing(Some(&v)), Timing::default());
        // A later send part promised, and an earlier one carried; one the
        // responder's kernel did not stamp has no duration.
        let v = HeaderValue::from_static(
            "dwell;dur=0.000200, turnaround;dur=0.030000, send;desc=7;dur=0.004100, send-later",
        );
        let t = server_timing(Some(&v));
        assert!(t.send_later);
        assert_eq!(t.carried, Some((7, Some(4_100))));
        let v = HeaderValue::from_static("dwell;dur=0.000200, send;desc=\"8\"");
        assert_eq!(server_timing(Some(&v)).carried, Some((8, None)));
        assert_eq!(ms_to_ns("3"), Some(3_000_000));
        assert_eq!(ms_to_ns("0.0000019"), Some(1));
    }

    #[test]
    fn redirects_resolve_against_the_origin() {
        let o = Origin {
            tls: false,
            host: "a".into(),
            port: 8080,
        };
        assert_eq!(
            HttpProbe::redirect(&o, "/x?y").unwrap(),
            (o.clone(), "/x?y".to_owned())
        );
        let (o2, p) = HttpProbe::redirect(&o, "https://b:8443/z").unwrap();
        assert_eq!(
            (o2.tls, o2.host.as_str(), o2.port, p.as_str()),
            (true, "b", 8443, "/z")
        );
        assert!(HttpProbe::redirect(&o, "ftp://x/").is_err());
        assert_eq!(o.authority(), "a:8080");
    }
}

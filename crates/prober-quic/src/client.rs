//! The QUIC handshake probe and the HTTP/3 request probe.

use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::Duration;

use bytes::{Buf as _, Bytes};
use prober_core::clock::unix_now_ns;
use prober_core::protocol::BuildEnv;
use prober_core::{
    Anomalies, AppReply, Detail, ErrorKind, Gate, Phases, Probe, ProbeError, Reply, ResponderTimes,
    Stamps,
};
use tokio::time::Instant;

use crate::options::QuicOptions;

/// What every probe of one target shares: its endpoint (one UDP socket),
/// the client configuration (and so the TLS session cache), where to
/// connect.
#[derive(Debug)]
pub(crate) struct Client {
    endpoint: quinn::Endpoint,
    cfg: quinn::ClientConfig,
    addr: SocketAddr,
    server_name: String,
    not_after: Arc<AtomicI64>,
    /// Connections opened after the first.
    reconnects: AtomicU64,
    opened: AtomicU64,
    /// Resumptions the server took 0-RTT data on.
    zero_rtt: AtomicU64,
    /// The path statistics of the connection a probe last used.
    path: std::sync::Mutex<Option<prober_core::PathStats>>,
}

/// quinn's connection errors, in prober's kinds.
fn connection_error(e: &quinn::ConnectionError) -> ProbeError {
    use quinn::ConnectionError as E;
    let kind = match e {
        E::TimedOut => ErrorKind::Timeout,
        E::ConnectionClosed(c)
            if u64::from(c.error_code) >= 0x100 && u64::from(c.error_code) < 0x200 =>
        {
            ErrorKind::Tls
        }
        E::TransportError(t) if u64::from(t.code) >= 0x100 && u64::from(t.code) < 0x200 => {
            ErrorKind::Tls
        }
        E::ConnectionClosed(_) | E::ApplicationClosed(_) | E::Reset => ErrorKind::Reset,
        E::TransportError(_) | E::VersionMismatch => ErrorKind::Protocol,
        E::LocallyClosed | E::CidsExhausted => ErrorKind::Local,
    };
    ProbeError::new(kind, format!("QUIC: {e}"))
}

impl Client {
    /// A client of `host` at `addr` offering `alpn` (the options' list, or
    /// `default_alpn`).
    pub(crate) fn new(
        addr: SocketAddr,
        host: &str,
        env: &BuildEnv,
        opts: &QuicOptions,
        default_alpn: &[u8],
    ) -> Result<Self, String> {
        let local: SocketAddr = if addr.is_ipv4() {
            (Ipv4Addr::UNSPECIFIED, 0).into()
        } else {
            (Ipv6Addr::UNSPECIFIED, 0).into()
        };
        let endpoint =
            quinn::Endpoint::client(local).map_err(|e| format!("opening a QUIC socket: {e}"))?;
        let alpn = if opts.alpn.is_empty() {
            vec![default_alpn.to_vec()]
        } else {
            opts.alpn.clone()
        };
        let not_after = Arc::new(AtomicI64::new(i64::MIN));
        let crypto = crate::tls::client(&env.tls, alpn, opts.resume, Arc::clone(&not_after))?;
        let mut cfg = quinn::ClientConfig::new(Arc::new(crypto));
        cfg.transport_config(opts.transport());
        Ok(Self {
            endpoint,
            cfg,
            addr,
            server_name: env
                .tls
                .server_name
                .clone()
                .unwrap_or_else(|| host.to_owned()),
            not_after,
            reconnects: AtomicU64::new(0),
            opened: AtomicU64::new(0),
            zero_rtt: AtomicU64::new(0),
            path: std::sync::Mutex::new(None),
        })
    }

    /// A new connection, its handshake done; with `resume`, a resumed
    /// session sends 0-RTT where it can (counted when the server took it).
    pub(crate) async fn connect(&self, resume: bool) -> Result<quinn::Connection, ProbeError> {
        if self.opened.fetch_add(1, Ordering::Relaxed) > 0 {
            self.reconnects.fetch_add(1, Ordering::Relaxed);
        }
        let connecting = self
            .endpoint
            .connect_with(self.cfg.clone(), self.addr, &self.server_name)
            .map_err(|e| ProbeError::new(ErrorKind::Local, format!("QUIC connect: {e}")))?;
        if resume {
            match connecting.into_0rtt() {
                Ok((conn, accepted)) => {
                    // The handshake is done when the server has said
                    // whether it took the 0-RTT data.
                    if accepted.await {
                        self.zero_rtt.fetch_add(1, Ordering::Relaxed);
                    }
                    if let Some(reason) = conn.close_reason() {
                        return Err(connection_error(&reason));
                    }
                    return Ok(conn);
                }
                Err(connecting) => return connecting.await.map_err(|e| connection_error(&e)),
            }
        }
        connecting.await.map_err(|e| connection_error(&e))
    }

    /// Keeps `conn`'s path statistics for the summary.
    pub(crate) fn keep_path(&self, conn: &quinn::Connection) {
        let p = conn.stats().path;
        let stats = prober_core::PathStats {
            srtt_us: u32::try_from(p.rtt.as_micros()).unwrap_or(u32::MAX),
            cwnd: p.cwnd,
            sent_packets: p.sent_packets,
            lost_packets: p.lost_packets,
            congestion_events: p.congestion_events,
            zero_rtt: self.zero_rtt.load(Ordering::Relaxed),
        };
        *self
            .path
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(stats);
    }

    fn anomalies(&self) -> Anomalies {
        let cert = self.not_after.load(Ordering::Relaxed);
        Anomalies {
            reconnects: self.reconnects.load(Ordering::Relaxed),
            cert_not_after: (cert != i64::MIN).then_some(cert),
            path: *self
                .path
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
            ..Anomalies::default()
        }
    }
}

/// `quic://`: a new connection per probe, timed from the first packet
/// sent to the handshake done, then closed. With `resume`, a connection is
/// closed only when the next probe has its own: the server's session
/// ticket comes after the handshake, and the next handshake resumes with it.
#[derive(Debug)]
pub(crate) struct QuicProbe {
    client: Client,
    resume: bool,
    last: std::sync::Mutex<Option<quinn::Connection>>,
}

impl QuicProbe {
    pub(crate) fn new(client: Client, resume: bool) -> Self {
        Self {
            client,
            resume,
            last: std::sync::Mutex::new(None),
        }
    }
}

impl Probe for QuicProbe {
    async fn probe_at(&self, _seq: u64, gate: Gate) -> Result<Reply, ProbeError> {
        gate.pass().await;
        let sent = Instant::now();
        let t1 = unix_now_ns();
        let conn = self.client.connect(self.resume).await?;
        let received = Instant::now();
        let t4 = unix_now_ns();
        self.client.keep_path(&conn);
        let done = if self.resume {
            self.last
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .replace(conn)
        } else {
            Some(conn)
        };
        if let Some(done) = done {
            done.close(0u32.into(), b"probed");
        }
        Ok(Reply {
            stamps: Stamps {
                t1: Some(t1),
                t4: Some(t4),
                ..Stamps::default()
            },
            ..Reply::plain(sent, received, 0)
        })
    }

    fn anomalies(&self) -> Anomalies {
        self.client.anomalies()
    }
}

/// A kept HTTP/3 connection: its request sender, and the task that drives
/// it.
struct Conn {
    send: h3::client::SendRequest<h3_quinn::OpenStreams, Bytes>,
    quic: quinn::Connection,
    _driver: tokio_util::task::AbortOnDropHandle<()>,
}

/// `h3://`: a GET on a kept connection (or a new one per probe).
pub(crate) struct H3Probe {
    pub(crate) client: Client,
    pub(crate) authority: String,
    pub(crate) path: String,
    pub(crate) new_connection: bool,
    /// What the request sends and what a valid response is (HTTP's
    /// options, as every HTTP version's targets take them).
    http: Arc<prober_net::http::HttpOptions>,
    kept: tokio::sync::Mutex<Option<Conn>>,
}

impl std::fmt::Debug for H3Probe {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("H3Probe")
            .field("authority", &self.authority)
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

/// The responder's `Server-Timing: dwell;dur=MS`, in ns.
fn dwell(v: Option<&http::HeaderValue>) -> Option<u64> {
    let text = v?.to_str().ok()?;
    text.split(',').find_map(|m| {
        let mut parts = m.trim().split(';');
        if parts.next()? != "dwell" {
            return None;
        }
        parts.find_map(|p| {
            let ms: f64 = p.trim().strip_prefix("dur=")?.parse().ok()?;
            (ms.is_finite() && ms >= 0.0)
                .then(|| Duration::try_from_secs_f64(ms / 1e3).ok())
                .flatten()
                .map(|d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
        })
    })
}

fn h3_error(what: &str, e: &dyn std::fmt::Display) -> ProbeError {
    ProbeError::new(ErrorKind::Protocol, format!("HTTP/3 {what}: {e}"))
}

impl H3Probe {
    pub(crate) fn new(
        client: Client,
        authority: String,
        path: String,
        new_connection: bool,
        http: Arc<prober_net::http::HttpOptions>,
    ) -> Self {
        Self {
            client,
            authority,
            path,
            new_connection,
            http,
            kept: tokio::sync::Mutex::new(None),
        }
    }

    async fn open(&self) -> Result<Conn, ProbeError> {
        let quic = self.client.connect(false).await?;
        let (mut driver, send) = h3::client::new(h3_quinn::Connection::new(quic.clone()))
            .await
            .map_err(|e| h3_error("connection", &e))?;
        let task = tokio::spawn(async move {
            let _ = std::future::poll_fn(|cx| driver.poll_close(cx)).await;
        });
        Ok(Conn {
            send,
            quic,
            _driver: tokio_util::task::AbortOnDropHandle::new(task),
        })
    }

    /// The sender of the kept connection, opened (and timed) if there is
    /// none or it has closed.
    async fn sender(
        &self,
    ) -> Result<
        (
            h3::client::SendRequest<h3_quinn::OpenStreams, Bytes>,
            Option<u64>,
            Option<Conn>,
        ),
        ProbeError,
    > {
        if self.new_connection {
            let t = unix_now_ns();
            let conn = self.open().await?;
            return Ok((
                conn.send.clone(),
                Some(unix_now_ns().saturating_sub(t)),
                Some(conn),
            ));
        }
        let mut kept = self.kept.lock().await;
        if let Some(c) = kept.as_ref()
            && c.quic.close_reason().is_none()
        {
            return Ok((c.send.clone(), None, None));
        }
        let t = unix_now_ns();
        let conn = self.open().await?;
        let connect = unix_now_ns().saturating_sub(t);
        let send = conn.send.clone();
        *kept = Some(conn);
        Ok((send, Some(connect), None))
    }
}

impl Probe for H3Probe {
    async fn probe_at(&self, _seq: u64, gate: Gate) -> Result<Reply, ProbeError> {
        let uri = format!("https://{}/{}", self.authority, self.path);
        let mut req = http::Request::builder()
            .method(self.http.method.clone())
            .uri(&uri)
            .header(http::header::USER_AGENT, "prober")
            .body(())
            .map_err(|e| ProbeError::new(ErrorKind::Other, format!("request {uri}: {e}")))?;
        for (k, v) in &self.http.headers {
            req.headers_mut().insert(k.clone(), v.clone());
        }
        gate.pass().await;
        let sent = Instant::now();
        let t1 = unix_now_ns();
        // A connection of this probe's own (new_connection) lives until
        // its response is read.
        let (mut send, connect, own) = self.sender().await?;
        let t_req = unix_now_ns();
        let mut stream = send
            .send_request(req)
            .await
            .map_err(|e| h3_error("request", &e))?;
        if !self.http.body.is_empty() {
            stream
                .send_data(self.http.body.clone())
                .await
                .map_err(|e| h3_error("request body", &e))?;
        }
        stream.finish().await.map_err(|e| h3_error("request", &e))?;
        let t_written = unix_now_ns();
        let resp = stream
            .recv_response()
            .await
            .map_err(|e| h3_error("response", &e))?;
        let t_first = unix_now_ns();
        let mut body = bytes::BytesMut::new();
        while let Some(mut chunk) = stream.recv_data().await.map_err(|e| h3_error("body", &e))? {
            if body.len() + chunk.remaining() > self.http.max_body {
                return Err(ProbeError::new(
                    ErrorKind::TooLarge,
                    format!("body over --max-body {} bytes", self.http.max_body),
                ));
            }
            while chunk.has_remaining() {
                let part = chunk.chunk();
                body.extend_from_slice(part);
                let n = part.len();
                chunk.advance(n);
            }
        }
        let received = Instant::now();
        let t4 = unix_now_ns();
        match &own {
            Some(c) => self.client.keep_path(&c.quic),
            None => {
                if let Some(c) = self.kept.lock().await.as_ref() {
                    self.client.keep_path(&c.quic);
                }
            }
        }
        let status = resp.status().as_u16();
        let detail = Detail::Http {
            status,
            version: 30,
            redirects: 0,
            tls: true,
            body: u32::try_from(body.len()).unwrap_or(u32::MAX),
            last_modified: None,
        };
        self.http
            .check(status, resp.headers(), &body)
            .map_err(|e| e.with_detail(detail))?;
        let dwell = dwell(resp.headers().get("server-timing"));
        Ok(Reply {
            sent,
            received,
            server_dwell: dwell.map(Duration::from_nanos),
            rx_wake: None,
            bytes: body.len(),
            ttl: None,
            stamps: Stamps {
                t1: Some(t1),
                t4: Some(t4),
                responder: dwell.map(|d| ResponderTimes {
                    dwell: Some(d),
                    ..ResponderTimes::default()
                }),
                ..Stamps::default()
            },
            app: AppReply {
                phases: Phases([
                    None,
                    connect,
                    // TLS is inside the QUIC handshake: its time is connect's.
                    None,
                    Some(
                        t_written.saturating_sub(t_req)
                            + t_req
                                .saturating_sub(t1)
                                .saturating_sub(connect.unwrap_or(0)),
                    ),
                    Some(t_first.saturating_sub(t_written)),
                    Some(t4.saturating_sub(t_first)),
                ]),
                detail: Some(detail),
            },
        })
    }

    async fn prepare(&self) -> Result<(), ProbeError> {
        if self.new_connection {
            return Ok(());
        }
        self.sender().await.map(drop)
    }

    fn anomalies(&self) -> Anomalies {
        self.client.anomalies()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_timing_dwell_reads_in_ns() {
        let v = http::HeaderValue::from_static("dwell;dur=0.045, turnaround;dur=0.6");
        assert_eq!(dwell(Some(&v)), Some(45_000));
        assert_eq!(dwell(None), None);
        let v = http::HeaderValue::from_static("other;dur=1");
        assert_eq!(dwell(Some(&v)), None);
        // A server's nonsense never panics the probe.
        let v = http::HeaderValue::from_static("dwell;dur=1e300");
        assert_eq!(dwell(Some(&v)), None);
    }
}

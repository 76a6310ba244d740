//! The Echo responder and the standard health service.

use std::pin::Pin;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio_stream::wrappers::{ReceiverStream, TcpListenerStream};
use tokio_stream::{Stream, StreamExt as _};
use tokio_util::sync::CancellationToken;
use tonic::{Request, Response, Status, Streaming};

use std::sync::Arc;

use tonic::transport::server::TlsConnectInfo;

use crate::pb::echo_server::{Echo, EchoServer};
use crate::pb::{PingReply, PingRequest, SendTimeReply, SendTimeRequest};
use crate::stamped::ServerStream;
use crate::tls::ServerTls;
use prober_core::clock::unix_now_ns;
use prober_net::stream::ServerRx;

use crate::MAX_REPLY;

/// Replies waiting to be sent on one stream before the server stops reading
/// requests from it.
const STREAM_BUFFER: usize = 128;

/// Responder settings.
#[derive(Debug, Clone, Default)]
pub struct ServerConfig {
    /// TLS, and client certificate checking, if any.
    pub tls: Option<ServerTls>,
    /// Hold every request this long before replying (tests and experiments).
    pub delay: Duration,
    /// Connection caps and timeouts for a public address.
    pub limits: prober_net::guard::Limits,
    /// What the limits refused.
    pub stats: Arc<prober_net::guard::GuardStats>,
}

#[derive(Debug)]
struct EchoService {
    delay: Duration,
}

fn reply(req: PingRequest, recv_ns: u64, recv_kernel_ns: Option<u64>) -> PingReply {
    let size = match req.reply_size {
        0 => req.payload.len(),
        n => n as usize,
    }
    .min(MAX_REPLY);
    let payload = if size == req.payload.len() {
        req.payload
    } else {
        vec![0u8; size]
    };
    PingReply {
        seq: req.seq,
        payload,
        server_recv_unix_ns: recv_ns,
        server_send_unix_ns: unix_now_ns(),
        server_recv_kernel_unix_ns: recv_kernel_ns.unwrap_or(0),
        send_time_later: false,
        prev: None,
    }
}

fn send_time((seq, send): (u64, Option<u64>)) -> SendTimeReply {
    SendTimeReply {
        seq,
        known: send.is_some(),
        send_ns: send.unwrap_or(0),
    }
}

/// The kernel's receive stamp of the read that brought a request the
/// handler got at `recv_ns` (plaintext or under TLS): the request's, when
/// the connection carries one call at a time. A stamp after the handler's
/// own read time cannot be this request's.
fn t2k(stamps: Option<&ServerRx>, recv_ns: u64) -> Option<u64> {
    stamps.and_then(ServerRx::last).filter(|k| *k <= recv_ns)
}

/// The reply to `req`, read at `recv_ns` (kernel stamp `kernel`), on a
/// connection with `stamps`: with the previous reply's send time where one
/// waits, and, where `req` asks, the promise of its own.
fn answer(
    req: PingRequest,
    (recv_ns, kernel): (u64, Option<u64>),
    stamps: Option<&ServerRx>,
) -> PingReply {
    let want = req.want_send_time;
    let mut out = reply(req, recv_ns, kernel);
    if let Some(rx) = stamps {
        out.prev = rx.take_send(None).map(send_time);
        if want && rx.want_send_times() {
            out.send_time_later = true;
            rx.sent(out.seq, out.server_send_unix_ns);
        }
    }
    out
}

/// The connection's receive stamps (plaintext or under TLS).
fn server_rx<T>(request: &Request<T>) -> Option<Arc<ServerRx>> {
    let ext = request.extensions();
    ext.get::<Arc<ServerRx>>()
        .or_else(|| {
            ext.get::<TlsConnectInfo<Arc<ServerRx>>>()
                .map(TlsConnectInfo::get_ref)
        })
        .cloned()
}

type ReplyStream = Pin<Box<dyn Stream<Item = Result<PingReply, Status>> + Send + 'static>>;

#[tonic::async_trait]
impl Echo for EchoService {
    async fn ping(&self, request: Request<PingRequest>) -> Result<Response<PingReply>, Status> {
        let recv = unix_now_ns();
        let stamps = server_rx(&request);
        let kernel = t2k(stamps.as_deref(), recv);
        if !self.delay.is_zero() {
            tokio::time::sleep(self.delay).await;
        }
        Ok(Response::new(answer(
            request.into_inner(),
            (recv, kernel),
            stamps.as_deref(),
        )))
    }

    async fn send_time(
        &self,
        request: Request<SendTimeRequest>,
    ) -> Result<Response<SendTimeReply>, Status> {
        let stamps = server_rx(&request);
        let seq = request.into_inner().seq;
        let took = stamps.and_then(|rx| rx.take_send(Some(seq)));
        Ok(Response::new(send_time(took.unwrap_or((seq, None)))))
    }

    type StreamStream = ReplyStream;

    async fn stream(
        &self,
        request: Request<Streaming<PingRequest>>,
    ) -> Result<Response<Self::StreamStream>, Status> {
        let stamps = server_rx(&request);
        let mut requests = request.into_inner();
        let (tx, rx) = mpsc::channel(STREAM_BUFFER);
        let delay = self.delay;
        // Owned by the response stream: when the client goes away the
        // receiver is dropped, `send` fails and the task ends.
        tokio::spawn(async move {
            while let Some(item) = requests.next().await {
                let recv = unix_now_ns();
                let kernel = t2k(stamps.as_deref(), recv);
                let out = match item {
                    Ok(req) => {
                        if !delay.is_zero() {
                            tokio::time::sleep(delay).await;
                        }
                        Ok(answer(req, (recv, kernel), stamps.as_deref()))
                    }
                    Err(status) => Err(status),
                };
                if tx.send(out).await.is_err() {
                    break;
                }
            }
        });
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }
}

/// Serves Echo and `grpc.health.v1.Health` (reporting SERVING for "" and
/// "prober.v1.Echo") on `listener` until `stop` is cancelled.
///
/// # Errors
/// If the TLS configuration is rejected or the server fails.
pub async fn serve_grpc(
    listener: TcpListener,
    cfg: ServerConfig,
    stop: CancellationToken,
) -> Result<(), tonic::transport::Error> {
    let (reporter, health) = tonic_health::server::health_reporter();
    reporter.set_serving::<EchoServer<EchoService>>().await;
    let mut builder = tonic::transport::Server::builder()
        .tcp_nodelay(true)
        .max_concurrent_streams(prober_net::guard::H2_MAX_CONCURRENT_STREAMS)
        .http2_max_header_list_size(prober_net::guard::H2_MAX_HEADER_LIST)
        .http2_max_pending_accept_reset_streams(Some(prober_net::guard::H2_MAX_PENDING_RESETS));
    let tls = cfg.tls.is_some();
    if let Some(tls) = cfg.tls {
        builder = builder.tls_config(tls.into_config())?;
    }
    // `tcp_nodelay` on the builder applies only to listeners tonic binds
    // itself; with our own listener every accepted socket needs it, or
    // replies wait for delayed ACKs (Nagle): about 40 ms per call on Linux.
    let gate = prober_net::guard::Gate::new(cfg.limits, Arc::clone(&cfg.stats));
    let incoming = TcpListenerStream::new(listener).filter_map(move |conn| {
        match conn {
            Err(e) => Some(Err(e)),
            Ok(stream) => match stream.peer_addr().map(|p| gate.admit_or_warn(p, "grpc")) {
                Ok(Some(permit)) => Some(stream.set_nodelay(true).map(|()| {
                    ServerStream::new(
                        if tls {
                            prober_net::stream::ServerStream::new(stream).under_tls()
                        } else {
                            prober_net::stream::ServerStream::new(stream)
                        },
                        permit,
                        gate.limits(),
                        Arc::clone(&gate.stats),
                    )
                })),
                Ok(None) => None,
                // Gone before we looked.
                Err(_) => None,
            },
        }
    });
    let serve = builder
        .add_service(health)
        .add_service(EchoServer::new(EchoService { delay: cfg.delay }))
        .serve_with_incoming_shutdown(incoming, stop.clone().cancelled_owned());
    // Graceful shutdown waits for open calls, and a stream stays open as long
    // as its client wants: give them a grace period, then return anyway.
    tokio::select! {
        res = serve => res,
        () = async {
            stop.cancelled().await;
            tokio::time::sleep(SHUTDOWN_GRACE).await;
        } => {
            tracing::info!("grpc calls still open after the grace period; closing");
            Ok(())
        }
    }
}

/// How long a stopping responder waits for open calls before returning.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(1);

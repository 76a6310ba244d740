//! tonic's side of the stamped TCP stream of [`prober_net::stream`]: the
//! client's connector, and the accepted stream the Echo handler reads its
//! kernel receive stamp from.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use hyper_util::rt::TokioIo;
use prober_net::stream::{ChannelStamps, ServerRx, StampedStream};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

/// Connects to one address with a [`StampedStream`] (tonic's
/// `connect_with_connector`; TLS, where configured, goes on top).
#[derive(Debug, Clone)]
pub(crate) struct StampedConnector {
    pub(crate) addr: SocketAddr,
    pub(crate) stamps: Arc<ChannelStamps>,
    pub(crate) tx_stamps: bool,
}

impl tower_service::Service<http::Uri> for StampedConnector {
    type Response = TokioIo<StampedStream>;
    type Error = io::Error;
    type Future = Pin<Box<dyn Future<Output = io::Result<Self::Response>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _uri: http::Uri) -> Self::Future {
        let (addr, stamps, want_tx) = (self.addr, Arc::clone(&self.stamps), self.tx_stamps);
        Box::pin(async move {
            let inner = TcpStream::connect(addr).await?;
            Ok(TokioIo::new(
                StampedStream::new(inner, stamps, want_tx)?.coalescing(),
            ))
        })
    }
}

/// An accepted connection that reads with kernel receive stamps, as tonic
/// serves it (its connect info is the [`ServerRx`]). It holds its place at
/// the responder's connection gate, and is closed when the client sends
/// nothing within the request timeout of connecting (no HTTP/2 preface),
/// or nothing for the idle timeout after that.
#[derive(Debug)]
pub(crate) struct ServerStream {
    inner: prober_net::stream::ServerStream,
    _permit: prober_net::guard::Permit,
    deadline: Pin<Box<tokio::time::Sleep>>,
    idle: Duration,
    heard: bool,
    stats: Arc<prober_net::guard::GuardStats>,
}

impl ServerStream {
    pub(crate) fn new(
        inner: prober_net::stream::ServerStream,
        permit: prober_net::guard::Permit,
        limits: &prober_net::guard::Limits,
        stats: Arc<prober_net::guard::GuardStats>,
    ) -> Self {
        Self {
            inner,
            _permit: permit,
            deadline: Box::pin(tokio::time::sleep(limits.request_timeout)),
            idle: limits.idle_timeout,
            heard: false,
            stats,
        }
    }
}

impl tonic::transport::server::Connected for ServerStream {
    type ConnectInfo = Arc<ServerRx>;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.inner.rx()
    }
}

impl AsyncRead for ServerStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        match Pin::new(&mut this.inner).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {
                if buf.filled().len() > before {
                    this.heard = true;
                    let next = tokio::time::Instant::now() + this.idle;
                    this.deadline.as_mut().reset(next);
                }
                Poll::Ready(Ok(()))
            }
            Poll::Pending => match this.deadline.as_mut().poll(cx) {
                Poll::Ready(()) => {
                    let (counter, why) = if this.heard {
                        (&this.stats.idle_timeouts, "idle too long")
                    } else {
                        (&this.stats.request_timeouts, "nothing sent in time")
                    };
                    counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    Poll::Ready(Err(io::Error::new(io::ErrorKind::TimedOut, why)))
                }
                Poll::Pending => Poll::Pending,
            },
            other => other,
        }
    }
}

impl AsyncWrite for ServerStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

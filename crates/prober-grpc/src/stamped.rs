//! tonic's side of the stamped TCP stream of [`prober_net::stream`]: the
//! client's connector, and the accepted stream the Echo handler reads its
//! kernel receive stamp from.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

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
            Ok(TokioIo::new(StampedStream::new(inner, stamps, want_tx)?))
        })
    }
}

/// An accepted connection that reads with kernel receive stamps, as tonic
/// serves it (its connect info is the [`ServerRx`]).
#[derive(Debug)]
pub(crate) struct ServerStream(pub(crate) prober_net::stream::ServerStream);

impl tonic::transport::server::Connected for ServerStream {
    type ConnectInfo = Arc<ServerRx>;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.0.rx()
    }
}

impl AsyncRead for ServerStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().0).poll_read(cx, buf)
    }
}

impl AsyncWrite for ServerStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().0).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().0).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().0).poll_shutdown(cx)
    }
}

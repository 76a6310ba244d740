//! What every responder takes, whatever its protocol: the limits of a
//! public address and their counters, the TLS files, how it waits for
//! requests. The binary and the daemon put one [`Common`] in a
//! [`prober_core::responder::ServeEnv`]; each protocol's responder reads it
//! there, with its own settings beside it.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use prober_core::responder::ServeError;
use tokio::net::{TcpListener, UdpSocket};

use crate::guard::{GuardStats, Limits};

/// The server's TLS files (`--tls-cert`, `--tls-key`, `--tls-client-ca`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerTlsFiles {
    /// Certificate chain (PEM).
    pub cert: PathBuf,
    /// Private key (PEM).
    pub key: PathBuf,
    /// Require client certificates signed by this CA (PEM).
    pub client_ca: Option<PathBuf>,
}

/// What every responder is started with.
#[derive(Debug, Clone, Default)]
pub struct Common {
    /// Limits for a public address (rate, connections, timeouts, memory).
    pub limits: Limits,
    /// What the limits refused, shared by every responder.
    pub guard: Arc<GuardStats>,
    /// Log each client connection (at debug level).
    pub log_clients: bool,
    /// Requests read by spinning threads.
    pub busy_poll: bool,
    /// How requests are waited for (`serve --receive`).
    pub receive: prober_core::spin::Receive,
    /// Send UDP follow-ups to sources other than loopback.
    pub udp_follow_ups: bool,
    /// The TLS files, for the responders that serve TLS.
    pub tls: Option<ServerTlsFiles>,
}

/// Binds a TCP listener for the responder `what`; the error says which.
///
/// # Errors
/// The address cannot be bound or read.
pub async fn bind_tcp(
    what: &str,
    addr: SocketAddr,
) -> Result<(TcpListener, SocketAddr), ServeError> {
    let listener = TcpListener::bind(addr)
        .await
        .map_err(|e| ServeError::io(format!("binding {what} {addr}"), e))?;
    let at = listener
        .local_addr()
        .map_err(|e| ServeError::io(format!("reading the address of {what}"), e))?;
    Ok((listener, at))
}

/// Binds a UDP socket for the responder `what`; the error says which.
///
/// # Errors
/// The address cannot be bound or read.
pub async fn bind_udp(what: &str, addr: SocketAddr) -> Result<(UdpSocket, SocketAddr), ServeError> {
    let socket = UdpSocket::bind(addr)
        .await
        .map_err(|e| ServeError::io(format!("binding {what} {addr}"), e))?;
    let at = socket
        .local_addr()
        .map_err(|e| ServeError::io(format!("reading the address of {what}"), e))?;
    Ok((socket, at))
}

//! TCP and UDP probes for prober, and the echo responder they talk to.
//!
//! - [`TcpProbe`] (`tcp://`): request/response over one connection, like
//!   netperf TCP_RR.
//! - [`TcpConnectProbe`] (`tcp-connect://`): handshake time against any TCP
//!   server.
//! - [`TcpCrrProbe`] (`tcp-crr://`): connect + request + response + close,
//!   like netperf TCP_CRR.
//! - [`UdpProbe`] (`udp://`): datagram request/response.
//! - [`responder`]: `serve_tcp` and `serve_udp`, the other end.
//! - [`wire`]: the frame both sides speak (`docs/wire-format.md`).
//!
//! Schedules, timeouts and statistics come from `prober-core`; this crate
//! only moves bytes and timestamps them as close to the socket as tokio allows.

mod reader;
pub mod responder;
mod tcp;
mod udp;
pub mod wire;

pub use responder::{ResponderConfig, serve_tcp, serve_udp};
pub use tcp::{TcpConnectProbe, TcpCrrProbe, TcpProbe};
pub use udp::UdpProbe;

/// Default port of `prober serve` for TCP and UDP.
pub const DEFAULT_PORT: u16 = 8707;

/// A request size the protocol cannot carry.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("size {size} is out of range for {protocol}: must be {min}..={max} bytes")]
pub struct SizeError {
    /// The protocol name.
    pub protocol: &'static str,
    /// The size asked for.
    pub size: usize,
    /// Smallest legal size (the frame header).
    pub min: usize,
    /// Largest legal size.
    pub max: usize,
}

/// Checks a `--size` for a TCP (`udp == false`) or UDP frame.
///
/// # Errors
/// [`SizeError`] when the size is below the header or above the limit.
pub fn check_size(protocol: &'static str, size: usize, udp: bool) -> Result<(), SizeError> {
    let max = if udp {
        wire::MAX_UDP_FRAME
    } else {
        wire::MAX_TCP_FRAME
    };
    if (wire::HEADER_LEN..=max).contains(&size) {
        Ok(())
    } else {
        Err(SizeError {
            protocol,
            size,
            min: wire::HEADER_LEN,
            max,
        })
    }
}

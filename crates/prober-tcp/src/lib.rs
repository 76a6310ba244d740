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
//! - [`sockperf`]: the server side of sockperf's protocol, for sockperf's
//!   clients.
//! - [`TCP`], [`TCP_CONNECT`], [`TCP_CRR`], [`UDP`]: their descriptors.
//!
//! Schedules, timeouts and statistics come from `prober-core`; this crate
//! only moves bytes and timestamps them as close to the socket as tokio allows.
//!
//! May use: `prober-core`, `prober-sys`, `prober-net`.
//! May not: know another protocol crate, parse a command line, or write
//!  results.

#![forbid(unsafe_code)]

mod protocol;
mod reader;
pub mod responder;
pub mod serve;
pub mod sockperf;
mod tcp;
mod udp;
pub mod wire;

pub use protocol::{TCP, TCP_CONNECT, TCP_CRR, UDP};
pub use responder::{ResponderConfig, serve_tcp, serve_udp};
pub use serve::{Impairments, SOCKPERF_RESPONDER, TCP_RESPONDER, UDP_RESPONDER};
pub use tcp::{TcpConnectProbe, TcpCrrProbe, TcpProbe};
pub use udp::UdpProbe;

/// Default port of `prober serve` for TCP and UDP.
pub const DEFAULT_PORT: u16 = 8707;

/// This crate's probe types, for the binary's list of protocols (one
/// line there per crate).
pub const PROTOCOLS: &[&prober_core::Protocol] = &[&TCP, &TCP_CONNECT, &TCP_CRR, &UDP];

/// This crate's responders, for the binary's list of responders.
pub const RESPONDERS: &[&prober_core::responder::Responder] =
    &[&TCP_RESPONDER, &UDP_RESPONDER, &SOCKPERF_RESPONDER];

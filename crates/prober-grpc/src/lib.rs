//! gRPC for prober: the `prober.v1.Echo` service and its responder, and the
//! probes that measure it.
//!
//! - [`pb`]: code generated from `proto/prober/v1/echo.proto` at build time
//!   (with the vendored protoc).
//! - [`server`]: [`serve_grpc`] runs Echo plus the standard
//!   `grpc.health.v1.Health` service, in plaintext or TLS (optionally mTLS).
//! - [`client`]: [`GrpcProbe`] (`grpc://`, unary `Ping` on one reused
//!   HTTP/2 channel), [`GrpcStreamProbe`] (`grpc+stream://`, ping-pong on one
//!   bidirectional stream) and [`GrpcHealthProbe`] (`grpc-health://`, the
//!   health check any gRPC server may answer). Each reports the server's
//!   dwell time where the protocol carries it, and reconnects with jittered
//!   backoff after the server goes away, counting the reconnects.
//! - [`tls`]: loading certificates and keys for both sides.
//! - [`GRPC`], [`GRPC_STREAM`], [`GRPC_HEALTH`]: the probes' descriptors.
//!
//! May use: `prober-core`, `prober-sys`, `prober-net`.
//! May not: know another protocol crate, parse a command line, or write
//!  results.

#![forbid(unsafe_code)]

pub mod client;
mod protocol;
mod serve;
pub mod server;
mod stamped;
pub mod tls;

/// Generated protobuf and gRPC code for `prober.v1`.
#[allow(
    missing_docs,
    unreachable_pub,
    clippy::all,
    clippy::pedantic,
    clippy::use_self
)]
pub mod pb {
    tonic::include_proto!("prober.v1");
}

pub use client::{ClientConfig, GrpcHealthProbe, GrpcProbe, GrpcStreamProbe};
pub use protocol::{GRPC, GRPC_HEALTH, GRPC_STREAM};
pub use serve::{GRPC_RESPONDER, GRPCS_RESPONDER, GrpcServeOptions};
pub use server::{ServerConfig, serve_grpc};
pub use tls::{ClientTls, ServerTls, TlsError};

/// Default port of `prober serve` for gRPC.
pub const DEFAULT_PORT: u16 = 8708;

/// Largest reply payload the responder sends (1 MiB).
pub const MAX_REPLY: usize = 1 << 20;

/// Largest request payload a probe may send (4 MiB, tonic's default
/// message limit, less framing).
pub const MAX_REQUEST: usize = (4 << 20) - 1024;

/// Formats an error with its whole `source()` chain on one line, since
/// tonic's transport errors keep the useful part (refused, unknown CA, ...)
/// several sources deep.
pub fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(inner) = cur {
        let msg = inner.to_string();
        if !s.contains(&msg) {
            s.push_str(": ");
            s.push_str(&msg);
        }
        cur = inner.source();
    }
    s
}

/// This crate's probe types, for the binary's list of protocols (one
/// line there per crate).
pub const PROTOCOLS: &[&prober_core::Protocol] = &[&GRPC, &GRPC_STREAM, &GRPC_HEALTH];

/// This crate's responders, for the binary's list of responders.
pub const RESPONDERS: &[&prober_core::responder::Responder] = &[&GRPC_RESPONDER, &GRPCS_RESPONDER];

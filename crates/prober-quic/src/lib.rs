//! QUIC and HTTP/3 probes and responders for prober.
//!
//! - `quic://HOST:PORT`: the QUIC handshake (1-RTT; with `--quic-resume`,
//!   every probe after the first resumes the TLS session and sends 0-RTT
//!   where the server takes it).
//! - `h3://HOST[:PORT][/PATH]`: an HTTP/3 request on a kept connection (or
//!   a new one per probe with `--h3-new-connection`), with its phases
//!   (connect is the QUIC handshake, TLS inside it), its status, and the
//!   responder's dwell from prober's own responder (`Server-Timing`).
//!
//! The split's kernel parts stay unknown: quinn reads and writes its UDP
//! socket itself (GSO, GRO, several packets a call), so no packet of a
//! request has a stamp of its own to read (docs/quic.md).
//!
//! `prober serve --h3 ADDR` answers `h3://` (`/echo`, `/status/CODE`);
//! `--quic ADDR` accepts QUIC connections and echoes their streams; both
//! with `--tls-cert` and `--tls-key`.
//!
//! May use: `prober-core`, `prober-sys`, `prober-net`.
//! May not: know another protocol crate, parse a command line, or write
//!  results.

#![forbid(unsafe_code)]

mod client;
mod options;
mod protocol;
mod serve;
mod tls;

pub use options::QuicSpec;
pub use protocol::{H3, QUIC};
pub use serve::{H3_RESPONDER, QUIC_RESPONDER};

/// This crate's probe types, for the binary's list of protocols (one
/// line there per crate).
pub const PROTOCOLS: &[&prober_core::Protocol] = &[&QUIC, &H3];

/// This crate's responders, for the binary's list of responders.
pub const RESPONDERS: &[&prober_core::responder::Responder] = &[&H3_RESPONDER, &QUIC_RESPONDER];

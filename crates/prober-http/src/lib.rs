//! HTTP probes and the HTTP responder for prober.
//!
//! - `http://HOST[:PORT][/PATH]`: HTTP/1.1 (or HTTP/2 with prior knowledge,
//!   `--http2`); `h2c://` is HTTP/2 with prior knowledge always.
//! - `https://HOST[:PORT][/PATH]`: HTTP/2 or HTTP/1.1 as ALPN settles it.
//!
//! Each probe reports the phases of its request (resolve, connect, TLS,
//! request written, first response byte, body done; see
//! [`prober_core::Phases`]), its status, and the split of its round trip
//! where the connection's kernel stamps and the responder's
//! `Server-Timing` give it. [`HttpOptions`] chooses the method, body,
//! headers, connection reuse, redirects and what a valid response is.
//!
//! [`serve_http`] is `prober serve --http`: `GET /echo` (and a few test
//! paths), HTTP/1.1 and h2c on one port, or TLS with ALPN.
//!
//! May use: `prober-core`, `prober-sys`, `prober-net`.
//! May not: know another protocol crate, parse a command line, or write
//!  results.

#![forbid(unsafe_code)]

mod client;
mod protocol;
mod serve;
mod server;
mod tls;

pub use client::HttpProbe;
pub use prober_net::http::{
    DEFAULT_MAX_BODY, HTTP_FLAGS, HeaderCheck, HttpOptions, HttpSpec, HttpVersion, OptionsError,
    StatusSet, body_regex,
};
pub use protocol::{HTTP, HTTPS};
pub use serve::{HTTP_RESPONDER, HTTPS_RESPONDER};
pub use server::{HttpServerConfig, SERVER_TIMING, serve_http};
pub use tls::{ServerTlsError, server_config, stream_client_config};

/// This crate's probe types, for the binary's list of protocols (one
/// line there per crate).
pub const PROTOCOLS: &[&prober_core::Protocol] = &[&HTTP, &HTTPS];

/// This crate's responders, for the binary's list of responders.
pub const RESPONDERS: &[&prober_core::responder::Responder] = &[&HTTP_RESPONDER, &HTTPS_RESPONDER];

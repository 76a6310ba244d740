//! The layer two or more protocol crates share, above the syscalls of
//! `prober-sys`: it makes no raw system call and has no `unsafe`.
//!
//! - [`mod@resolve`]: resolving a target's host once, by address family.
//! - [`stream`]: a TCP stream for HTTP clients and servers that reads
//!   with kernel receive stamps and files transmit stamps by byte.
//! - [`follow`]: waiting for a responder's send part that comes after
//!   its reply.
//! - [`guard`]: a responder's limits on a public address (per-source
//!   rate, connection caps, buffer budget, log lines a flood cannot
//!   multiply).
//! - [`options`]: a protocol's own options, flags and job table from one
//!   type, described once for the binary and the daemon to loop over.
//! - [`responder`]: what every responder is started with ([`responder::Common`]).
//! - [`tls`]: rustls configurations for clients and responders, and
//!   certificate expiry.
//!
//! May use: `prober-core`, `prober-sys`.
//! May not: hold `unsafe` or make a raw system call (that is prober-sys), or
//!  know one protocol's wire format.

#![forbid(unsafe_code)]

pub mod follow;
pub mod guard;
pub mod http;
pub mod options;
pub mod resolve;
pub mod responder;
pub mod stream;
pub mod tls;

pub use resolve::{Family, ResolveError, resolve};

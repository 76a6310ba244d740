//! STAMP, the Simple Two-way Active Measurement Protocol (RFC 8762), with
//! the optional extensions of RFC 8972: a Session-Sender probe
//! (`stamp://host[:port]`) and a Session-Reflector (`prober serve
//! --stamp`). Routers (Junos, SR OS, IOS XR and others) ship reflectors, so
//! prober can measure against them with nothing installed on the far end.
//!
//! STAMP carries the four timestamps the split needs: the network part of
//! a round trip is (T4 − T1) − (T3 − T2) against any standard reflector.
//! See docs/stamp.md.
//!
//! May use: `prober-core`, `prober-sys`, `prober-net`.
//! May not: know another protocol crate, parse a command line, or write
//!  results.

#![forbid(unsafe_code)]

pub mod packet;
mod protocol;
pub mod reflector;
mod sender;
mod serve;
pub mod time;
pub mod tlv;

pub use packet::{Key, Mode};
pub use protocol::STAMP;
pub use reflector::{ReflectorConfig, ReflectorStats, serve_stamp};
pub use sender::{STAMP_FLAGS, SenderOptions, StampProbe, StampSpec, TlvChoice};
pub use serve::{ReflectorSpec, STAMP_RESPONDER};
pub use time::Format;

/// The STAMP port assigned by IANA (RFC 8762 §4.1).
pub const DEFAULT_PORT: u16 = 862;

/// This crate's probe types, for the binary's list of protocols (one
/// line there per crate).
pub const PROTOCOLS: &[&prober_core::Protocol] = &[&STAMP];

/// This crate's responders, for the binary's list of responders.
pub const RESPONDERS: &[&prober_core::responder::Responder] = &[&STAMP_RESPONDER];

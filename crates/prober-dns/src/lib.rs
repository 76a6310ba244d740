//! DNS probes for prober: `dns://SERVER[:PORT]/NAME[?type=A][&tcp]` and
//! `dns+tcp://`, with hickory-proto for the messages.
//!
//! Each probe sends one query and times it to its reply; the reply's
//! rcode, answer count and AA/TC flags go into the result, and
//! [`DnsOptions`] says which rcodes and answers are valid. Over UDP,
//! replies are matched to queries by ID as docs/dns.md explains: late,
//! duplicate and unmatched replies are counted, never timed.
//!
//! May use: `prober-core`, `prober-sys`, `prober-net`.
//! May not: know another protocol crate, parse a command line, or write
//!  results.

#![forbid(unsafe_code)]

mod options;
mod probe;
mod protocol;
mod query;

pub use options::{DNS_FLAGS, DnsOptions, DnsSpec};
pub use probe::DnsProbe;
pub use protocol::DNS;
pub use query::{Question, QuestionError};

/// This crate's probe types, for the binary's list of protocols (one
/// line there per crate).
pub const PROTOCOLS: &[&prober_core::Protocol] = &[&DNS];

/// This crate's responders, for the binary's list of responders.
pub const RESPONDERS: &[&prober_core::responder::Responder] = &[];

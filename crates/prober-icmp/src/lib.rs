//! ICMP echo probes for prober (`icmp://host` and bare hosts), IPv4 and IPv6.
//!
//! - [`IcmpClient`] opens at most one socket per address family and shares
//!   it between every target of a run; a receive loop per socket dispatches
//!   replies to the probes by nonce.
//! - [`IcmpProbe`] implements [`prober_core::Probe`], so pacing, statistics
//!   and sinks come from the core; [`ICMP`] is its descriptor.
//! - Sockets: the unprivileged datagram ("ping") socket first, then raw
//!   ([`SocketKind`]). Replies carry the kernel receive timestamp.
//! - Late and duplicate replies are counted by the core matcher; replies with
//!   an altered payload, or from the wrong address, are counted as corrupt.
//! - ICMP errors (destination unreachable, time exceeded) fail the probe they
//!   quote: read from the socket on raw sockets, from the error queue
//!   (`IP_RECVERR`) on datagram sockets.
//!
//! Packets are built with `pnet_packet` and classified with surge-ping's
//! decoders. surge-ping's own client is not used for receiving because it
//! drops late and duplicate replies without a trace and cannot report them.
//!
//! May use: `prober-core`, `prober-sys`, `prober-net`.
//! May not: know another protocol crate, parse a command line, or write
//!  results.

#![forbid(unsafe_code)]

mod client;
pub mod packet;
mod protocol;
mod socket;

use std::io;

pub use client::{IcmpClient, IcmpProbe};
pub use protocol::{ICMP, IcmpSpec};
pub use socket::SocketKind;

/// Why ICMP probing cannot start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum IcmpError {
    /// Neither socket kind asked for could be opened.
    #[error("{}", open_message(*v6, dgram.as_ref(), raw.as_ref()))]
    Open {
        /// Which family.
        v6: bool,
        /// Why the datagram socket failed, if tried.
        dgram: Option<io::Error>,
        /// Why the raw socket failed, if tried.
        raw: Option<io::Error>,
    },
    /// A socket option could not be set.
    #[error("setting up the icmp socket ({what}): {source}")]
    Setup {
        /// Which step.
        what: &'static str,
        /// The cause.
        #[source]
        source: io::Error,
    },
}

fn open_message(v6: bool, dgram: Option<&io::Error>, raw: Option<&io::Error>) -> String {
    let family = if v6 { "ICMPv6" } else { "ICMP" };
    let mut tried = Vec::new();
    if let Some(e) = dgram {
        tried.push(format!("datagram socket: {e}"));
    }
    if let Some(e) = raw {
        tried.push(format!("raw socket: {e}"));
    }
    format!(
        "cannot open an {family} socket ({}); allow unprivileged ICMP with \
         `sysctl -w net.ipv4.ping_group_range=\"0 2147483647\"` (it governs IPv6 too), \
         or allow raw sockets with `setcap cap_net_raw+ep <path to prober>`",
        tried.join("; ")
    )
}

/// This crate's probe types, for the binary's list of protocols (one
/// line there per crate).
pub const PROTOCOLS: &[&prober_core::Protocol] = &[&ICMP];

/// This crate's responders, for the binary's list of responders.
pub const RESPONDERS: &[&prober_core::responder::Responder] = &[];

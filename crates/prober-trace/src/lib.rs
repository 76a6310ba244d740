//! Paths for prober: which way through the network a target's probes go,
//! hop by hop, and every ECMP branch of it (docs/path.md).
//!
//! - [`flow`]: one flow's socket: UDP (ICMP errors come back on its error
//!   queue, `IP_RECVERR`, so it needs no privilege), or a raw socket for
//!   TCP SYN and ICMP echo probes.
//! - [`follow`]: which branch one of the mesh's own probe flows takes,
//!   from TTL-limited datagrams with its 5-tuple (a raw socket).
//! - [`mda`]: the Multipath Detection Algorithm's stopping rule: how many
//!   flows to send through a hop before "no other branch" holds.
//! - [`mod@trace`]: exploring the branches, then measuring each as mtr does.
//! - [`report`]: mtr's report table, one per branch.
//!
//! May use: `prober-sys`.
//! May not: parse a command line, print, or name another protocol.

#![forbid(unsafe_code)]

pub mod flow;
pub mod follow;
pub mod mda;
pub mod report;
pub mod trace;

pub use flow::{Kind, Method};
pub use trace::{Branch, HopStats, Level, Phase, ProbeRecord, Settings, Trace, trace};

/// The UDP port traces go to unless told (traceroute's first port): a
/// closed port, so that the destination answers Port Unreachable.
pub const DEFAULT_PORT: u16 = 33434;

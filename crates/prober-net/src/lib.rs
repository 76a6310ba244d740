//! Socket helpers shared by prober's protocol crates, kept out of
//! `prober-core` the way quinn keeps its syscalls in `quinn-udp`.
//!
//! - [`rx`]: SO_TIMESTAMPNS on, a `recvmsg` that returns the kernel receive
//!   timestamp, and the receive wake-up it gives.
//! - [`busy`]: busy-poll receive threads and a lock-free readiness check.
//! - [`mod@resolve`]: resolving a target's host once, by address family.
//! - [`stream`]: a TCP stream for HTTP clients and servers that reads
//!   with kernel receive stamps and files transmit stamps by byte.
//! - [`follow`]: waiting for a responder's send part that comes after
//!   its reply.
//! - [`guard`]: a responder's limits on a public address (per-source
//!   rate, connection caps, buffer budget, log lines a flood cannot
//!   multiply).
//! - [`synbpf`]: kernel stamps of TCP handshakes, from a BPF program on the
//!   interface's hooks.
//! - [`syntap`]: the same from a packet socket, where BPF is not allowed.
//! - [`mark`]: the TOS byte / traffic class that carries DSCP.
//! - [`pm_qos`]: a CPU latency request that keeps idle CPUs from sleeping
//!   deeply between probes.
//! - [`host`]: this machine's host name and kernel, for results.

pub mod busy;
pub mod follow;
pub mod guard;
pub mod mark;
pub mod pm_qos;
pub mod resolve;
pub mod rx;
pub mod stream;
pub mod synbpf;
pub mod syntap;
pub mod tcpinfo;
pub mod tls;

pub use resolve::{Family, ResolveError, resolve};

/// This machine's host name and kernel release (`uname -n`, `uname -r`);
/// `unknown` where they cannot be read.
pub fn host() -> (String, String) {
    match nix::sys::utsname::uname() {
        Ok(u) => (
            u.nodename().to_string_lossy().into_owned(),
            u.release().to_string_lossy().into_owned(),
        ),
        Err(_) => ("unknown".to_owned(), "unknown".to_owned()),
    }
}

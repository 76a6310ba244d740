//! prober's syscalls, and every `unsafe` block in the tree, kept in one crate
//! the way quinn keeps its socket calls in `quinn-udp`. Every other crate is
//! `#![forbid(unsafe_code)]`, and the layering test
//! (`crates/prober-cli/tests/cli/layout.rs`) checks that they say so.
//!
//! - [`rx`]: SO_TIMESTAMPNS and SO_TIMESTAMPING on, a `recvmsg` that returns
//!   the kernel receive timestamp, transmit stamps from the error queue.
//! - [`busy`]: busy-poll receive threads and a lock-free readiness check.
//! - [`tcpinfo`]: the kernel's own RTT of a TCP connection (`TCP_INFO`).
//! - [`mark`]: the TOS byte / traffic class that carries DSCP, and the
//!   bound device.
//! - [`pm_qos`]: a CPU latency request that keeps idle CPUs from sleeping
//!   deeply between probes.
//! - [`icmp`]: Linux's `ICMP_FILTER` on raw ICMPv4 sockets.
//! - [`synbpf`]: kernel stamps of TCP handshakes, from a BPF program on the
//!   interface's hooks.
//! - [`syntap`]: the same from a packet socket, where BPF is not allowed.
//! - [`sched`]: the probing thread at realtime priority (`SCHED_FIFO`).
//! - [`host`]: this machine's host name and kernel, for results.
//! - [`one_malloc_arena`]: glibc's allocator in one arena for the process.
//!
//! What it may not do: know a protocol. It opens no connection of its own
//! except the sockets its stampers need, and depends on `prober-core` only
//! for plain types (marks, TCP RTT, the clock).
//!
//! May use: `prober-core`.
//! May not: know a protocol, parse a command line, or write results.

pub mod busy;
pub mod icmp;
pub mod mark;
pub mod pm_qos;
pub mod rx;
pub mod sched;
pub mod synbpf;
pub mod syntap;
pub mod tcpinfo;

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

/// Asks glibc's allocator for one arena for the whole process, as
/// `MALLOC_ARENA_MAX=1` does; call it before any thread starts. With an
/// arena a thread, the daemon's probing thread and its HTTP side each kept
/// the other's freed memory out of reach: at 10,000 targets its peak RSS
/// was higher, and moved from run to run, for no CPU saved (BENCHMARKS.md,
/// "Memory at 10,000 targets, third pass"). Small
/// allocations still come from each thread's own cache (tcache) without
/// the arena's lock. `false` where the allocator is not glibc's or it
/// refused.
#[allow(unsafe_code)]
pub fn one_malloc_arena() -> bool {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: `mallopt` takes two integers and touches only the
        // allocator's own settings; it is called before other threads exist.
        unsafe { nix::libc::mallopt(nix::libc::M_ARENA_MAX, 1) == 1 }
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    {
        false
    }
}

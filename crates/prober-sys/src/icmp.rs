//! The one ICMP socket option no safe wrapper covers, and the classic BPF
//! programs that keep a raw socket to its own echoes and segments.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};

use nix::libc;

/// Sets Linux's `ICMP_FILTER` on a raw ICMPv4 socket so that only the ICMP
/// types in `keep` are queued to it, as ping does. Unlike a classic BPF
/// filter, it drops the other types before the kernel clones the packet for
/// the socket.
///
/// Written by hand because nix and socket2 have no wrapper for
/// `ICMP_FILTER`: one `setsockopt` of a `u32`.
///
/// # Errors
/// What `setsockopt` reports (not a raw ICMPv4 socket).
#[allow(unsafe_code)]
pub fn set_filter(fd: BorrowedFd<'_>, keep: &[u8]) -> io::Result<()> {
    const SOL_RAW: libc::c_int = 255;
    const ICMP_FILTER: libc::c_int = 1;
    // A set bit drops that ICMP type.
    let keep = keep
        .iter()
        .filter(|&&t| t < 32)
        .fold(0u32, |acc, &t| acc | (1 << t));
    let filter: u32 = !keep;
    // SAFETY: `setsockopt` reads exactly `size_of::<u32>()` bytes from a
    // pointer to a live local `u32`, on a descriptor the caller borrows to us.
    let rc = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            SOL_RAW,
            ICMP_FILTER,
            std::ptr::from_ref(&filter).cast(),
            std::mem::size_of::<u32>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Classic BPF opcodes the filters below use.
const LDX_B_MSH: u16 = 0xb1; // X = 4 * ([k] & 0xf): the IPv4 header length
const LDX_IMM: u16 = 0x01; // X = k
const LD_B_IND: u16 = 0x50; // A = [X + k] (byte)
const LD_H_IND: u16 = 0x48; // A = [X + k] (half word)
const JEQ: u16 = 0x15; // if A == k
const RET: u16 = 0x06;

/// X = where the packet's payload starts, so that one program serves both
/// families: an IPv4 raw socket's filter sees the IP header first, an IPv6
/// one the payload alone.
fn payload_start(v6: bool) -> socket2::SockFilter {
    if v6 {
        socket2::SockFilter::new(LDX_IMM, 0, 0, 0)
    } else {
        socket2::SockFilter::new(LDX_B_MSH, 0, 0, 0)
    }
}

/// A filter for a raw ICMP socket that keeps echo replies with identifier
/// `ident` and every Destination Unreachable and Time Exceeded (whose
/// quote the reader checks): the host's other echo replies (another
/// prober's, ping's) never wake it.
pub fn echo_filter(v6: bool, ident: u16) -> Vec<socket2::SockFilter> {
    let ident = u32::from(ident);
    let (echo_reply, unreachable, time_exceeded) = if v6 { (129, 1, 3) } else { (0, 3, 11) };
    let f = socket2::SockFilter::new;
    vec![
        payload_start(v6),
        f(LD_B_IND, 0, 0, 0), // the ICMP type
        f(JEQ, 0, 2, echo_reply),
        f(LD_H_IND, 0, 0, 4), // the echo identifier
        f(JEQ, 3, 2, ident),
        f(JEQ, 2, 0, unreachable),
        f(JEQ, 1, 0, time_exceeded),
        f(RET, 0, 0, 0),
        f(RET, 0, 0, u32::MAX),
    ]
}

/// A filter for a raw TCP socket that keeps only the segments to local
/// port `port` (a trace flow's SYN-ACKs and resets): the host's other TCP
/// traffic is not copied to it. The error queue, where routers' answers
/// come, is not filtered.
pub fn tcp_port_filter(v6: bool, port: u16) -> Vec<socket2::SockFilter> {
    let port = u32::from(port);
    let f = socket2::SockFilter::new;
    vec![
        payload_start(v6),
        f(LD_H_IND, 0, 0, 2), // the destination port
        f(JEQ, 0, 1, port),
        f(RET, 0, 0, u32::MAX),
        f(RET, 0, 0, 0),
    ]
}

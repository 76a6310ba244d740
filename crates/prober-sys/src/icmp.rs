//! The one ICMP socket option no safe wrapper covers.

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

//! The kernel's own round-trip estimate of a TCP connection (`TCP_INFO`),
//! a cross-check for the RTTs prober measures.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};

use nix::libc;
use prober_core::TcpRtt;

/// Reads `tcpi_rtt`, `tcpi_rttvar` and `tcpi_min_rtt` of a TCP socket.
///
/// Written by hand because none of nix, socket2 or rustix (the socket
/// crates in this tree) reads `TCP_INFO`: one `getsockopt` into libc's
/// `tcp_info`.
///
/// # Errors
/// What `getsockopt` reports (not a TCP socket, a closed one).
#[allow(unsafe_code)]
pub fn tcp_rtt(fd: BorrowedFd<'_>) -> io::Result<TcpRtt> {
    // SAFETY: tcp_info is a plain C struct of integers, for which all zero
    // bytes are a valid value.
    let mut info: libc::tcp_info = unsafe { std::mem::zeroed() };
    let mut len = libc::socklen_t::try_from(std::mem::size_of::<libc::tcp_info>())
        .map_err(io::Error::other)?;
    // SAFETY: `info` is a writable tcp_info of `len` bytes that outlives the
    // call, and the kernel writes at most `len` bytes into it.
    let rc = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            std::ptr::from_mut(&mut info).cast(),
            &raw mut len,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(TcpRtt {
        rtt_us: info.tcpi_rtt,
        rttvar_us: info.tcpi_rttvar,
        min_rtt_us: info.tcpi_min_rtt,
    })
}

#[cfg(test)]
mod tests {
    use std::io::{Read as _, Write as _};
    use std::os::fd::AsFd as _;

    use super::*;

    #[test]
    fn reads_the_rtt_of_a_loopback_connection() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let mut c = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (mut s, _) = l.accept().unwrap();
        let mut buf = [0u8; 4];
        for _ in 0..10 {
            c.write_all(b"ping").unwrap();
            s.read_exact(&mut buf).unwrap();
            s.write_all(b"pong").unwrap();
            c.read_exact(&mut buf).unwrap();
        }
        let r = tcp_rtt(c.as_fd()).unwrap();
        assert!(r.rtt_us > 0 && r.min_rtt_us > 0, "{r:?}");
        assert!(r.min_rtt_us <= r.rtt_us.max(r.min_rtt_us), "{r:?}");
        // A UDP socket has no TCP_INFO.
        let u = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        assert!(tcp_rtt(u.as_fd()).is_err());
    }
}

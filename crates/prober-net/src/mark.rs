//! Packet marking: the IP TOS byte (IPv6 traffic class) that carries DSCP,
//! for `--tos` and `--dscp`.

use std::io;
use std::os::fd::AsFd;

/// DSCP names (RFC 4594 and friends) and their code points.
pub const DSCP_NAMES: [(&str, u8); 22] = [
    ("cs0", 0),
    ("cs1", 8),
    ("af11", 10),
    ("af12", 12),
    ("af13", 14),
    ("cs2", 16),
    ("af21", 18),
    ("af22", 20),
    ("af23", 22),
    ("cs3", 24),
    ("af31", 26),
    ("af32", 28),
    ("af33", 30),
    ("cs4", 32),
    ("af41", 34),
    ("af42", 36),
    ("af43", 38),
    ("cs5", 40),
    ("va", 44),
    ("ef", 46),
    ("cs6", 48),
    ("cs7", 56),
];

/// The TOS byte for a DSCP given by name (`ef`, `af41`, `cs6`) or number
/// (0..=63): the code point shifted past the two ECN bits.
///
/// # Errors
/// Names what is wrong.
pub fn tos_of_dscp(text: &str) -> Result<u8, String> {
    let t = text.trim().to_ascii_lowercase();
    let dscp = match DSCP_NAMES.iter().find(|(n, _)| *n == t) {
        Some((_, v)) => *v,
        None => t.parse::<u8>().ok().filter(|v| *v < 64).ok_or_else(|| {
            format!(
                "DSCP {:?} is neither 0..=63 nor a name (ef, af11..af43, cs0..cs7, va)",
                prober_core::quote::short(text)
            )
        })?,
    };
    Ok(dscp << 2)
}

/// Sets the TOS byte (IPv4) or traffic class (IPv6) of a socket's packets.
///
/// # Errors
/// The kernel's.
pub fn set_tos(socket: &impl AsFd, v6: bool, tos: u8) -> io::Result<()> {
    let s = socket2::SockRef::from(socket);
    if v6 {
        s.set_tclass_v6(u32::from(tos))
    } else {
        s.set_tos_v4(u32::from(tos))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dscp_names_and_numbers() {
        assert_eq!(tos_of_dscp("ef"), Ok(0xb8));
        assert_eq!(tos_of_dscp("AF41"), Ok(34 << 2));
        assert_eq!(tos_of_dscp("46"), Ok(0xb8));
        assert_eq!(tos_of_dscp("0"), Ok(0));
        assert!(tos_of_dscp("64").unwrap_err().contains("0..=63"));
        assert!(tos_of_dscp("gold").is_err());
    }

    #[test]
    fn a_udp_socket_carries_the_mark() {
        let s = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        set_tos(&s, false, 0xb8).unwrap();
        assert_eq!(socket2::SockRef::from(&s).tos_v4().unwrap(), 0xb8);
    }
}

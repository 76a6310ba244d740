//! Packet marking: the IP TOS byte (IPv6 traffic class) that carries DSCP
//! (`--tos`, `--dscp`), the interface (`--interface`) and the firewall
//! mark (`--fwmark`) of a socket's packets.

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

/// Sets the TOS byte, the interface and the firewall mark of `marks` on a
/// socket (its source address is for the caller to bind: a UDP or ICMP
/// socket binds once, to the source or to any address).
///
/// # Errors
/// The kernel's, naming what failed (`SO_BINDTODEVICE` and `SO_MARK` need
/// `CAP_NET_RAW` or `CAP_NET_ADMIN`).
pub fn apply(socket: &impl AsFd, v6: bool, marks: &prober_core::protocol::Marks) -> io::Result<()> {
    let what = |what: &str| {
        let what = what.to_owned();
        move |e: io::Error| io::Error::new(e.kind(), format!("{what}: {e}"))
    };
    if let Some(tos) = marks.tos {
        set_tos(socket, v6, tos).map_err(what("setting the TOS byte"))?;
    }
    let s = socket2::SockRef::from(socket);
    if let Some(dev) = &marks.interface {
        s.bind_device(Some(dev.as_bytes())).map_err(what(&format!(
            "binding to interface {:?}",
            prober_core::quote::short(dev)
        )))?;
    }
    if let Some(mark) = marks.fwmark {
        s.set_mark(mark)
            .map_err(what(&format!("setting firewall mark {mark:#x}")))?;
    }
    Ok(())
}

/// The local address a socket of this family binds to: `marks`' source,
/// or the unspecified address, port 0 (the kernel picks).
pub fn bind_addr(marks: &prober_core::protocol::Marks, v6: bool) -> std::net::SocketAddr {
    use std::net::{Ipv4Addr, Ipv6Addr};
    match marks.source {
        Some(ip) => (ip, 0).into(),
        None if v6 => (Ipv6Addr::UNSPECIFIED, 0).into(),
        None => (Ipv4Addr::UNSPECIFIED, 0).into(),
    }
}

/// Checks that this host has the network interface `name`
/// (`--interface`), so a bad name is refused before any socket opens, the
/// same way for every protocol.
///
/// # Errors
/// A message naming the interface, and how to list them.
pub fn check_interface(name: &str) -> Result<(), String> {
    match nix::net::if_::if_nametoindex(name) {
        Ok(_) => Ok(()),
        Err(_) => Err(format!(
            "--interface {}: this host has no such network interface (`ip link` lists them)",
            prober_core::quote::short(name)
        )),
    }
}

/// A firewall mark: decimal, or hexadecimal after `0x`.
///
/// # Errors
/// Names what is wrong.
pub fn parse_fwmark(text: &str) -> Result<u32, String> {
    let t = text.trim();
    let n = match t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        Some(hex) => u32::from_str_radix(hex, 16),
        None => t.parse(),
    };
    n.map_err(|_| {
        format!(
            "firewall mark {:?} is not a 32-bit number (decimal or 0x hex)",
            prober_core::quote::short(text)
        )
    })
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
    fn fwmarks_in_decimal_and_hex() {
        assert_eq!(parse_fwmark("42"), Ok(42));
        assert_eq!(parse_fwmark("0x2a"), Ok(42));
        assert!(parse_fwmark("0x1_0000_0000").is_err());
        assert!(parse_fwmark("-1").unwrap_err().contains("32-bit"));
    }

    #[test]
    fn an_unknown_interface_is_named_in_the_error() {
        let s = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let marks = prober_core::protocol::Marks {
            interface: Some("nosuch0".to_owned()),
            ..Default::default()
        };
        let e = apply(&s, false, &marks).unwrap_err().to_string();
        assert!(e.contains("binding to interface \"nosuch0\""), "{e}");
    }

    #[test]
    fn a_udp_socket_carries_the_mark() {
        let s = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        set_tos(&s, false, 0xb8).unwrap();
        assert_eq!(socket2::SockRef::from(&s).tos_v4().unwrap(), 0xb8);
    }
}

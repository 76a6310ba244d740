//! Parsing and resolving target URLs (`tcp://host:port`, bare `host`, ...).

use std::fmt;
use std::net::{IpAddr, SocketAddr};

use anyhow::{Context as _, bail};

/// The protocols a target can name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Scheme {
    Icmp,
    Tcp,
    TcpConnect,
    TcpCrr,
    Udp,
    Grpc,
    Grpcs,
    GrpcStream,
    GrpcsStream,
    GrpcHealth,
    GrpcsHealth,
}

impl Scheme {
    const ALL: [(&'static str, Self); 11] = [
        ("icmp", Self::Icmp),
        ("tcp", Self::Tcp),
        ("tcp-connect", Self::TcpConnect),
        ("tcp-crr", Self::TcpCrr),
        ("udp", Self::Udp),
        ("grpc", Self::Grpc),
        ("grpcs", Self::Grpcs),
        ("grpc+stream", Self::GrpcStream),
        ("grpcs+stream", Self::GrpcsStream),
        ("grpc-health", Self::GrpcHealth),
        ("grpcs-health", Self::GrpcsHealth),
    ];

    /// gRPC over TLS.
    pub(crate) fn tls(self) -> bool {
        matches!(self, Self::Grpcs | Self::GrpcsStream | Self::GrpcsHealth)
    }

    fn takes_path(self) -> bool {
        matches!(self, Self::GrpcHealth | Self::GrpcsHealth)
    }

    pub(crate) fn name(self) -> &'static str {
        Self::ALL
            .iter()
            .find(|(_, s)| *s == self)
            .map_or("?", |(n, _)| n)
    }

    fn needs_port(self) -> bool {
        self != Self::Icmp
    }
}

/// A parsed target: scheme, host and port. Nothing is resolved yet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Target {
    pub(crate) scheme: Scheme,
    pub(crate) host: String,
    pub(crate) port: u16,
    /// `grpc-health://` only: the service to check ("" = the whole server).
    pub(crate) path: String,
}

impl Target {
    /// A target without a path.
    pub(crate) fn new(scheme: Scheme, host: &str, port: u16) -> Self {
        Self {
            scheme,
            host: host.to_owned(),
            port,
            path: String::new(),
        }
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let host = if self.host.contains(':') {
            format!("[{}]", self.host)
        } else {
            self.host.clone()
        };
        if self.scheme.needs_port() {
            write!(f, "{}://{host}:{}", self.scheme.name(), self.port)?;
        } else {
            write!(f, "{}://{host}", self.scheme.name())?;
        }
        if !self.path.is_empty() {
            write!(f, "/{}", self.path)?;
        }
        Ok(())
    }
}

/// Parses one target. A bare host means ICMP.
pub(crate) fn parse_target(text: &str) -> anyhow::Result<Target> {
    let (scheme, rest) = match text.split_once("://") {
        Some((s, rest)) => {
            let lower = s.to_ascii_lowercase();
            let Some((_, scheme)) = Scheme::ALL.iter().find(|(n, _)| *n == lower) else {
                let known: Vec<_> = Scheme::ALL.iter().map(|(n, _)| *n).collect();
                bail!(
                    "unknown scheme {s:?} in target {text:?} (known: {})",
                    known.join(", ")
                );
            };
            (*scheme, rest)
        }
        None => (Scheme::Icmp, text),
    };
    let (authority, path) = match rest.split_once('/') {
        Some((a, p)) => (a, p.trim_end_matches('/')),
        None => (rest, ""),
    };
    if !path.is_empty() && !scheme.takes_path() {
        bail!(
            "target {text:?} has a path; only scheme://host:port is accepted (grpc-health:// takes /service)"
        );
    }
    let (host, port) = split_host_port(authority).with_context(|| format!("target {text:?}"))?;
    if host.is_empty() {
        bail!("target {text:?} has no host");
    }
    let port = match (port, scheme.needs_port()) {
        (Some(p), true) => parse_port(p).with_context(|| format!("target {text:?}"))?,
        (None, true) => bail!(
            "target {text:?} is missing a port ({}://host:port)",
            scheme.name()
        ),
        (Some(_), false) => bail!("target {text:?}: icmp targets take no port"),
        (None, false) => 0,
    };
    Ok(Target {
        scheme,
        host: host.to_owned(),
        port,
        path: path.to_owned(),
    })
}

fn split_host_port(authority: &str) -> anyhow::Result<(&str, Option<&str>)> {
    if let Some(inner) = authority.strip_prefix('[') {
        let Some((host, after)) = inner.split_once(']') else {
            bail!("unclosed '[' in IPv6 address");
        };
        return match after {
            "" => Ok((host, None)),
            _ => match after.strip_prefix(':') {
                Some(port) => Ok((host, Some(port))),
                None => bail!("unexpected {after:?} after IPv6 address"),
            },
        };
    }
    // A bare IPv6 literal (several colons) has no port.
    if authority.matches(':').count() > 1 {
        return Ok((authority, None));
    }
    Ok(match authority.split_once(':') {
        Some((h, p)) => (h, Some(p)),
        None => (authority, None),
    })
}

fn parse_port(p: &str) -> anyhow::Result<u16> {
    let n: u32 = p
        .parse()
        .map_err(|_| anyhow::anyhow!("port {p:?} is not a number"))?;
    if n == 0 || n > 65535 {
        bail!("port {n} is out of range 1..=65535");
    }
    Ok(n as u16)
}

/// Which address family to use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Family {
    Any,
    V4,
    V6,
}

/// Resolves `target` once, returning the first address of the wanted family.
pub(crate) async fn resolve(target: &Target, family: Family) -> anyhow::Result<SocketAddr> {
    let addrs: Vec<SocketAddr> = if let Ok(ip) = target.host.parse::<IpAddr>() {
        vec![SocketAddr::new(ip, target.port)]
    } else {
        if !valid_host_name(&target.host) {
            bail!(
                "cannot resolve host {:?}: not a valid host name",
                target.host
            );
        }
        tokio::net::lookup_host((target.host.as_str(), target.port))
            .await
            .with_context(|| format!("cannot resolve host {:?}", target.host))?
            .collect()
    };
    let found = addrs.iter().copied().find(|a| match family {
        Family::Any => true,
        Family::V4 => a.is_ipv4(),
        Family::V6 => a.is_ipv6(),
    });
    match found {
        Some(a) => Ok(a),
        None if addrs.is_empty() => bail!("cannot resolve host {:?}: no addresses", target.host),
        None => bail!(
            "host {:?} has no {} address",
            target.host,
            if family == Family::V4 { "IPv4" } else { "IPv6" }
        ),
    }
}

/// RFC 1123 host name syntax (letters, digits, hyphens; labels of 1..=63;
/// at most 253 bytes). Checked before asking the resolver, so an obviously
/// broken name never becomes a DNS query.
fn valid_host_name(host: &str) -> bool {
    let host = host.strip_suffix('.').unwrap_or(host);
    !host.is_empty()
        && host.len() <= 253
        && host.split('.').all(|label| {
            (1..=63).contains(&label.len())
                && !label.starts_with('-')
                && !label.ends_with('-')
                && label
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(scheme: Scheme, host: &str, port: u16) -> Target {
        Target::new(scheme, host, port)
    }

    #[test]
    fn parses_targets() {
        assert_eq!(
            parse_target("tcp://127.0.0.1:80").unwrap(),
            t(Scheme::Tcp, "127.0.0.1", 80)
        );
        assert_eq!(parse_target("UDP://h:1/").unwrap(), t(Scheme::Udp, "h", 1));
        assert_eq!(
            parse_target("tcp-connect://[::1]:22").unwrap(),
            t(Scheme::TcpConnect, "::1", 22)
        );
        assert_eq!(
            parse_target("tcp-crr://x:65535").unwrap(),
            t(Scheme::TcpCrr, "x", 65535)
        );
        assert_eq!(
            parse_target("example.org").unwrap(),
            t(Scheme::Icmp, "example.org", 0)
        );
        assert_eq!(parse_target("::1").unwrap(), t(Scheme::Icmp, "::1", 0));
        assert_eq!(
            parse_target("icmp://[::1]").unwrap(),
            t(Scheme::Icmp, "::1", 0)
        );
        assert_eq!(
            parse_target("grpc://h:50051").unwrap(),
            t(Scheme::Grpc, "h", 50051)
        );
    }

    #[test]
    fn displays_normalised() {
        assert_eq!(
            parse_target("TCP://[::1]:5").unwrap().to_string(),
            "tcp://[::1]:5"
        );
        assert_eq!(
            parse_target("localhost").unwrap().to_string(),
            "icmp://localhost"
        );
    }

    #[test]
    fn rejects_bad_targets() {
        let cases = [
            ("ftp://h:1", "unknown scheme"),
            ("tcp://h", "missing a port"),
            ("tcp://h:0", "out of range"),
            ("tcp://h:65536", "out of range"),
            ("tcp://h:http", "not a number"),
            ("tcp://:80", "no host"),
            ("tcp://[::1:80", "unclosed"),
            ("icmp://h:5", "take no port"),
            ("tcp://h:1/path", "has a path"),
        ];
        for (text, want) in cases {
            let err = format!("{:#}", parse_target(text).unwrap_err());
            assert!(err.contains(want), "{text}: {err}");
        }
    }

    #[test]
    fn host_name_syntax() {
        assert!(valid_host_name("localhost"));
        assert!(valid_host_name("a-b.example.org."));
        assert!(!valid_host_name("a..b"));
        assert!(!valid_host_name("-a"));
        assert!(!valid_host_name("a b"));
        assert!(!valid_host_name(&"a".repeat(64)));
    }

    #[tokio::test]
    async fn resolves_literals_and_families() {
        let v4 = parse_target("tcp://127.0.0.1:9").unwrap();
        assert_eq!(
            resolve(&v4, Family::Any).await.unwrap(),
            "127.0.0.1:9".parse().unwrap()
        );
        assert!(resolve(&v4, Family::V6).await.is_err());
        // Syntactically invalid, so no DNS query leaves the machine.
        let bad = parse_target("tcp://no..such-host:9").unwrap();
        let err = format!("{:#}", resolve(&bad, Family::Any).await.unwrap_err());
        assert!(err.contains("cannot resolve host"), "{err}");
    }
}

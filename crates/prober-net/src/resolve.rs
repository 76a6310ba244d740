//! Resolving a target's host once, at start, by address family.

use std::net::{IpAddr, SocketAddr};

use prober_core::Target;

/// Which address family to use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Family {
    /// The first address the resolver gives.
    #[default]
    Any,
    /// IPv4 only (`-4`).
    V4,
    /// IPv6 only (`-6`).
    V6,
}

/// Why a host did not resolve.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ResolveError {
    /// Not a host name at all; no query was sent.
    #[error("cannot resolve host {0:?}: not a valid host name")]
    Invalid(String),
    /// The resolver failed.
    #[error("cannot resolve host {host:?}: {reason}")]
    Lookup {
        /// The host.
        host: String,
        /// The resolver's reason, once (the I/O error getaddrinfo's
        /// failure comes in says it again as its own source).
        reason: String,
    },
    /// The resolver answered with no address.
    #[error("cannot resolve host {0:?}: no addresses")]
    Empty(String),
    /// Addresses, but none of the family asked for.
    #[error("host {host:?} has no {family} address")]
    NoFamily {
        /// The host.
        host: String,
        /// `IPv4` or `IPv6`.
        family: &'static str,
    },
}

/// Resolves `target` once, returning the first address of the wanted family.
///
/// # Errors
/// [`ResolveError`]; a syntactically invalid name is refused before any
/// query, so a typo never becomes a DNS query.
pub async fn resolve(target: &Target, family: Family) -> Result<SocketAddr, ResolveError> {
    let addrs: Vec<SocketAddr> = if let Ok(ip) = target.host.parse::<IpAddr>() {
        vec![SocketAddr::new(ip, target.port)]
    } else {
        if !valid_host_name(&target.host) {
            return Err(ResolveError::Invalid(target.host.clone()));
        }
        tokio::net::lookup_host((target.host.as_str(), target.port))
            .await
            .map_err(|e| ResolveError::Lookup {
                host: target.host.clone(),
                reason: lookup_reason(&e),
            })?
            .collect()
    };
    let found = addrs.iter().copied().find(|a| match family {
        Family::Any => true,
        Family::V4 => a.is_ipv4(),
        Family::V6 => a.is_ipv6(),
    });
    match found {
        Some(a) => Ok(a),
        None if addrs.is_empty() => Err(ResolveError::Empty(target.host.clone())),
        None => Err(ResolveError::NoFamily {
            host: target.host.clone(),
            family: if family == Family::V4 { "IPv4" } else { "IPv6" },
        }),
    }
}

/// getaddrinfo's reason without the wrapper tokio puts around it
/// ("failed to lookup address information: Name or service not known").
fn lookup_reason(e: &std::io::Error) -> String {
    let text = e.to_string();
    text.strip_prefix("failed to lookup address information: ")
        .unwrap_or(&text)
        .to_owned()
}

/// RFC 1123 host name syntax (letters, digits, hyphens; labels of 1..=63;
/// at most 253 bytes). Checked before asking the resolver.
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

/// This host's own addresses, every interface's (for a mesh, where a daemon
/// finds itself among its peers and skips itself). Empty if the interfaces
/// cannot be listed.
pub fn own_addresses() -> Vec<IpAddr> {
    let Ok(addrs) = nix::ifaddrs::getifaddrs() else {
        return Vec::new();
    };
    addrs
        .filter_map(|a| a.address)
        .filter_map(|a| {
            a.as_sockaddr_in()
                .map(|v4| IpAddr::V4(v4.ip()))
                .or_else(|| a.as_sockaddr_in6().map(|v6| IpAddr::V6(v6.ip())))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use prober_core::parse_target;
    use prober_core::testutil::REGISTRY as REG;

    use super::*;

    #[test]
    fn own_addresses_include_loopback() {
        let own = own_addresses();
        assert!(own.contains(&IpAddr::from([127, 0, 0, 1])), "{own:?}");
        assert!(!own.contains(&IpAddr::from([127, 0, 0, 2])), "{own:?}");
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
        let v4 = parse_target(&REG, "tcp://127.0.0.1:9").unwrap();
        assert_eq!(
            resolve(&v4, Family::Any).await.unwrap(),
            "127.0.0.1:9".parse().unwrap()
        );
        assert!(resolve(&v4, Family::V6).await.is_err());
        // Syntactically invalid, so no DNS query leaves the machine.
        let bad = parse_target(&REG, "tcp://no..such-host:9").unwrap();
        let err = resolve(&bad, Family::Any).await.unwrap_err().to_string();
        assert!(err.contains("cannot resolve host"), "{err}");
    }
}

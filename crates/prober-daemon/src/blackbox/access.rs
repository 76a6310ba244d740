//! Who may make the daemon probe what: `/probe` probes whatever its caller
//! names, from inside the network the daemon sits in (a server-side
//! request forgery vector). `[blackbox] allowed_targets` lists the host
//! name globs and address ranges it may probe.

use std::net::IpAddr;

/// The targets `/probe` may probe.
#[derive(Debug, Clone, Default)]
pub(crate) struct Allowed {
    /// `"*"`: anything.
    any: bool,
    ranges: Vec<ipnet::IpNet>,
    names: Vec<glob::Pattern>,
}

impl Allowed {
    /// Anything at all (a loopback listener's default).
    pub(crate) fn everything() -> Self {
        Self {
            any: true,
            ..Self::default()
        }
    }

    /// Reads a list of CIDRs (`10.0.0.0/8`, `::1/128`), addresses and host
    /// name globs (`*.example.com`); `"*"` allows anything.
    ///
    /// # Errors
    /// An entry that is none of these, named.
    pub(crate) fn parse(list: &[String]) -> Result<Self, String> {
        let mut out = Self::default();
        for entry in list {
            let e = entry.trim();
            if e == "*" {
                out.any = true;
            } else if let Ok(net) = e.parse::<ipnet::IpNet>() {
                out.ranges.push(net);
            } else if let Ok(ip) = e.parse::<IpAddr>() {
                out.ranges.push(ipnet::IpNet::from(ip));
            } else if e.contains('/') || e.is_empty() {
                return Err(format!(
                    "allowed_targets entry {entry:?} is not a CIDR, an address or a host name glob"
                ));
            } else {
                let glob = glob::Pattern::new(&e.to_ascii_lowercase()).map_err(|err| {
                    format!("allowed_targets entry {entry:?} is not a host name glob: {err}")
                })?;
                out.names.push(glob);
            }
        }
        Ok(out)
    }

    /// The host name (or address, as written) is allowed by a glob.
    pub(crate) fn by_name(&self, host: &str) -> bool {
        let host = host.to_ascii_lowercase();
        let host = host.strip_suffix('.').unwrap_or(&host);
        self.any || self.names.iter().any(|g| g.matches(host))
    }

    /// Anything is allowed (`"*"`, or a loopback listener without a list).
    pub(crate) fn anything(&self) -> bool {
        self.any
    }

    /// Some address range is listed (a name no glob allows may still
    /// resolve into one).
    pub(crate) fn has_ranges(&self) -> bool {
        !self.ranges.is_empty()
    }

    /// The address is in a listed range.
    pub(crate) fn by_address(&self, ip: IpAddr) -> bool {
        let ip = match ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
            v4 => v4,
        };
        self.any || self.ranges.iter().any(|n| n.contains(&ip))
    }

    /// Why `host` (at `ip`) is refused.
    pub(crate) fn refusal(&self, host: &str, ip: Option<IpAddr>) -> String {
        match ip {
            Some(ip) if host != ip.to_string() => {
                format!("target {host:?} ({ip}) is not in [blackbox] allowed_targets")
            }
            _ => format!("target {host:?} is not in [blackbox] allowed_targets"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_ranges_allow_what_they_list() {
        let a = Allowed::parse(&["10.0.0.0/8".into(), "*.lab.test".into(), "::1".into()]).unwrap();
        assert!(a.by_name("web.lab.test") && a.by_name("WEB.lab.test."));
        assert!(!a.by_name("lab.test") && !a.by_name("evil.test"));
        assert!(a.by_address("10.1.2.3".parse().unwrap()));
        assert!(a.by_address("::ffff:10.1.2.3".parse().unwrap()));
        assert!(a.by_address("::1".parse().unwrap()));
        assert!(!a.by_address("192.168.1.1".parse().unwrap()));
        let any = Allowed::parse(&["*".into()]).unwrap();
        assert!(any.by_name("x") && any.by_address("1.1.1.1".parse().unwrap()));
        assert!(Allowed::parse(&["10.0.0.0/33".into()]).is_err());
        assert!(Allowed::parse(&["[".into()]).is_err());
    }
}

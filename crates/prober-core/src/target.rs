//! Targets: parsing target URLs against a [`Registry`] of protocols.

use std::fmt;
use std::net::SocketAddr;

use crate::info::TargetInfo;
use crate::protocol::{Protocol, Registry, Scheme};

/// A target that cannot be used: bad syntax, unknown scheme, bad size.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TargetError {
    /// The scheme is not in the registry.
    #[error("unknown scheme {scheme:?} in target {text:?} (known: {known})")]
    UnknownScheme {
        /// The scheme written.
        scheme: String,
        /// The whole target.
        text: String,
        /// Known schemes, comma separated.
        known: String,
    },
    /// Anything else wrong with the text.
    #[error("target {text:?}: {why}")]
    Syntax {
        /// The whole target.
        text: String,
        /// What is wrong, with a hint where one helps.
        why: String,
    },
    /// A size the protocol cannot carry.
    #[error(
        "target {target}: size {size} is out of range for {scheme}: must be {min}..={max} bytes"
    )]
    Size {
        /// The target, normalised.
        target: String,
        /// Its scheme.
        scheme: &'static str,
        /// The size asked for.
        size: usize,
        /// Smallest legal size.
        min: usize,
        /// Largest legal size.
        max: usize,
    },
}

/// A parsed target: protocol, scheme, host, port and path. Nothing is
/// resolved yet.
#[derive(Debug, Clone)]
pub struct Target {
    /// The protocol the scheme selects.
    pub protocol: &'static Protocol,
    /// The scheme written.
    pub scheme: &'static Scheme,
    /// Host name or IP literal (without brackets).
    pub host: String,
    /// Port; 0 for protocols without ports.
    pub port: u16,
    /// What the URL path names (`grpc-health://h:p/service`), or "".
    pub path: String,
    /// Which of `--flows N` flows this is: its own socket, so its own
    /// source port and 5-tuple, for ECMP paths. Shown as `#flow=I`.
    pub flow: Option<u16>,
}

impl PartialEq for Target {
    fn eq(&self, other: &Self) -> bool {
        self.scheme.name == other.scheme.name
            && self.host == other.host
            && self.port == other.port
            && self.path == other.path
            && self.flow == other.flow
    }
}

/// The most flows one target may be spread over.
pub const MAX_FLOWS: u16 = 1024;

impl Eq for Target {}

impl Target {
    /// A target of `scheme` in `registry`, without a path.
    ///
    /// # Panics
    /// If the registry has no such scheme (a programming error).
    pub fn new(registry: &Registry, scheme: &str, host: &str, port: u16) -> Self {
        let (protocol, scheme) = registry
            .find(scheme)
            .expect("Target::new is called with a registered scheme");
        Self {
            protocol,
            scheme,
            host: host.to_owned(),
            port,
            path: String::new(),
            flow: None,
        }
    }

    /// The request size: `given`, or the protocol's default; `None` when
    /// the protocol sends no payload.
    pub fn size(&self, given: Option<usize>) -> Option<usize> {
        self.protocol.size.map(|rule| given.unwrap_or(rule.default))
    }

    /// Checks a request size against the protocol's range.
    ///
    /// # Errors
    /// [`TargetError::Size`] when out of range.
    pub fn check_size(&self, size: usize) -> Result<(), TargetError> {
        match self.protocol.size {
            Some(rule) if !(rule.min..=rule.max).contains(&size) => Err(TargetError::Size {
                target: self.to_string(),
                scheme: self.scheme.name,
                size,
                min: rule.min,
                max: rule.max,
            }),
            _ => Ok(()),
        }
    }

    /// What a protocol's builder needs to build this target's probe.
    pub fn spec(
        &self,
        addr: SocketAddr,
        size: Option<usize>,
        timeout: std::time::Duration,
    ) -> crate::protocol::ProbeSpec<'_> {
        crate::protocol::ProbeSpec {
            scheme: self.scheme,
            host: &self.host,
            path: &self.path,
            addr,
            size: size.unwrap_or(0),
            timeout,
        }
    }

    /// How this target appears in results, once resolved to `addr`: the IP
    /// alone for protocols without ports; a flow has a `flow` label.
    pub fn info(&self, id: usize, addr: SocketAddr, size: Option<usize>) -> TargetInfo {
        self.info_at(id, Some(addr), size)
    }

    /// [`Target::info`] for a target that may not have resolved: its
    /// address is then shown as `unresolved`.
    pub fn info_at(&self, id: usize, addr: Option<SocketAddr>, size: Option<usize>) -> TargetInfo {
        let shown = match (addr, self.protocol.port) {
            (None, _) => "unresolved".to_owned(),
            (Some(a), None) => a.ip().to_string(),
            (Some(a), Some(_)) => a.to_string(),
        };
        let mut info = TargetInfo::new(id, &self.to_string(), self.scheme.name, &shown, size);
        if let Some(flow) = self.flow {
            info.labels.insert("flow".to_owned(), flow.to_string());
        }
        info
    }

    /// This target as `n` flows (`--flows N`): `n` targets `#flow=0` ..
    /// `#flow=N-1`, each probed over its own socket, so each leaves from its
    /// own source port (chosen by the kernel) and an ECMP hash may send it
    /// down its own path. One flow is the target itself.
    ///
    /// # Errors
    /// A protocol that does not take flows ([`crate::protocol::Options::flows`]:
    /// its probes do not keep one socket for the run), or `n` of 0 or over
    /// [`MAX_FLOWS`].
    pub fn flows(&self, n: u16, registry: &Registry) -> Result<Vec<Self>, String> {
        if n == 0 || n > MAX_FLOWS {
            return Err(format!("--flows {n}: give 1 to {MAX_FLOWS}"));
        }
        if n == 1 {
            return Ok(vec![self.clone()]);
        }
        if !self.protocol.options.flows {
            return Err(format!(
                "--flows applies to {} targets, whose probes keep one socket (one source port) for the run; {self} is not one",
                registry
                    .protocols()
                    .filter(|p| p.options.flows)
                    .flat_map(|p| p.schemes.iter().map(|s| format!("{}://", s.name)))
                    .collect::<Vec<_>>()
                    .join(" and ")
            ));
        }
        Ok((0..n)
            .map(|i| Self {
                flow: Some(i),
                ..self.clone()
            })
            .collect())
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let host = if self.host.contains(':') {
            format!("[{}]", self.host)
        } else {
            self.host.clone()
        };
        match self.protocol.port {
            Some(_) => write!(f, "{}://{host}:{}", self.scheme.name, self.port)?,
            None => write!(f, "{}://{host}", self.scheme.name)?,
        }
        if !self.path.is_empty() {
            write!(f, "/{}", self.path)?;
        }
        if let Some(flow) = self.flow {
            write!(f, "#flow={flow}")?;
        }
        Ok(())
    }
}

/// The longest host name a target may have (RFC 1035, written out).
pub const MAX_HOST: usize = 253;

/// Parses one target against `registry`. A bare host means the registry's
/// protocol without ports (ICMP).
///
/// # Errors
/// [`TargetError`], with a hint for the usual mistakes (an IPv6 literal
/// without brackets, a port on a bare host).
pub fn parse_target(registry: &Registry, text: &str) -> Result<Target, TargetError> {
    let syntax = |why: String| TargetError::Syntax {
        text: crate::quote::short(text),
        why,
    };
    let ((protocol, scheme), rest, bare) = match text.split_once("://") {
        Some((s, rest)) => match registry.find(s) {
            Some(found) => (found, rest, false),
            None => {
                return Err(TargetError::UnknownScheme {
                    scheme: crate::quote::short(s),
                    text: crate::quote::short(text),
                    known: registry.scheme_names().join(", "),
                });
            }
        },
        None => match registry.bare() {
            Some(found) => (found, text, true),
            None => return Err(syntax("has no scheme (write scheme://host:port)".into())),
        },
    };
    // `http//h` and `http:/h`: a scheme whose `://` was mistyped reads as
    // a bare host with a path; say what was meant.
    if bare {
        for sep in ["//", ":/"] {
            if let Some((s, after)) = text.split_once(sep)
                && let s = s.trim_end_matches(':')
                && registry.find(s).is_some()
            {
                return Err(syntax(format!(
                    "looks like a {s}:// target with its \"://\" mistyped: write {s}://{}",
                    after.trim_start_matches('/')
                )));
            }
        }
    }
    let (authority, path) = match rest.split_once('/') {
        Some((a, p)) => (a, p.trim_end_matches('/')),
        None => (rest, ""),
    };
    if !path.is_empty() && protocol.path.is_none() {
        let takes: Vec<_> = registry
            .protocols()
            .filter(|p| p.path.is_some())
            .map(|p| format!("{}:// takes /{}", p.name(), p.path.unwrap_or_default()))
            .collect();
        return Err(syntax(format!(
            "has a path; only scheme://host:port is accepted ({})",
            takes.join(", ")
        )));
    }
    if let Some((user, _)) = authority.rsplit_once('@') {
        return Err(syntax(format!(
            "has user information ({}@); {}:// targets take no user name or password",
            crate::quote::short(user),
            scheme.name
        )));
    }
    let (host, port) = split_host_port(authority).map_err(syntax)?;
    if host.is_empty() {
        return Err(syntax("has no host".into()));
    }
    // RFC 1035: a name is at most 253 characters written out; a longer one
    // is refused here so no message or query carries it.
    if host.len() > MAX_HOST {
        return Err(syntax(format!(
            "has a host of {} characters; a host name has at most {MAX_HOST}",
            host.len()
        )));
    }
    let port = match (port, protocol.port) {
        (Some(p), Some(_)) => parse_port(p).map_err(syntax)?,
        (None, Some(port)) if protocol.default_port => port,
        (None, Some(hint)) => {
            // `tcp://::1:8707`: an IPv6 literal whose last group is the port.
            if host.contains(':')
                && !authority.starts_with('[')
                && let Some((addr, last)) = host.rsplit_once(':')
                && addr.parse::<std::net::Ipv6Addr>().is_ok()
                && last.parse::<u16>().is_ok()
            {
                return Err(syntax(format!(
                    "IPv6 literals go in brackets: {}://[{addr}]:{last}",
                    scheme.name
                )));
            }
            let example = if hint == 0 {
                "PORT".to_owned()
            } else {
                hint.to_string()
            };
            return Err(syntax(format!(
                "is missing a port ({}://{host}:{example})",
                scheme.name
            )));
        }
        (Some(p), None) if bare => {
            let with_port: Vec<_> = registry
                .protocols()
                .filter(|p| p.options.flows)
                .filter_map(|p| p.schemes.first())
                .map(|s| format!("{}://{host}:{p}", s.name))
                .collect();
            return Err(syntax(format!(
                "a bare host means {} and takes no port; did you mean {}?",
                scheme.name,
                with_port.join(" or ")
            )));
        }
        (Some(_), None) => return Err(syntax(format!("{} targets take no port", scheme.name))),
        (None, None) => 0,
    };
    Ok(Target {
        protocol,
        scheme,
        host: host.to_owned(),
        port,
        path: path.to_owned(),
        flow: None,
    })
}

/// Splits `HOST[:PORT]`, `[V6][:PORT]` or a bare IPv6 literal into the
/// host and the port's text, as targets are written.
///
/// # Errors
/// An unclosed `[`, or text after `]` that is not `:PORT`.
pub fn split_host_port(authority: &str) -> Result<(&str, Option<&str>), String> {
    if let Some(inner) = authority.strip_prefix('[') {
        let Some((host, after)) = inner.split_once(']') else {
            return Err("unclosed '[' in IPv6 address".into());
        };
        return match after {
            "" => Ok((host, None)),
            _ => match after.strip_prefix(':') {
                Some(port) => Ok((host, Some(port))),
                None => Err(format!("unexpected {after:?} after IPv6 address")),
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

fn parse_port(p: &str) -> Result<u16, String> {
    let n: u32 = p
        .parse()
        .map_err(|_| format!("port {p:?} is not a number"))?;
    if n == 0 || n > 65535 {
        return Err(format!("port {n} is out of range 1..=65535"));
    }
    Ok(n as u16)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::REGISTRY;

    fn p(text: &str) -> Result<Target, TargetError> {
        parse_target(&REGISTRY, text)
    }

    fn t(scheme: &str, host: &str, port: u16) -> Target {
        Target::new(&REGISTRY, scheme, host, port)
    }

    #[test]
    fn parses_targets() {
        assert_eq!(p("tcp://127.0.0.1:80").unwrap(), t("tcp", "127.0.0.1", 80));
        assert_eq!(p("UDP://h:1/").unwrap(), t("udp", "h", 1));
        assert_eq!(p("tcp://[::1]:22").unwrap(), t("tcp", "::1", 22));
        assert_eq!(p("example.org").unwrap(), t("icmp", "example.org", 0));
        assert_eq!(p("::1").unwrap(), t("icmp", "::1", 0));
        assert_eq!(p("icmp://[::1]").unwrap(), t("icmp", "::1", 0));
        let health = p("health://h:5/my.Svc").unwrap();
        assert_eq!(health.path, "my.Svc");
    }

    #[test]
    fn displays_normalised() {
        assert_eq!(p("TCP://[::1]:5").unwrap().to_string(), "tcp://[::1]:5");
        assert_eq!(p("localhost").unwrap().to_string(), "icmp://localhost");
    }

    #[test]
    fn rejects_bad_targets_with_hints() {
        let long_host = format!("tcp://{}:1", "h".repeat(254));
        let cases = [
            ("ftp://h:1", "unknown scheme \"ftp\""),
            ("ftp://h:1", "known: icmp, tcp, udp, health"),
            ("tcp://h", "missing a port (tcp://h:8707)"),
            ("tcp://u:p@127.0.0.1:9", "has user information (u:p@)"),
            (long_host.as_str(), "a host name has at most 253"),
            ("tcp://h:0", "out of range"),
            ("tcp://h:65536", "out of range"),
            ("tcp://h:http", "not a number"),
            ("tcp://:80", "no host"),
            ("tcp://[::1:80", "unclosed"),
            ("icmp://h:5", "take no port"),
            ("tcp://h:1/path", "has a path"),
            (
                "tcp//h:1",
                "looks like a tcp:// target with its \"://\" mistyped: write tcp://h:1",
            ),
            ("udp:/h:1", "write udp://h:1"),
            (
                "tcp://::1:18707",
                "IPv6 literals go in brackets: tcp://[::1]:18707",
            ),
            (
                "127.0.0.1:18707",
                "did you mean tcp://127.0.0.1:18707 or udp://127.0.0.1:18707?",
            ),
        ];
        for (text, want) in cases {
            let err = p(text).unwrap_err().to_string();
            assert!(err.contains(want), "{text}: {err}");
        }
        // Every part of a long target is quoted capped, user information
        // too (it was echoed whole: 100 kB for a 100 kB user name).
        let long_user = format!("tcp://{}@h:1", "u".repeat(100_000));
        let err = p(&long_user).unwrap_err().to_string();
        assert!(
            err.contains("has user information") && err.len() < 2_000,
            "{}",
            err.len()
        );
    }

    #[test]
    fn sizes_follow_the_protocol() {
        let tcp = t("tcp", "h", 1);
        assert_eq!(tcp.size(None), Some(64));
        assert_eq!(tcp.size(Some(100)), Some(100));
        assert!(
            tcp.check_size(10)
                .unwrap_err()
                .to_string()
                .contains("size 10 is out of range for tcp: must be 40..=1000 bytes")
        );
        let health = t("health", "h", 1);
        assert_eq!(health.size(Some(100)), None);
        assert!(health.check_size(1).is_ok());
    }

    #[test]
    fn info_shows_the_ip_for_portless_protocols() {
        let addr: SocketAddr = "127.0.0.1:0".parse().unwrap();
        let i = t("icmp", "127.0.0.1", 0).info(3, addr, Some(56));
        assert_eq!(
            (i.id, i.addr.as_str(), i.timestamps.as_str()),
            (3, "127.0.0.1", "user")
        );
        let i = t("tcp", "127.0.0.1", 9).info(0, "127.0.0.1:9".parse().unwrap(), Some(64));
        assert_eq!(
            (i.addr.as_str(), i.protocol.as_str()),
            ("127.0.0.1:9", "tcp")
        );
    }
}

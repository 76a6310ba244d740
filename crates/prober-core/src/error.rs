//! Why a probe failed: [`ProbeError`], with a stable [`ErrorKind`] that
//! summaries and metrics count by.

use std::fmt;
use std::io;

/// The reason a probe failed, from a small stable set, so error counts can
/// be broken down by reason (as hickory's `ProtoErrorKind` lets callers do).
/// The names ([`ErrorKind::as_str`]) appear in results and metric labels.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// The peer refused the connection or the port (TCP RST, ICMP port
    /// unreachable).
    Refused,
    /// No route: destination or network unreachable, time exceeded.
    Unreachable,
    /// An established connection was reset or closed under the probe.
    Reset,
    /// A TLS handshake or certificate check failed.
    Tls,
    /// The peer answered something that is not a valid reply.
    Protocol,
    /// A deadline passed, as reported by the peer or the protocol stack.
    Timeout,
    /// A local socket operation failed (no buffer space, permission, ...).
    Local,
    /// The reply has a status the probe does not accept (an HTTP status
    /// outside the accepted list, a DNS rcode other than the expected).
    Status,
    /// The reply's content failed a check: a body or answer regex, a
    /// required header.
    Content,
    /// The reply was larger than allowed (HTTP body over `--max-body`).
    TooLarge,
    /// The reply was truncated (DNS TC=1 over UDP, without a TCP retry).
    Truncated,
    /// The target's host name did not resolve: nothing was sent.
    Resolve,
    /// Anything else.
    Other,
}

impl ErrorKind {
    /// Every kind, in a stable order.
    pub const ALL: [Self; 13] = [
        Self::Refused,
        Self::Unreachable,
        Self::Reset,
        Self::Tls,
        Self::Protocol,
        Self::Timeout,
        Self::Local,
        Self::Status,
        Self::Content,
        Self::TooLarge,
        Self::Truncated,
        Self::Resolve,
        Self::Other,
    ];

    /// The lowercase name used in results and metric labels.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Refused => "refused",
            Self::Unreachable => "unreachable",
            Self::Reset => "reset",
            Self::Tls => "tls",
            Self::Protocol => "protocol",
            Self::Timeout => "timeout",
            Self::Local => "local",
            Self::Status => "status",
            Self::Content => "content",
            Self::TooLarge => "too_large",
            Self::Truncated => "truncated",
            Self::Resolve => "resolve",
            Self::Other => "other",
        }
    }

    /// The kind of an I/O error from a socket call.
    pub fn of_io(e: &io::Error) -> Self {
        use io::ErrorKind as K;
        match e.kind() {
            K::ConnectionRefused => Self::Refused,
            K::HostUnreachable | K::NetworkUnreachable | K::AddrNotAvailable => Self::Unreachable,
            K::ConnectionReset | K::ConnectionAborted | K::BrokenPipe | K::UnexpectedEof => {
                Self::Reset
            }
            // A connect that timed out: nothing answered. (Timeout is kept
            // for deadlines a peer reports, which count as timeouts.)
            K::TimedOut => Self::Unreachable,
            K::InvalidData => Self::Protocol,
            K::PermissionDenied | K::OutOfMemory | K::AddrInUse => Self::Local,
            _ => match e.raw_os_error() {
                // EHOSTUNREACH, ENETUNREACH, EHOSTDOWN, ENETDOWN
                Some(113 | 101 | 112 | 100) => Self::Unreachable,
                Some(105) => Self::Local, // ENOBUFS
                _ => Self::Other,
            },
        }
    }
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why one probe failed: a kind and a message. The runner owns the timeout
/// and records it as [`crate::Outcome::Timeout`]; a probe returns an error of
/// kind [`ErrorKind::Timeout`] only when the peer itself reports that the
/// deadline passed (gRPC DEADLINE_EXCEEDED), which is recorded as a timeout
/// too.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct ProbeError {
    kind: ErrorKind,
    message: String,
    /// The reply's status where one came and failed a check (an HTTP 404,
    /// a DNS SERVFAIL, a gRPC NOT_SERVING): what a scrape-time probe
    /// reports beside its failure, as blackbox_exporter does.
    detail: Option<crate::detail::Detail>,
}

impl ProbeError {
    /// An error of `kind` with this message.
    pub fn new(kind: ErrorKind, msg: impl Into<String>) -> Self {
        Self {
            kind,
            message: msg.into(),
            detail: None,
        }
    }

    /// The same error, with the status of the reply that failed a check.
    #[must_use]
    pub fn with_detail(mut self, detail: crate::detail::Detail) -> Self {
        self.detail = Some(detail);
        self
    }

    /// The status of the reply that failed a check, where one came.
    pub fn detail(&self) -> Option<crate::detail::Detail> {
        self.detail
    }

    /// A reply that is not valid for the protocol.
    pub fn protocol(msg: impl Into<String>) -> Self {
        Self::new(ErrorKind::Protocol, msg)
    }

    /// A deadline that passed, reported by the peer or the protocol stack.
    pub fn timeout(msg: impl Into<String>) -> Self {
        Self::new(ErrorKind::Timeout, msg)
    }

    /// A failed socket call: `what: error`, with the kind read from `e`.
    pub fn io(what: impl fmt::Display, e: &io::Error) -> Self {
        Self::new(ErrorKind::of_io(e), format!("{what}: {e}"))
    }

    /// True for errors of kind [`ErrorKind::Timeout`].
    pub fn is_timeout(&self) -> bool {
        self.kind == ErrorKind::Timeout
    }

    /// The reason.
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// The message.
    pub fn message(&self) -> &str {
        &self.message
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn io_errors_get_a_kind() {
        let refused = io::Error::from(io::ErrorKind::ConnectionRefused);
        assert_eq!(
            ProbeError::io("connect", &refused).kind(),
            ErrorKind::Refused
        );
        let unreach = io::Error::from_raw_os_error(113);
        assert_eq!(ErrorKind::of_io(&unreach), ErrorKind::Unreachable);
        let reset = io::Error::from(io::ErrorKind::ConnectionReset);
        assert_eq!(ErrorKind::of_io(&reset), ErrorKind::Reset);
        assert!(ProbeError::timeout("x").is_timeout());
        assert_eq!(
            ProbeError::io("send", &reset).message(),
            format!("send: {reset}")
        );
    }

    #[test]
    fn names_are_distinct() {
        let names: std::collections::HashSet<_> =
            ErrorKind::ALL.iter().map(|k| k.as_str()).collect();
        assert_eq!(names.len(), ErrorKind::ALL.len());
    }
}

//! What an application reply says of itself beside its timing: its
//! status, which a probe reports on success and on a failed check alike.

/// An application reply's status, as the protocol reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Detail {
    /// An HTTP response.
    Http {
        /// The status code of the last hop.
        status: u16,
        /// `11` for HTTP/1.1, `20` for HTTP/2.
        version: u8,
        /// Redirects followed to get it.
        redirects: u8,
        /// The last hop was over TLS.
        tls: bool,
        /// Bytes of its body read.
        body: u32,
        /// The response's `Last-Modified`, Unix seconds.
        last_modified: Option<i64>,
    },
    /// A DNS response.
    Dns {
        /// The response code (NOERROR 0, NXDOMAIN 3, ...).
        rcode: u16,
        /// Records in the answer section.
        answers: u16,
        /// Records in the authority section.
        authority: u16,
        /// Records in the additional section.
        additional: u16,
        /// Authoritative Answer.
        aa: bool,
        /// TrunCation (the reply that was measured; a retry over TCP
        /// clears it).
        tc: bool,
        /// Answered over TCP (asked for, or a retry after TC=1).
        tcp: bool,
    },
    /// A gRPC health check's answer.
    Grpc {
        /// The call's status code (0 OK, 14 UNAVAILABLE, ...).
        code: u8,
        /// The health check's serving status (`grpc.health.v1`: 0
        /// UNKNOWN, 1 SERVING, 2 NOT_SERVING, 3 SERVICE_UNKNOWN), where
        /// the call answered.
        serving: Option<u8>,
    },
}

//! What one probe produced.

use std::time::Duration;

use tokio::time::Instant;

use crate::error::ProbeError;

/// A reply as the probe measured it, nearest the socket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reply {
    /// Just before the request was written to the socket.
    pub sent: Instant,
    /// Just after the reply was read from the socket.
    pub received: Instant,
    /// Time the responder held the request (its send minus its receive), when
    /// the protocol reports it.
    pub server_dwell: Option<Duration>,
    /// How long after the kernel received the reply the probe read it: the
    /// receiving side's wake-up and dispatch (the user-space receive time
    /// minus the kernel's receive timestamp), where the socket gives kernel
    /// timestamps (`tcp://`, UDP, ICMP). A TCP or UDP round trip includes it;
    /// an ICMP round trip, timed by the kernel as ping does, does not.
    pub rx_wake: Option<Duration>,
    /// Bytes in the reply.
    pub bytes: usize,
    /// The reply's IP TTL (IPv6 hop limit), where the protocol reads it
    /// (ICMP), as ping shows it.
    pub ttl: Option<u8>,
}

impl Reply {
    /// Round-trip time: received minus sent.
    pub fn rtt(&self) -> Duration {
        self.received.saturating_duration_since(self.sent)
    }
}

/// How a probe ended. Every probe ends as exactly one of these.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Outcome {
    /// A matching reply arrived within the timeout.
    Ok(Reply),
    /// No reply within the timeout. A reply that comes later is counted as
    /// late in the summary but the probe stays a timeout.
    Timeout,
    /// The probe failed: connection refused, reset, unreachable, bad frame.
    Error(ProbeError),
}

impl Outcome {
    /// The short name used in results: `ok`, `timeout` or `error`.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Ok(_) => "ok",
            Self::Timeout => "timeout",
            Self::Error(_) => "error",
        }
    }
}

/// One probe of one target.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sample {
    /// Index of the target in the run.
    pub target: usize,
    /// Sequence number, from 0 for the first scheduled probe.
    pub seq: u64,
    /// When the schedule said to send.
    pub scheduled: Instant,
    /// When the request was actually sent (or the probe started, if it
    /// failed before sending).
    pub sent: Instant,
    /// How it ended.
    pub outcome: Outcome,
    /// Bytes in the request.
    pub bytes: usize,
}

impl Sample {
    /// Actual send minus scheduled send.
    pub fn send_lag(&self) -> Duration {
        self.sent.saturating_duration_since(self.scheduled)
    }

    /// Round-trip time, for replies.
    pub fn rtt(&self) -> Option<Duration> {
        match &self.outcome {
            Outcome::Ok(r) => Some(r.rtt()),
            _ => None,
        }
    }

    /// Reply received minus scheduled send (corrected for coordinated
    /// omission), for replies.
    pub fn latency(&self) -> Option<Duration> {
        match &self.outcome {
            Outcome::Ok(r) => Some(r.received.saturating_duration_since(self.scheduled)),
            _ => None,
        }
    }
}

//! What one probe produced.

use std::time::Duration;

use tokio::time::Instant;

pub use crate::detail::Detail;
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
    /// Wall-clock and kernel timestamps of the round trip, for its split.
    pub stamps: Stamps,
    /// What an application protocol (HTTP, DNS) adds: its phases and its
    /// reply's status.
    pub app: AppReply,
}

/// The phases of one request as blackbox_exporter's
/// `probe_http_duration_seconds{phase}` and `curl -w` report them: each
/// is the time from the end of the one before it to its own event, in ns,
/// so the known ones add up to the time from the probe's start to its body
/// done. `None` where the phase did not happen (a reused connection has no
/// resolve, connect or TLS).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Phases(pub [Option<u64>; 6]);

impl Phases {
    /// The phases' names in results (`resolve_ns` in JSON,
    /// `phase="resolve"` in Prometheus), in order:
    /// - `resolve`: name resolution;
    /// - `connect`: the TCP handshake;
    /// - `tls`: the TLS handshake;
    /// - `write`: starting the request to its last byte written;
    /// - `first_byte`: the last byte written to the first response byte
    ///   read (the server's processing plus the network);
    /// - `body`: the first response byte to the body done.
    pub const NAMES: [&'static str; 6] =
        ["resolve", "connect", "tls", "write", "first_byte", "body"];

    /// True when any phase is known.
    pub fn any(&self) -> bool {
        self.0.iter().any(Option::is_some)
    }
}

/// What an application protocol adds to a [`Reply`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AppReply {
    /// The request's phases, where the protocol has them.
    pub phases: Phases,
    /// The reply's status.
    pub detail: Option<Detail>,
}

impl Reply {
    /// A reply of `bytes` bytes to a request sent at `sent`, received at
    /// `received`, with nothing else known (no stamps, dwell or TTL).
    pub fn plain(sent: Instant, received: Instant, bytes: usize) -> Self {
        Self {
            sent,
            received,
            server_dwell: None,
            rx_wake: None,
            bytes,
            ttl: None,
            stamps: Stamps::default(),
            app: AppReply::default(),
        }
    }

    /// Round-trip time, user send to user receive (t4 − t1) for every
    /// protocol: on the wall clock when the split is known (so its parts add
    /// up to it exactly), else received minus sent on the monotonic clock.
    pub fn rtt(&self) -> Duration {
        let mono = self.received.saturating_duration_since(self.sent);
        match self.stamps.user_rtt(mono) {
            Some(ns) => Duration::from_nanos(ns),
            None => mono,
        }
    }

    /// The round trip split into its parts, where known (see [`Parts`]).
    pub fn parts(&self) -> Parts {
        let mono = self.received.saturating_duration_since(self.sent);
        self.stamps.parts(mono)
    }
}

/// The responder's own times for one request, as differences on its clock
/// (so the two hosts' clocks need not agree), in ns.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ResponderTimes {
    /// Its kernel receive stamp to its read (t2 − t2k).
    pub wake: Option<u64>,
    /// Its read to its write (t3 − t2).
    pub dwell: Option<u64>,
    /// Its write to its kernel transmit stamp (t3k − t3).
    pub send: Option<u64>,
    /// `send` comes after the reply: in the responder's next reply on the
    /// flow, or when asked for. The runner has the probe fill it in
    /// ([`crate::Probe::settle`]) before the sample goes out, without
    /// holding up the probes after it.
    pub send_later: bool,
    /// Its whole turnaround, receive to transmit, where it reports only
    /// that (a STAMP reflector's T3 − T2): the split then has client send,
    /// network, this and client wake, and they add up to the RTT.
    pub turnaround: Option<u64>,
    /// One-way delay client to responder (STAMP's T2 − T1), only when both
    /// hosts say their clocks are synchronised.
    pub forward: Option<u64>,
    /// One-way delay responder to client (T4 − T3), likewise.
    pub backward: Option<u64>,
}

/// One round trip's timestamps, each in ns since the Unix epoch on the
/// client's CLOCK_REALTIME, named as in docs/timestamps.md. User times are
/// read right next to the socket call, so they are only ever compared with
/// kernel stamps of the same clock, never converted from the monotonic one.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stamps {
    /// Client user send: just before the send call.
    pub t1: Option<u64>,
    /// Client kernel transmit (SO_TIMESTAMPING TX software stamp).
    pub t1k: Option<u64>,
    /// Client kernel receive (SO_TIMESTAMPNS).
    pub t4k: Option<u64>,
    /// Client user receive: just after the read returned.
    pub t4: Option<u64>,
    /// The responder's times, where it reports them.
    pub responder: Option<ResponderTimes>,
    /// The peer is a kernel (ICMP echo, a TCP handshake): there is no
    /// responder process, and its turnaround is part of the network.
    pub kernel_peer: bool,
    /// The kernel RTT of a TCP handshake that comes before t1k (a
    /// `tcp-crr://` connect, then its request), in ns: the SYN's transmit
    /// stamp to the SYN-ACK's receive stamp. It is added to the network
    /// part and taken out of the client send part (t1k − t1 − handshake).
    /// (`tcp-connect://` needs no such field: its SYN and SYN-ACK stamps
    /// are its t1k and t4k.)
    pub handshake: Option<u64>,
}

/// How far the wall-clock and the monotonic user RTT may differ before the
/// wall clock is taken to have been stepped during the probe: 1 ms plus
/// 1000 ppm. NTP slews at most 500 ppm and steps by 128 ms or more; below
/// that, the two differ by the delays between reading the two clocks next
/// to each other, and the wall-clock reading is the one next to the socket
/// call, so it is the one kept.
fn step_tolerance(mono: Duration) -> u64 {
    1_000_000 + u64::try_from(mono.as_nanos() / 1000).unwrap_or(u64::MAX)
}

impl Stamps {
    /// t4 − t1 on the wall clock, if both are known and agree with the
    /// monotonic clock's `mono` (a clock step makes it unknown, never wrong).
    pub fn user_rtt(&self, mono: Duration) -> Option<u64> {
        let (t1, t4) = (self.t1?, self.t4?);
        let rtt = t4.checked_sub(t1)?;
        let mono_ns = u64::try_from(mono.as_nanos()).unwrap_or(u64::MAX);
        (rtt.abs_diff(mono_ns) <= step_tolerance(mono)).then_some(rtt)
    }

    /// The parts of the round trip that these stamps determine; `mono` is
    /// the monotonic user RTT, to detect a clock step.
    pub fn parts(&self, mono: Duration) -> Parts {
        let Some(rtt) = self.user_rtt(mono) else {
            // No user time at all: a protocol that takes no stamps (DNS,
            // QUIC) has no split to lack a part of.
            let missing = match (self.t1, self.t4) {
                (None, None) => None,
                (Some(_), Some(_)) => Some(Missing::ClockStep),
                _ => Some(Missing::UserStamps),
            };
            return Parts {
                missing,
                ..Parts::default()
            };
        };
        let (t1, t4) = (self.t1.unwrap_or(0), self.t4.unwrap_or(0));
        // A kernel stamp outside [t1, t4] means the clock moved: unknown.
        let inside = |k: Option<u64>| k.filter(|k| (t1..=t4).contains(k));
        let (t1k, t4k) = (inside(self.t1k), inside(self.t4k));
        let (t1k, t4k) = match (t1k, t4k) {
            (Some(a), Some(b)) if a > b => (None, None),
            pair => pair,
        };
        let out_of_order =
            (self.t1k.is_some() && t1k.is_none()) || (self.t4k.is_some() && t4k.is_none());
        let kernel_rtt = t1k.zip(t4k).map(|(a, b)| b - a);
        let r = self.responder.unwrap_or_default();
        let turnaround = match (r.wake, r.dwell, r.send) {
            (Some(w), Some(d), Some(s)) => w.checked_add(d).and_then(|x| x.checked_add(s)),
            _ => r.turnaround,
        };
        let network = if self.kernel_peer {
            kernel_rtt
        } else {
            kernel_rtt
                .zip(turnaround)
                .and_then(|(k, t)| k.checked_sub(t))
        };
        let client_send = t1k.map(|k| k - t1);
        // A handshake before t1k moves from the client send part to the
        // network part; one that does not fit in t1k − t1 was misread, and
        // leaves both unknown.
        let (client_send, network) = match self.handshake {
            None => (client_send, network),
            Some(h) => {
                let send = client_send.and_then(|s| s.checked_sub(h));
                (send, network.filter(|_| send.is_some()).map(|n| n + h))
            }
        };
        let mut parts = Parts {
            rtt: Some(rtt),
            kernel_rtt,
            ping_rtt: t4k.map(|k| k - t1),
            client_send,
            network,
            responder_wake: r.wake,
            responder_dwell: r.dwell,
            responder_send: r.send,
            client_wake: t4k.map(|k| t4 - k),
            responder_turnaround: r.turnaround,
            kernel_peer: self.kernel_peer,
            missing: None,
        };
        if !parts.complete() {
            // The first stamp along the round trip that is not there.
            parts.missing = Some(if out_of_order {
                Missing::StampOrder
            } else if self.t1k.is_none() {
                Missing::ClientSend
            } else if self.t4k.is_none() {
                Missing::ClientReceive
            } else if self.handshake.is_some() && client_send.is_none() {
                Missing::Handshake
            } else if self.responder.is_none() {
                Missing::Responder
            } else if r.turnaround.is_none() && r.wake.is_none() {
                Missing::ResponderReceive
            } else if r.turnaround.is_none() && r.send.is_none() {
                Missing::ResponderSend
            } else if r.turnaround.is_none() && r.dwell.is_none() {
                Missing::ResponderDwell
            } else {
                // Every stamp there, yet no network part: the responder's
                // turnaround is longer than the client's kernel RTT, which
                // only clocks that moved can make.
                Missing::StampOrder
            });
        }
        parts
    }
}

/// Declares [`Missing`] with each reason's name, and [`Missing::ALL`] in
/// declaration order, from one list.
macro_rules! missing_reasons {
    ($($(#[$doc:meta])* $variant:ident => $name:literal,)*) => {
        /// Why a reply's split is not complete: the first stamp along the
        /// round trip that was not there, or the clock that made them
        /// unusable. Counted per reason in summaries and in `/metrics`
        /// (`prober_split_incomplete_total{reason}`), so that a host that
        /// lost its stamps can be told from one that is slow.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub enum Missing {
            $($(#[$doc])* $variant,)*
        }

        impl Missing {
            /// Every reason, in declaration order (`as usize` indexes it).
            pub const ALL: &'static [Missing] = &[$(Missing::$variant,)*];

            /// The reason's name in summaries and the metrics' `reason` label.
            pub fn name(self) -> &'static str {
                match self {
                    $(Missing::$variant => $name,)*
                }
            }
        }
    };
}

missing_reasons! {
    /// The user send or receive time was not read (no part can be known).
    UserStamps => "user_stamps",
    /// The wall clock was stepped during the probe (its user RTT disagrees
    /// with the monotonic one): every part unknown, never wrong.
    ClockStep => "clock_step",
    /// A kernel stamp fell outside the user send and receive times, the
    /// receive stamp before the send stamp, or a responder turnaround
    /// longer than the kernel RTT: the clock moved.
    StampOrder => "stamp_order",
    /// No kernel transmit stamp for the request (t1k): transmit stamps are
    /// off (`--no-tx-stamps`, the daemon's `[stamps] transmit = false`), or
    /// the kernel's stamp did not come back before the reply.
    ClientSend => "client_send_stamp",
    /// No kernel receive stamp for the reply (t4k).
    ClientReceive => "client_receive_stamp",
    /// A handshake before the request that did not fit in its send part.
    Handshake => "handshake",
    /// The peer reported no times at all (a server that is not prober's
    /// responder, or one that stamps nothing).
    Responder => "responder_times",
    /// The responder's kernel receive stamp (t2k) is missing.
    ResponderReceive => "responder_receive_stamp",
    /// The responder's kernel transmit stamp (t3k) never came: no follow-up
    /// (a UDP responder sends them to non-loopback peers only with
    /// `--udp-follow-ups`), or it came after the probe ended.
    ResponderSend => "responder_send_stamp",
    /// The responder's handler time (t3 − t2) is missing.
    ResponderDwell => "responder_dwell",
}

/// A round trip split into named parts, each in ns, `None` where unknown
/// (never 0 for unknown). When all six parts are known they add up to
/// `rtt` exactly:
/// client send + network + responder wake + responder dwell + responder
/// send + client wake = t4 − t1.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Parts {
    /// The user RTT these parts split (t4 − t1 on the wall clock).
    pub rtt: Option<u64>,
    /// Client kernel transmit to client kernel receive (t4k − t1k).
    pub kernel_rtt: Option<u64>,
    /// ping's convention: user send to kernel receive (t4k − t1).
    pub ping_rtt: Option<u64>,
    /// t1k − t1.
    pub client_send: Option<u64>,
    /// (t4k − t1k) − (t3k − t2k); for ICMP, t4k − t1k, which includes the
    /// peer kernel's turnaround.
    pub network: Option<u64>,
    /// t2 − t2k.
    pub responder_wake: Option<u64>,
    /// t3 − t2.
    pub responder_dwell: Option<u64>,
    /// t3k − t3.
    pub responder_send: Option<u64>,
    /// t4 − t4k.
    pub client_wake: Option<u64>,
    /// The responder's turnaround as a whole, where it reports only that
    /// (STAMP's T3 − T2; its parts stay unknown): client send + network +
    /// this + client wake = `rtt`.
    pub responder_turnaround: Option<u64>,
    /// The peer is a kernel (ICMP): the responder parts do not apply.
    pub kernel_peer: bool,
    /// Why the split is not complete; `None` when it is, or when the
    /// protocol takes no stamps at all.
    pub missing: Option<Missing>,
}

impl Parts {
    /// The parts' names in results (`network` is `network_ns` in JSON,
    /// `part_network_ns` in CSV, `part="network"` in Prometheus), in order
    /// along the round trip.
    pub const NAMES: [&'static str; 6] = [
        "client_send",
        "network",
        "responder_wake",
        "responder_dwell",
        "responder_send",
        "client_wake",
    ];

    /// The name of [`Parts::responder_turnaround`] in summaries' `parts`
    /// (not one of the six: it stands for the three responder parts where
    /// they are unknown).
    pub const TURNAROUND: &'static str = "responder_turnaround";

    /// The six parts and the responder's turnaround: what summaries and
    /// metrics keep a distribution of, by name.
    pub const ALL_NAMES: [&'static str; 7] = [
        Self::NAMES[0],
        Self::NAMES[1],
        Self::NAMES[2],
        Self::NAMES[3],
        Self::NAMES[4],
        Self::NAMES[5],
        Self::TURNAROUND,
    ];

    /// The six parts and the responder's turnaround, in
    /// [`Parts::ALL_NAMES`] order.
    pub fn list_all(&self) -> [Option<u64>; 7] {
        let [a, b, c, d, e, f] = self.list();
        [a, b, c, d, e, f, self.responder_turnaround]
    }

    /// The six parts in [`Parts::NAMES`] order.
    pub fn list(&self) -> [Option<u64>; 6] {
        [
            self.client_send,
            self.network,
            self.responder_wake,
            self.responder_dwell,
            self.responder_send,
            self.client_wake,
        ]
    }

    /// True when every part that applies is known (so they add up to
    /// `rtt`); for a kernel peer the responder parts do not apply, and a
    /// responder that reports only its turnaround stands for all three.
    pub fn complete(&self) -> bool {
        let l = self.list();
        let ends = [l[0], l[1], l[5]].iter().all(Option::is_some);
        if self.kernel_peer {
            ends
        } else {
            (ends && self.responder_turnaround.is_some()) || l.iter().all(Option::is_some)
        }
    }

    /// True when at least one part is known.
    pub fn any(&self) -> bool {
        self.list().iter().any(Option::is_some)
    }
}

/// How a probe ended. Every probe ends as exactly one of these.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
// A reply is moved once per probe (runner to collector) and never stored in
// bulk; boxing it would add an allocation to every probe instead.
#[allow(clippy::large_enum_variant)]
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

#[cfg(test)]
mod tests {
    use super::*;

    fn stamps(t1: u64, t1k: u64, t4k: u64, t4: u64) -> Stamps {
        Stamps {
            t1: Some(t1),
            t1k: Some(t1k),
            t4k: Some(t4k),
            t4: Some(t4),
            responder: Some(ResponderTimes {
                wake: Some(3_000),
                dwell: Some(5_000),
                send: Some(2_000),
                ..ResponderTimes::default()
            }),
            kernel_peer: false,
            handshake: None,
        }
    }

    #[test]
    fn the_parts_add_up_to_the_rtt_exactly() {
        let s = stamps(1_000_000, 1_004_000, 1_050_000, 1_080_000);
        let p = s.parts(Duration::from_nanos(80_000));
        assert!(p.complete());
        let sum: u64 = p.list().iter().map(|x| x.unwrap()).sum();
        assert_eq!(Some(sum), p.rtt);
        assert_eq!(p.rtt, Some(80_000));
        assert_eq!(p.kernel_rtt, Some(46_000));
        assert_eq!(p.network, Some(46_000 - 10_000));
        assert_eq!(p.client_send, Some(4_000));
        assert_eq!(p.client_wake, Some(30_000));
        assert_eq!(p.ping_rtt, Some(50_000));
    }

    #[test]
    fn an_incomplete_split_names_the_first_stamp_missing() {
        let mono = Duration::from_nanos(80_000);
        let full = stamps(1_000_000, 1_004_000, 1_050_000, 1_080_000);
        assert_eq!(full.parts(mono).missing, None);
        let why = |s: Stamps| s.parts(mono).missing.map(Missing::name);
        let no_tx = Stamps { t1k: None, ..full };
        assert_eq!(why(no_tx), Some("client_send_stamp"));
        let no_rx = Stamps { t4k: None, ..full };
        assert_eq!(why(no_rx), Some("client_receive_stamp"));
        // Both missing: the first along the round trip is named.
        assert_eq!(
            why(Stamps { t4k: None, ..no_tx }),
            Some("client_send_stamp")
        );
        let bare = Stamps {
            responder: None,
            ..full
        };
        assert_eq!(why(bare), Some("responder_times"));
        let r = full.responder.unwrap();
        let resp = |r: ResponderTimes| Stamps {
            responder: Some(r),
            ..full
        };
        let no_t3k = ResponderTimes { send: None, ..r };
        assert_eq!(why(resp(no_t3k)), Some("responder_send_stamp"));
        let no_t2k = ResponderTimes { wake: None, ..r };
        assert_eq!(why(resp(no_t2k)), Some("responder_receive_stamp"));
        let no_dwell = ResponderTimes { dwell: None, ..r };
        assert_eq!(why(resp(no_dwell)), Some("responder_dwell"));
        // A turnaround stands for the three (STAMP): complete.
        let turnaround = ResponderTimes {
            send: None,
            turnaround: Some(10_000),
            ..r
        };
        assert_eq!(why(resp(turnaround)), None);
        // A receive stamp after t4: the clock moved.
        let late = Stamps {
            t4k: Some(1_090_000),
            ..full
        };
        assert_eq!(why(late), Some("stamp_order"));
        // A turnaround longer than the kernel RTT (46 us): no network part.
        let long = ResponderTimes {
            dwell: Some(50_000),
            ..r
        };
        assert_eq!(why(resp(long)), Some("stamp_order"));
        // An ICMP peer needs no responder times.
        let kernel = Stamps {
            responder: None,
            kernel_peer: true,
            ..full
        };
        assert_eq!(why(kernel), None);
        assert_eq!(why(Stamps { t4: None, ..full }), Some("user_stamps"));
    }

    #[test]
    fn a_clock_step_makes_the_split_unknown_not_wrong() {
        // The wall clock jumped 1 s back between t1 and t4.
        let s = stamps(2_000_000_000, 2_000_004_000, 1_000_050_000, 1_000_080_000);
        assert_eq!(
            s.parts(Duration::from_micros(80)),
            Parts {
                missing: Some(Missing::ClockStep),
                ..Parts::default()
            }
        );
        assert_eq!(s.user_rtt(Duration::from_micros(80)), None);
        // Forward by 2 ms: unknown too.
        let s = stamps(1_000_000, 1_004_000, 3_050_000, 3_080_000);
        assert!(!s.parts(Duration::from_micros(80)).any());
    }

    #[test]
    fn no_part_is_ever_negative() {
        // A kernel receive stamp before the send (impossible unless the
        // clock moved): those parts are unknown.
        let mut s = stamps(1_000_000, 1_004_000, 999_000, 1_080_000);
        let p = s.parts(Duration::from_nanos(80_000));
        assert_eq!((p.client_wake, p.kernel_rtt, p.network), (None, None, None));
        assert_eq!(p.client_send, Some(4_000));
        // A turnaround longer than the kernel RTT: network unknown.
        s = stamps(1_000_000, 1_004_000, 1_010_000, 1_080_000);
        assert_eq!(s.parts(Duration::from_nanos(80_000)).network, None);
    }

    #[test]
    fn a_handshake_before_the_request_moves_from_client_send_to_network() {
        // tcp-crr: connect (handshake 20 µs), then the request's stamps.
        let s = Stamps {
            handshake: Some(20_000),
            ..stamps(1_000_000, 1_034_000, 1_080_000, 1_090_000)
        };
        let p = s.parts(Duration::from_nanos(90_000));
        assert!(p.complete());
        assert_eq!(p.client_send, Some(34_000 - 20_000));
        assert_eq!(p.kernel_rtt, Some(46_000));
        assert_eq!(p.network, Some(46_000 - 10_000 + 20_000));
        let sum: u64 = p.list().iter().map(|x| x.unwrap()).sum();
        assert_eq!(Some(sum), p.rtt);
        // A handshake that does not fit before t1k: neither part is known,
        // and the others still are.
        let s = Stamps {
            handshake: Some(35_000),
            ..s
        };
        let p = s.parts(Duration::from_nanos(90_000));
        assert_eq!((p.client_send, p.network), (None, None));
        assert_eq!(p.client_wake, Some(10_000));
        // No transmit stamp: the client send and network parts are unknown.
        let s = Stamps { t1k: None, ..s };
        let p = s.parts(Duration::from_nanos(90_000));
        assert_eq!((p.client_send, p.network), (None, None));
    }

    #[test]
    fn an_icmp_peer_has_no_responder_parts() {
        let s = Stamps {
            responder: None,
            kernel_peer: true,
            ..stamps(1_000_000, 1_004_000, 1_050_000, 1_080_000)
        };
        let p = s.parts(Duration::from_nanos(80_000));
        assert_eq!(p.network, Some(46_000));
        assert_eq!(p.responder_wake, None);
        let known: u64 = p.list().iter().flatten().sum();
        assert_eq!(Some(known), p.rtt, "client send + network + client wake");
        assert!(p.complete());
    }
}

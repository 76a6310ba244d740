//! The descriptors of this crate's probes (see [`prober_core::Protocol`]).

use prober_core::protocol::{
    BuildEnv, BuildFuture, Options, ProbeSpec, Protocol, Rung, Scheme, SizeRule,
};
use prober_core::runnable;

use crate::wire::{HEADER_LEN, MAX_TCP_FRAME, MAX_UDP_FRAME};
use crate::{DEFAULT_PORT, TcpConnectProbe, TcpCrrProbe, TcpProbe, UdpProbe};

const TCP_SIZES: SizeRule = SizeRule {
    default: 64,
    min: HEADER_LEN,
    max: MAX_TCP_FRAME,
};

fn build_tcp<'a>(spec: ProbeSpec<'a>, env: &'a BuildEnv) -> BuildFuture<'a> {
    Box::pin(async move {
        Ok(runnable(
            TcpProbe::with_busy_poll(spec.addr, spec.size, env.busy_poll)
                .with_spare(!env.pipelined)
                .with_stamps(env.tx_stamps, spec.timeout)
                .with_marks(env.marks.clone())
                .with_receive(&env.receive),
        ))
    })
}

fn build_connect<'a>(spec: ProbeSpec<'a>, env: &'a BuildEnv) -> BuildFuture<'a> {
    Box::pin(async move {
        Ok(runnable(
            TcpConnectProbe::new(spec.addr)
                .with_stamps(env.tx_stamps)
                .with_marks(env.marks.clone()),
        ))
    })
}

fn build_crr<'a>(spec: ProbeSpec<'a>, env: &'a BuildEnv) -> BuildFuture<'a> {
    Box::pin(async move {
        Ok(runnable(
            TcpCrrProbe::new(spec.addr, spec.size)
                .with_stamps(env.tx_stamps, spec.timeout)
                .with_marks(env.marks.clone()),
        ))
    })
}

fn build_udp<'a>(spec: ProbeSpec<'a>, env: &'a BuildEnv) -> BuildFuture<'a> {
    Box::pin(async move {
        let probe = UdpProbe::connect_stamped(
            spec.addr,
            spec.size,
            env.busy_poll,
            env.tx_stamps,
            &env.marks,
        )
        .await
        .map_err(|e| format!("opening a udp socket to {}: {e}", spec.addr))?
        .with_timeout(spec.timeout)
        .with_receive(&env.receive);
        Ok(runnable(probe))
    })
}

/// `tcp://`: request/response on one persistent connection.
pub const TCP: Protocol = Protocol {
    schemes: &[Scheme::plain("tcp")],
    port: Some(DEFAULT_PORT),
    default_port: false,
    path: None,
    size: Some(TCP_SIZES),
    size_unit: "frame",
    options: Options {
        ttl: false,
        busy_poll: true,
        marks: true,
        flows: true,
    },
    help: "request/response on one connection (netperf TCP_RR)",
    ladder: &[Rung {
        scheme: "tcp",
        label: "TCP",
        over: Some("udp"),
        rank: 2,
    }],
    turnaround: None,
    own: &[],
    self_test: &[prober_core::protocol::SelfTest::on("tcp", "tcp")],
    build: build_tcp,
};

/// `tcp-connect://`: handshake time against any TCP server; no payload.
pub const TCP_CONNECT: Protocol = Protocol {
    schemes: &[Scheme::plain("tcp-connect")],
    port: Some(0),
    size: None,
    options: Options {
        ttl: false,
        busy_poll: false,
        marks: true,
        flows: false,
    },
    help: "TCP handshake time, against any TCP server",
    ladder: &[],
    self_test: &[prober_core::protocol::SelfTest::on("tcp-connect", "tcp")],
    build: build_connect,
    ..TCP
};

/// `tcp-crr://`: connect, request, response, close.
pub const TCP_CRR: Protocol = Protocol {
    schemes: &[Scheme::plain("tcp-crr")],
    options: Options {
        ttl: false,
        busy_poll: false,
        marks: true,
        flows: false,
    },
    help: "connect, request, response, close (netperf TCP_CRR)",
    ladder: &[],
    self_test: &[prober_core::protocol::SelfTest::on("tcp-crr", "tcp")],
    build: build_crr,
    ..TCP
};

/// `udp://`: datagram request/response.
pub const UDP: Protocol = Protocol {
    schemes: &[Scheme::plain("udp")],
    size: Some(SizeRule {
        max: MAX_UDP_FRAME,
        ..TCP_SIZES
    }),
    help: "datagram request/response",
    ladder: &[Rung {
        scheme: "udp",
        label: "UDP",
        over: Some("icmp"),
        rank: 1,
    }],
    self_test: &[prober_core::protocol::SelfTest::on("udp", "udp")],
    build: build_udp,
    ..TCP
};

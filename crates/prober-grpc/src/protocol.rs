//! The descriptors of this crate's probes (see [`prober_core::Protocol`]).

use std::sync::Arc;

use prober_core::protocol::{
    BuildEnv, BuildError, BuildFuture, Options, ProbeSpec, Protocol, Rung, Scheme, SizeRule,
};
use prober_core::runnable;

use crate::{
    ClientConfig, ClientTls, DEFAULT_PORT, GrpcHealthProbe, GrpcProbe, GrpcStreamProbe, MAX_REQUEST,
};

/// The client configuration of one target; the TLS files are read once per
/// set of options (a run, or a daemon job with its own `[job.tls]`), by the
/// first target over TLS.
fn config(spec: &ProbeSpec<'_>, env: &BuildEnv) -> Result<ClientConfig, BuildError> {
    let tls = if spec.scheme.tls {
        let tls = env.options.get_or_try_init(|| {
            let t = &env.tls;
            ClientTls::from_files(
                t.ca.as_deref(),
                t.cert.as_deref(),
                t.key.as_deref(),
                t.server_name.clone(),
                t.insecure,
            )
            .map(|c| Arc::new(c.with_roots(t.roots)))
        })?;
        Some(ClientTls::clone(&tls))
    } else {
        None
    };
    Ok(ClientConfig {
        addr: spec.addr,
        host: spec.host.to_owned(),
        tls,
        timeout: spec.timeout,
        // Shorter than the probe timeout, so a connect to a black hole
        // fails inside the probe and starts the reconnect backoff, rather
        // than being cancelled by the runner every slot.
        connect_timeout: spec.timeout.mul_f64(0.9),
        size: spec.size,
        tx_stamps: env.tx_stamps,
        receive: env.receive.clone(),
        spare: !env.pipelined,
    })
}

fn build_unary<'a>(spec: ProbeSpec<'a>, env: &'a BuildEnv) -> BuildFuture<'a> {
    Box::pin(async move { Ok(runnable(GrpcProbe::new(config(&spec, env)?))) })
}

fn build_stream<'a>(spec: ProbeSpec<'a>, env: &'a BuildEnv) -> BuildFuture<'a> {
    Box::pin(async move { Ok(runnable(GrpcStreamProbe::new(config(&spec, env)?))) })
}

fn build_health<'a>(spec: ProbeSpec<'a>, env: &'a BuildEnv) -> BuildFuture<'a> {
    Box::pin(async move {
        let cfg = config(&spec, env)?;
        Ok(runnable(GrpcHealthProbe::new(cfg, spec.path.to_owned())))
    })
}

/// `grpc://`, `grpcs://`: unary `prober.v1.Echo/Ping` on one reused channel.
pub const GRPC: Protocol = Protocol {
    schemes: &[Scheme::plain("grpc"), Scheme::tls("grpcs")],
    port: Some(DEFAULT_PORT),
    default_port: false,
    path: None,
    size: Some(SizeRule {
        default: 64,
        min: 0,
        max: MAX_REQUEST,
    }),
    size_unit: "message",
    options: Options {
        ttl: false,
        busy_poll: false,
        marks: false,
        flows: false,
    },
    help: "unary Ping on one HTTP/2 channel",
    ladder: &[
        Rung {
            scheme: "grpc",
            label: "gRPC",
            over: Some("h2c"),
            rank: 6,
        },
        Rung {
            scheme: "grpcs",
            label: "gRPC over TLS",
            over: Some("grpc"),
            rank: 7,
        },
    ],
    turnaround: Some("its kernel receive stamp to its handler's return, as it reports it"),
    own: &[],
    self_test: &[
        prober_core::protocol::SelfTest::on("grpc", "grpc"),
        prober_core::protocol::SelfTest::on("grpcs", "grpcs"),
    ],
    build: build_unary,
};

/// `grpc+stream://`, `grpcs+stream://`: ping-pong on one bidirectional stream.
pub const GRPC_STREAM: Protocol = Protocol {
    schemes: &[Scheme::plain("grpc+stream"), Scheme::tls("grpcs+stream")],
    help: "ping-pong on one bidirectional stream",
    ladder: &[],
    self_test: &[prober_core::protocol::SelfTest::on("grpc+stream", "grpc")],
    build: build_stream,
    ..GRPC
};

/// `grpc-health://`, `grpcs-health://`: `grpc.health.v1.Health/Check` on any
/// gRPC server; no payload.
pub const GRPC_HEALTH: Protocol = Protocol {
    schemes: &[Scheme::plain("grpc-health"), Scheme::tls("grpcs-health")],
    port: Some(0),
    path: Some("service"),
    size: None,
    help: "grpc.health.v1 Check on any gRPC server",
    ladder: &[],
    self_test: &[],
    build: build_health,
    ..GRPC
};

//! Turning parsed targets into running probes, shared by `prober run` and
//! the daemon.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, bail};
use prober_core::{Anomalies, Event, Probe, RunConfig, TargetInfo, run_target};
use prober_grpc::{ClientConfig, ClientTls, GrpcHealthProbe, GrpcProbe, GrpcStreamProbe};
use prober_icmp::{IcmpClient, IcmpProbe};
use prober_tcp::{TcpConnectProbe, TcpCrrProbe, TcpProbe, UdpProbe, check_size};
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::target::{Scheme, Target};

/// Request size of TCP, UDP and gRPC probes when `--size` is not given.
pub(crate) const DEFAULT_SIZE: usize = 64;

/// Reads a running probe's late, duplicate and reconnect counters.
pub(crate) type AnomalyFn = Box<dyn Fn() -> Anomalies + Send + Sync>;

/// The request size of target `t`: `--size`, or 56 payload bytes for ICMP
/// (as ping) and 64-byte frames for the others.
pub(crate) fn target_size(t: &Target, size: Option<usize>) -> usize {
    match (size, t.scheme) {
        (Some(s), _) => s,
        (None, Scheme::Icmp) => prober_icmp::packet::DEFAULT_PAYLOAD,
        (None, _) => DEFAULT_SIZE,
    }
}

/// Whether a request size means anything for `t`: a TCP handshake and a
/// gRPC health check send no payload.
pub(crate) fn uses_size(t: &Target) -> bool {
    !matches!(
        t.scheme,
        Scheme::TcpConnect | Scheme::GrpcHealth | Scheme::GrpcsHealth
    )
}

/// How target `id` appears in results: the address as probed (the IP for
/// ICMP) and where reply timestamps come from (the kernel for ICMP).
pub(crate) fn target_info(id: usize, t: &Target, addr: SocketAddr, size: usize) -> TargetInfo {
    let shown = match t.scheme {
        Scheme::Icmp => addr.ip().to_string(),
        _ => addr.to_string(),
    };
    let mut info = TargetInfo::new(id, &t.to_string(), t.scheme.name(), &shown, size);
    if t.scheme == Scheme::Icmp {
        info.timestamps = "kernel".to_owned();
    }
    info
}

pub(crate) fn check_target_size(t: &Target, size: usize) -> anyhow::Result<()> {
    let res = match t.scheme {
        Scheme::Tcp => check_size("tcp", size, false),
        Scheme::TcpCrr => check_size("tcp-crr", size, false),
        Scheme::Udp => check_size("udp", size, true),
        Scheme::TcpConnect => Ok(()),
        Scheme::Icmp => {
            return prober_icmp::check_size(size).with_context(|| format!("target {t}"));
        }
        Scheme::Grpc | Scheme::Grpcs | Scheme::GrpcStream | Scheme::GrpcsStream => {
            if size > prober_grpc::MAX_REQUEST {
                bail!(
                    "target {t}: size {size} is out of range for grpc: must be 0..={} bytes",
                    prober_grpc::MAX_REQUEST
                );
            }
            Ok(())
        }
        Scheme::GrpcHealth | Scheme::GrpcsHealth => Ok(()),
    };
    res.with_context(|| format!("target {t}"))
}

/// A probe ready to run, one variant per protocol.
pub(crate) enum Built {
    Tcp(TcpProbe),
    TcpConnect(TcpConnectProbe),
    TcpCrr(TcpCrrProbe),
    Udp(UdpProbe),
    Icmp(IcmpProbe),
    Grpc(GrpcProbe),
    GrpcStream(GrpcStreamProbe),
    GrpcHealth(GrpcHealthProbe),
}

/// What building probes needs besides the target.
pub(crate) struct BuildCtx {
    pub(crate) icmp: Arc<IcmpClient>,
    pub(crate) tls: Option<ClientTls>,
    pub(crate) timeout: Duration,
    /// Read TCP and UDP replies on spinning threads (ICMP: see IcmpClient).
    pub(crate) busy_poll: bool,
}

impl Built {
    pub(crate) async fn new(
        t: &Target,
        addr: SocketAddr,
        size: usize,
        ctx: &BuildCtx,
    ) -> anyhow::Result<Self> {
        let grpc = || ClientConfig {
            addr,
            host: t.host.clone(),
            tls: t.scheme.tls().then(|| ctx.tls.clone().unwrap_or_default()),
            timeout: ctx.timeout,
            // Shorter than the probe timeout, so a connect to a black hole
            // fails inside the probe and starts the reconnect backoff,
            // rather than being cancelled by the runner every slot.
            connect_timeout: ctx.timeout.mul_f64(0.9),
            size,
        };
        Ok(match t.scheme {
            Scheme::Tcp => Self::Tcp(TcpProbe::with_busy_poll(addr, size, ctx.busy_poll)),
            Scheme::TcpConnect => Self::TcpConnect(TcpConnectProbe::new(addr)),
            Scheme::TcpCrr => Self::TcpCrr(TcpCrrProbe::new(addr, size)),
            Scheme::Udp => Self::Udp(
                UdpProbe::connect_with(addr, size, ctx.busy_poll)
                    .await
                    .with_context(|| format!("opening a udp socket to {addr}"))?,
            ),
            Scheme::Icmp => Self::Icmp(IcmpProbe::new(&ctx.icmp, addr.ip(), size)?),
            Scheme::Grpc | Scheme::Grpcs => Self::Grpc(GrpcProbe::new(grpc())),
            Scheme::GrpcStream | Scheme::GrpcsStream => {
                Self::GrpcStream(GrpcStreamProbe::new(grpc()))
            }
            Scheme::GrpcHealth | Scheme::GrpcsHealth => {
                Self::GrpcHealth(GrpcHealthProbe::new(grpc(), t.path.clone()))
            }
        })
    }

    /// Runs the generic runner for this probe type in `set` and returns a
    /// way to read the probe's anomaly counters while it runs.
    pub(crate) fn spawn(
        self,
        set: &mut JoinSet<()>,
        id: usize,
        cfg: RunConfig,
        phase: Duration,
        events: &mpsc::Sender<Event>,
        stop: &CancellationToken,
    ) -> AnomalyFn {
        let (events, stop) = (events.clone(), stop.clone());
        fn go<P: Probe>(
            set: &mut JoinSet<()>,
            p: P,
            id: usize,
            cfg: RunConfig,
            phase: Duration,
            events: mpsc::Sender<Event>,
            stop: CancellationToken,
        ) -> AnomalyFn {
            let p = Arc::new(p);
            let reader = Arc::clone(&p);
            set.spawn(run_target(p, id, cfg, phase, events, stop));
            Box::new(move || reader.anomalies())
        }
        match self {
            Self::Tcp(p) => go(set, p, id, cfg, phase, events, stop),
            Self::TcpConnect(p) => go(set, p, id, cfg, phase, events, stop),
            Self::TcpCrr(p) => go(set, p, id, cfg, phase, events, stop),
            Self::Udp(p) => go(set, p, id, cfg, phase, events, stop),
            Self::Icmp(p) => go(set, p, id, cfg, phase, events, stop),
            Self::Grpc(p) => go(set, p, id, cfg, phase, events, stop),
            Self::GrpcStream(p) => go(set, p, id, cfg, phase, events, stop),
            Self::GrpcHealth(p) => go(set, p, id, cfg, phase, events, stop),
        }
    }
}

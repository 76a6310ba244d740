//! `prober run`: probe targets on a schedule and report statistics.

use std::io::Write as _;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, anyhow, bail};
use prober_core::runner::{Clock, EVENT_CHANNEL, phase};
use prober_core::sink::{
    CsvSink, DEFAULT_CSV_FIELDS, DEFAULT_TABLE_FIELDS, HumanSink, JsonSink, parse_fields,
};
use prober_core::{Event, RunConfig, RunMeta, Sink, Summary, TargetInfo, collect, run_target};
use prober_grpc::{
    ClientConfig, ClientTls, GrpcHealthProbe, GrpcProbe, GrpcStreamProbe, ServerConfig, serve_grpc,
};
use prober_icmp::{IcmpClient, IcmpProbe};
use prober_tcp::{
    ResponderConfig, TcpConnectProbe, TcpCrrProbe, TcpProbe, UdpProbe, check_size, serve_tcp,
    serve_udp,
};
use tokio::net::{TcpListener, UdpSocket};
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::cli::{Output, RunArgs};
use crate::signal::cancel_on_signals;
use crate::target::{Family, Scheme, Target, parse_target, resolve};

/// Request size of TCP and UDP probes when `--size` is not given.
const DEFAULT_SIZE: usize = 64;

/// Count and interval of the loopback self-test when none is given.
const SELF_TEST_COUNT: u64 = 200;
const SELF_TEST_INTERVAL: Duration = Duration::from_millis(10);

fn run_config(args: &RunArgs, self_test: bool) -> anyhow::Result<RunConfig> {
    let default_interval = if self_test {
        SELF_TEST_INTERVAL
    } else {
        Duration::from_secs(1)
    };
    let count = match (args.count, args.duration, self_test) {
        (None, None, true) => Some(SELF_TEST_COUNT),
        (count, _, _) => count,
    };
    let cfg = RunConfig {
        interval: args.interval.unwrap_or(default_interval),
        count,
        duration: args.duration,
        burst: args.burst,
        pacing: args.pacing.into(),
        size: args.size.unwrap_or(DEFAULT_SIZE),
        timeout: args.timeout,
        warmup: args.warmup,
        max_in_flight: usize::try_from(args.max_in_flight).unwrap_or(usize::MAX),
        precise_timer: true,
    };
    cfg.validate()?;
    Ok(cfg)
}

/// Starts the TCP and UDP responder on loopback ephemeral ports and returns
/// one target per protocol it can answer.
async fn start_self_test(
    services: &mut JoinSet<std::io::Result<()>>,
    stop: CancellationToken,
    icmp: &IcmpClient,
) -> anyhow::Result<Vec<Target>> {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .await
        .context("binding the loopback tcp responder")?;
    let socket = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0))
        .await
        .context("binding the loopback udp responder")?;
    let (tcp, udp) = (listener.local_addr()?.port(), socket.local_addr()?.port());
    services.spawn(serve_tcp(
        listener,
        ResponderConfig::default(),
        stop.clone(),
    ));
    services.spawn(serve_udp(socket, ResponderConfig::default(), stop.clone()));
    let grpc_listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .await
        .context("binding the loopback grpc responder")?;
    let grpc = grpc_listener.local_addr()?.port();
    services.spawn(async move {
        serve_grpc(grpc_listener, ServerConfig::default(), stop)
            .await
            .map_err(std::io::Error::other)
    });
    let host = Ipv4Addr::LOCALHOST.to_string();
    let target = |scheme, port| Target::new(scheme, &host, port);
    let mut targets = vec![
        target(Scheme::Tcp, tcp),
        target(Scheme::Udp, udp),
        target(Scheme::TcpConnect, tcp),
        target(Scheme::TcpCrr, tcp),
        target(Scheme::Grpc, grpc),
        target(Scheme::GrpcStream, grpc),
    ];
    // ICMP needs a socket the kernel may refuse; the self-test goes on without.
    match icmp.is_raw(false) {
        Ok(_) => targets.push(target(Scheme::Icmp, 0)),
        Err(error) => tracing::warn!("skipping icmp in the self-test: {error}"),
    }
    let has_v6_loopback = std::net::UdpSocket::bind((Ipv6Addr::LOCALHOST, 0)).is_ok();
    if has_v6_loopback && icmp.is_raw(true).is_ok() {
        targets.push(Target::new(
            Scheme::Icmp,
            &Ipv6Addr::LOCALHOST.to_string(),
            0,
        ));
    }
    Ok(targets)
}

/// The request size of target `t`: `--size`, or 56 payload bytes for ICMP
/// (as ping) and 64-byte frames for the others.
fn target_size(t: &Target, size: Option<usize>) -> usize {
    match (size, t.scheme) {
        (Some(s), _) => s,
        (None, Scheme::Icmp) => prober_icmp::packet::DEFAULT_PAYLOAD,
        (None, _) => DEFAULT_SIZE,
    }
}

fn check_target_size(t: &Target, size: usize) -> anyhow::Result<()> {
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
enum Built {
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
struct BuildCtx {
    icmp: Arc<IcmpClient>,
    tls: Option<ClientTls>,
    timeout: Duration,
}

impl Built {
    async fn new(
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
            connect_timeout: ctx.timeout,
            size,
        };
        Ok(match t.scheme {
            Scheme::Tcp => Self::Tcp(TcpProbe::new(addr, size)),
            Scheme::TcpConnect => Self::TcpConnect(TcpConnectProbe::new(addr)),
            Scheme::TcpCrr => Self::TcpCrr(TcpCrrProbe::new(addr, size)),
            Scheme::Udp => Self::Udp(
                UdpProbe::connect(addr, size)
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

    /// Runs the generic runner for this probe type in `set`.
    fn spawn(self, set: &mut JoinSet<()>, id: usize, ctx: &SpawnCtx) {
        let cfg = ctx.cfg.clone();
        let phase = phase(id, ctx.targets, cfg.interval);
        let (events, stop) = (ctx.events.clone(), ctx.stop.clone());
        match self {
            Self::Tcp(p) => set.spawn(run_target(Arc::new(p), id, cfg, phase, events, stop)),
            Self::TcpConnect(p) => set.spawn(run_target(Arc::new(p), id, cfg, phase, events, stop)),
            Self::TcpCrr(p) => set.spawn(run_target(Arc::new(p), id, cfg, phase, events, stop)),
            Self::Udp(p) => set.spawn(run_target(Arc::new(p), id, cfg, phase, events, stop)),
            Self::Icmp(p) => set.spawn(run_target(Arc::new(p), id, cfg, phase, events, stop)),
            Self::Grpc(p) => set.spawn(run_target(Arc::new(p), id, cfg, phase, events, stop)),
            Self::GrpcStream(p) => set.spawn(run_target(Arc::new(p), id, cfg, phase, events, stop)),
            Self::GrpcHealth(p) => set.spawn(run_target(Arc::new(p), id, cfg, phase, events, stop)),
        };
    }
}

/// What every target task of one run shares.
struct SpawnCtx {
    cfg: RunConfig,
    targets: usize,
    events: mpsc::Sender<Event>,
    stop: CancellationToken,
}

/// Runs `prober run`.
pub(crate) async fn run(args: RunArgs) -> anyhow::Result<ExitCode> {
    let self_test = args.targets.is_empty();
    let cfg = run_config(&args, self_test)?;
    let fields = match (&args.fields, args.output) {
        (Some(spec), _) => parse_fields(spec).map_err(|e| anyhow!(e))?,
        (None, Output::Csv) => DEFAULT_CSV_FIELDS.iter().map(|s| (*s).to_owned()).collect(),
        (None, _) => DEFAULT_TABLE_FIELDS
            .iter()
            .map(|s| (*s).to_owned())
            .collect(),
    };
    let family = match (args.ipv4, args.ipv6) {
        (true, _) => Family::V4,
        (_, true) => Family::V6,
        _ => Family::Any,
    };

    // Check everything that can be checked before any socket is opened.
    let targets = if self_test {
        Vec::new()
    } else {
        args.targets
            .iter()
            .map(|t| parse_target(t))
            .collect::<anyhow::Result<Vec<_>>>()?
    };
    for t in &targets {
        check_target_size(t, target_size(t, args.size))?;
    }

    let tls = args.client_tls()?;
    let icmp = IcmpClient::new(args.icmp_socket.into(), args.ttl);
    let responder_stop = CancellationToken::new();
    let mut services = JoinSet::new();
    let targets = if self_test {
        start_self_test(&mut services, responder_stop.clone(), &icmp).await?
    } else {
        targets
    };
    let mut addrs = Vec::with_capacity(targets.len());
    for t in &targets {
        addrs.push(resolve(t, family).await?);
    }

    let build = BuildCtx {
        icmp,
        tls,
        timeout: cfg.timeout,
    };
    let stop = CancellationToken::new();
    let _signals = cancel_on_signals(stop.clone());
    let (events, rx) = mpsc::channel(EVENT_CHANNEL);
    let ctx = SpawnCtx {
        cfg: cfg.clone(),
        targets: targets.len(),
        events,
        stop,
    };
    let mut infos = Vec::with_capacity(targets.len());
    let mut runs = JoinSet::new();
    for (id, (t, addr)) in targets.iter().zip(&addrs).enumerate() {
        let size = target_size(t, args.size);
        let shown = match t.scheme {
            Scheme::Icmp => addr.ip().to_string(),
            _ => addr.to_string(),
        };
        let mut info = TargetInfo::new(id, &t.to_string(), t.scheme.name(), &shown, size);
        if t.scheme == Scheme::Icmp {
            info.timestamps = "kernel".to_owned();
        }
        infos.push(info);
        Built::new(t, *addr, size, &build)
            .await?
            .spawn(&mut runs, id, &ctx);
    }
    drop(ctx);

    let quiet = args.quiet || (self_test && args.output == Output::Human);
    let stdout = || Box::new(std::io::stdout()) as Box<dyn std::io::Write + Send>;
    let sink: Box<dyn Sink> = match args.output {
        Output::Human => Box::new(HumanSink::new(stdout(), quiet, fields)),
        Output::Json => Box::new(JsonSink::new(stdout())),
        Output::Csv => Box::new(CsvSink::new(stdout(), fields)),
    };
    let mut sinks = vec![sink];
    let meta = RunMeta::new(env!("CARGO_PKG_VERSION"), &cfg);
    let (summaries, written) = collect(rx, &infos, &meta, Clock::now(), &mut sinks).await;
    while runs.join_next().await.is_some() {}
    responder_stop.cancel();
    while services.join_next().await.is_some() {}
    let _ = std::io::stdout().flush();
    written.context("writing results")?;
    Ok(if summaries.iter().all(Summary::all_ok) {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

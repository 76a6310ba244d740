//! `prober run`: probe targets on a schedule and report statistics.

use std::io::Write as _;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context as _, anyhow};
use prober_core::runner::{Clock, EVENT_CHANNEL, phase};
use prober_core::sink::{
    CsvSink, DEFAULT_CSV_FIELDS, DEFAULT_TABLE_FIELDS, HumanSink, JsonSink, parse_fields,
};
use prober_core::{RunConfig, RunMeta, Sink, Summary, collect};
use prober_grpc::{ServerConfig, serve_grpc};
use prober_icmp::IcmpClient;
use prober_tcp::{ResponderConfig, serve_tcp, serve_udp};
use tokio::net::{TcpListener, UdpSocket};
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::cli::{Output, RunArgs};
use crate::probes::{BuildCtx, Built, DEFAULT_SIZE, check_target_size, target_info, target_size};
use crate::signal::cancel_on_signals;
use crate::target::{Family, Scheme, Target, parse_target, resolve};

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
        if args.size.is_some() && !crate::probes::uses_size(t) {
            eprintln!("prober: warning: --size has no effect on {t}: it sends no payload");
        }
    }

    let tls = args.client_tls()?;
    // Spin pacing implies a spinning receiver where there are cores to spare:
    // on two vCPUs a spinning pacer, a spinning receiver and the responder
    // fight for the CPUs and every percentile gets worse.
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    let busy_poll = args.busy_poll || (cfg.pacing == prober_core::Pacing::Spin && cores >= 4);
    let icmp = IcmpClient::with_busy_poll(args.icmp_socket.into(), args.ttl, busy_poll);
    let responder_stop = CancellationToken::new();
    let mut services = JoinSet::new();
    let targets = if self_test {
        let targets = start_self_test(&mut services, responder_stop.clone(), &icmp).await?;
        for t in &targets {
            check_target_size(t, target_size(t, args.size))?;
        }
        targets
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
        busy_poll,
    };
    let stop = CancellationToken::new();
    let _signals = cancel_on_signals(stop.clone());
    let (events, rx) = mpsc::channel(EVENT_CHANNEL);
    let n_targets = targets.len();
    let mut infos = Vec::with_capacity(targets.len());
    let mut runs = JoinSet::new();
    for (id, (t, addr)) in targets.iter().zip(&addrs).enumerate() {
        let size = target_size(t, args.size);
        infos.push(target_info(id, t, *addr, size));
        let phase = phase(id, n_targets, cfg.interval);
        let _anomalies = Built::new(t, *addr, size, &build).await?.spawn(
            &mut runs,
            id,
            cfg.clone(),
            phase,
            &events,
            &stop,
        );
    }
    drop(events);

    let quiet = args.quiet || (self_test && args.output == Output::Human);
    let stdout = || Box::new(std::io::stdout()) as Box<dyn std::io::Write + Send>;
    let sink: Box<dyn Sink> = match args.output {
        Output::Human => Box::new(HumanSink::new(stdout(), quiet, fields)),
        Output::Json => Box::new(JsonSink::new(stdout(), args.quiet)),
        Output::Csv => Box::new(CsvSink::new(stdout(), fields)),
    };
    let mut sinks = vec![sink];
    let mut meta = RunMeta::new(env!("CARGO_PKG_VERSION"), &cfg);
    if busy_poll {
        meta.receive = "busy-poll".to_owned();
    }
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

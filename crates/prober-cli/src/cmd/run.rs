//! `prober run`: probe targets on a schedule and report statistics.

use std::io::{IsTerminal as _, Write as _};
use std::net::{Ipv4Addr, Ipv6Addr};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context as _, anyhow, bail};
use prober_core::runner::phase;
use prober_core::{
    Clock, Collector, EVENT_CHANNEL, Fanout, Launch, RunConfig, RunMeta, Sink, Summary, Target,
    collect, parse_target,
};
use prober_daemon::ResponderOptions;
use prober_net::{Family, resolve};
use prober_sinks::{
    CsvSink, DEFAULT_CSV_FIELDS, DEFAULT_TABLE_FIELDS, HumanSink, JsonSink, ProgressSink,
    parse_fields,
};
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::cli::{Output, RunArgs};
use crate::cmd::probe_flags::ProbeFlags;
use crate::protocols::PROTOCOLS;
use crate::signal::{cancel_on_signals, interim_on_sigquit};

/// Count and interval of the loopback self-test when none is given.
const SELF_TEST_COUNT: u64 = 100;
const SELF_TEST_INTERVAL: Duration = Duration::from_millis(10);
/// Between one self-test target's last slot and the next one's first.
const SELF_TEST_GAP: Duration = Duration::from_millis(50);

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
        timeout: args.timeout,
        warmup: args.warmup,
        max_in_flight: usize::try_from(args.max_in_flight).unwrap_or(usize::MAX),
        precise_timer: true,
    };
    cfg.validate()?;
    Ok(cfg)
}

/// The targets named on the command line and in `--file`.
fn target_texts(args: &RunArgs) -> anyhow::Result<Vec<String>> {
    let mut texts = args.targets.clone();
    if let Some(path) = &args.file {
        let body = if path.as_os_str() == "-" {
            std::io::read_to_string(std::io::stdin()).context("reading targets from stdin")?
        } else {
            std::fs::read_to_string(path)
                .with_context(|| format!("reading targets from {}", path.display()))?
        };
        texts.extend(
            body.lines()
                .map(|l| l.split('#').next().unwrap_or_default().trim())
                .filter(|l| !l.is_empty())
                .map(str::to_owned),
        );
        if texts.is_empty() {
            bail!("{} names no targets", path.display());
        }
    }
    Ok(texts)
}

/// A CA and a certificate for 127.0.0.1 signed by it, made for the
/// self-test's TLS rows and written to a directory removed at exit.
struct SelfTestPki {
    dir: std::path::PathBuf,
}

impl SelfTestPki {
    fn new() -> anyhow::Result<Self> {
        use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
        let dir = std::env::temp_dir().join(format!("prober-self-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let pki = Self { dir };
        // Valid from a day ago (a clock stepped back does not make them
        // "not yet valid") for 90 days, as a public certificate would be:
        // rcgen's default runs to the year 4096, and the TLS rows'
        // certificate line then said "expires in 755722.6 days". The
        // self-test's rows run one after another, so a long -d needs room.
        let now = time::OffsetDateTime::now_utc();
        let valid = |p: &mut CertificateParams| {
            p.not_before = now - time::Duration::days(1);
            p.not_after = now + time::Duration::days(90);
        };
        let mut ca = CertificateParams::new(Vec::<String>::new())?;
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        valid(&mut ca);
        let ca_key = KeyPair::generate()?;
        std::fs::write(pki.path("ca.pem"), ca.self_signed(&ca_key)?.pem())?;
        let issuer = Issuer::new(ca, ca_key);
        let key = KeyPair::generate()?;
        let mut leaf =
            CertificateParams::new(vec!["127.0.0.1".to_owned(), "localhost".to_owned()])?;
        valid(&mut leaf);
        let cert = leaf.signed_by(&key, &issuer)?;
        std::fs::write(pki.path("cert.pem"), cert.pem())?;
        std::fs::write(pki.path("key.pem"), key.serialize_pem())?;
        Ok(pki)
    }

    fn path(&self, name: &str) -> std::path::PathBuf {
        self.dir.join(name)
    }
}

impl Drop for SelfTestPki {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Starts the responders on loopback ephemeral ports and returns one
/// target per protocol they answer, plus ICMP to loopback: the protocol
/// ladder, ICMP to gRPC over TLS.
async fn start_self_test(
    stop: &CancellationToken,
    pki: &SelfTestPki,
) -> anyhow::Result<(prober_daemon::Responders, Vec<Target>)> {
    // Every responder the self-test's targets need (each protocol says
    // which: not sockperf's, nor the STAMP reflector, whose targets are
    // not in it), on loopback ephemeral ports.
    let tests: Vec<&prober_core::protocol::SelfTest> =
        PROTOCOLS.protocols().flat_map(|p| p.self_test).collect();
    let mut listen: Vec<(&'static str, std::net::SocketAddr)> = Vec::new();
    for name in tests.iter().filter_map(|t| t.responder) {
        if !listen.iter().any(|(n, _)| *n == name) {
            listen.push((name, (Ipv4Addr::LOCALHOST, 0).into()));
        }
    }
    let opts = ResponderOptions {
        listen,
        tls_cert: Some(pki.path("cert.pem")),
        tls_key: Some(pki.path("key.pem")),
        ..ResponderOptions::default()
    };
    let responders = prober_daemon::responder::start(&opts, &PROTOCOLS, stop)
        .await
        .context("starting the loopback responders")?;
    let port = |what| {
        responders
            .bound
            .iter()
            .find(|(w, _)| *w == what)
            .map_or(0, |(_, a)| a.port())
    };
    let mut targets = Vec::new();
    for t in tests {
        let mut hosts = vec![Ipv4Addr::LOCALHOST.to_string()];
        // Answered by the kernel: over IPv6 too, where it works.
        if t.responder.is_none() && std::net::UdpSocket::bind((Ipv6Addr::LOCALHOST, 0)).is_ok() {
            hosts.push(Ipv6Addr::LOCALHOST.to_string());
        }
        for host in hosts {
            let mut target = Target::new(&PROTOCOLS, t.scheme, &host, t.responder.map_or(0, port));
            t.path.clone_into(&mut target.path);
            targets.push(target);
        }
    }
    Ok((responders, targets))
}

/// The flags that say how `run`'s probes are built.
fn probe_flags(args: &RunArgs) -> ProbeFlags<'_> {
    ProbeFlags {
        ttl: args.ttl,
        marks: &args.marks,
        tls: &args.tls,
        own: &args.own,
        size: args.size,
        no_tx_stamps: args.no_tx_stamps,
    }
}

/// Refuses options that no target can honour (see [`ProbeFlags::check`])
/// and output options that do not fit the output.
fn check_options(args: &RunArgs, targets: &[Target]) -> anyhow::Result<()> {
    probe_flags(args).check(targets)?;
    if args.one_at_a_time && args.count.is_none() && args.duration.is_none() {
        bail!(
            "--one-at-a-time runs each target to its end before the next: give -c COUNT or -d DURATION"
        );
    }
    if args.fields.is_some() && args.output == Output::Json {
        bail!(
            "--fields chooses the columns of -o human and -o csv; -o json always has every field"
        );
    }
    if args.unix_time && args.output != Output::Human {
        bail!(
            "-D starts -o human's probe lines with the Unix time; -o json's probe lines carry it already (sent_unix_ns), and -o csv has no probe lines"
        );
    }
    Ok(())
}

/// Whether replies are read on spinning threads: `--busy-poll`, or spin
/// pacing where there are cores to spare (`run` and `sweep` alike). On two
/// vCPUs a spinning pacer, a spinning receiver and the responder fight for
/// the CPUs and every percentile gets worse.
pub(crate) fn busy_poll_for(asked: bool, pacing: prober_core::Pacing) -> bool {
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    asked || (pacing == prober_core::Pacing::Spin && cores >= 4)
}

/// The receive mode as the settings name it: `busy-poll` where replies are
/// read on spinning threads, else the mode's own name.
pub(crate) fn receive_name(busy_poll: bool, receive: &prober_core::spin::Receive) -> &'static str {
    if busy_poll {
        "busy-poll"
    } else {
        receive.name()
    }
}

/// Refuses the options that `prober run` with no target would not use: the
/// self-test makes its own targets (one flow each), certificates and
/// requests, so these would be ignored.
fn refuse_in_self_test(args: &RunArgs) -> anyhow::Result<()> {
    let flag = (args.flows != 1)
        .then_some("--flows")
        .or_else(|| probe_flags(args).for_targets_only());
    if let Some(flag) = flag {
        bail!(
            "{flag} needs targets: `prober run` with no target runs the self-test, which makes its own targets, certificates and requests"
        );
    }
    Ok(())
}

/// The exit status the summaries call for, as ping's: 1 when a target got
/// no reply at all, or lost more than `fail_on_loss` percent of its slots.
fn exit_code(summaries: &[Summary], fail_on_loss: Option<f64>) -> ExitCode {
    let failed = summaries.iter().any(|s| {
        s.ok == 0
            || fail_on_loss
                .is_some_and(|max| s.loss_with_missed_pct().is_some_and(|loss| loss > max))
    });
    if failed {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}

/// Runs `prober run`; `cpu_latency`: the PM QoS request `main` holds, for
/// the settings.
pub(crate) async fn run(
    mut args: RunArgs,
    cpu_latency: Option<Duration>,
) -> anyhow::Result<ExitCode> {
    if args.trace {
        return crate::cmd::trace::run(&args).await;
    }
    // ping's -I: an address to send from, or an interface to send through.
    if let Some(given) = args.ping_source.take() {
        match given.parse::<std::net::IpAddr>() {
            Ok(addr) => args.marks.source = Some(addr),
            Err(_) => args.marks.interface = Some(given),
        }
    }
    let texts = target_texts(&args)?;
    let self_test = texts.is_empty();
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
    let mut targets = Vec::with_capacity(texts.len());
    for text in &texts {
        let t = parse_target(&PROTOCOLS, text)?;
        targets.extend(t.flows(args.flows, &PROTOCOLS).map_err(|e| anyhow!(e))?);
    }
    for t in &targets {
        if let Some(size) = t.size(args.size) {
            t.check_size(size)?;
        }
    }
    if self_test {
        refuse_in_self_test(&args)?;
    } else {
        check_options(&args, &targets)?;
    }

    let busy_poll = busy_poll_for(args.busy_poll, cfg.pacing);
    let receive = args.receive.run_receive(!self_test)?;
    let flags = probe_flags(&args);
    let mut env = flags.env(busy_poll, receive.clone());
    env.pipelined = args.burst > 1;
    if !self_test {
        flags.seed(&targets, &env)?;
    }
    // Signals are caught from here on: one during the start-up below stops
    // the run before its first probe (with its empty results written once
    // the targets are resolved; while a name is resolved, at once with 130).
    let stop = CancellationToken::new();
    let abandon = CancellationToken::new();
    cancel_on_signals(
        stop.clone(),
        Some(crate::signal::Drain {
            waiting: format!(
                "waiting up to {} for the probes in flight",
                humantime::format_duration(args.timeout)
            ),
            abandon: abandon.clone(),
        }),
    );
    let responder_stop = CancellationToken::new();
    let pki = if self_test {
        Some(SelfTestPki::new().context("making the self-test's certificate")?)
    } else {
        None
    };
    let mut env = env;
    if let Some(pki) = &pki {
        env.tls.ca = Some(pki.path("ca.pem"));
    }
    let (responders, targets) = if let Some(pki) = &pki {
        let (r, targets) = start_self_test(&responder_stop, pki).await?;
        for t in &targets {
            if let Some(size) = t.size(args.size) {
                t.check_size(size)?;
            }
        }
        (Some(r), targets)
    } else {
        (None, targets)
    };
    // As fping does, a name that does not resolve is reported and the
    // other targets are probed; it is in the results as a target whose
    // every slot failed with `resolve`. With no target left, the run stops.
    let mut addrs = Vec::with_capacity(targets.len());
    for t in &targets {
        // A name that takes long to resolve must not hold a Ctrl-C back:
        // nothing was measured yet, so the run ends there with 130, and
        // `main` does not wait for the resolver's thread.
        let addr = tokio::select! {
            biased;
            addr = resolve(t, family) => addr,
            () = stop.cancelled() => {
                eprintln!("prober: stopped while resolving {t}");
                return Ok(ExitCode::from(130));
            }
        };
        match addr {
            Ok(addr) => {
                if let Err(e) = env.marks.check_family(addr) {
                    bail!("--source {e}, the address of {t}");
                }
                addrs.push(Ok(addr));
            }
            Err(e) => addrs.push(Err(e)),
        }
    }
    if addrs.iter().all(Result::is_err)
        && let Some(Err(e)) = addrs.pop()
    {
        return Err(e.into());
    }
    for e in addrs.iter().filter_map(|a| a.as_ref().err()) {
        eprintln!("prober: {e}; probing the other targets");
    }
    // Build every probe before any runs, so a bad target stops the run
    // before the first probe. The self-test goes on without ICMP where the
    // kernel refuses an ICMP socket.
    let mut built = Vec::with_capacity(targets.len());
    for (t, addr) in targets.iter().zip(addrs) {
        let size = t.size(args.size);
        let addr = match addr {
            Ok(addr) => addr,
            Err(e) => {
                let probe = prober_core::runnable(prober_core::Unresolved::new(e.to_string()));
                built.push((t, None, size, probe));
                continue;
            }
        };
        let spec = t.spec(addr, size, cfg.timeout);
        match (t.protocol.build)(spec, &env).await {
            Ok(probe) => built.push((t, Some(addr), size, probe)),
            Err(error) if self_test && t.protocol.port.is_none() => {
                tracing::warn!("skipping {t} in the self-test: {error}");
            }
            Err(error) => return Err(anyhow!("target {t}: {error}")),
        }
    }

    let quiet = args.quiet || (self_test && args.output == Output::Human);
    // A pipe or terminal is written from a thread of its own, so a reader
    // that falls behind does not hold up the probes' runtime.
    let (stdout, drain) = prober_sinks::PipedStdout::or_raw();
    let sink: Box<dyn Sink> = match args.output {
        Output::Human => Box::new(
            HumanSink::new(stdout, quiet, fields)
                .with_unix_time(args.unix_time)
                .with_protocols(&PROTOCOLS)
                .with_ladder(if self_test {
                    PROTOCOLS.ladder()
                } else {
                    Vec::new()
                }),
        ),
        Output::Json => Box::new(JsonSink::new(stdout, args.quiet)),
        Output::Csv => Box::new(CsvSink::new(stdout, fields)),
    };
    let (host, kernel) = prober_sys::host();
    let mut meta = RunMeta::new(env!("CARGO_PKG_VERSION"), &cfg)
        .on_host(&host, &kernel)
        .with_tx_stamps(!args.no_tx_stamps)
        .with_cpu_latency(cpu_latency);
    meta.size = args.size;
    receive_name(busy_poll, &receive).clone_into(&mut meta.receive);
    let mut sinks = vec![sink];
    // A progress line for a person waiting on a quiet run (the self-test is
    // quiet too, and takes seconds); indicatif draws nothing when stderr is
    // not a terminal.
    if (args.quiet || self_test) && std::io::stderr().is_terminal() {
        let total = cfg.count.map(|c| c * built.len() as u64);
        sinks.push(Box::new(ProgressSink::new(total)));
    }
    let mut collector = Collector::new(meta, Clock::now(), Fanout::skipping_failed(sinks), false);

    let interim = interim_on_sigquit();
    let (events, rx) = mpsc::channel(EVENT_CHANNEL);
    let n = built.len() as u64;
    // The self-test measures one target at a time, whatever -i and -c say,
    // so that each rung of the ladder is its protocol's cost and not the
    // others' contention for the CPUs (12 targets and their responders on
    // 2 vCPUs moved medians by more than the layers differ): its targets
    // share a turnstile, and each starts SELF_TEST_GAP after the one before
    // it ends. Other runs spread their targets' first slots across one
    // interval.
    let turnstile =
        (self_test || args.one_at_a_time).then(|| std::sync::Arc::new(tokio::sync::Mutex::new(())));
    let mut runs = JoinSet::new();
    for (id, (t, addr, size, probe)) in built.into_iter().enumerate() {
        let launch = Launch {
            id,
            cfg: cfg.clone(),
            phase: if self_test {
                SELF_TEST_GAP
            } else if args.one_at_a_time {
                Duration::ZERO
            } else {
                phase(id as u64, n, cfg.interval)
            },
            events: events.clone(),
            stop: stop.clone(),
            turnstile: turnstile.clone(),
            abandon: Some(abandon.clone()),
            timer: None,
        };
        let reader = probe.launch(&mut runs, launch);
        collector.add_target(t.info_at(id, addr, size), reader)?;
    }
    drop(events);

    let (summaries, written) = collect(rx, &mut collector, interim).await;
    while runs.join_next().await.is_some() {}
    responder_stop.cancel();
    if let Some(mut r) = responders {
        while r.tasks.join_next().await.is_some() {}
    }
    let drained = drain.as_ref().map_or(Ok(()), prober_sinks::PipeDrain::wait);
    let _ = std::io::stdout().flush();
    written.context("writing results")?;
    drained.context("writing results")?;
    if let Some(e) = collector.sink_mut().take_error() {
        return Err(anyhow!(e).context("writing results"));
    }
    if crate::signal::ABANDONED.load(std::sync::atomic::Ordering::SeqCst) {
        return Ok(ExitCode::from(130));
    }
    Ok(exit_code(&summaries, args.fail_on_loss))
}

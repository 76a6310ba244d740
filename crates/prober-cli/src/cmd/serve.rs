//! `prober serve`: the echo responder, and with `--config` the daemon.

use std::io::Write as _;
use std::net::{Ipv4Addr, SocketAddr};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context as _;
use prober_daemon::{Control, DaemonOptions, ResponderOptions};
use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::cli::ServeArgs;
use crate::protocols::PROTOCOLS;
use crate::signal::cancel_on_signals;

fn responder_options(args: &ServeArgs) -> anyhow::Result<ResponderOptions> {
    Ok(ResponderOptions {
        listen: args.listen.clone(),
        tls_cert: args.tls_cert.clone(),
        tls_key: args.tls_key.clone(),
        tls_client_ca: args.tls_client_ca.clone(),
        log_clients: true,
        busy_poll: args.busy_poll,
        receive: args.receive.serve_receive()?,
        own: args.own.clone(),
        limits: prober_daemon::responder::LimitSettings {
            rate_limit: args.rate_limit,
            max_conns: args.max_conns,
            max_conns_per_source: args.max_conns_per_source,
            request_timeout: args.request_timeout,
            idle_timeout: args.idle_timeout,
            udp_follow_ups: args.udp_follow_ups,
        },
    })
}

/// Says what the responders' limits refused, at exit, if anything.
fn log_guard_stats(stats: &prober_net::guard::GuardStats) {
    let refused: Vec<String> = stats
        .by_reason()
        .into_iter()
        .filter(|(_, n)| *n > 0)
        .map(|(r, n)| format!("{r} {n}"))
        .collect();
    if !refused.is_empty() {
        tracing::warn!("limits refused: {}", refused.join(", "));
    }
}

/// Prints `listening WHAT ADDR` on stdout, so scripts can bind port 0 and
/// read the port back.
fn print_listening(what: &str, addr: SocketAddr) {
    let mut out = std::io::stdout();
    let _ = writeln!(out, "listening {what} {addr}");
    let _ = out.flush();
}

/// Maps SIGHUP to a reload and SIGTERM or SIGINT to a stop.
fn daemon_signals() -> anyhow::Result<mpsc::Receiver<Control>> {
    let (tx, rx) = mpsc::channel(4);
    let mut hup = signal(SignalKind::hangup()).context("listening for SIGHUP")?;
    let mut term = signal(SignalKind::terminate()).context("listening for SIGTERM")?;
    // Here, not in the task: caught from the moment this returns.
    let mut int = signal(SignalKind::interrupt()).context("listening for SIGINT")?;
    tokio::spawn(async move {
        loop {
            let ctl = tokio::select! {
                _ = hup.recv() => Control::Reload,
                _ = term.recv() => Control::Stop,
                _ = int.recv() => Control::Stop,
            };
            if tx.send(ctl).await.is_err() || ctl == Control::Stop {
                break;
            }
        }
    });
    Ok(rx)
}

/// Says what the STAMP reflector did, at exit.
fn log_stamp_stats(stats: &prober_stamp::ReflectorStats) {
    use std::sync::atomic::Ordering::Relaxed;
    let dropped: Vec<String> = stats
        .dropped()
        .into_iter()
        .filter(|(_, n)| *n > 0)
        .map(|(r, n)| format!("{r} {n}"))
        .collect();
    tracing::info!(
        "stamp: received {}, reflected {}, dropped: {}",
        stats.received.load(Relaxed),
        stats.reflected.load(Relaxed),
        if dropped.is_empty() {
            "none".to_owned()
        } else {
            dropped.join(", ")
        }
    );
}

/// Runs the daemon: the jobs of `config` (none without it), `/probe` with
/// `--blackbox-config`, and the responders asked for.
async fn run_daemon(
    config: Option<std::path::PathBuf>,
    args: ServeArgs,
    opts: ResponderOptions,
    cpu_latency: Option<Duration>,
) -> anyhow::Result<ExitCode> {
    let control = daemon_signals()?;
    let daemon = DaemonOptions {
        config,
        blackbox: args.blackbox_config.clone(),
        web_config: args.web_config.clone(),
        metrics: args.metrics,
        responders: opts,
        version: env!("CARGO_PKG_VERSION").to_owned(),
        host: prober_sys::host(),
        cpu_latency,
    };
    let mut listening = print_listening;
    prober_daemon::run(daemon, &PROTOCOLS, control, &mut listening).await?;
    Ok(ExitCode::SUCCESS)
}

/// Runs `prober serve` until SIGINT or SIGTERM.
pub(crate) async fn serve(
    args: ServeArgs,
    cpu_latency: Option<Duration>,
) -> anyhow::Result<ExitCode> {
    let mut opts = responder_options(&args)?;
    if args.check_config {
        let (config, blackbox) = (args.config.as_deref(), args.blackbox_config.as_deref());
        let Some(what) = config.or(blackbox) else {
            anyhow::bail!(
                "--check-config checks --config FILE or --blackbox-config FILE: give one"
            );
        };
        let checked = prober_daemon::check(config, &PROTOCOLS, &opts, blackbox).await?;
        if args.strict
            && let Some(first) = checked.warnings.first()
        {
            let more = checked.warnings.len() - 1;
            let more = if more > 0 {
                format!(" (and {more} more)")
            } else {
                String::new()
            };
            anyhow::bail!(
                "config {} is invalid with --strict: {first}{more}",
                what.display()
            );
        }
        for w in &checked.warnings {
            eprintln!("prober: warning: {w}");
        }
        println!("{}", checked.verdict);
        return Ok(ExitCode::SUCCESS);
    }
    if let Some(path) = args.config.clone() {
        return run_daemon(Some(path), args, opts, cpu_latency).await;
    }
    if args.blackbox_config.is_some() {
        return run_daemon(None, args, opts, cpu_latency).await;
    }
    if args.metrics.is_some() {
        anyhow::bail!(
            "--metrics serves the jobs of --config FILE, or /probe with --blackbox-config FILE: give one"
        );
    }
    if !opts.any() {
        // No listener asked for: those with a default port, on every
        // address.
        for r in PROTOCOLS.responders() {
            if let Some(port) = r.default_port {
                opts.set(r.name, SocketAddr::from((Ipv4Addr::UNSPECIFIED, port)));
            }
        }
    }
    let stop = CancellationToken::new();
    // Caught before the listening lines go out: whoever reads them may stop
    // the responder at once.
    cancel_on_signals(stop.clone(), None);
    let mut responders = prober_daemon::responder::start(&opts, &PROTOCOLS, &stop).await?;
    for (what, addr) in &responders.bound {
        print_listening(what, *addr);
    }
    while let Some(res) = responders.tasks.join_next().await {
        if let Err(e) = res.context("responder task failed").and_then(|r| Ok(r?)) {
            stop.cancel();
            return Err(e);
        }
    }
    if let Some(stats) = responders.stats::<prober_stamp::ReflectorStats>() {
        log_stamp_stats(&stats);
    }
    if let Some(s) = responders.stats::<prober_tcp::sockperf::SockperfStats>() {
        tracing::info!(
            "sockperf: received {}, answered {}, ignored {}",
            s.received.load(std::sync::atomic::Ordering::Relaxed),
            s.answered.load(std::sync::atomic::Ordering::Relaxed),
            s.ignored.load(std::sync::atomic::Ordering::Relaxed),
        );
    }
    log_guard_stats(&responders.guard);
    tracing::info!("responder stopped");
    Ok(ExitCode::SUCCESS)
}

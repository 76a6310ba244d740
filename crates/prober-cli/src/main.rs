//! `prober`: measure network round trips (ICMP, TCP, UDP, gRPC) and answer
//! them; run the probing daemon.
//!
//! `main` only parses arguments, sets up logging and the runtime, dispatches
//! and maps the outcome to an exit code (see [`cli::RUN_EXIT_CODES`]).
//!
//! May use: every prober crate (it lists the protocols and responders of
//!  every protocol crate in `protocols.rs`).
//! May not: hold measurement, protocol or output logic: it parses arguments,
//!  handles signals and exit codes, and lists the protocols.

#![forbid(unsafe_code)]

mod cli;
mod cmd;
mod protocols;
mod signal;

use std::io::IsTerminal as _;
use std::process::ExitCode;

use clap::{CommandFactory as _, FromArgMatches as _};

use crate::cli::{Cli, Command, PacingArg};

/// Whether a `run` or `sweep` with targets spins (busy-poll, adaptive
/// receive, spin or hybrid pacing), and so runs on one thread.
fn spins(busy_poll: bool, receive: &cli::ReceiveArgs, pacing: PacingArg) -> bool {
    busy_poll
        || receive.run_mode(true) == cli::ReceiveArg::Adaptive
        || matches!(pacing, PacingArg::Spin | PacingArg::Hybrid)
}

/// A command line clap refused, said in one line as prober's own errors
/// are (clap's take five: the error, a tip, the usage, a pointer to
/// --help); help and version go out as clap writes them.
fn usage_error(e: &clap::Error) -> ExitCode {
    use clap::error::ErrorKind;
    if matches!(
        e.kind(),
        ErrorKind::DisplayHelp
            | ErrorKind::DisplayVersion
            | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
    ) {
        e.exit();
    }
    eprintln!("prober: {}", one_line(&e.render().to_string()));
    ExitCode::from(2)
}

/// clap's rendered error as one line: the error, then its tips.
fn one_line(rendered: &str) -> String {
    let lines: Vec<&str> = rendered
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    let mut first = lines
        .first()
        .map_or("bad arguments", |l| l.trim_start_matches("error: "))
        .to_owned();
    // "the following required arguments were not provided:" lists them on
    // the lines after it.
    if first.ends_with(':') {
        let listed: Vec<&str> = lines
            .iter()
            .skip(1)
            .take_while(|l| !l.starts_with("Usage:") && !l.starts_with("tip: "))
            .copied()
            .collect();
        first = format!("{first} {}", listed.join(", "));
    }
    let tips: Vec<&str> = lines
        .iter()
        .filter_map(|l| l.strip_prefix("tip: "))
        .collect();
    if tips.is_empty() {
        format!("{first} (see --help)")
    } else {
        format!("{first} ({})", tips.join("; "))
    }
}

fn main() -> ExitCode {
    // Before any thread (the log writer's, the runtime's): see its docs.
    prober_sys::one_malloc_arena();
    let command = Cli::command()
        .mut_subcommand("run", |c| {
            cli::with_protocol_flags(c, &protocols::PROTOCOLS)
                .after_help(cli::run_help(&protocols::PROTOCOLS))
        })
        .mut_subcommand("sweep", |c| {
            cli::with_protocol_flags(c, &protocols::PROTOCOLS)
        })
        .mut_subcommand("serve", |c| {
            cli::with_responder_flags(c, &protocols::PROTOCOLS)
        });
    let matches = command.try_get_matches();
    let matches = match matches {
        Ok(m) => m,
        Err(e) => return usage_error(&e),
    };
    let mut cli = match Cli::from_arg_matches(&matches) {
        Ok(cli) => cli,
        Err(e) => return usage_error(&e),
    };
    if let Command::Serve(args) = &mut cli.command
        && let Some(serve) = matches.subcommand_matches("serve")
    {
        args.listen = cli::given_listeners(serve, &protocols::PROTOCOLS);
        args.own = match cli::given_responder_options(serve, &protocols::PROTOCOLS) {
            Ok(own) => own,
            Err(e) => return usage_error(&e),
        };
    }
    let own = match &cli.command {
        Command::Run(_) => matches.subcommand_matches("run"),
        Command::Sweep(_) => matches.subcommand_matches("sweep"),
        _ => None,
    }
    .map(|m| cli::given_protocol_options(m, &protocols::PROTOCOLS))
    .transpose();
    match (own, &mut cli.command) {
        (Err(e), _) => return usage_error(&e),
        (Ok(Some(own)), Command::Run(args)) => args.own = own,
        (Ok(Some(own)), Command::Sweep(args)) => args.own = own,
        _ => {}
    }
    let default_level = match &cli.command {
        // Lifecycle messages (started, config reloaded, stopping) stay with
        // --quiet; client connections are logged at debug level only.
        // h2 warns once per peer connection it closes for a protocol
        // violation (a rapid-reset client makes hundreds a second): the
        // peer's fault, not news for the operator; RUST_LOG=h2=warn shows them.
        Command::Serve(args) if args.quiet => "warn,prober_daemon=info,h2=error",
        Command::Serve(_) => "info,h2=error",
        Command::Run(_) | Command::Report(_) | Command::Sweep(_) | Command::Localize(_) => {
            "warn,h2=error"
        }
    };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_level));
    // Log lines go to stderr from a thread of their own, dropped (and
    // counted) when 10,000 wait: a stderr nobody reads (a full pipe, a
    // stalled journald) must never stop probing or answering. Measured: a
    // responder logging to a full pipe stopped answering gRPC altogether
    // (tests/cli/limits.rs, rapid reset).
    let (log_writer, log_guard) = tracing_appender::non_blocking::NonBlockingBuilder::default()
        .lossy(true)
        .buffered_lines_limit(10_000)
        .thread_name("prober-log")
        .finish(std::io::stderr());
    let log_dropped = log_writer.error_counter();
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(log_writer)
        // Colour only for a person at a terminal, not in files or pipes.
        .with_ansi(std::io::stderr().is_terminal())
        .with_target(false)
        .init();
    // The daemon does many small I/O events; one thread saves the
    // cross-thread wake-ups. So does the responder: under `ghz -c 50` its
    // gRPC side spent less CPU a request on one thread than on two (h2's
    // stream lock contended between workers, and parking), with as many
    // requests a second or more, and no worse latency one call at a time.
    // Spinning pacing and busy-poll leave no idle core on a small machine:
    // a second runtime worker only contends with the spinners, and both
    // send lag and busy-poll RTTs were worse on two. (BENCHMARKS.md has the
    // figures of each.) Adaptive receive
    // too: a reader task on another worker would take the reply its spin is
    // waiting for, after the very wake-up the spin avoids. The self-test keeps
    // its in-process responder on other workers.
    let single = match &cli.command {
        // Not with the responder's adaptive receive: it spins inside a
        // connection's task for the next request, and on one thread every
        // other responder would wait out each spin.
        Command::Serve(args) => {
            args.config.is_some() || args.receive.serve_mode() != cli::ReceiveArg::Adaptive
        }
        Command::Run(args) => {
            (!args.targets.is_empty() || args.file.is_some())
                && spins(args.busy_poll, &args.receive, args.pacing)
        }
        Command::Sweep(args) => spins(args.busy_poll, &args.receive, args.pacing),
        Command::Report(_) | Command::Localize(_) => true,
    };
    let threads = cli.threads.unwrap_or_else(|| usize::from(single));
    let mut builder = match threads {
        1 => tokio::runtime::Builder::new_current_thread(),
        _ => tokio::runtime::Builder::new_multi_thread(),
    };
    if threads > 1 {
        builder.worker_threads(threads);
    }
    let runtime = match builder.enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("prober: cannot start the runtime: {e}");
            return ExitCode::from(2);
        }
    };
    // Held until the results are out; dropping it withdraws the request.
    // Every command takes both, report too (its runtime is sized by
    // --threads; the request is held while it draws, which does no harm),
    // so no command's help lists an option it then refuses.
    let cpu_latency = match cli.cpu_latency {
        None => None,
        Some(d) => match prober_sys::pm_qos::CpuLatency::request(d) {
            Ok(held) => Some(held),
            Err(e) => {
                eprintln!("prober: --cpu-latency: {e}");
                return ExitCode::from(2);
            }
        },
    };
    let held = cpu_latency
        .as_ref()
        .map(prober_sys::pm_qos::CpuLatency::latency);
    if let (Some(d), Command::Serve(_)) = (held, &cli.command) {
        tracing::info!("holding a CPU latency request of {d:?} (/dev/cpu_dma_latency)");
    }
    let result = runtime.block_on(async {
        match cli.command {
            Command::Run(args) => cmd::run::run(args, held).await,
            Command::Serve(args) => cmd::serve::serve(args, held).await,
            Command::Report(args) => cmd::report::report(&args),
            Command::Sweep(args) => cmd::sweep::sweep(args, held).await,
            Command::Localize(args) => cmd::localize::localize(&args).await,
        }
    });
    // Every log line is out before the last words below. Blocking tasks
    // still running are not waited for: the results are written by now,
    // inside `block_on`, and a name lookup given up on (Ctrl-C while it
    // resolves) can take the resolver's whole timeout.
    runtime.shutdown_background();
    drop(cpu_latency);
    drop(log_guard);
    let dropped = log_dropped.dropped_lines();
    if dropped > 0 {
        eprintln!("prober: {dropped} log lines dropped: stderr was not read fast enough");
    }
    match result {
        Ok(code) => code,
        Err(err) => {
            eprintln!("prober: {err:#}");
            ExitCode::from(2)
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_clap_error_is_one_line_with_its_tip() {
        let rendered = "error: unexpected argument '--strict' found\n\n  tip: a similar argument exists: '--metrics'\n\nUsage: prober serve --config <FILE>\n\nFor more information, try '--help'.\n";
        assert_eq!(
            super::one_line(rendered),
            "unexpected argument '--strict' found (a similar argument exists: '--metrics')"
        );
        assert_eq!(
            super::one_line(
                "error: invalid value 'x' for '--count <COUNT>'\n\nFor more information, try '--help'.\n"
            ),
            "invalid value 'x' for '--count <COUNT>' (see --help)"
        );
        assert_eq!(
            super::one_line(
                "error: the following required arguments were not provided:\n  --stamp <ADDR>\n\nUsage: prober serve --stamp-rate <N> --stamp <ADDR>\n\nFor more information, try '--help'.\n"
            ),
            "the following required arguments were not provided: --stamp <ADDR> (see --help)"
        );
    }
}

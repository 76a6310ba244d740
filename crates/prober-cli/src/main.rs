//! `prober`: measure network round trips over TCP and UDP, and answer them.
//!
//! `main` only parses arguments, sets up logging and the runtime, dispatches
//! and maps the outcome to an exit code (see [`cli::EXIT_CODES`]).

mod cli;
mod cmd;
mod daemon;
mod probes;
mod signal;
mod target;

use std::process::ExitCode;

use clap::Parser as _;

use crate::cli::{Cli, Command, PacingArg};

fn main() -> ExitCode {
    let cli = Cli::parse();
    let default_level = match &cli.command {
        Command::Serve(args) if !args.quiet => "info",
        _ => "warn",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_level));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(false)
        .init();
    // The daemon does many small I/O events; one thread saves the
    // cross-thread wake-ups (0.27 instead of 0.37 cores for 10,000 targets).
    // Spinning pacing and busy-poll leave no idle core on a small machine:
    // a second runtime worker only contends with the spinners (on 2 vCPUs,
    // spin send-lag p99 0.1-0.2 µs on one thread against 0.3-311 µs on two;
    // UDP --busy-poll p50 12.5-14.3 µs against 20-31 µs). The self-test keeps
    // its in-process responder on other workers.
    let single = match &cli.command {
        Command::Serve(args) => args.config.is_some(),
        Command::Run(args) => {
            !args.targets.is_empty()
                && (args.busy_poll || matches!(args.pacing, PacingArg::Spin | PacingArg::Hybrid))
        }
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
    let result = runtime.block_on(async {
        match cli.command {
            Command::Run(args) => cmd::run::run(args).await,
            Command::Serve(args) => cmd::serve::serve(args).await,
        }
    });
    match result {
        Ok(code) => code,
        Err(err) => {
            eprintln!("prober: {err:#}");
            ExitCode::from(2)
        }
    }
}

//! Command-line arguments.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};
use prober_core::Pacing;

/// Exit codes of `prober run`, as ping uses them.
pub(crate) const RUN_EXIT_CODES: &str = "\
Exit status:
  0  every target answered at least one probe, as ping (and, with
     --fail-on-loss PCT, lost no more than PCT percent of its slots)
  1  a target answered no probe at all, or lost more than --fail-on-loss
  2  an error: bad arguments, unresolvable host, no permission, cannot bind
  130 stopped by SIGINT or SIGTERM while a target's name was still
      being resolved, or by a second one that cut the wait for the
      probes in flight (once probing began, one stop ends with 0 or 1)";

/// Exit codes of `prober serve`.
pub(crate) const SERVE_EXIT_CODES: &str = "\
Exit status:
  0  stopped by SIGINT or SIGTERM after draining
  2  an error: bad arguments or config, a port that cannot be bound, a sink
     that cannot be opened (with --check-config: the config is invalid)";

/// Measure network round-trip latency with measurement-grade accuracy
/// (ICMP, UDP, TCP, gRPC, HTTP, DNS, STAMP: open-loop schedules,
/// HdrHistogram statistics, every probe accounted for, each round trip
/// split into its parts), and run the responders and the probing daemon
/// with Prometheus metrics.
#[derive(Debug, Parser)]
#[command(name = "prober", version)]
pub(crate) struct Cli {
    /// Runtime worker threads: 0 = one per CPU, 1 = a single-threaded
    /// runtime (no cross-thread wake-ups; busy-poll threads come on top).
    /// [default: 1 for `serve` (the responder, unless it receives with
    /// --receive adaptive, and the daemon) and for `run` with targets and
    /// `sweep` (adaptive receive, the default, or --pacing spin, --pacing
    /// hybrid or --busy-poll), else 0]
    #[arg(long, value_name = "N", value_parser = threads, global = true, help_heading = "Tuning")]
    pub(crate) threads: Option<usize>,

    /// Hold a PM QoS CPU latency request (/dev/cpu_dma_latency) while
    /// prober runs, as cyclictest does: idle CPUs stay out of sleep states
    /// slower to leave than this, and 0us keeps them polling. At long
    /// intervals round trips then stop paying for a sleeping CPU's wake-up
    /// (BENCHMARKS.md has how much); the CPUs' idle power pays instead.
    /// Recorded in the settings. Needs root.
    #[arg(long, value_name = "DURATION", value_parser = duration, global = true, help_heading = "Tuning")]
    pub(crate) cpu_latency: Option<Duration>,

    #[command(subcommand)]
    pub(crate) command: Command,
}

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Probe targets and print statistics. With no target, start the
    /// responders on loopback and measure each protocol that has one
    /// (all but dns:// and stamp://), one target at a time.
    Run(RunArgs),
    /// Run the responders (TCP, UDP, gRPC, HTTP, STAMP, sockperf's); with
    /// --config, the probing
    /// daemon: jobs from a file, file sinks, Prometheus /metrics, reload on
    /// SIGHUP.
    #[command(after_help = SERVE_EXIT_CODES)]
    Serve(ServeArgs),
    /// Draw a self-contained HTML page (inline SVG charts, no fetches) from
    /// prober's JSON lines or HdrHistogram logs: statistics, box, violin,
    /// percentile and time-series plots, where the time goes, sweep curves.
    #[command(after_help = REPORT_EXIT_CODES)]
    Report(ReportArgs),
    /// Run targets at a series of probe intervals (the latency-vs-interval
    /// curve), in shuffled order each round, and print a table; with -o
    /// json, JSON lines for `prober report`.
    #[command(after_help = SWEEP_EXIT_CODES)]
    Sweep(SweepArgs),
    /// Name the bad link: read the mesh's probe flows, their loss and the
    /// branch each takes (daemons with trace_every and trace_hops) from
    /// Prometheus, and rank the links they cross by 007's vote, each with
    /// its evidence and confidence.
    #[command(after_help = LOCALIZE_EXIT_CODES)]
    Localize(LocalizeArgs),
}

/// Exit codes of `prober localize`.
pub(crate) const LOCALIZE_EXIT_CODES: &str = "\
Exit status:
  0  no link is named: no lossy flow, or none above the thresholds
  1  a link is named (above --confidence, crossed by at least
     --lossy-flows lossy flows that no link ranked before it explains)
  2  an error: bad arguments, Prometheus unreachable or refusing a query,
     no flow with a followed path (no daemon with trace_every and
     trace_hops), or --listen's address taken
With --listen it serves until stopped, and exits 0.";

#[derive(Debug, Args)]
pub(crate) struct LocalizeArgs {
    /// The Prometheus that scrapes the daemons (http://HOST:PORT).
    #[arg(long, value_name = "URL")]
    pub(crate) prometheus: String,

    /// The window of loss to explain, as Prometheus reads a duration.
    #[arg(long, default_value = "5m", value_name = "DURATION")]
    pub(crate) window: String,

    /// The window's end, for a look back at an incident: RFC 3339
    /// (2026-11-29T02:02:05Z) or Unix seconds, as Prometheus reads a
    /// query's time; now unless given.
    #[arg(long, value_name = "TIME")]
    pub(crate) at: Option<String>,

    /// The jobs whose flows count (a regular expression of the `probe`
    /// label).
    #[arg(long, default_value = ".+", value_name = "REGEX")]
    pub(crate) probe: String,

    /// How sure, in percent, that the flows crossing a link lose more than
    /// the rest before it is named.
    #[arg(long, default_value_t = 99.9, value_name = "PCT", value_parser = confidence)]
    pub(crate) confidence: f64,

    /// The fewest lossy flows, not explained by a link ranked before it,
    /// that must cross a link before it is named.
    #[arg(long, default_value_t = 2, value_name = "N")]
    pub(crate) lossy_flows: usize,

    /// Links to show.
    #[arg(long, default_value_t = 10, value_name = "N")]
    pub(crate) top: usize,

    /// A table, or one JSON object.
    #[arg(short, long, value_enum, default_value_t = Output::Human)]
    pub(crate) output: Output,

    /// Serve the ranking as a page (`/`) and JSON (`/localize.json`) on
    /// this address instead, each request read afresh from Prometheus
    /// (`?window=` another window), until SIGINT or SIGTERM.
    #[arg(long, value_name = "ADDR")]
    pub(crate) listen: Option<String>,
}

/// Exit codes of `prober report`.
pub(crate) const REPORT_EXIT_CODES: &str = "\
Exit status:
  0  the report was written from every file
  1  the report was written, but some files could not be read (a message
     per file says why; the rest are drawn)
  2  an error: bad arguments, no file could be read, the output cannot be
     written";

/// Exit codes of `prober sweep`.
pub(crate) const SWEEP_EXIT_CODES: &str = "\
Exit status:
  0  every point ran and every target answered at every interval
  1  a target answered no probe at some interval
  2  an error: bad arguments or intervals, a point longer than
     --max-point-time, unresolvable host, no permission
  130 stopped by Ctrl-C (the table of the points done so far is printed)";

/// The text after `prober run --help`: targets (from the protocol list),
/// durations, exit status.
pub(crate) fn run_help(registry: &prober_core::Registry) -> String {
    format!(
        "Targets:\n{}\nDurations take a unit: 250us, 10ms, 1.5s, 2m, 1m30s.\n\n{RUN_EXIT_CODES}",
        registry.help()
    )
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum Output {
    /// Per-probe lines, summaries and a side-by-side table.
    Human,
    /// JSON lines: a meta line, one line per probe, one summary per target.
    Json,
    /// CSV: a header and one row of summary fields per target.
    Csv,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum PacingArg {
    /// Sleep on the runtime's timer.
    Timer,
    /// Busy-wait to each deadline (uses a core).
    Spin,
    /// Sleep until shortly before each deadline (a margin that adapts to how
    /// late sleeps wake, about 1.5 % of a core at most), then spin.
    Hybrid,
}

impl From<PacingArg> for Pacing {
    fn from(p: PacingArg) -> Self {
        match p {
            PacingArg::Timer => Self::Timer,
            PacingArg::Spin => Self::Spin,
            PacingArg::Hybrid => Self::Hybrid,
        }
    }
}

fn duration(s: &str) -> Result<Duration, String> {
    prober_core::duration::parse_duration(s)
}

/// A duration as `run` takes it: with a unit, or a bare number of seconds
/// as ping's `-i 0.2` and `-W 1` are.
fn ping_duration(s: &str) -> Result<Duration, String> {
    match s.trim().parse::<f64>() {
        Ok(secs) if secs.is_finite() && secs >= 0.0 => {
            Duration::try_from_secs_f64(secs).map_err(|_| format!("duration {s:?} is too long"))
        }
        _ => prober_core::duration::parse_duration(s),
    }
}

/// Each protocol's own flags (`--method`, `--expect-rcode`, ...), as its
/// crate defines them, added to `prober run` or `prober sweep` once per
/// options type the protocol list names.
pub(crate) fn with_protocol_flags(
    command: clap::Command,
    registry: &prober_core::Registry,
) -> clap::Command {
    with_options(command, prober_net::options::ProtocolOptions::all(registry))
}

/// `command` with the flags of each of `options`.
fn with_options(
    mut command: clap::Command,
    options: Vec<&'static prober_net::options::ProtocolOptions>,
) -> clap::Command {
    // An options type's doc comment would become the command's about.
    let (about, long_about) = (
        command.get_about().cloned(),
        command.get_long_about().cloned(),
    );
    for own in options {
        command = (own.args)(command);
    }
    command = match about {
        Some(a) => command.about(a),
        None => command.about(None::<&str>),
    };
    match long_about {
        Some(a) => command.long_about(a),
        None => command.long_about(None::<&str>),
    }
}

/// Reads back the protocols' own options [`with_protocol_flags`] added.
///
/// # Errors
/// A flag clap could not read into its protocol's type.
pub(crate) fn given_protocol_options(
    matches: &clap::ArgMatches,
    registry: &prober_core::Registry,
) -> Result<std::sync::Arc<prober_net::options::OptionSet>, clap::Error> {
    prober_net::options::OptionSet::from_matches(registry, matches).map(std::sync::Arc::new)
}

/// `prober serve`'s listener flags, one per responder `registry` lists
/// (`--tcp ADDR`), shown after `--metrics` in the registry's order.
pub(crate) fn with_responder_flags(
    mut serve: clap::Command,
    registry: &prober_core::Registry,
) -> clap::Command {
    use prober_core::responder::Tls;
    let shown: Vec<_> = registry.responders().filter(|r| !r.hidden).collect();
    let ids: Vec<String> = serve
        .get_arguments()
        .map(|a| a.get_id().to_string())
        .collect();
    let at = ids
        .iter()
        .position(|i| i == "metrics")
        .map_or(ids.len(), |p| p + 1);
    for (i, id) in ids.iter().enumerate() {
        let order = if i < at { i } else { i + shown.len() };
        serve = serve.mut_arg(id.as_str(), |a| a.display_order(order));
    }
    let defaults: Vec<&str> = shown
        .iter()
        .filter(|r| r.default_port.is_some())
        .map(|r| r.name)
        .collect();
    let all: Vec<String> = shown.iter().map(|r| format!("--{}", r.name)).collect();
    for (k, r) in shown.iter().enumerate() {
        let mut help = r.help.trim_end_matches('.').to_owned();
        if let Some(port) = r.default_port {
            help.push_str(&if defaults.first() == Some(&r.name) {
                format!(
                    ". [default: 0.0.0.0:{port}, when no listener ({}) is given and there is no --config]",
                    all.join(", ")
                )
            } else {
                format!(
                    ". [default: 0.0.0.0:{port}, when no listener is given and there is no --config, as for --{}]",
                    defaults.first().copied().unwrap_or(r.name)
                )
            });
        }
        let mut arg = clap::Arg::new(r.name)
            .long(r.name)
            .value_name("ADDR")
            .value_parser(listen_addr)
            .help(help)
            .display_order(at + k);
        if r.tls == Tls::Required {
            arg = arg.requires("tls_cert");
        }
        serve = serve.arg(arg.help_heading("Listeners"));
    }
    // The responders' own settings (`--stamp-key`, the hidden test
    // impairments), each type's flags from its crate.
    with_options(
        serve,
        prober_net::options::ProtocolOptions::served(registry),
    )
}

/// Reads back the responders' own settings [`with_responder_flags`] added.
///
/// # Errors
/// A flag clap could not read into its responder's type.
pub(crate) fn given_responder_options(
    matches: &clap::ArgMatches,
    registry: &prober_core::Registry,
) -> Result<prober_net::options::OptionSet, clap::Error> {
    prober_net::options::OptionSet::served_from_matches(registry, matches)
}

/// The listeners [`with_responder_flags`] added that were given.
pub(crate) fn given_listeners(
    matches: &clap::ArgMatches,
    registry: &prober_core::Registry,
) -> Vec<(&'static str, SocketAddr)> {
    registry
        .responders()
        .filter(|r| !r.hidden)
        .filter_map(|r| {
            matches
                .try_get_one::<SocketAddr>(r.name)
                .ok()
                .flatten()
                .map(|a| (r.name, *a))
        })
        .collect()
}

/// A listening address, with a hint for what people write instead: an
/// IPv6 address without brackets, no port, a host name.
pub(crate) fn listen_addr(s: &str) -> Result<SocketAddr, String> {
    use std::net::{IpAddr, Ipv6Addr};
    if let Ok(a) = s.parse::<SocketAddr>() {
        return Ok(a);
    }
    let split = s.rsplit_once(':').filter(|(_, p)| p.parse::<u16>().is_ok());
    let bare = s.trim_start_matches('[').trim_end_matches(']');
    match (bare.parse::<IpAddr>(), split) {
        // `::1:8707` is an IPv6 address itself; the port was meant.
        (Ok(IpAddr::V6(_)), Some((host, port))) if host.parse::<Ipv6Addr>().is_ok() => Err(
            format!("put an IPv6 address in brackets before its port: [{host}]:{port}"),
        ),
        (Ok(IpAddr::V6(a)), _) => Err(format!("{s:?} has no port: give one, e.g. [{a}]:8707")),
        (Ok(IpAddr::V4(a)), _) => Err(format!("{s:?} has no port: give one, e.g. {a}:8707")),
        (Err(_), Some((host, port))) if !host.is_empty() => Err(format!(
            "{host:?} is a name: listen on an address, e.g. 127.0.0.1:{port} or [::]:{port} (names are not resolved here)"
        )),
        _ => Err(format!(
            "{s:?} is not an address and port (e.g. 0.0.0.0:8707 or [::1]:8707)"
        )),
    }
}

fn positive_duration(s: &str) -> Result<Duration, String> {
    match prober_core::duration::parse_duration(s)? {
        d if d.is_zero() => Err("must be greater than zero".to_owned()),
        d => Ok(d),
    }
}

/// `--spin-budget` ([`prober_core::spin::check_budget`]).
fn spin_budget(s: &str) -> Result<Duration, String> {
    prober_core::spin::check_budget(duration(s)?)
}

/// `--spin-share`, as per mille ([`prober_core::spin::check_share`]).
fn spin_share(s: &str) -> Result<u32, String> {
    let share: f64 = s
        .parse()
        .map_err(|_| format!("{s} is not a number (a share of one core: 0.1, 1)"))?;
    prober_core::spin::check_share(share)
}

/// `--since`/`--until` of `prober report`.
fn time(s: &str) -> Result<u64, String> {
    prober_report::input::parse_time(s)
}

/// The intervals of a sweep, ascending.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Intervals(pub(crate) Vec<Duration>);

/// Parses `--intervals`: a comma-separated list, or `A..B` for every decade
/// from A to B (1us..1s is 1us, 10us, …, 1s).
pub(crate) fn intervals(s: &str) -> Result<Intervals, String> {
    let d = prober_core::duration::parse_duration;
    let list = if let Some((a, b)) = s.split_once("..") {
        let (a, b) = (d(a)?, d(b)?);
        if a.is_zero() {
            return Err("a range cannot start at 0 (1us..1s goes by decades)".to_owned());
        }
        if b < a {
            return Err(format!("the range {s:?} ends before it starts"));
        }
        let mut v = Vec::new();
        let mut x = a;
        while x <= b {
            v.push(x);
            x = x
                .checked_mul(10)
                .ok_or_else(|| "range too long".to_owned())?;
        }
        if v.last() != Some(&b) {
            return Err(format!(
                "{b:?} is not a whole number of decades from {a:?}; give a list instead (e.g. 1us,10us,50us)"
            ));
        }
        v
    } else {
        s.split(',')
            .map(|p| d(p.trim()))
            .collect::<Result<Vec<_>, _>>()?
    };
    if list.iter().any(Duration::is_zero) {
        return Err(
            "an interval of 0 is a closed loop, not a point on the curve; leave it out".to_owned(),
        );
    }
    for w in list.windows(2) {
        if w[0] == w[1] {
            return Err(format!("{:?} is given twice", w[0]));
        }
        if w[0] > w[1] {
            return Err(format!(
                "intervals must be ascending: {:?} comes after {:?}",
                w[1], w[0]
            ));
        }
    }
    Ok(Intervals(list))
}

/// Most runtime worker threads `--threads` takes: each has a stack and a
/// signal stack, and 100,000 of them exhaust memory maps before the first
/// probe.
pub(crate) const MAX_THREADS: usize = 1024;

fn threads(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(n) if n <= MAX_THREADS => Ok(n),
        Ok(_) => Err(format!(
            "{s} threads is more than {MAX_THREADS}; 0 gives one per CPU"
        )),
        Err(_) => Err(format!("{s:?} is not a whole number of threads")),
    }
}

/// Most warm-up probes per target.
pub(crate) const MAX_WARMUP: u64 = 1_000_000;

fn warmup(s: &str) -> Result<u64, String> {
    match s.parse::<u64>() {
        Ok(n) if n <= MAX_WARMUP => Ok(n),
        Ok(_) => Err(format!(
            "{s} warm-up probes is more than {MAX_WARMUP} per target"
        )),
        Err(_) => Err(format!(
            "warm-up {s:?} is not a whole number from 0 to {MAX_WARMUP}"
        )),
    }
}

fn count(s: &str) -> Result<u64, String> {
    match s.parse::<u64>() {
        Ok(0) => Err("count must be at least 1".to_owned()),
        Ok(n) => Ok(n),
        Err(_) => Err(format!("count {s:?} is not a whole number")),
    }
}

/// `--trace-confidence`: 50 to 99.9999 %.
fn confidence(s: &str) -> Result<f64, String> {
    match s.trim_end_matches('%').parse::<f64>() {
        Ok(p) if (50.0..=99.9999).contains(&p) => Ok(p),
        _ => Err(format!("{s:?} is not a percentage from 50 to 99.9999")),
    }
}

fn percent(s: &str) -> Result<f64, String> {
    match s.trim_end_matches('%').parse::<f64>() {
        Ok(p) if (0.0..=100.0).contains(&p) => Ok(p),
        _ => Err(format!("{s:?} is not a percentage from 0 to 100")),
    }
}

#[derive(Debug, Args)]
pub(crate) struct RunArgs {
    /// Targets to probe at the same time (see below). None: self-test on loopback.
    #[arg(value_name = "TARGET")]
    pub(crate) targets: Vec<String>,

    /// Time between probes; 0 sends back to back, one in flight (closed loop).
    /// A bare number is seconds, as ping's -i. [default: 1s, or 10ms with no target]
    #[arg(short, long, value_parser = ping_duration, allow_hyphen_values = true, value_name = "DURATION", help_heading = "Schedule")]
    pub(crate) interval: Option<Duration>,

    /// Probes per target. [default: until Ctrl-C, or 100 with no target]
    #[arg(short, long, value_parser = count, help_heading = "Schedule")]
    pub(crate) count: Option<u64>,

    /// Stop after this long (a bare number is seconds).
    #[arg(short, long, value_parser = ping_duration, allow_hyphen_values = true, value_name = "DURATION", help_heading = "Schedule")]
    pub(crate) duration: Option<Duration>,

    /// Probes sent per interval (open loop) or kept in flight (closed loop).
    #[arg(short, long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..), help_heading = "Schedule")]
    pub(crate) burst: u32,

    /// How to wait for each send time.
    #[arg(long, value_enum, default_value_t = PacingArg::Timer, help_heading = "Schedule")]
    pub(crate) pacing: PacingArg,

    /// Request size in bytes: the whole frame for TCP (40..=1048576) and UDP
    /// (40..=65507), the payload for ICMP (20..=65507). [default: 64, 56 for ICMP]
    #[arg(short, long, help_heading = "Requests")]
    pub(crate) size: Option<usize>,

    /// IP TTL (IPv6 hop limit) of ICMP echo requests, as ping's -t
    /// (refused for targets that cannot set it).
    #[arg(short = 't', long, value_parser = clap::value_parser!(u32).range(1..=255), help_heading = "Requests")]
    pub(crate) ttl: Option<u32>,

    #[command(flatten)]
    pub(crate) marks: MarkArgs,

    /// ping's -I: an address is --source, anything else --interface.
    #[arg(short = 'I', value_name = "ADDR|IF", hide = true, conflicts_with_all = ["source", "interface"])]
    pub(crate) ping_source: Option<String>,

    /// ping's -n: accepted and changes nothing (prober shows addresses,
    /// never looks up their names).
    #[arg(short = 'n', hide = true)]
    pub(crate) numeric: bool,

    /// Spread each udp:// and tcp:// target over N flows (ECMP, as
    /// Pingmesh does): N probes of their own, each on its own socket and so
    /// its own source port, with their own statistics, shown as
    /// `TARGET#flow=I` and labelled `flow`.
    #[arg(long, value_name = "N", default_value_t = 1, help_heading = "Requests")]
    pub(crate) flows: u16,

    /// A probe with no reply after this long is a timeout (a bare number
    /// is seconds, as ping's -W).
    #[arg(short = 'W', long, default_value = "1s", value_parser = ping_duration, allow_hyphen_values = true, value_name = "DURATION", help_heading = "Schedule")]
    pub(crate) timeout: Duration,

    /// Probe the targets one after another, each to its end (-c or -d),
    /// instead of side by side: a back-to-back comparison (`-i 0
    /// tcp://... udp://...`) then measures each protocol alone, not their
    /// contention for the CPUs.
    #[arg(long, help_heading = "Schedule")]
    pub(crate) one_at_a_time: bool,

    /// Probes per target sent before measuring, not recorded.
    #[arg(long, default_value_t = 0, value_parser = warmup, value_name = "N", help_heading = "Schedule")]
    pub(crate) warmup: u64,

    /// Most probes in flight per target; a slot that finds the cap reached is
    /// counted as missed.
    #[arg(long, default_value_t = 4096, value_parser = clap::value_parser!(u64).range(1..=1_000_000), help_heading = "Schedule")]
    pub(crate) max_in_flight: u64,

    /// Trace the path to the one target instead of probing it: every hop of
    /// every ECMP branch (flows from their own source ports, as many as the
    /// Multipath Detection Algorithm needs to be 95 % sure none is missed),
    /// then each branch measured -c times (default 10) at -i (default 1s),
    /// as mtr --report shows it (docs/path.md). UDP: udp://HOST:PORT,
    /// trace://HOST:PORT or HOST (port 33434 unless given).
    #[arg(long, help_heading = "Paths")]
    pub(crate) trace: bool,

    /// --trace's last TTL (IPv6 hop limit).
    #[arg(long, default_value_t = 30, value_parser = clap::value_parser!(u8).range(1..), value_name = "N", help_heading = "Paths")]
    pub(crate) max_ttl: u8,

    /// --trace's most flows (source ports) tried to find branches.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u16).range(1..=1024), value_name = "N", help_heading = "Paths")]
    pub(crate) trace_flows: u16,

    /// How sure --trace must be that no branch is missed at any hop, in %
    /// (the Multipath Detection Algorithm's stopping rule: 95 sends 6 flows
    /// through a hop with one next hop seen, 99 sends 8).
    #[arg(long, default_value_t = 95.0, value_parser = confidence, value_name = "PCT", help_heading = "Paths")]
    pub(crate) trace_confidence: f64,

    /// Result format.
    #[arg(short, long, value_enum, default_value_t = Output::Human, help_heading = "Output")]
    pub(crate) output: Output,

    /// Summary columns for the human table and CSV, comma separated, e.g.
    /// target,mean,p50,p99,lat.p99,lag.p99 (like netperf -o).
    #[arg(short, long, value_name = "LIST", help_heading = "Output")]
    pub(crate) fields: Option<String>,

    /// Only print summaries, not a line per probe.
    #[arg(short, long, help_heading = "Output")]
    pub(crate) quiet: bool,

    /// Do not ask for transmit stamps, the kernel's nor the responder's (no
    /// follow-up frames): the client send, network and responder send parts
    /// of the split stay unknown (for measuring what the stamps cost;
    /// docs/timestamps.md).
    #[arg(long, help_heading = "Receive")]
    pub(crate) no_tx_stamps: bool,

    /// Each protocol's own options (`--method`, `--expect-rcode`, ...):
    /// their flags are added from the protocol list, each protocol's from
    /// its own crate ([`with_protocol_flags`]), and read back in `main`.
    #[arg(skip)]
    pub(crate) own: std::sync::Arc<prober_net::options::OptionSet>,

    /// Start each probe line with the Unix time of the reply, as ping -D.
    #[arg(short = 'D', help_heading = "Output")]
    pub(crate) unix_time: bool,

    /// Read targets from FILE, one per line ('#' starts a comment; '-' is
    /// standard input), like fping -f; added to those on the command line.
    #[arg(long, value_name = "FILE", help_heading = "Names and files")]
    pub(crate) file: Option<PathBuf>,

    /// Also exit 1 when a target lost more than PCT percent of its slots
    /// (timeouts, errors and missed slots), not only when it got no reply.
    #[arg(long, value_name = "PCT", value_parser = percent, help_heading = "Output")]
    pub(crate) fail_on_loss: Option<f64>,

    /// Read TCP, UDP and ICMP replies on threads that spin on the sockets
    /// instead of sleeping in epoll: no wake-up in the RTT, but a core per
    /// socket. Implied by --pacing spin on machines with 4 or more CPUs. gRPC is
    /// not affected.
    #[arg(long, help_heading = "Receive")]
    pub(crate) busy_poll: bool,

    #[command(flatten)]
    pub(crate) receive: ReceiveArgs,

    #[command(flatten)]
    pub(crate) tls: TlsArgs,

    /// Use IPv4 only.
    #[arg(short = '4', conflicts_with = "ipv6", help_heading = "Names and files")]
    pub(crate) ipv4: bool,

    /// Use IPv6 only.
    #[arg(short = '6', help_heading = "Names and files")]
    pub(crate) ipv6: bool,
}

/// Where and how requests leave, for icmp, udp and tcp targets: shared by
/// `run` and `sweep`.
#[derive(Debug, Clone, Default, Args)]
#[command(next_help_heading = "Requests")]
pub(crate) struct MarkArgs {
    /// The TOS byte (IPv6 traffic class) of requests, 0..=255, for icmp,
    /// udp and tcp targets (refused for others).
    #[arg(long, value_parser = clap::value_parser!(u8), conflicts_with = "dscp")]
    pub(crate) tos: Option<u8>,

    /// DSCP of requests, by name (ef, af11..af43, cs0..cs7, va) or number
    /// 0..=63: the TOS byte is the code point shifted past the ECN bits.
    #[arg(long, value_parser = prober_sys::mark::tos_of_dscp, value_name = "DSCP")]
    pub(crate) dscp: Option<u8>,

    /// Send from this local address (like ping -I ADDR), for icmp, udp and
    /// tcp targets; it must be of each target's address family.
    #[arg(long, value_name = "ADDR")]
    pub(crate) source: Option<std::net::IpAddr>,

    /// Send through this network interface (SO_BINDTODEVICE, like ping
    /// -I IF), for icmp, udp and tcp targets.
    #[arg(long, value_name = "IF")]
    pub(crate) interface: Option<String>,

    /// Firewall mark of requests (SO_MARK, decimal or 0x hex) for policy
    /// routing and nftables, for icmp, udp and tcp targets; needs
    /// CAP_NET_ADMIN.
    #[arg(long, value_name = "MARK", value_parser = prober_sys::mark::parse_fwmark)]
    pub(crate) fwmark: Option<u32>,
}

impl MarkArgs {
    /// The marks, as probes take them.
    pub(crate) fn marks(&self) -> prober_core::protocol::Marks {
        prober_core::protocol::Marks {
            tos: self.tos.or(self.dscp),
            source: self.source,
            interface: self.interface.clone(),
            fwmark: self.fwmark,
        }
    }
}

/// `--ca-roots`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, ValueEnum)]
pub(crate) enum CaRoots {
    /// The operating system's trust store.
    #[default]
    System,
    /// The Mozilla roots built into prober (webpki-roots).
    Mozilla,
}

/// The TLS flags of grpcs:// and https:// targets, shared by `run` and
/// `sweep`.
#[derive(Debug, Clone, Default, Args)]
#[command(next_help_heading = "TLS")]
pub(crate) struct TlsArgs {
    /// CA certificate (PEM) that grpcs:// and https:// servers must chain to.
    #[arg(long, value_name = "FILE")]
    pub(crate) ca: Option<PathBuf>,

    /// Roots a server certificate must chain to without --ca: the system's
    /// trust store (a private CA installed there counts; the Mozilla roots
    /// built into prober where the store is empty), or those built-in
    /// Mozilla roots alone.
    #[arg(long, value_enum, value_name = "ROOTS", default_value_t = CaRoots::System)]
    pub(crate) ca_roots: CaRoots,

    /// Client certificate (PEM) for mTLS; needs --key.
    #[arg(long, value_name = "FILE", requires = "key")]
    pub(crate) cert: Option<PathBuf>,

    /// Client private key (PEM) for mTLS; needs --cert.
    #[arg(long, value_name = "FILE", requires = "cert")]
    pub(crate) key: Option<PathBuf>,

    /// Name to verify in the server certificate (and send as SNI) instead of
    /// the target's host.
    #[arg(long, value_name = "NAME")]
    pub(crate) tls_server_name: Option<String>,

    /// UNSAFE: do not verify the grpcs:// or https:// server certificate at
    /// all; anyone on the path can impersonate the server.
    #[arg(long)]
    pub(crate) insecure: bool,
}

impl TlsArgs {
    /// Whether any was given.
    pub(crate) fn given(&self) -> bool {
        self.ca.is_some()
            || self.ca_roots != CaRoots::System
            || self.cert.is_some()
            || self.tls_server_name.is_some()
            || self.insecure
    }

    /// The files and settings, as probes take them.
    pub(crate) fn files(&self) -> prober_core::protocol::TlsFiles {
        prober_core::protocol::TlsFiles {
            ca: self.ca.clone(),
            roots: match self.ca_roots {
                CaRoots::System => prober_core::protocol::Roots::System,
                CaRoots::Mozilla => prober_core::protocol::Roots::Mozilla,
            },
            cert: self.cert.clone(),
            key: self.key.clone(),
            server_name: self.tls_server_name.clone(),
            insecure: self.insecure,
        }
    }
}

/// Output of `prober report`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum ReportFormat {
    /// One self-contained HTML page.
    Html,
    /// Each chart as its own SVG file.
    Svg,
    /// Each chart as its own PNG file (text in the system's sans-serif font).
    Png,
}

/// The stats table alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum TableFormat {
    /// A Markdown table.
    Md,
    /// CSV, values in ns.
    Csv,
}

#[derive(Debug, Args)]
pub(crate) struct ReportArgs {
    /// JSON-lines files (`prober run -o json`, the daemon's JSONL sink,
    /// `prober sweep -o json`) and HdrHistogram logs (.hlog); '-' reads
    /// standard input.
    #[arg(value_name = "FILE", required = true)]
    pub(crate) files: Vec<PathBuf>,

    /// Where to write: the HTML file [default: report.html], the directory
    /// of chart files with --format svg|png [default: report/], or the
    /// table with --table [default: standard output].
    #[arg(short, long, value_name = "PATH")]
    pub(crate) output: Option<PathBuf>,

    /// What to write.
    #[arg(long, value_enum, default_value_t = ReportFormat::Html)]
    pub(crate) format: ReportFormat,

    /// Write only the statistics table, as Markdown or CSV.
    #[arg(long, value_enum, conflicts_with = "format")]
    pub(crate) table: Option<TableFormat>,

    /// Only targets whose name contains TEXT (repeatable).
    #[arg(long, value_name = "TEXT")]
    pub(crate) target: Vec<String>,

    /// Only probes sent at or after TIME (RFC 3339, e.g.
    /// 2026-11-23T13:00:00Z, or Unix seconds).
    #[arg(long, value_name = "TIME", value_parser = time)]
    pub(crate) since: Option<u64>,

    /// Only probes sent before TIME.
    #[arg(long, value_name = "TIME", value_parser = time)]
    pub(crate) until: Option<u64>,

    /// Draw the violins over every value on a log axis (default: the
    /// z-trimmed values on a linear axis).
    #[arg(long)]
    pub(crate) log: bool,

    /// Time buckets of the time-series charts.
    #[arg(long, default_value_t = 120, value_parser = clap::value_parser!(u32).range(10..=2000))]
    pub(crate) buckets: u32,
}

#[derive(Debug, Args)]
pub(crate) struct SweepArgs {
    /// Targets, as for `prober run`; each runs alone at each interval.
    #[arg(value_name = "TARGET", required = true)]
    pub(crate) targets: Vec<String>,

    /// The intervals: a list (1us,10us,1ms) or a range by decades
    /// (1us..1s); ascending, no duplicates, no zero.
    #[arg(long, default_value = "10us..100ms", value_parser = intervals, value_name = "LIST")]
    pub(crate) intervals: Intervals,

    /// Probes per target at each point.
    #[arg(short, long, value_parser = count, conflicts_with = "duration")]
    pub(crate) count: Option<u64>,

    /// Time per target at each point instead of --count.
    #[arg(short, long, value_parser = duration, value_name = "DURATION")]
    pub(crate) duration: Option<Duration>,

    /// Rounds: every point runs once per round, in a new shuffled order.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub(crate) rounds: u32,

    /// Refuse a sweep with a point longer than this (count × interval, or
    /// --duration).
    #[arg(long, default_value = "60s", value_parser = duration, value_name = "DURATION")]
    pub(crate) max_point_time: Duration,

    /// Seed of the shuffle [default: from the clock]; the order is printed
    /// (and written in the JSON "sweep" line) either way.
    #[arg(long)]
    pub(crate) seed: Option<u64>,

    /// How to wait for each send time.
    #[arg(long, value_enum, default_value_t = PacingArg::Timer)]
    pub(crate) pacing: PacingArg,

    /// Request size in bytes, as for `prober run`.
    #[arg(short, long)]
    pub(crate) size: Option<usize>,

    /// A probe with no reply after this long is a timeout.
    #[arg(short = 'W', long, default_value = "1s", value_parser = duration, value_name = "DURATION")]
    pub(crate) timeout: Duration,

    /// Probes per target sent before each point, not recorded.
    #[arg(long, default_value_t = 10)]
    pub(crate) warmup: u64,

    /// Read replies on spinning threads, as for `prober run`.
    #[arg(long)]
    pub(crate) busy_poll: bool,

    /// As `prober run`'s, with its defaults: a point of the curve measures
    /// what `prober run` at that interval does.
    #[command(flatten)]
    pub(crate) receive: ReceiveArgs,

    /// Do not ask the kernel for transmit stamps.
    #[arg(long)]
    pub(crate) no_tx_stamps: bool,

    /// IP TTL (IPv6 hop limit) of ICMP echo requests, as for `prober run`.
    #[arg(short = 't', long, value_parser = clap::value_parser!(u32).range(1..=255))]
    pub(crate) ttl: Option<u32>,

    #[command(flatten)]
    pub(crate) marks: MarkArgs,

    /// Each protocol's own options (`--method`, `--expect-rcode`, ...):
    /// their flags are added from the protocol list, each protocol's from
    /// its own crate ([`with_protocol_flags`]), and read back in `main`.
    #[arg(skip)]
    pub(crate) own: std::sync::Arc<prober_net::options::OptionSet>,

    #[command(flatten)]
    pub(crate) tls: TlsArgs,

    /// Result format: a table, or JSON lines (every record tagged with its
    /// point) for `prober report`.
    #[arg(short, long, value_enum, default_value_t = Output::Human)]
    pub(crate) output: Output,

    /// Use IPv4 only.
    #[arg(short = '4', conflicts_with = "ipv6")]
    pub(crate) ipv4: bool,

    /// Use IPv6 only.
    #[arg(short = '6')]
    pub(crate) ipv6: bool,
}

#[derive(Debug, Args)]
pub(crate) struct ServeArgs {
    /// Also run the probe jobs of this TOML file (daemon mode; see
    /// docs/config.md). SIGHUP reloads it, SIGTERM drains and exits.
    #[arg(long, value_name = "FILE")]
    pub(crate) config: Option<PathBuf>,

    /// Only check the --config file (parse, validate, resolve targets) and
    /// the --blackbox-config file, print a one-line verdict and exit: 0 if
    /// valid, 2 if not.
    #[arg(long)]
    pub(crate) check_config: bool,

    /// With --check-config: a target whose name does not resolve, or a
    /// blackbox module prober does not load, makes the config invalid
    /// (exit 2), for CI pipelines; without it, a warning.
    #[arg(long, requires = "check_config")]
    pub(crate) strict: bool,

    /// Serve Prometheus metrics of the jobs on http://ADDR/metrics
    /// (overrides `[metrics] listen` in the config), and /probe with
    /// --blackbox-config.
    #[arg(long, value_name = "ADDR", value_parser = listen_addr)]
    pub(crate) metrics: Option<SocketAddr>,

    /// Serve blackbox_exporter's /probe on the --metrics listener, with the
    /// modules of this blackbox.yml (overrides `[blackbox] config`;
    /// docs/blackbox.md). SIGHUP reloads it.
    #[arg(long, value_name = "FILE")]
    pub(crate) blackbox_config: Option<PathBuf>,

    /// Serve the --metrics listener over TLS (or mutual TLS) as this web
    /// config file says, in the format Prometheus exporters share
    /// (tls_server_config; overrides `[metrics] web_config`).
    #[arg(long, value_name = "FILE")]
    pub(crate) web_config: Option<PathBuf>,

    /// Where each responder listens (`--tcp ADDR`, ...): one flag per
    /// responder the registry lists, added by [`with_responder_flags`].
    #[arg(skip)]
    pub(crate) listen: Vec<(&'static str, SocketAddr)>,

    /// The responders' own settings (`--stamp-key`, ...): their flags are
    /// added from the responder list, each responder's from its own crate
    /// ([`with_responder_flags`]), and read back in `main`.
    #[arg(skip)]
    pub(crate) own: prober_net::options::OptionSet,

    /// Serve gRPC (with --grpc) and HTTPS (--https) over TLS with this
    /// certificate chain (PEM); needs --tls-key.
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    pub(crate) tls_cert: Option<PathBuf>,

    /// Private key (PEM) for --tls-cert.
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    pub(crate) tls_key: Option<PathBuf>,

    /// Require gRPC clients to present a certificate signed by this CA (mTLS).
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    pub(crate) tls_client_ca: Option<PathBuf>,

    /// Log only warnings, errors and the daemon's lifecycle (started,
    /// config reloaded, stopping); clients are logged only at debug level
    /// (RUST_LOG=debug).
    #[arg(short, long)]
    pub(crate) quiet: bool,

    /// Read TCP and UDP requests on threads that spin on the sockets (a core
    /// per UDP socket and per TCP connection) instead of sleeping in epoll.
    #[arg(long)]
    pub(crate) busy_poll: bool,

    #[command(flatten)]
    pub(crate) receive: ReceiveArgs,

    /// UDP replies per second per source address (a token bucket, one
    /// second's burst); 0 for no limit. [default: 10000, not for loopback
    /// sources; a value given applies to every source]
    #[arg(long, value_name = "PPS", help_heading = "Limits")]
    pub(crate) rate_limit: Option<u32>,

    /// TCP, gRPC and HTTP connections open at once; 0 for no limit.
    /// [default: 10000]
    #[arg(long, value_name = "N", help_heading = "Limits")]
    pub(crate) max_conns: Option<usize>,

    /// Connections open at once per source address; 0 for no limit.
    /// [default: 256, not for loopback sources; a value given applies to
    /// every source]
    #[arg(long, value_name = "N", help_heading = "Limits")]
    pub(crate) max_conns_per_source: Option<usize>,

    /// Close a connection that has not sent a whole request this long after
    /// connecting, or not finished one it started. [default: 10s]
    #[arg(long, value_name = "DURATION", value_parser = positive_duration, help_heading = "Limits")]
    pub(crate) request_timeout: Option<Duration>,

    /// Close a connection silent this long between requests. [default: 5m]
    #[arg(long, value_name = "DURATION", value_parser = positive_duration, help_heading = "Limits")]
    pub(crate) idle_timeout: Option<Duration>,

    /// Send UDP follow-up frames (the responder's transmit stamp, 48 bytes
    /// more than the request) to sources other than loopback too. Off by
    /// default: the responder never answers a datagram with more bytes than
    /// it received (docs/security.md).
    #[arg(long, help_heading = "Limits")]
    pub(crate) udp_follow_ups: bool,
}

/// `--receive`, `--spin-budget` and `--spin-share`, of `run` and `serve`.
#[derive(Debug, Clone, clap::Args)]
#[command(next_help_heading = "Receive")]
pub(crate) struct ReceiveArgs {
    /// How to wait: `async` parks in epoll (a CPU wake-up inside the RTT);
    /// `adaptive` polls the socket after each send (run: UDP, ICMP, TCP and
    /// gRPC probes) or each answer (serve: the TCP and UDP responders), for
    /// a budget that adapts to the target's recent RTTs or to the gaps
    /// between requests (at most --spin-budget), then parks.
    /// [default: adaptive for `run` with targets and `sweep`, else async;
    /// the daemon's probes follow its file's `[receive]`]
    #[arg(long, value_enum, value_name = "MODE")]
    pub(crate) receive: Option<ReceiveArg>,

    /// Adaptive receive's longest spin. [default: 100us]
    #[arg(long, value_parser = spin_budget, value_name = "DURATION")]
    pub(crate) spin_budget: Option<Duration>,

    /// Adaptive receive: the share of one core all spins together may use.
    /// 1 lets a back-to-back run (-i 0) spin on every probe, as Go's gRPC
    /// runtime does. [default: 1 for `run` with targets and `sweep`, else
    /// 0.1]
    #[arg(long, value_parser = spin_share, value_name = "FRACTION")]
    pub(crate) spin_share: Option<u32>,
}

impl ReceiveArgs {
    fn budget(&self) -> Duration {
        self.spin_budget
            .unwrap_or(prober_core::spin::DEFAULT_SPIN_BUDGET)
    }

    /// Refuses --spin-budget and --spin-share where `mode` (the mode the
    /// command will use) does not spin: they would be ignored.
    fn check(&self, mode: ReceiveArg) -> anyhow::Result<()> {
        if mode == ReceiveArg::Async {
            for (given, flag) in [
                (self.spin_budget.is_some(), "--spin-budget"),
                (self.spin_share.is_some(), "--spin-share"),
            ] {
                if given {
                    anyhow::bail!(
                        "{flag} applies only to adaptive receive, and this receives async (--receive adaptive spins)"
                    );
                }
            }
        }
        Ok(())
    }

    /// `run`'s mode: adaptive unless --receive says otherwise, but never
    /// for the self-test (no targets), whose responders share the process.
    ///
    /// Adaptive is the default because it measured better at an interval
    /// for every protocol, at less CPU (`prober run -c 500 -i 10ms`, 2
    /// rounds alternating with async, BENCHMARKS.md "Adaptive receive by
    /// default"): p50 UDP 133/148 µs against 167/166, TCP 137/141 against
    /// 157/147, ICMP 67/68 against 97/93, gRPC 432/330 against 496/436.
    pub(crate) fn run_mode(&self, has_targets: bool) -> ReceiveArg {
        self.receive.unwrap_or(if has_targets {
            ReceiveArg::Adaptive
        } else {
            ReceiveArg::Async
        })
    }

    /// `run`'s build setting. A one-shot run may spin up to a whole core,
    /// at most one budget per probe: back to back, a tenth of a core runs
    /// dry within a few probes, and the wake-ups come back. The self-test
    /// (no targets) keeps a tenth: its responders share the process.
    ///
    /// # Errors
    /// A spin setting where this mode does not spin ([`Self::check`]).
    pub(crate) fn run_receive(
        &self,
        has_targets: bool,
    ) -> anyhow::Result<prober_core::spin::Receive> {
        let mode = self.run_mode(has_targets);
        self.check(mode)?;
        let share = self
            .spin_share
            .unwrap_or(if has_targets { 1000 } else { 100 });
        Ok(mode.receive(self.budget(), share))
    }

    /// `serve`'s mode: async unless --receive says otherwise (a spinning
    /// responder only takes CPU from the clients on a small machine).
    pub(crate) fn serve_mode(&self) -> ReceiveArg {
        self.receive.unwrap_or(ReceiveArg::Async)
    }

    /// `serve`'s build setting: spins share a tenth of a core by default.
    ///
    /// # Errors
    /// A spin setting where this mode does not spin ([`Self::check`]).
    pub(crate) fn serve_receive(&self) -> anyhow::Result<prober_core::spin::Receive> {
        let mode = self.serve_mode();
        self.check(mode)?;
        Ok(mode.receive(self.budget(), self.spin_share.unwrap_or(100)))
    }
}

/// `--receive`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum ReceiveArg {
    /// Park in epoll until the reply wakes the thread.
    Async,
    /// Poll for up to a spin budget after each send, then park.
    Adaptive,
}

impl ReceiveArg {
    /// The build setting for this mode.
    pub(crate) fn receive(self, budget: Duration, permille: u32) -> prober_core::spin::Receive {
        match self {
            Self::Async => prober_core::spin::Receive::Event,
            Self::Adaptive => prober_core::spin::Receive::Adaptive(
                prober_core::spin::SpinPool::new(budget, permille),
            ),
        }
    }
}

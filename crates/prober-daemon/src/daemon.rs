//! The daemon loop: probe jobs for many targets, each on its own open-loop
//! schedule, results through the one [`Collector`] (job files and
//! Prometheus); reload on [`Control::Reload`], drain on [`Control::Stop`].
//!
//! One task (the loop in [`run`]) owns the state: the running targets and
//! the collector with its sinks. Target tasks only send events to it, so a
//! slow or dead target never delays another.

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use crate::spread::spread;
use prober_core::protocol::BuildEnv;
use prober_core::{
    Clock, Collector, Context, EVENT_CHANNEL, Event, Launch, Registry, RunConfig, RunMeta,
    Runnable, Sample, Sink, Summary, TargetEntry,
};
use prober_sinks::PrometheusSink;
use prober_sinks::files::ByJob;
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::config::{self, Config, Job, JobTarget};
use crate::error::DaemonError;
use crate::metrics::{ReloadGauges, serve_metrics_apart};
use crate::responder::{self, ResponderOptions};

/// How often sinks are ticked: buffers flushed, due hlog intervals written.
const TICK: Duration = Duration::from_millis(100);

/// What the binary tells a running daemon (from its signal handlers).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Control {
    /// Reopen moved sink files, then reload the config (SIGHUP).
    Reload,
    /// Drain probes in flight, flush every sink and return (SIGTERM).
    Stop,
}

/// How to run the daemon.
#[derive(Debug, Clone)]
pub struct DaemonOptions {
    /// The config file; `None`: no jobs (a `/probe` server, responders).
    pub config: Option<PathBuf>,
    /// blackbox_exporter's modules for `/probe` (`--blackbox-config`),
    /// overriding `[blackbox] config`.
    pub blackbox: Option<PathBuf>,
    /// TLS on the metrics listener (`--web-config`), overriding `[metrics]
    /// web_config`.
    pub web_config: Option<PathBuf>,
    /// `/metrics` address, overriding the config's.
    pub metrics: Option<SocketAddr>,
    /// Responders given on the command line; the config's `[serve]` fills in
    /// the addresses not given.
    pub responders: ResponderOptions,
    /// prober's version, for results.
    pub version: String,
    /// Host name and kernel, for results.
    pub host: (String, String),
    /// The PM QoS CPU latency request the process holds
    /// (`--cpu-latency`), for results.
    pub cpu_latency: Option<std::time::Duration>,
}

/// Checks a config file: parses, validates and resolves it, and checks that
/// its sink files can be written. Returns the verdict line.
///
/// # Errors
/// [`DaemonError::Config`] naming the file, the key and the reason.
///
/// `cli` is the command line's responders, merged with `[serve]` as the
/// daemon would (a listener there counts as work, and what starting them
/// would refuse is refused here).
pub async fn check(
    path: Option<&std::path::Path>,
    registry: &Registry,
    cli: &ResponderOptions,
    blackbox: Option<&std::path::Path>,
) -> Result<Checked, DaemonError> {
    let discovery = crate::dns_sd::Discovery::default();
    let cfg = load(path, registry, &discovery).await?;
    let blackbox = blackbox
        .map(std::path::Path::to_owned)
        .or_else(|| cfg.blackbox.config.clone());
    responders_for(cli, &cfg, registry, path, blackbox.is_some())?;
    let targets: usize = cfg.jobs.iter().map(|j| j.targets.len()).sum();
    let mut warnings: Vec<String> = cfg
        .jobs
        .iter()
        .flat_map(|j| {
            j.targets.iter().filter_map(|t| {
                t.addr.as_ref().err().map(|e| {
                    format!(
                        "job {:?}: {}: {e} (probed as down until it resolves)",
                        j.name, t.target
                    )
                })
            })
        })
        .collect();
    if let Some(web) = &cfg.metrics_web_config {
        crate::webconfig::load(web).map_err(DaemonError::Config)?;
    }
    let mut verdict = match path {
        Some(path) => format!(
            "config {} is valid: {}, {}",
            path.display(),
            prober_core::quote::count(cfg.jobs.len() as u64, "job"),
            prober_core::quote::count(targets as u64, "target"),
        ),
        None => String::new(),
    };
    if let Some(b) = &blackbox {
        let modules = crate::blackbox::config::load(b, registry).map_err(DaemonError::Config)?;
        if !verdict.is_empty() {
            verdict.push_str("; ");
        }
        verdict.push_str(&format!(
            "blackbox config {} is valid: {} loaded, {} not",
            b.display(),
            prober_core::quote::count(modules.loaded.len() as u64, "module"),
            modules.refused.len()
        ));
        warnings.extend(
            modules
                .refused
                .iter()
                .map(|(name, why)| format!("blackbox module {name} is not loaded: {why}")),
        );
    }
    Ok(Checked { verdict, warnings })
}

/// What [`check`] found in a valid config.
#[derive(Debug)]
pub struct Checked {
    /// The one-line verdict.
    pub verdict: String,
    /// What the daemon would run with but a person should know: targets
    /// whose names do not resolve now (the daemon probes them as down).
    pub warnings: Vec<String>,
}

/// The responders to run: the command line's (`cli`), with `[serve]`'s
/// listeners and settings where the command line gives none; checked as
/// starting them would check them, and refused when neither they nor the
/// jobs give the daemon anything to do.
fn responders_for(
    cli: &ResponderOptions,
    cfg: &Config,
    registry: &Registry,
    path: Option<&std::path::Path>,
    probes_on_demand: bool,
) -> Result<ResponderOptions, DaemonError> {
    let path = path.unwrap_or_else(|| std::path::Path::new("(no --config)"));
    let serve = &cfg.serve;
    let mut r = cli.clone();
    for &(name, addr) in &serve.listen {
        if r.addr(name).is_none() {
            r.set(name, addr);
        }
    }
    // A responder's own settings travel with its listener: the command
    // line's when it gives the listener (its defaults included), else the
    // file's.
    for (o, v) in &serve.own.0 {
        let given = serve.given_for(o);
        if given.is_empty() {
            continue;
        }
        if let Some(flag) = o
            .responders(registry)
            .iter()
            .find(|t| cli.addr(t.name).is_some())
        {
            return Err(DaemonError::Config(format!(
                "--{} on the command line replaces the {} responder of {}, whose {} would then be ignored: set it in one place",
                flag.name,
                flag.name,
                path.display(),
                given.join(", ")
            )));
        }
        r.own.set(o, v.clone_box());
    }
    let from_file = serve.limit_settings().map_err(DaemonError::Config)?;
    r.limits = r.limits.or(&from_file);
    if cfg.jobs.is_empty() && !r.any() && !probes_on_demand {
        return Err(nothing_to_do(path));
    }
    responder::validate(&r, registry)?;
    Ok(r)
}

/// A reload that would stop every job of a config that had some is
/// refused unless the new file says `allow_empty = true`: a config tool
/// that truncated the file mid-write must not take the node dark.
fn refuse_emptied(old: &Config, new: Config) -> Result<Config, DaemonError> {
    if new.jobs.is_empty() && !old.jobs.is_empty() && !new.allow_empty {
        return Err(DaemonError::Config(
            "the new config has no jobs: kept the old one's (set allow_empty = true to stop every job)"
                .to_owned(),
        ));
    }
    Ok(new)
}

/// Reads and resolves the config at `path` in a task of its own, so that
/// events keep flowing (and schedules keep running) while it loads.
fn load_in_background(
    path: Option<&std::path::Path>,
    registry: &'static Registry,
    discovery: &Arc<crate::dns_sd::Discovery>,
) -> tokio::task::JoinHandle<Result<Config, DaemonError>> {
    let path = path.map(std::path::Path::to_owned);
    let discovery = Arc::clone(discovery);
    tokio::spawn(async move { load(path.as_deref(), registry, &discovery).await })
}

/// The config at `path`; without one, the config of no jobs (a daemon
/// that serves `/probe` or responders only).
async fn load(
    path: Option<&std::path::Path>,
    registry: &Registry,
    discovery: &crate::dns_sd::Discovery,
) -> Result<Config, DaemonError> {
    match path {
        Some(p) => config::load(p, registry, discovery).await,
        None => {
            config::parse_with(
                "allow_empty = true\n",
                std::path::Path::new("."),
                registry,
                config::Resolution::LiteralsOnly,
            )
            .await
        }
    }
}

/// Who may use `/probe` on a listener at `addr`: `[blackbox]
/// allowed_targets`; without it, anything on a loopback listener, and
/// nothing elsewhere (start-up refuses: a `/probe` anyone on the network
/// can reach would probe anything from inside it).
fn blackbox_access(
    settings: &config::BlackboxSettings,
    addr: SocketAddr,
) -> Result<crate::blackbox::Allowed, DaemonError> {
    match &settings.allowed_targets {
        Some(list) => crate::blackbox::Allowed::parse(list)
            .map_err(|e| DaemonError::Config(format!("blackbox.{e}"))),
        None if addr.ip().is_loopback() => Ok(crate::blackbox::Allowed::everything()),
        None => Err(DaemonError::Config(format!(
            "/probe on {addr} would probe any target for anyone who reaches it: set [blackbox] allowed_targets (host name globs and CIDRs; [\"*\"] for anything)"
        ))),
    }
}

fn nothing_to_do(path: &std::path::Path) -> DaemonError {
    DaemonError::Config(format!(
        "config {}: nothing to do: no [[job]], no [serve] listener and no listener on the command line",
        path.display()
    ))
}

/// How often target files are checked for changes.
const WATCH_EVERY: Duration = Duration::from_secs(2);

/// What identifies the content of every watched target file: its inode,
/// size and modification time (`None`: it cannot be read).
type Fingerprint = Vec<(
    std::path::PathBuf,
    Option<(u64, u64, std::time::SystemTime)>,
)>;

fn fingerprint(cfg: &Config) -> Fingerprint {
    use std::os::unix::fs::MetadataExt as _;
    cfg.jobs
        .iter()
        .flat_map(|j| &j.watched)
        .map(|p| {
            let m = std::fs::metadata(p).ok();
            let id = m.and_then(|m| Some((m.ino(), m.len(), m.modified().ok()?)));
            (p.clone(), id)
        })
        .collect()
}

/// The daemon's sinks: every job's files, Prometheus and OTLP. A fan-out
/// written out rather than core's `Fanout` of boxed sinks because the
/// daemon reaches each one by its type: a reload adds and removes a job's
/// files (`ByJob`) and forgets a stopped target's series (`PrometheusSink`).
#[derive(Debug, Default)]
struct DaemonSinks {
    files: ByJob,
    metrics: PrometheusSink,
    otlp: Option<prober_sinks::otlp::OtlpSink>,
}

impl Sink for DaemonSinks {
    fn start(&mut self, cx: &Context<'_>) -> std::io::Result<()> {
        self.metrics.start(cx)?;
        if let Some(o) = &mut self.otlp {
            o.start(cx)?;
        }
        self.files.start(cx)
    }

    fn target_added(&mut self, cx: &Context<'_>, t: &TargetEntry) -> std::io::Result<()> {
        self.metrics.target_added(cx, t)?;
        if let Some(o) = &mut self.otlp {
            o.target_added(cx, t)?;
        }
        self.files.target_added(cx, t)
    }

    fn target_removed(&mut self, cx: &Context<'_>, t: &TargetEntry) -> std::io::Result<()> {
        self.metrics.target_removed(cx, t)?;
        if let Some(o) = &mut self.otlp {
            o.target_removed(cx, t)?;
        }
        self.files.target_removed(cx, t)
    }

    fn record(&mut self, cx: &Context<'_>, t: &TargetEntry, s: &Sample) -> std::io::Result<()> {
        self.metrics.record(cx, t, s)?;
        if let Some(o) = &mut self.otlp {
            o.record(cx, t, s)?;
        }
        self.files.record(cx, t, s)
    }

    fn tick(&mut self, cx: &Context<'_>, now: tokio::time::Instant) -> std::io::Result<()> {
        self.files.tick(cx, now)
    }

    fn reopen(&mut self, cx: &Context<'_>) -> std::io::Result<()> {
        self.files.reopen(cx)
    }

    fn finish(&mut self, cx: &Context<'_>, summaries: &[Summary]) -> std::io::Result<()> {
        if let Some(o) = &mut self.otlp {
            o.finish(cx, summaries)?;
        }
        self.files.finish(cx, summaries)
    }
}

/// The targets whose paths are traced: every `udp://`, `tcp://` and
/// `icmp://` target (each flow of one once) with an address, of the jobs
/// with `trace_every`. A UDP trace goes to the target's host on port
/// 33434, where nothing listens and the host answers Port Unreachable:
/// prober's responder, on the target's port, answers a trace's probes with
/// nothing, so the last hop would stay silent. Between two hosts the ECMP
/// branches are the same whatever the port (a port changes which branch a
/// flow hashes to, not which exist). A TCP trace's SYNs go to the target's
/// own port: the responder's kernel answers a SYN-ACK, which ends it.
fn traced(cfg: &Config) -> Vec<crate::paths::Traced> {
    let mut out: Vec<crate::paths::Traced> = Vec::new();
    for job in &cfg.jobs {
        let Some(every) = job.trace_every else {
            continue;
        };
        for t in &job.targets {
            let Ok(to) = t.addr else { continue };
            let (method, dest) = match t.target.scheme.name {
                "udp" => (
                    prober_trace::Method::Udp,
                    SocketAddr::new(to.ip(), prober_trace::DEFAULT_PORT),
                ),
                // SYNs to the port the probes use: a firewall that lets
                // them through lets the trace through.
                "tcp" => (prober_trace::Method::Tcp, to),
                "icmp" => (prober_trace::Method::Icmp, SocketAddr::new(to.ip(), 0)),
                _ => continue,
            };
            let mut base = t.target.clone();
            base.flow = None;
            let target = base.to_string();
            if out.iter().any(|o| o.job == job.name && o.target == target) {
                continue;
            }
            let mut labels: Vec<(String, String)> = job
                .labels
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            labels.extend(t.labels.iter().map(|(k, v)| (k.clone(), v.clone())));
            out.push(crate::paths::Traced {
                job: job.name.clone(),
                target,
                to: dest,
                method,
                probed: to,
                every,
                hops: job.trace_hops,
                rounds: job.trace_rounds,
                labels,
            });
        }
    }
    out
}

/// What starting one target's task costs the runtime thread, generously:
/// a batch of targets waits this long per target before its first slots.
const START_COST: Duration = Duration::from_micros(4);

/// The longest a batch waits for its first slots.
const MAX_SETTLE: Duration = Duration::from_secs(1);

struct Running {
    job: String,
    key: String,
    stop: CancellationToken,
}

struct Daemon {
    cfg: Config,
    registry: &'static Registry,
    next_id: usize,
    running: HashMap<usize, Running>,
    by_key: HashMap<(String, String), usize>,
    collector: Collector<DaemonSinks>,
    tasks: JoinSet<()>,
    events: mpsc::Sender<Event>,
    env: BuildEnv,
    root: CancellationToken,
    discovery: Arc<crate::dns_sd::Discovery>,
    /// Where every target's wait for its next slot ends (the tokio timer's
    /// millisecond ticks sent each probe about 1 ms late); `None` if no
    /// timerfd could be made.
    timer: Option<prober_core::SharedTimer>,
    /// This host's name, in each target's start offset ([`spread`]).
    host: String,
    /// The paths of the targets of jobs with `trace_every`.
    paths: Arc<crate::paths::Paths>,
}

impl Daemon {
    /// Builds the probe of one target (may fail: sockets, permissions);
    /// nothing runs until [`Daemon::start_target`].
    async fn build_target(
        &self,
        job: &Job,
        t: &JobTarget,
    ) -> Result<Box<dyn Runnable>, DaemonError> {
        let addr = match &t.addr {
            Ok(addr) => *addr,
            Err(e) => {
                tracing::warn!(job = %job.name, "{e}: probed as down until it resolves");
                return Ok(prober_core::runnable(prober_core::Unresolved::new(
                    e.clone(),
                )));
            }
        };
        let spec = t.target.spec(addr, t.size, job.run.timeout);
        let mut env = self
            .env
            .with_options(std::sync::Arc::clone(&job.options.store));
        env.tls.clone_from(&job.tls);
        env.marks.clone_from(&job.marks);
        (t.target.protocol.build)(spec, &env)
            .await
            .map_err(|source| DaemonError::Build {
                what: format!("job {:?}: target {}: {source}", job.name, t.target),
                source,
            })
    }

    /// Starts one target; its first slot is due `settle` plus its spread
    /// offset after its task first runs.
    fn start_target(
        &mut self,
        job: &Job,
        t: &JobTarget,
        probe: Box<dyn Runnable>,
        settle: Duration,
    ) {
        let key = t.target.to_string();
        let id = self.next_id;
        self.next_id += 1;
        let mut info = t.target.info_at(id, t.addr.as_ref().ok().copied(), t.size);
        info.job = Some(job.name.clone());
        info.labels.clone_from(&job.labels);
        info.labels
            .extend(t.labels.iter().map(|(k, v)| (k.clone(), v.clone())));
        let stop = self.root.child_token();
        let launch = Launch {
            id,
            cfg: job.run.clone(),
            phase: settle + spread(&self.host, &job.name, &key, job.run.interval),
            events: self.events.clone(),
            stop: stop.clone(),
            // A target stopped by a reload or SIGTERM waits out its probes
            // in flight (each up to its timeout): their results are kept.
            turnstile: None,
            abandon: None,
            timer: self.timer.clone(),
        };
        // Where its probes leave from, for the path tracer to follow (for
        // every job: a reload that turns trace_hops on keeps its targets
        // running).
        self.paths.source(&job.name, &key, probe.source());
        let reader = probe.launch(&mut self.tasks, launch);
        // The Prometheus sink cannot fail to add a series; files ignore it.
        let _ = self.collector.add_target(info, reader);
        self.by_key.insert((job.name.clone(), key.clone()), id);
        self.running.insert(
            id,
            Running {
                job: job.name.clone(),
                key,
                stop,
            },
        );
    }

    /// Moves to `new`: targets of unchanged jobs keep running (schedules,
    /// counters and all), removed or changed ones stop, new ones start.
    /// Everything that can fail (opening sinks, building probes) happens
    /// first; on failure nothing has changed and the old config runs on.
    async fn apply(&mut self, new: Config) -> Result<(), DaemonError> {
        let running: HashSet<crate::reload::Key> = self.by_key.keys().cloned().collect();
        let files = &self.collector.sink_mut().files;
        let plan = crate::reload::plan(&self.cfg, &new, &running, &|job| files.contains(job));
        for ((job, target), addr) in &plan.resolved {
            tracing::info!(job = %job, target = %target, "resolves now, to {addr}");
        }
        for ((job, target), was, addr) in &plan.moved {
            tracing::info!(job = %job, target = %target, "address changed from {was} to {addr}");
            self.discovery.count(job, |s| s.address_changes += 1);
        }
        let stopping: Vec<usize> = plan
            .stop
            .iter()
            .filter_map(|k| self.by_key.get(k).copied())
            .collect();
        let mut opened = Vec::new();
        for name in &plan.reopen {
            let Some(job) = new.jobs.iter().find(|j| &j.name == name) else {
                continue;
            };
            let s = job.sinks.open().map_err(|e| {
                DaemonError::io(format!("opening the sinks of job {:?}", job.name), e)
            })?;
            opened.push((job.name.clone(), s));
        }
        let mut built = Vec::new();
        for &(j, t) in &plan.start {
            let job = &new.jobs[j];
            built.push((j, t, self.build_target(job, &job.targets[t]).await?));
        }
        // Commit: nothing below can fail.
        for id in stopping {
            if let Some(r) = self.running.get(&id) {
                tracing::debug!(job = %r.job, target = %r.key, "stopping target");
                r.stop.cancel();
                self.by_key.remove(&(r.job.clone(), r.key.clone()));
                self.paths.source(&r.job, &r.key, None);
                // Its series go now, so a restarted target never shows twice;
                // its probes in flight still reach its job's files, and the
                // collector lets it go when it reports Done (`on_event`).
                self.collector.sink_mut().metrics.forget(id);
            }
        }
        for (name, s) in opened {
            self.collector
                .with_sink(|cx, sinks| sinks.files.insert(cx, &name, s));
        }
        // The targets' tasks first run one after another once this returns
        // (10,000 of them took about 15 ms): a target whose first slot fell
        // inside that burst was sent late, by up to 16 ms at start-up
        // (BENCHMARKS.md, "A fleet citizen"). Every first slot of a batch
        // is therefore due after the burst.
        let settle = (START_COST * u32::try_from(built.len()).unwrap_or(u32::MAX)).min(MAX_SETTLE);
        for (j, t, probe) in built {
            let job = &new.jobs[j];
            self.start_target(job, &job.targets[t], probe, settle);
        }
        self.cfg = new;
        let jobs: Vec<&str> = self.cfg.jobs.iter().map(|j| j.name.as_str()).collect();
        self.discovery.retain_jobs(&jobs);
        self.paths.want(traced(&self.cfg));
        Ok(())
    }

    fn on_event(&mut self, ev: Event) {
        let Ok(Some(done)) = self.collector.event(ev) else {
            return;
        };
        let finished_job = self.running.remove(&done).map(|r| {
            tracing::debug!(job = %r.job, target = %r.key, "target stopped");
            r.job
        });
        let _ = self.collector.remove_target(done);
        // A job gone from the config closes its sinks with its last target.
        // Only then is `running` scanned, so stopping thousands of targets
        // stays linear.
        if let Some(job) = finished_job
            && !self.cfg.jobs.iter().any(|c| c.name == job)
            && !self.running.values().any(|r| r.job == job)
        {
            self.collector
                .with_sink(|cx, sinks| sinks.files.remove(cx, &job));
        }
    }
}

/// `[probing] realtime_priority`: the probing thread, this one on the
/// daemon's one-thread runtime, under `SCHED_FIFO` (docs/config.md). Not
/// allowed, or the probes on several runtime threads (`--threads`), it
/// probes at ordinary priority and says why: never a reason not to start.
fn probe_at_realtime(priority: Option<u8>) {
    let Some(p) = priority else { return };
    if tokio::runtime::Handle::current().runtime_flavor()
        != tokio::runtime::RuntimeFlavor::CurrentThread
    {
        tracing::warn!(
            "probing.realtime_priority is applied only with --threads 1, the default (the probes run on several threads): probing at ordinary priority"
        );
        return;
    }
    match prober_sys::sched::realtime(p) {
        Ok(()) => tracing::info!("the probing thread runs at realtime priority {p} (SCHED_FIFO)"),
        Err(e) => tracing::warn!(
            "cannot run the probing thread at realtime priority {p}: {e} (it needs root or CAP_SYS_NICE, and under systemd RestrictRealtime=no): probing at ordinary priority"
        ),
    }
}

/// Runs the daemon until [`Control::Stop`] (or until `control` closes).
/// `listening` is told every address bound (responders, metrics).
///
/// # Errors
/// A bad config, a port that cannot be bound or a sink that cannot be
/// opened at start. After start, errors are logged.
pub async fn run(
    opts: DaemonOptions,
    registry: &'static Registry,
    mut control: mpsc::Receiver<Control>,
    listening: &mut (dyn FnMut(&str, SocketAddr) + Send),
) -> Result<(), DaemonError> {
    let path = opts.config.clone();
    let discovery = Arc::new(crate::dns_sd::Discovery::default());
    let cfg = load(path.as_deref(), registry, &discovery).await?;
    let blackbox_path = opts
        .blackbox
        .clone()
        .or_else(|| cfg.blackbox.config.clone());
    let listeners_stop = CancellationToken::new();
    let responders = responders_for(
        &opts.responders,
        &cfg,
        registry,
        path.as_deref(),
        blackbox_path.is_some(),
    )?;
    let metrics_addr = opts.metrics.or(cfg.metrics);
    let blackbox = match &blackbox_path {
        None => None,
        Some(p) => {
            let Some(addr) = metrics_addr else {
                return Err(DaemonError::Config(format!(
                    "blackbox config {}: /probe is served on the metrics listener: give --metrics ADDR or [metrics] listen",
                    p.display()
                )));
            };
            let allowed = blackbox_access(&cfg.blackbox, addr)?;
            let modules = crate::blackbox::load(p, registry).map_err(DaemonError::Config)?;
            Some(Arc::new(crate::blackbox::Blackbox::new(
                modules, registry, allowed,
            )))
        }
    };
    let receive = cfg.receive_for(responders.any());
    let mut listeners = responder::start(&responders, registry, &listeners_stop).await?;
    for (what, addr) in &listeners.bound {
        listening(what, *addr);
    }
    let sinks = DaemonSinks {
        files: ByJob::default(),
        metrics: PrometheusSink::new().with_buckets(cfg.metric_buckets.clone()),
        otlp: match &cfg.otlp {
            None => None,
            Some(o) => Some(
                prober_sinks::otlp::OtlpSink::new(&prober_sinks::otlp::OtlpSettings {
                    endpoint: o.endpoint.clone(),
                    interval: o.interval,
                    timeout: o.timeout,
                    host: opts.host.0.clone(),
                })
                .map_err(DaemonError::Config)?,
            ),
        },
    };
    // The daemon's own families; the targets' are written by the sink
    // (prober_sinks::prometheus::scrape).
    let mut prom = prometheus_client::registry::Registry::default();
    prom.register_collector(Box::new(crate::metrics::SinkCollector(
        sinks.files.failures(),
    )));
    if let Some(stats) = listeners.stats::<prober_stamp::ReflectorStats>() {
        prom.register_collector(Box::new(crate::stamp_metrics::StampCollector(stats)));
    }
    prom.register_collector(Box::new(crate::stamp_metrics::GuardCollector(
        std::sync::Arc::clone(&listeners.guard),
    )));
    prom.register_collector(Box::new(crate::metrics::DiscoveryCollector(Arc::clone(
        &discovery,
    ))));
    let paths = Arc::new(crate::paths::Paths::default());
    let mut path_changes = paths.changes();
    prom.register_collector(Box::new(crate::paths::PathCollector(Arc::clone(&paths))));
    let gauges = ReloadGauges::default();
    let status = crate::status::StatusPage {
        sink: sinks.metrics.clone(),
        version: opts.version.clone(),
        host: opts.host.0.clone(),
        discovery: Arc::clone(&discovery),
        reload: gauges.last_reload(),
        paths: Arc::clone(&paths),
    };
    gauges.register(&mut prom, &opts.version);
    gauges.loaded(None);
    let refused = prometheus_client::metrics::counter::Counter::default();
    prom.register(
        "prober_scrapes_refused",
        "Scrapes and status pages answered 503 because others were being rendered (a scrape storm); probing goes on",
        refused.clone(),
    );
    let scrape = Arc::new(crate::metrics::Scrape {
        sink: sinks.metrics.clone(),
        registry: prom,
        refused,
    });
    let web_tls = match opts.web_config.as_ref().or(cfg.metrics_web_config.as_ref()) {
        None => None,
        Some(p) => {
            if metrics_addr.is_none() {
                return Err(DaemonError::Config(format!(
                    "web config {}: it is the metrics listener's TLS: give --metrics ADDR or [metrics] listen",
                    p.display()
                )));
            }
            crate::webconfig::load(p).map_err(DaemonError::Config)?
        }
    };
    if let Some(addr) = metrics_addr {
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|e| DaemonError::io(format!("binding metrics {addr}"), e))?;
        let bound = listener
            .local_addr()
            .map_err(|e| DaemonError::io("reading the metrics address", e))?;
        listening("metrics", bound);
        let listener = listener
            .into_std()
            .map_err(|e| DaemonError::io("handing the metrics listener to its thread", e))?;
        listeners.tasks.spawn(serve_metrics_apart(
            listener,
            scrape,
            status,
            blackbox.clone(),
            web_tls,
            cfg.metrics_auth.clone(),
            listeners_stop.clone(),
        ));
    }
    // The threads this one starts from now on (the metrics thread, the
    // blocking pool) start ordinary: `SCHED_RESET_ON_FORK`.
    probe_at_realtime(cfg.realtime_priority);
    let (events, mut rx) = mpsc::channel(EVENT_CHANNEL);
    let root = CancellationToken::new();
    let mut meta = RunMeta::new(&opts.version, &RunConfig::default())
        .on_host(&opts.host.0, &opts.host.1)
        .with_tx_stamps(cfg.tx_stamps)
        .with_cpu_latency(opts.cpu_latency);
    receive.name().clone_into(&mut meta.receive);
    let mut collector = Collector::new(meta, Clock::now(), sinks, true);
    // Nothing to fail: no target and no file yet.
    let _ = collector.start();
    let mut d = Daemon {
        cfg: Config {
            serve: cfg.serve.clone(),
            metrics: cfg.metrics,
            metric_buckets: cfg.metric_buckets.clone(),
            otlp: cfg.otlp.clone(),
            metrics_auth: cfg.metrics_auth.clone(),
            metrics_web_config: cfg.metrics_web_config.clone(),
            allow_empty: cfg.allow_empty,
            blackbox: cfg.blackbox.clone(),
            tx_stamps: cfg.tx_stamps,
            receive: receive.clone(),
            receive_chosen: cfg.receive_chosen,
            realtime_priority: cfg.realtime_priority,
            jobs: Vec::new(),
            discovery: cfg.discovery.clone(),
            refresh_at: None,
        },
        registry,
        next_id: 0,
        running: HashMap::new(),
        by_key: HashMap::new(),
        collector,
        tasks: JoinSet::new(),
        events,
        // Transmit stamps cost CPU at fleet scale (0.30 against 0.36 cores
        // for 10,000 ICMP targets at 1 Hz), so the daemon asks for them only
        // when told (`[stamps] transmit = true`); restart to change it.
        env: BuildEnv {
            tx_stamps: cfg.tx_stamps,
            receive,
            ..BuildEnv::default()
        },
        root: root.clone(),
        discovery: Arc::clone(&discovery),
        host: opts.host.0.clone(),
        paths: Arc::clone(&paths),
        timer: match prober_core::SharedTimer::new() {
            Ok(t) => Some(t),
            Err(error) => {
                tracing::warn!(%error, "no high-resolution timer: probes are sent on the runtime's millisecond ticks");
                None
            }
        },
    };
    d.apply(cfg).await?;
    // Traces run in a task of their own, one at a time, until the daemon
    // stops (they hold nothing a stop must wait for).
    tokio::spawn(crate::paths::run(
        paths,
        opts.host.0.clone(),
        root.child_token(),
    ));
    tracing::info!(targets = d.running.len(), "daemon started");
    let mut tick = tokio::time::interval(TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // Target files (targets_file, file_sd) are polled: a change reloads the
    // config, as SIGHUP does (without reopening sink files).
    let mut watch = tokio::time::interval(WATCH_EVERY);
    watch.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut seen = fingerprint(&d.cfg);
    // The new config is read and resolved in a task of its own, so events
    // keep flowing (and schedules keep running) while it loads.
    let mut loading: Option<tokio::task::JoinHandle<Result<Config, DaemonError>>> = None;
    // The load in progress was started because dns_sd names were due.
    let mut rediscovering = false;
    // When dns_sd names are due next: from the last load that worked; a
    // failed one tries again after the TTL floor, not at once.
    let mut due = d.cfg.refresh_at;
    loop {
        tokio::select! {
            Some(ev) = rx.recv() => d.on_event(ev),
            Some((job, event)) = path_changes.recv() => {
                d.collector.with_sink(|cx, s| s.files.event(cx, &job, &event));
            }
            ctl = control.recv() => match ctl {
                Some(Control::Reload) => {
                    // As logrotate expects: files moved away are reopened at
                    // once, whether or not the new config turns out valid.
                    let _ = d.collector.reopen();
                    if let Some(b) = &blackbox {
                        match b.reload() {
                            Ok(()) => tracing::info!("blackbox modules reloaded from {}", b.path().display()),
                            Err(error) => tracing::error!("blackbox config rejected, keeping the old modules: {error}"),
                        }
                    }
                    if loading.is_none() {
                        loading = Some(load_in_background(path.as_deref(), d.registry, &d.discovery));
                    }
                }
                Some(Control::Stop) | None => break,
            },
            res = async { loading.as_mut().expect("guarded by the branch condition").await }, if loading.is_some() => {
                loading = None;
                let rediscovering = std::mem::take(&mut rediscovering);
                let res = res.map_err(|e| DaemonError::Config(format!("loading the config failed: {e}"))).and_then(|r| r);
                let res = res.and_then(|new| refuse_emptied(&d.cfg, new));
                match res {
                    Ok(new) => {
                        if new.serve != d.cfg.serve {
                            tracing::warn!("[serve] listeners change only on restart");
                        }
                        let before = d.by_key.len();
                        match d.apply(new).await {
                            Ok(()) => {
                                seen = fingerprint(&d.cfg);
                                due = d.cfg.refresh_at;
                                gauges.loaded(None);
                                if !rediscovering {
                                    tracing::info!(targets = d.by_key.len(), "config reloaded");
                                } else if before != d.by_key.len() {
                                    tracing::info!(targets = d.by_key.len(), "dns_sd: targets rediscovered");
                                }
                            }
                            Err(error) => {
                                gauges.loaded(Some(&error.to_string()));
                                due = retry_after_floor(&d.cfg);
                                tracing::error!("config rejected, keeping the old one: {error}");
                            }
                        }
                    }
                    Err(error) => {
                        gauges.loaded(Some(&error.to_string()));
                        due = retry_after_floor(&d.cfg);
                        tracing::error!("config rejected, keeping the old one: {error}");
                    }
                }
            }
            _ = watch.tick() => {
                let now_seen = fingerprint(&d.cfg);
                if now_seen != seen && loading.is_none() {
                    seen = now_seen;
                    tracing::info!("a target file changed: reloading the config");
                    loading = Some(load_in_background(path.as_deref(), d.registry, &d.discovery));
                }
            }
            () = rediscover(due), if loading.is_none() => {
                due = None;
                tracing::debug!("dns_sd names are due: looking them up again");
                // Only the names are due, but one load does it all: what
                // did not change keeps running untouched.
                loading = Some(load_in_background(path.as_deref(), d.registry, &d.discovery));
                rediscovering = true;
            }
            now = tick.tick() => {
                let _ = d.collector.tick(now);
                // Reap the tasks of targets stopped by reloads.
                while d.tasks.try_join_next().is_some() {}
            }
        }
    }
    tracing::info!("stopping: draining probes in flight");
    root.cancel();
    // Every target task sends Done before it ends, so once all tasks have
    // ended every sample is in the channel (a panicked task sends nothing,
    // but it cannot hold the drain up either).
    loop {
        tokio::select! {
            Some(ev) = rx.recv() => d.on_event(ev),
            res = d.tasks.join_next() => {
                if res.is_none() {
                    break;
                }
            }
        }
    }
    while let Ok(ev) = rx.try_recv() {
        d.on_event(ev);
    }
    let _ = d.collector.finish();
    listeners_stop.cancel();
    while listeners.tasks.join_next().await.is_some() {}
    tracing::info!("daemon stopped");
    Ok(())
}

/// Waits until `at` (when dns_sd names are due), or forever if none is.
async fn rediscover(at: Option<std::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(tokio::time::Instant::from_std(at)).await,
        None => std::future::pending().await,
    }
}

/// After a load that failed: when to look the running config's dns_sd
/// names up again (`None` if it has none).
fn retry_after_floor(cfg: &Config) -> Option<std::time::Instant> {
    cfg.refresh_at
        .map(|_| std::time::Instant::now() + cfg.discovery.ttl_floor)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The most start offsets that fall in one millisecond of a 1 s
    /// interval.
    fn busiest_ms(offsets: impl Iterator<Item = Duration>) -> usize {
        let mut bins = vec![0usize; 1000];
        for o in offsets {
            bins[usize::try_from(o.as_millis()).unwrap()] += 1;
        }
        bins.into_iter().max().unwrap_or(0)
    }

    #[test]
    fn start_offsets_spread_over_targets_and_over_a_mesh() {
        let s = Duration::from_secs(1);
        // One node, 1,000 targets: about one a millisecond (Poisson, mean
        // 1: the busiest of 1,000 milliseconds has a handful).
        let one_node = (0..1000).map(|i| {
            spread(
                "node-0",
                "mesh",
                &format!("icmp://10.0.{}.{}", i / 250, i % 250),
                s,
            )
        });
        let busiest = busiest_ms(one_node);
        assert!(busiest <= 8, "{busiest} targets start in one millisecond");
        // 1,000 nodes with the same config probing one peer: spread too,
        // where a hash of job and target alone sent them all at once.
        let mesh = (0..1000).map(|n| spread(&format!("node-{n}"), "mesh", "icmp://10.0.0.1", s));
        let busiest = busiest_ms(mesh);
        assert!(
            busiest <= 8,
            "{busiest} nodes probe the peer in one millisecond"
        );
        // Stable: a reload gives a target the same offset.
        assert_eq!(
            spread("node-1", "mesh", "icmp://10.0.0.1", s),
            spread("node-1", "mesh", "icmp://10.0.0.1", s)
        );
    }
}

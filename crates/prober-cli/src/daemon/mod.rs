//! Daemon mode, `prober serve --config FILE`: probe jobs for many targets,
//! each on its own open-loop schedule, with file sinks and Prometheus
//! metrics; SIGHUP reloads the config, SIGTERM drains and exits.
//!
//! One task (the loop in [`run`]) owns the state: the running targets, the
//! job sinks and the metrics. Target tasks only send events to it, so a slow
//! or dead target never delays another.

mod config;
mod files;
mod metrics;

use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::io::Write as _;
use std::net::SocketAddr;
use std::path::Path;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context as _;
use prober_core::runner::{Clock, EVENT_CHANNEL};
use prober_core::{Event, TargetInfo};
use prober_icmp::{IcmpClient, SocketKind};
use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use self::config::{Config, Job};
use self::files::JobSinks;
use self::metrics::{SharedMetrics, lock, serve_metrics};
use crate::cli::ServeArgs;
use crate::probes::{BuildCtx, Built, target_info};

/// How often sinks are flushed and due hlog intervals written.
const TICK: Duration = Duration::from_secs(1);

struct Running {
    job: String,
    key: String,
    info: TargetInfo,
    stop: CancellationToken,
}

struct Daemon {
    cfg: Config,
    next_id: usize,
    running: HashMap<usize, Running>,
    by_key: HashMap<(String, String), usize>,
    sinks: HashMap<String, JobSinks>,
    /// Jobs whose sinks are failing, so the error is logged once.
    failing: std::collections::HashSet<String>,
    metrics: SharedMetrics,
    tasks: JoinSet<()>,
    events: mpsc::Sender<Event>,
    icmp: Arc<IcmpClient>,
    clock: Clock,
    root: CancellationToken,
}

/// Offset of a target's first slot within its interval, from a hash of its
/// job and URL: stable across reloads and spread evenly, so thousands of
/// targets at 1 Hz do not fire in the same millisecond.
fn spread(job: &str, target: &str, interval: Duration) -> Duration {
    let mut h = DefaultHasher::new();
    (job, target).hash(&mut h);
    let frac = (h.finish() % 1_000_000) as f64 / 1_000_000.0;
    interval.mul_f64(frac)
}

impl Daemon {
    /// Builds the probe of one target (may fail: sockets, permissions);
    /// nothing runs until [`Daemon::start_target`].
    async fn build_target(&self, job: &Job, t: &config::JobTarget) -> anyhow::Result<Built> {
        let build = BuildCtx {
            icmp: Arc::clone(&self.icmp),
            tls: None,
            timeout: job.run.timeout,
            busy_poll: false,
        };
        Built::new(&t.target, t.addr, t.size, &build)
            .await
            .with_context(|| format!("job {:?}: target {}", job.name, t.target))
    }

    fn start_target(&mut self, job: &Job, t: &config::JobTarget, probe: Built) {
        let key = t.target.to_string();
        let id = self.next_id;
        self.next_id += 1;
        let info = target_info(id, &t.target, t.addr, t.size);
        let stop = self.root.child_token();
        let phase = spread(&job.name, &key, job.run.interval);
        let anomalies = probe.spawn(
            &mut self.tasks,
            id,
            job.run.clone(),
            phase,
            &self.events,
            &stop,
        );
        lock(&self.metrics).add(
            id,
            &job.name,
            &key,
            t.target.scheme.name(),
            &job.labels,
            anomalies,
        );
        self.by_key.insert((job.name.clone(), key.clone()), id);
        self.running.insert(
            id,
            Running {
                job: job.name.clone(),
                key,
                info,
                stop,
            },
        );
    }

    /// Moves to `new`: targets of unchanged jobs keep running (schedules,
    /// counters and all), removed or changed ones stop, new ones start.
    /// Everything that can fail (opening sinks, building probes) happens
    /// first; on failure nothing has changed and the old config runs on.
    async fn apply(&mut self, new: Config) -> anyhow::Result<()> {
        // Where each (job, target URL) resolves, first listing wins: built
        // once per reload so that `keep` is a lookup, not a scan per target.
        fn addrs(cfg: &Config) -> HashMap<(&str, String), SocketAddr> {
            let mut m = HashMap::new();
            for j in &cfg.jobs {
                for t in &j.targets {
                    m.entry((j.name.as_str(), t.target.to_string()))
                        .or_insert(t.addr);
                }
            }
            m
        }
        let (old_addrs, new_addrs) = (addrs(&self.cfg), addrs(&new));
        let keep = |job: &str, key: &str| -> bool {
            let (Some(o), Some(n)) = (
                self.cfg.jobs.iter().find(|j| j.name == job),
                new.jobs.iter().find(|j| j.name == job),
            ) else {
                return false;
            };
            // Same URL resolving elsewhere now counts as a change.
            let k = (job, key.to_owned());
            o.same_settings(n)
                && new_addrs.contains_key(&k)
                && new_addrs.get(&k) == old_addrs.get(&k)
        };
        let stopping: Vec<usize> = self
            .by_key
            .iter()
            .filter(|((job, key), _)| !keep(job, key))
            .map(|(_, id)| *id)
            .collect();
        let stopping_keys: std::collections::HashSet<(String, String)> = stopping
            .iter()
            .filter_map(|id| self.running.get(id).map(|r| (r.job.clone(), r.key.clone())))
            .collect();
        let mut opened = HashMap::new();
        for job in &new.jobs {
            let old = self.cfg.jobs.iter().find(|j| j.name == job.name);
            if old.is_none_or(|o| o.sinks != job.sinks) || !self.sinks.contains_key(&job.name) {
                let s = JobSinks::open(&job.name, &job.sinks, self.clock)
                    .with_context(|| format!("opening the sinks of job {:?}", job.name))?;
                opened.insert(job.name.clone(), s);
            }
        }
        let mut built = Vec::new();
        for (j, job) in new.jobs.iter().enumerate() {
            for (t, target) in job.targets.iter().enumerate() {
                let key = (job.name.clone(), target.target.to_string());
                if !self.by_key.contains_key(&key) || stopping_keys.contains(&key) {
                    built.push((j, t, self.build_target(job, target).await?));
                }
            }
        }
        // Commit: nothing below can fail.
        for id in stopping {
            if let Some(r) = self.running.get(&id) {
                tracing::info!(job = %r.job, target = %r.key, "stopping target");
                r.stop.cancel();
                self.by_key.remove(&(r.job.clone(), r.key.clone()));
                // Its series go now, so a restarted target never shows twice.
                lock(&self.metrics).remove(id);
            }
        }
        for (name, s) in opened {
            if let Some(mut old) = self.sinks.insert(name, s) {
                let _ = old.close();
            }
        }
        for (j, t, probe) in built {
            let job = &new.jobs[j];
            self.start_target(job, &job.targets[t], probe);
        }
        self.cfg = new;
        Ok(())
    }

    fn reopen_moved_files(&mut self) {
        for (job, s) in &mut self.sinks {
            match s.reopen_moved() {
                Ok(paths) => {
                    for path in paths {
                        tracing::info!(%job, path = %path.display(), "reopened a moved sink file");
                    }
                }
                Err(error) => tracing::error!(%job, %error, "reopening sink files failed"),
            }
        }
    }

    fn on_event(&mut self, ev: Event) {
        match ev {
            Event::Sample(s) => {
                let Some(r) = self.running.get(&s.target) else {
                    return;
                };
                if let Some(sinks) = self.sinks.get_mut(&r.job) {
                    match sinks.record(&r.info, &s) {
                        Ok(()) => self.failing.remove(&r.job),
                        // Logged once per failure streak, not once per sample.
                        Err(error) => {
                            if self.failing.insert(r.job.clone()) {
                                tracing::error!(job = %r.job, %error, "writing samples failed");
                            }
                            true
                        }
                    };
                }
                lock(&self.metrics).record(s.target, &s);
            }
            Event::Done { target, .. } => {
                let finished_job = self.running.remove(&target).map(|r| {
                    tracing::debug!(job = %r.job, target = %r.key, "target stopped");
                    r.job
                });
                lock(&self.metrics).remove(target);
                // A job gone from the config closes its sinks with its last
                // target. Only then is `running` scanned, so stopping
                // thousands of targets stays linear.
                if let Some(job) = finished_job
                    && !self.cfg.jobs.iter().any(|c| c.name == job)
                    && !self.running.values().any(|r| r.job == job)
                    && let Some(mut s) = self.sinks.remove(&job)
                {
                    let _ = s.close();
                }
            }
        }
    }

    fn tick(&mut self) {
        for (job, s) in &mut self.sinks {
            if let Err(error) = s.tick() {
                tracing::error!(%job, %error, "flushing sinks failed");
            }
        }
    }
}

/// Runs the daemon until SIGTERM or SIGINT.
///
/// # Errors
/// A bad config, a port that cannot be bound or a sink that cannot be
/// opened at start (exit 2). After start, errors are logged.
pub(crate) async fn run(path: &Path, args: &ServeArgs) -> anyhow::Result<ExitCode> {
    let cfg = config::load(path).await?;
    if args.check_config {
        let targets: usize = cfg.jobs.iter().map(|j| j.targets.len()).sum();
        println!(
            "config {} is valid: {} jobs, {targets} targets",
            path.display(),
            cfg.jobs.len()
        );
        return Ok(ExitCode::SUCCESS);
    }
    let root = CancellationToken::new();
    let listeners_stop = CancellationToken::new();
    let mut listeners = crate::cmd::serve::start_listeners(
        args,
        args.tcp.or(cfg.serve.tcp),
        args.udp.or(cfg.serve.udp),
        args.grpc.or(cfg.serve.grpc),
        &listeners_stop,
    )
    .await?;
    let metrics: SharedMetrics = Arc::new(Mutex::new(metrics::Metrics::default()));
    if let Some(addr) = args.metrics.or(cfg.metrics) {
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .with_context(|| format!("binding metrics {addr}"))?;
        let mut out = std::io::stdout();
        writeln!(out, "listening metrics {}", listener.local_addr()?)?;
        out.flush()?;
        listeners.spawn(serve_metrics(
            listener,
            Arc::clone(&metrics),
            listeners_stop.clone(),
        ));
    }
    let (events, mut rx) = mpsc::channel(EVENT_CHANNEL);
    let mut hup = signal(SignalKind::hangup()).context("listening for SIGHUP")?;
    let mut term = signal(SignalKind::terminate()).context("listening for SIGTERM")?;
    let mut d = Daemon {
        cfg: Config {
            serve: cfg.serve.clone(),
            metrics: cfg.metrics,
            jobs: Vec::new(),
        },
        next_id: 0,
        running: HashMap::new(),
        by_key: HashMap::new(),
        sinks: HashMap::new(),
        failing: std::collections::HashSet::new(),
        metrics,
        tasks: JoinSet::new(),
        events,
        icmp: IcmpClient::new(SocketKind::Auto, None),
        clock: Clock::now(),
        root: root.clone(),
    };
    d.apply(cfg).await?;
    tracing::info!(targets = d.running.len(), "daemon started");
    let mut tick = tokio::time::interval(TICK);
    // The new config is read and resolved in a task of its own, so events
    // keep flowing (and schedules keep running) while it loads.
    let mut loading: Option<tokio::task::JoinHandle<anyhow::Result<Config>>> = None;
    loop {
        tokio::select! {
            Some(ev) = rx.recv() => d.on_event(ev),
            _ = hup.recv() => {
                // As logrotate expects: files moved away are reopened at
                // once, whether or not the new config turns out valid.
                d.reopen_moved_files();
                if loading.is_none() {
                    let path = path.to_owned();
                    loading = Some(tokio::spawn(async move { config::load(&path).await }));
                }
            }
            res = async { loading.as_mut().expect("guarded by the branch condition").await }, if loading.is_some() => {
                loading = None;
                match res.map_err(anyhow::Error::from).and_then(|r| r) {
                    Ok(new) => {
                        if new.serve != d.cfg.serve {
                            tracing::warn!("[serve] listeners change only on restart");
                        }
                        match d.apply(new).await {
                            Ok(()) => tracing::info!(targets = d.by_key.len(), "config reloaded"),
                            Err(error) => tracing::error!("config rejected, keeping the old one: {error:#}"),
                        }
                    }
                    Err(error) => tracing::error!("config rejected, keeping the old one: {error:#}"),
                }
            }
            _ = term.recv() => break,
            _ = tokio::signal::ctrl_c() => break,
            _ = tick.tick() => {
                d.tick();
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
    for (job, s) in &mut d.sinks {
        if let Err(error) = s.close() {
            tracing::error!(%job, %error, "closing sinks failed");
        }
    }
    listeners_stop.cancel();
    while listeners.join_next().await.is_some() {}
    tracing::info!("daemon stopped");
    Ok(ExitCode::SUCCESS)
}

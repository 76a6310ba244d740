//! Checking the config: pure functions (no await, no socket) from the
//! [`super::schema`] structs to the settings the daemon runs with, each
//! error naming its key.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use prober_core::{Pacing, Registry, RunConfig, Target, parse_target};
use prober_sinks::prometheus::RESERVED_LABELS;

use super::schema::{
    DiscoverySection, FwMark, JobSection, JobSettings, LIMIT_KEYS, MetricsSection, OtlpSection,
    ProbingSection, ReceiveSection, ServeSection,
};
use super::{JobTarget, MetricsAuth, OtlpConfig, Result, WithKey};
use crate::error::{DaemonError, bail};

impl ProbingSection {
    /// `realtime_priority`, a `SCHED_FIFO` priority (1 to 99), if set.
    pub(super) fn realtime_priority(&self) -> Result<Option<u8>> {
        let Some(p) = self.realtime_priority else {
            return Ok(None);
        };
        match u8::try_from(p) {
            Ok(p) if (1..=prober_sys::sched::MAX_PRIORITY).contains(&p) => Ok(Some(p)),
            _ => bail!(
                "probing.realtime_priority: must be 1 to {} (a SCHED_FIFO priority), not {p}",
                prober_sys::sched::MAX_PRIORITY
            ),
        }
    }
}

impl OtlpSection {
    pub(super) fn settings(&self) -> Result<OtlpConfig> {
        let scheme_ok = ["http://", "https://"]
            .iter()
            .any(|p| self.endpoint.starts_with(p));
        if !scheme_ok {
            bail!(
                "otlp.endpoint: {} is not an http:// or https:// URL (OTLP over gRPC, e.g. http://127.0.0.1:4317)",
                prober_core::quote::short(&self.endpoint)
            );
        }
        let positive = |key: &str, v: Option<&String>, default: Duration| -> Result<Duration> {
            let d = duration(v, key, default)?;
            if d.is_zero() {
                bail!("{key}: must be greater than zero");
            }
            Ok(d)
        };
        Ok(OtlpConfig {
            endpoint: self.endpoint.clone(),
            interval: positive(
                "otlp.interval",
                self.interval.as_ref(),
                Duration::from_secs(10),
            )?,
            timeout: positive(
                "otlp.timeout",
                self.timeout.as_ref(),
                Duration::from_secs(5),
            )?,
        })
    }
}

impl ServeSection {
    /// Reads the listeners (each key a responder the registry lists, each
    /// value an address) into `listen`.
    ///
    /// # Errors
    /// A key that is no responder nor setting, or an address that does
    /// not parse, naming its key.
    pub(super) fn check(
        &mut self,
        registry: &Registry,
        base: &Path,
    ) -> std::result::Result<(), String> {
        use prober_net::options::ProtocolOptions;
        self.listen.clear();
        let served = ProtocolOptions::served(registry);
        let keys: Vec<(&'static ProtocolOptions, Vec<String>)> =
            served.iter().map(|o| (*o, o.keys())).collect();
        let mut tables: Vec<toml::Table> = vec![toml::Table::new(); served.len()];
        for (key, value) in &self.given {
            if let Some(i) = keys.iter().position(|(_, k)| k.contains(key)) {
                tables[i].insert(key.clone(), value.clone());
                continue;
            }
            let Some(r) = registry.responder(key).filter(|r| !r.hidden) else {
                let listeners: Vec<&str> = registry
                    .responders()
                    .filter(|r| !r.hidden)
                    .map(|r| r.name)
                    .collect();
                let settings: Vec<&str> = keys
                    .iter()
                    .flat_map(|(_, k)| k.iter().map(String::as_str))
                    .chain(LIMIT_KEYS.iter().copied())
                    .collect();
                return Err(format!(
                    "serve: unknown field `{key}`, expected a listener ({}) or one of {}",
                    listeners.join(", "),
                    settings.join(", ")
                ));
            };
            let addr = value
                .as_str()
                .ok_or_else(|| format!("serve.{key}: give the address as a string, \"IP:PORT\""))?
                .parse::<SocketAddr>()
                .map_err(|e| format!("serve.{key}: {e}"))?;
            self.listen.push((r.name, addr));
        }
        self.own = prober_net::options::OptionSet::default();
        for ((o, _), table) in keys.iter().zip(tables) {
            let given: Vec<String> = table.keys().cloned().collect();
            let mut v =
                (o.from_toml)(toml::Value::Table(table)).map_err(|e| format!("serve: {e}"))?;
            v.rebase(base);
            // Read now (the STAMP key file), so a file that cannot be used
            // is refused at load, naming its key.
            v.put(&prober_core::shared::Shared::default(), None, Some("serve"))?;
            if !given.is_empty() {
                let takers: Vec<&str> = o.responders(registry).iter().map(|r| r.name).collect();
                if !takers.iter().any(|t| self.addr(t).is_some()) {
                    return Err(format!(
                        "serve.{}: applies to the {} listener, which [serve] does not start",
                        given[0],
                        takers.join(" or ")
                    ));
                }
            }
            self.own.0.push((*o, v));
        }
        Ok(())
    }

    /// The keys the file gives for the responders' options `o`.
    pub fn given_for(&self, o: &prober_net::options::ProtocolOptions) -> Vec<String> {
        let keys = o.keys();
        self.given
            .keys()
            .filter(|k| keys.contains(k))
            .cloned()
            .collect()
    }

    /// Where the responder `name` listens, if the section says.
    pub fn addr(&self, name: &str) -> Option<SocketAddr> {
        self.listen
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, a)| *a)
    }

    /// The limits this section gives.
    ///
    /// # Errors
    /// A duration that does not parse, or is zero, naming its key.
    pub fn limit_settings(&self) -> std::result::Result<crate::responder::LimitSettings, String> {
        let dur = |key: &str,
                   v: &Option<String>|
         -> std::result::Result<Option<std::time::Duration>, String> {
            v.as_deref()
                .map(|t| match prober_core::duration::parse_duration(t) {
                    Ok(d) if d.is_zero() => Err(format!("serve.{key}: must be greater than zero")),
                    Ok(d) => Ok(d),
                    Err(e) => Err(format!("serve.{key}: {e}")),
                })
                .transpose()
        };
        Ok(crate::responder::LimitSettings {
            rate_limit: self.rate_limit,
            max_conns: self.max_conns,
            max_conns_per_source: self.max_conns_per_source,
            request_timeout: dur("request_timeout", &self.request_timeout)?,
            idle_timeout: dur("idle_timeout", &self.idle_timeout)?,
            udp_follow_ups: self.udp_follow_ups,
        })
    }
}

/// A secret's file, relative to the config's folder, without its final
/// line break; empty is refused.
pub(super) fn read_secret(key: &str, path: &Path, base: &Path) -> Result<String> {
    let path = base.join(path);
    // Capped: a path to /dev/zero must not read until memory runs out.
    let text = crate::file_sd::read_capped(&path).ctx(|| format!("{key}: {}", path.display()))?;
    let secret = text.trim_end_matches(['\n', '\r']).to_owned();
    if secret.is_empty() {
        bail!("{key}: {} is empty", path.display());
    }
    Ok(secret)
}

impl MetricsSection {
    pub(super) fn auth(&self, base: &Path) -> Result<Option<MetricsAuth>> {
        match (&self.basic_auth, &self.bearer_token_file) {
            (Some(_), Some(_)) => {
                bail!("metrics: set basic_auth or bearer_token_file, not both")
            }
            (Some(b), None) => {
                if b.user.is_empty() || b.user.contains(':') {
                    bail!("metrics.basic_auth.user: must be non-empty and without ':'");
                }
                Ok(Some(MetricsAuth::Basic {
                    user: b.user.clone(),
                    password: read_secret(
                        "metrics.basic_auth.password_file",
                        &b.password_file,
                        base,
                    )?,
                }))
            }
            (None, Some(path)) => Ok(Some(MetricsAuth::Bearer(read_secret(
                "metrics.bearer_token_file",
                path,
                base,
            )?))),
            (None, None) => Ok(None),
        }
    }

    pub(super) fn buckets(&self) -> Result<prober_sinks::prometheus::Buckets> {
        let mut b = prober_sinks::prometheus::Buckets::default();
        if let Some(classic) = &self.buckets {
            if classic.is_empty() || classic.len() > 100 {
                bail!(
                    "metrics.buckets: give 1 to 100 bucket bounds (seconds), not {}",
                    classic.len()
                );
            }
            if let Some(bad) = classic.iter().find(|v| !(v.is_finite() && **v > 0.0)) {
                bail!("metrics.buckets: {bad} is not a positive number of seconds");
            }
            if classic.windows(2).any(|w| w[0] >= w[1]) {
                bail!("metrics.buckets: bounds must rise strictly ({classic:?})");
            }
            b.classic = classic.as_slice().into();
        }
        b.native_factor = match (self.native_histograms, self.native_bucket_factor) {
            (Some(false), _) => None,
            (_, Some(f)) if !(f.is_finite() && f > 1.0 && f <= 65536.0) => {
                bail!(
                    "metrics.native_bucket_factor: {f} must be above 1 (1.1 gives buckets 9 % wide)"
                )
            }
            (_, f) => Some(f.unwrap_or(prober_sinks::prometheus::NATIVE_FACTOR)),
        };
        b.families = self.families()?;
        if b.native_factor.is_none() {
            b.families = b.families.without_native();
        }
        Ok(b)
    }

    /// `histograms = { ... }` over the default families; `parts = true` is
    /// `parts = "both"`.
    pub(super) fn families(&self) -> Result<prober_sinks::prometheus::Families> {
        use prober_sinks::prometheus::HistMode;
        let mut f = prober_sinks::prometheus::Families::default();
        if self.parts {
            f.parts = HistMode::Both;
        }
        for (family, mode) in self.histograms.iter().flatten() {
            let key = format!("metrics.histograms.{family}");
            let Some(m) = HistMode::parse(mode) else {
                bail!(
                    "{key}: {:?} is not one of {}",
                    prober_core::quote::short(mode),
                    HistMode::NAMES.join(", ")
                );
            };
            let slot = match family.as_str() {
                "rtt" => &mut f.rtt,
                "latency" => &mut f.latency,
                "send_lag" => &mut f.send_lag,
                "ipdv" => &mut f.ipdv,
                "loss_burst" => &mut f.loss_burst,
                "phases" => &mut f.phases,
                "parts" if self.parts => {
                    bail!("{key}: give parts here or metrics.parts = true, not both")
                }
                "parts" => &mut f.parts,
                _ => bail!(
                    "metrics.histograms: no family {:?} (rtt, latency, send_lag, ipdv, loss_burst, phases, parts)",
                    prober_core::quote::short(family)
                ),
            };
            if family == "loss_burst" && m.native() {
                bail!("{key}: \"off\" or \"classic\" (its buckets count probes, not seconds)");
            }
            *slot = m;
        }
        Ok(f)
    }
}

impl DiscoverySection {
    pub(super) fn settings(&self) -> Result<crate::dns_sd::Settings> {
        let d = crate::dns_sd::Settings::default();
        let server = match &self.server {
            None => None,
            Some(text) => Some(
                text.parse::<SocketAddr>()
                    .or_else(|_| {
                        text.parse::<std::net::IpAddr>()
                            .map(|ip| SocketAddr::new(ip, 53))
                    })
                    .map_err(|_| {
                        DaemonError::Config(format!(
                            "discovery.server: {} is not an address (10.0.0.53 or 10.0.0.53:5353)",
                            prober_core::quote::short(text)
                        ))
                    })?,
            ),
        };
        let floor = duration(self.ttl_floor.as_ref(), "discovery.ttl_floor", d.ttl_floor)?;
        let ceiling = duration(
            self.ttl_ceiling.as_ref(),
            "discovery.ttl_ceiling",
            d.ttl_ceiling,
        )?;
        if floor.is_zero() {
            bail!("discovery.ttl_floor: must be greater than zero");
        }
        if ceiling < floor {
            bail!("discovery.ttl_ceiling: must not be below ttl_floor");
        }
        let resolve_every = duration(
            self.resolve_every.as_ref(),
            "discovery.resolve_every",
            d.resolve_every,
        )?;
        if resolve_every.is_zero() {
            bail!("discovery.resolve_every: must be greater than zero");
        }
        Ok(crate::dns_sd::Settings {
            server,
            ttl_floor: floor,
            ttl_ceiling: ceiling,
            resolve_every,
        })
    }
}

impl ReceiveSection {
    /// Adaptive unless the file says `async`: at 10,000 ICMP targets at
    /// 1 Hz it took the RTT p50 from 45-55 to 7 µs at the same CPU (6 runs
    /// alternating, the median of the pairs' differences about 0 cores;
    /// BENCHMARKS.md), and its spins never take more than `cpu_share`.
    /// A daemon that also answers keeps async unless told (see
    /// [`Config::receive_for`]).
    pub(super) fn receive(&self) -> Result<prober_core::spin::Receive> {
        match self.mode.as_deref() {
            Some("async") => {
                // Not ignored: a spin setting with async would do nothing.
                for (key, set) in [
                    ("spin_budget", self.spin_budget.is_some()),
                    ("cpu_share", self.cpu_share.is_some()),
                ] {
                    if set {
                        bail!(
                            "receive.{key} applies only to mode = \"adaptive\", and mode is \"async\""
                        );
                    }
                }
                Ok(prober_core::spin::Receive::Event)
            }
            None | Some("adaptive") => {
                let budget = duration(
                    self.spin_budget.as_ref(),
                    "receive.spin_budget",
                    prober_core::spin::DEFAULT_SPIN_BUDGET,
                )?;
                let budget = prober_core::spin::check_budget(budget)
                    .map_err(|e| DaemonError::Config(format!("receive.spin_budget: {e}")))?;
                let permille = prober_core::spin::check_share(self.cpu_share.unwrap_or(0.02))
                    .map_err(|e| DaemonError::Config(format!("receive.cpu_share: {e}")))?;
                Ok(prober_core::spin::Receive::Adaptive(
                    prober_core::spin::SpinPool::new(budget, permille),
                ))
            }
            Some(other) => bail!("receive.mode: {other:?} is neither \"async\" nor \"adaptive\""),
        }
    }
}

pub(super) fn duration(value: Option<&String>, key: &str, default: Duration) -> Result<Duration> {
    match value {
        None => Ok(default),
        Some(text) => prober_core::duration::parse_duration(text).ctx(|| key.to_owned()),
    }
}

pub(super) fn pacing(value: Option<&String>, key: &str) -> Result<Pacing> {
    match value {
        None => Ok(Pacing::Timer),
        Some(text) => text.parse().ctx(|| key.to_owned()),
    }
}

/// A label name a job or a file_sd group may give its series.
pub(super) fn check_label(name: &str) -> std::result::Result<(), String> {
    if valid_label_name(name) && !RESERVED_LABELS.contains(&name) {
        return Ok(());
    }
    Err(format!(
        "not a usable Prometheus label name (letters, digits and _, not starting with __; {} are reserved)",
        RESERVED_LABELS.join(", ")
    ))
}

pub(super) fn valid_label_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
        && !name.starts_with("__")
}

/// Replaces every `${NAME}` in a label value with the environment
/// variable's value (Kubernetes' downward API puts the node's name there).
pub(super) fn expand_env(
    value: &str,
    get: impl Fn(&str) -> Option<String>,
) -> std::result::Result<String, String> {
    let mut out = String::with_capacity(value.len());
    let mut rest = value;
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let Some(len) = rest[start + 2..].find('}') else {
            return Err("a ${ without its }".to_owned());
        };
        let name = &rest[start + 2..start + 2 + len];
        match get(name) {
            Some(v) => out.push_str(&v),
            None => {
                return Err(format!(
                    "the environment variable {} is not set",
                    prober_core::quote::short(name)
                ));
            }
        }
        rest = &rest[start + 3 + len..];
    }
    out.push_str(rest);
    Ok(out)
}

/// A job's settings, checked: all but its targets.
pub(super) struct Settings {
    /// How errors name the job: `job[0] ("web")`.
    pub(super) key: String,
    pub(super) run: RunConfig,
    pub(super) size: Option<usize>,
    pub(super) marks: prober_core::protocol::Marks,
    pub(super) labels: BTreeMap<String, String>,
    pub(super) sinks: prober_sinks::file_config::JobSinks,
    pub(super) tls: prober_core::protocol::TlsFiles,
    pub(super) max_targets: usize,
    pub(super) flows: u16,
    pub(super) exclude_self: bool,
    pub(super) trace_every: Option<Duration>,
    /// `trace_every` is the job's own, not `[defaults]`', and its targets
    /// are all listed in it: such a job must have a target to trace; one
    /// that inherits it, or discovers its targets, may have none.
    pub(super) trace_own: bool,
    pub(super) trace_hops: bool,
    pub(super) trace_rounds: u32,
}

/// The most measuring rounds a trace may take (`trace_rounds`).
const MAX_TRACE_ROUNDS: u32 = 20;

/// Checks job `i`'s settings, each its own or `defaults`'; `env` reads the
/// environment for `${NAME}` in label values. No await, no socket: what
/// discovery and resolution need comes out checked.
///
/// # Errors
/// The first setting refused, naming its key.
pub(super) fn settings(
    j: &JobSection,
    i: usize,
    defaults: &JobSettings,
    base: &Path,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Settings> {
    let key = format!("job[{i}] ({:?})", j.name);
    if j.name.is_empty() {
        bail!("job[{i}].name: must not be empty");
    }
    let s = &j.settings;
    let pick = |a: &Option<String>, b: &Option<String>| a.clone().or_else(|| b.clone());
    let interval = duration(
        pick(&s.interval, &defaults.interval).as_ref(),
        &format!("{key}.interval"),
        Duration::from_secs(1),
    )?;
    if interval.is_zero() {
        bail!("{key}.interval: the daemon needs an interval above zero");
    }
    let timeout = duration(
        pick(&s.timeout, &defaults.timeout).as_ref(),
        &format!("{key}.timeout"),
        Duration::from_secs(1),
    )?;
    let pacing = pacing(
        pick(&s.pacing, &defaults.pacing).as_ref(),
        &format!("{key}.pacing"),
    )?;
    let run = RunConfig {
        interval,
        count: None,
        duration: None,
        burst: 1,
        pacing,
        timeout,
        warmup: 0,
        max_in_flight: 4096,
        // One timerfd per target would not scale to thousands of targets;
        // at daemon intervals the runtime's timer is precise enough.
        precise_timer: false,
    };
    run.validate().ctx(|| key.clone())?;
    let tos = match (pick(&s.dscp, &defaults.dscp), s.tos.or(defaults.tos)) {
        (Some(_), Some(_)) => bail!("{key}: give dscp or tos, not both"),
        (Some(d), None) => Some(
            prober_sys::mark::tos_of_dscp(&d)
                .map_err(|e| DaemonError::Config(format!("{key}.dscp: {e}")))?,
        ),
        (None, t) => t,
    };
    let fwmark = match s.fwmark.clone().or_else(|| defaults.fwmark.clone()) {
        None => None,
        Some(FwMark::Number(n)) => Some(n),
        Some(FwMark::Text(t)) => Some(
            prober_sys::mark::parse_fwmark(&t)
                .map_err(|e| DaemonError::Config(format!("{key}.fwmark: {e}")))?,
        ),
    };
    let marks = prober_core::protocol::Marks {
        tos,
        source: s.source.or(defaults.source),
        interface: pick(&s.interface, &defaults.interface),
        fwmark,
    };
    let mut labels = defaults.labels.clone();
    labels.extend(s.labels.clone());
    for (name, value) in &mut labels {
        let within = |e: String| {
            DaemonError::Config(format!(
                "{key}.labels.{}: {e}",
                prober_core::quote::short(name)
            ))
        };
        check_label(name).map_err(within)?;
        *value = expand_env(value, env).map_err(within)?;
    }
    let sinks = match s.sinks.as_ref().or(defaults.sinks.as_ref()) {
        Some(sinks) => sinks
            .check(&format!("{key}.sinks"), base)
            .map_err(DaemonError::Config)?,
        None => prober_sinks::file_config::JobSinks::default(),
    };
    let max_targets = s.max_targets.or(defaults.max_targets).unwrap_or(10_000);
    if max_targets == 0 {
        bail!("{key}.max_targets: must be at least 1");
    }
    let tls = match s.tls.clone().or_else(|| defaults.tls.clone()) {
        None => prober_core::protocol::TlsFiles::default(),
        Some(t) => prober_core::protocol::TlsFiles {
            roots: match t.roots.as_deref() {
                None | Some("system") => prober_core::protocol::Roots::System,
                Some("mozilla") => prober_core::protocol::Roots::Mozilla,
                Some(other) => bail!(
                    "{key}.tls.roots: {:?} is not \"system\" or \"mozilla\"",
                    prober_core::quote::short(other)
                ),
            },
            ca: t.ca.map(|p| base.join(p)),
            cert: t.cert.map(|p| base.join(p)),
            key: t.key.map(|p| base.join(p)),
            server_name: t.server_name,
            insecure: t.insecure,
        },
    };
    let trace_every = match pick(&s.trace_every, &defaults.trace_every) {
        None => None,
        Some(t) => {
            let d = duration(Some(&t), &format!("{key}.trace_every"), Duration::ZERO)?;
            if d < Duration::from_secs(1) {
                bail!("{key}.trace_every: trace at most once a second (a trace takes seconds)");
            }
            Some(d)
        }
    };
    let trace_hops = s.trace_hops.or(defaults.trace_hops) == Some(true);
    let trace_rounds = s.trace_rounds.or(defaults.trace_rounds).unwrap_or(0);
    if trace_rounds > 0 && !trace_hops {
        bail!(
            "{key}.trace_rounds: measures the hops that trace_hops exports: set trace_hops = true too"
        );
    }
    if trace_rounds > MAX_TRACE_ROUNDS {
        bail!(
            "{key}.trace_rounds: at most {MAX_TRACE_ROUNDS} (each round probes every hop of every branch, and routers limit their ICMP)"
        );
    }
    Ok(Settings {
        trace_every,
        // A job whose targets come from discovery may have none for now
        // (DNS down, an empty file): that is no reason to refuse it.
        trace_own: s.trace_every.is_some()
            && j.targets_file.is_none()
            && j.file_sd.is_empty()
            && j.dns_sd.is_empty(),
        trace_hops,
        trace_rounds,
        run,
        size: s.size.or(defaults.size),
        marks,
        labels,
        sinks,
        tls,
        max_targets,
        flows: s.flows.or(defaults.flows).unwrap_or(1),
        exclude_self: s.exclude_self.or(defaults.exclude_self) == Some(true),
        key,
    })
}

/// A target as found (listed, in a file, or in DNS), not yet checked.
#[derive(Debug)]
pub(super) struct Found {
    /// Its URL.
    pub(super) text: String,
    /// Its own labels (its `file_sd` group's, its `dns_name`).
    pub(super) labels: BTreeMap<String, String>,
    /// Found in DNS: a discovered target also listed elsewhere is skipped,
    /// not refused as listed twice.
    pub(super) discovered: bool,
}

/// A target parsed and checked against its job's settings.
#[derive(Debug)]
pub(super) struct Checked {
    pub(super) target: Target,
    pub(super) labels: BTreeMap<String, String>,
    /// Its request size, where its protocol sends a payload.
    pub(super) size: Option<usize>,
}

/// Parses and checks what was found, each target once: at most
/// `max_targets` of them, and how many more there were.
///
/// # Errors
/// A target that does not parse, one listed twice, marks or a size its
/// protocol cannot take.
pub(super) fn targets(
    found: Vec<Found>,
    s: &Settings,
    registry: &Registry,
) -> Result<(Vec<Checked>, u64)> {
    let key = &s.key;
    let mut targets = Vec::with_capacity(found.len().min(s.max_targets));
    let mut seen = std::collections::HashSet::new();
    let mut over = 0u64;
    for f in found {
        let target = parse_target(registry, &f.text).ctx(|| format!("{key}.targets"))?;
        if !seen.insert(target.to_string()) {
            if f.discovered {
                continue;
            }
            bail!("{key}.targets: {target} is listed twice");
        }
        if targets.len() == s.max_targets {
            over += 1;
            continue;
        }
        if s.marks.any() && !target.protocol.options.marks {
            bail!(
                "{key}: dscp, tos, source, interface and fwmark apply only to icmp, udp and tcp targets, not {target}"
            );
        }
        let size = target.size(s.size);
        if let Some(n) = size {
            target.check_size(n).ctx(|| format!("{key}.size"))?;
        }
        targets.push(Checked {
            target,
            labels: f.labels,
            size,
        });
    }
    if s.trace_own
        && !targets
            .iter()
            .any(|c| matches!(c.target.scheme.name, "udp" | "tcp" | "icmp"))
    {
        bail!(
            "{key}.trace_every: traces the paths to udp://, tcp:// and icmp:// targets, and this job has none"
        );
    }
    Ok((targets, over))
}

/// The job's targets at the addresses found for them (one per target of
/// `checked`, in order), one for each of its flows.
///
/// # Errors
/// A `source` of another address family than a target's address, or a
/// flow count its protocol cannot take.
pub(super) fn placed(
    checked: Vec<Checked>,
    addrs: Vec<std::result::Result<SocketAddr, String>>,
    s: &Settings,
    registry: &Registry,
) -> Result<Vec<JobTarget>> {
    let key = &s.key;
    let mut out = Vec::with_capacity(checked.len());
    for (c, addr) in checked.into_iter().zip(addrs) {
        if let Ok(a) = &addr {
            s.marks.check_family(*a).map_err(|e| {
                DaemonError::Config(format!("{key}.source: {e}, the address of {}", c.target))
            })?;
        }
        for flow in c
            .target
            .flows(s.flows, registry)
            .ctx(|| format!("{key}.flows"))?
        {
            out.push(JobTarget {
                target: flow,
                addr: addr.clone(),
                size: c.size,
                labels: c.labels.clone(),
            });
        }
    }
    Ok(out)
}

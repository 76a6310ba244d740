//! The daemon's TOML configuration: parsing, defaults and validation.
//!
//! Every error names the file, the key and the reason, so a bad config fails
//! at start (exit 2) or, on reload, is logged and rejected.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use prober_core::{Pacing, Registry, RunConfig, Target, parse_target};
use prober_net::{Family, resolve};
use prober_sinks::prometheus::RESERVED_LABELS;
use serde::Deserialize;

use crate::error::{DaemonError, bail};

type Result<T> = std::result::Result<T, DaemonError>;

/// Adds the key a config error is under to its message: `key: error`.
/// (Not core's `Context`, the run settings sinks see.)
trait WithKey<T> {
    fn ctx(self, what: impl FnOnce() -> String) -> Result<T>;
}

impl<T, E: std::fmt::Display> WithKey<T> for std::result::Result<T, E> {
    fn ctx(self, what: impl FnOnce() -> String) -> Result<T> {
        self.map_err(|e| DaemonError::Config(format!("{}: {e}", what())))
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileConfig {
    /// A config with no jobs is meant (a responder only, or every job
    /// removed on purpose): without it, a reload that finds no jobs (a
    /// config tool that truncated the file mid-write) is refused.
    #[serde(default)]
    allow_empty: bool,
    /// With the protocols' tables (`[defaults.http]`) set aside.
    #[serde(default)]
    defaults: crate::own_tables::WithOwn<JobSettings>,
    #[serde(default)]
    serve: ServeSection,
    metrics: Option<MetricsSection>,
    #[serde(default)]
    stamps: StampsSection,
    #[serde(default)]
    receive: ReceiveSection,
    #[serde(default)]
    discovery: DiscoverySection,
    otlp: Option<OtlpSection>,
    blackbox: Option<BlackboxSection>,
    /// With the protocols' tables (`[job.http]`) set aside.
    #[serde(default, rename = "job")]
    jobs: Vec<crate::own_tables::WithOwn<JobSection>>,
}

/// `[otlp]`: push metrics to an OpenTelemetry collector.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct OtlpSection {
    /// `http://collector:4317` (OTLP over gRPC).
    endpoint: String,
    /// How often to push (`10s` by default).
    interval: Option<String>,
    /// How long one push may take (`5s` by default).
    timeout: Option<String>,
}

impl OtlpSection {
    fn settings(&self) -> Result<OtlpConfig> {
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

/// Where the daemon pushes OTLP metrics (`[otlp]`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OtlpConfig {
    /// The collector's OTLP/gRPC URL.
    pub endpoint: String,
    /// How often.
    pub interval: Duration,
    /// The time one push may take.
    pub timeout: Duration,
}

/// `[serve]`'s keys for the responders' limits (beside the listeners and
/// the responders' own settings).
const LIMIT_KEYS: &[&str] = &[
    "rate_limit",
    "max_conns",
    "max_conns_per_source",
    "request_timeout",
    "idle_timeout",
    "udp_follow_ups",
];

/// Responder listeners to run beside the jobs.
///
/// Not `deny_unknown_fields`: the listeners' keys are the names of the
/// registry's responders (`tcp = "0.0.0.0:8707"`), gathered in `given`
/// and checked when the config is read, which refuses any other key.
#[derive(Debug, Default, Clone, PartialEq, Deserialize)]
pub struct ServeSection {
    /// The listeners as written, and anything else not named below.
    #[serde(flatten)]
    given: BTreeMap<String, toml::Value>,
    /// The listeners, checked: a responder's name and its address.
    #[serde(skip)]
    pub listen: Vec<(&'static str, SocketAddr)>,
    /// The responders' own settings (`stamp_key`, ...: each responder's
    /// options type names its keys), checked, one per options type.
    #[serde(skip)]
    pub own: prober_net::options::OptionSet,
    /// UDP replies per second per source address; 0 for no limit
    /// (docs/security.md).
    pub rate_limit: Option<u32>,
    /// Connections open at once; 0 for no limit.
    pub max_conns: Option<usize>,
    /// Connections open at once per source address; 0 for no limit.
    pub max_conns_per_source: Option<usize>,
    /// Time to a connection's first whole request (`10s`).
    pub request_timeout: Option<String>,
    /// Silence allowed between requests (`5m`).
    pub idle_timeout: Option<String>,
    /// UDP follow-up frames to sources other than loopback.
    #[serde(default)]
    pub udp_follow_ups: bool,
}

impl ServeSection {
    /// Reads the listeners (each key a responder the registry lists, each
    /// value an address) into `listen`.
    ///
    /// # Errors
    /// A key that is no responder nor setting, or an address that does
    /// not parse, naming its key.
    fn check(&mut self, registry: &Registry, base: &Path) -> std::result::Result<(), String> {
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

/// `[blackbox]`: `/probe` as blackbox_exporter serves it.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct BlackboxSection {
    /// blackbox_exporter's `blackbox.yml`, whose modules `/probe` serves.
    config: Option<PathBuf>,
    /// Host name globs and address ranges `/probe` may probe (`["*"]`:
    /// anything).
    allowed_targets: Option<Vec<String>>,
}

/// `[blackbox]`, checked; read at start only (SIGHUP reloads the modules
/// file itself).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct BlackboxSettings {
    /// The modules file, relative to the config's directory.
    pub config: Option<PathBuf>,
    /// `allowed_targets` as written (checked).
    pub allowed_targets: Option<Vec<String>>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct MetricsSection {
    /// 127.0.0.1:9707 unless given: only this host can read the metrics
    /// and the status page until they are exposed on purpose.
    #[serde(default = "default_metrics_listen")]
    listen: SocketAddr,
    #[serde(default)]
    parts: bool,
    /// Classic bucket bounds, seconds.
    buckets: Option<Vec<f64>>,
    /// Native (exponential) buckets for protobuf scrapes; on by default.
    native_histograms: Option<bool>,
    /// Their growth factor (1.1 by default).
    native_bucket_factor: Option<f64>,
    /// Which histogram families are exported, and how: `off`, `classic`,
    /// `native` or `both`, by family (`rtt`, `latency`, `send_lag`,
    /// `ipdv`, `loss_burst`, `phases`, `parts`).
    histograms: Option<BTreeMap<String, String>>,
    /// HTTP basic authentication for every page but `/healthz` and
    /// `/readyz`.
    basic_auth: Option<BasicAuthSection>,
    /// A bearer token (in a file) instead.
    bearer_token_file: Option<PathBuf>,
    /// TLS, in the exporter-toolkit web config format (docs/config.md).
    web_config: Option<PathBuf>,
}

fn default_metrics_listen() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 9707))
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct BasicAuthSection {
    user: String,
    password_file: PathBuf,
}

/// What `/metrics` and the status page ask of a client.
#[derive(Clone, PartialEq, Eq)]
pub enum MetricsAuth {
    /// `Authorization: Basic` with this user and password.
    Basic {
        /// The user name.
        user: String,
        /// The password, from `password_file`.
        password: String,
    },
    /// `Authorization: Bearer` with this token.
    Bearer(String),
}

impl std::fmt::Debug for MetricsAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never a secret in a log line.
        match self {
            Self::Basic { user, .. } => write!(f, "Basic({user:?}, password hidden)"),
            Self::Bearer(_) => f.write_str("Bearer(token hidden)"),
        }
    }
}

/// A secret's file, relative to the config's folder, without its final
/// line break; empty is refused.
fn read_secret(key: &str, path: &Path, base: &Path) -> Result<String> {
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
    fn auth(&self, base: &Path) -> Result<Option<MetricsAuth>> {
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

    fn buckets(&self) -> Result<prober_sinks::prometheus::Buckets> {
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
    fn families(&self) -> Result<prober_sinks::prometheus::Families> {
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

/// `[discovery]`: the DNS server and TTL bounds of jobs' `dns_sd` names.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct DiscoverySection {
    /// `"10.0.0.53"` or `"10.0.0.53:5353"`; the system's if absent.
    server: Option<String>,
    ttl_floor: Option<String>,
    ttl_ceiling: Option<String>,
    /// How often targets given by name are resolved again.
    resolve_every: Option<String>,
}

impl DiscoverySection {
    fn settings(&self) -> Result<crate::dns_sd::Settings> {
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

/// `[stamps]`: kernel timestamps the daemon asks for.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct StampsSection {
    #[serde(default)]
    transmit: bool,
}

/// `[receive]`: how UDP, ICMP, TCP and gRPC probes wait for replies, as `prober
/// run`'s `--receive` and `--spin-budget`; read at start only.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct ReceiveSection {
    /// `adaptive` (the default) or `async`.
    mode: Option<String>,
    /// The longest spin after one send (`100us` by default).
    spin_budget: Option<String>,
    /// The share of one CPU all spins together may take (0.02 by default).
    cpu_share: Option<f64>,
}

impl ReceiveSection {
    /// Adaptive unless the file says `async`: at 10,000 ICMP targets at
    /// 1 Hz it took the RTT p50 from 45-55 to 7 µs at the same CPU (6 runs
    /// alternating, the median of the pairs' differences about 0 cores;
    /// BENCHMARKS.md), and its spins never take more than `cpu_share`.
    /// A daemon that also answers keeps async unless told (see
    /// [`Config::receive_for`]).
    fn receive(&self) -> Result<prober_core::spin::Receive> {
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

/// `[job.tls]`, as `prober run`'s `--ca`, `--cert`, `--key`,
/// `--tls-server-name` and `--insecure`.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct TlsSection {
    ca: Option<PathBuf>,
    /// `"system"` (the default) or `"mozilla"`: the roots without `ca`.
    roots: Option<String>,
    cert: Option<PathBuf>,
    key: Option<PathBuf>,
    server_name: Option<String>,
    #[serde(default)]
    insecure: bool,
}

/// Declares [`JobSettings`] (what a job may set and `[defaults]` may give
/// to every job) and [`JobSection`] (a `[[job]]`: its name, targets and
/// the same settings) from one list of fields. The settings are spelled
/// into `JobSection` rather than `#[serde(flatten)]`ed: a flattened table
/// loses the keys' positions, so every error pointed at the `[[job]]`
/// header.
macro_rules! job_settings {
    ($( $(#[$attr:meta])* $field:ident: $ty:ty, )*) => {
        /// Settings a job may set and `[defaults]` may give to every job.
        #[derive(Debug, Default, Clone, Deserialize)]
        #[serde(deny_unknown_fields)]
        struct JobSettings {
            $( $(#[$attr])* $field: $ty, )*
        }

        #[derive(Debug, Deserialize)]
        #[serde(deny_unknown_fields)]
        struct JobSection {
            name: String,
            #[serde(default)]
            targets: Vec<String>,
            targets_file: Option<PathBuf>,
            /// Prometheus `file_sd` files (JSON or YAML) with more targets.
            #[serde(default)]
            file_sd: Vec<PathBuf>,
            /// The scheme of `file_sd` entries written `host:port`.
            file_sd_scheme: Option<String>,
            /// Targets from DNS: `udp://peers.example:7` (every A/AAAA
            /// address, port 7) or `udp://_prober._udp.example` (SRV).
            #[serde(default)]
            dns_sd: Vec<String>,
            $( $(#[$attr])* $field: $ty, )*
            #[serde(skip)]
            settings: JobSettings,
        }

        impl JobSection {
            /// Gathers the settings into [`JobSection::settings`].
            fn gather(&mut self) {
                self.settings = JobSettings { $( $field: self.$field.clone(), )* };
            }
        }
    };
}

job_settings! {
    /// At most this many targets (static and discovered): the rest are
    /// dropped, logged and counted [default: 10,000].
    max_targets: Option<usize>,
    /// Skip discovered addresses that are this host's own (mesh mode).
    exclude_self: Option<bool>,
    /// Spread each udp/tcp target over this many flows (source ports).
    flows: Option<u16>,
    /// `dscp = "ef"` or a number 0..=63: the TOS byte of requests.
    dscp: Option<String>,
    /// The TOS byte itself, 0..=255 (not with `dscp`).
    tos: Option<u8>,
    /// The local address requests leave from.
    source: Option<std::net::IpAddr>,
    /// The interface requests leave through.
    interface: Option<String>,
    /// The firewall mark of requests (a number, or a string "0x2a").
    fwmark: Option<FwMark>,
    interval: Option<String>,
    timeout: Option<String>,
    pacing: Option<String>,
    size: Option<usize>,
    #[serde(default)]
    labels: BTreeMap<String, String>,
    sinks: Option<prober_sinks::file_config::SinksConfig>,
    /// `[job.tls]`: how `https://` and `grpcs://` targets check servers.
    tls: Option<TlsSection>,
}

/// One target of a job, resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobTarget {
    /// The target.
    pub target: Target,
    /// Where it resolved, or why it did not: a name that does not resolve
    /// is probed as a target whose every slot fails with `resolve`, and
    /// tried again on `resolve_every` (sooner at first, see
    /// [`crate::dns_sd::Discovery::target_name`]).
    pub addr: std::result::Result<SocketAddr, String>,
    /// Its request size, where its protocol sends a payload.
    pub size: Option<usize>,
    /// Labels of this target alone (from its `file_sd` group), added to
    /// the job's.
    pub labels: BTreeMap<String, String>,
}

/// A validated job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Job {
    /// Its name, unique in the file.
    pub name: String,
    /// Its targets, resolved.
    pub targets: Vec<JobTarget>,
    /// How its targets are probed.
    pub run: RunConfig,
    /// The size given for every target, if any.
    pub size: Option<usize>,
    /// Extra labels of its series.
    pub labels: BTreeMap<String, String>,
    /// Its files.
    pub sinks: prober_sinks::file_config::JobSinks,
    /// What its HTTP and DNS targets send and accept.
    pub options: JobOptions,
    /// How its TLS targets check servers (`[job.tls]`).
    pub tls: prober_core::protocol::TlsFiles,
    /// Files its targets come from (`targets_file`, `file_sd`): the daemon
    /// reloads when one changes.
    pub watched: Vec<PathBuf>,
    /// Where and how its requests leave: `dscp`/`tos`, `source`,
    /// `interface`, `fwmark`.
    pub marks: prober_core::protocol::Marks,
    /// When its first `dns_sd` name is due to be looked up again.
    pub refresh_at: Option<std::time::Instant>,
}

impl Job {
    /// Whether `other` runs its targets the same way (targets aside), so
    /// targets present in both can keep their schedules across a reload.
    pub fn same_settings(&self, other: &Self) -> bool {
        self.run == other.run
            && self.size == other.size
            && self.labels == other.labels
            && self.options == other.options
            && self.tls == other.tls
            && self.marks == other.marks
    }
}

/// A job's protocol options (`[job.http]`, `[job.dns]`, each protocol's
/// table): as written, to tell a reload that changed them, and made into
/// the options the probes are built with.
pub struct JobOptions {
    given: prober_net::options::OptionSet,
    /// The options made from them (see [`prober_core::protocol::BuildEnv::options`]).
    pub store: std::sync::Arc<prober_core::protocol::Shared>,
}

impl JobOptions {
    /// Checks `given` and puts it as each protocol's crate does, with the
    /// job's request size for the protocols `targets` are of (STAMP's TLVs
    /// and mode need room): what `prober run` does with its flags.
    fn new(
        given: prober_net::options::OptionSet,
        targets: &[JobTarget],
        size: Option<usize>,
        key: &str,
    ) -> Result<Self> {
        let store = prober_core::protocol::Shared::default();
        given
            .put(&store, targets.iter().map(|t| &t.target), size, Some(key))
            .map_err(DaemonError::Config)?;
        Ok(Self {
            given,
            store: std::sync::Arc::new(store),
        })
    }

    /// Each protocol's options for a job with these `tables`: its own
    /// table, else `[defaults]`' (read once, by [`JobOptions::defaults`]),
    /// else the protocol's defaults.
    fn given(
        registry: &Registry,
        tables: &crate::own_tables::Tables,
        defaults: &prober_net::options::OptionSet,
        (base, text, key): (&Path, &str, &str),
    ) -> Result<prober_net::options::OptionSet> {
        let mut given = Vec::new();
        for own in prober_net::options::ProtocolOptions::all(registry) {
            let options = match tables.get(own.key) {
                Some(table) => Self::read(own, table, base, text, key)?,
                None => defaults
                    .0
                    .iter()
                    .find(|(o, _)| std::ptr::eq(*o, own))
                    .map_or_else(|| (own.default)(), |(_, d)| d.clone_box()),
            };
            given.push((own, options));
        }
        Ok(prober_net::options::OptionSet(given))
    }

    /// `[defaults]`' protocol tables, read and checked once, whether or not
    /// a job uses them, as every other key of `[defaults]` is.
    fn defaults(
        registry: &Registry,
        tables: &crate::own_tables::Tables,
        base: &Path,
        text: &str,
    ) -> Result<prober_net::options::OptionSet> {
        let mut given = Vec::new();
        for own in prober_net::options::ProtocolOptions::all(registry) {
            if let Some(table) = tables.get(own.key) {
                let options = Self::read(own, table, base, text, "defaults")?;
                options
                    .put(
                        &prober_core::protocol::Shared::default(),
                        None,
                        Some(&format!("defaults.{}", own.key)),
                    )
                    .map_err(DaemonError::Config)?;
                given.push((own, options));
            }
        }
        Ok(prober_net::options::OptionSet(given))
    }

    /// One protocol's table of `key` (`job[0] ("a")`, `defaults`), read
    /// and with its paths placed relative to `base`; its errors name the
    /// line the table starts on.
    fn read(
        own: &prober_net::options::ProtocolOptions,
        table: &toml::Spanned<toml::Value>,
        base: &Path,
        text: &str,
        key: &str,
    ) -> Result<Box<dyn prober_net::options::OwnOptions>> {
        let mut options = (own.from_toml)(table.get_ref().clone()).map_err(|e| {
            let line = text[..table.span().start.min(text.len())]
                .matches('\n')
                .count()
                + 1;
            DaemonError::Config(format!("line {line}: {key}.{}: {e}", own.key))
        })?;
        options.rebase(base);
        Ok(options)
    }
}

impl Clone for JobOptions {
    fn clone(&self) -> Self {
        Self {
            given: self.given.clone(),
            store: std::sync::Arc::clone(&self.store),
        }
    }
}

impl PartialEq for JobOptions {
    fn eq(&self, other: &Self) -> bool {
        self.given.same(&other.given)
    }
}

impl Eq for JobOptions {}

impl std::fmt::Debug for JobOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JobOptions")
            .field("given", &self.given)
            .finish_non_exhaustive()
    }
}

/// A validated configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// Responder listeners.
    pub serve: ServeSection,
    /// Where `/metrics` listens.
    pub metrics: Option<SocketAddr>,
    /// `[metrics] buckets`, `native_histograms`, `native_bucket_factor`,
    /// `histograms` and `parts`: which families, with which buckets.
    pub metric_buckets: prober_sinks::prometheus::Buckets,
    /// `[otlp]`, read at start only.
    pub otlp: Option<OtlpConfig>,
    /// `[metrics] basic_auth` or `bearer_token_file`, read at start only.
    pub metrics_auth: Option<MetricsAuth>,
    /// `[metrics] web_config`: TLS on the metrics listener, read at start
    /// only.
    pub metrics_web_config: Option<PathBuf>,
    /// `allow_empty = true`: no jobs is what the file means.
    pub allow_empty: bool,
    /// `[blackbox]`.
    pub blackbox: BlackboxSettings,
    /// Ask for kernel transmit stamps (`[stamps] transmit = true`).
    pub tx_stamps: bool,
    /// `[receive]`, read at start only.
    pub receive: prober_core::spin::Receive,
    /// Whether the file chose the receive mode (or set a spin setting),
    /// rather than leaving it to the default (see [`Config::receive_for`]).
    pub receive_chosen: bool,
    /// The jobs.
    pub jobs: Vec<Job>,
    /// `[discovery]`.
    pub discovery: crate::dns_sd::Settings,
    /// When the first `dns_sd` name is due to be looked up again (the
    /// earliest of their TTLs, kept between the floor and the ceiling).
    pub refresh_at: Option<std::time::Instant>,
}

impl Config {
    /// How the probes receive in a daemon that also `answers` (runs
    /// responders) or not: the file's `[receive]` where it chose, else
    /// adaptive for a daemon that only probes, and async for one that
    /// answers too. The daemon runs on one thread, where a probe's spin (up
    /// to the budget, 100 µs) would hold up every answer due meanwhile: a
    /// mesh peer's probe would measure it.
    pub fn receive_for(&self, answers: bool) -> prober_core::spin::Receive {
        if answers && !self.receive_chosen {
            prober_core::spin::Receive::Event
        } else {
            self.receive.clone()
        }
    }
}

fn duration(value: Option<&String>, key: &str, default: Duration) -> Result<Duration> {
    match value {
        None => Ok(default),
        Some(text) => prober_core::duration::parse_duration(text).ctx(|| key.to_owned()),
    }
}

fn pacing(value: Option<&String>, key: &str) -> Result<Pacing> {
    match value {
        None => Ok(Pacing::Timer),
        Some(text) => text.parse().ctx(|| key.to_owned()),
    }
}

/// A label name a job or a file_sd group may give its series.
fn check_label(name: &str) -> std::result::Result<(), String> {
    if valid_label_name(name) && !RESERVED_LABELS.contains(&name) {
        return Ok(());
    }
    Err(format!(
        "not a usable Prometheus label name (letters, digits and _, not starting with __; {} are reserved)",
        RESERVED_LABELS.join(", ")
    ))
}

fn valid_label_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
        && !name.starts_with("__")
}

#[allow(clippy::too_many_arguments)]
async fn job(
    j: &JobSection,
    i: usize,
    defaults: &JobSettings,
    given: prober_net::options::OptionSet,
    base: &Path,
    registry: &Registry,
    resolution: Resolution<'_>,
    discovery: &crate::dns_sd::Settings,
) -> Result<Job> {
    let key = format!("job[{i}] ({:?})", j.name);
    if j.name.is_empty() {
        bail!("job[{i}].name: must not be empty");
    }
    let pick = |a: &Option<String>, b: &Option<String>| a.clone().or_else(|| b.clone());
    let interval = duration(
        pick(&j.settings.interval, &defaults.interval).as_ref(),
        &format!("{key}.interval"),
        Duration::from_secs(1),
    )?;
    if interval.is_zero() {
        bail!("{key}.interval: the daemon needs an interval above zero");
    }
    let timeout = duration(
        pick(&j.settings.timeout, &defaults.timeout).as_ref(),
        &format!("{key}.timeout"),
        Duration::from_secs(1),
    )?;
    let pacing = pacing(
        pick(&j.settings.pacing, &defaults.pacing).as_ref(),
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
    let size = j.settings.size.or(defaults.size);
    let tos = match (
        pick(&j.settings.dscp, &defaults.dscp),
        j.settings.tos.or(defaults.tos),
    ) {
        (Some(_), Some(_)) => bail!("{key}: give dscp or tos, not both"),
        (Some(d), None) => Some(
            prober_sys::mark::tos_of_dscp(&d)
                .map_err(|e| DaemonError::Config(format!("{key}.dscp: {e}")))?,
        ),
        (None, t) => t,
    };
    let fwmark = match j
        .settings
        .fwmark
        .clone()
        .or_else(|| defaults.fwmark.clone())
    {
        None => None,
        Some(FwMark::Number(n)) => Some(n),
        Some(FwMark::Text(t)) => Some(
            prober_sys::mark::parse_fwmark(&t)
                .map_err(|e| DaemonError::Config(format!("{key}.fwmark: {e}")))?,
        ),
    };
    let marks = prober_core::protocol::Marks {
        tos,
        source: j.settings.source.or(defaults.source),
        interface: pick(&j.settings.interface, &defaults.interface),
        fwmark,
    };
    let mut labels = defaults.labels.clone();
    labels.extend(j.settings.labels.clone());
    for (name, value) in &mut labels {
        check_label(name).map_err(|e| {
            DaemonError::Config(format!(
                "{key}.labels.{}: {e}",
                prober_core::quote::short(name)
            ))
        })?;
        *value = expand_env(value, |v| std::env::var(v).ok()).map_err(|e| {
            DaemonError::Config(format!(
                "{key}.labels.{}: {e}",
                prober_core::quote::short(name)
            ))
        })?;
    }
    let sinks = match j.settings.sinks.as_ref().or(defaults.sinks.as_ref()) {
        Some(s) => s
            .check(&format!("{key}.sinks"), base)
            .map_err(DaemonError::Config)?,
        None => prober_sinks::file_config::JobSinks::default(),
    };
    // (URL, its own labels, found in DNS): a discovered target also listed
    // elsewhere is skipped, not refused as listed twice.
    let mut texts: Vec<(String, BTreeMap<String, String>, bool)> = j
        .targets
        .iter()
        .map(|t| (t.clone(), BTreeMap::new(), false))
        .collect();
    let mut watched = Vec::new();
    if let Some(file) = &j.targets_file {
        let file = base.join(file); // an absolute path stays as it is
        let body = crate::file_sd::read_capped(&file)
            .ctx(|| format!("{key}.targets_file: reading {}", file.display()))?;
        texts.extend(
            body.lines()
                .map(str::trim)
                .filter(|l| !l.is_empty() && !l.starts_with('#'))
                .map(|t| (t.to_owned(), BTreeMap::new(), false)),
        );
        watched.push(file);
    }
    for file in &j.file_sd {
        let file = base.join(file);
        let what = format!("{key}.file_sd: {}", file.display());
        for (target, labels) in crate::file_sd::read(&file, j.file_sd_scheme.as_deref())
            .map_err(|e| DaemonError::Config(format!("{what}: {e}")))?
        {
            for name in labels.keys() {
                check_label(name).map_err(|e| {
                    DaemonError::Config(format!(
                        "{what}: label {:?} of {}: {e}",
                        prober_core::quote::short(name),
                        prober_core::quote::short(&target)
                    ))
                })?;
            }
            texts.push((target, labels, false));
        }
        watched.push(file);
    }
    let mut refresh_at: Option<std::time::Instant> = None;
    if !j.dns_sd.is_empty() {
        let Resolution::System(found_by) = resolution else {
            bail!("{key}.dns_sd: names are not resolved here");
        };
        let exclude_self = j.settings.exclude_self.or(defaults.exclude_self) == Some(true);
        let own = if exclude_self {
            prober_net::resolve::own_addresses()
        } else {
            Vec::new()
        };
        let mut found_count = 0u64;
        for entry in &j.dns_sd {
            let what = format!("{key}.dns_sd");
            let template = parse_target(registry, &with_srv_port(entry)).ctx(|| what.clone())?;
            if template.host.parse::<std::net::IpAddr>().is_ok() {
                bail!("{what}: {template}: give a DNS name to discover, not an address");
            }
            let answer = found_by
                .lookup(&j.name, &template.host, template.port, discovery)
                .await;
            refresh_at = Some(refresh_at.map_or(answer.refresh_at, |r| r.min(answer.refresh_at)));
            for f in answer.found {
                if own.contains(&f.addr.ip()) {
                    tracing::debug!(job = %j.name, addr = %f.addr, "skipping this host's own address");
                    continue;
                }
                let mut t = template.clone();
                t.host = f.addr.ip().to_string();
                t.port = f.addr.port();
                let labels = BTreeMap::from([("dns_name".to_owned(), f.name)]);
                texts.push((t.to_string(), labels, true));
                found_count += 1;
            }
        }
        found_by.count(&j.name, |s| s.targets = found_count);
    }
    if texts.is_empty() && j.dns_sd.is_empty() {
        bail!("{key}.targets: no targets");
    }
    let max_targets = j
        .settings
        .max_targets
        .or(defaults.max_targets)
        .unwrap_or(10_000);
    if max_targets == 0 {
        bail!("{key}.max_targets: must be at least 1");
    }
    let mut targets = Vec::with_capacity(texts.len().min(max_targets));
    let mut seen = std::collections::HashSet::new();
    let mut over = 0u64;
    for (text, target_labels, discovered) in texts {
        let target = parse_target(registry, &text).ctx(|| format!("{key}.targets"))?;
        if !seen.insert(target.to_string()) {
            if discovered {
                continue;
            }
            bail!("{key}.targets: {target} is listed twice");
        }
        if targets.len() == max_targets {
            over += 1;
            continue;
        }
        if marks.any() && !target.protocol.options.marks {
            bail!(
                "{key}: dscp, tos, source, interface and fwmark apply only to icmp, udp and tcp targets, not {target}"
            );
        }
        let tsize = target.size(size);
        if let Some(s) = tsize {
            target.check_size(s).ctx(|| format!("{key}.size"))?;
        }
        let addr = match resolution {
            // One name that does not resolve (a retired host, a DNS
            // hiccup at boot) must not keep every other target dark.
            Resolution::System(d) if target.host.parse::<std::net::IpAddr>().is_err() => {
                let answer = resolve(&target, Family::Any)
                    .await
                    .map_err(|e| e.to_string());
                let (addr, retry) =
                    d.target_name(&target.host, target.port, answer, discovery.resolve_every);
                if let Some(retry) = retry {
                    let at = std::time::Instant::now() + retry;
                    refresh_at = Some(refresh_at.map_or(at, |r| r.min(at)));
                }
                addr
            }
            Resolution::System(_) => resolve(&target, Family::Any)
                .await
                .map_err(|e| e.to_string()),
            Resolution::LiteralsOnly => match target.host.parse::<std::net::IpAddr>() {
                Ok(ip) => Ok(std::net::SocketAddr::new(ip, target.port)),
                Err(_) => bail!("{key}.targets: {target}: host names are not resolved here"),
            },
        };
        if let Ok(addr) = addr {
            marks.check_family(addr).map_err(|e| {
                DaemonError::Config(format!("{key}.source: {e}, the address of {target}"))
            })?;
        }
        let flows = j.settings.flows.or(defaults.flows).unwrap_or(1);
        for flow in target
            .flows(flows, registry)
            .ctx(|| format!("{key}.flows"))?
        {
            targets.push(JobTarget {
                target: flow,
                addr: addr.clone(),
                size: tsize,
                labels: target_labels.clone(),
            });
        }
    }
    if over > 0 {
        tracing::warn!(
            job = %j.name,
            "{key}: {over} targets over max_targets = {max_targets} are not probed"
        );
    }
    if let Resolution::System(d) = resolution {
        d.count(&j.name, |s| {
            s.over_limit = over;
            s.truncations += u64::from(over > 0);
        });
    }
    let options = JobOptions::new(given, &targets, size, &key)?;
    let tls = j
        .settings
        .tls
        .clone()
        .or_else(|| defaults.tls.clone())
        .map(|t| {
            let roots = match t.roots.as_deref() {
                None | Some("system") => Ok(prober_core::protocol::Roots::System),
                Some("mozilla") => Ok(prober_core::protocol::Roots::Mozilla),
                Some(other) => Err(DaemonError::Config(format!(
                    "{key}.tls.roots: {:?} is not \"system\" or \"mozilla\"",
                    prober_core::quote::short(other)
                ))),
            };
            roots.map(|roots| (t, roots))
        })
        .transpose()?
        .map(|(t, roots)| prober_core::protocol::TlsFiles {
            ca: t.ca.map(|p| base.join(p)),
            roots,
            cert: t.cert.map(|p| base.join(p)),
            key: t.key.map(|p| base.join(p)),
            server_name: t.server_name,
            insecure: t.insecure,
        })
        .unwrap_or_default();
    Ok(Job {
        name: j.name.clone(),
        targets,
        run,
        size,
        labels,
        sinks,
        options,
        tls,
        watched,
        marks,
        refresh_at,
    })
}

/// Replaces every `${NAME}` in a label value with the environment
/// variable's value (Kubernetes' downward API puts the node's name there).
fn expand_env(
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

/// An SRV name's URL (`udp://_prober._udp.example`) needs no port, since
/// the records give it: a placeholder port makes it a target URL.
fn with_srv_port(entry: &str) -> std::borrow::Cow<'_, str> {
    let Some((scheme, rest)) = entry.split_once("://") else {
        return entry.into();
    };
    let (host, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    if host.starts_with('_') && !host.contains(':') {
        format!("{scheme}://{host}:1{path}").into()
    } else {
        entry.into()
    }
}

/// A firewall mark as TOML gives it: a number, or text such as "0x2a".
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
enum FwMark {
    Number(u32),
    Text(String),
}

/// Reads and validates `path`. Relative sink and target-file paths are
/// relative to the config file's folder.
///
/// # Errors
/// `<file>: <key>: <reason>` for the first problem found.
/// Reads, parses and validates the config at `path`, and checks that every
/// sink file can be written (its directory exists and is writable; nothing
/// is created).
///
/// # Errors
/// [`DaemonError::Config`] naming the file, the key and the reason.
pub async fn load(
    path: &Path,
    registry: &Registry,
    discovery: &crate::dns_sd::Discovery,
) -> Result<Config> {
    let text =
        std::fs::read_to_string(path).ctx(|| format!("reading config {}", path.display()))?;
    let cfg = parse_with(&text, path, registry, Resolution::System(discovery))
        .await
        .ctx(|| format!("config {}", path.display()))?;
    for (i, job) in cfg.jobs.iter().enumerate() {
        for file in job.sinks.paths() {
            prober_sinks::files::check_writable(file)
                .ctx(|| format!("config {}: job[{i}] ({:?}).sinks", path.display(), job.name))?;
        }
    }
    Ok(cfg)
}

/// The longest piece of the config's text an error quotes.
const QUOTE_MAX: usize = 80;

/// `line L, column C: reason`, then the line (at most [`QUOTE_MAX`]
/// characters of it, around the column) and a caret: toml's own message
/// quotes the whole line and a caret line as long, 100 MB for a 50 MB
/// line.
/// A job's (or `[defaults]`') unknown key, said with the protocols'
/// tables it could also have been (`[job.http]`, ...), which serde's list
/// of the job's own keys leaves out.
fn with_tables(err: DaemonError, e: &toml::de::Error, tables: &[&str]) -> DaemonError {
    let DaemonError::Config(msg) = err else {
        return err;
    };
    let job_keys = e.message().starts_with("unknown field") && e.message().contains("`interval`");
    if !job_keys || tables.is_empty() {
        return DaemonError::Config(msg);
    }
    let named: Vec<String> = tables.iter().map(|t| format!("`{t}`")).collect();
    let extra = format!(", or a protocol's table: {}", named.join(", "));
    let msg = match msg.split_once('\n') {
        Some((first, rest)) => format!("{first}{extra}\n{rest}"),
        None => format!("{msg}{extra}"),
    };
    DaemonError::Config(msg)
}

fn toml_error(e: &toml::de::Error, text: &str) -> DaemonError {
    let reason = e.message().trim_end();
    let Some(span) = e.span() else {
        return DaemonError::Config(prober_core::quote::cap(reason, 4 * QUOTE_MAX));
    };
    let at = span.start.min(text.len());
    let line_start = text[..at].rfind('\n').map_or(0, |i| i + 1);
    let line_end = text[at..].find('\n').map_or(text.len(), |i| at + i);
    let line_no = text[..line_start].matches('\n').count() + 1;
    let line = &text[line_start..line_end];
    let col = text[line_start..at].chars().count();
    // A window of the line around the column.
    let skip = col.saturating_sub(QUOTE_MAX / 2);
    let shown: String = line.chars().skip(skip).take(QUOTE_MAX).collect();
    let more = line.chars().count() > skip + QUOTE_MAX;
    let (pre, post) = (if skip > 0 { "…" } else { "" }, if more { "…" } else { "" });
    let caret = " ".repeat(col - skip + pre.chars().count());
    // `interval = 5`: a number given for a duration, which is a string
    // with a unit. The key is the one just before the value.
    let number = reason.starts_with("invalid type: integer")
        || reason.starts_with("invalid type: floating point");
    let key = text[line_start..at]
        .trim_end()
        .trim_end_matches('=')
        .trim_end()
        .rsplit(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .next()
        .unwrap_or("");
    let value: String = text[at..]
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == '.')
        .collect();
    let duration_key = [
        "interval",
        "timeout",
        "every",
        "age",
        "ttl_floor",
        "ttl_ceiling",
    ]
    .iter()
    .any(|k| key.ends_with(k));
    let hint = if number && duration_key && !value.is_empty() {
        format!(" (a duration is a string with a unit: write {key} = \"{value}s\")")
    } else {
        String::new()
    };
    DaemonError::Config(format!(
        "line {line_no}, column {}: {}{hint}\n  | {pre}{shown}{post}\n  | {caret}^",
        col + 1,
        prober_core::quote::cap(reason, 4 * QUOTE_MAX),
    ))
}

/// Parses and validates config text; `path` places relative paths.
///
/// # Errors
/// [`DaemonError::Config`] naming the key and the reason.
pub async fn parse(text: &str, path: &Path, registry: &Registry) -> Result<Config> {
    let discovery = crate::dns_sd::Discovery::default();
    parse_with(text, path, registry, Resolution::System(&discovery)).await
}

/// How [`parse_with`] finds the addresses of targets.
#[derive(Debug, Clone, Copy)]
pub enum Resolution<'a> {
    /// The system resolver for target names, as the daemon does, and
    /// this discovery (its resolver, last good answers and counters) for
    /// `dns_sd` names.
    System(&'a crate::dns_sd::Discovery),
    /// Address literals only; a host name is an error. For checking text
    /// that must not cause DNS queries (the config fuzzer).
    LiteralsOnly,
}

/// [`parse`], resolving as `resolution` says.
///
/// # Errors
/// [`DaemonError::Config`] naming the key and the reason.
pub async fn parse_with(
    text: &str,
    path: &Path,
    registry: &Registry,
    resolution: Resolution<'_>,
) -> Result<Config> {
    let keys: Vec<&'static str> = prober_net::options::ProtocolOptions::all(registry)
        .iter()
        .map(|o| o.key)
        .collect();
    let tables = keys.clone();
    let mut raw: FileConfig = crate::own_tables::with_keys(keys, || toml::from_str(text))
        .map_err(|e| with_tables(toml_error(&e, text), &e, &tables))?;
    for j in &mut raw.jobs {
        j.inner.gather();
    }
    let base = path
        .parent()
        .map_or_else(|| PathBuf::from("."), Path::to_owned);
    let discovery = raw.discovery.settings()?;
    let defaults = JobOptions::defaults(registry, &raw.defaults.own, &base, text)?;
    let mut jobs = Vec::with_capacity(raw.jobs.len());
    let mut names = std::collections::HashSet::new();
    for (i, j) in raw.jobs.iter().enumerate() {
        if !names.insert(j.inner.name.clone()) {
            bail!("job[{i}].name: job {:?} is defined twice", j.inner.name);
        }
        let key = format!("job[{i}] ({:?})", j.inner.name);
        let given = JobOptions::given(registry, &j.own, &defaults, (&base, text, &key))?;
        jobs.push(
            job(
                &j.inner,
                i,
                &raw.defaults.inner,
                given,
                &base,
                registry,
                resolution,
                &discovery,
            )
            .await?,
        );
    }
    // Two writers on one file would interleave rows and rotate each
    // other's files away.
    let mut paths: std::collections::HashMap<&Path, (usize, &str)> =
        std::collections::HashMap::new();
    for (i, job) in jobs.iter().enumerate() {
        for path in job.sinks.paths() {
            if let Some((o, other)) = paths.insert(path, (i, &job.name)) {
                // Keys as every other message writes them: job[0] ("a").
                bail!(
                    "job[{i}] ({:?}).sinks: {} is also a sink of job[{o}] ({other:?}) (set sinks per job, not in [defaults], when several jobs write files)",
                    job.name,
                    path.display()
                );
            }
        }
    }
    Ok(Config {
        serve: {
            raw.serve.limit_settings().map_err(DaemonError::Config)?;
            let mut serve = raw.serve;
            serve.check(registry, &base).map_err(DaemonError::Config)?;
            serve
        },
        metrics: raw.metrics.as_ref().map(|m| m.listen),
        metric_buckets: match &raw.metrics {
            Some(m) => m.buckets()?,
            None => Default::default(),
        },
        allow_empty: raw.allow_empty,
        blackbox: match &raw.blackbox {
            None => BlackboxSettings::default(),
            Some(b) => {
                if let Some(list) = &b.allowed_targets {
                    crate::blackbox::Allowed::parse(list)
                        .map_err(|e| DaemonError::Config(format!("blackbox.{e}")))?;
                }
                BlackboxSettings {
                    config: b.config.as_ref().map(|p| base.join(p)),
                    allowed_targets: b.allowed_targets.clone(),
                }
            }
        },
        tx_stamps: raw.stamps.transmit,
        receive: raw.receive.receive()?,
        receive_chosen: raw.receive.mode.is_some()
            || raw.receive.spin_budget.is_some()
            || raw.receive.cpu_share.is_some(),
        otlp: raw.otlp.as_ref().map(OtlpSection::settings).transpose()?,
        metrics_auth: match &raw.metrics {
            Some(m) => m.auth(&base)?,
            None => None,
        },
        metrics_web_config: raw
            .metrics
            .as_ref()
            .and_then(|m| m.web_config.as_ref())
            .map(|p| base.join(p)),
        refresh_at: {
            // Targets given by name are resolved again every resolve_every
            // (the system resolver gives no TTL), by the same reload.
            let named = jobs
                .iter()
                .flat_map(|j| &j.targets)
                .any(|t| t.target.host.parse::<std::net::IpAddr>().is_err());
            let names_due = named.then(|| std::time::Instant::now() + discovery.resolve_every);
            jobs.iter()
                .filter_map(|j| j.refresh_at)
                .chain(names_due)
                .min()
        },
        jobs,
        discovery,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    static REGISTRY: Registry = Registry::new(&[
        &prober_icmp::ICMP,
        &prober_tcp::TCP,
        &prober_tcp::TCP_CONNECT,
        &prober_tcp::UDP,
    ]);

    async fn p(text: &str) -> Result<Config> {
        parse(text, Path::new("/etc/prober/prober.toml"), &REGISTRY).await
    }

    async fn err(text: &str) -> String {
        p(text).await.unwrap_err().to_string()
    }

    /// `text` parsed resolving address literals only, as the fuzzer does.
    async fn literals_only(text: &str) -> Result<Config> {
        parse_with(
            text,
            Path::new("/x.toml"),
            &REGISTRY,
            Resolution::LiteralsOnly,
        )
        .await
    }

    /// `[serve]`'s keys beside the listeners are read by the types of the
    /// responders that own them (the STAMP reflector's here, which nothing
    /// in this crate names); paths are relative to the file; a key for a
    /// listener the section does not start, a hidden (command-line only)
    /// flag's name, an unknown key and a key file that cannot be read are
    /// refused, each in one line naming it.
    #[tokio::test]
    async fn serve_keys_are_read_by_their_responders_types() {
        use prober_net::options::ProtocolOptions;
        static SERVED: Registry = Registry::new(&[&prober_tcp::UDP])
            .with_responders(&[&prober_tcp::TCP_RESPONDER, &prober_stamp::STAMP_RESPONDER]);
        let dir = std::env::temp_dir().join(format!("prober-serve-keys-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("stamp.key"), "secret\n").unwrap();
        let at = dir.join("prober.toml");
        let parse = |text: &str| {
            let text = format!("[serve]\ntcp = \"127.0.0.1:0\"\n{text}");
            let at = at.clone();
            async move { parse(&text, &at, &SERVED).await.map_err(|e| e.to_string()) }
        };
        let cfg = parse(
            "stamp = \"127.0.0.1:0\"\nstamp_key = \"stamp.key\"\nstamp_rate = 5\nstamp_ptp = true\nclock_synced = true\n",
        )
        .await
        .unwrap();
        let o = ProtocolOptions::of_responder(&prober_stamp::STAMP_RESPONDER).unwrap();
        let spec = cfg.serve.own.get(o).unwrap();
        let spec = spec
            .as_any()
            .downcast_ref::<prober_stamp::ReflectorSpec>()
            .unwrap();
        assert_eq!(
            spec.stamp_key.as_deref(),
            Some(dir.join("stamp.key").as_path())
        );
        assert_eq!(
            cfg.serve.given_for(o),
            ["clock_synced", "stamp_key", "stamp_ptp", "stamp_rate"]
        );
        let store = prober_core::shared::Shared::default();
        spec.put_into(&store, None, None).unwrap();
        let put = store
            .get_or_try_init(|| Err::<std::sync::Arc<prober_stamp::ReflectorConfig>, ()>(()))
            .unwrap();
        assert_eq!(put.rate, 5);
        assert_eq!(put.format, prober_stamp::Format::Ptp);
        assert!(put.clock_synced && put.stateful && put.key.is_some());

        for (text, want) in [
            (
                "stamp_rate = 5\n",
                "serve.stamp_rate: applies to the stamp listener, which [serve] does not start",
            ),
            (
                "stamp = \"127.0.0.1:0\"\nstamp_rat = 5\n",
                "serve: unknown field `stamp_rat`, expected a listener (tcp, stamp) or one of stamp_key, stamp_stateless, stamp_rate, stamp_ptp, clock_synced, rate_limit,",
            ),
            ("drop_every = 2\n", "serve: unknown field `drop_every`"),
            (
                "stamp = \"127.0.0.1:0\"\nstamp_key = \"gone.key\"\n",
                "serve.stamp_key: reading the STAMP key",
            ),
            (
                "stamp = \"127.0.0.1:0\"\nstamp_rate = \"fast\"\n",
                "serve: invalid type: string \"fast\", expected u32",
            ),
        ] {
            let e = parse(text).await.unwrap_err();
            assert!(e.contains(want), "{text}: {e}");
            assert_eq!(e.lines().count(), 1, "{e}");
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A protocol's table is read by its crate's type, found by the key its
    /// descriptor gives (ICMP's `[job.icmp]` here, which nothing in this
    /// crate names): a job's table, else `[defaults]`', else the defaults;
    /// the job's keys keep their positions in errors, the table's errors
    /// name its line.
    #[tokio::test]
    async fn a_protocols_table_is_read_by_its_own_type() {
        let socket = |c: &Config, j: usize| {
            c.jobs[j]
                .options
                .store
                .get_or_try_init(|| Err::<std::sync::Arc<prober_icmp::IcmpSpec>, ()>(()))
                .map(|s| s.socket)
                .ok()
        };
        let c = p("[defaults.icmp]\nsocket = \"raw\"\n\n[[job]]\nname = \"a\"\ntargets = [\"127.0.0.1\"]\n\n[[job]]\nname = \"b\"\ntargets = [\"127.0.0.1\"]\n[job.icmp]\nsocket = \"dgram\"\n")
            .await
            .unwrap();
        assert_eq!(socket(&c, 0), Some(prober_icmp::SocketKind::Raw));
        assert_eq!(socket(&c, 1), Some(prober_icmp::SocketKind::Dgram));
        assert!(!c.jobs[0].same_settings(&c.jobs[1]));
        let e = err(
            "[[job]]\nname = \"a\"\ntargets = [\"127.0.0.1\"]\n\n[job.icmp]\nsocket = \"pipe\"\n",
        )
        .await;
        assert!(
            e.starts_with("line 5: job[0] (\"a\").icmp: unknown variant `pipe`"),
            "{e}"
        );
        let e = err("[[job]]\nname = \"a\"\ntargets = [\"127.0.0.1\"]\ncolour = 1\n").await;
        assert!(
            e.starts_with("line 4, column 1: unknown field `colour`"),
            "{e}"
        );
        // The protocols' tables are named beside the job's own keys.
        let first = e.lines().next().unwrap_or_default();
        assert!(first.ends_with("or a protocol's table: `icmp`"), "{e}");
        // `[defaults]`' tables are checked when no job uses them too.
        let e = err("allow_empty = true\n\n[defaults.icmp]\nsockt = \"raw\"\n").await;
        assert!(
            e.starts_with("line 3: defaults.icmp: unknown field `sockt`"),
            "{e}"
        );
    }

    #[tokio::test]
    async fn max_targets_keeps_the_first_and_counts_the_rest() {
        let discovery = crate::dns_sd::Discovery::default();
        let text = "[[job]]\nname = \"a\"\nmax_targets = 2\ntargets = [\"udp://127.0.0.1:1\", \"udp://127.0.0.1:2\", \"udp://127.0.0.1:3\", \"udp://127.0.0.1:4\"]\n";
        let c = parse_with(
            text,
            Path::new("/x.toml"),
            &REGISTRY,
            Resolution::System(&discovery),
        )
        .await
        .unwrap();
        let kept: Vec<String> = c.jobs[0]
            .targets
            .iter()
            .map(|t| t.target.to_string())
            .collect();
        assert_eq!(kept, ["udp://127.0.0.1:1", "udp://127.0.0.1:2"]);
        let stats = discovery.stats()["a"];
        assert_eq!((stats.over_limit, stats.truncations), (2, 1));
        let e = err("[[job]]\nname = \"a\"\nmax_targets = 0\ntargets = [\"udp://127.0.0.1:1\"]\n")
            .await;
        assert!(e.contains("max_targets: must be at least 1"), "{e}");
    }

    /// `interval = 5` (a TOML number where a duration string goes) gets the
    /// hint a person needs (#42 item 18).
    #[tokio::test]
    async fn a_number_for_a_duration_says_to_write_it_with_a_unit() {
        let e =
            err("[[job]]\nname = \"a\"\ninterval = 5\ntargets = [\"udp://127.0.0.1:1\"]\n").await;
        assert!(e.contains("write interval = \"5s\""), "{e}");
        let e =
            err("[[job]]\nname = \"a\"\ntimeout = 0.5\ntargets = [\"udp://127.0.0.1:1\"]\n").await;
        assert!(e.contains("write timeout = \"0.5s\""), "{e}");
        // Not for a number where no duration goes.
        let e = err("[[job]]\nname = 5\ntargets = [\"udp://127.0.0.1:1\"]\n").await;
        assert!(!e.contains("duration"), "{e}");
    }

    #[tokio::test]
    async fn histogram_families_are_chosen_in_metrics() {
        use prober_sinks::prometheus::{Families, HistMode};
        let job = "[[job]]\nname = \"a\"\ntargets = [\"udp://127.0.0.1:1\"]\n";
        let c = p(job).await.unwrap();
        assert_eq!(c.metric_buckets.families, Families::default());
        let c = p(&format!(
            "[metrics]\nhistograms = {{ latency = \"both\", rtt = \"native\", loss_burst = \"classic\" }}\n{job}"
        ))
        .await
        .unwrap();
        let f = c.metric_buckets.families;
        assert_eq!(
            (f.latency, f.rtt, f.loss_burst, f.send_lag),
            (
                HistMode::Both,
                HistMode::Native,
                HistMode::Classic,
                HistMode::Native
            )
        );
        let c = p(&format!("[metrics]\nnative_histograms = false\n{job}"))
            .await
            .unwrap();
        assert_eq!(c.metric_buckets.families.latency, HistMode::Classic);
        for (text, want) in [
            (
                "histograms = { rtt = \"some\" }",
                "metrics.histograms.rtt: \"some\" is not one of off, classic, native, both",
            ),
            (
                "histograms = { rtts = \"off\" }",
                "metrics.histograms: no family \"rtts\"",
            ),
            ("histograms = { loss_burst = \"native\" }", "count probes"),
            ("parts = true\nhistograms = { parts = \"off\" }", "not both"),
        ] {
            let e = err(&format!("[metrics]\n{text}\n{job}")).await;
            assert!(e.contains(want), "{text}: {e}");
        }
    }

    /// One name that does not resolve (or is not a name at all) is a
    /// target probed as down with its reason, not a config refused whole;
    /// it is due again after FIRST_RETRY, doubling, at most resolve_every.
    #[tokio::test]
    async fn a_name_that_does_not_resolve_is_a_target_down_not_an_error() {
        let text = "[discovery]\nresolve_every = \"3s\"\n[[job]]\nname = \"a\"\ntargets = [\"udp://127.0.0.1:1\", \"tcp://no..host:1\", \"udp://gone.invalid:2\"]";
        let discovery = crate::dns_sd::Discovery::default();
        let path = Path::new("/etc/prober/prober.toml");
        let mut delays = Vec::new();
        for _ in 0..4 {
            let before = std::time::Instant::now();
            let c = parse_with(text, path, &REGISTRY, Resolution::System(&discovery))
                .await
                .unwrap();
            let t = &c.jobs[0].targets;
            assert_eq!(t.len(), 3);
            assert_eq!(t[0].addr, Ok("127.0.0.1:1".parse().unwrap()));
            let e = t[1].addr.as_ref().unwrap_err();
            assert!(e.contains("cannot resolve host \"no..host\""), "{e}");
            let e = t[2].addr.as_ref().unwrap_err();
            assert!(e.contains("cannot resolve host \"gone.invalid\""), "{e}");
            let due = c.refresh_at.expect("a failing name is due again");
            delays.push(due.duration_since(before).as_secs());
        }
        // 1 s, 2 s, then resolve_every (3 s) caps the doubling.
        assert_eq!(delays, [1, 2, 3, 3], "{delays:?}");
    }

    /// A name that resolved once and fails later keeps its last address: a
    /// DNS hiccup does not stop a working target.
    #[test]
    fn a_name_that_stops_resolving_keeps_its_last_address() {
        let d = crate::dns_sd::Discovery::default();
        let every = Duration::from_secs(60);
        let a: SocketAddr = "192.0.2.7:8707".parse().unwrap();
        assert_eq!(d.target_name("h", 8707, Ok(a), every), (Ok(a), None));
        let (addr, retry) = d.target_name("h", 8707, Err("down".into()), every);
        assert_eq!((addr, retry), (Ok(a), Some(Duration::from_secs(1))));
        let (addr, _) = d.target_name("other", 8707, Err("down".into()), every);
        assert_eq!(addr, Err("down".to_owned()));
    }

    #[tokio::test]
    async fn targets_given_by_name_are_due_again_after_resolve_every() {
        let named = "[[job]]\nname = \"a\"\ntargets = [\"udp://localhost:7\"]\n";
        let before = std::time::Instant::now();
        let c = p(named).await.unwrap();
        let due = c.refresh_at.expect("a named target is due again");
        assert!(
            due >= before + Duration::from_secs(60)
                && due <= std::time::Instant::now() + Duration::from_secs(60)
        );
        let c = p(&format!("[discovery]\nresolve_every = \"2s\"\n{named}"))
            .await
            .unwrap();
        assert!(c.refresh_at.unwrap() <= std::time::Instant::now() + Duration::from_secs(2));
        let c = p("[[job]]\nname = \"a\"\ntargets = [\"udp://127.0.0.1:7\"]\n")
            .await
            .unwrap();
        assert_eq!(c.refresh_at, None, "addresses are never resolved again");
        let e = err("[discovery]\nresolve_every = \"0s\"\n").await;
        assert!(
            e.contains("resolve_every: must be greater than zero"),
            "{e}"
        );
    }

    #[test]
    fn label_values_take_environment_variables() {
        let get = |v: &str| (v == "NODE_NAME").then(|| "node-7".to_owned());
        assert_eq!(expand_env("${NODE_NAME}", get).unwrap(), "node-7");
        assert_eq!(expand_env("n=${NODE_NAME}/x", get).unwrap(), "n=node-7/x");
        assert_eq!(expand_env("plain $ text", get).unwrap(), "plain $ text");
        let e = expand_env("${ZONE}", get).unwrap_err();
        assert!(e.contains("ZONE is not set"), "{e}");
        assert!(expand_env("${NODE_NAME", get).is_err());
    }

    #[tokio::test]
    async fn dns_sd_entries_and_discovery_settings_are_checked() {
        assert_eq!(
            with_srv_port("udp://_p._udp.example"),
            "udp://_p._udp.example:1"
        );
        assert_eq!(
            with_srv_port("udp://peers.example:7"),
            "udp://peers.example:7"
        );
        assert_eq!(
            with_srv_port("grpc-health://_g._tcp.example/svc"),
            "grpc-health://_g._tcp.example:1/svc"
        );
        let e = err("[[job]]\nname = \"a\"\ndns_sd = [\"udp://127.0.0.1:7\"]\n").await;
        assert!(
            e.contains("give a DNS name to discover, not an address"),
            "{e}"
        );
        let e = err("[discovery]\nserver = \"nowhere\"\n").await;
        assert!(
            e.contains("discovery.server") && e.contains("not an address"),
            "{e}"
        );
        let e = err("[discovery]\nttl_floor = \"10s\"\nttl_ceiling = \"5s\"\n").await;
        assert!(
            e.contains("ttl_ceiling: must not be below ttl_floor"),
            "{e}"
        );
        let e = literals_only("[[job]]\nname = \"a\"\ndns_sd = [\"udp://peers.example:7\"]\n")
            .await
            .unwrap_err()
            .to_string();
        assert!(e.contains("dns_sd: names are not resolved here"), "{e}");
        let c = p("[discovery]\nserver = \"10.0.0.53\"\n").await.unwrap();
        assert_eq!(c.discovery.server, Some("10.0.0.53:53".parse().unwrap()));
    }

    #[tokio::test]
    async fn an_endless_targets_file_is_refused_not_read_to_the_end() {
        let e = err("[[job]]\nname = \"a\"\ntargets_file = \"/dev/zero\"\n").await;
        assert!(
            e.contains("targets_file") && e.contains("longer than 16 MiB"),
            "{e}"
        );
    }

    #[tokio::test]
    async fn dscp_and_tos_per_job() {
        let c = p("[defaults]\ndscp = \"ef\"\n[[job]]\nname = \"a\"\ntargets = [\"udp://127.0.0.1:1\"]\n[[job]]\nname = \"b\"\ntos = 32\ntargets = [\"udp://127.0.0.1:1\"]\n")
            .await
            .unwrap_err()
            .to_string();
        assert!(c.contains("give dscp or tos, not both"), "{c}");
        let c = p("[[job]]\nname = \"a\"\ndscp = \"af41\"\ntargets = [\"udp://127.0.0.1:1\"]\n")
            .await
            .unwrap();
        assert_eq!(c.jobs[0].marks.tos, Some(34 << 2));
        let e = err("[[job]]\nname = \"a\"\ndscp = \"gold\"\ntargets = [\"udp://127.0.0.1:1\"]\n")
            .await;
        assert!(e.contains(".dscp: DSCP \"gold\""), "{e}");
        let e = err("[[job]]\nname = \"a\"\nsource = \"::1\"\ntargets = [\"udp://127.0.0.1:1\"]\n")
            .await;
        assert!(
            e.contains(".source: ::1 is not of the address family"),
            "{e}"
        );
        let c = p(
            "[[job]]\nname = \"a\"\nsource = \"127.0.0.2\"\ninterface = \"lo\"\nfwmark = \"0x2a\"\ntargets = [\"udp://127.0.0.1:1\"]\n",
        )
        .await
        .unwrap();
        let m = &c.jobs[0].marks;
        assert_eq!(
            (m.source, m.interface.as_deref(), m.fwmark),
            (Some([127, 0, 0, 2].into()), Some("lo"), Some(42))
        );
    }

    #[tokio::test]
    async fn receive_modes_are_checked() {
        let job = "[[job]]\nname = \"a\"\ntargets = [\"udp://127.0.0.1:1\"]\n";
        let with = |head: &str| format!("[receive]\n{head}\n{job}");
        let c = literals_only(job).await.unwrap();
        let default = prober_core::spin::Receive::Adaptive(prober_core::spin::SpinPool::new(
            prober_core::spin::DEFAULT_SPIN_BUDGET,
            20,
        ));
        assert_eq!(c.receive_for(false), default, "a daemon that only probes");
        assert_eq!(c.receive_for(true).name(), "async", "one that answers too");
        let c = literals_only(&with("mode = \"async\"")).await.unwrap();
        assert_eq!(c.receive_for(false).name(), "async");
        let c = literals_only(&with("mode = \"adaptive\"")).await.unwrap();
        assert_eq!(c.receive_for(true), default, "asked for, with responders");
        let c = literals_only(&with("cpu_share = 0.05")).await.unwrap();
        assert_eq!(
            c.receive_for(true).name(),
            "adaptive",
            "a spin setting asks for it"
        );
        let c = literals_only(&with(
            "mode = \"adaptive\"\nspin_budget = \"50us\"\ncpu_share = 0.05",
        ))
        .await
        .unwrap();
        let want = prober_core::spin::Receive::Adaptive(prober_core::spin::SpinPool::new(
            Duration::from_micros(50),
            50,
        ));
        assert_eq!(c.receive, want);
        for (head, why) in [
            ("mode = \"spin\"", "neither \"async\" nor \"adaptive\""),
            ("mode = \"adaptive\"\nspin_budget = \"1s\"", "at most 100ms"),
            ("mode = \"adaptive\"\ncpu_share = 0.0", "receive.cpu_share"),
            ("mode = \"adaptive\"\ncpu_share = 2.0", "at most 1"),
            (
                "mode = \"async\"\nspin_budget = \"50us\"",
                "applies only to mode",
            ),
            (
                "mode = \"async\"\ncpu_share = 0.1",
                "receive.cpu_share applies only",
            ),
            ("colour = 1", "unknown field"),
        ] {
            let e = literals_only(&with(head)).await.unwrap_err().to_string();
            assert!(e.contains(why), "{head}: {e}");
        }
    }

    #[tokio::test]
    async fn metrics_buckets_and_otlp_are_checked() {
        let job = "[[job]]\nname = \"a\"\ntargets = [\"udp://127.0.0.1:1\"]\n";
        let with = |head: &str| format!("{head}\n{job}");
        let c = literals_only(&with(
            "[metrics]\nlisten = \"127.0.0.1:1\"\nbuckets = [0.001, 0.01]\nnative_bucket_factor = 1.5",
        ))
        .await
        .unwrap();
        assert_eq!(&*c.metric_buckets.classic, &[0.001, 0.01]);
        assert_eq!(c.metric_buckets.native_factor, Some(1.5));
        let c = literals_only(&with("[metrics]\nnative_histograms = false"))
            .await
            .unwrap();
        assert_eq!(c.metric_buckets.native_factor, None);
        assert_eq!(c.metrics, Some("127.0.0.1:9707".parse().unwrap()));
        assert_eq!(c.otlp, None);
        let c = literals_only(&with("[otlp]\nendpoint = \"http://127.0.0.1:4317\""))
            .await
            .unwrap();
        let o = c.otlp.unwrap();
        assert_eq!((o.interval.as_secs(), o.timeout.as_secs()), (10, 5));
        for (head, why) in [
            ("buckets = []", "give 1 to 100"),
            ("buckets = [0.01, 0.001]", "must rise strictly"),
            ("buckets = [-1.0]", "not a positive number"),
            ("native_bucket_factor = 1.0", "must be above 1"),
            (
                "bearer_token_file = \"t\"\nbasic_auth = { user = \"u\", password_file = \"p\" }",
                "not both",
            ),
            (
                "basic_auth = { user = \"u:v\", password_file = \"p\" }",
                "without ':'",
            ),
            ("bearer_token_file = \"/nonexistent/t\"", "/nonexistent/t"),
        ] {
            let text = with(&format!("[metrics]\nlisten = \"127.0.0.1:1\"\n{head}"));
            let e = literals_only(&text).await.unwrap_err().to_string();
            assert!(e.contains(why), "{head}: {e}");
        }
        for (head, why) in [
            (
                "endpoint = \"127.0.0.1:4317\"",
                "not an http:// or https:// URL",
            ),
            (
                "endpoint = \"http://h:1\"\ninterval = \"0s\"",
                "otlp.interval: must be greater than zero",
            ),
            ("endpoint = \"http://h:1\"\nport = 1", "unknown field"),
        ] {
            let e = literals_only(&with(&format!("[otlp]\n{head}")))
                .await
                .unwrap_err()
                .to_string();
            assert!(e.contains(why), "{head}: {e}");
        }
    }

    #[tokio::test]
    async fn flows_spread_udp_and_tcp_targets_only() {
        let c = literals_only(
            "[defaults]\nflows = 2\n[[job]]\nname = \"a\"\ntargets = [\"udp://127.0.0.1:1\", \"tcp://127.0.0.1:2\"]\n",
        )
        .await
        .unwrap();
        let names: Vec<String> = c.jobs[0]
            .targets
            .iter()
            .map(|t| t.target.to_string())
            .collect();
        assert_eq!(
            names,
            [
                "udp://127.0.0.1:1#flow=0",
                "udp://127.0.0.1:1#flow=1",
                "tcp://127.0.0.1:2#flow=0",
                "tcp://127.0.0.1:2#flow=1"
            ]
        );
        let e = literals_only("[[job]]\nname = \"a\"\nflows = 2\ntargets = [\"127.0.0.1\"]\n")
            .await
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("flows: --flows applies to tcp:// and udp://"),
            "{e}"
        );
    }

    #[tokio::test]
    async fn literals_only_resolves_nothing() {
        let text = "[[job]]\nname = \"a\"\ntargets = [\"udp://localhost:1\"]\n";
        let e = literals_only(text).await.unwrap_err().to_string();
        assert!(e.contains("host names are not resolved here"), "{e}");
        let ok = text.replace("localhost", "127.0.0.1");
        literals_only(&ok).await.unwrap();
    }

    #[tokio::test]
    async fn defaults_apply_and_jobs_override() {
        let c = p(r#"
            [defaults]
            interval = "2s"
            timeout = "500ms"
            labels = { team = "net" }
            [metrics]
            listen = "127.0.0.1:9707"
            [[job]]
            name = "a"
            targets = ["udp://127.0.0.1:8707", "tcp-connect://127.0.0.1:22"]
            [[job]]
            name = "b"
            interval = "100ms"
            pacing = "hybrid"
            targets = ["127.0.0.1"]
            labels = { site = "lab" }
            sinks = { jsonl = { path = "b.jsonl", rotate_bytes = 1000 }, hlog = { path = "/tmp/b.hlog" } }
        "#)
        .await
        .unwrap();
        assert_eq!(c.metrics, Some("127.0.0.1:9707".parse().unwrap()));
        let (a, b) = (&c.jobs[0], &c.jobs[1]);
        assert_eq!(
            (a.run.interval, a.run.timeout),
            (Duration::from_secs(2), Duration::from_millis(500))
        );
        assert_eq!(a.targets.len(), 2);
        assert_eq!(b.run.interval, Duration::from_millis(100));
        assert_eq!(b.run.pacing, Pacing::Hybrid);
        assert_eq!(b.labels.len(), 2);
        assert_eq!(b.targets[0].size, Some(56), "icmp payload default");
        assert_eq!(a.targets[1].size, None, "tcp-connect sends no payload");
        let (path, rotation) = b.sinks.jsonl.as_ref().unwrap();
        assert_eq!(path, Path::new("/etc/prober/b.jsonl"));
        assert_eq!((rotation.bytes, rotation.keep), (Some(1000), 5));
        assert_eq!(
            b.sinks.hlog,
            Some((PathBuf::from("/tmp/b.hlog"), Duration::from_secs(10)))
        );
    }

    #[tokio::test]
    async fn errors_inside_a_job_point_at_the_key_not_the_header() {
        let job = "[[job]]\nname = \"a\"\ntargets = [\"udp://127.0.0.1:1\"]\n";
        for (key, at) in [
            (
                "interval = 5",
                "line 4, column 12: invalid type: integer `5`",
            ),
            ("bogus = 1", "line 4, column 1: unknown field `bogus`"),
            ("size = -1", "line 4, column 8: invalid value: integer `-1`"),
        ] {
            let e = err(&format!("{job}{key}\n\n")).await;
            assert!(e.starts_with(at), "{key}: {e}");
            assert!(e.contains(&format!("| {key}\n")), "{key}: {e}");
        }
        let e = err("\n[[job]]\ntargets = []\n").await;
        assert!(
            e.starts_with("line 2, column 1: missing field `name`"),
            "{e}"
        );
    }

    #[tokio::test]
    async fn errors_quote_a_window_of_a_long_line() {
        let text = format!("[defaults]\ninterval = \"{}", "a".repeat(5_000_000));
        let e = err(&text).await;
        assert!(e.len() < 1_000, "{} bytes: {}", e.len(), &e[..200]);
        assert!(e.starts_with("line 2, column"), "{e}");
        let text = format!("[[job]]\nname = \"{}\"\ntargets = 7\n", "n".repeat(100_000));
        let e = err(&text).await;
        assert!(e.len() < 1_000, "{} bytes", e.len());
    }

    #[tokio::test]
    async fn errors_name_the_key_and_reason() {
        let cases = [
            (
                "[[job]]\nname = \"a\"\ntargets = [\"udp://127.0.0.1:1\"]\nbogus = 1",
                "unknown field `bogus`",
            ),
            (
                "[[job]]\nname = \"a\"\ninterval = \"fast\"\ntargets = [\"udp://127.0.0.1:1\"]",
                "job[0] (\"a\").interval",
            ),
            (
                "[[job]]\nname = \"a\"\ntargets = [\"ftp://x:1\"]",
                "unknown scheme",
            ),
            ("[[job]]\nname = \"a\"\ntargets = []", "no targets"),
            (
                "[[job]]\nname = \"a\"\ntargets = [\"udp://127.0.0.1:1\"]\n[[job]]\nname = \"a\"\ntargets = [\"udp://127.0.0.1:2\"]",
                "defined twice",
            ),
            (
                "[[job]]\nname = \"a\"\ntargets = [\"udp://127.0.0.1:1\"]\nlabels = { job = \"x\" }",
                "labels.job",
            ),
            (
                "[[job]]\nname = \"a\"\ntargets = [\"udp://127.0.0.1:1\", \"udp://127.0.0.1:1\"]",
                "listed twice",
            ),
            (
                "[[job]]\nname = \"a\"\npacing = \"warp\"\ntargets = [\"udp://127.0.0.1:1\"]",
                "unknown pacing",
            ),
            (
                "[[job]]\nname = \"a\"\ntimeout = \"0\"\ntargets = [\"udp://127.0.0.1:1\"]",
                "timeout must be greater than zero",
            ),
            (
                "[defaults]\nsinks = { csv = { path = \"x.csv\" } }\n[[job]]\nname = \"a\"\ntargets = [\"udp://127.0.0.1:1\"]\n[[job]]\nname = \"b\"\ntargets = [\"udp://127.0.0.1:2\"]",
                "job[1] (\"b\").sinks: /etc/prober/x.csv is also a sink of job[0] (\"a\")",
            ),
            ("[serve\n", "line 1, column 7: unclosed table"),
            (
                "[[job]]\nname = \"a\"\ntargets = [\"udp://127.0.0.1:1\"]\nlabels = { le = \"x\" }",
                "labels.le",
            ),
            (
                "[[job]]\nname = \"a\"\ntargets = [\"udp://127.0.0.1:1\"]\nlabels = { quantile = \"x\" }",
                "labels.quantile",
            ),
            (
                "[[job]]\nname = \"a\"\ntargets = [\"udp://127.0.0.1:1\"]\nlabels = { instance = \"x\" }",
                "labels.instance",
            ),
            (
                "[[job]]\nname = \"a\"\ntargets = [\"udp://127.0.0.1:1\"]\nlabels = { __x = \"x\" }",
                "labels.__x",
            ),
        ];
        for (text, want) in cases {
            let e = err(text).await;
            assert!(e.contains(want), "{text:?}: {e}");
        }
    }

    #[tokio::test]
    async fn same_settings_ignores_targets() {
        let a = p("[[job]]\nname = \"a\"\ntargets = [\"udp://127.0.0.1:1\"]")
            .await
            .unwrap();
        let b = p("[[job]]\nname = \"a\"\ntargets = [\"udp://127.0.0.1:2\"]")
            .await
            .unwrap();
        let c = p("[[job]]\nname = \"a\"\ninterval = \"2s\"\ntargets = [\"udp://127.0.0.1:1\"]")
            .await
            .unwrap();
        assert!(a.jobs[0].same_settings(&b.jobs[0]));
        assert!(!a.jobs[0].same_settings(&c.jobs[0]));
    }
}

//! The daemon's TOML configuration: parsing, defaults and validation.
//!
//! Every error names the file, the key and the reason, so a bad config fails
//! at start (exit 2) or, on reload, is logged and rejected.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use prober_core::{Registry, RunConfig, Target};

use crate::error::{DaemonError, bail};

type Result<T> = std::result::Result<T, DaemonError>;

mod discover;
mod schema;
mod validate;

pub use schema::ServeSection;
use schema::{FileConfig, JobSection, JobSettings, OtlpSection};

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

/// `[blackbox]`, checked; read at start only (SIGHUP reloads the modules
/// file itself).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct BlackboxSettings {
    /// The modules file, relative to the config's directory.
    pub config: Option<PathBuf>,
    /// `allowed_targets` as written (checked).
    pub allowed_targets: Option<Vec<String>>,
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
    /// How often the path to each of its `udp://` targets is traced.
    pub trace_every: Option<Duration>,
    /// Its traced branches' hops are exported as series.
    pub trace_hops: bool,
    /// Each traced branch measured this many times, hop by hop, for the
    /// hop RTT and loss series (0: not measured).
    pub trace_rounds: u32,
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
    /// `[probing] realtime_priority`: the probing thread's `SCHED_FIFO`
    /// priority, read at start only.
    pub realtime_priority: Option<u8>,
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

/// One `[[job]]`: its settings checked ([`validate::settings`]), its
/// targets gathered ([`discover::discover`]) and checked
/// ([`validate::targets`]), their names resolved
/// ([`discover::addresses`]).
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
    let s = validate::settings(j, i, defaults, base, &|v| std::env::var(v).ok())?;
    let found = discover::discover(j, &s, base, registry, resolution, discovery).await?;
    let key = &s.key;
    if found.found.is_empty() && j.dns_sd.is_empty() {
        bail!("{key}.targets: no targets");
    }
    let (checked, over) = validate::targets(found.found, &s, registry)?;
    if over > 0 {
        tracing::warn!(
            job = %j.name,
            "{key}: {over} targets over max_targets = {} are not probed",
            s.max_targets
        );
    }
    if let Resolution::System(d) = resolution {
        d.count(&j.name, |c| {
            c.over_limit = over;
            c.truncations += u64::from(over > 0);
        });
    }
    let mut refresh_at = found.refresh_at;
    let addrs = discover::addresses(&checked, key, resolution, discovery, &mut refresh_at).await?;
    let targets = validate::placed(checked, addrs, &s, registry)?;
    let options = JobOptions::new(given, &targets, s.size, key)?;
    Ok(Job {
        name: j.name.clone(),
        targets,
        run: s.run,
        size: s.size,
        labels: s.labels,
        sinks: s.sinks,
        options,
        tls: s.tls,
        watched: found.watched,
        marks: s.marks,
        refresh_at,
        trace_every: s.trace_every,
        trace_hops: s.trace_hops,
        trace_rounds: s.trace_rounds,
    })
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
        realtime_priority: raw.probing.realtime_priority()?,
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
    use prober_core::Pacing;

    use super::discover::with_srv_port;
    use super::validate::expand_env;
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

    /// A job's settings and targets are checked by pure functions, apart
    /// from discovery and resolution: the environment comes in as a
    /// function, found targets come in as a list, nothing is looked up.
    #[test]
    fn a_job_is_checked_without_discovery_or_resolution() {
        let mut j: JobSection = toml::from_str(
            "name = \"web\"\ninterval = \"250ms\"\nmax_targets = 2\nlabels = { node = \"${NODE}\" }\n",
        )
        .unwrap();
        j.gather();
        let env = |v: &str| (v == "NODE").then(|| "n7".to_owned());
        let s =
            validate::settings(&j, 0, &JobSettings::default(), Path::new("/etc"), &env).unwrap();
        assert_eq!(s.run.interval, Duration::from_millis(250));
        assert_eq!(s.labels["node"], "n7");
        let found = |text: &str, discovered| validate::Found {
            text: text.to_owned(),
            labels: BTreeMap::new(),
            discovered,
        };
        // A discovered duplicate is skipped; past max_targets, counted.
        let (checked, over) = validate::targets(
            vec![
                found("udp://10.0.0.1:7", false),
                found("udp://10.0.0.1:7", true),
                found("udp://peer.example:7", false),
                found("udp://10.0.0.3:7", false),
            ],
            &s,
            &REGISTRY,
        )
        .unwrap();
        let names: Vec<String> = checked.iter().map(|c| c.target.to_string()).collect();
        assert_eq!(names, ["udp://10.0.0.1:7", "udp://peer.example:7"]);
        assert_eq!(over, 1);
        let e = validate::targets(
            vec![
                found("udp://10.0.0.1:7", false),
                found("udp://10.0.0.1:7", false),
            ],
            &s,
            &REGISTRY,
        )
        .unwrap_err();
        assert!(e.to_string().contains("is listed twice"), "{e}");
        // The name's address is whatever resolution said, a failure too.
        let placed = validate::placed(
            checked,
            vec![
                Ok("10.0.0.1:7".parse().unwrap()),
                Err("failed to look up".to_owned()),
            ],
            &s,
            &REGISTRY,
        )
        .unwrap();
        assert_eq!(placed.len(), 2);
        assert!(placed[1].addr.is_err());
        let e = validate::settings(
            &j,
            0,
            &JobSettings::default(),
            Path::new("/etc"),
            &|_: &str| None,
        )
        .err()
        .unwrap();
        assert!(e.to_string().contains("labels.node"), "{e}");
    }

    /// `trace_every` in `[defaults]` traces the jobs that have udp://,
    /// tcp:// or icmp:// targets and leaves the others be; a job's own is
    /// refused without one. `trace_rounds` needs `trace_hops`, and is
    /// bounded.
    #[tokio::test]
    async fn trace_every_needs_traceable_targets_only_where_a_job_names_it() {
        let c = literals_only(
            "[defaults]\ntrace_every = \"5m\"\n[[job]]\nname = \"u\"\ntargets = [\"udp://10.0.0.1:7\"]\n[[job]]\nname = \"t\"\ntargets = [\"tcp://10.0.0.1:7\"]\n[[job]]\nname = \"d\"\ntargets = [\"tcp-connect://10.0.0.1:53\"]\n",
        )
        .await
        .unwrap();
        assert_eq!(c.jobs[0].trace_every, Some(Duration::from_secs(300)));
        assert_eq!(c.jobs[1].trace_every, Some(Duration::from_secs(300)));
        let e = literals_only(
            "[[job]]\nname = \"d\"\ntrace_every = \"5m\"\ntargets = [\"tcp-connect://10.0.0.1:53\"]\n",
        )
        .await
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("trace_every: traces the paths to udp://, tcp:// and icmp:// targets"),
            "{e}"
        );
        for (keys, want) in [
            ("trace_rounds = 3", "set trace_hops = true too"),
            ("trace_hops = true\ntrace_rounds = 21", "at most 20"),
        ] {
            let e = literals_only(&format!(
                "[[job]]\nname = \"u\"\ntrace_every = \"5m\"\n{keys}\ntargets = [\"udp://10.0.0.1:7\"]\n"
            ))
            .await
            .unwrap_err()
            .to_string();
            assert!(e.contains(want), "{keys}: {e}");
        }
        // A job that discovers its targets may have none yet (its DNS
        // down, as the fleet lab's node added while DNS is stopped): it
        // must still start.
        let env = |_: &str| None;
        for (sources, refused) in [
            ("targets = []", true),
            ("dns_sd = [\"udp://_prober._udp.fleet.lab\"]", false),
            ("file_sd = [\"peers.json\"]", false),
        ] {
            let mut j: JobSection =
                toml::from_str(&format!("name = \"u\"\ntrace_every = \"5m\"\n{sources}\n"))
                    .unwrap();
            j.gather();
            let s = validate::settings(&j, 0, &JobSettings::default(), Path::new("/etc"), &env)
                .unwrap();
            let e = validate::targets(Vec::new(), &s, &REGISTRY);
            assert_eq!(e.is_err(), refused, "{sources}: {e:?}");
        }
        let e = literals_only(
            "[[job]]\nname = \"u\"\ntrace_every = \"10ms\"\ntargets = [\"udp://10.0.0.1:7\"]\n",
        )
        .await
        .unwrap_err()
        .to_string();
        assert!(e.contains("at most once a second"), "{e}");
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

//! The config file's schema: the serde structs its TOML is read into, as
//! written. Checking them is [`super::validate`]'s; finding targets is
//! [`super::discover`]'s.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;

use serde::Deserialize;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct FileConfig {
    /// A config with no jobs is meant (a responder only, or every job
    /// removed on purpose): without it, a reload that finds no jobs (a
    /// config tool that truncated the file mid-write) is refused.
    #[serde(default)]
    pub(super) allow_empty: bool,
    /// With the protocols' tables (`[defaults.http]`) set aside.
    #[serde(default)]
    pub(super) defaults: crate::own_tables::WithOwn<JobSettings>,
    #[serde(default)]
    pub(super) serve: ServeSection,
    pub(super) metrics: Option<MetricsSection>,
    #[serde(default)]
    pub(super) stamps: StampsSection,
    #[serde(default)]
    pub(super) receive: ReceiveSection,
    #[serde(default)]
    pub(super) probing: ProbingSection,
    #[serde(default)]
    pub(super) discovery: DiscoverySection,
    pub(super) otlp: Option<OtlpSection>,
    pub(super) blackbox: Option<BlackboxSection>,
    /// With the protocols' tables (`[job.http]`) set aside.
    #[serde(default, rename = "job")]
    pub(super) jobs: Vec<crate::own_tables::WithOwn<JobSection>>,
}

/// `[otlp]`: push metrics to an OpenTelemetry collector.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct OtlpSection {
    /// `http://collector:4317` (OTLP over gRPC).
    pub(super) endpoint: String,
    /// How often to push (`10s` by default).
    pub(super) interval: Option<String>,
    /// How long one push may take (`5s` by default).
    pub(super) timeout: Option<String>,
}

/// `[serve]`'s keys for the responders' limits (beside the listeners and
/// the responders' own settings).
pub(super) const LIMIT_KEYS: &[&str] = &[
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
    pub(super) given: BTreeMap<String, toml::Value>,
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

/// `[blackbox]`: `/probe` as blackbox_exporter serves it.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct BlackboxSection {
    /// blackbox_exporter's `blackbox.yml`, whose modules `/probe` serves.
    pub(super) config: Option<PathBuf>,
    /// Host name globs and address ranges `/probe` may probe (`["*"]`:
    /// anything).
    pub(super) allowed_targets: Option<Vec<String>>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct MetricsSection {
    /// 127.0.0.1:9707 unless given: only this host can read the metrics
    /// and the status page until they are exposed on purpose.
    #[serde(default = "default_metrics_listen")]
    pub(super) listen: SocketAddr,
    #[serde(default)]
    pub(super) parts: bool,
    /// Classic bucket bounds, seconds.
    pub(super) buckets: Option<Vec<f64>>,
    /// Native (exponential) buckets for protobuf scrapes; on by default.
    pub(super) native_histograms: Option<bool>,
    /// Their growth factor (1.1 by default).
    pub(super) native_bucket_factor: Option<f64>,
    /// Which histogram families are exported, and how: `off`, `classic`,
    /// `native` or `both`, by family (`rtt`, `latency`, `send_lag`,
    /// `ipdv`, `loss_burst`, `phases`, `parts`).
    pub(super) histograms: Option<BTreeMap<String, String>>,
    /// HTTP basic authentication for every page but `/healthz` and
    /// `/readyz`.
    pub(super) basic_auth: Option<BasicAuthSection>,
    /// A bearer token (in a file) instead.
    pub(super) bearer_token_file: Option<PathBuf>,
    /// TLS, in the exporter-toolkit web config format (docs/config.md).
    pub(super) web_config: Option<PathBuf>,
}

pub(super) fn default_metrics_listen() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 9707))
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct BasicAuthSection {
    pub(super) user: String,
    pub(super) password_file: PathBuf,
}

/// `[discovery]`: the DNS server and TTL bounds of jobs' `dns_sd` names.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct DiscoverySection {
    /// `"10.0.0.53"` or `"10.0.0.53:5353"`; the system's if absent.
    pub(super) server: Option<String>,
    pub(super) ttl_floor: Option<String>,
    pub(super) ttl_ceiling: Option<String>,
    /// How often targets given by name are resolved again.
    pub(super) resolve_every: Option<String>,
}

/// `[stamps]`: kernel timestamps the daemon asks for.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct StampsSection {
    #[serde(default)]
    pub(super) transmit: bool,
}

/// `[probing]`: the thread that sends and receives the probes; read at
/// start only.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ProbingSection {
    /// Its `SCHED_FIFO` priority, 1 to 99 (off by default).
    pub(super) realtime_priority: Option<i64>,
}

/// `[receive]`: how UDP, ICMP, TCP and gRPC probes wait for replies, as `prober
/// run`'s `--receive` and `--spin-budget`; read at start only.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ReceiveSection {
    /// `adaptive` (the default) or `async`.
    pub(super) mode: Option<String>,
    /// The longest spin after one send (`100us` by default).
    pub(super) spin_budget: Option<String>,
    /// The share of one CPU all spins together may take (0.02 by default).
    pub(super) cpu_share: Option<f64>,
}

/// `[job.tls]`, as `prober run`'s `--ca`, `--cert`, `--key`,
/// `--tls-server-name` and `--insecure`.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct TlsSection {
    pub(super) ca: Option<PathBuf>,
    /// `"system"` (the default) or `"mozilla"`: the roots without `ca`.
    pub(super) roots: Option<String>,
    pub(super) cert: Option<PathBuf>,
    pub(super) key: Option<PathBuf>,
    pub(super) server_name: Option<String>,
    #[serde(default)]
    pub(super) insecure: bool,
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
        pub(super) struct JobSettings {
            $( $(#[$attr])* pub(super) $field: $ty, )*
        }

        #[derive(Debug, Deserialize)]
        #[serde(deny_unknown_fields)]
        pub(super) struct JobSection {
            pub(super) name: String,
            #[serde(default)]
            pub(super) targets: Vec<String>,
            pub(super) targets_file: Option<PathBuf>,
            /// Prometheus `file_sd` files (JSON or YAML) with more targets.
            #[serde(default)]
            pub(super) file_sd: Vec<PathBuf>,
            /// The scheme of `file_sd` entries written `host:port`.
            pub(super) file_sd_scheme: Option<String>,
            /// Targets from DNS: `udp://peers.example:7` (every A/AAAA
            /// address, port 7) or `udp://_prober._udp.example` (SRV).
            #[serde(default)]
            pub(super) dns_sd: Vec<String>,
            $( $(#[$attr])* pub(super) $field: $ty, )*
            #[serde(skip)]
            pub(super) settings: JobSettings,
        }

        impl JobSection {
            /// Gathers the settings into [`JobSection::settings`].
            pub(super) fn gather(&mut self) {
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
    /// Trace the path to each `udp://` target this often (`"5m"`).
    trace_every: Option<String>,
    /// Export each traced branch's hops as series (`prober_path_hop_info`).
    trace_hops: Option<bool>,
    /// Measure each traced branch this many times after a trace, for the
    /// hops' RTT and loss series (needs `trace_hops`).
    trace_rounds: Option<u32>,
}

/// A firewall mark as TOML gives it: a number, or text such as "0x2a".
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub(super) enum FwMark {
    Number(u32),
    Text(String),
}

//! blackbox_exporter's configuration file, `blackbox.yml`, as version 0.23
//! reads it (Debian 12's): the same keys, the same defaults, and the same
//! refusals at load. What it then does:
//! - a file blackbox_exporter would refuse is refused whole, with one line;
//! - each module prober can honour becomes a [`Module`]: a scheme, the
//!   protocol's own options (the `[job.http]`-style table its crate reads),
//!   TLS files, and the checks made after the probe (HTTP versions, SSL);
//! - a module prober cannot honour (another prober, a field prober does
//!   not implement) is not loaded: [`Modules::refused`] says which field,
//!   and `/probe` answers 400 with it. Nothing is half-honoured.
//!
//! The schema is serde structs with `deny_unknown_fields` because
//! blackbox_exporter reads its file strictly (an unknown key refuses it).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use prober_core::Registry;
use prober_core::protocol::{Marks, TlsFiles};
use prober_core::shared::Shared;
use prober_net::options::ProtocolOptions;
use serde::Deserialize;

/// The file.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileYaml {
    #[serde(default)]
    modules: BTreeMap<String, ModuleYaml>,
}

/// One module.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct ModuleYaml {
    prober: String,
    timeout: Option<GoDuration>,
    http: Option<HttpYaml>,
    tcp: Option<TcpYaml>,
    icmp: Option<IcmpYaml>,
    dns: Option<DnsYaml>,
    grpc: Option<GrpcYaml>,
}

/// A Prometheus duration (`5s`, `1m30s`, `250ms`), as blackbox reads
/// `timeout`.
#[derive(Debug, Clone, Copy)]
struct GoDuration(Duration);

impl<'de> Deserialize<'de> for GoDuration {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        parse_duration(&text)
            .map(GoDuration)
            .ok_or_else(|| serde::de::Error::custom(format!("cannot read {text:?} as a duration")))
    }
}

/// `[0-9]+(ms|s|m|h|d|w|y)`, repeated largest unit first (Prometheus's
/// `model.ParseDuration`).
fn parse_duration(text: &str) -> Option<Duration> {
    const UNITS: [(&str, u64); 7] = [
        ("ms", 1),
        ("s", 1000),
        ("m", 60_000),
        ("h", 3_600_000),
        ("d", 86_400_000),
        ("w", 604_800_000),
        ("y", 31_536_000_000),
    ];
    if text == "0" {
        return Some(Duration::ZERO);
    }
    if text.is_empty() {
        return None;
    }
    let mut rest = text;
    let mut total: u64 = 0;
    let mut last = u64::MAX;
    while !rest.is_empty() {
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return None;
        }
        let n: u64 = rest[..digits].parse().ok()?;
        rest = &rest[digits..];
        // "ms" is tried before "m", so that 5ms is not 5 minutes and an s.
        let (unit, ms) = UNITS.iter().find(|(u, _)| rest.starts_with(u))?;
        // Largest unit first, each once: 1m30s, not 30s1m.
        if *ms >= last {
            return None;
        }
        last = *ms;
        rest = &rest[unit.len()..];
        total = total.checked_add(n.checked_mul(*ms)?)?;
    }
    Some(Duration::from_millis(total))
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct TlsYaml {
    insecure_skip_verify: bool,
    ca_file: Option<PathBuf>,
    cert_file: Option<PathBuf>,
    key_file: Option<PathBuf>,
    server_name: Option<String>,
    min_version: Option<String>,
    max_version: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct BasicAuthYaml {
    username: String,
    password: Option<String>,
    password_file: Option<PathBuf>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct AuthorizationYaml {
    #[serde(rename = "type")]
    kind: Option<String>,
    credentials: Option<String>,
    credentials_file: Option<PathBuf>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct OAuth2Yaml {
    client_id: String,
    client_secret: Option<String>,
    client_secret_file: Option<PathBuf>,
    scopes: Vec<String>,
    token_url: String,
    endpoint_params: BTreeMap<String, String>,
    tls_config: Option<TlsYaml>,
    proxy_url: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct HeaderMatchYaml {
    header: String,
    regexp: String,
    allow_missing: bool,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct HttpYaml {
    valid_status_codes: Vec<i64>,
    valid_http_versions: Vec<String>,
    preferred_ip_protocol: Option<String>,
    ip_protocol_fallback: Option<bool>,
    skip_resolve_phase_with_proxy: bool,
    no_follow_redirects: Option<bool>,
    fail_if_ssl: bool,
    fail_if_not_ssl: bool,
    method: Option<String>,
    headers: BTreeMap<String, String>,
    fail_if_body_matches_regexp: Vec<String>,
    fail_if_body_not_matches_regexp: Vec<String>,
    fail_if_header_matches: Vec<HeaderMatchYaml>,
    fail_if_header_not_matches: Vec<HeaderMatchYaml>,
    body: Option<String>,
    body_size_limit: Option<String>,
    compression: Option<String>,
    // Prometheus's HTTP client settings, inline in blackbox's http module.
    basic_auth: Option<BasicAuthYaml>,
    authorization: Option<AuthorizationYaml>,
    oauth2: Option<OAuth2Yaml>,
    bearer_token: Option<String>,
    bearer_token_file: Option<PathBuf>,
    tls_config: Option<TlsYaml>,
    proxy_url: Option<String>,
    proxy_connect_header: Option<BTreeMap<String, Vec<String>>>,
    follow_redirects: Option<bool>,
    enable_http2: Option<bool>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct QueryResponseYaml {
    expect: Option<String>,
    send: Option<String>,
    starttls: bool,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct TcpYaml {
    preferred_ip_protocol: Option<String>,
    ip_protocol_fallback: Option<bool>,
    source_ip_address: Option<String>,
    query_response: Vec<QueryResponseYaml>,
    tls: bool,
    tls_config: Option<TlsYaml>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct IcmpYaml {
    preferred_ip_protocol: Option<String>,
    ip_protocol_fallback: Option<bool>,
    source_ip_address: Option<String>,
    dont_fragment: bool,
    payload_size: Option<i64>,
    ttl: Option<i64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct RrsYaml {
    fail_if_matches_regexp: Vec<String>,
    fail_if_all_match_regexp: Vec<String>,
    fail_if_not_matches_regexp: Vec<String>,
    fail_if_none_matches_regexp: Vec<String>,
}

impl RrsYaml {
    fn regexps(&self) -> impl Iterator<Item = &String> {
        self.fail_if_matches_regexp
            .iter()
            .chain(&self.fail_if_all_match_regexp)
            .chain(&self.fail_if_not_matches_regexp)
            .chain(&self.fail_if_none_matches_regexp)
    }

    fn is_empty(&self) -> bool {
        self.regexps().next().is_none()
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct DnsYaml {
    preferred_ip_protocol: Option<String>,
    ip_protocol_fallback: Option<bool>,
    source_ip_address: Option<String>,
    transport_protocol: Option<String>,
    dns_over_tls: bool,
    tls_config: Option<TlsYaml>,
    query_name: String,
    query_type: Option<String>,
    query_class: Option<String>,
    recursion_desired: Option<bool>,
    valid_rcodes: Vec<String>,
    validate_answer_rrs: RrsYaml,
    validate_authority_rrs: RrsYaml,
    validate_additional_rrs: RrsYaml,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct GrpcYaml {
    service: String,
    preferred_ip_protocol: Option<String>,
    ip_protocol_fallback: Option<bool>,
    tls: bool,
    tls_config: Option<TlsYaml>,
}

/// Which address family a module resolves names to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct IpPreference {
    /// `preferred_ip_protocol: ip6` (blackbox's default), else IPv4.
    pub(crate) v6: bool,
    /// `ip_protocol_fallback`: the other family when the preferred one has
    /// no address (default true).
    pub(crate) fallback: bool,
}

/// The blackbox prober a module is of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Http,
    Tcp,
    Icmp,
    Dns,
    Grpc,
}

impl Kind {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Self::Http => "http",
            Self::Tcp => "tcp",
            Self::Icmp => "icmp",
            Self::Dns => "dns",
            Self::Grpc => "grpc",
        }
    }
}

/// One step of a TCP module's `query_response`.
#[derive(Debug, Clone)]
pub(crate) struct Step {
    /// A regex a line read must match (`${1}` in a later `send` is its
    /// group).
    pub(crate) expect: Option<regex::bytes::Regex>,
    /// A line to send, `\n`-terminated; `${N}` is group N of the last
    /// `expect`.
    pub(crate) send: Option<String>,
    /// Upgrade the connection to TLS here.
    pub(crate) starttls: bool,
}

/// A module prober can honour, ready to probe with.
#[derive(Debug)]
pub(crate) struct Module {
    pub(crate) kind: Kind,
    /// `timeout` (0: none given; the scrape's own timeout applies).
    pub(crate) timeout: Duration,
    pub(crate) ip: IpPreference,
    /// The protocol options the module's probe is built with (the
    /// protocol crate's own, read from the table the module maps to).
    pub(crate) options: Arc<Shared>,
    /// The same with redirects not followed, for a `/probe` whose
    /// `allowed_targets` is a list: a redirect could lead outside it.
    pub(crate) options_no_follow: Option<Arc<Shared>>,
    /// What the module's probes share (its ICMP sockets, with its TTL and
    /// source), apart from every other module's.
    pub(crate) shared: Arc<Shared>,
    pub(crate) tls: TlsFiles,
    pub(crate) marks: Marks,
    /// ICMP's `ttl`.
    pub(crate) ttl: Option<u32>,
    /// ICMP's `payload_size`.
    pub(crate) size: Option<usize>,
    /// HTTP: the versions a response may have (`HTTP/1.1`, `HTTP/2.0`);
    /// empty: any.
    pub(crate) http_versions: Vec<String>,
    pub(crate) fail_if_ssl: bool,
    pub(crate) fail_if_not_ssl: bool,
    /// HTTP: redirects are followed (blackbox counts a 3xx it does not
    /// follow as one redirect).
    pub(crate) follow_redirects: bool,
    /// TCP: the connection starts with TLS.
    pub(crate) tls_first: bool,
    /// TCP: the dialogue.
    pub(crate) steps: Vec<Step>,
    /// DNS: the question, as a `dns://` target's path (`NAME?type=A`),
    /// and over TCP.
    pub(crate) question: String,
    pub(crate) dns_tcp: bool,
    /// gRPC: the service whose health is asked.
    pub(crate) service: String,
}

/// A loaded `blackbox.yml`.
#[derive(Debug, Default)]
pub(crate) struct Modules {
    /// The file.
    pub(crate) path: PathBuf,
    pub(crate) loaded: BTreeMap<String, Arc<Module>>,
    /// Valid modules prober does not load, with why (the field named).
    pub(crate) refused: BTreeMap<String, String>,
}

/// Reads and checks `path`.
///
/// # Errors
/// One line: what blackbox_exporter would refuse the file for (a bad
/// value, an unknown key, a regex that does not compile), with the file
/// and module named.
pub(crate) fn load(path: &Path, registry: &Registry) -> Result<Modules, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("blackbox config {}: {e}", path.display()))?;
    let base = path.parent().unwrap_or_else(|| Path::new("."));
    parse(&text, base, registry)
        .map(|mut m| {
            m.path = path.to_owned();
            m
        })
        .map_err(|e| format!("blackbox config {}: {e}", path.display()))
}

/// Reads and checks a `blackbox.yml`'s text; relative file names are
/// relative to `base`.
///
/// # Errors
/// As [`load`].
pub(crate) fn parse(text: &str, base: &Path, registry: &Registry) -> Result<Modules, String> {
    let file: FileYaml = if text.trim().is_empty() {
        FileYaml::default()
    } else {
        serde_norway::from_str(text).map_err(|e| one_line(&e.to_string()))?
    };
    let mut out = Modules::default();
    for (name, m) in &file.modules {
        validate(m).map_err(|e| format!("module {name}: {e}"))?;
        match plan(name, m, base, registry) {
            Ok(module) => {
                out.loaded.insert(name.clone(), Arc::new(module));
            }
            Err(why) => {
                out.refused.insert(name.clone(), why);
            }
        }
    }
    Ok(out)
}

/// A YAML error on one line, without serde's list of every key the
/// section could have had (its place in the file stays).
pub(crate) fn one_line(text: &str) -> String {
    let text = text.split_whitespace().collect::<Vec<_>>().join(" ");
    match text.split_once(", expected one of ") {
        Some((head, rest)) => match rest.rsplit_once(" at line ") {
            Some((_, at)) => format!("{head} at line {at}"),
            None => head.to_owned(),
        },
        None => text,
    }
}

/// What blackbox_exporter 0.23 refuses at load, beyond the schema.
fn validate(m: &ModuleYaml) -> Result<(), String> {
    let regex = |re: &String| {
        regex::Regex::new(re)
            .map(drop)
            .map_err(|_| format!("\"Could not compile regular expression\" regexp={re:?}"))
    };
    if let Some(h) = &m.http {
        h.fail_if_body_matches_regexp
            .iter()
            .chain(&h.fail_if_body_not_matches_regexp)
            .try_for_each(regex)?;
        for hm in h
            .fail_if_header_matches
            .iter()
            .chain(&h.fail_if_header_not_matches)
        {
            if hm.header.is_empty() {
                return Err("header name must be set for HTTP header matchers".into());
            }
            if hm.regexp.is_empty() {
                return Err("regexp must be set for HTTP header matchers".into());
            }
            regex(&hm.regexp)?;
        }
        if let Some(b) = &h.basic_auth
            && b.password.is_some()
            && b.password_file.is_some()
        {
            return Err(
                "at most one of basic_auth password & password_file must be configured".into(),
            );
        }
        let auths = [
            h.basic_auth.is_some(),
            h.oauth2.is_some(),
            h.bearer_token.is_some() || h.bearer_token_file.is_some(),
            h.authorization.is_some(),
        ];
        if h.bearer_token.is_some() && h.bearer_token_file.is_some() {
            return Err(
                "at most one of bearer_token & bearer_token_file must be configured".into(),
            );
        }
        if auths.iter().filter(|a| **a).count() > 1 {
            return Err("at most one of basic_auth, oauth2, bearer_token & bearer_token_file must be configured".into());
        }
        if let Some(o) = &h.oauth2
            && o.client_secret.is_none()
            && o.client_secret_file.is_none()
        {
            return Err(
                "either oauth2 client_secret or client_secret_file must be configured".into(),
            );
        }
        if let Some(p) = &h.proxy_url
            && !p.contains("://")
        {
            return Err(format!("parse {p:?}: missing protocol scheme"));
        }
        if h.proxy_connect_header.is_some() && h.proxy_url.is_none() {
            return Err(
                "if proxy_connect_header is configured proxy_url must also be configured".into(),
            );
        }
        if let Some(limit) = &h.body_size_limit {
            parse_size(limit)?;
        }
        if let Some(c) = h.compression.as_deref().filter(|c| !c.is_empty())
            && let Some((_, accept)) = h
                .headers
                .iter()
                .find(|(k, _)| k.eq_ignore_ascii_case("accept-encoding"))
            && !accept.split(',').any(|e| {
                e.split(';')
                    .next()
                    .is_some_and(|e| e.trim().eq_ignore_ascii_case(c))
            })
        {
            return Err(format!(
                "invalid configuration \"Accept-Encoding: {accept}\", \"compression: {c}\""
            ));
        }
        tls_version(h.tls_config.as_ref())?;
    }
    if let Some(t) = &m.tcp {
        for step in &t.query_response {
            if let Some(re) = &step.expect {
                regex(re)?;
            }
        }
        tls_version(t.tls_config.as_ref())?;
    }
    if let Some(i) = &m.icmp {
        match i.ttl {
            Some(t) if t < 0 => return Err("\"ttl\" cannot be negative".into()),
            Some(t) if t > 255 => return Err("\"ttl\" cannot exceed 255".into()),
            _ => {}
        }
    }
    if let Some(d) = &m.dns {
        if let Some(t) = &d.query_type
            && record_type(t).is_none()
        {
            return Err(format!("query type '{t}' is not valid"));
        }
        if let Some(c) = &d.query_class
            && !["IN", "CH", "CHAOS", "HS", "HESIOD", "NONE", "ANY"]
                .contains(&c.to_ascii_uppercase().as_str())
        {
            return Err(format!("query class '{c}' is not valid"));
        }
        for rrs in [
            &d.validate_answer_rrs,
            &d.validate_authority_rrs,
            &d.validate_additional_rrs,
        ] {
            rrs.regexps().try_for_each(regex)?;
        }
        tls_version(d.tls_config.as_ref())?;
    }
    if let Some(g) = &m.grpc {
        tls_version(g.tls_config.as_ref())?;
    }
    Ok(())
}

fn tls_version(tls: Option<&TlsYaml>) -> Result<(), String> {
    let Some(tls) = tls else { return Ok(()) };
    for v in [&tls.min_version, &tls.max_version].into_iter().flatten() {
        if !["TLS10", "TLS11", "TLS12", "TLS13"].contains(&v.as_str()) {
            return Err(format!("unknown TLS version: {v}"));
        }
    }
    Ok(())
}

/// A record type blackbox knows by name (miekg/dns's `StringToType`).
fn record_type(t: &str) -> Option<&'static str> {
    const TYPES: [&str; 26] = [
        "A", "AAAA", "ANY", "CAA", "CNAME", "DNAME", "DNSKEY", "DS", "HINFO", "HTTPS", "LOC", "MX",
        "NAPTR", "NS", "NSEC", "NSEC3", "OPT", "PTR", "RRSIG", "SOA", "SPF", "SRV", "SSHFP",
        "SVCB", "TLSA", "TXT",
    ];
    TYPES.iter().copied().find(|x| *x == t)
}

/// `10MB`, `1KiB`... as Go's `units.Base2Bytes` reads them (a unit is
/// required; KB is 1024).
fn parse_size(text: &str) -> Result<u64, String> {
    let digits = text.bytes().take_while(u8::is_ascii_digit).count();
    let (n, unit) = text.split_at(digits);
    let mult: u64 = match unit {
        "B" => 1,
        "KB" | "KiB" | "K" | "k" | "kB" => 1 << 10,
        "MB" | "MiB" | "M" => 1 << 20,
        "GB" | "GiB" | "G" => 1 << 30,
        "TB" | "TiB" | "T" => 1 << 40,
        _ => return Err(format!("units: unknown unit {unit} in {text}")),
    };
    n.parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(mult))
        .ok_or_else(|| format!("units: cannot read {text}"))
}

fn ip_preference(preferred: Option<&str>, fallback: Option<bool>) -> Result<IpPreference, String> {
    let v6 = match preferred.unwrap_or("ip6") {
        "ip6" | "" => true,
        "ip4" => false,
        other => {
            return Err(format!(
                "preferred_ip_protocol {other:?}: prober knows ip4 and ip6"
            ));
        }
    };
    Ok(IpPreference {
        v6,
        fallback: fallback.unwrap_or(true),
    })
}

/// A field prober does not implement: the reason a module is not loaded.
fn refuse(field: &str, why: &str) -> String {
    format!("field {field}: {why}")
}

fn tls_files(tls: Option<&TlsYaml>, at: &str, base: &Path) -> Result<TlsFiles, String> {
    let Some(t) = tls else {
        return Ok(TlsFiles::default());
    };
    if t.min_version.is_some() || t.max_version.is_some() {
        let which = if t.min_version.is_some() {
            "min_version"
        } else {
            "max_version"
        };
        return Err(refuse(
            &format!("{at}.tls_config.{which}"),
            "prober speaks TLS 1.2 and 1.3 and does not pin a version",
        ));
    }
    Ok(TlsFiles {
        ca: t.ca_file.as_ref().map(|p| base.join(p)),
        cert: t.cert_file.as_ref().map(|p| base.join(p)),
        key: t.key_file.as_ref().map(|p| base.join(p)),
        server_name: t.server_name.clone().filter(|s| !s.is_empty()),
        insecure: t.insecure_skip_verify,
        ..TlsFiles::default()
    })
}

fn source(addr: Option<&String>, at: &str) -> Result<Marks, String> {
    match addr.filter(|a| !a.is_empty()) {
        None => Ok(Marks::default()),
        Some(a) => a
            .parse()
            .map(|ip| Marks {
                source: Some(ip),
                ..Marks::default()
            })
            .map_err(|_| {
                refuse(
                    &format!("{at}.source_ip_address"),
                    &format!("{a:?} is not an IP address"),
                )
            }),
    }
}

/// Reads `table` as the options of the protocol that keeps them in
/// `[job.KEY]`, checked by its crate, into a store of their own.
fn protocol_options(
    registry: &Registry,
    key: &str,
    table: toml::Table,
    at: &str,
) -> Result<Arc<Shared>, String> {
    let store = Arc::new(Shared::default());
    let Some(own) = ProtocolOptions::all(registry)
        .into_iter()
        .find(|o| o.key == key)
    else {
        return Err(format!("this prober has no {key} options"));
    };
    let options = (own.from_toml)(toml::Value::Table(table)).map_err(|e| format!("{at}: {e}"))?;
    options.put(&store, None, Some(at))?;
    Ok(store)
}

fn empty(kind: Kind, timeout: Duration, ip: IpPreference) -> Module {
    Module {
        kind,
        timeout,
        ip,
        options: Arc::new(Shared::default()),
        options_no_follow: None,
        shared: Arc::new(Shared::default()),
        tls: TlsFiles::default(),
        marks: Marks::default(),
        ttl: None,
        size: None,
        http_versions: Vec::new(),
        fail_if_ssl: false,
        fail_if_not_ssl: false,
        follow_redirects: false,
        tls_first: false,
        steps: Vec::new(),
        question: String::new(),
        dns_tcp: false,
        service: String::new(),
    }
}

/// Makes a module prober can honour, or says which field it cannot.
fn plan(name: &str, m: &ModuleYaml, base: &Path, registry: &Registry) -> Result<Module, String> {
    let timeout = m.timeout.map_or(Duration::ZERO, |t| t.0);
    let at = |prober: &str| format!("modules.{name}.{prober}");
    match m.prober.as_str() {
        "http" => {
            let h = HttpYaml::default();
            let h = m.http.as_ref().unwrap_or(&h);
            let at = at("http");
            http(h, &at, base, registry, timeout)
        }
        "tcp" => {
            let t = TcpYaml::default();
            let t = m.tcp.as_ref().unwrap_or(&t);
            tcp(t, &at("tcp"), base, timeout)
        }
        "icmp" => {
            let i = IcmpYaml::default();
            let i = m.icmp.as_ref().unwrap_or(&i);
            let at = at("icmp");
            let ip = ip_preference(i.preferred_ip_protocol.as_deref(), i.ip_protocol_fallback)?;
            if i.dont_fragment {
                return Err(refuse(
                    &format!("{at}.dont_fragment"),
                    "prober does not set DF on its echo requests",
                ));
            }
            let mut module = empty(Kind::Icmp, timeout, ip);
            module.marks = source(i.source_ip_address.as_ref(), &at)?;
            // 0: not set, as blackbox has it.
            module.ttl = i.ttl.and_then(|t| u32::try_from(t).ok()).filter(|t| *t > 0);
            if let Some(size) = i.payload_size {
                let size = usize::try_from(size)
                    .map_err(|_| refuse(&format!("{at}.payload_size"), "a negative size"))?;
                module.size = Some(size);
            }
            Ok(module)
        }
        "dns" => {
            let d = DnsYaml::default();
            let d = m.dns.as_ref().unwrap_or(&d);
            dns(d, &at("dns"), registry, timeout)
        }
        "grpc" => {
            let g = GrpcYaml::default();
            let g = m.grpc.as_ref().unwrap_or(&g);
            let at = at("grpc");
            let ip = ip_preference(g.preferred_ip_protocol.as_deref(), g.ip_protocol_fallback)?;
            let mut module = empty(Kind::Grpc, timeout, ip);
            module.tls = tls_files(g.tls_config.as_ref(), &at, base)?;
            module.tls_first = g.tls;
            module.service.clone_from(&g.service);
            Ok(module)
        }
        "" => Err("no prober: write prober: http, tcp, icmp, dns or grpc".into()),
        other => Err(format!(
            "prober {other:?}: prober serves http, tcp, icmp, dns and grpc modules"
        )),
    }
}

fn http(
    h: &HttpYaml,
    at: &str,
    base: &Path,
    registry: &Registry,
    timeout: Duration,
) -> Result<Module, String> {
    let ip = ip_preference(h.preferred_ip_protocol.as_deref(), h.ip_protocol_fallback)?;
    let field = |f: &str| format!("{at}.{f}");
    if h.proxy_url.is_some() {
        return Err(refuse(
            &field("proxy_url"),
            "prober connects to targets directly",
        ));
    }
    if h.oauth2.is_some() {
        return Err(refuse(
            &field("oauth2"),
            "prober does not fetch OAuth 2.0 tokens",
        ));
    }
    if let Some(c) = h
        .compression
        .as_deref()
        .filter(|c| !c.is_empty() && *c != "identity")
    {
        return Err(refuse(
            &field("compression"),
            &format!("prober does not decompress {c} bodies"),
        ));
    }
    if !h.fail_if_header_matches.is_empty() {
        return Err(refuse(
            &field("fail_if_header_matches"),
            "prober checks only that headers match",
        ));
    }
    if h.fail_if_header_not_matches.iter().any(|m| m.allow_missing) {
        return Err(refuse(
            &field("fail_if_header_not_matches.allow_missing"),
            "prober's header checks require the header",
        ));
    }
    if h.fail_if_body_not_matches_regexp.len() > 1 {
        return Err(refuse(
            &field("fail_if_body_not_matches_regexp"),
            "prober checks one regexp the body must match",
        ));
    }
    for v in &h.valid_http_versions {
        if !["HTTP/1.0", "HTTP/1.1", "HTTP/2.0", "HTTP/2"].contains(&v.as_str()) {
            return Err(refuse(
                &field("valid_http_versions"),
                &format!("{v:?} is not an HTTP version prober speaks"),
            ));
        }
    }
    let mut table = toml::Table::new();
    let mut headers: Vec<toml::Value> = h
        .headers
        .iter()
        .map(|(k, v)| toml::Value::String(format!("{k}: {v}")))
        .collect();
    if let Some(auth) = authorization(h, base).map_err(|e| format!("{at}: {e}"))? {
        headers.push(toml::Value::String(format!("Authorization: {auth}")));
    }
    if !headers.is_empty() {
        table.insert("headers".into(), toml::Value::Array(headers));
    }
    if let Some(method) = &h.method {
        table.insert("method".into(), method.clone().into());
    }
    if let Some(body) = &h.body {
        table.insert("body".into(), body.clone().into());
    }
    if !h.valid_status_codes.is_empty() {
        let codes: Vec<String> = h.valid_status_codes.iter().map(i64::to_string).collect();
        table.insert("expect_status".into(), codes.join(",").into());
    }
    if !h.fail_if_body_matches_regexp.is_empty() {
        // Fails when any matches: one regex that is their alternation.
        let any: Vec<String> = h
            .fail_if_body_matches_regexp
            .iter()
            .map(|r| format!("(?:{r})"))
            .collect();
        table.insert("reject_body".into(), any.join("|").into());
    }
    if let Some(re) = h.fail_if_body_not_matches_regexp.first() {
        table.insert("expect_body".into(), re.clone().into());
    }
    if !h.fail_if_header_not_matches.is_empty() {
        let checks: Vec<toml::Value> = h
            .fail_if_header_not_matches
            .iter()
            .map(|m| toml::Value::String(format!("{}: {}", m.header, m.regexp)))
            .collect();
        table.insert("expect_header".into(), toml::Value::Array(checks));
    }
    // blackbox follows up to 10 redirects unless told not to.
    let follow = !(h.no_follow_redirects == Some(true) || h.follow_redirects == Some(false));
    table.insert(
        "follow".into(),
        toml::Value::Integer(if follow { 10 } else { 0 }),
    );
    if h.enable_http2 == Some(false) {
        table.insert("http1_1".into(), true.into());
    }
    // blackbox reads any body whole unless limited; prober holds a body in
    // memory, so "no limit" is a large one.
    let limit = match &h.body_size_limit {
        Some(l) => parse_size(l)?,
        None => 0,
    };
    let limit = if limit == 0 { UNLIMITED_BODY } else { limit };
    table.insert(
        "max_body".into(),
        toml::Value::Integer(i64::try_from(limit).unwrap_or(i64::MAX)),
    );
    table.insert("new_connection".into(), true.into());
    let mut module = empty(Kind::Http, timeout, ip);
    if follow {
        let mut no_follow = table.clone();
        no_follow.insert("follow".into(), toml::Value::Integer(0));
        module.options_no_follow =
            Some(protocol_options(registry, "http", no_follow, at).map_err(|e| refuse(at, &e))?);
    }
    module.options = protocol_options(registry, "http", table, at).map_err(|e| refuse(at, &e))?;
    module.tls = tls_files(h.tls_config.as_ref(), at, base)?;
    module.http_versions.clone_from(&h.valid_http_versions);
    module.fail_if_ssl = h.fail_if_ssl;
    module.fail_if_not_ssl = h.fail_if_not_ssl;
    module.follow_redirects = follow;
    Ok(module)
}

/// The largest body an HTTP module without `body_size_limit` reads.
pub(crate) const UNLIMITED_BODY: u64 = 64 << 20;

/// The `Authorization` header's value a module's credentials make.
fn authorization(h: &HttpYaml, base: &Path) -> Result<Option<String>, String> {
    use base64::Engine as _;
    let read = |p: &PathBuf| {
        std::fs::read_to_string(base.join(p))
            .map(|s| s.trim().to_owned())
            .map_err(|e| format!("reading {}: {e}", p.display()))
    };
    if let Some(b) = &h.basic_auth {
        let password = match (&b.password, &b.password_file) {
            (Some(p), _) => p.clone(),
            (None, Some(f)) => read(f)?,
            (None, None) => String::new(),
        };
        let pair = format!("{}:{password}", b.username);
        return Ok(Some(format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode(pair)
        )));
    }
    if let Some(t) = &h.bearer_token {
        return Ok(Some(format!("Bearer {t}")));
    }
    if let Some(f) = &h.bearer_token_file {
        return Ok(Some(format!("Bearer {}", read(f)?)));
    }
    if let Some(a) = &h.authorization {
        let credentials = match (&a.credentials, &a.credentials_file) {
            (Some(c), _) => c.clone(),
            (None, Some(f)) => read(f)?,
            (None, None) => String::new(),
        };
        let kind = a.kind.as_deref().unwrap_or("Bearer");
        return Ok(Some(format!("{kind} {credentials}")));
    }
    Ok(None)
}

fn tcp(t: &TcpYaml, at: &str, base: &Path, timeout: Duration) -> Result<Module, String> {
    let ip = ip_preference(t.preferred_ip_protocol.as_deref(), t.ip_protocol_fallback)?;
    let mut module = empty(Kind::Tcp, timeout, ip);
    module.marks = source(t.source_ip_address.as_ref(), at)?;
    module.tls = tls_files(t.tls_config.as_ref(), at, base)?;
    module.tls_first = t.tls;
    module.steps = t
        .query_response
        .iter()
        .map(|s| Step {
            // Compiled once in validate(): this cannot fail.
            expect: s
                .expect
                .as_deref()
                .and_then(|re| regex::bytes::Regex::new(re).ok()),
            send: s.send.clone(),
            starttls: s.starttls,
        })
        .collect();
    Ok(module)
}

fn dns(d: &DnsYaml, at: &str, registry: &Registry, timeout: Duration) -> Result<Module, String> {
    let ip = ip_preference(d.preferred_ip_protocol.as_deref(), d.ip_protocol_fallback)?;
    let field = |f: &str| format!("{at}.{f}");
    if d.query_name.is_empty() {
        return Err(refuse(&field("query_name"), "no name to ask for"));
    }
    if d.dns_over_tls {
        return Err(refuse(
            &field("dns_over_tls"),
            "prober's DNS probe speaks UDP and TCP",
        ));
    }
    if d.source_ip_address
        .as_deref()
        .is_some_and(|s| !s.is_empty())
    {
        return Err(refuse(
            &field("source_ip_address"),
            "prober's DNS probe does not bind a source address",
        ));
    }
    if let Some(c) = d
        .query_class
        .as_deref()
        .filter(|c| !c.eq_ignore_ascii_case("IN"))
    {
        return Err(refuse(
            &field("query_class"),
            &format!("prober asks class IN only, not {c}"),
        ));
    }
    let tcp = match d.transport_protocol.as_deref() {
        None | Some("" | "udp") => false,
        Some("tcp") => true,
        Some(other) => {
            return Err(refuse(
                &field("transport_protocol"),
                &format!("{other:?}: prober speaks udp and tcp"),
            ));
        }
    };
    let answers = &d.validate_answer_rrs;
    for (what, list) in [
        ("fail_if_matches_regexp", &answers.fail_if_matches_regexp),
        (
            "fail_if_all_match_regexp",
            &answers.fail_if_all_match_regexp,
        ),
        (
            "fail_if_not_matches_regexp",
            &answers.fail_if_not_matches_regexp,
        ),
    ] {
        if !list.is_empty() {
            return Err(refuse(
                &field(&format!("validate_answer_rrs.{what}")),
                "prober checks that one answer matches a regexp (fail_if_none_matches_regexp)",
            ));
        }
    }
    if answers.fail_if_none_matches_regexp.len() > 1 {
        return Err(refuse(
            &field("validate_answer_rrs.fail_if_none_matches_regexp"),
            "prober checks one regexp",
        ));
    }
    for (what, rrs) in [
        ("validate_authority_rrs", &d.validate_authority_rrs),
        ("validate_additional_rrs", &d.validate_additional_rrs),
    ] {
        if !rrs.is_empty() {
            return Err(refuse(&field(what), "prober checks answer records only"));
        }
    }
    let mut table = toml::Table::new();
    if !d.valid_rcodes.is_empty() {
        table.insert("expect_rcode".into(), d.valid_rcodes.join(",").into());
    }
    if let Some(re) = answers.fail_if_none_matches_regexp.first() {
        table.insert("expect_answer".into(), re.clone().into());
    }
    if d.recursion_desired == Some(false) {
        table.insert("no_recursion".into(), true.into());
    }
    let mut module = empty(Kind::Dns, timeout, ip);
    module.options = protocol_options(registry, "dns", table, at).map_err(|e| refuse(at, &e))?;
    let qtype = d.query_type.as_deref().unwrap_or("ANY");
    module.question = format!("{}?type={qtype}", d.query_name);
    module.dns_tcp = tcp;
    Ok(module)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_as_prometheus_reads_them() {
        let ms = |t: &str| parse_duration(t).map(|d| d.as_millis());
        assert_eq!(ms("5s"), Some(5000));
        assert_eq!(ms("1m30s"), Some(90_000));
        assert_eq!(ms("250ms"), Some(250));
        assert_eq!(ms("1h"), Some(3_600_000));
        assert_eq!(ms("0"), Some(0));
        for bad in ["5x", "", "s", "30s1m", "1.5s", "-1s"] {
            assert_eq!(ms(bad), None, "{bad}");
        }
    }

    #[test]
    fn sizes_need_a_unit() {
        assert_eq!(parse_size("10MB"), Ok(10 << 20));
        assert_eq!(parse_size("1KiB"), Ok(1024));
        assert!(parse_size("100").is_err());
        assert!(parse_size("10XB").is_err());
    }
}

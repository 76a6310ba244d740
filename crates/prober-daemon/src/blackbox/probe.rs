//! One scrape-time probe of one module, and the answer blackbox_exporter
//! gives for it: `probe_success`, `probe_duration_seconds` and the
//! prober's own families, by blackbox's names and meanings; then prober's
//! extras (the split) under `prober_probe_*`.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::{Duration, Instant};

use prober_core::protocol::{BuildEnv, ProbeSpec};
use prober_core::{Detail, ErrorKind, Outcome, Registry};

use super::access::Allowed;
use super::config::{Kind, Module};

/// One series of a family: its labels and value.
type Row = (Vec<(String, String)>, f64);

/// Gauges by name: help, then their rows.
#[derive(Debug, Default)]
pub(crate) struct Gauges(BTreeMap<String, (&'static str, Vec<Row>)>);

impl Gauges {
    fn set(&mut self, name: &str, help: &'static str, value: f64) {
        self.with(name, help, &[], value);
    }

    fn with(&mut self, name: &str, help: &'static str, labels: &[(&str, &str)], value: f64) {
        let labels = labels
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        let entry = self
            .0
            .entry(name.to_owned())
            .or_insert_with(|| (help, Vec::new()));
        entry.1.push((labels, value));
    }

    /// The text exposition (OpenMetrics), as prometheus-client writes it.
    pub(crate) fn encode(&self) -> String {
        use prometheus_client::metrics::family::Family;
        use prometheus_client::metrics::gauge::Gauge;
        let mut registry = prometheus_client::registry::Registry::default();
        for (name, (help, rows)) in &self.0 {
            if rows.len() == 1 && rows[0].0.is_empty() {
                let g = Gauge::<f64, AtomicU64>::default();
                g.set(rows[0].1);
                registry.register(name.clone(), *help, g);
            } else {
                let f = Family::<Vec<(String, String)>, Gauge<f64, AtomicU64>>::default();
                for (labels, v) in rows {
                    f.get_or_create(labels).set(*v);
                }
                registry.register(name.clone(), *help, f);
            }
        }
        let mut out = String::new();
        // Writing to a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &registry);
        out
    }
}

/// What one probe gave.
#[derive(Debug, Default)]
pub(crate) struct Probed {
    pub(crate) success: bool,
    pub(crate) gauges: Gauges,
    pub(crate) log: Vec<String>,
    /// The target is not one the caller may have probed (403).
    pub(crate) forbidden: Option<String>,
}

/// FNV-1a (32 bits) of the address's bytes (4 for IPv4, 16 for IPv6):
/// blackbox's `probe_ip_addr_hash`, so a dashboard's "address changed"
/// reads the same.
fn addr_hash(ip: IpAddr) -> f64 {
    let bytes = match ip {
        IpAddr::V4(v4) => v4.octets().to_vec(),
        IpAddr::V6(v6) => v6.octets().to_vec(),
    };
    let mut h: u32 = 0x811c_9dc5;
    for b in bytes {
        h ^= u32::from(b);
        h = h.wrapping_mul(0x0100_0193);
    }
    f64::from(h)
}

/// A target as the module's prober reads it: host, port, path.
struct Parsed {
    scheme: &'static str,
    host: String,
    port: u16,
    path: String,
}

/// `host:port`, `[v6]:port`, or a host alone (then `default`).
fn host_port(text: &str, default: Option<u16>) -> Result<(String, u16), String> {
    if text.contains('@') {
        return Err(format!(
            "{text:?} has user information: give credentials in the module (basic_auth)"
        ));
    }
    if text.chars().any(char::is_control) {
        return Err(format!("{text:?} holds control characters"));
    }
    // As every target's authority is read.
    let (host, port) =
        prober_core::target::split_host_port(text).map_err(|e| format!("{text:?}: {e}"))?;
    if host.is_empty() {
        return Err(format!("{text:?} has no host"));
    }
    let port = match (port, default) {
        (Some(p), _) => p
            .parse::<u16>()
            .map_err(|_| format!("{text:?}: port {p:?} is not a number"))?,
        (None, Some(d)) => d,
        (None, None) => return Err(format!("{text:?}: missing port in address")),
    };
    Ok((host.to_owned(), port))
}

fn parse_target(module: &Module, target: &str) -> Result<Parsed, String> {
    match module.kind {
        Kind::Http => {
            let url = if target.contains("://") {
                target.to_owned()
            } else {
                format!("http://{target}")
            };
            let (scheme, rest) = url.split_once("://").unwrap_or(("http", &url));
            let (scheme, port) = match scheme.to_ascii_lowercase().as_str() {
                "http" => ("http", 80),
                "https" => ("https", 443),
                other => return Err(format!("unsupported scheme {other:?}: http or https")),
            };
            let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
            let (authority, path) = match authority.split_once('?') {
                Some((a, q)) if path.is_empty() => (a, format!("?{q}")),
                _ => (authority, path.to_owned()),
            };
            let (host, port) = host_port(authority, Some(port))?;
            Ok(Parsed {
                scheme,
                host,
                port,
                path,
            })
        }
        Kind::Tcp => {
            let (host, port) = host_port(target, None)?;
            let scheme = if module.tls_first || !module.steps.is_empty() {
                "" // the dialogue, not a registered probe
            } else {
                "tcp-connect"
            };
            Ok(Parsed {
                scheme,
                host,
                port,
                path: String::new(),
            })
        }
        Kind::Icmp => Ok(Parsed {
            scheme: "icmp",
            host: target
                .trim_start_matches('[')
                .trim_end_matches(']')
                .to_owned(),
            port: 0,
            path: String::new(),
        }),
        Kind::Dns => {
            let (host, port) = host_port(target, Some(53))?;
            Ok(Parsed {
                scheme: if module.dns_tcp { "dns+tcp" } else { "dns" },
                host,
                port,
                path: module.question.clone(),
            })
        }
        Kind::Grpc => {
            let bare = target
                .strip_prefix("grpc://")
                .or_else(|| target.strip_prefix("grpcs://"))
                .unwrap_or(target);
            let (host, port) = host_port(bare, None)?;
            Ok(Parsed {
                scheme: if module.tls_first {
                    "grpcs-health"
                } else {
                    "grpc-health"
                },
                host,
                port,
                path: module.service.clone(),
            })
        }
    }
}

/// Name lookups of scrape-time probes in flight at once, at most.
const LOOKUPS: usize = 64;

fn lookups() -> &'static Arc<tokio::sync::Semaphore> {
    static LOOKUP_PERMITS: std::sync::OnceLock<Arc<tokio::sync::Semaphore>> =
        std::sync::OnceLock::new();
    LOOKUP_PERMITS.get_or_init(|| Arc::new(tokio::sync::Semaphore::new(LOOKUPS)))
}

/// Resolves `host` to one address of the module's preferred family (or
/// the other, with fallback), as blackbox does.
async fn resolve(host: &str, module: &Module, log: &mut Vec<String>) -> Result<IpAddr, String> {
    if let Ok(ip) = host.parse::<IpAddr>() {
        return Ok(ip);
    }
    let want6 = module.ip.v6;
    log.push(format!(
        "Resolving target address {host} (ip_protocol {})",
        if want6 { "ip6" } else { "ip4" }
    ));
    // getaddrinfo cannot be cancelled: a lookup whose probe timed out
    // keeps its resolver thread until it returns. Each holds one of
    // LOOKUPS permits until then, so callers naming names that never
    // answer cannot pile up threads on the metrics runtime.
    let Ok(permit) = Arc::clone(lookups()).try_acquire_owned() else {
        return Err(format!(
            "Error resolving address {host}: {LOOKUPS} lookups are under way"
        ));
    };
    let name = host.to_owned();
    let lookup = tokio::spawn(async move {
        let _permit = permit;
        tokio::net::lookup_host((name.as_str(), 0))
            .await
            .map(|a| a.map(|a| a.ip()).collect::<Vec<IpAddr>>())
    });
    let addrs: Vec<IpAddr> = lookup
        .await
        .map_err(|e| format!("Error resolving address {host}: {e}"))?
        .map_err(|e| format!("Error resolving address {host}: {e}"))?;
    let pick = |v6: bool| addrs.iter().copied().find(|a| a.is_ipv6() == v6);
    match pick(want6).or_else(|| module.ip.fallback.then(|| pick(!want6)).flatten()) {
        Some(ip) => {
            log.push(format!("Resolved target address {host}: {ip}"));
            Ok(ip)
        }
        None => Err(format!(
            "Error resolving address {host}: no {} address",
            if want6 { "IPv6" } else { "IPv4" }
        )),
    }
}

fn secs(ns: Option<u64>) -> f64 {
    ns.map_or(0.0, |n| Duration::from_nanos(n).as_secs_f64())
}

/// Probes `target` with `module` within `timeout`; `env` holds what
/// scrape-time probes share (the ICMP sockets).
pub(crate) async fn probe(
    module: &Module,
    target: &str,
    timeout: Duration,
    registry: &Registry,
    env: &BuildEnv,
    allowed: &Allowed,
) -> Probed {
    let start = Instant::now();
    let mut p = Probed::default();
    p.log.push(format!(
        "Beginning probe: prober {}, timeout {:.1}s",
        module.kind.name(),
        timeout.as_secs_f64()
    ));
    let deadline = tokio::time::Instant::now() + timeout;
    let body = async {
        let parsed = match parse_target(module, target) {
            Ok(parsed) => parsed,
            Err(e) => {
                p.log.push(format!("Could not parse target: {e}"));
                return;
            }
        };
        // A name the list allows needs no address check; one it does not
        // is not even resolved unless an address range could allow it.
        let by_name = allowed.by_name(&parsed.host);
        if !by_name && !allowed.has_ranges() {
            p.forbidden = Some(allowed.refusal(&parsed.host, None));
            return;
        }
        let t0 = Instant::now();
        let ip = match tokio::time::timeout_at(deadline, resolve(&parsed.host, module, &mut p.log))
            .await
        {
            Ok(Ok(ip)) => ip,
            Ok(Err(e)) => {
                p.log.push(e);
                return;
            }
            Err(_) => {
                p.log.push("Timeout reached while resolving".to_owned());
                return;
            }
        };
        let lookup = t0.elapsed();
        if !by_name && !allowed.by_address(ip) {
            p.forbidden = Some(allowed.refusal(&parsed.host, Some(ip)));
            return;
        }
        p.gauges.set(
            "probe_dns_lookup_time_seconds",
            "Returns the time taken for probe dns lookup in seconds",
            lookup.as_secs_f64(),
        );
        p.gauges.set(
            "probe_ip_protocol",
            "Specifies whether probe ip protocol is IP4 or IP6",
            if ip.is_ipv4() { 4.0 } else { 6.0 },
        );
        p.gauges.set(
            "probe_ip_addr_hash",
            "Specifies the hash of IP address. It's useful to detect if the IP address changes.",
            addr_hash(ip),
        );
        let addr = SocketAddr::new(ip, parsed.port);
        if parsed.scheme.is_empty() {
            dialogue(&mut p, module, &parsed.host, addr, deadline).await;
        } else {
            run(
                &mut p, module, &parsed, addr, lookup, registry, env, deadline, allowed,
            )
            .await;
        }
    }; // Each step ends by the deadline on its own (the probe's own timeout
    // is what is left of it), so that a timeout still answers with every
    // family of the module.
    body.await;
    p.gauges.set(
        "probe_duration_seconds",
        "Returns how long the probe took to complete in seconds",
        start.elapsed().as_secs_f64(),
    );
    p.gauges.set(
        "probe_success",
        "Displays whether or not the probe was a success",
        f64::from(u8::from(p.success)),
    );
    p.log.push(if p.success {
        format!("Probe succeeded in {:.6}s", start.elapsed().as_secs_f64())
    } else {
        format!("Probe failed in {:.6}s", start.elapsed().as_secs_f64())
    });
    p
}

async fn dialogue(
    p: &mut Probed,
    module: &Module,
    host: &str,
    addr: SocketAddr,
    deadline: tokio::time::Instant,
) {
    let Ok(d) = tokio::time::timeout_at(deadline, super::tcp::dialogue(module, host, addr)).await
    else {
        {
            p.gauges.set(
                "probe_failed_due_to_regex",
                "Indicates if probe failed due to regex",
                0.0,
            );
            p.log.push("Timeout reached in the dialogue".to_owned());
            return;
        }
    };
    p.log.extend(d.log);
    p.success = d.ok;
    p.gauges.set(
        "probe_failed_due_to_regex",
        "Indicates if probe failed due to regex",
        f64::from(u8::from(d.regex_failed)),
    );
    cert_expiry(p, d.cert_not_after);
    if let Some(v) = d.tls_version {
        p.gauges.with(
            "probe_tls_version_info",
            "Returns the TLS version used or NaN when unknown",
            &[("version", v)],
            1.0,
        );
    }
}

#[allow(clippy::too_many_arguments)] // one call site, each a different thing
async fn run(
    p: &mut Probed,
    module: &Module,
    parsed: &Parsed,
    addr: SocketAddr,
    lookup: Duration,
    registry: &Registry,
    env: &BuildEnv,
    deadline: tokio::time::Instant,
    allowed: &Allowed,
) {
    let Some((protocol, scheme)) = registry.find(parsed.scheme) else {
        p.log
            .push(format!("this prober has no {}:// probe", parsed.scheme));
        return;
    };
    // A redirect leads to a host the list was not asked about: with a list
    // (not "anything"), redirects are not followed.
    let options = match &module.options_no_follow {
        Some(no_follow) if !allowed.anything() => {
            p.log
                .push("Redirects are not followed: allowed_targets is a list".to_owned());
            no_follow
        }
        _ => &module.options,
    };
    let mut env = env.with_options(Arc::clone(options));
    env.shared = Arc::clone(&module.shared);
    env.tls.clone_from(&module.tls);
    env.marks.clone_from(&module.marks);
    env.ttl = module.ttl;
    let size = protocol
        .size
        .map(|rule| module.size.unwrap_or(rule.default));
    if let (Some(size), Some(rule)) = (size, protocol.size)
        && !(rule.min..=rule.max).contains(&size)
    {
        p.log.push(format!(
            "size {size} is outside {}..={} for {}://",
            rule.min, rule.max, scheme.name
        ));
        return;
    }
    let remaining = deadline.saturating_duration_since(tokio::time::Instant::now());
    let spec = ProbeSpec {
        scheme,
        host: &parsed.host,
        path: &parsed.path,
        addr,
        size: size.unwrap_or(0),
        timeout: remaining,
    };
    let t_setup = Instant::now();
    let built = tokio::time::timeout_at(deadline, (protocol.build)(spec, &env)).await;
    let setup = t_setup.elapsed();
    let runnable = match built {
        Ok(Ok(r)) => r,
        Ok(Err(e)) => {
            p.log.push(format!("Error setting up the probe: {e}"));
            return;
        }
        Err(_) => {
            p.log
                .push("Timeout reached while setting up the probe".to_owned());
            return;
        }
    };
    let remaining = deadline.saturating_duration_since(tokio::time::Instant::now());
    p.log.push(format!("Probing {}://{addr}", scheme.name));
    // The runner times the reply out by `remaining`; its set-up (a gRPC
    // channel's connect) has as long again, so the deadline holds it too.
    let (outcome, anomalies) =
        match tokio::time::timeout_at(deadline, prober_core::once(runnable, remaining)).await {
            Ok(Some((sample, anomalies))) => (sample.outcome, anomalies),
            Ok(None) => {
                p.log.push("The probe ended without a result".to_owned());
                return;
            }
            Err(_) => (Outcome::Timeout, prober_core::Anomalies::default()),
        };
    let (reply, error) = match &outcome {
        Outcome::Ok(r) => (Some(r), None),
        Outcome::Timeout => {
            p.log.push("No reply before the timeout".to_owned());
            (None, None)
        }
        Outcome::Error(e) => {
            p.log
                .push(format!("Probe error ({}): {}", e.kind(), e.message()));
            (None, Some(e))
        }
        _ => {
            p.log.push(format!("Probe outcome {}", outcome.name()));
            (None, None)
        }
    };
    let got = Got {
        reply,
        error,
        detail: reply
            .and_then(|r| r.app.detail)
            .or_else(|| error.and_then(prober_core::ProbeError::detail)),
        lookup,
    };
    let mut ok = reply.is_some();
    match module.kind {
        Kind::Http => {
            ok &= http(p, module, &got, scheme.tls);
            if scheme.tls {
                cert_expiry(p, anomalies.cert_not_after);
            }
        }
        Kind::Tcp => p.gauges.set(
            "probe_failed_due_to_regex",
            "Indicates if probe failed due to regex",
            0.0,
        ),
        Kind::Icmp => {
            for (name, v) in [
                ("resolve", lookup.as_secs_f64()),
                ("setup", setup.as_secs_f64()),
                ("rtt", reply.map_or(0.0, |r| r.rtt().as_secs_f64())),
            ] {
                p.gauges.with(
                    "probe_icmp_duration_seconds",
                    "Duration of icmp request by phase",
                    &[("phase", name)],
                    v,
                );
            }
            if let Some(ttl) = reply.and_then(|r| r.ttl) {
                p.gauges.set(
                    "probe_icmp_reply_hop_limit",
                    "Replied packet hop limit (TTL for ipv4)",
                    f64::from(ttl),
                );
            }
        }
        Kind::Dns => dns(p, &got),
        Kind::Grpc => grpc(p, module, &got, &anomalies),
    }
    p.success = ok;
    extras(p, &got);
}

/// What one probe gave, as the families of each prober read it.
struct Got<'a> {
    reply: Option<&'a prober_core::Reply>,
    error: Option<&'a prober_core::ProbeError>,
    /// The reply's status, from the reply or from the error of a check it
    /// failed.
    detail: Option<Detail>,
    /// The name lookup's time.
    lookup: Duration,
}

fn http(p: &mut Probed, module: &Module, got: &Got<'_>, scheme_tls: bool) -> bool {
    let Got {
        reply,
        error,
        detail,
        lookup,
    } = *got;
    let mut ok = true;
    let (status, version, redirects, tls, body, last_modified) = match detail {
        Some(Detail::Http {
            status,
            version,
            redirects,
            tls,
            body,
            last_modified,
        }) => (status, version, redirects, tls, body, last_modified),
        _ => (0, 0, 0, scheme_tls, 0, None),
    };
    if let Some(t) = last_modified {
        #[allow(clippy::cast_precision_loss)] // Unix seconds fit 53 bits
        p.gauges.set(
            "probe_http_last_modified_timestamp_seconds",
            "Returns the Last-Modified HTTP response header in unixtime",
            t as f64,
        );
    }
    // A 3xx not followed counts as one, as blackbox's redirect hook counts
    // it before declining to follow.
    let redirects = redirects + u8::from(!module.follow_redirects && (300..400).contains(&status));
    let version_text = match version {
        10 => "HTTP/1.0",
        11 => "HTTP/1.1",
        20 => "HTTP/2.0",
        _ => "",
    };
    if reply.is_some() && !module.http_versions.is_empty() {
        let accepted = module
            .http_versions
            .iter()
            .any(|v| v == version_text || (v == "HTTP/2" && version == 20));
        if !accepted {
            p.log
                .push(format!("Invalid HTTP version number: {version_text}"));
            ok = false;
        }
    }
    if reply.is_some() && module.fail_if_ssl && tls {
        p.log.push("Final request was over SSL".to_owned());
        ok = false;
    }
    if reply.is_some() && module.fail_if_not_ssl && !tls {
        p.log.push("Final request was not over SSL".to_owned());
        ok = false;
    }
    let phases = reply.map(|r| r.app.phases.0).unwrap_or_default();
    let phase = |i: usize| phases[i].unwrap_or(0);
    let help = "Duration of http request by phase, summed over all redirects";
    for (name, v) in [
        ("resolve", lookup.as_secs_f64()),
        ("connect", secs(Some(phase(1)))),
        ("tls", secs(Some(phase(2)))),
        ("processing", secs(Some(phase(3) + phase(4)))),
        ("transfer", secs(Some(phase(5)))),
    ] {
        p.gauges
            .with("probe_http_duration_seconds", help, &[("phase", name)], v);
    }
    // The body read, where a response came (a failed check included).
    let length = f64::from(body);
    p.gauges.set(
        "probe_http_content_length",
        "Length of http content response",
        length,
    );
    p.gauges.set(
        "probe_http_uncompressed_body_length",
        "Length of uncompressed response body",
        length,
    );
    p.gauges.set(
        "probe_http_redirects",
        "The number of redirects",
        f64::from(redirects),
    );
    p.gauges.set(
        "probe_http_ssl",
        "Indicates if SSL was used for the final redirect",
        f64::from(u8::from(tls)),
    );
    p.gauges.set(
        "probe_http_status_code",
        "Response HTTP status code",
        f64::from(status),
    );
    p.gauges.set(
        "probe_http_version",
        "Returns the version of HTTP of the probe response",
        f64::from(version / 10) + f64::from(version % 10) / 10.0,
    );
    // Every content check is a body regexp or a header one, both of which
    // blackbox counts as failing by regex.
    let regex = error.is_some_and(|e| e.kind() == ErrorKind::Content);
    p.gauges.set(
        "probe_failed_due_to_regex",
        "Indicates if probe failed due to regex",
        f64::from(u8::from(regex)),
    );
    ok
}

fn dns(p: &mut Probed, got: &Got<'_>) {
    let Got {
        reply,
        detail,
        lookup,
        ..
    } = *got;
    let (answers, authority, additional) = match detail {
        Some(Detail::Dns {
            answers,
            authority,
            additional,
            ..
        }) => (answers, authority, additional),
        _ => (0, 0, 0),
    };
    let help = "Duration of DNS request by phase";
    let rtt = reply.map_or(0.0, |r| r.rtt().as_secs_f64());
    for (name, v) in [
        ("resolve", lookup.as_secs_f64()),
        // prober's DNS socket connects before the probe: over UDP that is
        // no packet, over TCP the handshake is in the request.
        ("connect", 0.0),
        ("request", rtt),
    ] {
        p.gauges
            .with("probe_dns_duration_seconds", help, &[("phase", name)], v);
    }
    p.gauges.set(
        "probe_dns_answer_rrs",
        "Returns number of entries in the answer resource record list",
        f64::from(answers),
    );
    p.gauges.set(
        "probe_dns_authority_rrs",
        "Returns number of entries in the authority resource record list",
        f64::from(authority),
    );
    p.gauges.set(
        "probe_dns_additional_rrs",
        "Returns number of entries in the additional resource record list",
        f64::from(additional),
    );
    p.gauges.set(
        "probe_dns_query_succeeded",
        "Displays whether or not the query was executed successfully",
        f64::from(u8::from(detail.is_some())),
    );
}

fn grpc(p: &mut Probed, module: &Module, got: &Got<'_>, anomalies: &prober_core::Anomalies) {
    let Got {
        reply,
        error,
        detail,
        lookup,
    } = *got;
    let (code, serving) = match detail {
        Some(Detail::Grpc { code, serving }) => (code, serving),
        // No call was answered: grpc-go reports a connection that failed
        // as UNAVAILABLE, a deadline as DEADLINE_EXCEEDED.
        _ if error.is_none() && reply.is_none() => (4, None),
        _ => (14, None),
    };
    let help = "Duration of gRPC request by phase";
    for (name, v) in [
        ("resolve", lookup.as_secs_f64()),
        ("check", reply.map_or(0.0, |r| r.rtt().as_secs_f64())),
    ] {
        p.gauges
            .with("probe_grpc_duration_seconds", help, &[("phase", name)], v);
    }
    for (i, name) in ["UNKNOWN", "SERVING", "NOT_SERVING", "SERVICE_UNKNOWN"]
        .iter()
        .enumerate()
    {
        let on = serving.is_some_and(|s| usize::from(s) == i);
        p.gauges.with(
            "probe_grpc_healthcheck_response",
            "Response HealthCheck response",
            &[("serving_status", name)],
            f64::from(u8::from(on)),
        );
    }
    p.gauges.set(
        "probe_grpc_ssl",
        "Indicates if SSL was used for the connection",
        f64::from(u8::from(module.tls_first)),
    );
    p.gauges.set(
        "probe_grpc_status_code",
        "Response gRPC status code",
        f64::from(code),
    );
    #[allow(clippy::cast_precision_loss)] // Unix seconds fit 53 bits
    let expiry = anomalies.cert_not_after.map_or(0.0, |t| t as f64);
    p.gauges.set(
        "probe_ssl_earliest_cert_expiry",
        "Returns last SSL chain expiry in unixtime",
        expiry,
    );
}

/// The server certificate's expiry, where TLS showed one: prober keeps the
/// leaf's, which is the chain's earliest in all but odd chains.
fn cert_expiry(p: &mut Probed, not_after: Option<i64>) {
    let Some(t) = not_after else { return };
    #[allow(clippy::cast_precision_loss)] // Unix seconds fit 53 bits
    let t = t as f64;
    p.gauges.set(
        "probe_ssl_earliest_cert_expiry",
        "Returns last SSL chain expiry in unixtime",
        t,
    );
    p.gauges.set(
        "probe_ssl_last_chain_expiry_timestamp_seconds",
        "Returns last SSL chain expiry in timestamp",
        t,
    );
}

/// prober's own families: the round trip, its split, and why it failed.
fn extras(p: &mut Probed, got: &Got<'_>) {
    let Got { reply, error, .. } = *got;
    if let Some(e) = error {
        p.gauges.with(
            "prober_probe_error",
            "Why the probe failed, by prober's error kinds (1 for the kind)",
            &[("kind", e.kind().as_str())],
            1.0,
        );
    }
    let Some(r) = reply else { return };
    p.gauges.set(
        "prober_probe_rtt_seconds",
        "The probe's round trip, user send to user receive",
        r.rtt().as_secs_f64(),
    );
    let parts = r.parts();
    if let Some(k) = parts.kernel_rtt {
        p.gauges.set(
            "prober_probe_kernel_rtt_seconds",
            "The probe's round trip between the client kernel's transmit and receive stamps",
            secs(Some(k)),
        );
    }
    for (name, v) in prober_core::Parts::ALL_NAMES.iter().zip(parts.list_all()) {
        if let Some(v) = v {
            p.gauges.with(
                "prober_probe_rtt_part_seconds",
                "The round trip split into its parts (docs/timestamps.md): client send, network, responder wake, dwell and send, client wake",
                &[("part", name)],
                secs(Some(v)),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_address_hash_is_blackboxs() {
        // As blackbox_exporter 0.23 reported for 127.0.0.1.
        assert_eq!(addr_hash("127.0.0.1".parse().unwrap()), 3_668_918_509.0);
    }

    #[test]
    fn hosts_and_ports_split() {
        assert_eq!(host_port("a:80", None), Ok(("a".into(), 80)));
        assert_eq!(host_port("[::1]:53", None), Ok(("::1".into(), 53)));
        assert_eq!(host_port("a", Some(53)), Ok(("a".into(), 53)));
        assert!(host_port("a", None).is_err());
        assert!(host_port("a:x", None).is_err());
        assert!(host_port(":80", None).is_err());
    }
}

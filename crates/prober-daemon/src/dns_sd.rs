//! Targets discovered in DNS (a job's `dns_sd`): every address of an A/AAAA
//! name, or every target of an SRV name, becomes a target. Each name is
//! looked up again when its records expire (their TTL, kept between a floor
//! and a ceiling); a lookup that fails keeps the last answer that worked,
//! and is counted.
//!
//! hickory-resolver does the DNS (UDP with TCP fallback, `/etc/resolv.conf`
//! or the server `[discovery] server` names); this module only turns its
//! answers into targets, keeps the last good ones and counts.

use std::collections::{BTreeMap, HashMap};
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hickory_resolver::TokioResolver;
use hickory_resolver::config::{LookupIpStrategy, NameServerConfig, ResolverConfig, ResolverOpts};
use hickory_resolver::net::runtime::TokioRuntimeProvider;
use hickory_resolver::proto::rr::{RData, RecordType};

/// `[discovery]`: where and how often DNS names are looked up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// The DNS server; `None`: the system's (`/etc/resolv.conf`).
    pub server: Option<SocketAddr>,
    /// No name is looked up again sooner than this, whatever its TTL.
    pub ttl_floor: Duration,
    /// Nor later than this.
    pub ttl_ceiling: Duration,
    /// How often targets given by name (not `dns_sd`) are resolved again
    /// through the system resolver, which tells no TTL.
    pub resolve_every: Duration,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            server: None,
            ttl_floor: Duration::from_secs(5),
            ttl_ceiling: Duration::from_secs(300),
            resolve_every: Duration::from_secs(60),
        }
    }
}

/// One address a name gave.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Found {
    /// The address, with the port of the SRV record (or of the job's URL).
    pub addr: SocketAddr,
    /// The host name it belongs to (the SRV target, or the name asked).
    pub name: String,
}

/// What one name gave, and until when.
#[derive(Debug, Clone)]
pub struct Answer {
    /// Its addresses, sorted.
    pub found: Vec<Found>,
    /// When to look again: now + TTL, kept between the floor and ceiling.
    pub refresh_at: Instant,
}

/// Discovery's counters for one job, read at scrape time.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct JobStats {
    /// Lookups that failed (SERVFAIL, timeout, no such name).
    pub failures: u64,
    /// Targets discovery gave at the last load.
    pub targets: u64,
    /// Targets dropped at the last load for the job's `max_targets`.
    pub over_limit: u64,
    /// Loads at which discovery gave more than `max_targets`.
    pub truncations: u64,
    /// Targets given by name whose address changed.
    pub address_changes: u64,
}

/// A name as looked up: the server asked, the name, the URL's port.
type NameKey = (Option<SocketAddr>, String, u16);

/// The resolver, the last good answer of every name, and the counters;
/// one for the daemon's life, shared by every (re)load.
#[derive(Default)]
pub struct Discovery {
    /// The resolver and the server it asks (`None`: the system's); only a
    /// change of server makes a new one.
    resolver: Mutex<Option<(Option<SocketAddr>, TokioResolver)>>,
    last_good: Mutex<HashMap<NameKey, Vec<Found>>>,
    stats: Mutex<BTreeMap<String, JobStats>>,
    /// Target names the system resolver answered: the last address, and
    /// how many lookups in a row have failed since.
    names: Mutex<HashMap<(String, u16), NameState>>,
}

#[derive(Debug, Default, Clone, Copy)]
struct NameState {
    last: Option<SocketAddr>,
    failures: u32,
}

/// The first retry of a target name that did not resolve; each failure in
/// a row doubles it, up to `resolve_every`.
pub const FIRST_RETRY: Duration = Duration::from_secs(1);

impl std::fmt::Debug for Discovery {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Discovery").finish_non_exhaustive()
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Discovery {
    /// The counters of every job, by job name.
    pub fn stats(&self) -> BTreeMap<String, JobStats> {
        lock(&self.stats).clone()
    }

    /// Changes one job's counters.
    pub fn count(&self, job: &str, f: impl FnOnce(&mut JobStats)) {
        f(lock(&self.stats).entry(job.to_owned()).or_default());
    }

    /// Files the system resolver's answer for a target's `host` and
    /// `port`, and says which address to probe and when to ask again
    /// sooner than `every`. A name that fails after it resolved keeps its
    /// last address (a DNS hiccup does not stop a working target); one
    /// that never resolved stays an error (probed as down, reason
    /// `resolve`). A failing name is asked again after [`FIRST_RETRY`],
    /// doubling with each failure in a row, at most `every`.
    pub fn target_name(
        &self,
        host: &str,
        port: u16,
        answer: Result<SocketAddr, String>,
        every: Duration,
    ) -> (Result<SocketAddr, String>, Option<Duration>) {
        let mut names = lock(&self.names);
        let state = names.entry((host.to_owned(), port)).or_default();
        match answer {
            Ok(addr) => {
                *state = NameState {
                    last: Some(addr),
                    failures: 0,
                };
                (Ok(addr), None)
            }
            Err(e) => {
                state.failures = state.failures.saturating_add(1);
                let retry = FIRST_RETRY
                    .saturating_mul(1 << (state.failures - 1).min(16))
                    .min(every);
                match state.last {
                    Some(addr) => {
                        tracing::warn!("{e}; probing its last address {addr} until it resolves");
                        (Ok(addr), Some(retry))
                    }
                    None => (Err(e), Some(retry)),
                }
            }
        }
    }

    /// Drops the counters of jobs no longer in the config.
    pub fn retain_jobs(&self, jobs: &[&str]) {
        lock(&self.stats).retain(|j, _| jobs.contains(&j.as_str()));
    }

    fn resolver(&self, settings: &Settings) -> Result<TokioResolver, String> {
        let mut slot = lock(&self.resolver);
        if let Some((s, r)) = slot.as_ref()
            && *s == settings.server
        {
            return Ok(r.clone());
        }
        let provider = TokioRuntimeProvider::default();
        let mut builder = match settings.server {
            Some(server) => {
                let mut ns = NameServerConfig::udp_and_tcp(server.ip());
                for c in &mut ns.connections {
                    c.port = server.port();
                }
                TokioResolver::builder_with_config(
                    ResolverConfig::from_parts(None, Vec::new(), vec![ns]),
                    provider,
                )
            }
            None => TokioResolver::builder(provider)
                .map_err(|e| format!("reading the system's DNS configuration: {e}"))?,
        };
        let opts: &mut ResolverOpts = builder.options_mut();
        opts.timeout = Duration::from_secs(2);
        opts.attempts = 1;
        // Every address of a name is a target, of both families (as
        // hickory's default; said here so a change of default cannot drop
        // one family, which the dual-stack test in tests/cli would catch).
        opts.ip_strategy = LookupIpStrategy::Ipv4AndIpv6;
        let r = builder
            .build()
            .map_err(|e| format!("starting the DNS resolver: {e}"))?;
        *slot = Some((settings.server, r.clone()));
        Ok(r)
    }

    /// Looks `name` up now: its SRV records if it starts with `_`
    /// (`_service._proto.domain`), else its A and AAAA records, each with
    /// `port`. A name with no records (NXDOMAIN, or none of the type) gives
    /// no targets: that is an answer. A failure (SERVFAIL, a timeout) gives
    /// the last good answer for the name (nothing if it never worked), and
    /// is counted for `job`.
    pub async fn lookup(&self, job: &str, name: &str, port: u16, settings: &Settings) -> Answer {
        let key = (settings.server, name.to_owned(), port);
        let now = Instant::now();
        let clamp = |until: Instant| -> Instant {
            now + until
                .saturating_duration_since(now)
                .clamp(settings.ttl_floor, settings.ttl_ceiling)
        };
        match self.resolve(name, port, settings).await {
            Ok((mut found, until)) => {
                found.sort();
                found.dedup();
                lock(&self.last_good).insert(key, found.clone());
                Answer {
                    found,
                    refresh_at: clamp(until),
                }
            }
            Err(error) => {
                self.count(job, |s| s.failures += 1);
                let last = lock(&self.last_good).get(&key).cloned();
                match &last {
                    Some(l) => tracing::warn!(
                        job,
                        name,
                        "DNS discovery failed ({error}); keeping the last answer ({} addresses)",
                        l.len()
                    ),
                    None => tracing::warn!(
                        job,
                        name,
                        "DNS discovery failed ({error}); no targets from this name until it answers"
                    ),
                }
                Answer {
                    found: last.unwrap_or_default(),
                    // Try again soon, not at the ceiling.
                    refresh_at: now + settings.ttl_floor,
                }
            }
        }
    }

    async fn resolve(
        &self,
        name: &str,
        port: u16,
        settings: &Settings,
    ) -> Result<(Vec<Found>, Instant), String> {
        let resolver = self.resolver(settings)?;
        // Every load asks the server: the answer's TTL, not the resolver's
        // cache, decides when the next load comes.
        let fqdn = if name.ends_with('.') {
            name.to_owned()
        } else {
            format!("{name}.")
        };
        if name.starts_with('_') {
            resolver.clear_lookup_cache(fqdn.as_str(), RecordType::SRV);
            let srv = resolver.lookup(fqdn.as_str(), RecordType::SRV).await;
            let srv = match srv {
                Ok(srv) => srv,
                Err(e) if e.is_nx_domain() || e.is_no_records_found() => {
                    return Ok((Vec::new(), Instant::now()));
                }
                Err(e) => return Err(e.to_string()),
            };
            let mut until = srv.valid_until();
            let mut found = Vec::new();
            for record in srv.answers() {
                let RData::SRV(s) = &record.data else {
                    continue;
                };
                let host = s.target.to_ascii();
                // The server's additional section usually has the addresses.
                let mut addrs: Vec<IpAddr> = srv
                    .additionals()
                    .iter()
                    .filter(|a| a.name == s.target)
                    .filter_map(|a| match &a.data {
                        RData::A(a) => Some(IpAddr::V4(a.0)),
                        RData::AAAA(a) => Some(IpAddr::V6(a.0)),
                        _ => None,
                    })
                    .collect();
                if addrs.is_empty() {
                    resolver.clear_lookup_cache(s.target.clone(), RecordType::A);
                    resolver.clear_lookup_cache(s.target.clone(), RecordType::AAAA);
                    let ips = resolver
                        .lookup_ip(s.target.clone())
                        .await
                        .map_err(|e| format!("{host}: {e}"))?;
                    until = until.min(ips.valid_until());
                    addrs = ips.iter().collect();
                }
                let host = host.trim_end_matches('.').to_owned();
                found.extend(addrs.into_iter().map(|ip| Found {
                    addr: SocketAddr::new(ip, s.port),
                    name: host.clone(),
                }));
            }
            Ok((found, until))
        } else {
            resolver.clear_lookup_cache(fqdn.as_str(), RecordType::A);
            resolver.clear_lookup_cache(fqdn.as_str(), RecordType::AAAA);
            let ips = resolver.lookup_ip(fqdn.as_str()).await;
            let ips = match ips {
                Ok(ips) => ips,
                Err(e) if e.is_nx_domain() || e.is_no_records_found() => {
                    return Ok((Vec::new(), Instant::now()));
                }
                Err(e) => return Err(e.to_string()),
            };
            let host = name.trim_end_matches('.').to_owned();
            let found = ips
                .iter()
                .map(|ip| Found {
                    addr: SocketAddr::new(ip, port),
                    name: host.clone(),
                })
                .collect();
            Ok((found, ips.valid_until()))
        }
    }
}

/// A shared [`Discovery`], as the daemon and its background loads hold it.
pub type Shared = Arc<Discovery>;

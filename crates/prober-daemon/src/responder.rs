//! Starting the responders (`prober serve`, and the daemon's `[serve]`):
//! every responder the [`Registry`] lists, through its descriptor.

use std::any::Any;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use prober_core::Registry;
use prober_core::protocol::Shared;
use prober_core::responder::{Responder, ServeEnv, ServeError, Tls};
use prober_net::guard::{GuardStats, Limits, PerSource};
use prober_net::responder::{Common, ServerTlsFiles};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::error::DaemonError;

/// Which responders to run, and how.
#[derive(Debug, Clone, Default)]
pub struct ResponderOptions {
    /// Where each responder listens, by its name (`tcp`, `grpc`, ...: the
    /// [`Responder::name`] of one the registry lists).
    pub listen: Vec<(&'static str, SocketAddr)>,
    /// TLS certificate chain (PEM) for gRPC and HTTPS.
    pub tls_cert: Option<PathBuf>,
    /// gRPC TLS key (PEM).
    pub tls_key: Option<PathBuf>,
    /// Require client certificates signed by this CA (PEM).
    pub tls_client_ca: Option<PathBuf>,
    /// Log each client connection (at debug level).
    pub log_clients: bool,
    /// TCP and UDP requests read by spinning threads.
    pub busy_poll: bool,
    /// How TCP and UDP responders wait for requests (`serve --receive`).
    pub receive: prober_core::spin::Receive,
    /// The responders' own settings (the STAMP reflector's, the test
    /// impairments), each put in their environment; a responder with none
    /// here takes its defaults.
    pub own: prober_net::options::OptionSet,
    /// Limits for a public address (docs/security.md), as given.
    pub limits: LimitSettings,
}

/// The responders' limits as given on the command line or in `[serve]`;
/// `None` where not given (docs/security.md has the defaults).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LimitSettings {
    /// Replies per second per source; 0 for none.
    pub rate_limit: Option<u32>,
    /// Connections open at once; 0 for no limit.
    pub max_conns: Option<usize>,
    /// Connections open at once per source; 0 for no limit.
    pub max_conns_per_source: Option<usize>,
    /// Time to a connection's first whole request.
    pub request_timeout: Option<Duration>,
    /// Silence allowed between requests.
    pub idle_timeout: Option<Duration>,
    /// Send UDP follow-ups (48 bytes more than a request) to sources other
    /// than loopback.
    pub udp_follow_ups: bool,
}

impl LimitSettings {
    /// These settings, with `other`'s where these give none.
    #[must_use]
    pub fn or(&self, other: &Self) -> Self {
        Self {
            rate_limit: self.rate_limit.or(other.rate_limit),
            max_conns: self.max_conns.or(other.max_conns),
            max_conns_per_source: self.max_conns_per_source.or(other.max_conns_per_source),
            request_timeout: self.request_timeout.or(other.request_timeout),
            idle_timeout: self.idle_timeout.or(other.idle_timeout),
            udp_follow_ups: self.udp_follow_ups || other.udp_follow_ups,
        }
    }

    /// The limits, with the defaults where none was given.
    pub fn limits(&self) -> Limits {
        let d = Limits::default();
        Limits {
            rate: PerSource::from_option(self.rate_limit),
            max_conns: self.max_conns.unwrap_or(d.max_conns),
            max_conns_per_source: PerSource::from_option(self.max_conns_per_source),
            request_timeout: self.request_timeout.unwrap_or(d.request_timeout),
            idle_timeout: self.idle_timeout.unwrap_or(d.idle_timeout),
            max_buffered: d.max_buffered,
        }
    }
}

impl ResponderOptions {
    /// True when any listener is asked for.
    pub fn any(&self) -> bool {
        !self.listen.is_empty()
    }

    /// Where the responder `name` listens, if it does.
    pub fn addr(&self, name: &str) -> Option<SocketAddr> {
        self.listen
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, a)| *a)
    }

    /// Sets where the responder `name` listens (replacing where it did).
    pub fn set(&mut self, name: &'static str, addr: SocketAddr) {
        self.listen.retain(|(n, _)| *n != name);
        self.listen.push((name, addr));
    }

    /// The environment every responder is started in: the settings they
    /// share, and each protocol's own.
    ///
    /// # Errors
    /// A setting a responder refuses (a STAMP key file that cannot be
    /// read).
    fn options(&self) -> Result<Shared, DaemonError> {
        let options = Shared::default();
        options.put(Common {
            limits: self.limits.limits(),
            guard: Arc::new(GuardStats::default()),
            log_clients: self.log_clients,
            busy_poll: self.busy_poll,
            receive: self.receive.clone(),
            udp_follow_ups: self.limits.udp_follow_ups,
            tls: match (&self.tls_cert, &self.tls_key) {
                (Some(cert), Some(key)) => Some(ServerTlsFiles {
                    cert: cert.clone(),
                    key: key.clone(),
                    client_ca: self.tls_client_ca.clone(),
                }),
                _ => None,
            },
        });
        for (_, own) in &self.own.0 {
            own.put(&options, None, None).map_err(DaemonError::Config)?;
        }
        Ok(options)
    }

    /// Each listener's responder and whether it serves TLS, in the
    /// registry's order.
    fn planned(
        &self,
        registry: &Registry,
    ) -> Result<Vec<(&'static Responder, SocketAddr, bool)>, DaemonError> {
        let tls_given = self.tls_cert.is_some() && self.tls_key.is_some();
        for (name, _) in &self.listen {
            if registry.responder(name).is_none() {
                return Err(DaemonError::Config(format!(
                    "no responder is called {name:?} (known: {})",
                    names(registry, |_| true)
                )));
            }
        }
        let mut out = Vec::new();
        for r in registry.responders() {
            let Some(addr) = self.addr(r.name) else {
                continue;
            };
            let tls = match r.tls {
                Tls::No => false,
                Tls::Required if !tls_given => {
                    return Err(DaemonError::Config(format!(
                        "--{} needs --tls-cert and --tls-key",
                        r.name
                    )));
                }
                Tls::Required => true,
                Tls::Optional { plain_beside } => {
                    tls_given && plain_beside.is_none_or(|b| self.addr(b).is_none())
                }
            };
            out.push((r, addr, tls));
        }
        if tls_given && !out.iter().any(|(_, _, tls)| *tls) {
            let takers = names(registry, |r| r.tls != Tls::No);
            return Err(DaemonError::Config(format!(
                "--tls-cert applies to {takers}; add {}",
                registry
                    .responders()
                    .filter(|r| r.tls != Tls::No && !r.hidden)
                    .map(|r| format!("--{} ADDR", r.name))
                    .collect::<Vec<_>>()
                    .join(" or ")
            )));
        }
        Ok(out)
    }
}

/// The names of the (shown) responders `which` picks, as a message lists them.
fn names(registry: &Registry, which: impl Fn(&Responder) -> bool) -> String {
    let list: Vec<&str> = registry
        .responders()
        .filter(|r| !r.hidden && which(r))
        .map(|r| r.name)
        .collect();
    match list.as_slice() {
        [] => "none".to_owned(),
        [one] => (*one).to_owned(),
        [rest @ .., last] => format!("{} and {last}", rest.join(", ")),
    }
}

fn serve_error(e: ServeError) -> DaemonError {
    match e {
        ServeError::Config(m) => DaemonError::Config(m),
        ServeError::Io { what, source } => DaemonError::io(what, source),
    }
}

/// Running responders.
#[derive(Debug)]
pub struct Responders {
    /// The responder tasks; each ends when `stop` is cancelled.
    pub tasks: JoinSet<std::io::Result<()>>,
    /// What listens where: `("tcp", addr)`, `("grpcs", addr)`, ...
    pub bound: Vec<(&'static str, SocketAddr)>,
    /// Counters the responders keep (the STAMP reflector's, sockperf's).
    pub stats: Vec<Arc<dyn Any + Send + Sync>>,
    /// What the responders' limits refused.
    pub guard: Arc<GuardStats>,
}

impl Responders {
    /// The counters of type `T`, if a responder keeps them.
    pub fn stats<T: Any + Send + Sync>(&self) -> Option<Arc<T>> {
        self.stats
            .iter()
            .find_map(|s| Arc::clone(s).downcast::<T>().ok())
    }
}

/// What [`start`] would refuse before binding anything: a listener no
/// responder answers, TLS files that do not load, TLS without a listener
/// for it, HTTPS without TLS. The daemon's `--check-config` asks this too.
///
/// # Errors
/// [`DaemonError::Config`] saying which.
pub fn validate(opts: &ResponderOptions, registry: &Registry) -> Result<(), DaemonError> {
    let options = Arc::new(opts.options()?);
    for (r, _, tls) in opts.planned(registry)? {
        let env = ServeEnv {
            options: Arc::clone(&options),
            tls,
            stop: CancellationToken::new(),
        };
        (r.check)(&env).map_err(serve_error)?;
    }
    Ok(())
}

/// Binds and starts the responders asked for. They stop when `stop` is
/// cancelled.
///
/// # Errors
/// What [`validate`] refuses, and an address that cannot be bound.
pub async fn start(
    opts: &ResponderOptions,
    registry: &Registry,
    stop: &CancellationToken,
) -> Result<Responders, DaemonError> {
    validate(opts, registry)?;
    let options = Arc::new(opts.options()?);
    let guard = Arc::clone(
        &options
            .get_or_try_init(|| Ok::<_, std::convert::Infallible>(Arc::new(Common::default())))
            .unwrap_or_else(|e| match e {})
            .guard,
    );
    let mut tasks = JoinSet::new();
    let mut bound = Vec::new();
    let mut stats = Vec::new();
    for (r, addr, tls) in opts.planned(registry)? {
        let env = ServeEnv {
            options: Arc::clone(&options),
            tls,
            stop: stop.clone(),
        };
        let serving = (r.serve)(addr, &env).await.map_err(serve_error)?;
        bound.extend(serving.bound);
        for task in serving.tasks {
            tasks.spawn(task);
        }
        stats.extend(serving.stats);
    }
    Ok(Responders {
        tasks,
        bound,
        stats,
        guard,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    static REGISTRY: Registry = Registry::new(&[]).with_responders(&[
        &prober_tcp::TCP_RESPONDER,
        &prober_grpc::GRPC_RESPONDER,
        &prober_grpc::GRPCS_RESPONDER,
        &prober_http::HTTPS_RESPONDER,
    ]);

    fn opts(listen: &[&'static str], tls: bool) -> ResponderOptions {
        let addr: SocketAddr = "127.0.0.1:0".parse().unwrap();
        ResponderOptions {
            listen: listen.iter().map(|n| (*n, addr)).collect(),
            tls_cert: tls.then(|| PathBuf::from("c.pem")),
            tls_key: tls.then(|| PathBuf::from("k.pem")),
            ..ResponderOptions::default()
        }
    }

    fn plan(listen: &[&'static str], tls: bool) -> Result<Vec<(&'static str, bool)>, String> {
        opts(listen, tls)
            .planned(&REGISTRY)
            .map(|p| p.iter().map(|(r, _, tls)| (r.name, *tls)).collect())
            .map_err(|e| e.to_string())
    }

    /// Each listener takes TLS as its descriptor says, in the registry's
    /// order whatever the order asked.
    #[test]
    fn tls_goes_where_the_descriptors_say() {
        assert_eq!(
            plan(&["grpc", "tcp"], false).unwrap(),
            [("tcp", false), ("grpc", false)]
        );
        assert_eq!(
            plan(&["tcp", "grpc"], true).unwrap(),
            [("tcp", false), ("grpc", true)]
        );
        // gRPC stays plaintext beside gRPC over TLS.
        assert_eq!(
            plan(&["grpc", "grpcs"], true).unwrap(),
            [("grpc", false), ("grpcs", true)]
        );
    }

    /// TLS files no listener takes, a listener that needs them, and a name
    /// no responder has are refused, each in one line.
    #[test]
    fn what_cannot_be_served_is_refused() {
        let e = plan(&["tcp"], true).unwrap_err();
        assert!(
            e.contains("--tls-cert applies to grpc and https; add --grpc ADDR or --https ADDR"),
            "{e}"
        );
        let e = plan(&["https"], false).unwrap_err();
        assert!(e.contains("--https needs --tls-cert and --tls-key"), "{e}");
        let e = plan(&["quic"], false).unwrap_err();
        assert!(e.contains("no responder is called \"quic\""), "{e}");
    }
}

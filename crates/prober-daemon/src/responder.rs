//! Starting the responders (`prober serve`, and the daemon's `[serve]`).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use prober_grpc::{ServerConfig, ServerTls, serve_grpc};
use prober_http::serve_http;
use prober_net::guard::{GuardStats, Limits, PerSource};
use prober_stamp::{ReflectorConfig, ReflectorStats, serve_stamp};
use prober_tcp::{ResponderConfig, serve_tcp, serve_udp};
use std::sync::Arc;
use tokio::net::{TcpListener, UdpSocket};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::error::DaemonError;

/// Which responders to run, and how.
#[derive(Debug, Clone, Default)]
pub struct ResponderOptions {
    /// TCP responder address.
    pub tcp: Option<SocketAddr>,
    /// UDP responder address.
    pub udp: Option<SocketAddr>,
    /// gRPC responder address.
    pub grpc: Option<SocketAddr>,
    /// HTTP responder address (HTTP/1.1 and h2c).
    pub http: Option<SocketAddr>,
    /// HTTPS responder address (with `tls_cert`).
    pub https: Option<SocketAddr>,
    /// A second gRPC responder, over TLS with `tls_cert`, beside a
    /// plaintext one on `grpc` (the self-test's ladder).
    pub grpcs: Option<SocketAddr>,
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
    /// Impairments for tests (see [`ResponderConfig`]).
    pub drop_every: Option<u64>,
    /// Answer every k-th request twice.
    pub duplicate_every: Option<u64>,
    /// Hold every k-th request for `delay`.
    pub delay_every: Option<u64>,
    /// How long `delay_every` holds a request.
    pub delay: Duration,
    /// Hold every gRPC request this long.
    pub grpc_delay: Duration,
    /// STAMP reflector address.
    pub stamp: Option<SocketAddr>,
    /// Address of the UDP and TCP listeners that answer sockperf's clients.
    pub sockperf: Option<SocketAddr>,
    /// How the STAMP reflector answers.
    pub stamp_config: ReflectorConfig,
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
        [
            self.tcp,
            self.udp,
            self.grpc,
            self.http,
            self.https,
            self.grpcs,
            self.stamp,
            self.sockperf,
        ]
        .iter()
        .any(Option::is_some)
    }
}

/// Binds the UDP socket of the `what` listener on `addr`, and notes where
/// it listens in `bound`.
async fn bind_udp(
    addr: SocketAddr,
    what: &'static str,
    bound: &mut Vec<(&'static str, SocketAddr)>,
) -> Result<UdpSocket, DaemonError> {
    let socket = UdpSocket::bind(addr)
        .await
        .map_err(|e| DaemonError::io(format!("binding {what} {addr}"), e))?;
    let at = socket
        .local_addr()
        .map_err(|e| DaemonError::io(format!("reading the address of {what}"), e))?;
    bound.push((what, at));
    Ok(socket)
}

/// Running responders.
#[derive(Debug)]
pub struct Responders {
    /// The responder tasks; each ends when `stop` is cancelled.
    pub tasks: JoinSet<std::io::Result<()>>,
    /// What listens where: `("tcp", addr)`, `("grpcs", addr)`, ...
    pub bound: Vec<(&'static str, SocketAddr)>,
    /// The STAMP reflector's counters, when it runs.
    pub stamp: Option<Arc<ReflectorStats>>,
    /// The sockperf listener's counters, when it runs.
    pub sockperf: Option<Arc<prober_tcp::sockperf::SockperfStats>>,
    /// What the TCP, UDP, gRPC and HTTP responders' limits refused.
    pub guard: Arc<GuardStats>,
}

/// What [`start`] would refuse before binding anything: TLS files that do
/// not load, TLS without a listener for it, HTTPS without TLS. The
/// daemon's `--check-config` asks this too.
///
/// # Errors
/// [`DaemonError::Config`] saying which.
pub fn validate(opts: &ResponderOptions) -> Result<(), DaemonError> {
    server_tls(opts).map(drop)
}

/// The gRPC server's TLS, if `opts` gives it, checked as [`validate`] says.
fn server_tls(opts: &ResponderOptions) -> Result<Option<ServerTls>, DaemonError> {
    let tls = match (&opts.tls_cert, &opts.tls_key) {
        (Some(cert), Some(key)) => Some(
            ServerTls::from_files(cert, key, opts.tls_client_ca.as_deref())
                .map_err(|e| DaemonError::Config(e.to_string()))?,
        ),
        _ => None,
    };
    if tls.is_some() && opts.grpc.is_none() && opts.https.is_none() {
        return Err(DaemonError::Config(
            "--tls-cert applies to gRPC and HTTPS; add --grpc ADDR or --https ADDR".to_owned(),
        ));
    }
    if opts.https.is_some() && tls.is_none() {
        return Err(DaemonError::Config(
            "--https needs --tls-cert and --tls-key".to_owned(),
        ));
    }
    Ok(tls)
}

/// Binds and starts the responders asked for. They stop when `stop` is
/// cancelled.
///
/// # Errors
/// What [`validate`] refuses, and an address that cannot be bound.
pub async fn start(
    opts: &ResponderOptions,
    stop: &CancellationToken,
) -> Result<Responders, DaemonError> {
    let tls = server_tls(opts)?;
    let http_tls = match (&opts.tls_cert, &opts.tls_key, opts.https) {
        (Some(cert), Some(key), Some(_)) => Some(Arc::new(
            prober_http::server_config(cert, key)
                .map_err(|e| DaemonError::Config(e.to_string()))?,
        )),
        _ => None,
    };
    let guard = Arc::new(GuardStats::default());
    let limits = opts.limits.limits();
    let cfg = ResponderConfig {
        log_clients: opts.log_clients,
        drop_every: opts.drop_every,
        duplicate_every: opts.duplicate_every,
        delay_every: opts.delay_every,
        delay: opts.delay,
        busy_poll: opts.busy_poll,
        limits,
        stats: Arc::clone(&guard),
        udp_follow_ups: opts.limits.udp_follow_ups,
        receive: opts.receive.clone(),
    };
    let mut tasks = JoinSet::new();
    let mut bound = Vec::new();
    let local = |l: std::io::Result<SocketAddr>, what: &str| {
        l.map_err(|e| DaemonError::io(format!("reading the address of {what}"), e))
    };
    if let Some(addr) = opts.tcp {
        let listener = TcpListener::bind(addr)
            .await
            .map_err(|e| DaemonError::io(format!("binding tcp {addr}"), e))?;
        bound.push(("tcp", local(listener.local_addr(), "tcp")?));
        tasks.spawn(serve_tcp(listener, cfg.clone(), stop.clone()));
    }
    if let Some(addr) = opts.udp {
        let socket = bind_udp(addr, "udp", &mut bound).await?;
        tasks.spawn(serve_udp(socket, cfg.clone(), stop.clone()));
    }
    let mut sockperf = None;
    if let Some(addr) = opts.sockperf {
        // UDP and TCP on one port, as sockperf's clients take one port for
        // either (`--tcp`); port 0 gets the UDP socket's port for both, and
        // another one if a TCP socket already holds that port.
        let mut attempts = 0;
        let (socket, listener) = loop {
            let socket = UdpSocket::bind(addr)
                .await
                .map_err(|e| DaemonError::io(format!("binding sockperf {addr}"), e))?;
            let port = local(socket.local_addr(), "sockperf")?.port();
            let tcp_addr = SocketAddr::new(addr.ip(), port);
            match TcpListener::bind(tcp_addr).await {
                Ok(listener) => break (socket, listener),
                Err(e)
                    if addr.port() == 0
                        && e.kind() == std::io::ErrorKind::AddrInUse
                        && attempts < 16 =>
                {
                    attempts += 1;
                }
                Err(e) => {
                    return Err(DaemonError::io(
                        format!("binding sockperf tcp {tcp_addr}"),
                        e,
                    ));
                }
            }
        };
        bound.push(("sockperf", local(socket.local_addr(), "sockperf")?));
        bound.push((
            "sockperf-tcp",
            local(listener.local_addr(), "sockperf tcp")?,
        ));
        let stats = Arc::new(prober_tcp::sockperf::SockperfStats::default());
        sockperf = Some(Arc::clone(&stats));
        tasks.spawn(prober_tcp::sockperf::serve_sockperf_tcp(
            listener,
            cfg.clone(),
            Arc::clone(&stats),
            stop.clone(),
        ));
        tasks.spawn(prober_tcp::sockperf::serve_sockperf_udp(
            socket,
            cfg,
            stats,
            stop.clone(),
        ));
    }
    // With `grpcs` beside `grpc`, the plaintext one stays plaintext.
    let grpc_tls = if opts.grpcs.is_some() {
        None
    } else {
        tls.clone()
    };
    for (addr, tls) in [(opts.grpc, grpc_tls), (opts.grpcs, tls)] {
        let Some(addr) = addr else { continue };
        let listener = TcpListener::bind(addr)
            .await
            .map_err(|e| DaemonError::io(format!("binding grpc {addr}"), e))?;
        let scheme = if tls.is_some() { "grpcs" } else { "grpc" };
        bound.push((scheme, local(listener.local_addr(), "grpc")?));
        let grpc_cfg = ServerConfig {
            tls,
            delay: opts.grpc_delay,
            limits,
            stats: Arc::clone(&guard),
        };
        let stop = stop.clone();
        tasks.spawn(async move {
            serve_grpc(listener, grpc_cfg, stop)
                .await
                .map_err(std::io::Error::other)
        });
    }
    for (addr, tls, what) in [(opts.http, None, "http"), (opts.https, http_tls, "https")] {
        let Some(addr) = addr else { continue };
        let listener = TcpListener::bind(addr)
            .await
            .map_err(|e| DaemonError::io(format!("binding {what} {addr}"), e))?;
        bound.push((what, local(listener.local_addr(), what)?));
        let cfg = prober_http::HttpServerConfig {
            tls,
            log_clients: opts.log_clients,
            limits,
            stats: Arc::clone(&guard),
        };
        tasks.spawn(serve_http(listener, cfg, stop.clone()));
    }
    let mut stamp = None;
    if let Some(addr) = opts.stamp {
        let socket = bind_udp(addr, "stamp", &mut bound).await?;
        let stats = Arc::new(ReflectorStats::default());
        stamp = Some(Arc::clone(&stats));
        tasks.spawn(serve_stamp(
            socket,
            opts.stamp_config.clone(),
            stats,
            stop.clone(),
        ));
    }
    Ok(Responders {
        tasks,
        bound,
        stamp,
        sockperf,
        guard,
    })
}

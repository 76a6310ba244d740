//! Protocol descriptors: what a protocol crate tells the rest of prober
//! about itself, so that the binary keeps one list of protocols and no
//! per-protocol `match`.
//!
//! Each protocol crate exports one [`Protocol`] value per probe type. The
//! binary lists them in a [`Registry`]; target parsing, size checks,
//! `--help`, the "known schemes" error and building probes all read it.

use std::any::Any;
use std::fmt;
use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use crate::runner::Runnable;

/// One URL scheme of a protocol (`grpc` and `grpcs` share one protocol).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Scheme {
    /// The scheme as written in target URLs and shown as the protocol in
    /// results: `tcp`, `grpcs+stream`, ...
    pub name: &'static str,
    /// The scheme runs over TLS.
    pub tls: bool,
}

impl Scheme {
    /// A plaintext scheme.
    pub const fn plain(name: &'static str) -> Self {
        Self { name, tls: false }
    }

    /// A scheme over TLS.
    pub const fn tls(name: &'static str) -> Self {
        Self { name, tls: true }
    }
}

/// Which request sizes a protocol takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SizeRule {
    /// Size used when none is given.
    pub default: usize,
    /// Smallest legal size.
    pub min: usize,
    /// Largest legal size.
    pub max: usize,
}

/// Options of `prober run` that only some protocols honour. A protocol that
/// does not list an option refuses it rather than ignoring it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Options {
    /// `--ttl`: IP TTL / IPv6 hop limit of requests.
    pub ttl: bool,
    /// `--busy-poll`: replies read by a spinning thread.
    pub busy_poll: bool,
    /// [`Marks`]: `--tos`/`--dscp`, `--source`, `--interface`, `--fwmark`.
    pub marks: bool,
    /// `--flows N`: its probes keep one socket (one source port) for the
    /// run, so N flows are N 5-tuples an ECMP hash may spread.
    pub flows: bool,
}

/// A scheme's row on the protocol ladder of `prober run`'s self-test.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rung {
    /// The scheme whose targets the row shows.
    pub scheme: &'static str,
    /// The row's name (`HTTP/2 (h2c)`).
    pub label: &'static str,
    /// The scheme of the row it is compared with: the layer it runs on
    /// (HTTP/1.1 on TCP), or the step before it (TCP after UDP).
    pub over: Option<&'static str>,
    /// Its place on the ladder, bottom first.
    pub rank: u8,
}

/// A target of the self-test: `SCHEME://127.0.0.1:PORT/PATH`, the port
/// the named responder bound on loopback.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SelfTest {
    /// The target's scheme.
    pub scheme: &'static str,
    /// The responder that answers it (its `prober serve` name); `None`:
    /// the kernel does (ICMP), and `::1` is probed too where IPv6 works.
    pub responder: Option<&'static str>,
    /// The target's path (`echo`: the HTTP responder's echo).
    pub path: &'static str,
}

impl SelfTest {
    /// A target of `scheme` answered by responder `responder`.
    pub const fn on(scheme: &'static str, responder: &'static str) -> Self {
        Self {
            scheme,
            responder: Some(responder),
            path: "",
        }
    }

    /// The same with this path.
    #[must_use]
    pub const fn path(mut self, path: &'static str) -> Self {
        self.path = path;
        self
    }
}

/// Where and how a probe's requests leave: the TOS byte (IPv6 traffic
/// class), the local address, the interface, and the firewall mark.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Marks {
    /// `--tos` or `--dscp`.
    pub tos: Option<u8>,
    /// `--source`: the local address to send from.
    pub source: Option<std::net::IpAddr>,
    /// `--interface`: the device to send through (`SO_BINDTODEVICE`).
    pub interface: Option<String>,
    /// `--fwmark`: the packets' firewall mark (`SO_MARK`), for policy
    /// routing and nftables.
    pub fwmark: Option<u32>,
}

impl Marks {
    /// Refuses a source address of another family than `addr`'s.
    ///
    /// # Errors
    /// Says which address is not of which family.
    pub fn check_family(&self, addr: std::net::SocketAddr) -> Result<(), String> {
        match self.source {
            Some(src) if src.is_ipv4() != addr.is_ipv4() => Err(format!(
                "{src} is not of the address family of {}",
                addr.ip()
            )),
            _ => Ok(()),
        }
    }

    /// Whether any is set.
    pub fn any(&self) -> bool {
        self.tos.is_some()
            || self.source.is_some()
            || self.interface.is_some()
            || self.fwmark.is_some()
    }
}

/// Which roots a server certificate must chain to when no `--ca` is given.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Roots {
    /// The operating system's trust store (a private CA installed there
    /// counts); the Mozilla roots built into prober where the store is
    /// empty or unreadable.
    #[default]
    System,
    /// The Mozilla roots built into prober (webpki-roots) only.
    Mozilla,
}

/// TLS settings for schemes over TLS, as file names; the protocol reads them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TlsFiles {
    /// CA certificate (PEM) the server must chain to; `roots` if none.
    pub ca: Option<PathBuf>,
    /// The roots used without `ca`.
    pub roots: Roots,
    /// Client certificate (PEM) for mutual TLS.
    pub cert: Option<PathBuf>,
    /// Client key (PEM) for mutual TLS.
    pub key: Option<PathBuf>,
    /// Name to verify and send as SNI instead of the target's host.
    pub server_name: Option<String>,
    /// Do not verify the server certificate at all.
    pub insecure: bool,
}

impl TlsFiles {
    /// True when any TLS option was given.
    pub fn any(&self) -> bool {
        self.ca.is_some()
            || self.roots != Roots::System
            || self.cert.is_some()
            || self.key.is_some()
            || self.server_name.is_some()
            || self.insecure
    }
}

pub use crate::shared::Shared;

/// What building a probe may use besides its target: the run's options and
/// state shared between probes.
#[derive(Debug, Default, Clone)]
pub struct BuildEnv {
    /// `--busy-poll`.
    pub busy_poll: bool,
    /// `-b` above 1: the run overlaps probes on purpose, pipelined on one
    /// connection as netperf's `-b` does, so a protocol that keeps a second
    /// connection for probes that overlap by accident (TCP, gRPC) keeps
    /// none.
    pub pipelined: bool,
    /// `--receive`: how probes that support it wait for replies (UDP, ICMP, TCP, gRPC).
    pub receive: crate::spin::Receive,
    /// `--ttl`.
    pub ttl: Option<u32>,
    /// Where and how requests leave ([`Marks`]), for protocols whose
    /// [`Options::marks`] is set.
    pub marks: Marks,
    /// `--ca`, `--cert`, `--key`, `--tls-server-name`, `--insecure`.
    pub tls: TlsFiles,
    /// Ask the kernel for transmit stamps (t1k, the client send part):
    /// `prober run` does; the daemon with `kernel_stamps = true`.
    pub tx_stamps: bool,
    /// State shared by every probe of the run or the daemon (the ICMP
    /// sockets), see [`Shared`].
    pub shared: Arc<Shared>,
    /// A protocol's own options, one value per type (HTTP's, DNS's,
    /// STAMP's), and what is made from them once (HTTP's TLS
    /// configuration): `prober run` puts the options of its command line
    /// here, the daemon a job's tables. A protocol finds its defaults when
    /// nothing was put.
    pub options: Arc<Shared>,
}

impl BuildEnv {
    /// The same environment with other protocol options (a daemon job's).
    #[must_use]
    pub fn with_options(&self, options: Arc<Shared>) -> Self {
        Self {
            options,
            ..self.clone()
        }
    }

    /// The protocol options of type `T` put here, or `T`'s defaults.
    pub fn options<T: Any + Send + Sync + Default>(&self) -> Arc<T> {
        self.options
            .get_or_try_init(|| Ok::<_, std::convert::Infallible>(Arc::new(T::default())))
            .unwrap_or_else(|e| match e {})
    }
}

/// One target to build a probe for.
#[derive(Debug, Clone, Copy)]
pub struct ProbeSpec<'a> {
    /// The scheme the target was written with (TLS or not).
    pub scheme: &'static Scheme,
    /// Host as written: the TLS server name and `:authority`.
    pub host: &'a str,
    /// What the URL path names (`grpc-health://h:p/service`), or "".
    pub path: &'a str,
    /// Where it resolved.
    pub addr: SocketAddr,
    /// Request size (checked against the protocol's [`SizeRule`]).
    pub size: usize,
    /// The per-probe timeout.
    pub timeout: Duration,
}

/// A probe that could not be built (a socket, a permission, a TLS file).
pub type BuildError = Box<dyn std::error::Error + Send + Sync>;

/// The future a [`BuildFn`] returns.
pub type BuildFuture<'a> =
    Pin<Box<dyn Future<Output = Result<Box<dyn Runnable>, BuildError>> + Send + 'a>>;

/// Builds the probe of one target. Protocols write it as a plain `fn` that
/// returns `Box::pin(async move { ... })` and ends in
/// [`crate::runner::runnable`], which instantiates the generic runner once
/// for the protocol's probe type.
pub type BuildFn = for<'a> fn(ProbeSpec<'a>, &'a BuildEnv) -> BuildFuture<'a>;

/// Everything prober needs to know about one probe type.
#[derive(Clone, Copy)]
pub struct Protocol {
    /// URL schemes that select it.
    pub schemes: &'static [Scheme],
    /// Whether targets name a port (`None`: ICMP, no port); the value is
    /// the port `prober serve` answers on, given as a hint when a port is
    /// missing (`Some(0)`: any server, no default).
    pub port: Option<u16>,
    /// A target without a port uses `port` (STAMP's IANA port 862) instead
    /// of being refused.
    pub default_port: bool,
    /// What the URL path names (`grpc-health://h:p/service`); `None`: no path.
    pub path: Option<&'static str>,
    /// Request sizes; `None`: the protocol sends no payload.
    pub size: Option<SizeRule>,
    /// What `--size` measures: `frame`, `payload` or `message`.
    pub size_unit: &'static str,
    /// Options beyond the common ones that it honours.
    pub options: Options,
    /// The `--help` line: what is timed, and the peer.
    pub help: &'static str,
    /// Its rows on the protocol ladder; none: not on it.
    pub ladder: &'static [Rung],
    /// The targets the self-test (`prober run` with no target) probes with
    /// it, against prober's own responders on loopback.
    pub self_test: &'static [SelfTest],
    /// How its responder reports its turnaround when it reports only the
    /// whole of it (no wake, dwell and send parts), as the summary says it.
    pub turnaround: Option<&'static str>,
    /// The options (flags and a job table) its targets take: each a
    /// `prober_net::options::ProtocolOptions`, which core cannot name (it
    /// knows no CLI and no config format). Protocols that share options
    /// point at the same one (every HTTP version at HTTP's, `h3://` at
    /// QUIC's too).
    pub own: &'static [&'static (dyn std::any::Any + Sync)],
    /// Builds a probe.
    pub build: BuildFn,
}

impl fmt::Debug for Protocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Protocol")
            .field("schemes", &self.schemes)
            .finish_non_exhaustive()
    }
}

impl Protocol {
    /// Its first scheme's name.
    pub fn name(&self) -> &'static str {
        self.schemes.first().map_or("?", |s| s.name)
    }
}

/// The protocols a binary knows, in the order `--help` lists them: a
/// list, or a list per protocol crate (each crate exports its own, so a
/// new crate is one line in the binary's list).
#[derive(Debug, Clone, Copy)]
pub struct Registry {
    protocols: &'static [&'static Protocol],
    protocol_lists: &'static [&'static [&'static Protocol]],
    responders: &'static [&'static crate::responder::Responder],
    responder_lists: &'static [&'static [&'static crate::responder::Responder]],
}

impl Registry {
    /// A registry of these protocols.
    pub const fn new(protocols: &'static [&'static Protocol]) -> Self {
        Self {
            protocols,
            protocol_lists: &[],
            responders: &[],
            responder_lists: &[],
        }
    }

    /// A registry of the protocols of these lists, one a crate, in order.
    pub const fn of_lists(lists: &'static [&'static [&'static Protocol]]) -> Self {
        Self {
            protocols: &[],
            protocol_lists: lists,
            responders: &[],
            responder_lists: &[],
        }
    }

    /// The same registry with these responders, in the order `prober serve
    /// --help` lists them.
    pub const fn with_responders(
        mut self,
        responders: &'static [&'static crate::responder::Responder],
    ) -> Self {
        self.responders = responders;
        self
    }

    /// The same registry with the responders of these lists, one a crate.
    pub const fn with_responder_lists(
        mut self,
        lists: &'static [&'static [&'static crate::responder::Responder]],
    ) -> Self {
        self.responder_lists = lists;
        self
    }

    /// Every responder.
    pub fn responders(
        &self,
    ) -> impl Iterator<Item = &'static crate::responder::Responder> + Clone + 'static {
        let lists = self.responder_lists;
        self.responders
            .iter()
            .copied()
            .chain(lists.iter().flat_map(|l| l.iter().copied()))
    }

    /// The responder of this name.
    pub fn responder(&self, name: &str) -> Option<&'static crate::responder::Responder> {
        self.responders().find(|r| r.name == name)
    }

    /// Every protocol.
    pub fn protocols(&self) -> impl Iterator<Item = &'static Protocol> + Clone + 'static {
        let lists = self.protocol_lists;
        self.protocols
            .iter()
            .copied()
            .chain(lists.iter().flat_map(|l| l.iter().copied()))
    }

    /// The protocol and scheme of a scheme name (case-insensitive).
    pub fn find(&self, scheme: &str) -> Option<(&'static Protocol, &'static Scheme)> {
        self.protocols().find_map(|p| {
            p.schemes
                .iter()
                .find(|s| s.name.eq_ignore_ascii_case(scheme))
                .map(|s| (p, s))
        })
    }

    /// The protocol of bare hosts (no `scheme://`): the first one that
    /// takes no port.
    pub fn bare(&self) -> Option<(&'static Protocol, &'static Scheme)> {
        self.protocols()
            .find(|p| p.port.is_none())
            .and_then(|p| p.schemes.first().map(|s| (p, s)))
    }

    /// The protocol ladder's rows, bottom first.
    pub fn ladder(&self) -> Vec<Rung> {
        let mut rungs: Vec<Rung> = self
            .protocols()
            .flat_map(|p| p.ladder.iter().copied())
            .collect();
        rungs.sort_by_key(|r| r.rank);
        rungs
    }

    /// Every scheme name, in order.
    pub fn scheme_names(&self) -> Vec<&'static str> {
        self.protocols()
            .flat_map(|p| p.schemes.iter().map(|s| s.name))
            .collect()
    }

    /// The target list of `--help`: one line per protocol.
    pub fn help(&self) -> String {
        let mut rows = Vec::new();
        for p in self.protocols() {
            let (plain, tls): (Vec<&Scheme>, Vec<&Scheme>) = p.schemes.iter().partition(|s| !s.tls);
            let Some(first) = plain.first().or_else(|| tls.first()) else {
                continue;
            };
            let mut form = match p.port {
                Some(_) => format!("{}://HOST:PORT", first.name),
                None => format!("HOST, {}://HOST", first.name),
            };
            if let Some(path) = p.path {
                form.push_str(&format!("[/{}]", path.to_ascii_uppercase()));
            }
            let mut help = p.help.to_owned();
            let others: Vec<_> = plain
                .iter()
                .chain(tls.iter())
                .map(|s| s.name)
                .filter(|name| *name != first.name)
                .collect();
            if !others.is_empty() {
                help.push_str(&format!(" (also {})", others.join(", ")));
            }
            rows.push((form, help));
        }
        let width = rows.iter().map(|(f, _)| f.len()).max().unwrap_or(0);
        rows.iter()
            .map(|(f, h)| format!("  {f:<width$}  {h}\n"))
            .collect()
    }
}

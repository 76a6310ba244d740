//! The descriptor of the STAMP reflector (see
//! [`prober_core::responder::Responder`]).

use std::net::SocketAddr;
use std::sync::Arc;

use prober_core::responder::{Responder, ServeEnv, ServeFuture, Serving, Tls, no_check};
use prober_net::responder::bind_udp;

use crate::packet::Key;
use crate::reflector::{ReflectorConfig, ReflectorStats, serve_stamp};
use crate::time::Format;

/// The reflector's settings as text: `prober serve`'s flags (they need
/// `--stamp ADDR`) and the daemon's `[serve]` keys of the same names
/// (`stamp_key`, ...); [`ReflectorSpec::put_into`] reads the key.
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize, clap::Args)]
#[serde(default, deny_unknown_fields)]
#[command(next_help_heading = "STAMP reflector")]
pub struct ReflectorSpec {
    /// STAMP authenticated mode: the HMAC key is this file's bytes.
    #[arg(long, value_name = "FILE", requires = "stamp")]
    pub stamp_key: Option<std::path::PathBuf>,

    /// STAMP reflector in stateless mode (copies the sender's sequence
    /// numbers) instead of stateful (its own per session, which lets
    /// senders tell forward from backward loss).
    #[arg(long, requires = "stamp")]
    pub stamp_stateless: bool,

    /// STAMP replies per second per source address (burst as many); 0
    /// for no limit.
    #[arg(long, value_name = "N", default_value_t = ReflectorConfig::default().rate, requires = "stamp")]
    pub stamp_rate: u32,

    /// STAMP reflector timestamps in PTPv2 truncated format instead of NTP.
    #[arg(long, requires = "stamp")]
    pub stamp_ptp: bool,

    /// Say this host's clock is synchronised to UTC (the STAMP S bit).
    #[arg(long, requires = "stamp")]
    pub clock_synced: bool,
}

impl Default for ReflectorSpec {
    fn default() -> Self {
        Self {
            stamp_key: None,
            stamp_stateless: false,
            stamp_rate: ReflectorConfig::default().rate,
            stamp_ptp: false,
            clock_synced: false,
        }
    }
}

impl ReflectorSpec {
    /// Reads the key and puts the [`ReflectorConfig`] where the reflector
    /// finds it (see [`prober_net::options::OwnOptions::put`]).
    ///
    /// # Errors
    /// A key file that cannot be read, or is empty.
    pub fn put_into(
        &self,
        store: &prober_core::shared::Shared,
        _size: Option<usize>,
        table: Option<&str>,
    ) -> Result<(), String> {
        let key = self
            .stamp_key
            .as_deref()
            .map(Key::from_file)
            .transpose()
            .map_err(|e| match table {
                Some(t) => format!("{t}.stamp_key: {e}"),
                None => format!("--stamp-key: {e}"),
            })?;
        store.put(ReflectorConfig {
            key,
            stateful: !self.stamp_stateless,
            rate: self.stamp_rate,
            format: if self.stamp_ptp {
                Format::Ptp
            } else {
                Format::Ntp
            },
            clock_synced: self.clock_synced,
            ..ReflectorConfig::default()
        });
        Ok(())
    }
}

prober_net::own_options!(
    ReflectorSpec,
    rebase = |s: &mut ReflectorSpec, base: &std::path::Path| {
        if let Some(file) = &mut s.stamp_key {
            *file = base.join(&*file); // an absolute path stays as it is
        }
    }
);

/// The reflector's own settings.
static REFLECTOR_OPTIONS: prober_net::options::ProtocolOptions =
    prober_net::options::ProtocolOptions::of::<ReflectorSpec>(
        "serve",
        "--stamp-key, --stamp-stateless, --stamp-rate, --stamp-ptp and --clock-synced",
        "--stamp",
    );

fn stamp(addr: SocketAddr, env: &ServeEnv) -> ServeFuture<'_> {
    Box::pin(async move {
        let (socket, at) = bind_udp("stamp", addr).await?;
        let stats = Arc::new(ReflectorStats::default());
        let cfg = ReflectorConfig::clone(&env.options::<ReflectorConfig>());
        Ok(Serving {
            bound: vec![("stamp", at)],
            tasks: vec![Box::pin(serve_stamp(
                socket,
                cfg,
                Arc::clone(&stats),
                env.stop.clone(),
            ))],
            stats: vec![stats],
        })
    })
}

/// `--stamp ADDR`: a STAMP reflector, with the [`ReflectorConfig`] put in
/// its environment (its defaults otherwise).
pub const STAMP_RESPONDER: Responder = Responder {
    name: "stamp",
    default_port: None,
    tls: Tls::No,
    help: "Run a STAMP reflector (RFC 8762/8972) on this address (the standard port is 862).",
    hidden: false,
    check: no_check,
    serve: stamp,
    own: Some(&REFLECTOR_OPTIONS),
};

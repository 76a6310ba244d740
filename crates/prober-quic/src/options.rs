//! QUIC's own options: `prober run`'s and `prober sweep`'s flags (clap)
//! and a daemon job's `[job.quic]` table (serde), from one type.

use std::sync::Arc;
use std::time::Duration;

/// The congestion controller of the client's connections.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Congestion {
    /// CUBIC (quinn's default, as Linux's TCP).
    #[default]
    Cubic,
    /// NewReno.
    Newreno,
    /// BBR (quinn's experimental one).
    Bbr,
}

/// The QUIC options as text, checked when they are put. Each flag
/// has an id of its own: every protocol's flags share `prober run`'s
/// namespace (HTTP's `new_connection` is another flag).
#[derive(Debug, Clone, Default, PartialEq, Eq, clap::Args, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct QuicSpec {
    /// ALPN protocols offered, most preferred first [default: h3].
    #[arg(
        id = "quic_alpn",
        long = "quic-alpn",
        value_name = "LIST",
        value_delimiter = ',',
        help_heading = "QUIC"
    )]
    pub alpn: Vec<String>,

    /// Congestion controller of quic:// and h3:// connections.
    #[arg(id = "quic_congestion", long = "quic-congestion", value_name = "CC", value_enum, default_value_t = Congestion::Cubic, help_heading = "QUIC")]
    pub congestion: Congestion,

    /// The RTT a connection assumes before it has measured one, e.g. 100ms
    /// [default: quinn's, 333ms].
    #[arg(
        id = "quic_initial_rtt",
        long = "quic-initial-rtt",
        value_name = "DURATION",
        help_heading = "QUIC"
    )]
    pub initial_rtt: Option<String>,

    /// quic://: resume the TLS session of the previous probe (0-RTT where
    /// the server accepts it) instead of a full handshake each time.
    #[arg(id = "quic_resume", long = "quic-resume", help_heading = "QUIC")]
    pub resume: bool,

    /// h3://: open a new QUIC connection for every request (handshake in
    /// the connect phase) instead of keeping one.
    #[arg(
        id = "h3_new_connection",
        long = "h3-new-connection",
        help_heading = "QUIC"
    )]
    pub new_connection: bool,
}

/// The QUIC flags, as messages name them.
pub(crate) const QUIC_FLAGS: &str = "A QUIC option (--quic-alpn, --quic-congestion, --quic-initial-rtt, --quic-resume, --h3-new-connection)";

prober_net::own_options!(QuicSpec);

/// QUIC's own options: the flags above and a job's `[job.quic]`.
pub(crate) static QUIC_OPTIONS: prober_net::options::ProtocolOptions =
    prober_net::options::ProtocolOptions::of::<QuicSpec>(
        "quic",
        QUIC_FLAGS,
        "quic:// and h3:// targets",
    );

/// The options, checked.
#[derive(Debug, Clone)]
pub(crate) struct QuicOptions {
    /// ALPN offered; empty: the scheme's default.
    pub(crate) alpn: Vec<Vec<u8>>,
    pub(crate) congestion: Congestion,
    pub(crate) initial_rtt: Option<Duration>,
    pub(crate) resume: bool,
    pub(crate) new_connection: bool,
}

impl Default for QuicOptions {
    fn default() -> Self {
        QuicSpec::default()
            .build()
            .unwrap_or_else(|_| unreachable!("the defaults are valid"))
    }
}

impl QuicSpec {
    /// Checks them and puts the options where the builder finds them (see
    /// [`prober_net::options::OwnOptions::put`]).
    ///
    /// # Errors
    /// The first value that cannot be used, named by its flag or key.
    pub fn put_into(
        &self,
        store: &prober_core::shared::Shared,
        _size: Option<usize>,
        table: Option<&str>,
    ) -> Result<(), String> {
        let options = self.build().map_err(|(flag, key, why)| match table {
            Some(t) => format!("{t}.{key}: {why}"),
            None => format!("{flag}: {why}"),
        })?;
        store.put(options);
        Ok(())
    }

    /// Checks the texts; an error names the flag, the key and why.
    fn build(&self) -> Result<QuicOptions, (&'static str, &'static str, String)> {
        let initial_rtt = match &self.initial_rtt {
            None => None,
            Some(t) => {
                let d = prober_core::duration::parse_duration(t)
                    .map_err(|e| ("--quic-initial-rtt", "initial_rtt", e))?;
                if d.is_zero() || d > Duration::from_secs(60) {
                    return Err((
                        "--quic-initial-rtt",
                        "initial_rtt",
                        format!("{t} is not between 0 and 60 s"),
                    ));
                }
                Some(d)
            }
        };
        for a in &self.alpn {
            if a.is_empty() || a.len() > 255 {
                return Err((
                    "--quic-alpn",
                    "alpn",
                    format!("{a:?}: an ALPN protocol is 1 to 255 bytes"),
                ));
            }
        }
        Ok(QuicOptions {
            alpn: self.alpn.iter().map(|a| a.as_bytes().to_vec()).collect(),
            congestion: self.congestion,
            initial_rtt,
            resume: self.resume,
            new_connection: self.new_connection,
        })
    }
}

impl QuicOptions {
    /// quinn's transport settings for these options.
    pub(crate) fn transport(&self) -> Arc<quinn::TransportConfig> {
        let mut t = quinn::TransportConfig::default();
        match self.congestion {
            Congestion::Cubic => {
                t.congestion_controller_factory(
                    Arc::new(quinn::congestion::CubicConfig::default()),
                );
            }
            Congestion::Newreno => {
                t.congestion_controller_factory(Arc::new(
                    quinn::congestion::NewRenoConfig::default(),
                ));
            }
            Congestion::Bbr => {
                t.congestion_controller_factory(Arc::new(quinn::congestion::BbrConfig::default()));
            }
        }
        if let Some(rtt) = self.initial_rtt {
            t.initial_rtt(rtt);
        }
        Arc::new(t)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_values_are_named_by_flag_and_key() {
        let bad = QuicSpec {
            initial_rtt: Some("forever".into()),
            ..QuicSpec::default()
        };
        let store = prober_core::shared::Shared::default();
        let e = bad.put_into(&store, None, None).unwrap_err();
        assert!(e.starts_with("--quic-initial-rtt"), "{e}");
        let e = bad.put_into(&store, None, Some("job.x.quic")).unwrap_err();
        assert!(e.starts_with("job.x.quic.initial_rtt"), "{e}");
        let long = QuicSpec {
            alpn: vec!["x".repeat(300)],
            ..QuicSpec::default()
        };
        assert!(long.put_into(&store, None, None).is_err());
        assert!(QuicSpec::default().put_into(&store, None, None).is_ok());
    }
}

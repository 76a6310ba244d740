//! What a DNS probe accepts as a valid reply.

use hickory_proto::op::ResponseCode;
use regex::Regex;

/// Valid rcodes and answers, and what to do with a truncated reply.
/// `prober run` fills it from its options, the daemon from a job's
/// `[job.dns]` table.
#[derive(Debug, Clone)]
pub struct DnsOptions {
    /// Rcodes that count as valid (NOERROR).
    pub rcodes: Vec<u16>,
    /// A regex one answer record must match, written as in a zone file
    /// (`name TTL IN A 192.0.2.1`).
    pub answer: Option<Regex>,
    /// Retry over TCP when a UDP reply has TC=1; without it a truncated
    /// reply is an error of kind `truncated`.
    pub tcp_fallback: bool,
    /// Ask for recursion (RD=1).
    pub recursion: bool,
}

impl Default for DnsOptions {
    fn default() -> Self {
        Self {
            rcodes: vec![0],
            answer: None,
            tcp_fallback: false,
            recursion: true,
        }
    }
}

impl DnsOptions {
    /// Parses a list of rcodes by name or number: `NOERROR,NXDOMAIN`, `0,3`.
    ///
    /// # Errors
    /// An unknown name or a number above 4095.
    pub fn parse_rcodes(text: &str) -> Result<Vec<u16>, String> {
        text.split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(|s| {
                if let Ok(n) = s.parse::<u16>() {
                    return (n <= 4095).then_some(n).ok_or_else(|| format!("rcode {n} is above 4095"));
                }
                (0..=23u16)
                    .find(|c| rcode_name(*c).eq_ignore_ascii_case(s))
                    .ok_or_else(|| {
                        format!("rcode {s:?}: write a name (NOERROR, NXDOMAIN, SERVFAIL, REFUSED, ...) or a number")
                    })
            })
            .collect::<Result<Vec<_>, _>>()
            .and_then(|v| {
                if v.is_empty() {
                    Err("an empty rcode list".to_owned())
                } else {
                    Ok(v)
                }
            })
    }
}

/// The name of an rcode, as dig prints it (`NOERROR`, `NXDOMAIN`, ...).
pub(crate) fn rcode_name(code: u16) -> String {
    let rc = <ResponseCode as From<u16>>::from(code);
    match rc {
        ResponseCode::NoError => "NOERROR".to_owned(),
        ResponseCode::FormErr => "FORMERR".to_owned(),
        ResponseCode::ServFail => "SERVFAIL".to_owned(),
        ResponseCode::NXDomain => "NXDOMAIN".to_owned(),
        ResponseCode::NotImp => "NOTIMP".to_owned(),
        ResponseCode::Refused => "REFUSED".to_owned(),
        ResponseCode::YXDomain => "YXDOMAIN".to_owned(),
        ResponseCode::YXRRSet => "YXRRSET".to_owned(),
        ResponseCode::NXRRSet => "NXRRSET".to_owned(),
        ResponseCode::NotAuth => "NOTAUTH".to_owned(),
        ResponseCode::NotZone => "NOTZONE".to_owned(),
        _ => format!("RCODE{code}"),
    }
}

/// The DNS options as text: `prober run`'s and `prober sweep`'s flags (this
/// type is their clap definition) and a daemon job's `[job.dns]` table (its
/// serde definition); [`DnsSpec::build`] checks them.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Deserialize, clap::Args)]
#[serde(default, deny_unknown_fields)]
pub struct DnsSpec {
    /// DNS rcodes that count as valid, by name or number, e.g.
    /// NOERROR,NXDOMAIN. Any other is an error of kind status [default: NOERROR].
    #[arg(long, value_name = "LIST", help_heading = "DNS")]
    pub expect_rcode: Option<String>,

    /// A regex one DNS answer record must match, as a zone file line
    /// ('name 300 IN A 192.0.2.1'); else an error of kind content.
    #[arg(long, value_name = "REGEX", help_heading = "DNS")]
    pub expect_answer: Option<String>,

    /// Retry over TCP when a UDP reply is truncated (TC=1); without it a
    /// truncated reply is an error of kind truncated.
    #[arg(long = "dns-tcp-fallback", help_heading = "DNS")]
    pub tcp_fallback: bool,

    /// Ask without recursion (RD=0), as dig +norecurse: a question for the
    /// server's own data.
    #[arg(long, help_heading = "DNS")]
    pub no_recursion: bool,
}

/// The DNS flags, as messages name them.
pub const DNS_FLAGS: &str =
    "--expect-rcode, --expect-answer, --dns-tcp-fallback and --no-recursion";

prober_net::own_options!(DnsSpec);

/// DNS's own options: `--expect-rcode`, ... and a job's `[job.dns]`.
pub(crate) static DNS_OPTIONS: prober_net::options::ProtocolOptions =
    prober_net::options::ProtocolOptions::of::<DnsSpec>(
        "dns",
        DNS_FLAGS,
        "dns:// and dns+tcp:// targets",
    );

impl DnsSpec {
    /// Checks them and puts the [`DnsOptions`] where the builder finds
    /// them (see [`prober_net::options::OwnOptions::put`]).
    ///
    /// # Errors
    /// The first option that cannot be used, by its flag or its key.
    pub fn put_into(
        &self,
        store: &prober_core::shared::Shared,
        _size: Option<usize>,
        table: Option<&str>,
    ) -> Result<(), String> {
        let options = self.build().map_err(|e| match table {
            Some(t) => format!("{t}.{e}"),
            None => format!("--{}", e.replacen('_', "-", 1)),
        })?;
        store.put(options);
        Ok(())
    }

    /// Checks the texts and makes the options.
    ///
    /// # Errors
    /// A message naming the option that cannot be used.
    pub fn build(&self) -> Result<DnsOptions, String> {
        let d = DnsOptions::default();
        Ok(DnsOptions {
            rcodes: match &self.expect_rcode {
                Some(t) => DnsOptions::parse_rcodes(t).map_err(|e| format!("expect_rcode: {e}"))?,
                None => d.rcodes,
            },
            answer: match &self.expect_answer {
                Some(re) => Some(Regex::new(re).map_err(|e| format!("expect_answer {re:?}: {e}"))?),
                None => None,
            },
            tcp_fallback: self.tcp_fallback,
            recursion: d.recursion && !self.no_recursion,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rcodes_parse_by_name_and_number() {
        assert_eq!(
            DnsOptions::parse_rcodes("NOERROR, nxdomain,2").unwrap(),
            [0, 3, 2]
        );
        assert!(DnsOptions::parse_rcodes("NOPE").is_err());
        assert!(DnsOptions::parse_rcodes("").is_err());
        assert!(DnsOptions::parse_rcodes("5000").is_err());
        assert_eq!(rcode_name(3), "NXDOMAIN");
    }
}

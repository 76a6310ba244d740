//! What `prober run` and `prober sweep` build probes from, written once:
//! the flags both take, the checks on them, the [`BuildEnv`] they make and
//! the protocol options they put in it.

use anyhow::{anyhow, bail};
use prober_core::Target;
use prober_core::protocol::BuildEnv;
use prober_net::options::OptionSet;

use crate::cli::{MarkArgs, TlsArgs};

/// The options of TLS targets, as messages name them.
const TLS_OPTIONS: &str = "--ca, --ca-roots, --cert, --tls-server-name and --insecure";

/// The flags that say how probes are built, borrowed from `run`'s or
/// `sweep`'s arguments.
pub(crate) struct ProbeFlags<'a> {
    pub(crate) ttl: Option<u32>,
    pub(crate) marks: &'a MarkArgs,
    pub(crate) tls: &'a TlsArgs,
    /// Each protocol's own options.
    pub(crate) own: &'a OptionSet,
    pub(crate) size: Option<usize>,
    pub(crate) no_tx_stamps: bool,
}

/// The schemes of the registry's protocols that `pred` holds for, as a
/// message lists them (`http://, h2c://, https:// and h3://`): from the
/// descriptors, so a new protocol is named without a line here.
fn schemes(
    pred: impl Fn(&prober_core::Protocol, &prober_core::protocol::Scheme) -> bool,
) -> String {
    let names: Vec<String> = crate::protocols::PROTOCOLS
        .protocols()
        .flat_map(|p| p.schemes.iter().map(move |s| (p, s)))
        .filter(|(p, s)| pred(p, s))
        .map(|(_, s)| format!("{}://", s.name))
        .collect();
    match names.split_last() {
        Some((last, rest)) if !rest.is_empty() => format!("{} and {last}", rest.join(", ")),
        Some((last, _)) => last.clone(),
        None => String::new(),
    }
}

impl ProbeFlags<'_> {
    /// The environment probes are built in, with the protocol options the
    /// self-test honours too (ICMP's socket choice).
    pub(crate) fn env(&self, busy_poll: bool, receive: prober_core::spin::Receive) -> BuildEnv {
        let env = BuildEnv {
            busy_poll,
            receive,
            ttl: self.ttl,
            marks: self.marks.marks(),
            tls: self.tls.files(),
            tx_stamps: !self.no_tx_stamps,
            ..BuildEnv::default()
        };
        for (own, given) in &self.own.0 {
            if own.self_test {
                // Nothing of these can be refused (see `ProtocolOptions::in_self_test`).
                let _ = given.put(&env.options, None, None);
            }
        }
        env
    }

    /// Each protocol's own options, read and checked, put where its
    /// builder finds them; a `--size` a protocol cannot use (below what
    /// STAMP's options need) is refused here, before any socket opens.
    pub(crate) fn seed(&self, targets: &[Target], env: &BuildEnv) -> anyhow::Result<()> {
        self.own
            .put(&env.options, targets.iter(), self.size, None)
            .map_err(|e| anyhow!(e))
    }

    /// The first of the flags that name a target's certificates, requests
    /// or flows, if one was given: the self-test makes its own.
    pub(crate) fn for_targets_only(&self) -> Option<&'static str> {
        let own = self
            .own
            .0
            .iter()
            .filter(|(o, _)| !o.self_test)
            .map(|(o, given)| (!given.is_default(), o.flags));
        [(self.tls.given(), TLS_OPTIONS)]
            .into_iter()
            .chain(own)
            .find_map(|(on, flag)| on.then_some(flag))
    }

    /// Refuses options that no target can honour, and warns about targets
    /// that ignore an option others use.
    pub(crate) fn check(&self, targets: &[Target]) -> anyhow::Result<()> {
        let marks = self.marks;
        // Binding to an address the host does not have fails at the first
        // probe with "Cannot assign requested address": say which it is
        // first. All of 127.0.0.0/8 is this host's, whatever lo lists.
        if let Some(source) = marks.source {
            let own = prober_net::resolve::own_addresses();
            let local = source.is_unspecified() || source.is_loopback() || own.contains(&source);
            if !own.is_empty() && !local {
                bail!("--source {source} is not an address of this host (`ip address` lists them)");
            }
        }
        if let Some(dev) = &marks.interface {
            prober_sys::mark::check_interface(dev).map_err(|e| anyhow::anyhow!(e))?;
        }
        let check = |given: bool, flag: &str, applies: &dyn Fn(&Target) -> bool, what: &str| {
            if !given {
                return Ok(());
            }
            let ignoring: Vec<String> = targets
                .iter()
                .filter(|t| !applies(t))
                .map(ToString::to_string)
                .collect();
            if ignoring.len() == targets.len() {
                bail!("{flag} applies only to {what}; no target here takes it");
            }
            if !ignoring.is_empty() {
                eprintln!(
                    "prober: warning: {flag} has no effect on {}",
                    ignoring.join(", ")
                );
            }
            Ok(())
        };
        check(
            self.ttl.is_some(),
            "--ttl",
            &|t| t.protocol.options.ttl,
            "icmp targets",
        )?;
        for (given, flag) in [
            (marks.source.is_some(), "--source"),
            (marks.interface.is_some(), "--interface"),
            (marks.fwmark.is_some(), "--fwmark"),
            (marks.tos.is_some(), "--tos"),
            (marks.dscp.is_some(), "--dscp"),
        ] {
            check(
                given,
                flag,
                &|t| t.protocol.options.marks,
                "icmp, udp and tcp targets",
            )?;
        }
        check(
            self.size.is_some(),
            "--size",
            &|t| t.protocol.size.is_some(),
            "targets that send a payload (tcp-connect:// and grpc-health:// send none)",
        )?;
        check(
            self.tls.given(),
            TLS_OPTIONS,
            &|t| t.scheme.tls,
            &format!("TLS targets ({})", schemes(|_, s| s.tls)),
        )?;
        for (own, given) in &self.own.0 {
            check(
                !given.is_default(),
                own.flags,
                &|t| own.applies(t),
                &format!("{} targets", schemes(|p, _| own.taken_by(p))),
            )?;
        }
        Ok(())
    }
}

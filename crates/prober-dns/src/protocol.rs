//! The `dns://` and `dns+tcp://` descriptor (see [`prober_core::Protocol`]).

use prober_core::protocol::{BuildEnv, BuildFuture, Options, ProbeSpec, Protocol, Scheme};
use prober_core::runnable;

use crate::{DnsOptions, DnsProbe, Question};

fn build<'a>(spec: ProbeSpec<'a>, env: &'a BuildEnv) -> BuildFuture<'a> {
    Box::pin(async move {
        let opts = env.options::<DnsOptions>();
        let mut question = Question::parse(spec.path)?;
        question.tcp |= spec.scheme.name == "dns+tcp";
        let probe = DnsProbe::new(spec.addr, question, opts, env.tx_stamps)
            .await
            .map_err(|e| format!("opening a DNS socket to {}: {e}", spec.addr))?;
        Ok(runnable(probe))
    })
}

/// `dns://SERVER[:PORT]/NAME?type=A[&tcp]` and `dns+tcp://`.
pub const DNS: Protocol = Protocol {
    schemes: &[Scheme::plain("dns"), Scheme::plain("dns+tcp")],
    port: Some(53),
    default_port: true,
    path: Some("name?type=A"),
    size: None,
    size_unit: "message",
    options: Options {
        ttl: false,
        busy_poll: false,
        marks: false,
        flows: false,
    },
    help: "DNS query to its reply (UDP, or TCP with dns+tcp:// or &tcp), rcode and answers checked",
    ladder: &[],
    turnaround: None,
    own: &[&crate::options::DNS_OPTIONS],
    self_test: &[],
    build,
};

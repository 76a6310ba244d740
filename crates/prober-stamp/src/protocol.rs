//! The `stamp://` descriptor (see [`prober_core::Protocol`]).

use prober_core::protocol::{
    BuildEnv, BuildFuture, Options, ProbeSpec, Protocol, Scheme, SizeRule,
};
use prober_core::runnable;

use crate::packet::OPEN_LEN;
use crate::{DEFAULT_PORT, SenderOptions, StampProbe};

fn build<'a>(spec: ProbeSpec<'a>, env: &'a BuildEnv) -> BuildFuture<'a> {
    Box::pin(async move {
        // `prober run` puts the --stamp-* options here before building.
        let opts = SenderOptions::clone(&env.options::<SenderOptions>());
        // An authenticated request is at least 112 octets: the default
        // size grows to fit (a size given on the command line is checked).
        let size = spec.size.max(opts.min_size());
        let probe = StampProbe::connect(spec.addr, size, opts, env.tx_stamps)
            .await
            .map_err(|e| format!("opening a STAMP session to {}: {e}", spec.addr))?;
        Ok(runnable(probe))
    })
}

/// `stamp://`: a STAMP Session-Sender (RFC 8762, RFC 8972).
pub const STAMP: Protocol = Protocol {
    schemes: &[Scheme::plain("stamp")],
    port: Some(DEFAULT_PORT),
    default_port: true,
    path: None,
    size: Some(SizeRule {
        default: OPEN_LEN,
        min: OPEN_LEN,
        max: 65_507,
    }),
    size_unit: "packet",
    options: Options {
        ttl: false,
        busy_poll: false,
        marks: false,
        flows: false,
    },
    help: "STAMP sender (RFC 8762/8972), against a router's or prober's reflector",
    ladder: &[],
    turnaround: Some("its receive stamp to its send, as it reports it: STAMP's T3 − T2"),
    own: &[&crate::sender::STAMP_OPTIONS],
    self_test: &[],
    build,
};

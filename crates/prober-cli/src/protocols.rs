//! The one list of protocols, and of responders, this binary knows.
//! Parsing targets, size checks, `--help`, the "known schemes" error, the
//! self-test and building probes (for `prober run` and the daemon) read the
//! first; `prober serve`'s flags, the daemon's `[serve]` keys, the
//! self-test's listeners and starting them read the second. A new protocol
//! crate is one line in each (its own `PROTOCOLS` and `RESPONDERS` lists).

use prober_core::Registry;

/// Every protocol crate's protocols, in the order `prober run --help`
/// lists them, and their responders, in the order `prober serve --help`
/// lists their flags. A bare host (no `scheme://`) means the first protocol
/// without ports (ICMP).
pub(crate) static PROTOCOLS: Registry = Registry::of_lists(&[
    prober_tcp::PROTOCOLS,
    prober_grpc::PROTOCOLS,
    prober_stamp::PROTOCOLS,
    prober_http::PROTOCOLS,
    prober_dns::PROTOCOLS,
    prober_quic::PROTOCOLS,
    prober_icmp::PROTOCOLS,
])
.with_responder_lists(&[
    prober_tcp::RESPONDERS,
    prober_grpc::RESPONDERS,
    prober_http::RESPONDERS,
    prober_stamp::RESPONDERS,
    prober_quic::RESPONDERS,
]);

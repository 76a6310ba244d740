//! The one list of protocols, and of responders, this binary knows.
//! Parsing targets, size checks, `--help`, the "known schemes" error, the
//! self-test and building probes (for `prober run` and the daemon) read the
//! first; `prober serve`'s flags, the daemon's `[serve]` keys, the
//! self-test's listeners and starting them read the second. A new protocol
//! is one line in each; a new scheme for an existing one, one line here.

use prober_core::Registry;

/// Every protocol, in the order `prober run --help` lists them. A bare host
/// (no `scheme://`) means the first protocol without ports (ICMP).
pub(crate) static PROTOCOLS: Registry = Registry::new(&[
    &prober_tcp::TCP,
    &prober_tcp::TCP_CONNECT,
    &prober_tcp::TCP_CRR,
    &prober_tcp::UDP,
    &prober_grpc::GRPC,
    &prober_grpc::GRPC_STREAM,
    &prober_grpc::GRPC_HEALTH,
    &prober_stamp::STAMP,
    &prober_http::HTTP,
    &prober_http::HTTPS,
    &prober_dns::DNS,
    &prober_quic::QUIC,
    &prober_quic::H3,
    &prober_icmp::ICMP,
])
// Every responder, in the order `prober serve --help` lists their flags.
.with_responders(&[
    &prober_tcp::TCP_RESPONDER,
    &prober_tcp::UDP_RESPONDER,
    &prober_grpc::GRPC_RESPONDER,
    &prober_grpc::GRPCS_RESPONDER,
    &prober_http::HTTP_RESPONDER,
    &prober_http::HTTPS_RESPONDER,
    &prober_stamp::STAMP_RESPONDER,
    &prober_tcp::SOCKPERF_RESPONDER,
    &prober_quic::H3_RESPONDER,
    &prober_quic::QUIC_RESPONDER,
]);

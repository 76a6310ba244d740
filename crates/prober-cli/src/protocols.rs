//! The one list of protocols this binary knows. Parsing targets, size
//! checks, `--help`, the "known schemes" error, the self-test and building
//! probes (for `prober run` and the daemon) all read it: a new protocol, or a
//! new scheme for an existing one, is one line here.

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
    &prober_icmp::ICMP,
]);

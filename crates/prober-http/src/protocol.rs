//! The `http://`, `h2c://` and `https://` descriptors (see
//! [`prober_core::Protocol`]).

use std::sync::Arc;

use prober_core::protocol::{BuildEnv, BuildFuture, Options, ProbeSpec, Protocol, Rung, Scheme};
use prober_core::runnable;

use crate::HttpOptions;
use crate::client::{HttpProbe, Target};

/// The client TLS configuration, made once per set of options (its ALPN
/// follows the HTTP version they ask for).
struct ClientTls(Arc<rustls::ClientConfig>);

fn build<'a>(spec: ProbeSpec<'a>, env: &'a BuildEnv) -> BuildFuture<'a> {
    Box::pin(async move {
        let opts = env.options::<HttpOptions>();
        let tls = if spec.scheme.tls {
            let cfg = env.options.get_or_try_init(|| {
                crate::tls::client_config(&env.tls, opts.version)
                    .map(|c| Arc::new(ClientTls(Arc::new(c))))
            })?;
            Some(Arc::clone(&cfg.0))
        } else {
            None
        };
        let probe = HttpProbe::new(
            Target {
                host: spec.host,
                port: spec.addr.port(),
                addr: spec.addr,
                path: spec.path,
                tls,
                prior_knowledge: spec.scheme.name == "h2c",
                tx_stamps: env.tx_stamps,
                server_name: env.tls.server_name.clone(),
                timeout: spec.timeout,
            },
            opts,
        );
        Ok(runnable(probe))
    })
}

const OPTIONS: Options = Options {
    ttl: false,
    busy_poll: false,
    marks: false,
    flows: false,
};

/// `http://` (HTTP/1.1, or h2c with `--http2`) and `h2c://` (HTTP/2 with
/// prior knowledge).
pub const HTTP: Protocol = Protocol {
    schemes: &[Scheme::plain("http"), Scheme::plain("h2c")],
    port: Some(80),
    default_port: true,
    path: Some("path"),
    size: None,
    size_unit: "body",
    options: OPTIONS,
    help: "HTTP request to response body done, phases and validation (prober serve --http: /echo)",
    ladder: &[
        Rung {
            scheme: "http",
            label: "HTTP/1.1",
            over: Some("tcp"),
            rank: 3,
        },
        Rung {
            scheme: "h2c",
            label: "HTTP/2 (h2c)",
            over: Some("http"),
            rank: 4,
        },
    ],
    turnaround: None,
    own: &[&prober_net::http::HTTP_OPTIONS],
    self_test: &[
        prober_core::protocol::SelfTest::on("http", "http").path("echo"),
        prober_core::protocol::SelfTest::on("h2c", "http").path("echo"),
    ],
    build,
};

/// `https://`: HTTP/2 or HTTP/1.1 over TLS, as ALPN settles.
pub const HTTPS: Protocol = Protocol {
    schemes: &[Scheme::tls("https")],
    port: Some(443),
    default_port: true,
    path: Some("path"),
    size: None,
    size_unit: "body",
    options: OPTIONS,
    help: "HTTPS request (HTTP/2 or HTTP/1.1 by ALPN), phases, validation, certificate expiry",
    ladder: &[Rung {
        scheme: "https",
        label: "HTTPS (HTTP/2, TLS)",
        over: Some("h2c"),
        rank: 5,
    }],
    turnaround: None,
    own: &[&prober_net::http::HTTP_OPTIONS],
    self_test: &[prober_core::protocol::SelfTest::on("https", "https").path("echo")],
    build,
};

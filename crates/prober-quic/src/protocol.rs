//! The `quic://` and `h3://` descriptors (see [`prober_core::Protocol`]).

use prober_core::protocol::{
    BuildEnv, BuildFuture, Options, ProbeSpec, Protocol, Rung, Scheme, SelfTest,
};
use prober_core::runnable;

use crate::client::{Client, H3Probe, QuicProbe};
use prober_net::http::{HttpOptions, HttpVersion};

use crate::options::QuicOptions;

/// ALPN of HTTP/3 (RFC 9114), offered unless `--quic-alpn` says otherwise.
pub(crate) const H3_ALPN: &[u8] = b"h3";

fn authority(spec: &ProbeSpec<'_>) -> String {
    let host = if spec.host.contains(':') {
        format!("[{}]", spec.host)
    } else {
        spec.host.to_owned()
    };
    if spec.addr.port() == 443 {
        host
    } else {
        format!("{host}:{}", spec.addr.port())
    }
}

fn build_quic<'a>(spec: ProbeSpec<'a>, env: &'a BuildEnv) -> BuildFuture<'a> {
    Box::pin(async move {
        let opts = env.options::<QuicOptions>();
        let client = Client::new(spec.addr, spec.host, env, &opts, H3_ALPN)?;
        Ok(runnable(QuicProbe::new(client, opts.resume)))
    })
}

fn build_h3<'a>(spec: ProbeSpec<'a>, env: &'a BuildEnv) -> BuildFuture<'a> {
    Box::pin(async move {
        let opts = env.options::<QuicOptions>();
        // HTTP's options, which every HTTP version's targets take: those
        // that choose another version, or redirects, h3:// cannot honour.
        let http = env.options::<HttpOptions>();
        if http.version != HttpVersion::Auto {
            return Err(
                "h3:// speaks HTTP/3: --http2 and --http1.1 are for http:// and https://".into(),
            );
        }
        if http.follow > 0 {
            return Err(
                "h3:// does not follow redirects: --follow is for http:// and https://".into(),
            );
        }
        let client = Client::new(spec.addr, spec.host, env, &opts, H3_ALPN)?;
        let new_connection = opts.new_connection || http.new_connection;
        Ok(runnable(H3Probe::new(
            client,
            authority(&spec),
            spec.path.to_owned(),
            new_connection,
            http,
        )))
    })
}

const OPTIONS: Options = Options {
    ttl: false,
    busy_poll: false,
    marks: false,
    flows: false,
};

/// `quic://HOST:PORT`: the QUIC handshake against any QUIC server.
pub const QUIC: Protocol = Protocol {
    schemes: &[Scheme::tls("quic")],
    port: Some(443),
    default_port: true,
    path: None,
    size: None,
    size_unit: "message",
    options: OPTIONS,
    help: "QUIC handshake (TLS 1.3 inside), against any QUIC server (--quic-resume: 0-RTT)",
    ladder: &[],
    turnaround: None,
    own: &[&crate::options::QUIC_OPTIONS],
    self_test: &[SelfTest::on("quic", "h3")],
    build: build_quic,
};

/// `h3://HOST[:PORT][/PATH]`: an HTTP/3 GET.
pub const H3: Protocol = Protocol {
    schemes: &[Scheme::tls("h3")],
    port: Some(443),
    default_port: true,
    path: Some("path"),
    size: None,
    size_unit: "body",
    options: OPTIONS,
    help: "HTTP/3 request to response body done, over QUIC, with phases (prober serve --h3: /echo)",
    ladder: &[Rung {
        scheme: "h3",
        label: "HTTP/3 (QUIC)",
        over: Some("https"),
        rank: 8,
    }],
    turnaround: None,
    own: &[
        &crate::options::QUIC_OPTIONS,
        &prober_net::http::HTTP_OPTIONS,
    ],
    self_test: &[SelfTest::on("h3", "h3").path("echo")],
    build: build_h3,
};

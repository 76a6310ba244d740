//! `quic://` and `h3://` through their descriptors, as the binary and the
//! daemon use them, against this crate's responders and against quic-go's
//! `http3` package (code nobody here wrote), both ways.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use prober_core::protocol::{BuildEnv, ProbeSpec, Protocol};
use prober_core::responder::{Responder, ServeEnv};
use prober_core::shared::Shared;
use prober_core::{Detail, ErrorKind, Outcome, Sample};
use prober_net::responder::{Common, ServerTlsFiles};
use tokio_util::sync::CancellationToken;

/// A CA, and a certificate for localhost and 127.0.0.1 it signed, in a
/// directory removed on drop.
struct Pki(PathBuf);

impl Pki {
    fn new(tag: &str) -> Self {
        use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};
        let dir = std::env::temp_dir().join(format!("prober-quic-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca.distinguished_name
            .push(DnType::CommonName, "prober quic test CA");
        let ca_key = KeyPair::generate().unwrap();
        std::fs::write(dir.join("ca.pem"), ca.self_signed(&ca_key).unwrap().pem()).unwrap();
        let issuer = Issuer::new(ca, ca_key);
        let key = KeyPair::generate().unwrap();
        let mut leaf =
            CertificateParams::new(vec!["localhost".to_owned(), "127.0.0.1".to_owned()]).unwrap();
        leaf.distinguished_name
            .push(DnType::CommonName, "localhost");
        let now = time::OffsetDateTime::now_utc();
        leaf.not_before = now - time::Duration::days(1);
        leaf.not_after = now + time::Duration::days(30);
        std::fs::write(
            dir.join("cert.pem"),
            leaf.signed_by(&key, &issuer).unwrap().pem(),
        )
        .unwrap();
        std::fs::write(dir.join("key.pem"), key.serialize_pem()).unwrap();
        Self(dir)
    }

    fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for Pki {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Starts `responder` on a loopback port with the PKI's certificate.
async fn serve(responder: &Responder, pki: &Pki, stop: &CancellationToken) -> SocketAddr {
    let options = Arc::new(Shared::default());
    options.put(Common {
        tls: Some(ServerTlsFiles {
            cert: pki.path("cert.pem"),
            key: pki.path("key.pem"),
            client_ca: None,
        }),
        ..Common::default()
    });
    let env = ServeEnv {
        options,
        tls: true,
        stop: stop.clone(),
    };
    (responder.check)(&env).expect("the responder's TLS loads");
    let serving = (responder.serve)("127.0.0.1:0".parse().unwrap(), &env)
        .await
        .expect("the responder starts");
    for task in serving.tasks {
        tokio::spawn(task);
    }
    serving.bound[0].1
}

/// The options of a job whose `[job.quic]` and `[job.http]` tables are
/// `table`'s (`quic.KEY` and `http.KEY`), as the daemon reads them (the
/// flags give the same types).
fn options(table: &str) -> Arc<Shared> {
    let value: toml::Table = toml::from_str(table).unwrap();
    let store = Arc::new(Shared::default());
    let registry = prober_core::Registry::new(&[&prober_quic::H3]);
    for own in prober_net::options::ProtocolOptions::all(&registry) {
        let t = value
            .get(own.key)
            .cloned()
            .unwrap_or_else(|| toml::Value::Table(toml::Table::new()));
        (own.from_toml)(t)
            .unwrap()
            .put(&store, None, Some(&format!("job.t.{}", own.key)))
            .unwrap();
    }
    store
}

/// `n` probes of `protocol` at `addr` (named `localhost`), one by one.
async fn probe(
    protocol: &Protocol,
    addr: SocketAddr,
    path: &str,
    ca: Option<&Path>,
    table: &str,
    n: usize,
) -> Vec<Sample> {
    let mut env = BuildEnv::default().with_options(options(table));
    env.tls.ca = ca.map(Path::to_owned);
    let spec = ProbeSpec {
        scheme: &protocol.schemes[0],
        host: "localhost",
        path,
        addr,
        size: 0,
        timeout: Duration::from_secs(2),
    };
    let mut out = Vec::new();
    // One built probe per sample: `once` runs one; a kept connection is
    // exercised by prepare() before it.
    for _ in 0..n {
        let r = (protocol.build)(spec, &env)
            .await
            .expect("the probe builds");
        out.push(
            prober_core::once(r, Duration::from_secs(2))
                .await
                .expect("a sample")
                .0,
        );
    }
    out
}

fn ok(s: &Sample) -> &prober_core::Reply {
    match &s.outcome {
        Outcome::Ok(r) => r,
        other => panic!("not ok: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quic_and_h3_probe_this_crate_s_responders() {
    let pki = Pki::new("own");
    let stop = CancellationToken::new();
    let h3 = serve(&prober_quic::H3_RESPONDER, &pki, &stop).await;
    let echo = serve(&prober_quic::QUIC_RESPONDER, &pki, &stop).await;
    let ca = pki.path("ca.pem");
    // A kept connection (opened by prepare): no connect phase; the phases
    // add up to the round trip; the responder's dwell is its part.
    for s in probe(&prober_quic::H3, h3, "echo", Some(&ca), "", 3).await {
        let r = ok(&s);
        assert_eq!(r.bytes, 64);
        assert!(
            matches!(
                r.app.detail,
                Some(Detail::Http {
                    status: 200,
                    version: 30,
                    ..
                })
            ),
            "{r:?}"
        );
        let p = r.app.phases.0;
        assert!(
            p[1].is_none(),
            "a kept connection has no connect phase: {p:?}"
        );
        let sum: u64 = p.iter().flatten().sum();
        assert_eq!(Duration::from_nanos(sum), r.rtt(), "{p:?}");
        assert!(r.parts().responder_dwell.is_some());
    }
    // A new connection per request: the handshake is its connect phase.
    for s in probe(
        &prober_quic::H3,
        h3,
        "echo",
        Some(&ca),
        "quic.new_connection = true",
        2,
    )
    .await
    {
        let r = ok(&s);
        let connect = r.app.phases.0[1].expect("a connect phase");
        assert!(connect > 0 && Duration::from_nanos(connect) < r.rtt());
    }
    // The handshake alone, against both responders, full and resumed,
    // with another congestion controller and an initial RTT.
    for (addr, table) in [
        (echo, ""),
        (h3, ""),
        (echo, "quic.resume = true"),
        (h3, "quic.congestion = \"bbr\"\nquic.initial_rtt = \"50ms\""),
        (echo, "quic.alpn = [\"prober-echo\"]"),
    ] {
        for s in probe(&prober_quic::QUIC, addr, "", Some(&ca), table, 2).await {
            ok(&s);
        }
    }
    // Resumed handshakes: one probe built, three handshakes, the second
    // and third resuming with 0-RTT the responder accepts.
    {
        let env = BuildEnv {
            tls: prober_core::protocol::TlsFiles {
                ca: Some(ca.clone()),
                ..Default::default()
            },
            ..BuildEnv::default()
        }
        .with_options(options("quic.resume = true"));
        let spec = ProbeSpec {
            scheme: &prober_quic::QUIC.schemes[0],
            host: "localhost",
            path: "",
            addr: echo,
            size: 0,
            timeout: Duration::from_secs(2),
        };
        let r = (prober_quic::QUIC.build)(spec, &env).await.unwrap();
        let (tx, mut rx) = tokio::sync::mpsc::channel(16);
        let mut set = tokio::task::JoinSet::new();
        let reader = r.launch(
            &mut set,
            prober_core::Launch {
                id: 0,
                cfg: prober_core::RunConfig {
                    interval: Duration::from_millis(50),
                    count: Some(3),
                    timeout: Duration::from_secs(2),
                    precise_timer: false,
                    ..Default::default()
                },
                phase: Duration::ZERO,
                events: tx,
                stop: CancellationToken::new(),
                turnstile: None,
                abandon: None,
                timer: None,
            },
        );
        while let Some(ev) = rx.recv().await {
            if let prober_core::Event::Sample(s) = ev {
                ok(&s);
            }
        }
        while set.join_next().await.is_some() {}
        let path = reader().path.expect("path statistics");
        assert_eq!(path.zero_rtt, 2, "{path:?}");
    }
    // A status other than 2xx, and an unknown issuer, by prober's kinds.
    let s = &probe(&prober_quic::H3, h3, "status/503", Some(&ca), "", 1).await[0];
    match &s.outcome {
        Outcome::Error(e) => {
            assert_eq!(e.kind(), ErrorKind::Status);
            assert!(matches!(e.detail(), Some(Detail::Http { status: 503, .. })));
        }
        other => panic!("{other:?}"),
    }
    let s = &probe(&prober_quic::H3, h3, "echo", None, "", 1).await[0];
    assert!(
        matches!(&s.outcome, Outcome::Error(e) if e.kind() == ErrorKind::Tls),
        "{:?}",
        s.outcome
    );
    stop.cancel();
}

#[test]
fn bad_options_are_refused_by_key() {
    let own = prober_net::options::ProtocolOptions::all(&prober_core::Registry::new(&[
        &prober_quic::QUIC,
    ]))
    .into_iter()
    .find(|o| o.key == "quic")
    .unwrap();
    for (table, want) in [
        ("initial_rtt = \"soon\"", "job.t.quic.initial_rtt"),
        ("congestion = \"vegas\"", "vegas"),
        ("bogus = 1", "bogus"),
    ] {
        let value: toml::Value = toml::from_str(table).unwrap();
        let store = Shared::default();
        let e = (own.from_toml)(value).and_then(|o| o.put(&store, None, Some("job.t.quic")));
        let e = e.unwrap_err();
        assert!(e.contains(want), "{table}: {e}");
    }
}

/// Builds the quic-go program in `interop/` (its modules from the Go
/// module proxy) into `dir`.
fn interop(dir: &Path) -> Option<PathBuf> {
    if Command::new("go").arg("version").output().is_err() {
        prober_core::testutil::skip(
            "HTTP/3 interop with quic-go needs Go 1.26 (go is not installed)",
        );
        return None;
    }
    let out = dir.join("interop");
    let built = Command::new("go")
        .args(["build", "-o"])
        .arg(&out)
        .arg(".")
        .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/interop"))
        .output()
        .expect("go runs");
    assert!(
        built.status.success(),
        "building the quic-go interop program: {}",
        String::from_utf8_lossy(&built.stderr)
    );
    Some(out)
}

struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h3_interoperates_with_quic_go_both_ways() {
    use std::io::BufRead as _;
    let pki = Pki::new("interop");
    let Some(bin) = interop(&pki.0) else { return };
    // prober's client against quic-go's server.
    let mut server = Command::new(&bin)
        .arg("server")
        .arg("127.0.0.1:0")
        .arg(pki.path("cert.pem"))
        .arg(pki.path("key.pem"))
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("the quic-go server starts");
    let line = std::io::BufReader::new(server.stdout.take().unwrap())
        .lines()
        .next()
        .expect("a listening line")
        .unwrap();
    let _server = Killed(server);
    let at: SocketAddr = line
        .strip_prefix("listening ")
        .expect(&line)
        .parse()
        .unwrap();
    let ca = pki.path("ca.pem");
    for s in probe(&prober_quic::H3, at, "echo", Some(&ca), "", 3).await {
        let r = ok(&s);
        assert_eq!(r.bytes, 64);
        assert!(matches!(
            r.app.detail,
            Some(Detail::Http {
                status: 200,
                version: 30,
                ..
            })
        ));
    }
    for s in probe(&prober_quic::QUIC, at, "", Some(&ca), "", 2).await {
        ok(&s);
    }
    // quic-go's client against prober's responder.
    let stop = CancellationToken::new();
    let h3 = serve(&prober_quic::H3_RESPONDER, &pki, &stop).await;
    let url = format!("https://localhost:{}/echo", h3.port());
    // On a blocking thread: the responder answers on this runtime.
    let out = tokio::task::spawn_blocking(move || {
        Command::new(&bin).arg("client").arg(&url).arg(&ca).output()
    })
    .await
    .unwrap()
    .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "status 200 bytes 64 proto HTTP/3.0",
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stop.cancel();
}

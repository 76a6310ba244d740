//! TLS and mTLS with certificates made at test time.

use std::time::Duration;

use prober_core::testutil::run_probe;
use prober_core::{Outcome, Summary};
use prober_grpc::{ClientTls, GrpcProbe, ServerConfig, ServerTls};
use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
use tokio_util::sync::CancellationToken;

use crate::{Server, client, config};

struct Pki {
    ca: String,
    server_cert: String,
    server_key: String,
    client_cert: String,
    client_key: String,
}

fn ca(name: &str) -> (String, Issuer<'static, KeyPair>) {
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, name);
    let key = KeyPair::generate().unwrap();
    let cert = params.self_signed(&key).unwrap();
    (cert.pem(), Issuer::new(params, key))
}

fn leaf(names: &[&str], issuer: &Issuer<'_, KeyPair>) -> (String, String) {
    let params =
        CertificateParams::new(names.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>()).unwrap();
    let key = KeyPair::generate().unwrap();
    let cert = params.signed_by(&key, issuer).unwrap();
    (cert.pem(), key.serialize_pem())
}

fn pki() -> Pki {
    let (ca, issuer) = ca("prober test CA");
    let (server_cert, server_key) = leaf(&["localhost", "127.0.0.1"], &issuer);
    let (client_cert, client_key) = leaf(&["prober-client"], &issuer);
    Pki {
        ca,
        server_cert,
        server_key,
        client_cert,
        client_key,
    }
}

/// A responder with the PKI's server certificate, checking client
/// certificates against `client_ca` where given.
async fn tls_server(p: &Pki, client_ca: Option<String>) -> Server {
    Server::start(ServerConfig {
        tls: Some(ServerTls::from_pem(
            p.server_cert.clone().into(),
            p.server_key.clone().into(),
            client_ca.map(Into::into),
        )),
        ..Default::default()
    })
    .await
}

async fn one(srv: &Server, tls: ClientTls) -> (Summary, Option<String>) {
    let (s, samples) = run_probe(
        GrpcProbe::new(client(srv.addr, Some(tls))),
        config(3, Duration::from_millis(5)),
        CancellationToken::new(),
    )
    .await;
    let err = samples.iter().find_map(|x| match &x.outcome {
        Outcome::Error(e) => Some(e.message().to_owned()),
        _ => None,
    });
    (s, err)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_with_the_right_ca() {
    let p = pki();
    let srv = tls_server(&p, None).await;
    let (s, err) = one(
        &srv,
        ClientTls::from_pem(Some(p.ca.clone().into()), None, None),
    )
    .await;
    assert_eq!(s.ok, 3, "{err:?}");
    // Another CA: rejected, and the error names the cause.
    let (other_ca, _) = ca("someone else");
    let (s, err) = one(&srv, ClientTls::from_pem(Some(other_ca.into()), None, None)).await;
    assert_eq!(s.ok, 0);
    let err = err.unwrap();
    assert!(
        err.contains("UnknownIssuer") || err.contains("unknown issuer"),
        "{err}"
    );
    // --insecure skips verification.
    let (s, err) = one(&srv, ClientTls::default().insecure(true)).await;
    assert_eq!(s.ok, 3, "{err:?}");
    // A name the certificate does not carry.
    let (s, err) = one(
        &srv,
        ClientTls::from_pem(Some(p.ca.into()), None, Some("wrong.example".into())),
    )
    .await;
    assert_eq!(s.ok, 0);
    let err = err.unwrap();
    assert!(err.contains("not valid for name"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mtls_requires_a_client_certificate() {
    let p = pki();
    let srv = tls_server(&p, Some(p.ca.clone())).await;
    let with_id = ClientTls::from_pem(
        Some(p.ca.clone().into()),
        Some((p.client_cert.into(), p.client_key.into())),
        None,
    );
    let (s, err) = one(&srv, with_id).await;
    assert_eq!(s.ok, 3, "{err:?}");
    let (s, err) = one(
        &srv,
        ClientTls::from_pem(Some(p.ca.clone().into()), None, None),
    )
    .await;
    assert_eq!(s.ok, 0);
    let err = err.unwrap();
    assert!(err.to_lowercase().contains("certificate"), "{err}");
    // A client certificate from another CA.
    let (_, other) = ca("rogue");
    let (rogue_cert, rogue_key) = leaf(&["rogue"], &other);
    let (s, _) = one(
        &srv,
        ClientTls::from_pem(
            Some(p.ca.into()),
            Some((rogue_cert.into(), rogue_key.into())),
            None,
        ),
    )
    .await;
    assert_eq!(s.ok, 0);
}

/// Under TLS the responder's writes are TLS records, longer than what they
/// carry: its send part is still the reply's record's, and every part is
/// known.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_probes_get_every_part() {
    let p = pki();
    let srv = tls_server(&p, None).await;
    for interval in [Duration::ZERO, Duration::from_millis(10)] {
        let (s, samples) = run_probe(
            GrpcProbe::new(client(
                srv.addr,
                Some(ClientTls::from_pem(Some(p.ca.clone().into()), None, None)),
            )),
            config(40, interval),
            CancellationToken::new(),
        )
        .await;
        assert_eq!(s.ok, 40, "{s:?}");
        crate::split::assert_complete(
            &format!("grpcs every {interval:?}"),
            40,
            &crate::split::parts(&samples),
        );
    }
}

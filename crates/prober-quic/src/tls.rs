//! The client's and the server's TLS for QUIC (TLS 1.3 only, as QUIC
//! requires), from the same files as every other TLS target.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::AtomicI64;

use prober_core::protocol::TlsFiles;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn certs(what: &str, path: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    prober_net::tls::pem_certs(path).map_err(|e| format!("{what} {}: {e}", path.display()))
}

fn key(what: &str, path: &Path) -> Result<PrivateKeyDer<'static>, String> {
    prober_net::tls::pem_key(path).map_err(|e| format!("{what} {}: {e}", path.display()))
}

/// The client: roots from `--ca` (else the default roots), `--insecure`,
/// a client certificate, ALPN `alpn`; the server certificate's expiry goes
/// to `not_after`.
pub(crate) fn client(
    files: &TlsFiles,
    alpn: Vec<Vec<u8>>,
    early_data: bool,
    not_after: Arc<AtomicI64>,
) -> Result<quinn::crypto::rustls::QuicClientConfig, String> {
    let ca = files
        .ca
        .as_ref()
        .map(|p| std::fs::read(p).map_err(|e| format!("--ca {}: {e}", p.display())))
        .transpose()?;
    let verifier = prober_net::tls::ExpiryRecorder::for_roots(
        ca.as_deref(),
        files.roots,
        files.insecure,
        not_after,
    )
    .map_err(|e| format!("--ca: {e}"))?;
    let builder = rustls::ClientConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(|e| e.to_string())?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(verifier));
    let mut cfg = match (&files.cert, &files.key) {
        (Some(c), Some(k)) => builder
            .with_client_auth_cert(certs("--cert", c)?, key("--key", k)?)
            .map_err(|e| format!("--cert/--key: {e}"))?,
        (None, None) => builder.with_no_client_auth(),
        _ => return Err("--cert and --key must be given together".to_owned()),
    };
    cfg.alpn_protocols = alpn;
    cfg.enable_early_data = early_data;
    quinn::crypto::rustls::QuicClientConfig::try_from(cfg).map_err(|e| e.to_string())
}

/// The server: the chain and key of `--tls-cert`/`--tls-key`, ALPN `alpn`.
pub(crate) fn server(
    cert: &Path,
    key_file: &Path,
    alpn: &[&[u8]],
) -> Result<quinn::ServerConfig, String> {
    let mut cfg = rustls::ServerConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(|e| e.to_string())?
        .with_no_client_auth()
        .with_single_cert(certs("--tls-cert", cert)?, key("--tls-key", key_file)?)
        .map_err(|e| format!("--tls-cert/--tls-key: {e}"))?;
    cfg.alpn_protocols = alpn.iter().map(|a| a.to_vec()).collect();
    // 0-RTT for clients that resume (`--quic-resume`).
    cfg.max_early_data_size = u32::MAX;
    let crypto =
        quinn::crypto::rustls::QuicServerConfig::try_from(cfg).map_err(|e| e.to_string())?;
    Ok(quinn::ServerConfig::with_crypto(Arc::new(crypto)))
}

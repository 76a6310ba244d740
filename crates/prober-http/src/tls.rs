//! rustls configurations for `https://` (client) and `serve --http` with a
//! certificate (server), from the same options as gRPC over TLS.

use std::path::Path;
use std::sync::Arc;

use prober_core::protocol::TlsFiles;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

use crate::HttpVersion;

/// A certificate, key or CA file that cannot be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServerTlsError {
    /// A file that cannot be read or holds no PEM of the kind expected.
    #[error("{what} {path}: {why}")]
    File {
        /// Which option named it.
        what: &'static str,
        /// The file.
        path: String,
        /// What is wrong.
        why: String,
    },
    /// rustls refused the configuration (a key that does not match).
    #[error("TLS configuration: {0}")]
    Config(#[from] rustls::Error),
}

fn file_error(what: &'static str, path: &Path) -> impl FnOnce(String) -> ServerTlsError {
    move |why| ServerTlsError::File {
        what,
        path: path.display().to_string(),
        why,
    }
}

fn certs(what: &'static str, path: &Path) -> Result<Vec<CertificateDer<'static>>, ServerTlsError> {
    prober_net::tls::pem_certs(path).map_err(file_error(what, path))
}

fn key(what: &'static str, path: &Path) -> Result<PrivateKeyDer<'static>, ServerTlsError> {
    prober_net::tls::pem_key(path).map_err(file_error(what, path))
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The server side: certificate chain and key, ALPN `h2` then
/// `http/1.1`.
///
/// # Errors
/// [`ServerTlsError`].
pub fn server_config(cert: &Path, key_file: &Path) -> Result<rustls::ServerConfig, ServerTlsError> {
    let chain = certs("--tls-cert", cert)?;
    let key = key("--tls-key", key_file)?;
    let mut cfg = rustls::ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(chain, key)?;
    cfg.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(cfg)
}

/// The client side: roots from `--ca` (else the system's, or the Mozilla
/// roots with `--ca-roots mozilla`), a client
/// certificate for mutual TLS, `--insecure`, and ALPN for `version`.
pub(crate) fn client_config(
    files: &TlsFiles,
    version: HttpVersion,
) -> Result<rustls::ClientConfig, ServerTlsError> {
    let builder = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()?;
    let builder = if files.insecure {
        builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(prober_net::tls::NoVerification::new()))
    } else {
        let ca = files.ca.as_ref().map(|ca| certs("--ca", ca)).transpose()?;
        builder.with_root_certificates(prober_net::tls::root_store(ca, files.roots)?)
    };
    let mut cfg = match (&files.cert, &files.key) {
        (Some(c), Some(k)) => {
            builder.with_client_auth_cert(certs("--cert", c)?, key("--key", k)?)?
        }
        (None, None) => builder.with_no_client_auth(),
        _ => {
            return Err(ServerTlsError::File {
                what: "--cert",
                path: String::new(),
                why: "--cert and --key must be given together".to_owned(),
            });
        }
    };
    cfg.alpn_protocols = match version {
        HttpVersion::Auto => vec![b"h2".to_vec(), b"http/1.1".to_vec()],
        HttpVersion::Http1 => vec![b"http/1.1".to_vec()],
        HttpVersion::Http2 => vec![b"h2".to_vec()],
    };
    Ok(cfg)
}

/// The client side for a TLS connection that carries no HTTP (blackbox's
/// `tcp` prober with `tls`): as `https://` targets have it, without ALPN.
///
/// # Errors
/// [`ServerTlsError`].
pub fn stream_client_config(files: &TlsFiles) -> Result<rustls::ClientConfig, ServerTlsError> {
    let mut cfg = client_config(files, HttpVersion::Auto)?;
    cfg.alpn_protocols.clear();
    Ok(cfg)
}

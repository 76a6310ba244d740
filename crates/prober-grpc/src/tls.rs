//! Certificates and keys for gRPC over TLS (rustls), both sides.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use std::sync::atomic::AtomicI64;

use tonic::transport::{Certificate, ClientTlsConfig, Identity, ServerTlsConfig};

/// A certificate or key file that cannot be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TlsError {
    /// The file cannot be read.
    #[error("reading {what} {path}")]
    Read {
        /// Which option named the file.
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The file holds no PEM block of the expected kind.
    #[error("{what} {path} holds no PEM {kind}")]
    NotPem {
        /// Which option named the file.
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// What was expected.
        kind: &'static str,
    },
    /// A client certificate without a key, or the other way round.
    #[error("--cert and --key must be given together")]
    HalfIdentity,
}

fn read_pem(what: &'static str, path: &Path, kind: &'static str) -> Result<Vec<u8>, TlsError> {
    let bytes = std::fs::read(path).map_err(|source| TlsError::Read {
        what,
        path: path.to_owned(),
        source,
    })?;
    let text = String::from_utf8_lossy(&bytes);
    let marker = format!("-----BEGIN {kind}");
    let any_key = kind == "PRIVATE KEY" && text.contains("PRIVATE KEY-----");
    if !text.contains(&marker) && !any_key {
        return Err(TlsError::NotPem {
            what,
            path: path.to_owned(),
            kind,
        });
    }
    Ok(bytes)
}

/// Server side: certificate chain and key, and optionally a CA whose client
/// certificates are required (mTLS).
#[derive(Debug, Clone)]
pub struct ServerTls {
    cert: Vec<u8>,
    key: Vec<u8>,
    client_ca: Option<Vec<u8>>,
}

impl ServerTls {
    /// Reads PEM files.
    ///
    /// # Errors
    /// A [`TlsError`] naming the file.
    pub fn from_files(cert: &Path, key: &Path, client_ca: Option<&Path>) -> Result<Self, TlsError> {
        Ok(Self {
            cert: read_pem("--tls-cert", cert, "CERTIFICATE")?,
            key: read_pem("--tls-key", key, "PRIVATE KEY")?,
            client_ca: client_ca
                .map(|p| read_pem("--tls-client-ca", p, "CERTIFICATE"))
                .transpose()?,
        })
    }

    /// From PEM bytes already in memory.
    pub fn from_pem(cert: Vec<u8>, key: Vec<u8>, client_ca: Option<Vec<u8>>) -> Self {
        Self {
            cert,
            key,
            client_ca,
        }
    }

    pub(crate) fn into_config(self) -> ServerTlsConfig {
        let mut cfg = ServerTlsConfig::new().identity(Identity::from_pem(self.cert, self.key));
        if let Some(ca) = self.client_ca {
            cfg = cfg.client_ca_root(Certificate::from_pem(ca));
        }
        cfg
    }
}

/// Client side: which CA to trust (else the server certificate must chain
/// to one given with `ca`), an optional client identity for mTLS, the name to
/// verify, or no verification at all.
#[derive(Debug, Clone, Default)]
pub struct ClientTls {
    ca: Option<Vec<u8>>,
    roots: prober_core::protocol::Roots,
    identity: Option<(Vec<u8>, Vec<u8>)>,
    server_name: Option<String>,
    insecure: bool,
}

impl ClientTls {
    /// Reads PEM files; `cert` and `key` go together.
    ///
    /// # Errors
    /// A [`TlsError`] naming the file.
    pub fn from_files(
        ca: Option<&Path>,
        cert: Option<&Path>,
        key: Option<&Path>,
        server_name: Option<String>,
        insecure: bool,
    ) -> Result<Self, TlsError> {
        let identity = match (cert, key) {
            (Some(c), Some(k)) => Some((
                read_pem("--cert", c, "CERTIFICATE")?,
                read_pem("--key", k, "PRIVATE KEY")?,
            )),
            (None, None) => None,
            _ => return Err(TlsError::HalfIdentity),
        };
        let ca = ca.map(|p| read_pem("--ca", p, "CERTIFICATE")).transpose()?;
        Ok(Self {
            ca,
            roots: prober_core::protocol::Roots::default(),
            identity,
            server_name,
            insecure,
        })
    }

    /// The roots used without a CA file (`--ca-roots`).
    #[must_use]
    pub fn with_roots(mut self, roots: prober_core::protocol::Roots) -> Self {
        self.roots = roots;
        self
    }

    /// From PEM bytes already in memory.
    pub fn from_pem(
        ca: Option<Vec<u8>>,
        identity: Option<(Vec<u8>, Vec<u8>)>,
        server_name: Option<String>,
    ) -> Self {
        Self {
            ca,
            roots: prober_core::protocol::Roots::default(),
            identity,
            server_name,
            insecure: false,
        }
    }

    /// Whether a client certificate is configured (mTLS).
    pub fn has_identity(&self) -> bool {
        self.identity.is_some()
    }

    /// Skips verification of the server certificate. Unsafe: anyone on the
    /// path can impersonate the server.
    #[must_use]
    pub fn insecure(mut self, yes: bool) -> Self {
        self.insecure = yes;
        self
    }

    /// Sets up TLS on `endpoint`; the server certificate's expiry goes to
    /// `not_after` at each handshake.
    pub(crate) fn apply(
        &self,
        endpoint: tonic::transport::Endpoint,
        host: &str,
        not_after: Arc<AtomicI64>,
    ) -> Result<tonic::transport::Endpoint, Box<dyn std::error::Error + Send + Sync>> {
        let mut cfg = ClientTlsConfig::new()
            .domain_name(self.server_name.clone().unwrap_or_else(|| host.to_owned()));
        if let Some((cert, key)) = &self.identity {
            cfg = cfg.identity(Identity::from_pem(cert, key));
        }
        // The roots are the verifier's: tonic hands a custom verifier the
        // whole check (and does not give the peer's certificate back).
        let verifier = prober_net::tls::ExpiryRecorder::for_roots(
            self.ca.as_deref(),
            self.roots,
            self.insecure,
            not_after,
        )?;
        Ok(endpoint.tls_config_with_verifier(cfg, Arc::new(verifier))?)
    }
}

//! TLS helpers shared by the protocols over TLS (`grpcs://`, `https://`).

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};

/// Accepts any server certificate (`--insecure`). Signatures are still
/// checked, so the handshake is well formed; the identity is not.
#[derive(Debug)]
pub struct NoVerification(Arc<rustls::crypto::CryptoProvider>);

impl NoVerification {
    /// A verifier that accepts any certificate.
    pub fn new() -> Self {
        Self(Arc::new(rustls::crypto::ring::default_provider()))
    }
}

impl Default for NoVerification {
    fn default() -> Self {
        Self::new()
    }
}

impl ServerCertVerifier for NoVerification {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// When a certificate expires, in Unix seconds.
pub fn not_after(cert: &CertificateDer<'_>) -> Option<i64> {
    let (_, cert) = x509_parser::parse_x509_certificate(cert.as_ref()).ok()?;
    Some(cert.validity().not_after.timestamp())
}

/// Checks a server's certificate as `inner` does, and keeps the expiry of
/// the last leaf certificate it was shown (for
/// `prober_tls_cert_expiry_timestamp_seconds`), for TLS stacks that do not
/// hand the peer's certificates back (tonic's).
#[derive(Debug)]
pub struct ExpiryRecorder {
    inner: Arc<dyn ServerCertVerifier>,
    not_after: Arc<AtomicI64>,
}

impl ExpiryRecorder {
    /// Wraps `inner`; the expiry goes to `not_after` (`i64::MIN`: none yet).
    pub fn new(inner: Arc<dyn ServerCertVerifier>, not_after: Arc<AtomicI64>) -> Self {
        Self { inner, not_after }
    }

    /// A verifier for roots from `ca_pem` (else [`default_roots`]), or
    /// none at all when `insecure`, wrapped.
    ///
    /// # Errors
    /// A CA file that holds no usable certificate.
    pub fn for_roots(
        ca_pem: Option<&[u8]>,
        which: prober_core::protocol::Roots,
        insecure: bool,
        not_after: Arc<AtomicI64>,
    ) -> Result<Self, rustls::Error> {
        let inner: Arc<dyn ServerCertVerifier> = if insecure {
            Arc::new(NoVerification::new())
        } else {
            use rustls::pki_types::pem::PemObject as _;
            let ca = ca_pem
                .map(|pem| {
                    CertificateDer::pem_slice_iter(pem)
                        .collect::<Result<Vec<_>, _>>()
                        .map_err(|e| rustls::Error::General(e.to_string()))
                })
                .transpose()?;
            let roots = root_store(ca, which)?;
            rustls::client::WebPkiServerVerifier::builder_with_provider(
                Arc::new(roots),
                Arc::new(rustls::crypto::ring::default_provider()),
            )
            .build()
            .map_err(|e| rustls::Error::General(e.to_string()))?
        };
        Ok(Self::new(inner, not_after))
    }
}

impl ServerCertVerifier for ExpiryRecorder {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        if let Some(t) = not_after(end_entity) {
            self.not_after.store(t, Ordering::Relaxed);
        }
        self.inner
            .verify_server_cert(end_entity, intermediates, server_name, ocsp, now)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}

/// The roots a server must chain to: `ca`'s certificates (`--ca`) where
/// given, else [`default_roots`] as `which` says (`--ca-roots`).
///
/// # Errors
/// A certificate rustls cannot use as a root.
pub fn root_store(
    ca: Option<Vec<CertificateDer<'static>>>,
    which: prober_core::protocol::Roots,
) -> Result<rustls::RootCertStore, rustls::Error> {
    let Some(ca) = ca else {
        return Ok(rustls::RootCertStore::clone(&default_roots(which)));
    };
    let mut roots = rustls::RootCertStore::empty();
    for c in ca {
        roots.add(c)?;
    }
    Ok(roots)
}

/// The roots a server certificate must chain to without `--ca`: the
/// system's trust store (read once; a private CA installed there counts),
/// or the Mozilla roots built into prober when asked for, or when the
/// store yields no certificate (said once in the log).
pub fn default_roots(which: prober_core::protocol::Roots) -> Arc<rustls::RootCertStore> {
    use prober_core::protocol::Roots;
    static SYSTEM: std::sync::OnceLock<Arc<rustls::RootCertStore>> = std::sync::OnceLock::new();
    static MOZILLA: std::sync::OnceLock<Arc<rustls::RootCertStore>> = std::sync::OnceLock::new();
    let mozilla = || {
        Arc::clone(MOZILLA.get_or_init(|| {
            let mut roots = rustls::RootCertStore::empty();
            roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
            Arc::new(roots)
        }))
    };
    match which {
        Roots::Mozilla => mozilla(),
        Roots::System => Arc::clone(SYSTEM.get_or_init(|| {
            let found = rustls_native_certs::load_native_certs();
            let mut roots = rustls::RootCertStore::empty();
            let (added, _) = roots.add_parsable_certificates(found.certs);
            if added == 0 {
                tracing::warn!(
                    errors = found.errors.len(),
                    "the system's trust store has no usable certificate: using the Mozilla roots built into prober"
                );
                return mozilla();
            }
            Arc::new(roots)
        })),
    }
}

/// The certificates of a PEM file (`--tls-cert`, `--ca`, a web config's
/// `cert_file`); the error says why, and the caller names the file.
///
/// # Errors
/// A file that cannot be read or parsed, or that holds no certificate.
pub fn pem_certs(path: &std::path::Path) -> Result<Vec<CertificateDer<'static>>, String> {
    use rustls::pki_types::pem::PemObject as _;
    let certs = CertificateDer::pem_file_iter(path)
        .and_then(Iterator::collect::<Result<Vec<_>, _>>)
        .map_err(|e| e.to_string())?;
    if certs.is_empty() {
        return Err("holds no PEM CERTIFICATE".to_owned());
    }
    Ok(certs)
}

/// The private key of a PEM file; the error says why.
///
/// # Errors
/// A file that cannot be read or holds no key.
pub fn pem_key(
    path: &std::path::Path,
) -> Result<rustls::pki_types::PrivateKeyDer<'static>, String> {
    use rustls::pki_types::pem::PemObject as _;
    rustls::pki_types::PrivateKeyDer::from_pem_file(path).map_err(|e| e.to_string())
}

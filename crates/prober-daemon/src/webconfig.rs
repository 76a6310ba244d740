//! TLS on the metrics listener, configured in the file format Prometheus
//! exporters share (the exporter-toolkit "web config":
//! `tls_server_config` with `cert_file`, `key_file`, `client_ca_file` and
//! `client_auth_type`), so Prometheus scrapes `/metrics` and `/probe` over
//! TLS or mutual TLS as it scrapes blackbox_exporter or node_exporter.
//! What the file says that prober cannot do refuses it whole: a web
//! config half honoured would leave a port less protected than its owner
//! believes.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;
use tokio::net::TcpListener;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct WebYaml {
    tls_server_config: Option<TlsServerYaml>,
    http_server_config: Option<serde_norway::Value>,
    basic_auth_users: Option<serde_norway::Value>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct TlsServerYaml {
    cert_file: Option<PathBuf>,
    key_file: Option<PathBuf>,
    client_auth_type: Option<String>,
    client_ca_file: Option<PathBuf>,
    min_version: Option<String>,
    max_version: Option<String>,
    cipher_suites: Option<Vec<String>>,
    prefer_server_cipher_suites: Option<bool>,
    curve_preferences: Option<Vec<String>>,
    client_allowed_sans: Option<Vec<String>>,
}

/// A web config's TLS, ready to accept with.
#[derive(Clone)]
pub(crate) struct WebTls {
    acceptor: tokio_rustls::TlsAcceptor,
    /// Client certificates are required (mutual TLS).
    pub(crate) mutual: bool,
}

impl std::fmt::Debug for WebTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WebTls")
            .field("mutual", &self.mutual)
            .finish_non_exhaustive()
    }
}

/// Reads a web config file; `None` when it asks for no TLS.
///
/// # Errors
/// One line: the file, the key and why (an unknown key, a setting prober
/// does not implement, a certificate or key that cannot be used).
pub(crate) fn load(path: &Path) -> Result<Option<WebTls>, String> {
    let at = |e: String| format!("web config {}: {e}", path.display());
    let text = std::fs::read_to_string(path).map_err(|e| at(e.to_string()))?;
    let base = path.parent().unwrap_or_else(|| Path::new("."));
    parse(&text, base).map_err(at)
}

fn parse(text: &str, base: &Path) -> Result<Option<WebTls>, String> {
    let web: WebYaml = if text.trim().is_empty() {
        WebYaml::default()
    } else {
        serde_norway::from_str(text)
            .map_err(|e| crate::blackbox::config::one_line(&e.to_string()))?
    };
    if web.basic_auth_users.is_some() {
        return Err(
            "basic_auth_users: prober asks for credentials with [metrics] basic_auth or bearer_token_file instead"
                .into(),
        );
    }
    if web.http_server_config.is_some() {
        return Err("http_server_config: prober does not implement it".into());
    }
    let Some(t) = web.tls_server_config else {
        return Ok(None);
    };
    for (key, given) in [
        ("cipher_suites", t.cipher_suites.is_some()),
        ("curve_preferences", t.curve_preferences.is_some()),
        ("client_allowed_sans", t.client_allowed_sans.is_some()),
        (
            "prefer_server_cipher_suites",
            t.prefer_server_cipher_suites.is_some(),
        ),
    ] {
        if given {
            return Err(format!(
                "tls_server_config.{key}: prober does not implement it (rustls chooses safe suites and curves)"
            ));
        }
    }
    let (Some(cert), Some(key)) = (&t.cert_file, &t.key_file) else {
        return Err("tls_server_config: cert_file and key_file are both required".into());
    };
    let versions = versions(t.min_version.as_deref(), t.max_version.as_deref())?;
    let auth = t.client_auth_type.as_deref().unwrap_or("NoClientCert");
    let mutual = match (auth, &t.client_ca_file) {
        ("NoClientCert", None) => false,
        ("NoClientCert", Some(_)) => {
            return Err(
                "tls_server_config: client_ca_file is given without a client_auth_type that checks client certificates (RequireAndVerifyClientCert or VerifyClientCertIfGiven)"
                    .into(),
            );
        }
        ("RequireAndVerifyClientCert" | "VerifyClientCertIfGiven", Some(_)) => true,
        ("RequireAndVerifyClientCert" | "VerifyClientCertIfGiven", None) => {
            return Err(format!(
                "tls_server_config: client_auth_type {auth} needs client_ca_file"
            ));
        }
        ("RequestClientCert" | "RequireAnyClientCert", _) => {
            return Err(format!(
                "tls_server_config.client_auth_type {auth}: prober verifies every client certificate it asks for (RequireAndVerifyClientCert or VerifyClientCertIfGiven)"
            ));
        }
        (other, _) => {
            return Err(format!(
                "tls_server_config.client_auth_type {other:?}: write NoClientCert, RequireAndVerifyClientCert or VerifyClientCertIfGiven"
            ));
        }
    };
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ServerConfig::builder_with_provider(Arc::clone(&provider))
        .with_protocol_versions(&versions)
        .map_err(|e| format!("tls_server_config: {e}"))?;
    let builder = match &t.client_ca_file {
        Some(ca) if mutual => {
            let mut roots = rustls::RootCertStore::empty();
            for c in pem_certs(&base.join(ca), "client_ca_file")? {
                roots
                    .add(c)
                    .map_err(|e| format!("tls_server_config.client_ca_file: {e}"))?;
            }
            let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
                Arc::new(roots),
                provider,
            );
            let verifier = if auth == "VerifyClientCertIfGiven" {
                verifier.allow_unauthenticated()
            } else {
                verifier
            };
            let verifier = verifier
                .build()
                .map_err(|e| format!("tls_server_config.client_ca_file: {e}"))?;
            builder.with_client_cert_verifier(verifier)
        }
        _ => builder.with_no_client_auth(),
    };
    let chain = pem_certs(&base.join(cert), "cert_file")?;
    let key = prober_net::tls::pem_key(&base.join(key))
        .map_err(|e| format!("tls_server_config.key_file {}: {e}", key.display()))?;
    let mut cfg = builder
        .with_single_cert(chain, key)
        .map_err(|e| format!("tls_server_config: {e}"))?;
    // The listener speaks HTTP/1.1 (as its plaintext form does).
    cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Some(WebTls {
        acceptor: tokio_rustls::TlsAcceptor::from(Arc::new(cfg)),
        mutual: auth == "RequireAndVerifyClientCert",
    }))
}

fn pem_certs(
    path: &Path,
    key: &str,
) -> Result<Vec<rustls::pki_types::CertificateDer<'static>>, String> {
    prober_net::tls::pem_certs(path)
        .map_err(|e| format!("tls_server_config.{key} {}: {e}", path.display()))
}

fn versions(
    min: Option<&str>,
    max: Option<&str>,
) -> Result<Vec<&'static rustls::SupportedProtocolVersion>, String> {
    let rank = |v: &str, key: &str| match v {
        "TLS12" => Ok(12),
        "TLS13" => Ok(13),
        "TLS10" | "TLS11" => Err(format!(
            "tls_server_config.{key} {v}: prober speaks TLS 1.2 and 1.3 only"
        )),
        other => Err(format!(
            "tls_server_config.{key} {other:?}: write TLS12 or TLS13"
        )),
    };
    let lo = min.map_or(Ok(12), |v| rank(v, "min_version"))?;
    let hi = max.map_or(Ok(13), |v| rank(v, "max_version"))?;
    if lo > hi {
        return Err("tls_server_config: min_version is above max_version".into());
    }
    Ok(
        [(12, &rustls::version::TLS12), (13, &rustls::version::TLS13)]
            .into_iter()
            .filter(|(v, _)| (lo..=hi).contains(v))
            .map(|(_, p)| p)
            .collect(),
    )
}

/// TLS handshakes under way at once on the metrics listener, at most.
const HANDSHAKES: usize = 64;

/// How long a client has for its TLS handshake.
const HANDSHAKE: Duration = Duration::from_secs(10);

/// A listener whose connections are TLS: each handshake runs in a task of
/// its own, so a slow or silent client holds up no other.
pub(crate) struct TlsListener {
    local: std::net::SocketAddr,
    done: tokio::sync::mpsc::Receiver<(
        tokio_rustls::server::TlsStream<tokio::net::TcpStream>,
        std::net::SocketAddr,
    )>,
    _accepting: tokio_util::task::AbortOnDropHandle<()>,
}

impl TlsListener {
    pub(crate) fn new(listener: TcpListener, tls: &WebTls) -> std::io::Result<Self> {
        let local = listener.local_addr()?;
        let (tx, done) = tokio::sync::mpsc::channel(64);
        let acceptor = tls.acceptor.clone();
        // Handshakes under way at once, at most: a peer that opens silent
        // connections holds a few file descriptors, not all of them.
        let handshakes = Arc::new(tokio::sync::Semaphore::new(HANDSHAKES));
        let task = tokio::spawn(async move {
            loop {
                let Ok(permit) = Arc::clone(&handshakes).acquire_owned().await else {
                    return;
                };
                let Ok((tcp, peer)) = listener.accept().await else {
                    // EMFILE and the like: wait, as axum's own loop does.
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                };
                let (acceptor, tx) = (acceptor.clone(), tx.clone());
                tokio::spawn(async move {
                    let _permit = permit;
                    match tokio::time::timeout(HANDSHAKE, acceptor.accept(tcp)).await {
                        Ok(Ok(tls)) => {
                            let _ = tx.send((tls, peer)).await;
                        }
                        Ok(Err(e)) => tracing::debug!(%peer, "metrics TLS handshake failed: {e}"),
                        Err(_) => tracing::debug!(%peer, "metrics TLS handshake timed out"),
                    }
                });
            }
        });
        Ok(Self {
            local,
            done,
            _accepting: tokio_util::task::AbortOnDropHandle::new(task),
        })
    }
}

impl axum::serve::Listener for TlsListener {
    type Io = tokio_rustls::server::TlsStream<tokio::net::TcpStream>;
    type Addr = std::net::SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.done.recv().await {
            Some(conn) => conn,
            // The accepting task never ends while this lives.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        Ok(self.local)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_prober_cannot_do_refuses_the_file() {
        let base = Path::new("/nonexistent");
        for (text, want) in [
            ("basic_auth_users: {a: b}", "basic_auth_users"),
            ("http_server_config: {http2: false}", "http_server_config"),
            (
                "tls_server_config: {cert_file: a, key_file: b, cipher_suites: [x]}",
                "cipher_suites",
            ),
            ("tls_server_config: {cert_file: a}", "both required"),
            (
                "tls_server_config: {cert_file: a, key_file: b, min_version: TLS11}",
                "TLS 1.2 and 1.3",
            ),
            (
                "tls_server_config: {cert_file: a, key_file: b, client_ca_file: c}",
                "without a client_auth_type",
            ),
            (
                "tls_server_config: {cert_file: a, key_file: b, client_auth_type: RequireAndVerifyClientCert}",
                "needs client_ca_file",
            ),
            (
                "tls_server_config: {cert_file: a, key_file: b, client_auth_type: RequireAnyClientCert}",
                "verifies every",
            ),
            (
                "tls_server_config: {cert_file: a, key_file: b, bogus: 1}",
                "unknown field",
            ),
            (
                "tls_server_config: {cert_file: a, key_file: b}",
                "cert_file /nonexistent/a",
            ),
        ] {
            let e = parse(text, base).unwrap_err();
            assert!(e.contains(want), "{text}: {e}");
            assert!(!e.contains('\n'), "{e}");
        }
        assert!(parse("", base).unwrap().is_none());
    }
}

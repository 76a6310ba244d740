//! blackbox's `tcp` prober where it is more than a handshake: TLS from the
//! start, and the `query_response` dialogue (send a line, expect a line
//! that matches, `starttls`) with which blackbox users check SSH, SMTP,
//! IMAP, POP3 and IRC banners. prober's `tcp-connect://` times a handshake
//! from kernel stamps and says nothing after it, so the dialogue is here.

use std::net::SocketAddr;
use std::sync::Arc;

use tokio::io::{AsyncBufReadExt as _, AsyncRead, AsyncWrite, AsyncWriteExt as _, BufReader};
use tokio::net::TcpStream;

use super::config::Module;

/// What the dialogue found.
#[derive(Debug, Default)]
pub(crate) struct Dialogue {
    /// The dialogue went through.
    pub(crate) ok: bool,
    /// It failed because a line did not match an `expect`.
    pub(crate) regex_failed: bool,
    /// The server certificate's expiry (Unix seconds), where TLS was used.
    pub(crate) cert_not_after: Option<i64>,
    /// The TLS version, as blackbox names it (`TLS 1.3`).
    pub(crate) tls_version: Option<&'static str>,
    /// `probe_expect_info`-style: nothing; the log says what was read.
    pub(crate) log: Vec<String>,
}

trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}

/// Connects to `addr` (from the module's source address), upgrades to TLS
/// where the module says, and runs its dialogue; `host` is the TLS server
/// name unless the module names one.
pub(crate) async fn dialogue(module: &Module, host: &str, addr: SocketAddr) -> Dialogue {
    let mut d = Dialogue::default();
    match run(module, host, addr, &mut d).await {
        Ok(()) => d.ok = true,
        Err(e) => d.log.push(e),
    }
    d
}

async fn connect(module: &Module, addr: SocketAddr) -> Result<TcpStream, String> {
    let socket = if addr.is_ipv4() {
        tokio::net::TcpSocket::new_v4()
    } else {
        tokio::net::TcpSocket::new_v6()
    }
    .map_err(|e| format!("opening a socket: {e}"))?;
    if let Some(src) = module.marks.source {
        socket
            .bind(SocketAddr::new(src, 0))
            .map_err(|e| format!("binding {src}: {e}"))?;
    }
    socket
        .connect(addr)
        .await
        .map_err(|e| format!("Error dialing TCP: {e}"))
}

async fn tls(
    module: &Module,
    host: &str,
    io: Box<dyn Io>,
    d: &mut Dialogue,
) -> Result<Box<dyn Io>, String> {
    let cfg = prober_http::stream_client_config(&module.tls)
        .map_err(|e| format!("TLS configuration: {e}"))?;
    let name = module.tls.server_name.as_deref().unwrap_or(host).to_owned();
    let name = rustls::pki_types::ServerName::try_from(name.clone())
        .map_err(|e| format!("TLS server name {name}: {e}"))?;
    let stream = tokio_rustls::TlsConnector::from(Arc::new(cfg))
        .connect(name, io)
        .await
        .map_err(|e| format!("TLS handshake failed: {e}"))?;
    let (_, session) = stream.get_ref();
    d.cert_not_after = session
        .peer_certificates()
        .and_then(|c| c.first())
        .and_then(prober_net::tls::not_after);
    d.tls_version = session.protocol_version().map(|v| match v {
        rustls::ProtocolVersion::TLSv1_2 => "TLS 1.2",
        rustls::ProtocolVersion::TLSv1_3 => "TLS 1.3",
        _ => "unknown",
    });
    d.log.push("TLS handshake done".to_owned());
    Ok(Box::new(stream))
}

async fn run(
    module: &Module,
    host: &str,
    addr: SocketAddr,
    d: &mut Dialogue,
) -> Result<(), String> {
    let stream = connect(module, addr).await?;
    d.log.push(format!("Successfully dialed {addr}"));
    let mut io: Box<dyn Io> = Box::new(stream);
    if module.tls_first {
        io = tls(module, host, io, d).await?;
    }
    let mut reader = BufReader::new(io);
    for (i, step) in module.steps.iter().enumerate() {
        // `${1}`, `$name` in `send` are the groups of this step's own
        // match, as Go's Regexp.Expand gives them; without an `expect`
        // the line is sent as written.
        let matched = match &step.expect {
            Some(re) => Some((re, expect(&mut reader, re, i, d).await?)),
            None => None,
        };
        if let Some(send) = &step.send {
            let line = match &matched {
                Some((re, got)) => {
                    let mut out = Vec::new();
                    if let Some(caps) = re.captures(got) {
                        caps.expand(send.as_bytes(), &mut out);
                    }
                    out
                }
                None => send.as_bytes().to_vec(),
            };
            d.log
                .push(format!("Sending line: {}", String::from_utf8_lossy(&line)));
            let w = reader.get_mut();
            w.write_all(&line)
                .await
                .and(w.write_all(b"\n").await)
                .map_err(|e| format!("Failed to send a line: {e}"))?;
        }
        if step.starttls {
            // Anything the server sent before the upgrade and that was read
            // ahead would be lost: blackbox reads line by line too.
            let io = reader.into_inner();
            reader = BufReader::new(tls(module, host, io, d).await?);
        }
    }
    Ok(())
}

/// The longest line read, as blackbox's scanner has it (64 KiB).
const MAX_LINE: usize = 64 * 1024;

/// Lines read kept in the probe's log, at most.
const MAX_LOGGED: usize = 100;

/// Reads lines until one matches `re` (as blackbox's scanner does),
/// returning it.
async fn expect(
    reader: &mut BufReader<Box<dyn Io>>,
    re: &regex::bytes::Regex,
    step: usize,
    d: &mut Dialogue,
) -> Result<Vec<u8>, String> {
    use tokio::io::AsyncReadExt as _;
    let mut line = Vec::new();
    loop {
        line.clear();
        let n = (&mut *reader)
            .take(MAX_LINE as u64 + 1)
            .read_until(b'\n', &mut line)
            .await
            .map_err(|e| format!("Error reading from connection: {e}"))?;
        if line.len() > MAX_LINE {
            return Err(format!(
                "Error reading from connection: a line longer than {MAX_LINE} bytes (token too long)"
            ));
        }
        if n == 0 {
            d.regex_failed = true;
            return Err(format!(
                "Regexp did not match (step {step}, expect {:?}): the connection closed",
                re.as_str()
            ));
        }
        while line.last().is_some_and(|b| *b == b'\n' || *b == b'\r') {
            line.pop();
        }
        if d.log.len() < MAX_LOGGED {
            d.log
                .push(format!("Read line: {}", String::from_utf8_lossy(&line)));
        }
        if re.is_match(&line) {
            d.log.push(format!("Regexp matched: {}", re.as_str()));
            return Ok(line);
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn groups_expand_as_go_s_regexp_expand_does() {
        let re = regex::bytes::Regex::new("^PING :(?P<t>[^ ]+)").unwrap();
        let caps = re.captures(b"PING :abc").unwrap();
        for (send, want) in [
            ("PONG ${1}", "PONG abc"),
            ("PONG $t", "PONG abc"),
            ("x ${9} y", "x  y"),
            ("plain", "plain"),
        ] {
            let mut out = Vec::new();
            caps.expand(send.as_bytes(), &mut out);
            assert_eq!(String::from_utf8_lossy(&out), want, "{send}");
        }
    }
}

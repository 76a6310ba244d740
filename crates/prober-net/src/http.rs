//! What an HTTP probe sends and what it accepts as a valid response: the
//! options of every HTTP version's targets (`http://`, `h2c://`,
//! `https://` in prober-http, `h3://` in prober-quic), so they live in the
//! layer both share.

use bytes::Bytes;
use http::{HeaderName, HeaderValue, Method};
use regex::bytes::Regex;

/// An option value that cannot be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OptionsError {
    /// A status list entry that is not `200`, `2xx` or `200-299`.
    #[error("status {0:?}: write a code (200), a class (2xx) or a range (200-299)")]
    Status(String),
    /// A method that HTTP does not allow.
    #[error("method {0:?} is not a valid HTTP method")]
    Method(String),
    /// A header that is not `Name: value`.
    #[error("header {0:?}: write it as 'Name: value'")]
    Header(String),
    /// The request body file cannot be read.
    #[error("reading the body file {path}: {source}")]
    BodyFile {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// A body given both as text and as a file.
    #[error("the body is given twice: give body (--data) or body_file (--data-file)")]
    Bodies,
    /// `http2` and `http1_1` together.
    #[error("HTTP/2 only and HTTP/1.1 only exclude each other")]
    Versions,
    /// A regular expression that does not compile.
    #[error("regex {text:?}: {why}")]
    Regex {
        /// The expression.
        text: String,
        /// Why it does not compile.
        why: String,
    },
}

/// Which HTTP version to speak.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum HttpVersion {
    /// `http://`: HTTP/1.1; `https://`: what ALPN settles (h2 preferred).
    #[default]
    Auto,
    /// HTTP/1.1 only (ALPN offers only `http/1.1`).
    Http1,
    /// HTTP/2 only: with prior knowledge (h2c) over plain TCP, ALPN `h2`
    /// over TLS.
    Http2,
}

/// Status codes accepted as valid: codes, classes (`2xx`) and ranges.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StatusSet {
    ranges: Vec<(u16, u16)>,
    text: String,
}

impl Default for StatusSet {
    /// Any 2xx, as blackbox_exporter and Cloudprober accept by default.
    fn default() -> Self {
        Self {
            ranges: vec![(200, 299)],
            text: "2xx".to_owned(),
        }
    }
}

impl StatusSet {
    /// Parses `200,204`, `2xx,3xx`, `200-399`.
    ///
    /// # Errors
    /// [`OptionsError::Status`] for an entry that is none of these.
    pub fn parse(text: &str) -> Result<Self, OptionsError> {
        let mut ranges = Vec::new();
        for item in text.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let bad = || OptionsError::Status(item.to_owned());
            let code = |s: &str| {
                s.parse::<u16>()
                    .ok()
                    .filter(|c| (100..=599).contains(c))
                    .ok_or_else(bad)
            };
            let range =
                if let Some(class) = item.strip_suffix("xx").or_else(|| item.strip_suffix("XX")) {
                    let c = class.parse::<u16>().ok().filter(|c| (1..=5).contains(c));
                    let c = c.ok_or_else(bad)?;
                    (c * 100, c * 100 + 99)
                } else if let Some((a, b)) = item.split_once('-') {
                    let (a, b) = (code(a.trim())?, code(b.trim())?);
                    if a > b {
                        return Err(bad());
                    }
                    (a, b)
                } else {
                    let c = code(item)?;
                    (c, c)
                };
            ranges.push(range);
        }
        if ranges.is_empty() {
            return Err(OptionsError::Status(text.to_owned()));
        }
        Ok(Self {
            ranges,
            text: text.to_owned(),
        })
    }

    /// True when `code` is accepted.
    pub fn accepts(&self, code: u16) -> bool {
        self.ranges.iter().any(|(a, b)| (*a..=*b).contains(&code))
    }
}

impl std::fmt::Display for StatusSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.text)
    }
}

/// A header the response must have, and optionally a regex its value
/// must match.
#[derive(Debug, Clone)]
pub struct HeaderCheck {
    /// The header.
    pub name: HeaderName,
    /// The regex its value must match, if any.
    pub value: Option<Regex>,
}

impl HeaderCheck {
    /// Parses `Name` or `Name: REGEX`.
    ///
    /// # Errors
    /// A bad header name or regex.
    pub fn parse(text: &str) -> Result<Self, OptionsError> {
        let (name, value) = match text.split_once(':') {
            Some((n, v)) => (n.trim(), Some(v.trim())),
            None => (text.trim(), None),
        };
        let name = HeaderName::from_bytes(name.as_bytes())
            .map_err(|_| OptionsError::Header(text.to_owned()))?;
        let value = value
            .filter(|v| !v.is_empty())
            .map(body_regex)
            .transpose()?;
        Ok(Self { name, value })
    }
}

/// Compiles a regex for response bodies (matched on bytes, so a body
/// need not be UTF-8).
///
/// # Errors
/// [`OptionsError::Regex`].
pub fn body_regex(text: &str) -> Result<Regex, OptionsError> {
    Regex::new(text).map_err(|e| OptionsError::Regex {
        text: text.to_owned(),
        why: e.to_string(),
    })
}

/// The most body bytes a probe reads by default (`--max-body`).
pub const DEFAULT_MAX_BODY: usize = 1 << 20;

/// Everything an HTTP probe sends and checks. `prober run` fills it from
/// its options, the daemon from a job's `[job.http]` table.
#[derive(Debug, Clone)]
pub struct HttpOptions {
    /// The request method (`GET`).
    pub method: Method,
    /// The request body.
    pub body: Bytes,
    /// Extra request headers.
    pub headers: Vec<(HeaderName, HeaderValue)>,
    /// Which HTTP version to speak.
    pub version: HttpVersion,
    /// Every probe opens its own connection (resolve, connect, TLS,
    /// request), as blackbox_exporter does; by default one connection is
    /// kept and reused, as a browser or a load balancer's health check.
    pub new_connection: bool,
    /// Status codes that count as valid (any 2xx).
    pub status: StatusSet,
    /// A regex the body must match.
    pub body_match: Option<Regex>,
    /// A regex the body must not match.
    pub body_reject: Option<Regex>,
    /// Headers the response must have.
    pub require_headers: Vec<HeaderCheck>,
    /// The most body bytes read; a larger body is an error (`too_large`)
    /// and its connection is closed (1 MiB).
    pub max_body: usize,
    /// Redirects followed (0: a 3xx is the response).
    pub follow: u8,
}

impl Default for HttpOptions {
    fn default() -> Self {
        Self {
            method: Method::GET,
            body: Bytes::new(),
            headers: Vec::new(),
            version: HttpVersion::Auto,
            new_connection: false,
            status: StatusSet::default(),
            body_match: None,
            body_reject: None,
            require_headers: Vec::new(),
            max_body: DEFAULT_MAX_BODY,
            follow: 0,
        }
    }
}

impl HttpOptions {
    /// Parses a method name.
    ///
    /// # Errors
    /// [`OptionsError::Method`].
    pub fn parse_method(text: &str) -> Result<Method, OptionsError> {
        Method::from_bytes(text.to_ascii_uppercase().as_bytes())
            .map_err(|_| OptionsError::Method(text.to_owned()))
    }

    /// Checks a response as these options say: its status, the headers it
    /// must have, and the body's regexes; a failure is of kind `status` or
    /// `content`, as every HTTP version reports it.
    ///
    /// # Errors
    /// The first check that failed.
    pub fn check(
        &self,
        code: u16,
        headers: &http::HeaderMap,
        body: &[u8],
    ) -> Result<(), prober_core::ProbeError> {
        use prober_core::{ErrorKind, ProbeError};
        if !self.status.accepts(code) {
            return Err(ProbeError::new(
                ErrorKind::Status,
                format!("status {code}, expected {}", self.status),
            ));
        }
        for check in &self.require_headers {
            let Some(v) = headers.get(&check.name) else {
                return Err(ProbeError::new(
                    ErrorKind::Content,
                    format!("no {} header", check.name),
                ));
            };
            if let Some(re) = &check.value
                && !re.is_match(v.as_bytes())
            {
                return Err(ProbeError::new(
                    ErrorKind::Content,
                    format!("header {} does not match {}", check.name, re.as_str()),
                ));
            }
        }
        if let Some(re) = &self.body_match
            && !re.is_match(body)
        {
            return Err(ProbeError::new(
                ErrorKind::Content,
                format!("body does not match {}", re.as_str()),
            ));
        }
        if let Some(re) = &self.body_reject
            && re.is_match(body)
        {
            return Err(ProbeError::new(
                ErrorKind::Content,
                format!("body matches {}", re.as_str()),
            ));
        }
        Ok(())
    }

    /// Parses a request header `Name: value`.
    ///
    /// # Errors
    /// [`OptionsError::Header`].
    pub fn parse_header(text: &str) -> Result<(HeaderName, HeaderValue), OptionsError> {
        let bad = || OptionsError::Header(text.to_owned());
        let (n, v) = text.split_once(':').ok_or_else(bad)?;
        let name = HeaderName::from_bytes(n.trim().as_bytes()).map_err(|_| bad())?;
        let value = HeaderValue::from_str(v.trim()).map_err(|_| bad())?;
        Ok((name, value))
    }
}

/// The HTTP options as text: `prober run`'s and `prober sweep`'s flags
/// (this type is their clap definition, flattened into both) and a daemon
/// job's `[job.http]` table (its serde definition) give the same fields;
/// [`HttpSpec::build`] checks them and makes the [`HttpOptions`]. What is
/// not given keeps its default.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Deserialize, clap::Args)]
#[serde(default, deny_unknown_fields)]
pub struct HttpSpec {
    /// HTTP method of http(s):// requests [default: GET].
    #[arg(long, value_name = "METHOD", help_heading = "HTTP")]
    pub method: Option<String>,

    /// Send this file's bytes as the HTTP request body.
    #[arg(long = "data-file", value_name = "FILE", help_heading = "HTTP")]
    pub body_file: Option<std::path::PathBuf>,

    /// Send this text as the HTTP request body (as curl's --data).
    #[arg(
        long = "data",
        value_name = "TEXT",
        conflicts_with = "body_file",
        help_heading = "HTTP"
    )]
    pub body: Option<String>,

    /// An extra HTTP request header, 'Name: value' (repeatable).
    #[arg(
        short = 'H',
        long = "header",
        value_name = "HEADER",
        help_heading = "HTTP"
    )]
    pub headers: Vec<String>,

    /// HTTP/2 only: with prior knowledge (h2c) on http://, ALPN h2 on
    /// https://.
    #[arg(long, conflicts_with = "http1_1", help_heading = "HTTP")]
    pub http2: bool,

    /// HTTP/1.1 only (https:// offers only http/1.1 in ALPN).
    #[arg(long = "http1.1", help_heading = "HTTP")]
    pub http1_1: bool,

    /// Open a new connection for every HTTP probe (resolve, connect, TLS,
    /// request), as blackbox_exporter does; by default one is kept.
    #[arg(long, help_heading = "HTTP")]
    pub new_connection: bool,

    /// HTTP status codes that count as valid: codes, classes and ranges,
    /// e.g. 200,3xx,400-404. Any other is an error of kind status [default: 2xx].
    #[arg(long, value_name = "LIST", help_heading = "HTTP")]
    pub expect_status: Option<String>,

    /// A regex the HTTP body must match (else an error of kind content).
    #[arg(long, value_name = "REGEX", help_heading = "HTTP")]
    pub expect_body: Option<String>,

    /// A regex the HTTP body must not match.
    #[arg(long, value_name = "REGEX", help_heading = "HTTP")]
    pub reject_body: Option<String>,

    /// A header the HTTP response must have, 'Name' or 'Name: REGEX'
    /// (repeatable).
    #[arg(long, value_name = "HEADER", help_heading = "HTTP")]
    pub expect_header: Vec<String>,

    /// Most HTTP body bytes read; a larger body is an error of kind
    /// too_large and its connection is closed [default: 1048576].
    #[arg(long, value_name = "BYTES", help_heading = "HTTP")]
    pub max_body: Option<usize>,

    /// Follow up to N HTTP redirects (by default a 3xx is the response).
    #[arg(long, value_name = "N", default_value_t = 0, help_heading = "HTTP")]
    pub follow: u8,
}

/// The HTTP flags, as messages name them.
pub const HTTP_FLAGS: &str = "An HTTP option (--method, --header, --expect-status, ...)";

crate::own_options!(
    HttpSpec,
    rebase = |s: &mut HttpSpec, base: &std::path::Path| {
        if let Some(file) = &mut s.body_file {
            *file = base.join(&*file); // an absolute path stays as it is
        }
    }
);

/// HTTP's own options: `--method`, `--header`, ... and a job's
/// `[job.http]`; the descriptors of every HTTP version point at it.
pub static HTTP_OPTIONS: crate::options::ProtocolOptions =
    crate::options::ProtocolOptions::of::<HttpSpec>("http", HTTP_FLAGS, "HTTP targets");

impl HttpSpec {
    /// Checks them and puts the [`HttpOptions`] where the builder finds
    /// them (see [`crate::options::OwnOptions::put`]).
    ///
    /// # Errors
    /// The first option that cannot be used.
    pub fn put_into(
        &self,
        store: &prober_core::shared::Shared,
        _size: Option<usize>,
        table: Option<&str>,
    ) -> Result<(), String> {
        let options = self.build().map_err(|e| match table {
            Some(t) => format!("{t}: {e}"),
            None => e.to_string(),
        })?;
        store.put(options);
        Ok(())
    }

    /// Checks the texts and makes the options.
    ///
    /// # Errors
    /// The first option that cannot be used, by name.
    pub fn build(&self) -> Result<HttpOptions, OptionsError> {
        let d = HttpOptions::default();
        Ok(HttpOptions {
            method: match &self.method {
                Some(m) => HttpOptions::parse_method(m)?,
                None => d.method,
            },
            body: match (&self.body, &self.body_file) {
                (Some(_), Some(_)) => return Err(OptionsError::Bodies),
                (Some(text), None) => Bytes::from(text.clone().into_bytes()),
                (None, Some(path)) => std::fs::read(path)
                    .map_err(|source| OptionsError::BodyFile {
                        path: path.display().to_string(),
                        source,
                    })?
                    .into(),
                (None, None) => d.body,
            },
            headers: self
                .headers
                .iter()
                .map(|h| HttpOptions::parse_header(h))
                .collect::<Result<_, _>>()?,
            version: match (self.http2, self.http1_1) {
                (true, true) => return Err(OptionsError::Versions),
                (true, false) => HttpVersion::Http2,
                (false, true) => HttpVersion::Http1,
                (false, false) => HttpVersion::Auto,
            },
            new_connection: self.new_connection,
            status: match &self.expect_status {
                Some(s) => StatusSet::parse(s)?,
                None => d.status,
            },
            body_match: self.expect_body.as_deref().map(body_regex).transpose()?,
            body_reject: self.reject_body.as_deref().map(body_regex).transpose()?,
            require_headers: self
                .expect_header
                .iter()
                .map(|h| HeaderCheck::parse(h))
                .collect::<Result<_, _>>()?,
            max_body: self.max_body.unwrap_or(d.max_body),
            follow: self.follow,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_sets_take_codes_classes_and_ranges() {
        let s = StatusSet::parse("2xx, 301,400-404").unwrap();
        assert!(s.accepts(204) && s.accepts(301) && s.accepts(404));
        assert!(!s.accepts(302) && !s.accepts(405) && !s.accepts(500));
        assert!(StatusSet::default().accepts(299));
        assert!(!StatusSet::default().accepts(300));
        for bad in ["", "abc", "6xx", "99", "404-400", "2x"] {
            assert!(StatusSet::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn header_checks_parse_with_and_without_a_value() {
        let h = HeaderCheck::parse("Content-Type: ^text/").unwrap();
        assert_eq!(h.name, "content-type");
        assert!(h.value.unwrap().is_match(b"text/html"));
        assert!(HeaderCheck::parse("X-Id").unwrap().value.is_none());
        assert!(HeaderCheck::parse("bad name: x").is_err());
        assert!(HeaderCheck::parse("X: (").is_err());
        assert!(HttpOptions::parse_header("X-A: 1").is_ok());
        assert!(HttpOptions::parse_header("novalue").is_err());
        assert_eq!(HttpOptions::parse_method("post").unwrap(), Method::POST);
    }
}

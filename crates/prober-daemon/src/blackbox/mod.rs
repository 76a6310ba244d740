//! A drop-in for blackbox_exporter: `GET /probe?target=…&module=…` on the
//! metrics listener, with modules from blackbox's own `blackbox.yml`, and
//! answers by blackbox's metric names (docs/blackbox.md).
//!
//! A scrape-time probe runs on the metrics listener's own thread and
//! runtime, never on the runtime that sends the scheduled probes, and with
//! sockets of its own (the ICMP ones included): `/probe` load does not
//! show in the daemon's measurements. At most [`MAX_PROBES`] run at once;
//! more are answered 503 at once.

pub(crate) mod access;
pub(crate) mod config;
mod probe;
mod tcp;

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use prober_core::Registry;
use prober_core::protocol::BuildEnv;

pub(crate) use access::Allowed;
pub(crate) use config::Modules;

/// Scrape-time probes under way at once, at most: a Prometheus with
/// thousands of blackbox targets spreads them over its scrape interval,
/// and a burst beyond this is refused (503, and Prometheus retries at the
/// next interval) rather than queued behind the others' timeouts.
pub(crate) const MAX_PROBES: usize = 64;

/// Taken off the scrape's timeout so that the answer reaches Prometheus
/// before it gives up (blackbox's `--timeout-offset`).
const TIMEOUT_OFFSET: Duration = Duration::from_millis(500);

/// The longest a scrape-time probe may take.
const MAX_TIMEOUT: Duration = Duration::from_secs(3600);

/// What `/probe` serves: the modules, reloadable.
#[derive(Debug)]
pub(crate) struct Blackbox {
    modules: RwLock<Arc<Modules>>,
    registry: &'static Registry,
    allowed: Allowed,
    permits: Arc<tokio::sync::Semaphore>,
    /// What scrape-time probes share (the ICMP sockets), apart from the
    /// scheduled probes'.
    env: BuildEnv,
}

/// An answer: status, content type, body.
pub(crate) type Answer = (axum::http::StatusCode, &'static str, String);

const TEXT: &str = "text/plain; charset=utf-8";
const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

impl Blackbox {
    pub(crate) fn new(modules: Modules, registry: &'static Registry, allowed: Allowed) -> Self {
        Self {
            modules: RwLock::new(Arc::new(modules)),
            registry,
            allowed,
            permits: Arc::new(tokio::sync::Semaphore::new(MAX_PROBES)),
            env: BuildEnv {
                // The client's send part, for the split among the extras.
                tx_stamps: true,
                ..BuildEnv::default()
            },
        }
    }

    /// The file the modules came from.
    pub(crate) fn path(&self) -> PathBuf {
        self.modules().path.clone()
    }

    fn modules(&self) -> Arc<Modules> {
        Arc::clone(
            &self
                .modules
                .read()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        )
    }

    /// Reads the file again (SIGHUP); a file that does not load leaves the
    /// modules as they were.
    ///
    /// # Errors
    /// Why it did not load.
    pub(crate) fn reload(&self) -> Result<(), String> {
        let modules = load(&self.path(), self.registry)?;
        *self
            .modules
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Arc::new(modules);
        Ok(())
    }

    /// Answers `/probe?QUERY`; `scrape_timeout` is Prometheus's
    /// `X-Prometheus-Scrape-Timeout-Seconds`.
    pub(crate) async fn answer(&self, query: Option<&str>, scrape_timeout: Option<&str>) -> Answer {
        use axum::http::StatusCode;
        let bad = |why: String| (StatusCode::BAD_REQUEST, TEXT, format!("{why}\n"));
        let (mut target, mut module, mut debug) = (None, None, false);
        for (k, v) in form_urlencoded::parse(query.unwrap_or("").as_bytes()) {
            match &*k {
                "target" => target = Some(v.into_owned()),
                "module" => module = Some(v.into_owned()),
                "debug" => debug = v == "true",
                _ => {}
            }
        }
        let Some(target) = target.filter(|t| !t.is_empty()) else {
            return bad("Target parameter is missing".to_owned());
        };
        // blackbox_exporter's default module.
        let name = module
            .filter(|m| !m.is_empty())
            .unwrap_or_else(|| "http_2xx".to_owned());
        let modules = self.modules();
        let Some(module) = modules.loaded.get(&name) else {
            return bad(match modules.refused.get(&name) {
                Some(why) => format!("Module {name:?} is not loaded: {why}"),
                None => format!("Unknown module {name:?}"),
            });
        };
        let timeout = match timeout(scrape_timeout, module.timeout) {
            Ok(t) => t,
            Err(why) => return bad(why),
        };
        let Ok(_permit) = Arc::clone(&self.permits).try_acquire_owned() else {
            return (
                StatusCode::SERVICE_UNAVAILABLE,
                TEXT,
                format!("{MAX_PROBES} probes are under way: try again\n"),
            );
        };
        let p = probe::probe(
            module,
            &target,
            timeout,
            self.registry,
            &self.env,
            &self.allowed,
        )
        .await;
        if let Some(why) = p.forbidden {
            tracing::debug!(target = %target, "/probe refused: {why}");
            return (StatusCode::FORBIDDEN, TEXT, format!("{why}\n"));
        }
        tracing::debug!(target = %target, module = %name, success = p.success, "/probe");
        let metrics = p.gauges.encode();
        if debug {
            let mut out = String::from("Logs for the probe:\n");
            for line in &p.log {
                out.push_str(line);
                out.push('\n');
            }
            out.push_str("\n\n\nMetrics that would have been returned:\n");
            out.push_str(&metrics);
            return (StatusCode::OK, TEXT, out);
        }
        (StatusCode::OK, OPENMETRICS, metrics)
    }
}

/// The probe's timeout as blackbox_exporter computes it: the scrape's
/// timeout (120 s without one) less [`TIMEOUT_OFFSET`], or the module's
/// where that is shorter.
fn timeout(header: Option<&str>, module: Duration) -> Result<Duration, String> {
    let scrape = match header {
        Some(h) => h
            .trim()
            .parse::<f64>()
            .ok()
            .filter(|s| s.is_finite() && *s >= 0.0)
            .ok_or_else(|| {
                format!("X-Prometheus-Scrape-Timeout-Seconds {h:?} is not a number of seconds")
            })?,
        None => 0.0,
    };
    let scrape = if scrape == 0.0 { 120.0 } else { scrape };
    let max = scrape - TIMEOUT_OFFSET.as_secs_f64();
    let module_s = module.as_secs_f64();
    let secs = if (module_s > 0.0 && module_s < max) || max < 0.0 {
        module_s
    } else {
        max
    };
    // A module without a timeout under a scrape shorter than the offset.
    let secs = if secs <= 0.0 {
        TIMEOUT_OFFSET.as_secs_f64()
    } else {
        secs
    };
    // No scrape waits an hour: a larger value (a caller's error) would
    // hold a permit for as long, and does not fit a Duration far enough.
    Ok(Duration::try_from_secs_f64(secs).map_or(MAX_TIMEOUT, |d| d.min(MAX_TIMEOUT)))
}

/// Says, one line each, which modules were not loaded and why.
pub(crate) fn log_refused(modules: &Modules) {
    for (name, why) in &modules.refused {
        tracing::warn!("blackbox module {name} is not loaded: {why}");
    }
}

/// Loads `path` for the daemon.
///
/// # Errors
/// Why it does not load, in one line.
pub(crate) fn load(path: &Path, registry: &'static Registry) -> Result<Modules, String> {
    let modules = config::load(path, registry)?;
    log_refused(&modules);
    Ok(modules)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timeouts_follow_blackboxs_rule() {
        let s =
            |h: Option<&str>, m: u64| timeout(h, Duration::from_millis(m)).unwrap().as_secs_f64();
        assert!((s(None, 0) - 119.5).abs() < 1e-9);
        assert!((s(Some("10"), 0) - 9.5).abs() < 1e-9);
        assert!((s(Some("10"), 5000) - 5.0).abs() < 1e-9);
        assert!((s(Some("10"), 20_000) - 9.5).abs() < 1e-9);
        assert!((s(Some("0.2"), 3000) - 3.0).abs() < 1e-9);
        assert!(timeout(Some("x"), Duration::ZERO).is_err());
        assert_eq!(timeout(Some("1e20"), Duration::ZERO).unwrap(), MAX_TIMEOUT);
        assert_eq!(timeout(Some("1e9"), Duration::ZERO).unwrap(), MAX_TIMEOUT);
        assert_eq!(timeout(Some("1e20"), Duration::ZERO).unwrap(), MAX_TIMEOUT);
    }
}

//! Prometheus metrics for the daemon: per-target counters and an RTT
//! histogram, rendered in the Prometheus text format (0.0.4) on `/metrics`.
//!
//! The exposition is written here rather than with a client library because
//! series must appear and disappear with reloads, and late and duplicate
//! counts are read from the probes at scrape time.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::{Arc, Mutex, PoisonError};

use prober_core::{Outcome, Sample};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::probes::AnomalyFn;

/// Upper bounds of the RTT histogram buckets, in seconds: 25 µs to 10 s.
pub(crate) const RTT_BUCKETS: [f64; 18] = [
    0.000_025, 0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1,
    0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// The series of one target.
pub(crate) struct TargetMetrics {
    labels: String,
    sent: u64,
    ok: u64,
    timeout: u64,
    error: u64,
    buckets: [u64; RTT_BUCKETS.len()],
    rtt_sum: f64,
    anomalies: AnomalyFn,
}

/// A counter's name, help text and how to read it.
type CounterDef<T> = (&'static str, &'static str, fn(&T) -> u64);

/// Every target's series, shared by the collector (writes) and the HTTP
/// handler (reads).
#[derive(Default)]
pub(crate) struct Metrics {
    targets: BTreeMap<usize, TargetMetrics>,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics")
            .field("targets", &self.targets.len())
            .finish()
    }
}

fn escape(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

impl Metrics {
    /// Adds a target's series (all zero).
    pub(crate) fn add(
        &mut self,
        id: usize,
        job: &str,
        target: &str,
        protocol: &str,
        extra: &BTreeMap<String, String>,
        anomalies: AnomalyFn,
    ) {
        let mut labels = format!(
            "job=\"{}\",target=\"{}\",protocol=\"{}\"",
            escape(job),
            escape(target),
            escape(protocol)
        );
        for (k, v) in extra {
            let _ = write!(labels, ",{k}=\"{}\"", escape(v));
        }
        let m = TargetMetrics {
            labels,
            sent: 0,
            ok: 0,
            timeout: 0,
            error: 0,
            buckets: [0; RTT_BUCKETS.len()],
            rtt_sum: 0.0,
            anomalies,
        };
        self.targets.insert(id, m);
    }

    /// Removes a target's series.
    pub(crate) fn remove(&mut self, id: usize) {
        self.targets.remove(&id);
    }

    /// Counts one finished probe.
    pub(crate) fn record(&mut self, id: usize, s: &Sample) {
        let Some(m) = self.targets.get_mut(&id) else {
            return;
        };
        m.sent += 1;
        match &s.outcome {
            Outcome::Ok(r) => {
                m.ok += 1;
                let secs = r.rtt().as_secs_f64();
                m.rtt_sum += secs;
                if let Some(i) = RTT_BUCKETS.iter().position(|le| secs <= *le) {
                    m.buckets[i] += 1;
                }
            }
            Outcome::Timeout => m.timeout += 1,
            _ => m.error += 1,
        }
    }

    /// The text exposition of every series.
    pub(crate) fn render(&self) -> String {
        let mut out = String::with_capacity(256 + self.targets.len() * 2048);
        let counters: [CounterDef<TargetMetrics>; 4] = [
            (
                "prober_probes_sent_total",
                "Probes sent (ok + timeout + error).",
                |m| m.sent,
            ),
            (
                "prober_probes_ok_total",
                "Probes answered within the timeout.",
                |m| m.ok,
            ),
            (
                "prober_probes_timeout_total",
                "Probes with no reply within the timeout.",
                |m| m.timeout,
            ),
            (
                "prober_probes_error_total",
                "Probes that failed (refused, unreachable, bad reply).",
                |m| m.error,
            ),
        ];
        for (name, help, get) in counters {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} counter");
            for m in self.targets.values() {
                let _ = writeln!(out, "{name}{{{}}} {}", m.labels, get(m));
            }
        }
        let anomalies: Vec<_> = self
            .targets
            .values()
            .map(|m| (m, (m.anomalies)()))
            .collect();
        let extra: [CounterDef<prober_core::Anomalies>; 2] = [
            (
                "prober_replies_late_total",
                "Replies that arrived after their probe timed out.",
                |a| a.late,
            ),
            (
                "prober_replies_duplicate_total",
                "Second and later replies to one probe.",
                |a| a.duplicate,
            ),
        ];
        for (name, help, get) in extra {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} counter");
            for (m, a) in &anomalies {
                let _ = writeln!(out, "{name}{{{}}} {}", m.labels, get(a));
            }
        }
        let name = "prober_rtt_seconds";
        let _ = writeln!(
            out,
            "# HELP {name} Round-trip time of answered probes.\n# TYPE {name} histogram"
        );
        for m in self.targets.values() {
            let mut cumulative = 0;
            for (le, n) in RTT_BUCKETS.iter().zip(m.buckets) {
                cumulative += n;
                let _ = writeln!(
                    out,
                    "{name}_bucket{{{},le=\"{le}\"}} {cumulative}",
                    m.labels
                );
            }
            let _ = writeln!(out, "{name}_bucket{{{},le=\"+Inf\"}} {}", m.labels, m.ok);
            let _ = writeln!(out, "{name}_sum{{{}}} {}", m.labels, m.rtt_sum);
            let _ = writeln!(out, "{name}_count{{{}}} {}", m.labels, m.ok);
        }
        out
    }
}

/// Shared handle to the metrics.
pub(crate) type SharedMetrics = Arc<Mutex<Metrics>>;

/// Locks the metrics, surviving a poisoned lock (the data are plain counters).
pub(crate) fn lock(m: &SharedMetrics) -> std::sync::MutexGuard<'_, Metrics> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Serves `/metrics` on `listener` until `stop` is cancelled.
pub(crate) async fn serve_metrics(
    listener: TcpListener,
    metrics: SharedMetrics,
    stop: CancellationToken,
) -> std::io::Result<()> {
    use axum::http::header::CONTENT_TYPE;
    let app = axum::Router::new()
        .route(
            "/metrics",
            axum::routing::get(move || {
                let body = lock(&metrics).render();
                async move {
                    (
                        [(CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")],
                        body,
                    )
                }
            }),
        )
        .route(
            "/",
            axum::routing::get(|| async { "prober daemon: metrics at /metrics\n" }),
        );
    axum::serve(listener, app)
        .with_graceful_shutdown(stop.cancelled_owned())
        .await
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use prober_core::Reply;
    use tokio::time::Instant;

    use super::*;

    fn sample(outcome: Outcome) -> Sample {
        let now = Instant::now();
        Sample {
            target: 0,
            seq: 0,
            scheduled: now,
            sent: now,
            outcome,
            bytes: 0,
        }
    }

    #[test]
    fn renders_counters_and_a_cumulative_histogram() {
        let mut m = Metrics::default();
        let labels = BTreeMap::from([("site".to_owned(), "lab \"1\"".to_owned())]);
        m.add(
            7,
            "j",
            "udp://h:1",
            "udp",
            &labels,
            Box::new(|| prober_core::Anomalies {
                late: 2,
                ..Default::default()
            }),
        );
        let now = Instant::now();
        for us in [30, 300, 3000] {
            let r = Reply {
                sent: now,
                received: now + Duration::from_micros(us),
                server_dwell: None,
                rx_wake: None,
                bytes: 64,
            };
            m.record(7, &sample(Outcome::Ok(r)));
        }
        m.record(7, &sample(Outcome::Timeout));
        let text = m.render();
        let l = r#"job="j",target="udp://h:1",protocol="udp",site="lab \"1\"""#;
        assert!(
            text.contains(&format!("prober_probes_sent_total{{{l}}} 4")),
            "{text}"
        );
        assert!(text.contains(&format!("prober_probes_timeout_total{{{l}}} 1")));
        assert!(text.contains(&format!("prober_replies_late_total{{{l}}} 2")));
        assert!(
            text.contains(&format!(
                "prober_rtt_seconds_bucket{{{l},le=\"0.00005\"}} 1"
            )),
            "{text}"
        );
        assert!(text.contains(&format!("prober_rtt_seconds_bucket{{{l},le=\"0.0005\"}} 2")));
        assert!(text.contains(&format!("prober_rtt_seconds_bucket{{{l},le=\"+Inf\"}} 3")));
        assert!(text.contains(&format!("prober_rtt_seconds_count{{{l}}} 3")));
        m.remove(7);
        assert!(!m.render().contains("udp://h:1"));
    }
}

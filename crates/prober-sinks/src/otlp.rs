//! OpenTelemetry metrics pushed over OTLP/gRPC, through the opentelemetry
//! SDK and its OTLP exporter: per target, exponential histograms of the RTT,
//! the latency from the scheduled time and the send lag, and counters of
//! probes by outcome and of errors by reason.
//!
//! Histograms are recorded as samples arrive. Counters are observable: the
//! SDK reads them at each export from the counts the core collector keeps
//! (copied here on every sample), so they equal the other sinks' exactly.
//! A target's series stop with it. The SDK's export runs on its own thread
//! every `interval`; an unreachable collector costs a failed export (logged
//! by the SDK at debug level), never a probe.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use opentelemetry::KeyValue;
use opentelemetry::metrics::{Histogram, MeterProvider as _, ObservableCounter};
use opentelemetry_otlp::WithExportConfig;
use opentelemetry_sdk::metrics::{
    Aggregation, Instrument, InstrumentKind, PeriodicReader, SdkMeterProvider, Stream, Temporality,
};
use prober_core::stats::Tally;
use prober_core::{Context, Outcome, Sample, Sink, Summary, TargetEntry};

/// Where and how often to push.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OtlpSettings {
    /// The collector's OTLP/gRPC endpoint, `http://host:4317`.
    pub endpoint: String,
    /// How often to export.
    pub interval: Duration,
    /// How long one export may take.
    pub timeout: Duration,
    /// Resource attributes (`service.name` is `prober`; `host.name` is
    /// this host).
    pub host: String,
}

/// Series the SDK can hold per instrument; its default (2,000) is below a
/// daemon's 10,000 targets.
const CARDINALITY: usize = 200_000;

/// Exponential buckets: at most 160, at the finest scale that fits (the
/// SDK lowers the scale as the range grows; 160 buckets hold 1 µs to 10 s
/// at scale 3, 9 % wide).
const MAX_BUCKETS: u32 = 160;

struct Series {
    attrs: Arc<[KeyValue]>,
    tally: Tally,
    /// When the target was removed: its final counts are still exported
    /// until [`OtlpSink::linger`] has passed (and by the last export).
    gone: Option<std::time::Instant>,
}

type Shared = Arc<Mutex<BTreeMap<usize, Series>>>;

fn lock(s: &Shared) -> std::sync::MutexGuard<'_, BTreeMap<usize, Series>> {
    s.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The OTLP sink; [`OtlpSink::shutdown`] pushes a last export.
pub struct OtlpSink {
    /// The exporter's own runtime (one thread), so its gRPC connection
    /// runs whatever runtime, if any, feeds the sink; a current-thread
    /// daemon blocked in a final export would otherwise wait on itself.
    rt: Option<tokio::runtime::Runtime>,
    provider: SdkMeterProvider,
    series: Shared,
    rtt: Histogram<f64>,
    latency: Histogram<f64>,
    send_lag: Histogram<f64>,
    /// How long a removed target's counters are still exported: two
    /// export intervals and a timeout, so at least one push carries them.
    linger: Duration,
    /// Kept so their callbacks stay registered.
    _counters: Vec<ObservableCounter<u64>>,
}

impl std::fmt::Debug for OtlpSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OtlpSink")
            .field("targets", &lock(&self.series).len())
            .finish_non_exhaustive()
    }
}

/// A counter's name, description and how to read it.
type CounterDef = (&'static str, &'static str, fn(&Tally) -> u64);

impl OtlpSink {
    /// Starts the exporter.
    ///
    /// # Errors
    /// An endpoint the exporter refuses (not a URL), or no thread for it.
    pub fn new(settings: &OtlpSettings) -> Result<Self, String> {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("otlp")
            .enable_all()
            .build()
            .map_err(|e| format!("otlp: starting its thread: {e}"))?;
        let _in_rt = rt.enter();
        let exporter = opentelemetry_otlp::MetricExporter::builder()
            .with_tonic()
            .with_endpoint(settings.endpoint.clone())
            .with_timeout(settings.timeout)
            .with_temporality(Temporality::Cumulative)
            .build()
            .map_err(|e| format!("otlp endpoint {:?}: {e}", settings.endpoint))?;
        let reader = PeriodicReader::builder(exporter)
            .with_interval(settings.interval)
            .build();
        let resource = opentelemetry_sdk::Resource::builder()
            .with_service_name("prober")
            .with_attributes([
                KeyValue::new("host.name", settings.host.clone()),
                KeyValue::new("service.version", env!("CARGO_PKG_VERSION")),
            ])
            .build();
        let provider = SdkMeterProvider::builder()
            .with_reader(reader)
            .with_resource(resource)
            .with_view(|i: &Instrument| {
                let stream = Stream::builder().with_cardinality_limit(CARDINALITY);
                let stream = if i.kind() == InstrumentKind::Histogram {
                    stream.with_aggregation(Aggregation::Base2ExponentialHistogram {
                        max_size: MAX_BUCKETS,
                        max_scale: 20,
                        record_min_max: true,
                    })
                } else {
                    stream
                };
                stream.build().ok()
            })
            .build();
        let meter = provider.meter("prober");
        let histogram = |name: &'static str, what: &'static str| {
            meter
                .f64_histogram(name)
                .with_unit("s")
                .with_description(what)
                .build()
        };
        let series: Shared = Arc::default();
        let counters: [CounterDef; 4] = [
            (
                "prober.probes.sent",
                "Probes sent (ok + timeout + error)",
                |t| t.sent,
            ),
            (
                "prober.probes.ok",
                "Probes answered within the timeout",
                |t| t.ok,
            ),
            (
                "prober.probes.timeout",
                "Probes with no reply within the timeout",
                |t| t.timeout,
            ),
            (
                "prober.probes.error",
                "Probes that failed (refused, unreachable, bad reply)",
                |t| t.error,
            ),
        ];
        let mut observed: Vec<ObservableCounter<u64>> = counters
            .into_iter()
            .map(|(name, what, get)| {
                let series = Arc::clone(&series);
                meter
                    .u64_observable_counter(name)
                    .with_unit("{probe}")
                    .with_description(what)
                    .with_callback(move |o| {
                        for s in lock(&series).values() {
                            o.observe(get(&s.tally), &s.attrs[..]);
                        }
                    })
                    .build()
            })
            .collect();
        let by_reason = Arc::clone(&series);
        observed.push(
            meter
                .u64_observable_counter("prober.probe.errors")
                .with_unit("{probe}")
                .with_description("Failed probes by reason (attribute `reason`)")
                .with_callback(move |o| {
                    for s in lock(&by_reason).values() {
                        for (kind, n) in s.tally.errors_by_kind() {
                            let mut attrs = s.attrs.to_vec();
                            attrs.push(KeyValue::new("reason", kind.as_str()));
                            o.observe(n, &attrs);
                        }
                    }
                })
                .build(),
        );
        Ok(Self {
            rtt: histogram("prober.rtt", "Round-trip time of answered probes"),
            latency: histogram(
                "prober.latency",
                "Reply minus scheduled send of answered probes (the coordinated-omission view)",
            ),
            send_lag: histogram(
                "prober.send_lag",
                "Actual send minus scheduled send of every probe sent",
            ),
            rt: Some(rt),
            linger: settings.interval * 2 + settings.timeout,
            provider,
            series,
            _counters: observed,
        })
    }

    /// Exports what is left and stops the exporter (blocks up to its
    /// timeout).
    pub fn shutdown(&self) {
        let _ = self.provider.force_flush();
        let _ = self.provider.shutdown();
    }

    fn add(&self, t: &TargetEntry) {
        let info = &t.info;
        let attrs: Vec<KeyValue> = crate::prometheus::series_labels(info)
            .into_iter()
            .map(|(k, v)| KeyValue::new(k, v))
            .collect();
        lock(&self.series).insert(
            info.id,
            Series {
                attrs: attrs.into(),
                tally: t.stats.tally,
                gone: None,
            },
        );
    }

    /// Drops removed targets whose last counts have been exported.
    fn prune(&self) {
        let now = std::time::Instant::now();
        lock(&self.series).retain(|_, s| s.gone.is_none_or(|at| now - at < self.linger));
    }
}

impl Sink for OtlpSink {
    fn start(&mut self, cx: &Context<'_>) -> std::io::Result<()> {
        for t in cx.targets.values() {
            self.add(t);
        }
        Ok(())
    }

    fn target_added(&mut self, _cx: &Context<'_>, t: &TargetEntry) -> std::io::Result<()> {
        self.prune();
        self.add(t);
        Ok(())
    }

    fn target_removed(&mut self, _cx: &Context<'_>, t: &TargetEntry) -> std::io::Result<()> {
        if let Some(s) = lock(&self.series).get_mut(&t.info.id) {
            s.tally = t.stats.tally;
            s.gone = Some(std::time::Instant::now());
        }
        self.prune();
        Ok(())
    }

    fn record(&mut self, _cx: &Context<'_>, t: &TargetEntry, s: &Sample) -> std::io::Result<()> {
        let mut series = lock(&self.series);
        let Some(entry) = series.get_mut(&t.info.id) else {
            return Ok(());
        };
        entry.tally = t.stats.tally;
        let attrs = Arc::clone(&entry.attrs);
        drop(series);
        self.send_lag.record(s.send_lag().as_secs_f64(), &attrs[..]);
        if let Outcome::Ok(r) = &s.outcome {
            self.rtt.record(r.rtt().as_secs_f64(), &attrs[..]);
            if let Some(lat) = s.latency() {
                self.latency.record(lat.as_secs_f64(), &attrs[..]);
            }
        }
        Ok(())
    }

    fn finish(&mut self, _cx: &Context<'_>, _summaries: &[Summary]) -> std::io::Result<()> {
        self.shutdown();
        Ok(())
    }
}

impl Drop for OtlpSink {
    fn drop(&mut self) {
        // Dropping a runtime inside another one's task panics; this does not
        // wait (the last export was made by `finish`).
        if let Some(rt) = self.rt.take() {
            rt.shutdown_background();
        }
    }
}

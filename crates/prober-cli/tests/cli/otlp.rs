//! The daemon pushes metrics over OTLP/gRPC: a receiver started here
//! decodes the real OTLP protobufs (opentelemetry-proto's generated
//! service) and checks them against the daemon's own JSON lines.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use opentelemetry_proto::tonic::collector::metrics::v1::metrics_service_server::{
    MetricsService, MetricsServiceServer,
};
use opentelemetry_proto::tonic::collector::metrics::v1::{
    ExportMetricsServiceRequest, ExportMetricsServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
use opentelemetry_proto::tonic::metrics::v1::{AggregationTemporality, Metric, metric};

use crate::daemon::{Daemon, jsonl};

#[derive(Clone, Default)]
struct Receiver(Arc<Mutex<Vec<ExportMetricsServiceRequest>>>);

#[tonic::async_trait]
impl MetricsService for Receiver {
    async fn export(
        &self,
        request: tonic::Request<ExportMetricsServiceRequest>,
    ) -> Result<tonic::Response<ExportMetricsServiceResponse>, tonic::Status> {
        self.0.lock().unwrap().push(request.into_inner());
        Ok(tonic::Response::new(ExportMetricsServiceResponse::default()))
    }
}

/// A receiver on a loopback port, on a runtime of its own; it stops when
/// the test's process does.
fn start_receiver() -> (Receiver, u16) {
    let std_listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    std_listener.set_nonblocking(true).unwrap();
    let port = std_listener.local_addr().unwrap().port();
    let rx = Receiver::default();
    let service = MetricsServiceServer::new(rx.clone());
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let listener = tokio::net::TcpListener::from_std(std_listener).unwrap();
            tonic::transport::Server::builder()
                .add_service(service)
                .serve_with_incoming(tonic::transport::server::TcpIncoming::from(listener))
                .await
                .unwrap();
        });
    });
    (rx, port)
}

fn text(v: &Option<AnyValue>) -> Option<&str> {
    match v.as_ref()?.value.as_ref()? {
        any_value::Value::StringValue(s) => Some(s),
        _ => None,
    }
}

fn attr<'a>(attrs: &'a [KeyValue], key: &str) -> Option<&'a str> {
    attrs
        .iter()
        .find(|a| a.key == key)
        .and_then(|a| text(&a.value))
}

/// Every metric of one export, by name.
fn metrics(req: &ExportMetricsServiceRequest) -> Vec<&Metric> {
    req.resource_metrics
        .iter()
        .flat_map(|r| &r.scope_metrics)
        .flat_map(|s| &s.metrics)
        .collect()
}

/// The cumulative sum of counter `name` for `target`.
fn counter(req: &ExportMetricsServiceRequest, name: &str, target: &str) -> Option<u64> {
    let m = metrics(req).into_iter().find(|m| m.name == name)?;
    let Some(metric::Data::Sum(sum)) = &m.data else {
        panic!("{name} is not a sum: {m:?}");
    };
    assert!(sum.is_monotonic, "{name} is a counter");
    assert_eq!(
        sum.aggregation_temporality,
        AggregationTemporality::Cumulative as i32
    );
    sum.data_points
        .iter()
        .find(|p| attr(&p.attributes, "target") == Some(target))
        .map(|p| match p.value {
            Some(opentelemetry_proto::tonic::metrics::v1::number_data_point::Value::AsInt(n)) => {
                n as u64
            }
            ref v => panic!("{name}: {v:?}"),
        })
}

/// The daemon pushes exponential histograms and counters to an OTLP/gRPC
/// receiver. Its last push (at SIGTERM) holds exactly the probes of the JSON
/// lines: counts per outcome, and p50/p99 that fall in the exponential
/// bucket the histogram puts them in.
#[test]
fn the_daemon_pushes_otlp_that_agrees_with_its_files() {
    let (rx, port) = start_receiver();
    let mut d = Daemon::start(
        "otlp",
        &format!(
            r#"
[otlp]
endpoint = "http://127.0.0.1:{port}"
interval = "500ms"

[[job]]
name = "loop"
interval = "10ms"
timeout = "200ms"
targets = ["udp://RESPONDER", "tcp://RESPONDER"]
labels = {{ site = "lab" }}
sinks = {{ jsonl = {{ path = "loop.jsonl" }} }}
"#
        ),
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    while rx.0.lock().unwrap().len() < 3 {
        assert!(
            Instant::now() < deadline,
            "no 3 OTLP exports in 30 s (got {})",
            rx.0.lock().unwrap().len()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let dir = d.dir.clone();
    let udp = d.udp.clone();
    let (code, err) = d.stop();
    assert_eq!(code, Some(0), "{err}");
    let lines = jsonl(&dir.join("loop.jsonl"));
    let got = rx.0.lock().unwrap().clone();
    let last = got.last().unwrap();
    let resource = last.resource_metrics[0].resource.as_ref().unwrap();
    assert_eq!(attr(&resource.attributes, "service.name"), Some("prober"));
    for target in [format!("udp://{udp}"), format!("tcp://{udp}")] {
        let probes: Vec<&serde_json::Value> = lines
            .iter()
            .filter(|l| l["type"] == "probe" && l["target"] == target.as_str())
            .collect();
        let mut rtts: Vec<f64> = probes
            .iter()
            .filter_map(|l| l["rtt_ns"].as_u64())
            .map(|ns| ns as f64 / 1e9)
            .collect();
        rtts.sort_by(f64::total_cmp);
        let n = rtts.len();
        assert!(n > 50, "{target}: {n} answers");
        assert_eq!(
            counter(last, "prober.probes.sent", &target),
            Some(probes.len() as u64),
            "{target}: sent"
        );
        assert_eq!(
            counter(last, "prober.probes.ok", &target),
            Some(n as u64),
            "{target}: ok"
        );
        // Earlier pushes are cumulative too: never more than the last.
        for earlier in &got {
            let sent = counter(earlier, "prober.probes.sent", &target).unwrap_or(0);
            assert!(sent <= probes.len() as u64);
        }
        let rtt = metrics(last)
            .into_iter()
            .find(|m| m.name == "prober.rtt")
            .expect("a prober.rtt histogram");
        assert_eq!(rtt.unit, "s");
        let Some(metric::Data::ExponentialHistogram(h)) = &rtt.data else {
            panic!("prober.rtt is not an exponential histogram: {rtt:?}");
        };
        assert_eq!(
            h.aggregation_temporality,
            AggregationTemporality::Cumulative as i32
        );
        let p = h
            .data_points
            .iter()
            .find(|p| attr(&p.attributes, "target") == Some(target.as_str()))
            .unwrap_or_else(|| panic!("{target}: no RTT data point"));
        assert_eq!(attr(&p.attributes, "probe"), Some("loop"));
        assert_eq!(attr(&p.attributes, "site"), Some("lab"));
        assert_eq!(p.count, n as u64, "{target}: histogram count");
        let sum: f64 = rtts.iter().sum();
        assert!(
            (p.sum.unwrap() - sum).abs() < 1e-9 * n as f64,
            "{target}: sum"
        );
        assert_eq!(p.min, Some(rtts[0]));
        assert_eq!(p.max, Some(rtts[n - 1]));
        // Bucket k of offset o holds (base^(o+k), base^(o+k+1)], base =
        // 2^(2^-scale).
        let base = 2f64.powf(2f64.powi(-p.scale));
        let pos = p.positive.as_ref().unwrap();
        assert_eq!(
            p.zero_count + pos.bucket_counts.iter().sum::<u64>(),
            n as u64
        );
        for q in [0.5, 0.99] {
            let rank = ((q * n as f64).ceil() as u64).clamp(1, n as u64);
            let ours = rtts[rank as usize - 1];
            let mut seen = p.zero_count;
            let k = pos
                .bucket_counts
                .iter()
                .position(|c| {
                    seen += c;
                    seen >= rank
                })
                .unwrap() as i32;
            let (low, high) = (base.powi(pos.offset + k), base.powi(pos.offset + k + 1));
            eprintln!(
                "{target}: p{} {:.1} µs in bucket ({:.1}, {:.1}] µs (scale {}, n {n})",
                q * 100.0,
                ours * 1e6,
                low * 1e6,
                high * 1e6,
                p.scale
            );
            assert!(
                low * (1.0 - 1e-9) < ours && ours <= high * (1.0 + 1e-9),
                "{target}: p{q} {ours} outside ({low}, {high}]"
            );
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

//! The `/metrics` endpoint: the registry in the OpenMetrics text format,
//! and the daemon's own gauges.

use std::sync::Arc;
use std::sync::atomic::AtomicU64;

use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

/// The daemon's own series: whether the last config (re)load worked.
#[derive(Debug, Clone, Default)]
pub(crate) struct ReloadGauges {
    ok: Gauge,
    success_time: Gauge<f64, AtomicU64>,
    /// Why the last reload was rejected; `None` once one works.
    error: crate::status::LastReload,
}

impl ReloadGauges {
    pub(crate) fn register(&self, registry: &mut Registry, version: &str) {
        let info = prometheus_client::metrics::info::Info::new(vec![(
            "version".to_owned(),
            version.to_owned(),
        )]);
        registry.register(
            "prober_build",
            "The prober that serves these metrics (always 1)",
            info,
        );
        registry.register(
            "prober_config_last_reload_successful",
            "Whether the last configuration load or reload succeeded (1) or was rejected (0)",
            self.ok.clone(),
        );
        registry.register(
            "prober_config_last_reload_success_timestamp_seconds",
            "Unix time of the last successful configuration load",
            self.success_time.clone(),
        );
    }

    /// A load or reload ended: `None` if it worked, else why not.
    pub(crate) fn loaded(&self, error: Option<&str>) {
        let ok = error.is_none();
        self.error.set(error);
        self.ok.set(i64::from(ok));
        if ok {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0.0, |d| d.as_secs_f64());
            self.success_time.set(now);
        }
    }

    /// The rejection reason the status page reads.
    pub(crate) fn last_reload(&self) -> crate::status::LastReload {
        self.error.clone()
    }
}

/// The `Authorization` header value a client must send, as bytes compared
/// in constant time.
#[derive(Clone)]
struct Expected(Arc<[u8]>);

impl Expected {
    fn new(auth: &crate::config::MetricsAuth) -> Self {
        use base64::Engine as _;
        let value = match auth {
            crate::config::MetricsAuth::Basic { user, password } => format!(
                "Basic {}",
                base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"))
            ),
            crate::config::MetricsAuth::Bearer(token) => format!("Bearer {token}"),
        };
        Self(value.into_bytes().into())
    }

    fn accepts(&self, header: Option<&axum::http::HeaderValue>) -> bool {
        use subtle::ConstantTimeEq as _;
        let Some(got) = header.map(axum::http::HeaderValue::as_bytes) else {
            return false;
        };
        // The scheme is case-insensitive (RFC 9110 11.1), the rest is not.
        let scheme = self.0.iter().position(|b| *b == b' ').unwrap_or(0);
        got.len() == self.0.len()
            && got[..scheme].eq_ignore_ascii_case(&self.0[..scheme])
            && bool::from(got[scheme..].ct_eq(&self.0[scheme..]))
    }

    fn challenge(&self) -> &'static str {
        if self.0.starts_with(b"Basic") {
            r#"Basic realm="prober", charset="UTF-8""#
        } else {
            r#"Bearer realm="prober""#
        }
    }
}

/// What `/metrics` reads: the targets' series, and the daemon's own
/// families.
#[derive(Debug)]
pub(crate) struct Scrape {
    pub(crate) sink: prober_sinks::prometheus::PrometheusSink,
    pub(crate) registry: Registry,
    /// Scrapes and status pages refused with 503 while [`RENDERS`] were
    /// under way (`prober_scrapes_refused_total`).
    pub(crate) refused: prometheus_client::metrics::counter::Counter,
}

/// Scrapes and status pages rendered at once, at most. An excess request
/// gets 503 at once instead of queueing CPU work: 50 clients scraping in
/// a loop must not take the CPU the probes run on (two: Prometheus servers
/// usually come in HA pairs).
pub(crate) const RENDERS: usize = 2;

/// Starts `render` on the blocking pool if fewer than [`RENDERS`] are
/// under way, holding a permit until it returns; `None` when they all are
/// (the caller answers 503).
fn spawn_render<T: Send + 'static>(
    renders: &Arc<tokio::sync::Semaphore>,
    render: impl FnOnce() -> T + Send + 'static,
) -> Option<tokio::task::JoinHandle<T>> {
    let permit = Arc::clone(renders).try_acquire_owned().ok()?;
    Some(tokio::task::spawn_blocking(move || {
        let _permit = permit;
        render()
    }))
}

/// A scrape's pieces as they are encoded: what the daemon holds for a
/// scrape is a few pieces, not the whole exposition.
const SCRAPE_CHUNK: usize = 256 * 1024;

/// How long a scrape's reader has to take its pieces: a reader that has
/// not (stalled, or on a very slow link) is cut off, and the render's
/// permit goes back. Prometheus gives up on a scrape after its
/// `scrape_timeout` (10 s by default) anyway.
const SCRAPE_DEADLINE: std::time::Duration = std::time::Duration::from_secs(20);

/// What the encoder hands the response.
enum Piece {
    Data(Vec<u8>),
    /// The exposition is whole: without this, the body ends in an error.
    End,
}

/// `/metrics`' body, encoded on the blocking pool under a permit of
/// `renders` (`None` when none is free) and streamed as it is written. The
/// status goes out before the end is encoded, so an encoding that fails
/// or stops (only a registry's collector can fail; a panic stops it) cuts
/// the body short with an error, which a scraper records as a failed
/// scrape, never as a whole one; so does a reader too slow for
/// [`SCRAPE_DEADLINE`], so that two stalled readers cannot hold both
/// permits.
fn scrape_streamed(
    renders: &Arc<tokio::sync::Semaphore>,
    scrape: Arc<Scrape>,
    format: prober_sinks::prometheus::Format,
) -> Option<axum::body::Body> {
    use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
    // Two pieces queued at most: a slow reader holds the encoder back
    // rather than the daemon buffering the scrape for it.
    let (tx, rx) = tokio::sync::mpsc::channel::<std::io::Result<Piece>>(2);
    let handle = tokio::runtime::Handle::current();
    spawn_render(renders, move || {
        let deadline = tokio::time::Instant::now() + SCRAPE_DEADLINE;
        let cut = Arc::new(AtomicBool::new(false));
        let send = {
            let cut = Arc::clone(&cut);
            move |piece: std::io::Result<Piece>| {
                if cut.load(Relaxed) {
                    return;
                }
                let sent = handle.block_on(tokio::time::timeout_at(deadline, tx.send(piece)));
                if !matches!(sent, Ok(Ok(()))) {
                    // Too slow, or gone: the rest is encoded and dropped
                    // (the snapshot is taken; stopping early would save
                    // little), and the body ends without its end.
                    cut.store(true, Relaxed);
                }
            }
        };
        let send = Arc::new(send);
        let spill = {
            let send = Arc::clone(&send);
            Box::new(move |piece: Vec<u8>| send(Ok(Piece::Data(piece))))
        };
        match prober_sinks::prometheus::scrape_streaming(
            format,
            &scrape.sink,
            &scrape.registry,
            SCRAPE_CHUNK,
            spill,
        ) {
            Ok(rest) => {
                send(Ok(Piece::Data(rest)));
                send(Ok(Piece::End));
            }
            Err(_) => send(Err(std::io::Error::other("encoding the metrics failed"))),
        }
    })?;
    let pieces = futures_util::stream::unfold((rx, false), |(mut rx, ended)| async move {
        if ended {
            return None;
        }
        match rx.recv().await {
            Some(Ok(Piece::Data(d))) => Some((Ok(d), (rx, false))),
            Some(Ok(Piece::End)) => None,
            Some(Err(e)) => Some((Err(e), (rx, true))),
            None => Some((
                Err(std::io::Error::other(
                    "the scrape stopped before its end (its encoding panicked or its reader was too slow)",
                )),
                (rx, true),
            )),
        }
    });
    Some(axum::body::Body::from_stream(pieces))
}

/// Runs [`serve_metrics`] on a thread and runtime of its own, so that
/// accepting, parsing and answering requests (and a scrape storm) never
/// take the runtime thread that sends and receives the probes; renders run
/// on that runtime's blocking pool. Ends when the server does.
pub(crate) async fn serve_metrics_apart(
    listener: std::net::TcpListener,
    scrape: Arc<Scrape>,
    status: crate::status::StatusPage,
    blackbox: Option<Arc<crate::blackbox::Blackbox>>,
    tls: Option<crate::webconfig::WebTls>,
    auth: Option<crate::config::MetricsAuth>,
    stop: CancellationToken,
) -> std::io::Result<()> {
    let (done, ended) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name("prober-http".to_owned())
        .spawn(move || {
            let res = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .and_then(|rt| {
                    rt.block_on(async move {
                        let listener = TcpListener::from_std(listener)?;
                        let app = metrics_app(scrape, status, blackbox, auth);
                        match tls {
                            None => {
                                axum::serve(listener, app)
                                    .with_graceful_shutdown(stop.cancelled_owned())
                                    .await
                            }
                            Some(tls) => {
                                let listener = crate::webconfig::TlsListener::new(listener, &tls)?;
                                axum::serve(listener, app)
                                    .with_graceful_shutdown(stop.cancelled_owned())
                                    .await
                            }
                        }
                    })
                });
            let _ = done.send(res);
        })?;
    ended
        .await
        .unwrap_or_else(|_| Err(std::io::Error::other("the metrics thread ended")))
}

/// The routes of the metrics listener: `/metrics`, the status page,
/// `/probe` (with `blackbox`) and the health checks; with `auth`,
/// everything but `/healthz` and `/readyz` (Kubernetes' probes) asks for
/// it.
fn metrics_app(
    scrape: Arc<Scrape>,
    status: crate::status::StatusPage,
    blackbox: Option<Arc<crate::blackbox::Blackbox>>,
    auth: Option<crate::config::MetricsAuth>,
) -> axum::Router {
    use axum::http::StatusCode;
    use axum::http::header::{CONTENT_TYPE, RETRY_AFTER};
    use axum::response::IntoResponse as _;
    let renders = Arc::new(tokio::sync::Semaphore::new(RENDERS));
    let refused = scrape.refused.clone();
    let busy = move || {
        refused.inc();
        (
            StatusCode::SERVICE_UNAVAILABLE,
            [
                (CONTENT_TYPE, "text/plain; charset=utf-8"),
                (RETRY_AFTER, "1"),
            ],
            "too many scrapes under way: try again\n",
        )
            .into_response()
    };
    let (busy_page, page_renders) = (busy.clone(), Arc::clone(&renders));
    // Both are rendered on the blocking pool: at 10,000 targets a scrape
    // takes a tenth of a second of CPU and more (BENCHMARKS.md), which
    // would hold up this thread's accepts and health checks.
    let status_page = axum::routing::get(move |uri: axum::http::Uri| {
        let status = status.clone();
        let (busy, renders) = (busy_page.clone(), Arc::clone(&page_renders));
        async move {
            let view = crate::status::View::from_query(uri.query());
            let Some(render) = spawn_render(&renders, move || status.render(&view)) else {
                return busy();
            };
            let rendered = render.await;
            match rendered {
                Ok(page) => (
                    StatusCode::OK,
                    [(CONTENT_TYPE, "text/html; charset=utf-8")],
                    page,
                ),
                Err(_) => (
                    StatusCode::INTERNAL_SERVER_ERROR,
                    [(CONTENT_TYPE, "text/plain; charset=utf-8")],
                    "rendering the status page failed\n".to_owned(),
                ),
            }
            .into_response()
        }
    });
    let app = axum::Router::new()
        .route(
            "/metrics",
            axum::routing::get(move |headers: axum::http::HeaderMap| {
                use prober_sinks::prometheus::Format;
                let format = Format::negotiate(
                    headers
                        .get(axum::http::header::ACCEPT)
                        .and_then(|v| v.to_str().ok()),
                );
                let scrape = Arc::clone(&scrape);
                let (busy, renders) = (busy.clone(), Arc::clone(&renders));
                async move {
                    let Some(body) = scrape_streamed(&renders, scrape, format) else {
                        return busy();
                    };
                    (
                        StatusCode::OK,
                        [(CONTENT_TYPE, format.content_type())],
                        body,
                    )
                        .into_response()
                }
            }),
        )
        .route("/", status_page.clone())
        .route("/status", status_page)
        .route(
            "/probe",
            axum::routing::get(
                move |uri: axum::http::Uri, headers: axum::http::HeaderMap| {
                    let blackbox = blackbox.clone();
                    async move {
                        let Some(b) = blackbox else {
                            return (
                                StatusCode::NOT_FOUND,
                                [(CONTENT_TYPE, "text/plain; charset=utf-8")],
                                "no blackbox modules: start with --blackbox-config FILE or [blackbox] config\n".to_owned(),
                            )
                                .into_response();
                        };
                        let scrape_timeout = headers
                            .get("x-prometheus-scrape-timeout-seconds")
                            .and_then(|v| v.to_str().ok());
                        let (status, kind, body) = b.answer(uri.query(), scrape_timeout).await;
                        (status, [(CONTENT_TYPE, kind)], body).into_response()
                    }
                },
            ),
        );
    let app = match auth {
        None => app,
        Some(auth) => {
            let expected = Expected::new(&auth);
            app.layer(axum::middleware::from_fn(
                move |req: axum::extract::Request, next: axum::middleware::Next| {
                    let expected = expected.clone();
                    async move {
                        use axum::response::IntoResponse as _;
                        if expected.accepts(req.headers().get(axum::http::header::AUTHORIZATION)) {
                            next.run(req).await
                        } else {
                            (
                                StatusCode::UNAUTHORIZED,
                                [(axum::http::header::WWW_AUTHENTICATE, expected.challenge())],
                                "authentication required\n",
                            )
                                .into_response()
                        }
                    }
                },
            ))
        }
    };
    // For Kubernetes: alive while this answers; ready once serving, which
    // happens only after the config loaded and the jobs started. Outside
    // the authentication, as kubelet's probes send none.
    app.route("/healthz", axum::routing::get(|| async { "ok\n" }))
        .route("/readyz", axum::routing::get(|| async { "ready\n" }))
}

/// Reads the failures of the jobs' sink files at scrape time.
#[derive(Debug)]
pub(crate) struct SinkCollector(pub(crate) Arc<prober_sinks::files::SinkFailures>);

impl prometheus_client::collector::Collector for SinkCollector {
    fn encode(
        &self,
        mut encoder: prometheus_client::encoding::DescriptorEncoder<'_>,
    ) -> Result<(), std::fmt::Error> {
        use prometheus_client::encoding::EncodeMetric;
        use prometheus_client::metrics::MetricType;
        use prometheus_client::metrics::counter::ConstCounter;
        use prometheus_client::metrics::gauge::ConstGauge;
        let snap = self.0.snapshot();
        let mut m = encoder.encode_descriptor(
            "prober_sink_write_errors",
            "Writes to a job's sink files that failed (a full disk, a removed directory); probing goes on",
            None,
            MetricType::Counter,
        )?;
        for (job, f) in &snap {
            let labels = [("probe".to_owned(), job.clone())];
            ConstCounter::new(f.errors).encode(m.encode_family(&labels)?)?;
        }
        let mut m = encoder.encode_descriptor(
            "prober_sink_failing",
            "Whether the last write to a job's sink files failed (1) or worked (0)",
            None,
            MetricType::Gauge,
        )?;
        for (job, f) in &snap {
            let labels = [("probe".to_owned(), job.clone())];
            ConstGauge::new(i64::from(f.failing)).encode(m.encode_family(&labels)?)?;
        }
        Ok(())
    }
}

/// Reads DNS discovery's counters at scrape time.
#[derive(Debug)]
pub(crate) struct DiscoveryCollector(pub(crate) Arc<crate::dns_sd::Discovery>);

impl prometheus_client::collector::Collector for DiscoveryCollector {
    fn encode(
        &self,
        mut encoder: prometheus_client::encoding::DescriptorEncoder<'_>,
    ) -> Result<(), std::fmt::Error> {
        use prometheus_client::encoding::EncodeMetric;
        use prometheus_client::metrics::MetricType;
        use prometheus_client::metrics::counter::ConstCounter;
        use prometheus_client::metrics::gauge::ConstGauge;
        let snap = self.0.stats();
        if snap.is_empty() {
            return Ok(());
        }
        type Get = fn(&crate::dns_sd::JobStats) -> u64;
        let series: [(&str, &str, MetricType, Get); 5] = [
            (
                "prober_discovery_failures",
                "DNS discovery lookups that failed (SERVFAIL, timeout); the last good answer is kept",
                MetricType::Counter,
                |s| s.failures,
            ),
            (
                "prober_discovery_targets",
                "Targets DNS discovery gave a job at its last lookup",
                MetricType::Gauge,
                |s| s.targets,
            ),
            (
                "prober_targets_over_limit",
                "Targets of a job over its max_targets, not probed",
                MetricType::Gauge,
                |s| s.over_limit,
            ),
            (
                "prober_target_limit_hits",
                "Loads at which a job had more targets than its max_targets",
                MetricType::Counter,
                |s| s.truncations,
            ),
            (
                "prober_target_address_changes",
                "Targets given by name that were found at a new address on a reload or rediscovery",
                MetricType::Counter,
                |s| s.address_changes,
            ),
        ];
        for (name, help, kind, get) in series {
            let mut m = encoder.encode_descriptor(name, help, None, kind)?;
            for (job, stats) in &snap {
                let labels = [("probe".to_owned(), job.clone())];
                let v = get(stats);
                if matches!(kind, MetricType::Counter) {
                    ConstCounter::new(v).encode(m.encode_family(&labels)?)?;
                } else {
                    ConstGauge::new(i64::try_from(v).unwrap_or(i64::MAX))
                        .encode(m.encode_family(&labels)?)?;
                }
            }
        }
        Ok(())
    }
}

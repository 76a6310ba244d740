//! Where prober's results go: every output implements
//! [`prober_core::Sink`] and is fed by the one collector
//! ([`prober_core::Collector`]) that `prober run` and the daemon share.
//!
//! - [`HumanSink`]: ping-style lines, per-target summaries, a table.
//! - [`JsonSink`]: JSON lines (meta, probes, summaries), with a schema
//!   version; [`CsvSink`]: one row of summary fields per target.
//! - [`files`]: probe lines as JSON lines or CSV, HdrHistogram interval
//!   logs, the [`files::RotatingFile`] wrapper they all write through, and
//!   [`files::ByJob`], which routes the daemon's samples to each job's files.
//! - [`prometheus`]: the daemon's metrics; [`exposition`] writes the
//!   targets' families, prometheus/client_rust the daemon's own.
//! - [`otlp`]: the same pushed over OTLP/gRPC, through the opentelemetry SDK.
//! - [`ProgressSink`]: a progress line on a terminal for quiet runs.
//! - [`fields`]: the summary fields of `--fields`.
//!
//! # Why a crate of its own
//! All sinks live here, not in `prober-core`, because most of them write
//! files and core has none (its `clippy.toml` forbids them), and because
//! Prometheus and HdrHistogram serialization are dependencies `prober run`'s
//! core and the protocol crates do not need. One home means a new output
//! (OTLP, a status page, a report reader) is one module here and one line
//! where the binary or the daemon picks its sinks.
//!
//! May use: `prober-core`.
//! May not: open a socket (except the OTLP exporter's client), know a
//!  protocol, or parse a command line.

#![forbid(unsafe_code)]

pub mod csv;
mod dense;
pub mod exposition;
pub mod fields;
pub mod file_config;
pub mod files;
pub mod human;
pub mod json;
mod native_bounds;
pub mod otlp;
pub mod output;
pub mod progress;
pub mod prometheus;
pub mod window;

pub use self::csv::CsvSink;
pub use self::fields::{
    DEFAULT_CSV_FIELDS, DEFAULT_TABLE_FIELDS, FieldValue, field_value, parse_fields,
};
pub use self::human::HumanSink;
pub use self::json::{JsonSink, ProbeLine, SCHEMA_VERSION, SweepTag};
pub use self::output::{Destination, PipeDrain, PipedStdout, RawStdout, Records};
pub use self::progress::ProgressSink;
pub use self::prometheus::PrometheusSink;

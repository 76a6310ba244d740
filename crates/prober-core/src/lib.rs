//! Timing core of prober: schedules, pacing, samples, statistics and sinks.
//!
//! This crate holds everything about a measurement that does not touch a
//! socket, so it can be tested with paused time and hand-built instants.
//!
//! # Layout
//! - [`config`]: [`RunConfig`] and [`Pacing`], validated when built.
//! - [`pacer`]: the open-loop schedule ([`Pacer`]), pure.
//! - [`wait`]: how the runner waits for a deadline (timer, spin, hybrid).
//! - [`probe`]: the [`Probe`] trait each protocol implements.
//! - [`matcher`]: matches replies to probes by sequence number and counts
//!   late, duplicate and reordered replies.
//! - [`sample`]: [`Sample`], [`Outcome`] and [`Reply`].
//! - [`stats`]: HdrHistogram-backed [`stats::TargetStats`] and [`Summary`].
//! - [`runner`]: drives one probe on its schedule and one collector that
//!   feeds every [`Sink`].
//! - [`sink`]: the [`Sink`] trait and the human, JSON lines and CSV sinks.
//! - [`duration`]: parses `10ms`, `250us`, `1.5s`.
//!
//! Sockets, address resolution and command-line parsing live in other crates.

pub mod busy;
pub mod config;
pub mod duration;
pub mod matcher;
pub mod meta;
pub mod pacer;
pub mod probe;
pub mod runner;
pub mod rx;
pub mod sample;
pub mod sink;
pub mod stats;
#[cfg(feature = "test-util")]
pub mod testutil;
pub mod wait;

pub use config::{ConfigError, Pacing, RunConfig};
pub use matcher::{Anomalies, Delivery, Matcher, MatcherSet, Waiter};
pub use meta::RunMeta;
pub use pacer::Pacer;
pub use probe::{Probe, ProbeError};
pub use runner::{Event, TargetInfo, collect, run_target};
pub use sample::{Outcome, Reply, Sample};
pub use sink::Sink;
pub use stats::{DistSummary, Summary};
pub use wait::Gate;

/// Sequence numbers at and above this value are warm-up probes: they are sent
/// and awaited but never recorded, and never count towards reordering.
pub const WARMUP_SEQ_BASE: u64 = 1 << 63;

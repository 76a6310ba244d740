//! Timing core of prober: schedules, pacing, samples, statistics, the
//! result pipeline and the protocol descriptor.
//!
//! This crate holds everything about a measurement that does not touch a
//! socket or a file (its `clippy.toml` disallows both), so it can be tested
//! with paused time and hand-built instants. One exception, on purpose: the
//! timer wait ([`wait`]) owns one `timerfd` per target (through nix, no
//! `unsafe`), because a deadline is the core's business and tokio's timer
//! wheel is too coarse for it.
//!
//! # Layout
//! - [`config`]: [`RunConfig`] and [`Pacing`], validated when built.
//! - [`pacer`]: the open-loop schedule ([`Pacer`]), pure.
//! - [`wait`]: how the runner waits for a deadline (timer, spin, hybrid).
//! - [`probe`]: the [`Probe`] trait each protocol implements; [`error`]: the
//!   [`ProbeError`] it fails with, with an [`ErrorKind`].
//! - [`responder`]: the [`responder::Responder`] descriptor each crate
//!   that answers probes exports, listed in the [`Registry`] too;
//!   [`shared`]: [`shared::Shared`], values by type that probes of one run,
//!   a job's options or the responders share.
//! - [`protocol`]: the [`Protocol`] descriptor each protocol crate exports
//!   and the [`Registry`] the binary lists them in; [`target`]: parsing
//!   target URLs against it; [`info`]: [`TargetInfo`], a target's name in
//!   results.
//! - [`matcher`]: matches replies to probes by sequence number and counts
//!   late, duplicate and reordered replies.
//! - [`sample`]: [`Sample`], [`Outcome`] and [`Reply`].
//! - [`runner`]: drives one probe on its schedule ([`run_target`]).
//! - [`mod@collect`]: the one result pipeline, [`Collector`], used by
//!   `prober run` and the daemon alike.
//! - [`stats`]: HdrHistogram-backed [`stats::TargetStats`] and [`Summary`].
//! - [`sink`]: the [`Sink`] trait (the sinks are in `prober-sinks`);
//!   [`entry`]: [`TargetEntry`], a target with its statistics, as sinks see it.
//! - [`clock`], [`meta`]: wall-clock time and the settings that travel with
//!   every result; [`duration`]: parses `10ms`, `1m30s`; [`quote`]: caps
//!   user input quoted in messages; [`logs`]: log lines a flood cannot
//!   multiply.
//!
//! Syscalls and every `unsafe` block live in `prober-sys`; sockets and files
//! in `prober-net`, `prober-sinks` and the protocol crates; command-line parsing in `prober-cli`.
//!
//! May use: no other prober crate.
//! May not: open a socket or a file (its clippy.toml disallows them; the one
//!  timerfd of `wait` is the exception it documents), make a raw system call,
//!  parse a command line, or know a protocol by name.

#![forbid(unsafe_code)]

pub mod clock;
pub mod collect;
pub mod config;
pub mod detail;
pub mod duration;
pub mod entry;
pub mod error;
pub mod hist;
pub mod info;
pub mod logs;
pub mod matcher;
pub mod meta;
pub mod pacer;
pub mod probe;
pub mod protocol;
pub mod quote;
pub mod responder;
pub mod runner;
pub mod sample;
pub mod sequence;
pub mod shared;
pub mod sink;
pub mod spin;
pub mod stats;
pub mod target;
#[cfg(any(test, feature = "test-util"))]
pub mod testutil;
pub mod wait;

pub use clock::Clock;
pub use collect::{Collector, collect};
pub use config::{ConfigError, Pacing, RunConfig};
pub use entry::{AnomalyReader, TargetEntry};
pub use error::{ErrorKind, ProbeError};
pub use info::TargetInfo;
pub use matcher::{
    Anomalies, Delivery, DirectionLoss, IdMap, Matcher, MatcherSet, PathStats, SeqHasher, TcpRtt,
    WARMUP_SEQ_BASE, Waiter,
};
pub use meta::RunMeta;
pub use pacer::Pacer;
pub use probe::{Probe, Unresolved};
pub use protocol::{Protocol, Registry};
pub use runner::{Event, Launch, Runnable, once, run_target, runnable};
pub use sample::{
    AppReply, Detail, Missing, Outcome, Parts, Phases, Reply, ResponderTimes, Sample, Stamps,
};
pub use sink::{Context, Fanout, Sink};
pub use stats::{DistSummary, Summary};
pub use target::{Target, TargetError, parse_target};
pub use wait::{Gate, SharedTimer};

/// Capacity of the event channel between probes and the collector. When the
/// sinks fall this far behind, finished probes wait to report; the schedule
/// itself never waits for them.
pub const EVENT_CHANNEL: usize = 8192;

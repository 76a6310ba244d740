//! prober's daemon (`prober serve --config FILE`): probe jobs for many
//! targets from a TOML file, each on its own open-loop schedule, with file
//! sinks and Prometheus metrics through the same collector `prober run`
//! uses; reload without losing schedules or counters; and starting the
//! responders, which `prober serve` alone also does.
//!
//! - [`config`]: the file format (docs/config.md): its schema (serde
//!   structs), validation (pure functions) and discovery (targets files,
//!   `file_sd`, `dns_sd` and name resolution: the async part).
//! - [`run`] and [`Control`]: the daemon loop; the binary maps signals to
//!   [`Control`] (only the binary installs signal handlers).
//! - [`responder`]: binding and starting the responders the registry lists,
//!   each with its own settings from its crate's options type.
//! - `blackbox`: `/probe` with blackbox_exporter's modules and metric names
//!   (docs/blackbox.md).
//!
//! The protocols and responders come from the caller's
//! [`prober_core::Registry`], so this crate names no protocol's options nor
//! any responder's settings.
//!
//! May use: `prober-core`, `prober-sys`, `prober-net`, `prober-sinks`,
//!  `prober-stamp` (the reflector's counters on `/metrics`), `prober-http`
//!  (`/probe`'s TLS client), `prober-trace` (a job's `trace_every`).
//! May not: parse a command line, print to the terminal, or hold a protocol's
//!  own logic (it starts responders and builds probes through their
//!  descriptors).

#![forbid(unsafe_code)]

mod blackbox;
pub mod config;
mod daemon;
pub mod dns_sd;
mod error;
pub mod file_sd;
mod metrics;
mod own_tables;
mod paths;
mod reload;
pub mod responder;
mod spread;
mod stamp_metrics;
mod status;
mod webconfig;

pub use daemon::{Checked, Control, DaemonOptions, check, run};
pub use error::DaemonError;
pub use responder::{ResponderOptions, Responders};

//! Naming the bad link (docs/path.md, "Naming the bad link"): each probe
//! flow of the mesh, what it lost and sent, and the branch its own 5-tuple
//! takes (the daemons' `prober_path_flow` and `prober_path_hop_info`), all
//! read from Prometheus; then 007's vote (NSDI 2018): each lost probe
//! votes for every link of its flow's path, weighted by one over the
//! path's length, and the most-voted link is named first.
//!
//! 007 rather than NetBouncer's tomography: NetBouncer's solve needs probe
//! paths chosen to make the links identifiable (it source-routes probes
//! through each spine with IP-in-IP); a mesh's flows take whichever
//! branch their hash gives, which is what 007's vote was evaluated on
//! (its paper's evaluation: the failed link ranked first in over 90 % of
//! its single-failure trials, from the flows' own paths).
//!
//! - [`vote`]: the ranking, with each link's evidence and confidence.
//! - [`prometheus`]: the queries that gather the flows.
//! - [`report`]: one localization as a table, JSON or a page, and the
//!   page and JSON served over HTTP (`prober localize --listen`).
//!
//! May use: no prober crate.
//! May not: probe, parse a command line, or print.

#![forbid(unsafe_code)]

pub mod prometheus;
pub mod report;
pub mod vote;

pub use report::{Ask, Report, localize, serve};
pub use vote::{Flow, Link, Settings, Suspect, rank};

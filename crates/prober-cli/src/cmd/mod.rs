//! Bodies of the subcommands.

pub(crate) mod localize;
pub(crate) mod probe_flags;
pub(crate) mod report;
pub(crate) mod run;
pub(crate) mod serve;
pub(crate) mod sweep;
pub(crate) mod trace;

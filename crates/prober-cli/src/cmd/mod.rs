//! Bodies of the subcommands.

pub(crate) mod run;
pub(crate) mod serve;

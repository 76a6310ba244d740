//! Shared helpers for the prober benches.

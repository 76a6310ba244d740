//! Loopback integration tests: probes against the responder.

mod probes;
mod responder;
mod support;

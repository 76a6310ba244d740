//! End-to-end tests of the built `prober` binary on loopback.

mod blackbox;
mod capture;
mod daemon;
mod deploy;
mod discovery;
mod dns;
mod errors;
mod faults;
mod first_hour;
mod grpc;
mod http;
mod icmp;
mod impair;
mod layout;
mod limits;
mod localize;
mod otlp;
mod relay;
mod report;
mod resolve;
mod run;
mod sockperf;
mod stamp;
mod support;
mod trace;

#!/usr/bin/env bash
# Prints the split checked against a packet capture, on demand: the capture
# tests of CI (crates/prober-cli/tests/cli/capture.rs), in a release build.
# For ICMP (IPv4 and IPv6; at 10 ms, back to back, under two busy threads,
# and 200,000 probes a family under two busy processes), udp:// and tcp://
# each line gives the kernel RTT's excess over the capture's RTT. Every
# probe is also asserted: no RTT below the capture's, none at 0, the parts
# adding up to the RTT. Needs root (network namespaces) and tcpdump.
set -euo pipefail
cd "$(dirname "$0")/../.."
cargo test --release --locked -p prober-cli --test cli _split_agrees -- --nocapture --test-threads 1 2>&1 \
  | grep -E 'probes[;,]|SKIPPED|test result|panicked'

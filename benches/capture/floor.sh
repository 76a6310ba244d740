#!/usr/bin/env bash
# The floor of "kernel RTT − capture RTT" for ICMP on this machine, without
# prober: a small C client (floor.c) sends raw ICMP echo requests to
# 127.0.0.1 with transmit stamps, reads each reply and its stamp, while
# tcpdump captures the namespace's loopback. Prints, per run, the median
# excess of the kernel RTT (t4k − t1k) over the capture's RTT, and the
# median user-send-to-capture time of the request.
#
# Modes: 0 = stamps, no other thread; 1 = stamps and a second thread parked
# in epoll_wait on the socket (as a tokio worker is). Compare with
# benches/capture/run.sh, which prints the same excess for prober.
# Usage: floor.sh [COUNT] [INTERVAL_US] [ROUNDS]   (root, gcc, tcpdump)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
count=${1:-300}; interval=${2:-10000}; rounds=${3:-3}
work=$(mktemp -d); trap 'rm -rf "$work"; ip netns del prober-floor 2>/dev/null || true' EXIT
gcc -O2 -o "$work/floor" "$here/floor.c" -lpthread
ip netns add prober-floor; ip -n prober-floor link set lo up
for r in $(seq "$rounds"); do
  for mode in 0 1; do
    ip netns exec prober-floor tcpdump -i lo -w "$work/c.pcap" --time-stamp-precision=nano -U icmp 2>/dev/null &
    td=$!; sleep 1
    ip netns exec prober-floor "$work/floor" "$mode" "$count" "$interval" > "$work/c.txt"
    sleep 0.3; kill "$td"; wait "$td" 2>/dev/null || true
    echo -n "round $r mode $mode: "
    python3 "$here/floor.py" "$work/c.pcap" "$work/c.txt"
  done
done

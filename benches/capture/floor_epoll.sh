#!/usr/bin/env bash
# Does a thread parked in epoll_wait on the socket move the ICMP kernel RTT
# away from the capture's? floor_epoll.c sends raw ICMP echo requests to
# 127.0.0.1 with prober's transmit stamps, in mode 0 (one thread) and mode 1
# (a second thread parked in epoll_wait on the socket, as a multi-threaded
# tokio runtime has), alternating, while tcpdump captures the namespace's
# loopback; prints each run's excess of the kernel RTT over the capture's
# (excess.py). floor.sh compares prober itself with the kernel's floor.
#
# usage: benches/capture/floor_epoll.sh [COUNT] [INTERVAL_US] [ROUNDS]
#        (defaults: 300 probes 10,000 µs apart, 3 rounds; root, gcc, tcpdump)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
count=${1:-300}; interval=${2:-10000}; rounds=${3:-3}
NS=prober-floor-epoll-$$
work=$(mktemp -d); trap 'rm -rf "$work"; ip netns del $NS 2>/dev/null || true' EXIT
gcc -O2 -Wall -o "$work/floor" "$here/floor_epoll.c" -lpthread
ip netns add $NS; ip -n $NS link set lo up
for r in $(seq "$rounds"); do
  for mode in 0 1; do
    ip netns exec $NS tcpdump -i lo -n -U --immediate-mode --time-stamp-precision=nano \
      -w "$work/c.pcap" icmp 2>/dev/null &
    td=$!; sleep 1
    # floor_epoll prints "seq t1k t4k t1"; excess.py reads the first three.
    ip netns exec $NS "$work/floor" "$mode" "$count" "$interval" | cut -d' ' -f1-3 > "$work/c.txt"
    sleep 0.3; kill "$td"; wait "$td" 2>/dev/null || true
    read -r n med p99 < <(python3 "$here/excess.py" "$work/c.pcap" "$work/c.txt")
    printf 'round %s mode %s: %6s probes  excess median %6s ns  p99 %6s ns\n' "$r" "$mode" "$n" "$med" "$p99"
  done
done

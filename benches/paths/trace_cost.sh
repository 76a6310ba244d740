#!/usr/bin/env bash
# What a trace costs under the routers' ICMP limits (BENCHMARKS.md, "What
# a trace costs"): a client, a router that splits over two others by ECMP,
# and a destination, in network namespaces (10.213.0.0/16 exists only in
# them); the same daemon-like trace (99.9 %, 20 flows, one measuring round)
# timed with every router's and the destination's icmp_ratelimit at 0,
# 100 ms (the fleet lab's, scaled) and 1000 ms (Linux's default),
# alternating, ROUNDS times each. Root; PROBER is the binary.
set -euo pipefail
PROBER=${PROBER:-target/release/prober}
ROUNDS=${ROUNDS:-3}
T=trcost
ns() { ip netns exec "$T-$1" "${@:2}"; }
cleanup() { for n in a r0 r1 r2 b; do ip netns del "$T-$n" 2>/dev/null || true; done; }
trap cleanup EXIT
cleanup
for n in a r0 r1 r2 b; do ip netns add "$T-$n"; ns "$n" ip link set lo up; done
link() { # ns if addr peer-ns peer-if peer-addr
  ns "$1" ip link add "$2" type veth peer name "$5"
  ns "$1" ip link set "$5" netns "$T-$4"
  ns "$1" ip addr add "$3/30" dev "$2"; ns "$1" ip link set "$2" up
  ns "$4" ip addr add "$6/30" dev "$5"; ns "$4" ip link set "$5" up
}
link a a0 10.213.0.1 r0 r0a 10.213.0.2
link r0 r01 10.213.1.1 r1 r1a 10.213.1.2
link r0 r02 10.213.2.1 r2 r2a 10.213.2.2
link r1 r1b 10.213.3.1 b b1 10.213.3.2
link r2 r2b 10.213.4.1 b b2 10.213.4.2
ns a ip route add default via 10.213.0.2
ns r0 sysctl -qw net.ipv4.ip_forward=1 net.ipv4.fib_multipath_hash_policy=1
ns r0 ip route add 10.213.9.1/32 nexthop via 10.213.1.2 dev r01 nexthop via 10.213.2.2 dev r02
for r in 1 2; do
  ns r$r sysctl -qw net.ipv4.ip_forward=1
  ns r$r ip route add 10.213.9.1/32 via 10.213.$((r + 2)).2
  ns r$r ip route add 10.213.0.0/30 via 10.213.$r.1
done
ns b ip addr add 10.213.9.1/32 dev lo
ns b ip route add 10.213.0.0/30 nexthop via 10.213.3.1 dev b1 nexthop via 10.213.4.1 dev b2
for i in $(seq "$ROUNDS"); do
  for rl in 0 100 1000; do
    for n in r0 r1 r2 b; do ns $n sysctl -qw net.ipv4.icmp_ratelimit=$rl; done
    sleep 2 # every limiter full again
    s=$(date +%s.%N)
    out=$(ns a "$PROBER" run --trace 10.213.9.1 --trace-confidence 99.9 -c 1 -i 10ms -o json | tail -1)
    e=$(date +%s.%N)
    echo "round $i icmp_ratelimit=${rl}ms: $(echo "$e - $s" | bc) s; $(echo "$out" | python3 -c 'import json,sys; t=json.load(sys.stdin); print(t["flows"], "flows,", len(t["paths"]), "paths")')"
  done
done

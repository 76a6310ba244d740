#!/usr/bin/env bash
# prober's ICMP kernel RTT against a packet capture, next to the kernel's
# own floor: a minimal sender (floor_ping.py: one raw socket, the same
# transmit stamp, no runtime) measured the same way, in the same namespace,
# alternating, ROUNDS times. The excess of the kernel RTT over the
# capture's RTT that the minimal sender shows is the kernel's path from the
# software transmit stamp to the capture tap; prober's excess beyond it is
# prober's. Needs root (a network namespace) and tcpdump.
#
# usage: benches/capture/floor.sh [ROUNDS] [COUNT] [INTERVAL]
#        (defaults: 5 rounds of 300 probes at 10ms)
set -euo pipefail
cd "$(dirname "$0")/../.."
ROUNDS=${1:-5} COUNT=${2:-300} INTERVAL=${3:-10ms}
SECS=$(python3 -c "import sys; v='$INTERVAL'; print(float(v[:-2])/1e3 if v.endswith('ms') else float(v.rstrip('s')))")
PROBER=${PROBER:-target/release/prober}
[ -x "$PROBER" ] || cargo build --release --locked -p prober-cli
NS=prober-floor-$$
TMP=$(mktemp -d)
trap 'ip netns del $NS 2>/dev/null; rm -rf $TMP' EXIT
ip netns add $NS
ip -n $NS link set lo up
one() { # label command...
  local label=$1; shift
  ip netns exec $NS tcpdump -i lo -n -U --immediate-mode --time-stamp-precision=nano \
    -w $TMP/c.pcap icmp 2>$TMP/td.err &
  local td=$!
  sleep 1
  ip netns exec $NS "$@" >$TMP/out 2>/dev/null
  sleep 0.3
  kill $td; wait $td 2>/dev/null || true
  read -r n med p99 < <(python3 benches/capture/excess.py $TMP/c.pcap $TMP/out)
  printf '%-8s %6s probes  excess median %6s ns  p99 %6s ns\n' "$label" "$n" "$med" "$p99"
}
for r in $(seq "$ROUNDS"); do
  echo "round $r"
  one floor python3 benches/capture/floor_ping.py "$COUNT" "$SECS"
  one prober "$PROBER" ${PROBER_ARGS:-} run -o json -c "$COUNT" -i "$INTERVAL" --icmp-socket raw 127.0.0.1
done

#!/usr/bin/env bash
# Receive modes against each other: UDP at one interval, `--receive async`,
# `--receive adaptive` and `--busy-poll`, alternating, ROUNDS times.
# Prints RTT p50/p99, the client wake part (t4 - t4k) p50, the client's CPU
# and adaptive receive's spin counts. Loopback only.
#
#   bash benches/receive/run.sh                 # responder as usual
#   PIN=1 bash benches/receive/run.sh           # responder busy-polling on CPU 1,
#                                               # prober on CPU 0: no IPI to an idle
#                                               # vCPU inside the send
#   I=10ms C=1000 ROUNDS=2 bash benches/receive/run.sh
#   PROTO=tcp bash benches/receive/run.sh       # tcp:// (default udp://)
#   PROTO=icmp bash benches/receive/run.sh      # icmp://127.0.0.1 (root; no responder)
#   CPU_LATENCY=0us bash benches/receive/run.sh # the client holds a PM QoS CPU latency
#                                               # request (--cpu-latency): idle CPUs poll
#                                               # instead of sleeping
set -euo pipefail
cd "$(dirname "$0")/../.."
P=${PROBER:-target/release/prober}
[ -x "$P" ] || cargo build --release -p prober-cli
I=${I:-10ms}; C=${C:-1000}; ROUNDS=${ROUNDS:-2}; PROTO=${PROTO:-udp}
port=$((30000 + RANDOM % 20000))
client=("$P")
[ -n "${PIN:-}" ] && client=(taskset -c 0 "$P")
[ -n "${CPU_LATENCY:-}" ] && client+=(--cpu-latency "$CPU_LATENCY")
if [ "$PROTO" = icmp ]; then
  # The kernel answers.
  target=icmp://127.0.0.1
else
  target=$PROTO://127.0.0.1:$port
  if [ -n "${PIN:-}" ]; then
    taskset -c 1 "$P" serve "--$PROTO" "127.0.0.1:$port" --busy-poll --quiet 2> /dev/null &
  else
    "$P" serve "--$PROTO" "127.0.0.1:$port" --quiet 2> /dev/null &
  fi
  server=$!
  trap 'kill $server' EXIT
  sleep 0.5
fi
t=$(mktemp)
for round in $(seq "$ROUNDS"); do
  for mode in async adaptive busy-poll; do
    extra=(--receive "$mode")
    [ "$mode" = busy-poll ] && extra=(--busy-poll)
    /usr/bin/time -f "%U %S %e" -o "$t" "${client[@]}" run "$target" \
      -i "$I" -c "$C" "${extra[@]}" -o json 2> /dev/null |
      python3 -c "
import json, sys
lines = [json.loads(x) for x in sys.stdin]
r = sorted(x['rtt_ns'] for x in lines if x.get('type') == 'probe' and x.get('rtt_ns'))
s = [x for x in lines if x.get('type') == 'summary'][0]
u, sy, e = map(float, open(sys.argv[2]).read().split())
sp = s.get('spin')
spin = '-' if not sp else '%d of %d caught, %.1f µs each' % (sp['caught'], sp['probes'], sp['ns'] / max(1, sp['probes']) / 1e3)
print('round %s %-9s RTT p50 %6.1f p99 %6.1f µs  client wake p50 %5.1f µs  CPU %5.1f %%  spin %s' % (
    sys.argv[3], sys.argv[1], r[len(r) // 2] / 1e3, r[int(len(r) * .99)] / 1e3,
    s['parts']['client_wake']['p50'] / 1e3, (u + sy) / e * 100, spin))" "$mode" "$t" "$round"
  done
done
rm -f "$t"

#!/usr/bin/env bash
# `prober run`'s two receive modes against each other for UDP, TCP, ICMP and
# gRPC: `--receive async` and `--receive adaptive --spin-share 1` (run's
# default), alternating, ROUNDS times, against one `prober serve`. Prints
# RTT p50/p99, the client wake part (t4 - t4k) p50 and the client's CPU
# (user + sys over wall time). Loopback only; ICMP needs root.
#
#   bash benches/receive/modes.sh                    # 10 ms, 500 probes each
#   I=0 C=5000 bash benches/receive/modes.sh         # back to back
#   PROTOS="udp grpc" ROUNDS=3 bash benches/receive/modes.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
P=${PROBER:-target/release/prober}
[ -x "$P" ] || cargo build --release -p prober-cli
I=${I:-10ms}; C=${C:-500}; ROUNDS=${ROUNDS:-2}
port=$((30000 + RANDOM % 20000))
"$P" serve --udp 127.0.0.1:$port --tcp 127.0.0.1:$port --grpc 127.0.0.1:$((port+1)) --quiet 2>/dev/null &
server=$!
t=$(mktemp)
trap 'kill $server; rm -f "$t"' EXIT
sleep 0.7
for round in $(seq "$ROUNDS"); do
 for proto in ${PROTOS:-udp tcp icmp grpc}; do
  case $proto in icmp) url=icmp://127.0.0.1;; grpc) url=grpc://127.0.0.1:$((port+1));; *) url=$proto://127.0.0.1:$port;; esac
  for mode in async adaptive; do
    extra=(--receive async)
    [ "$mode" = adaptive ] && extra=(--receive adaptive --spin-share 1)
    /usr/bin/time -f "%U %S %e" -o "$t" "$P" run "$url" -i "$I" -c "$C" "${extra[@]}" -o json 2>/dev/null |
      python3 -c "
import json, sys
lines = [json.loads(x) for x in sys.stdin]
r = sorted(x['rtt_ns'] for x in lines if x.get('type') == 'probe' and x.get('rtt_ns'))
s = [x for x in lines if x.get('type') == 'summary'][0]
u, sy, e = map(float, open(sys.argv[2]).read().split())
cw = s.get('parts', {}).get('client_wake', {}).get('p50')
print('round %s %-5s %-9s RTT p50 %6.1f p99 %6.1f µs  wake %s  CPU %5.1f %%' % (
    sys.argv[3], sys.argv[4], sys.argv[1], r[len(r) // 2] / 1e3, r[int(len(r) * .99)] / 1e3,
    '-' if cw is None else '%.1f' % (cw/1e3), (u + sy) / e * 100))" "$mode" "$t" "$round" "$proto"
  done
 done
done

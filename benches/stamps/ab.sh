#!/usr/bin/env bash
# Two builds' transmit-stamp cost side by side: each round runs, back to
# back (-i 0, COUNT probes), build A with stamps, build B with stamps, and
# build B with --no-tx-stamps, in that order, against B's responder; prints
# each run's RTT p50 and client wake p50 (ns). Rounds alternate the three,
# so the machine's slow and fast states fall on all of them. Loopback only.
#
#   A=/tmp/prober-old B=target/release/prober T=udp R=9 C=5000 bash benches/stamps/ab.sh
#   T=tcp, T=grpc: the same over tcp:// or grpc://
#   PIN=1 ...   client on CPU 0, responder on CPU 1 (taskset)
set -euo pipefail
A=${A:?A=path to the first build}
B=${B:-target/release/prober}
T=${T:-udp}; R=${R:-9}; C=${C:-5000}
port=$((30000 + RANDOM % 20000))
client=(); server=()
if [ -n "${PIN:-}" ]; then client=(taskset -c 0); server=(taskset -c 1); fi
"${server[@]}" "$B" serve --quiet --udp "127.0.0.1:$port" --tcp "127.0.0.1:$port" \
  --grpc "127.0.0.1:$((port + 1))" >/dev/null &
srv=$!
trap 'kill $srv' EXIT
sleep 0.5
p50() { # BUILD [RUN OPTIONS]
  local bin=$1 at=$port
  shift
  [ "$T" = grpc ] && at=$((port + 1))
  "${client[@]}" "$bin" run -q -o json -c "$C" -i 0 "$@" "$T://127.0.0.1:$at" | python3 -c 'import json,sys
for l in sys.stdin:
    d=json.loads(l)
    if d.get("type")=="summary":
        w=(d.get("parts") or {}).get("client_wake") or {}
        print(int(d["rtt"]["p50"]), int(w.get("p50") or 0))'
}
echo "round | A on: rtt wake | B on: rtt wake | B off: rtt wake"
for ((r = 1; r <= R; r++)); do
  echo "$r | $(p50 "$A") | $(p50 "$B") | $(p50 "$B" --no-tx-stamps)"
done

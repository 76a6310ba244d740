#!/usr/bin/env bash
# The daemon's send lag at a 10 ms interval, one UDP target (its own
# responder on loopback), timer pacing, against `prober run` at the same
# settings. Loopback only; 2 x 20 s each, alternating.
#
#   bash benches/scale/pacing.sh                      # this build
#   PROBER=/tmp/prober-old bash benches/scale/pacing.sh   # another build
set -euo pipefail
cd "$(dirname "$0")/../.."
PROBER=${PROBER:-target/release/prober}
[ -x "$PROBER" ] || cargo build --release -p prober-cli
lag() {
  python3 -c "
import json, sys
l = sorted(json.loads(x)['send_lag_ns'] for x in open(sys.argv[1]) if 'send_lag_ns' in x)
print('n %d, send lag p50 %.0f / p99 %.0f µs' % (len(l), l[len(l) // 2] / 1e3, l[int(len(l) * .99)] / 1e3))" "$1"
}
for round in 1 2; do
  w=$(mktemp -d /tmp/prober-pacing.XXXXXX)
  port=$((30000 + RANDOM % 20000))
  cat > "$w/p.toml" <<TOML
[serve]
udp = "127.0.0.1:$port"

[[job]]
name = "u"
interval = "10ms"
timeout = "1s"
targets = ["udp://127.0.0.1:$port"]
sinks = { jsonl = { path = "u.jsonl" } }
TOML
  "$PROBER" serve --quiet --config "$w/p.toml" > /dev/null 2>&1 &
  pid=$!
  sleep 20
  kill -TERM "$pid"
  wait "$pid" || true
  echo "round $round daemon:     $(lag "$w/u.jsonl")"
  "$PROBER" serve --udp "127.0.0.1:$port" --quiet > /dev/null 2>&1 &
  pid=$!
  sleep 0.5
  "$PROBER" run "udp://127.0.0.1:$port" -i 10ms -c 2000 -o json 2> /dev/null > "$w/run.jsonl"
  kill -TERM "$pid"
  wait "$pid" || true
  echo "round $round prober run: $(lag "$w/run.jsonl")"
  rm -rf "$w"
done

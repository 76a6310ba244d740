#!/usr/bin/env bash
# The split under load (issue "The fleet lab"): four targets (tcp://, udp://,
# grpc://, http://) at 5 ms against `prober serve`, in rounds that alternate a
# quiet machine and one with LOADS busy loops beside it, and, with B set, two
# builds alternated within each. Prints per round and protocol the share of
# answered probes whose split has every part, and why the rest lack one (the
# summary's split.missing). Every loop is bounded: COUNT probes a target, the
# busy loops by `timeout`.
#   A=target/release/prober [B=/tmp/prober-before] ROUNDS=5 bash benches/stamps/under_load.sh
set -euo pipefail
A=${A:-target/release/prober}
B=${B:-}
ROUNDS=${ROUNDS:-5}
COUNT=${COUNT:-400}
LOADS=${LOADS:-2}
tmp=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$tmp"' EXIT

serve() {
  "$1" serve --tcp 127.0.0.1:0 --udp 127.0.0.1:0 --grpc 127.0.0.1:0 --http 127.0.0.1:0 >"$tmp/serve.out" 2>&1 &
  echo $! >"$tmp/serve.pid"
  for _ in $(seq 100); do
    grep -q "listening http" "$tmp/serve.out" 2>/dev/null && break
    sleep 0.05
  done
}

addr() { grep -oE "^listening $1 [0-9.]+:[0-9]+" "$tmp/serve.out" | grep -oE "[0-9.]+:[0-9]+$"; }

one() { # binary, label
  serve "$1"
  local t="tcp://$(addr tcp) udp://$(addr udp) grpc://$(addr grpc) http://$(addr http)/echo"
  # shellcheck disable=SC2086
  "$1" run -q -c "$COUNT" -i 5ms -o json $t >"$tmp/out.json" 2>/dev/null || true
  kill "$(cat "$tmp/serve.pid")" 2>/dev/null || true
  wait "$(cat "$tmp/serve.pid")" 2>/dev/null || true
  python3 - "$tmp/out.json" "$2" <<'PY'
import json, sys
rows = []
for line in open(sys.argv[1]):
    d = json.loads(line)
    if d.get("type") != "summary":
        continue
    sp = d.get("split") or {}
    ok = d.get("ok", 0)
    miss = ", ".join(f"{k} {v}" for k, v in sorted((sp.get("missing") or {}).items(), key=lambda x: -x[1]))
    rows.append(f"{d['protocol']} {sp.get('complete', 0) / max(ok, 1) * 100:.1f}% of {ok}" + (f" ({miss})" if miss else ""))
print(f"{sys.argv[2]:<24} " + " | ".join(rows))
PY
}

echo "four targets at 5 ms, $COUNT probes each; share of answered probes with every part"
for r in $(seq "$ROUNDS"); do
  for load in 0 "$LOADS"; do
    pids=()
    for _ in $(seq "$load"); do
      timeout 120 sh -c 'while :; do :; done' &
      pids+=($!)
    done
    one "$A" "round $r A load=$load"
    [ -n "$B" ] && one "$B" "round $r B load=$load"
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  done
done

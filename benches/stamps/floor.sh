#!/usr/bin/env bash
# The kernel's own price of a transmit stamp next to prober's: each round
# runs, alternating, a minimal C UDP ping-pong (floor_udp.c: forked echo
# server, blocking client) without and with SO_TIMESTAMPING transmit
# stamps, and `prober run udp://` against `prober serve --udp` with
# --no-tx-stamps and without. Back to back, COUNT round trips each; prints
# each round's p50 (ns) and the medians. Loopback only.
#
#   bash benches/stamps/floor.sh [COUNT] [ROUNDS]    (default 20000, 7)
set -euo pipefail
cd "$(dirname "$0")/../.."
count=${1:-20000}
rounds=${2:-7}
PROBER=${PROBER:-target/release/prober}
[ -x "$PROBER" ] || cargo build --release --locked -p prober-cli >/dev/null 2>&1
work=$(mktemp -d /tmp/prober-stamp-floor.XXXXXX)
cc -O2 -o "$work/floor_udp" benches/stamps/floor_udp.c
port=$((30000 + RANDOM % 20000))
"$PROBER" serve --quiet --udp "127.0.0.1:$port" >/dev/null &
srv=$!
trap 'kill $srv 2>/dev/null; rm -rf "$work"' EXIT
sleep 0.5
prober_p50() {
  "$PROBER" run -q -o json -c "$count" -i 0 "$@" "udp://127.0.0.1:$port" |
    python3 -c 'import json,sys
for l in sys.stdin:
    d=json.loads(l)
    if d.get("type")=="summary": print(int(d["rtt"]["p50"]))'
}
printf '%-6s %-12s %-12s %-12s %-12s\n' round "C off" "C on" "prober off" "prober on"
: > "$work/rows"
for ((r = 1; r <= rounds; r++)); do
  a=$("$work/floor_udp" $((port + 1)) "$count" 0 2>/dev/null)
  b=$("$work/floor_udp" $((port + 1)) "$count" 1 2>/dev/null)
  c=$(prober_p50 --no-tx-stamps)
  d=$(prober_p50)
  printf '%-6s %-12s %-12s %-12s %-12s\n' "$r" "$a" "$b" "$c" "$d"
  echo "$a $b $c $d" >> "$work/rows"
done
python3 - "$work/rows" <<'PY'
import statistics, sys
rows = [list(map(int, l.split())) for l in open(sys.argv[1])]
med = [statistics.median(c) for c in zip(*rows)]
print(f"median  {med[0]:<12.0f} {med[1]:<12.0f} {med[2]:<12.0f} {med[3]:<12.0f}")
print(f"cost: kernel alone {med[1] - med[0]:+.0f} ns, prober {med[3] - med[2]:+.0f} ns")
d = sorted(r[1] - r[0] for r in rows); e = sorted(r[3] - r[2] for r in rows)
print(f"per-round cost, kernel alone: {d}")
print(f"per-round cost, prober:       {e}")
PY

#!/usr/bin/env bash
# The seed experiment: ICMP and TCP on loopback from 1 µs to 1 s, at timer,
# hybrid and spin pacing; writes one sweep file per pacing, the report and
# its Markdown table under OUT (default docs/sweep). About 5 minutes.
#   benches/sweep/seed.sh [OUT]
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${1:-docs/sweep}
bin=target/release/prober
[ -x "$bin" ] || cargo build --release --locked -p prober-cli
mkdir -p "$out"
"$bin" serve --tcp 127.0.0.1:0 --quiet > "$out/.serve" &
serve=$!
trap 'kill $serve 2>/dev/null || true' EXIT
for _ in $(seq 50); do grep -q "listening tcp" "$out/.serve" 2>/dev/null && break; sleep 0.1; done
tcp=$(awk '/listening tcp/ {print $3}' "$out/.serve")
for pacing in timer hybrid spin; do
  "$bin" sweep --intervals 1us..1s -c 40 --warmup 2 --seed 1 --pacing "$pacing" -o json \
    icmp://127.0.0.1 "tcp://$tcp" > "$out/sweep-$pacing.json" 2> "$out/sweep-$pacing.txt"
done
"$bin" report "$out"/sweep-timer.json "$out"/sweep-hybrid.json "$out"/sweep-spin.json -o "$out/report.html"
rm -f "$out/.serve"

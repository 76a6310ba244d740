#!/usr/bin/env bash
# What kernel transmit stamps cost: back-to-back RR p50 per protocol with
# stamps on and off (--no-tx-stamps: no client transmit stamps and no
# responder follow-up frames), in one run, alternating on and off, ROUNDS
# rounds; prints each round's p50 and the median of each side.
#
#   benches/stamps/cost.sh [COUNT] [ROUNDS]     (default 20000 probes, 5 rounds)
#
# TARGETS (space-separated) picks the targets; by default ICMP, UDP, TCP,
# STAMP, tcp-connect and tcp-crr (whose stamps come from a packet socket
# that sees every SYN: prober_net::syntap).
#
# Loopback only. ICMP uses a raw socket (run as root).
set -euo pipefail
cd "$(dirname "$0")/../.."
count=${1:-20000}
rounds=${2:-5}
cargo build --release --locked -p prober-cli >/dev/null 2>&1
bin=target/release/prober
$bin serve --quiet --tcp 127.0.0.1:18707 --udp 127.0.0.1:18707 --stamp 127.0.0.1:18862 --stamp-rate 0 >/dev/null &
srv=$!
trap 'kill $srv 2>/dev/null' EXIT
sleep 0.5
p50() {
  "$bin" run -q -o json -c "$count" -i 0 "$@" \
    | python3 -c 'import json,sys
for l in sys.stdin:
    d=json.loads(l)
    if d.get("type")=="summary": print(d["rtt"]["p50"])'
}
median() { python3 -c 'import sys,statistics; print(int(statistics.median(int(x) for x in sys.argv[1:])))' "$@"; }
printf '%-26s %-40s %-40s %s\n' target "stamps on: p50 per round (ns)" "stamps off" "median on / off"
targets=${TARGETS:-icmp://127.0.0.1 udp://127.0.0.1:18707 tcp://127.0.0.1:18707 stamp://127.0.0.1:18862 tcp-connect://127.0.0.1:18707 tcp-crr://127.0.0.1:18707}
for t in $targets; do
  extra=()
  [[ $t == icmp* ]] && extra=(--icmp-socket raw)
  on=(); off=()
  for ((r = 0; r < rounds; r++)); do
    on+=("$(p50 "${extra[@]}" "$t")")
    off+=("$(p50 "${extra[@]}" --no-tx-stamps "$t")")
  done
  mon=$(median "${on[@]}"); moff=$(median "${off[@]}")
  printf '%-26s %-40s %-40s %s / %s (%+d ns)\n' "$t" "${on[*]}" "${off[*]}" "$mon" "$moff" $((mon - moff))
done

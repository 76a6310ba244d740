#!/usr/bin/env bash
# prober's responder against sockperf's own server, loaded by sockperf's
# own clients (`prober serve --sockperf`, docs/sockperf.md), rounds
# alternating the two servers. Per server and round:
# - `sockperf throughput` (64 B, T seconds): the client's send rate, what
#   the kernel delivered to the server's socket (/proc/net/snmp Udp
#   InDatagrams) and dropped for a full buffer (RcvbufErrors), the server's
#   CPU (utime + stime from /proc/PID/stat), and messages per CPU second;
# - `sockperf under-load --mps MPS` (a reply every 100th message, as
#   sockperf does by default): latency p50 / p99 and the server's CPU.
# Loopback only. Needs sockperf (apt) and a release build.
#
#   ROUNDS=3 T=5 MPS=50000 bash benches/peers/sockperf_server.sh
#
# With TCP=1, over TCP (`--tcp`, `sockperf server --tcp`): `sockperf
# ping-pong` p50 / p99 and the server's cores, then `under-load` as above.
set -euo pipefail
cd "$(dirname "$0")/../.."
ROUNDS=${ROUNDS:-3}
T=${T:-5}
MPS=${MPS:-50000}
PROBER=${PROBER:-target/release/prober}
[ -x "$PROBER" ] || cargo build --release --locked -p prober-cli
clk=$(getconf CLK_TCK)
port=$((30000 + RANDOM % 20000))
ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
udp() { awk '/^Udp: [0-9]/ {print $2, $6}' /proc/net/snmp; }  # InDatagrams RcvbufErrors
start() {
  case $1 in
    prober) "$PROBER" ${PROBER_ARGS:-} serve --quiet --sockperf "127.0.0.1:$port" >/dev/null 2>&1 & ;;
    sockperf) sockperf server -i 127.0.0.1 -p "$port" ${TCP:+--tcp} >/dev/null 2>&1 & ;;
  esac
  pid=$!
  sleep 0.5
}
pct() { awk '/percentile 50.000/ {p50=$NF} /percentile 99.000/ {p99=$NF} END {print p50 "/" p99}'; }
if [ -n "${TCP:-}" ]; then
  printf '%-9s %-5s %-18s %-7s %-18s %s\n' server round "ping-pong p50/p99" cores "under-load p50/p99" cores
  for ((r = 1; r <= ROUNDS; r++)); do
    for server in prober sockperf; do
      start "$server"
      c0=$(ticks "$pid"); s0=$(date +%s.%N)
      pp=$(sockperf ping-pong --tcp -i 127.0.0.1 -p "$port" -m 64 -t "$T" 2>&1 | pct)
      c1=$(ticks "$pid"); s1=$(date +%s.%N)
      ul=$(sockperf under-load --tcp -i 127.0.0.1 -p "$port" -m 64 -t "$T" --mps "$MPS" 2>&1 | pct)
      c2=$(ticks "$pid"); s2=$(date +%s.%N)
      kill "$pid"; wait "$pid" 2>/dev/null || true
      awk -v s="$server" -v r="$r" -v pp="$pp" -v ul="$ul" -v clk="$clk" \
        -v c0="$c0" -v c1="$c1" -v c2="$c2" -v s0="$s0" -v s1="$s1" -v s2="$s2" \
        'BEGIN {printf "%-9s %-5s %-18s %-7.3f %-18s %.3f\n", s, r, pp, (c1-c0)/clk/(s1-s0), ul, (c2-c1)/clk/(s2-s1)}'
    done
  done
  exit 0
fi
printf '%-9s %-5s %-13s %-13s %-9s %-7s %-15s %-18s %s\n' server round "client msg/s" "delivered/s" drops "cores" "msgs per cpu s" "under-load p50/p99" "cores"
for ((r = 1; r <= ROUNDS; r++)); do
  for server in prober sockperf; do
    start "$server"
    read -r in0 drop0 < <(udp); c0=$(ticks "$pid"); s0=$(date +%s.%N)
    rate=$(sockperf throughput -i 127.0.0.1 -p "$port" -m 64 -t "$T" 2>&1 | awk '/Message Rate is/ {print $6}')
    read -r in1 drop1 < <(udp); c1=$(ticks "$pid"); s1=$(date +%s.%N)
    ul=$(sockperf under-load -i 127.0.0.1 -p "$port" -m 64 -t "$T" --mps "$MPS" 2>&1 | pct)
    c2=$(ticks "$pid"); s2=$(date +%s.%N)
    kill "$pid"; wait "$pid" 2>/dev/null || true
    python3 - "$server" "$r" "$rate" "$in0" "$in1" "$drop0" "$drop1" "$c0" "$c1" "$c2" "$s0" "$s1" "$s2" "$clk" "$ul" <<'PY'
import sys
server, r, rate, in0, in1, d0, d1, c0, c1, c2, s0, s1, s2, clk, ul = sys.argv[1:]
wall = float(s1) - float(s0)
got = int(in1) - int(in0)
cpu = (int(c1) - int(c0)) / int(clk)
cpu2 = (int(c2) - int(c1)) / int(clk) / (float(s2) - float(s1))
per = got / cpu if cpu else float("inf")
print(f"{server:<9} {r:<5} {rate:<13} {got / wall:<13.0f} {int(d1) - int(d0):<9} {cpu / wall:<7.3f} {per:<15.0f} {ul:<18} {cpu2:.3f}")
PY
  done
done

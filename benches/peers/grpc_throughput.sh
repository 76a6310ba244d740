#!/usr/bin/env bash
# The gRPC responder under load, as ghz's users load a server: `ghz -c 50`,
# N calls a run, against `prober serve --grpc` on one runtime thread (the
# default), on one per CPU (`--threads 0`), and against the grpc-go echo
# server, alternating, ROUNDS rounds. Prints requests/s (ghz's) and the
# server's CPU per request (utime + stime from /proc/PID/stat). Loopback
# only; ghz and the grpc-go server are built as grpc_cross.sh builds them.
#
#   ROUNDS=3 N=100000 bash benches/peers/grpc_throughput.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
ROUNDS=${ROUNDS:-3}
N=${N:-100000}
. benches/peers/grpc_tools.sh
clk=$(getconf CLK_TCK)
one() {
  local port=$((30000 + RANDOM % 20000))
  case $1 in
    prober) "$PROBER" serve --quiet --grpc "127.0.0.1:$port" >/dev/null 2>&1 & ;;
    prober-threads-0) "$PROBER" --threads 0 serve --quiet --grpc "127.0.0.1:$port" >/dev/null 2>&1 & ;;
    grpc-go) "$BIN/grpc-go-echo" -listen "127.0.0.1:$port" 2>/dev/null & ;;
  esac
  local pid=$!
  sleep 0.5
  local t0 t1 rps
  t0=$(awk '{print $14 + $15}' "/proc/$pid/stat")
  rps=$("$BIN/ghz" --insecure --proto proto/prober/v1/echo.proto --call prober.v1.Echo.Ping \
    -c 50 -n "$N" -d '{"seq":1}' "127.0.0.1:$port" 2>&1 | awk '/Requests\/sec/ {print $2}')
  t1=$(awk '{print $14 + $15}' "/proc/$pid/stat")
  kill "$pid"; wait "$pid" 2>/dev/null || true
  awk -v s="$1" -v r="$2" -v rps="$rps" -v c0="$t0" -v c1="$t1" -v clk="$clk" -v n="$N" \
    'BEGIN {printf "%-17s %-6s %-13s %.2f\n", s, r, rps, (c1 - c0) / clk * 1e6 / n}'
}
printf '%-17s %-6s %-13s %s\n' server round requests/s "server CPU µs per request"
for ((r = 1; r <= ROUNDS; r++)); do
  for s in prober grpc-go prober-threads-0; do one "$s" "$r"; done
done

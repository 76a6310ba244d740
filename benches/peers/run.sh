#!/usr/bin/env bash
# Peer comparison: prober against ping, sockperf, qperf and ghz, on loopback
# only, then BENCHMARKS.md at the repository root.
#
#   bash benches/peers/run.sh
#
# On a fresh Debian 12 machine (as root) it installs what it needs: the
# Debian packages iputils-ping fping sockperf qperf time (and golang-go when
# `go` is missing), and ghz with `go install` into benches/peers/.bin. It
# builds target/release/prober only if that binary is missing.
#
# Environment:
#   ROUNDS=3        rounds; each round runs prober (A) then the peer (B)
#   PROBER=...      prober binary (default target/release/prober)
#   OUT=...         raw outputs (default benches/peers/out, gitignored)
#   REPORT=...      report to write (default BENCHMARKS.md at the repo root)
#   SKIP_INSTALL=1  do not run apt-get / go install
#
# Every load is bounded in count and in time (each command runs under
# `timeout`), and every target is 127.0.0.1. A peer that cannot be installed
# or fails gets a "not available: reason" row; the run carries on.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
cd "$ROOT"

ROUNDS=${ROUNDS:-3}
PROBER=${PROBER:-$ROOT/target/release/prober}
OUT=${OUT:-$HERE/out}
REPORT=${REPORT:-$ROOT/BENCHMARKS.md}
BIN=$HERE/.bin
PROTO=proto/prober/v1/echo.proto
export PATH="$BIN:$PATH"

case $ROUNDS in '' | *[!0-9]* | 0) echo "ROUNDS must be a positive integer" >&2; exit 2 ;; esac

rm -rf "$OUT"
mkdir -p "$OUT/na" "$BIN"
date -u +%Y-%m-%dT%H:%M:%SZ > "$OUT/started"
date +%s > "$OUT/started.s"
cat /proc/loadavg > "$OUT/loadavg.start"
echo "$ROUNDS" > "$OUT/rounds"

log() { printf '[peers] %s\n' "$*" >&2; }
# na TOOL REASON: mark a peer as not available (the report shows the reason).
na() { log "$1 not available: $2"; printf '%s\n' "$2" > "$OUT/na/$1"; }
have() { command -v "$1" > /dev/null 2>&1; }

# ---------------------------------------------------------------- install
install_deps() {
  if [[ ${SKIP_INSTALL:-0} == 1 ]]; then
    log "SKIP_INSTALL=1: not installing anything"
    return 0
  fi
  if have apt-get && [[ $(id -u) == 0 ]]; then
    local pkgs=(iputils-ping fping sockperf qperf time)
    have go || pkgs+=(golang-go)
    log "apt-get update"
    apt-get update > "$OUT/apt.log" 2>&1 || log "apt-get update failed (see $OUT/apt.log)"
    log "apt-get install -y ${pkgs[*]}"
    if ! DEBIAN_FRONTEND=noninteractive apt-get install -y "${pkgs[@]}" >> "$OUT/apt.log" 2>&1; then
      # One missing package fails the whole command: try them one by one.
      local p
      for p in "${pkgs[@]}"; do
        DEBIAN_FRONTEND=noninteractive apt-get install -y "$p" >> "$OUT/apt.log" 2>&1 ||
          log "apt-get install $p failed (see $OUT/apt.log)"
      done
    fi
  else
    log "not root or no apt-get: using the tools already installed"
  fi
  if ! have ghz; then
    if have go; then
      log "go install github.com/bojand/ghz/cmd/ghz@latest (GOBIN=$BIN)"
      GOBIN=$BIN go install github.com/bojand/ghz/cmd/ghz@latest > "$OUT/ghz-install.log" 2>&1 ||
        log "go install ghz failed (see $OUT/ghz-install.log)"
    fi
  fi
}
install_deps

if [[ ! -x $PROBER ]]; then
  log "building $PROBER"
  if ! have cargo || ! cargo build --release -p prober-cli; then
    log "no prober binary at $PROBER and the build failed"
    exit 1
  fi
fi
# The platform floor (benches/src/bin/floor.rs): a bare spin loop's gaps and
# plain sleeps' lateness, measured beside the pacing rows.
FLOOR=${FLOOR:-$ROOT/target/release/floor}
if [[ ! -x $FLOOR ]]; then
  log "building $FLOOR"
  have cargo && cargo build --release -p prober-benches --bin floor || true
fi
[[ -x $FLOOR ]] || echo "no floor binary at $FLOOR (cargo build --release -p prober-benches --bin floor)" > "$OUT/na/floor"
# The minimal raw-HTTP/2 gRPC client (crates/prober-grpc/examples/h2ping.rs),
# the reference for how much of a gRPC round trip is the client library.
H2PING=${H2PING:-$ROOT/target/release/examples/h2ping}
if [[ ! -x $H2PING ]]; then
  log "building $H2PING"
  have cargo && cargo build --release -p prober-grpc --example h2ping || true
fi
[[ -x $H2PING ]] || echo "no h2ping binary at $H2PING (cargo build --release -p prober-grpc --example h2ping)" > "$OUT/na/h2ping"

have ping || na ping "ping not installed"
have sockperf || na sockperf "sockperf not installed"
have qperf || na qperf "qperf not installed"
have ghz || na ghz "ghz not installed (needs go and the Go module proxy)"
if [[ -x /usr/bin/time ]]; then TIMECMD=(/usr/bin/time -f '%e %U %S'); else TIMECMD=(); fi

# ---------------------------------------------------------------- helpers
# Shell-quote only the words that need it, so the logged commands stay readable.
quote() {
  local out='' w
  for w in "$@"; do
    if [[ $w =~ ^[A-Za-z0-9_./:=,@+%-]+$ ]]; then out+="$w "; else out+="'${w//\'/\'\\\'\'}' "; fi
  done
  printf '%s' "${out% }"
}

# run ROUND NAME LIMIT CMD...: run CMD (at most LIMIT seconds), keeping its
# stdout, stderr, exit code, and wall/user/sys seconds in $OUT/rROUND/NAME.*.
# Never fails: the report reads the exit code.
run() {
  local round=$1 name=$2 limit=$3
  shift 3
  local d="$OUT/r$round" rc=0
  mkdir -p "$d"
  quote "$@" > "$d/$name.cmd"
  echo "$name" >> "$d/order" # the report lists the commands in this order
  log "round $round: $(cat "$d/$name.cmd")"
  if ((${#TIMECMD[@]})); then
    "${TIMECMD[@]}" -o "$d/$name.time" timeout -k 5 "$limit" "$@" > "$d/$name.out" 2> "$d/$name.err" || rc=$?
  else
    timeout -k 5 "$limit" "$@" > "$d/$name.out" 2> "$d/$name.err" || rc=$?
  fi
  echo "$rc" > "$d/$name.rc"
  return 0
}

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

# ---------------------------------------------------------------- servers
PIDS=()
BUSY_PID=''
cleanup() {
  local p
  if [[ -n $BUSY_PID ]]; then stop_busy; fi
  for p in "${PIDS[@]}"; do kill "$p" 2> /dev/null || true; done
  for p in "${PIDS[@]}"; do wait "$p" 2> /dev/null || true; done
}
trap cleanup EXIT
SERVER_LIMIT=900 # every server stops by itself after this long

# prober's responders on ephemeral loopback ports; it prints the real ports.
timeout "$SERVER_LIMIT" "$PROBER" serve --quiet --tcp 127.0.0.1:0 --udp 127.0.0.1:0 --grpc 127.0.0.1:0 \
  > "$OUT/serve.out" 2> "$OUT/serve.err" &
PIDS+=($!)
for _ in $(seq 100); do
  [[ $(grep -c '^listening' "$OUT/serve.out" 2> /dev/null || true) -ge 3 ]] && break
  sleep 0.1
done
port_of() { awk -v p="$1" '$1 == "listening" && $2 == p { n = split($3, a, ":"); print a[n] }' "$OUT/serve.out"; }
TCP_PORT=$(port_of tcp)
UDP_PORT=$(port_of udp)
GRPC_PORT=$(port_of grpc)
if [[ -z $TCP_PORT || -z $UDP_PORT || -z $GRPC_PORT ]]; then
  log "prober serve did not report its ports:"
  cat "$OUT/serve.out" "$OUT/serve.err" >&2
  exit 1
fi
log "prober serve: tcp $TCP_PORT udp $UDP_PORT grpc $GRPC_PORT"

if [[ ! -e $OUT/na/sockperf ]]; then
  SP_UDP_PORT=$(free_port)
  SP_TCP_PORT=$(free_port)
  timeout "$SERVER_LIMIT" sockperf server -i 127.0.0.1 -p "$SP_UDP_PORT" > "$OUT/sockperf-udp-server.log" 2>&1 &
  SP_UDP_PID=$!
  PIDS+=($!)
  timeout "$SERVER_LIMIT" sockperf server --tcp -i 127.0.0.1 -p "$SP_TCP_PORT" > "$OUT/sockperf-tcp-server.log" 2>&1 &
  SP_TCP_PID=$!
  PIDS+=($!)
fi
if [[ ! -e $OUT/na/qperf ]]; then
  QP_PORT=$(free_port)
  timeout "$SERVER_LIMIT" qperf -lp "$QP_PORT" > "$OUT/qperf-server.log" 2>&1 &
  QP_PID=$!
  PIDS+=($!)
fi
sleep 1
# A server that died at once (say, its port was taken) makes that peer unavailable.
if [[ ! -e $OUT/na/sockperf ]] && ! { kill -0 "$SP_UDP_PID" && kill -0 "$SP_TCP_PID"; } 2> /dev/null; then
  na sockperf "sockperf server exited: $(tail -n 1 "$OUT"/sockperf-*-server.log | tr -d '\033' | tail -c 200)"
fi
if [[ ! -e $OUT/na/qperf ]] && ! kill -0 "$QP_PID" 2> /dev/null; then
  na qperf "qperf server exited: $(tail -n 1 "$OUT/qperf-server.log" | tail -c 200)"
fi

BUSY_POLL=()
if "$PROBER" run --help 2> /dev/null | grep -q -- '--busy-poll' &&
  "$PROBER" serve --help 2> /dev/null | grep -q -- '--busy-poll'; then
  BUSY_POLL=(--busy-poll)
fi
[[ ${#BUSY_POLL[@]} -gt 0 ]] || echo "prober has no --busy-poll option" > "$OUT/na/busy-poll"

# A `prober serve --busy-poll` responder spins a core per UDP socket from the
# moment it starts (and one per TCP connection), so it must not run beside the
# other measurements: start_busy ROUND PROTO starts one for PROTO alone on an
# ephemeral port (separate from the normal responder's) and sets BUSY_PORT;
# stop_busy stops it. Its command goes in the round's command list.
start_busy() {
  local round=$1 proto=$2 d="$OUT/r$1" name="serve_busy_$2"
  local cmd=("$PROBER" serve "${BUSY_POLL[@]}" --quiet "--$proto" 127.0.0.1:0)
  mkdir -p "$d"
  echo "$(quote "${cmd[@]}") &  # stopped after the next command" > "$d/$name.cmd"
  echo "$name" >> "$d/order"
  log "round $round: $(cat "$d/$name.cmd")"
  BUSY_PORT=''
  timeout 120 "${cmd[@]}" > "$d/$name.out" 2> "$d/$name.err" &
  BUSY_PID=$!
  for _ in $(seq 100); do
    BUSY_PORT=$(awk -v p="$proto" '$1 == "listening" && $2 == p { n = split($3, a, ":"); print a[n] }' "$d/$name.out")
    [[ -n $BUSY_PORT ]] && break
    kill -0 "$BUSY_PID" 2> /dev/null || break
    sleep 0.1
  done
  [[ -n $BUSY_PORT ]] || log "prober serve --busy-poll --$proto did not report its port (see $d/$name.err)"
  [[ -n $BUSY_PORT ]]
}
# Stops the busy-poll responder, if one runs (by its pid only).
stop_busy() {
  if [[ -n $BUSY_PID ]]; then
    kill "$BUSY_PID" 2> /dev/null || true
    wait "$BUSY_PID" 2> /dev/null || true
    BUSY_PID=''
  fi
}

GHZ_PAYLOAD=$(python3 -c 'import base64; print(base64.b64encode(bytes(64)).decode())')
P=$PROBER
# Common prober flags: quiet JSON, and a duration cap as well as the count.
PJ=(run -q -o json)

# ---------------------------------------------------------------- rounds
for r in $(seq "$ROUNDS"); do
  log "---- round $r of $ROUNDS"

  # ICMP, paced at 10 ms.
  run "$r" prober_icmp10 60 "$P" "${PJ[@]}" -d 30s -c 500 -i 10ms icmp://127.0.0.1
  [[ -e $OUT/na/ping ]] || run "$r" ping_icmp10 60 ping -c 500 -i 0.01 127.0.0.1

  # ICMP, back to back.
  run "$r" prober_icmp0 60 "$P" "${PJ[@]}" -d 30s -c 2000 -i 0 icmp://127.0.0.1
  [[ -e $OUT/na/ping ]] || run "$r" ping_icmp0 60 ping -i 0 -c 2000 127.0.0.1

  # TCP and UDP request/response, closed loop, 64-byte messages.
  run "$r" prober_tcp 60 "$P" "${PJ[@]}" -d 30s -c 20000 -i 0 "tcp://127.0.0.1:$TCP_PORT"
  [[ -e $OUT/na/sockperf ]] ||
    run "$r" sockperf_tcp 30 sockperf ping-pong --tcp -i 127.0.0.1 -p "$SP_TCP_PORT" -m 64 -t 5 --full-rtt
  run "$r" prober_udp 60 "$P" "${PJ[@]}" -d 30s -c 20000 -i 0 "udp://127.0.0.1:$UDP_PORT"
  [[ -e $OUT/na/sockperf ]] ||
    run "$r" sockperf_udp 30 sockperf ping-pong -i 127.0.0.1 -p "$SP_UDP_PORT" -m 64 -t 5 --full-rtt

  # The same with --busy-poll: prober's client and a `prober serve --busy-poll`
  # responder both spin; sockperf (its defaults, waiting in epoll) runs again
  # right after, once the spinning responder has stopped.
  if ((${#BUSY_POLL[@]})); then
    for proto in tcp udp; do
      if start_busy "$r" "$proto"; then
        run "$r" "prober_${proto}_busypoll" 60 "$P" "${PJ[@]}" "${BUSY_POLL[@]}" -d 30s -c 20000 -i 0 \
          "$proto://127.0.0.1:$BUSY_PORT"
      else
        # No responder, no prober run: the report shows why.
        : > "$OUT/r$r/prober_${proto}_busypoll.out"
        echo "prober serve --busy-poll --$proto did not start: $(tail -n 1 "$OUT/r$r/serve_busy_$proto.err")" \
          > "$OUT/r$r/prober_${proto}_busypoll.err"
        echo 1 > "$OUT/r$r/prober_${proto}_busypoll.rc"
      fi
      stop_busy
      sp_port=${SP_UDP_PORT:-} sp_tcp=()
      [[ $proto == tcp ]] && sp_port=${SP_TCP_PORT:-} sp_tcp=(--tcp)
      [[ -e $OUT/na/sockperf ]] ||
        run "$r" "sockperf_${proto}_busypoll" 30 sockperf ping-pong "${sp_tcp[@]}" -i 127.0.0.1 -p "$sp_port" -m 64 -t 5 --full-rtt
    done
    # ICMP: only prober's receiving thread spins; the kernel answers.
    run "$r" prober_icmp0_busypoll 60 "$P" "${PJ[@]}" "${BUSY_POLL[@]}" -d 30s -c 2000 -i 0 icmp://127.0.0.1
    [[ -e $OUT/na/ping ]] || run "$r" ping_icmp0_busypoll 60 ping -i 0 -c 2000 127.0.0.1
  fi

  # qperf: one-way latency (half the mean round trip) over 3 s.
  if [[ ! -e $OUT/na/qperf ]]; then
    run "$r" prober_tcp_q 60 "$P" "${PJ[@]}" -d 30s -c 20000 -i 0 "tcp://127.0.0.1:$TCP_PORT"
    run "$r" qperf_tcp 30 qperf 127.0.0.1 -lp "$QP_PORT" -m 64 -t 3 -uu -vvs tcp_lat
    run "$r" prober_udp_q 60 "$P" "${PJ[@]}" -d 30s -c 20000 -i 0 "udp://127.0.0.1:$UDP_PORT"
    run "$r" qperf_udp 30 qperf 127.0.0.1 -lp "$QP_PORT" -m 64 -t 3 -uu -vvs udp_lat
  fi

  # gRPC unary Ping on one channel, one call in flight, 64-byte payload. ghz
  # runs for a fixed time: its -x (meant to cap an -n run) sets -z in ghz
  # v0.93.0, so -n is ignored either way.
  run "$r" prober_grpc 60 "$P" "${PJ[@]}" -d 30s -c 10000 -i 0 "grpc://127.0.0.1:$GRPC_PORT"
  [[ -e $OUT/na/ghz ]] ||
    run "$r" ghz_grpc 30 ghz --insecure --proto "$PROTO" --call prober.v1.Echo.Ping -c 1 -z 4s \
      -d "{\"seq\":1,\"payload\":\"$GHZ_PAYLOAD\"}" --format json "127.0.0.1:$GRPC_PORT"
  [[ -e $OUT/na/h2ping ]] || run "$r" h2_grpc 60 "$H2PING" "127.0.0.1:$GRPC_PORT" 10000

  # Pacing accuracy: send lag and CPU per pacing mode, then what the
  # machine allows any pacer (no network: a spin loop and plain sleeps).
  for pacing in timer spin hybrid; do
    run "$r" "pacing_$pacing" 60 "$P" "${PJ[@]}" -d 30s -c 500 -i 10ms --pacing "$pacing" icmp://127.0.0.1
  done
  [[ -e $OUT/na/floor ]] || run "$r" floor 60 "$FLOOR" 2 200
done

# ---------------------------------------------------------------- throughput
# Responder throughput, once after the rounds: requests per second the
# responders answer with many requests in flight. gRPC: ghz with 50
# concurrent calls. TCP and UDP: TP_CLIENTS prober processes at once, each a
# closed loop keeping TP_LANES probes in flight for TP_SECS. The clients run
# on the same machine as the responder and share its CPUs.
TP_CLIENTS=${TP_CLIENTS:-4}
TP_LANES=${TP_LANES:-8}
TP_SECS=${TP_SECS:-5}
if [[ ! -e $OUT/na/ghz ]]; then
  run tp ghz_grpc_c50 180 ghz --insecure --proto "$PROTO" --call prober.v1.Echo.Ping -c 50 -n 100000 \
    -d "{\"seq\":1,\"payload\":\"$GHZ_PAYLOAD\"}" --format json "127.0.0.1:$GRPC_PORT"
fi
for proto in tcp udp; do
  port=$UDP_PORT
  [[ $proto == tcp ]] && port=$TCP_PORT
  d="$OUT/rtp"
  mkdir -p "$d"
  cmd=("$P" "${PJ[@]}" -i 0 -b "$TP_LANES" -d "${TP_SECS}s" "$proto://127.0.0.1:$port")
  echo "$(quote "${cmd[@]}")  # $TP_CLIENTS of these at once" > "$d/tp_$proto.cmd"
  echo "tp_$proto" >> "$d/order"
  log "throughput: $TP_CLIENTS x $(cat "$d/tp_$proto.cmd")"
  tp_pids=()
  for i in $(seq "$TP_CLIENTS"); do
    timeout -k 5 $((TP_SECS + 30)) "${cmd[@]}" > "$d/tp_${proto}_$i.out" 2> "$d/tp_${proto}_$i.err" &
    tp_pids+=($!)
  done
  for i in "${!tp_pids[@]}"; do
    rc=0
    wait "${tp_pids[$i]}" || rc=$?
    echo "$rc" > "$d/tp_${proto}_$((i + 1)).rc"
  done
done
echo "$TP_CLIENTS $TP_LANES $TP_SECS" > "$OUT/throughput"

cat /proc/loadavg > "$OUT/loadavg.end"
date +%s > "$OUT/finished.s"
cleanup
trap - EXIT

# Versions for the report.
{
  echo "prober: $("$P" --version 2> /dev/null || echo '?')"
  have ping && echo "ping: $(ping -V 2>&1 | head -1)"
  have sockperf && echo "sockperf: $(sockperf --version 2>&1 | grep -o 'version [^ ]*' | head -1)"
  have qperf && echo "qperf: $(qperf --version 2>&1 | head -1)"
  have ghz && echo "ghz: $(go version -m "$(command -v ghz)" 2> /dev/null | awk '$1 == "mod" { print $3 }' || true)"
} > "$OUT/versions" 2> /dev/null || true

python3 "$HERE/report.py" "$OUT" "$REPORT"
log "wrote $REPORT (raw outputs in $OUT)"

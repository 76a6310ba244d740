#!/usr/bin/env bash
# Scale benchmark of the daemon: N targets (default 10,000) at 1 Hz for D
# seconds (default 60), ICMP to distinct loopback addresses 127.1.x.y, which
# all share one socket. Records CPU (cores used), peak RSS, probes sent
# against slots scheduled, and the send-lag p99, from the daemon's own JSON
# lines. Loopback only. Run as root (raw ICMP sockets) from the repo root:
#
#   bash benches/scale/run.sh            # or: N=2000 D=20 bash benches/scale/run.sh
#   PROBER_ARGS="--threads 4" bash benches/scale/run.sh   # more runtime threads
#   SINK=none bash benches/scale/run.sh   # Prometheus only: CPU and RSS as usually
#                                         # deployed (no per-probe file to read
#                                         # send lag and missed slots from)
set -euo pipefail
cd "$(dirname "$0")/../.."
N=${N:-10000}
D=${D:-60}
[ -x target/release/prober ] || cargo build --release -p prober-cli
work=$(mktemp -d /tmp/prober-scale.XXXXXX)
trap 'rm -rf "$work"' EXIT

python3 - "$N" > "$work/targets.txt" <<'PY'
import sys
n = int(sys.argv[1])
for i in range(n):
    print(f"icmp://127.1.{i // 250}.{i % 250 + 1}")
PY
cat > "$work/prober.toml" <<TOML
[metrics]
listen = "127.0.0.1:0"

[[job]]
name = "scale"
interval = "1s"
timeout = "1s"
targets_file = "targets.txt"
TOML
if [ "${SINK:-jsonl}" = jsonl ]; then
  echo 'sinks = { jsonl = { path = "scale.jsonl" } }' >> "$work/prober.toml"
fi

target/release/prober ${PROBER_ARGS:-} serve --quiet --config "$work/prober.toml" > "$work/stdout" 2> "$work/stderr" &
pid=$!
clk=$(getconf CLK_TCK)
ticks() { awk '{print $14 + $15}' "/proc/$pid/stat"; }
split() { awk '{print "user", $14, "sys", $15}' "/proc/$pid/stat"; }
sleep 2   # start-up: config, sockets, first slots
t0=$(ticks); s0=$(date +%s.%N); split0=$(split)
sleep "$D"
t1=$(ticks); s1=$(date +%s.%N); echo "cpu ticks at start: $split0; at end: $(split) (clock ticks, $clk/s)"
hwm=$(awk '/VmHWM/ {print $2}' "/proc/$pid/status")
kill -TERM "$pid"
wait "$pid" || true

if [ "${SINK:-jsonl}" != jsonl ]; then
  awk -v t0="$t0" -v t1="$t1" -v s0="$s0" -v s1="$s1" -v clk="$clk" -v hwm="$hwm" -v n="$N" 'BEGIN {
    printf "targets            %d (no file sink: Prometheus only)\n", n
    printf "cpu                %.3f cores\n", (t1 - t0) / clk / (s1 - s0)
    printf "peak RSS           %.1f MiB\n", hwm / 1024 }'
  exit 0
fi
python3 - "$work/scale.jsonl" "$N" "$t0" "$t1" "$s0" "$s1" "$clk" "$hwm" "$D" <<'PY'
import json, sys
path, n, t0, t1, s0, s1, clk, hwm, d = sys.argv[1:]
n, clk, d = int(n), int(clk), float(d)
cores = (int(t1) - int(t0)) / clk / (float(s1) - float(s0))
lags, outcomes, per_target = [], {}, {}
with open(path) as f:
    for line in f:
        p = json.loads(line)
        lags.append(p["send_lag_ns"])
        outcomes[p["outcome"]] = outcomes.get(p["outcome"], 0) + 1
        per_target[p["target"]] = max(per_target.get(p["target"], -1), p["seq"])
lags.sort()
q = lambda x: lags[min(len(lags) - 1, int(x * len(lags)))] / 1e3
sent = len(lags)
# Every seq from 0 to the last one sent must be present: a gap is a missed slot.
missed = sum(last + 1 for last in per_target.values()) - sent
print(f"targets            {n}")
print(f"measured window    {float(s1) - float(s0):.1f} s (whole run {d + 2:.0f} s + drain)")
print(f"cpu                {cores:.3f} cores")
print(f"peak RSS           {int(hwm) / 1024:.1f} MiB")
print(f"probes             {sent} ({outcomes})")
print(f"targets that sent  {len(per_target)}")
print(f"missed slots       {missed}")
print(f"send lag p50/p99/max  {q(0.5):.0f} / {q(0.99):.0f} / {lags[-1] / 1e3:.0f} µs")
PY

#!/usr/bin/env bash
# Where the probing thread's time goes during a scale run (BENCHMARKS.md,
# "Sink files on threads of their own"): runs benches/scale/run.sh with
# the fleet features at realtime priority, and records the daemon's main
# thread (the probing one) for 25 s with perf: its context switches and
# 2 kHz CPU samples, with DWARF call graphs, on CLOCK_MONOTONIC. The
# offset to CLOCK_REALTIME (the probe lines' clock) is written beside it,
# so a slot's scheduled_unix_ns minus the offset is perf's time. Root.
#
#   PROBER=/tmp/prober-x bash benches/scale/perf.sh
#   perf script -i "$OUT/perf.data" -F time,event,ip,sym
set -euo pipefail
PROBER=${PROBER:-target/release/prober}
OUT=${OUT:-$(mktemp -d /tmp/prober-perf.XXXXXX)}
(PROBER="$PROBER" FLEET=1 D=30 SCRAPE=${SCRAPE:-1} REALTIME=${REALTIME-10} KEEP=1 \
  bash benches/scale/run.sh > "$OUT/run.txt" 2>&1 &)
pid=
for _ in $(seq 1 100); do
  pid=$(pgrep -f "$PROBER serve" | head -1) || true
  [ -n "$pid" ] && break
  sleep 0.2
done
[ -n "$pid" ] || { echo "the daemon did not start: $OUT/run.txt" >&2; exit 1; }
sleep 3
python3 -c 'import time; print(time.clock_gettime_ns(time.CLOCK_REALTIME) - time.clock_gettime_ns(time.CLOCK_MONOTONIC))' > "$OUT/realtime_minus_monotonic_ns"
timeout 40 perf record -q -k CLOCK_MONOTONIC -e sched:sched_switch -e cpu-clock -F 2000 \
  --call-graph dwarf,8192 -t "$pid" -o "$OUT/perf.data" -- sleep 25
while pgrep -f "benches/scale/run.sh" > /dev/null; do sleep 1; done
tail -8 "$OUT/run.txt"
echo "perf data and the offset in $OUT (the run's directory is named in run.txt)"

#!/usr/bin/env bash
# Scale benchmark of the daemon: N targets (default 10,000) at 1 Hz for D
# seconds (default 60), ICMP to distinct loopback addresses 127.1.x.y, which
# all share one socket. Records CPU (cores used), peak RSS, probes sent
# against slots scheduled, and the send-lag p99, from the daemon's own JSON
# lines. Loopback only. Run as root (raw ICMP sockets) from the repo root:
#
#   bash benches/scale/run.sh            # or: N=2000 D=20 bash benches/scale/run.sh
#   N=1000 INTERVAL=100ms D=300 SINK=none bash ...  # a soak: memory as seqs pile up
#   FPING=1 bash benches/scale/run.sh     # and fping's CPU per probe for the same
#                                         # probes, as a reference (the ratio)
#   PROBER_ARGS="--threads 4" bash benches/scale/run.sh   # more runtime threads
#   PROBER=/tmp/prober-old bash benches/scale/run.sh      # another build (A/B)
#   KEEP=1 bash benches/scale/run.sh      # keep the run's directory (probe lines)
#   REALTIME=10 bash benches/scale/run.sh  # [probing] realtime_priority = 10
#   WAKEUP=1 bash benches/scale/run.sh    # and the host's own timer wake-up latency
#                                         # in the same seconds (cyclictest at the
#                                         # probing thread's priority): the floor
#                                         # under the send lag's tail
#   RECEIVE=async bash benches/scale/run.sh   # [receive] mode = "async" (adaptive is
#                                              # the default here: no [serve])
#   SINK=none bash benches/scale/run.sh   # Prometheus only: CPU and RSS as usually
#                                         # deployed (no per-probe file to read
#                                         # send lag and missed slots from)
#   FLEET=1 BUCKETS="[10.0]" bash ...      # fleet, with one classic bucket (what
#                                         # Prometheus keeps of a histogram that
#                                         # has native buckets)
#   HISTOGRAMS='{ latency = "both", ipdv = "both" }' bash ...   # [metrics] histograms
#                                         # (docs/config.md, "Series per target");
#                                         # ALL=1: every family on, with both buckets
#   FLEET=1 bash benches/scale/run.sh     # the fleet features on: targets from a
#                                         # file_sd file (watched), native and
#                                         # per-part histograms, /metrics scraped
#                                         # in protobuf; without FLEET: a
#                                         # targets_file, the default histogram
#                                         # families, scraped in text
#
# Both scrape /metrics and fetch the status page every 5 s (as Prometheus
# and a person at a browser would) and report the slowest answers;
# SCRAPE=0 does neither, to compare the send lag without them; SCRAPE=metrics
# or SCRAPE=page only the one. The send lag is printed for the slots of
# that loop, and apart for those of the end's text scrape and page.
#
#   PROBE_LOAD=20 bash benches/scale/run.sh   # and blackbox's /probe asked
#                                         # 20 times a second (ICMP to other
#                                         # loopback addresses, one client on
#                                         # a kept connection), to see whether
#                                         # scrape-time probes disturb the
#                                         # scheduled ones (docs/blackbox.md)
set -euo pipefail
cd "$(dirname "$0")/../.."
N=${N:-10000}
D=${D:-60}
# Checked before anything starts, not after the daemon is up.
if [ -n "${WAKEUP:-}" ] && ! command -v cyclictest >/dev/null; then
  echo "WAKEUP=1 needs cyclictest (apt-get install rt-tests)" >&2
  exit 2
fi
PROBER=${PROBER:-target/release/prober}
[ -x "$PROBER" ] || cargo build --release -p prober-cli
work=$(mktemp -d /tmp/prober-scale.XXXXXX)
pid= cg=
# What is left in the daemon's cgroup once it was stopped: the daemon
# itself where PROBER is a wrapper (heaptrack, perf) that went first. Asked
# to stop, then killed after 5 s, so that no daemon outlives the run and
# runs beside the next one.
stop_cgroup() {
  [ -n "$cg" ] || return 0
  local left i
  for i in $(seq 50); do
    left=$(cat "$cg/cgroup.procs" 2>/dev/null || true)
    [ -z "$left" ] && return 0
    [ "$i" = 1 ] && kill -TERM $left 2>/dev/null
    sleep 0.1
  done
  echo 1 > "$cg/cgroup.kill" 2>/dev/null || kill -KILL $left 2>/dev/null || true
  sleep 0.2
}
cleanup() {
  # The daemon and its cgroup go too when the script stops early.
  if [ -n "$pid" ]; then kill -TERM "$pid" 2>/dev/null && wait "$pid" 2>/dev/null || true; fi
  stop_cgroup
  if [ -n "$cg" ]; then rmdir "$cg" 2>/dev/null || true; fi
  # KEEP=1: the run's files (config, probe lines, scrapes) stay for a look.
  if [ -n "${KEEP:-}" ]; then echo "kept               $work"; else rm -rf "$work"; fi
}
trap cleanup EXIT

python3 - "$N" "$work" <<'PY'
import json, sys
n, work = int(sys.argv[1]), sys.argv[2]
urls = [f"icmp://127.1.{i // 250}.{i % 250 + 1}" for i in range(n)]
open(f"{work}/targets.txt", "w").write("".join(u + "\n" for u in urls))
# file_sd groups of 250, each with a rack label, as a fleet's would be.
groups = [{"targets": urls[i:i + 250], "labels": {"rack": f"r{i // 250}"}}
          for i in range(0, n, 250)]
json.dump(groups, open(f"{work}/fleet.json", "w"))
PY
mport=$((20000 + RANDOM % 20000))
if [ -n "${ALL:-}" ]; then
  HISTOGRAMS='{ rtt = "both", latency = "both", send_lag = "both", ipdv = "both", loss_burst = "classic", phases = "both" }'
fi
if [ -n "${FLEET:-}" ]; then
  cat > "$work/prober.toml" <<TOML
[metrics]
listen = "127.0.0.1:$mport"
parts = true
native_histograms = true
${BUCKETS:+buckets = $BUCKETS}
${HISTOGRAMS:+histograms = $HISTOGRAMS}

[[job]]
name = "scale"
interval = "${INTERVAL:-1s}"
timeout = "1s"
max_targets = $N
file_sd = ["fleet.json"]
TOML
  accept='application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited'
else
  cat > "$work/prober.toml" <<TOML
[metrics]
listen = "127.0.0.1:$mport"
${HISTOGRAMS:+histograms = $HISTOGRAMS}

[[job]]
name = "scale"
interval = "${INTERVAL:-1s}"
timeout = "1s"
max_targets = $N
targets_file = "targets.txt"
TOML
  accept='text/plain'
fi
if [ "${SINK:-jsonl}" = jsonl ]; then
  echo 'sinks = { jsonl = { path = "scale.jsonl" } }' >> "$work/prober.toml"
fi
if [ -n "${PROBE_LOAD:-}" ]; then
  printf 'modules:\n  icmp:\n    prober: icmp\n    timeout: 1s\n    icmp:\n      preferred_ip_protocol: ip4\n' > "$work/blackbox.yml"
  { printf '[blackbox]\nconfig = "blackbox.yml"\n\n'; cat "$work/prober.toml"; } > "$work/p2" &&
    mv "$work/p2" "$work/prober.toml"
fi
if [ -n "${RECEIVE:-}" ]; then
  # A top-level table, so before the others.
  { printf '[receive]\nmode = "%s"\n\n' "$RECEIVE"; cat "$work/prober.toml"; } > "$work/p2" &&
    mv "$work/p2" "$work/prober.toml"
fi

if [ -n "${REALTIME:-}" ]; then
  # [probing] realtime_priority: the probing thread under SCHED_FIFO.
  { printf '[probing]\nrealtime_priority = %s\n\n' "$REALTIME"; cat "$work/prober.toml"; } > "$work/p2" &&
    mv "$work/p2" "$work/prober.toml"
fi

"$PROBER" ${PROBER_ARGS:-} serve --quiet --config "$work/prober.toml" > "$work/stdout" 2> "$work/stderr" &
pid=$!
clk=$(getconf CLK_TCK)
ticks() { awk '{print $14 + $15}' "/proc/$pid/stat"; }
split() { awk '{print "user", $14, "sys", $15}' "/proc/$pid/stat"; }
# The kernel's CPU accounting in /proc/PID/stat is sampled on clock ticks;
# a cgroup of the daemon's own counts every nanosecond it ran (cgroup v2's
# cpu.stat; the unified hierarchy where v1 is mounted too). Without one,
# only the ticks.
for root in /sys/fs/cgroup /sys/fs/cgroup/unified; do
  # cgroup.controllers: a v2 hierarchy (v1's cpu.stat has no usage_usec).
  if [ -f "$root/cgroup.controllers" ] && mkdir "$root/prober-scale-$$" 2>/dev/null; then
    if echo "$pid" > "$root/prober-scale-$$/cgroup.procs" 2>/dev/null; then
      cg=$root/prober-scale-$$
    else
      rmdir "$root/prober-scale-$$"
    fi
    break
  fi
done
usage() { if [ -n "$cg" ]; then awk '/^usage_usec/ {print $2}' "$cg/cpu.stat"; else echo 0; fi; }
sleep 2   # start-up: config, sockets, first slots
t0=$(ticks); s0=$(date +%s.%N); split0=$(split); u0=$(usage)
if [ -n "${PROBE_LOAD:-}" ]; then
  # One client, one kept connection, PROBE_LOAD requests a second for D
  # seconds (bounded), each an ICMP probe of 127.2.x.y.
  python3 - "$mport" "$PROBE_LOAD" "$D" > "$work/probe_load" <<'PY' &
import http.client, sys, time
port, rate, d = int(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3])
c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
end, gap, i, ok, bad, slow = time.time() + d, 1 / rate, 0, 0, 0, 0.0
nxt = time.time()
while time.time() < end:
    t = time.time()
    try:
        c.request("GET", f"/probe?module=icmp&target=127.2.{i // 250 % 250}.{i % 250 + 1}")
        body = c.getresponse().read()
        ok += b"probe_success 1" in body
        bad += b"probe_success 1" not in body
    except Exception:
        bad += 1
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    slow = max(slow, time.time() - t)
    i += 1
    nxt += gap
    time.sleep(max(0, nxt - time.time()))
print(f"/probe load        {i} requests ({rate:g}/s): {ok} succeeded, {bad} not; slowest {slow * 1e3:.1f} ms")
PY
  load_pid=$!
fi
# WAKEUP=1: the host's own timer wake-up latency over the same D seconds,
# as a reference for the send lag's tail: cyclictest (Debian's rt-tests)
# with one thread that sleeps 1 ms at a time, at the probing thread's
# priority (SCHED_FIFO at REALTIME, else ordinary), on either CPU. A wake-up
# the host holds up (a vCPU not run) holds up the daemon's sends the same.
if [ -n "${WAKEUP:-}" ]; then
  cyclictest -q -D "$D" -i 1000 -t 1 -p "${REALTIME:-0}" -h 100000 \
    --histfile="$work/wakeup.hist" > /dev/null 2>&1 &
  wake_pid=$!
fi
# Scrapes every 5 s; the slowest and the size of the last.
end=$(( $(date +%s) + D ))
: > "$work/scrapes"
: > "$work/pages"
while [ "$(date +%s)" -lt "$end" ]; do
  # SCRAPE=0: no scrapes, to see what they cost the probes.
  if [ "${SCRAPE:-1}" = 0 ]; then sleep 1; continue; fi
  # SCRAPE=metrics or page: only that one, to see which of the two costs.
  if [ "${SCRAPE:-1}" != page ]; then
    curl -s -o "$work/scrape.out" -H "Accept: $accept" -w '%{time_total}\n' \
      "http://127.0.0.1:$mport/metrics" >> "$work/scrapes" || echo fail >> "$work/scrapes"
  fi
  if [ "${SCRAPE:-1}" != metrics ]; then
    curl -s -o "$work/status.html" -w '%{time_total}\n' \
      "http://127.0.0.1:$mport/" >> "$work/pages" || echo fail >> "$work/pages"
  fi
  sleep 5
done
# The send lag is reported for the slots before this (the scrapes every
# 5 s the goal names) and, apart, for those of the fetches below (a text
# scrape of every series, to count them, and the status page).
loop_end_ns=$(date +%s%N)
if [ -n "${WAKEUP:-}" ]; then
  wait "$wake_pid" || true
  python3 - "$work/wakeup.hist" <<'PY'
import sys
rows = [l.split() for l in open(sys.argv[1]) if l[:1].isdigit()]
n = sum(int(c) for _, c in rows)
def q(x):
    acc = 0
    for us, c in rows:
        acc += int(c)
        if acc >= x * n:
            return int(us)
big = [int(us) for us, c in rows if int(c)]
print(f"host wake-up       p50/p99/p99.9/max  {q(0.5)} / {q(0.99)} / {q(0.999)} / {max(big)} µs"
      f" (cyclictest, {n} sleeps of 1 ms; {sum(int(c) for us, c in rows if int(us) > 1000)} over 1 ms)")
PY
fi
if [ -n "${PROBE_LOAD:-}" ]; then wait "$load_pid" || true; cat "$work/probe_load"; fi
status_s=$(curl -s -o "$work/status.html" -w '%{time_total}' "http://127.0.0.1:$mport/")
# Series per target as a text scrape has them (every line a series); the
# protobuf count, where a native histogram is one series, is the unit test
# a_target_stays_within_the_series_budget_by_default.
text_s=$(curl -s -o "$work/text.out" -w '%{time_total}' "http://127.0.0.1:$mport/metrics")
series=$(grep -v '^#' "$work/text.out" | grep -c 'target=' || true)
t1=$(ticks); s1=$(date +%s.%N); u1=$(usage); echo "cpu ticks at start: $split0; at end: $(split) (clock ticks, $clk/s)"
hwm=$(awk '/VmHWM/ {print $2}' "/proc/$pid/status")
if [ -n "${FLEET:-}" ]; then
  echo "features           fleet: file_sd, native and per-part histograms, protobuf scrapes"
else
  echo "features           baseline: targets_file, default histogram families, text scrapes"
fi
echo "scrapes            $(grep -c . "$work/scrapes") every 5 s, slowest $(grep -v fail "$work/scrapes" | sort -g | tail -1) s, failed $(grep -c fail "$work/scrapes" || true); last $(stat -c %s "$work/scrape.out") bytes"
echo "status page        ${status_s} s at the end, $(stat -c %s "$work/status.html") bytes; every 5 s: slowest $(sort -g "$work/pages" 2>/dev/null | tail -1) s"
echo "text scrape        ${text_s} s, $(stat -c %s "$work/text.out") bytes, $series series, $((series / N)) per target"
kill -TERM "$pid"
wait "$pid" || true
pid=
stop_cgroup
if [ -n "$cg" ]; then
  awk -v u0="$u0" -v u1="$u1" -v s0="$s0" -v s1="$s1" 'BEGIN {
    printf "cpu (cgroup)       %.4f cores (every ns the daemon ran; the line below is sampled on ticks)\n", (u1 - u0) / 1e6 / (s1 - s0) }'
  rmdir "$cg" 2>/dev/null || true
  cg=
fi

# The reference: fping sending the same ICMP probes to the same addresses
# at the same rate (FPING=1; FPING_COUNT rounds, default 10), as a process
# of its own after the daemon's run; CPU per probe of each, and the ratio.
if [ -n "${FPING:-}" ] && command -v fping >/dev/null; then
  count=${FPING_COUNT:-10}
  # fping's -p is the period per target (ms), -i the gap between any two
  # sends (ms): N targets at the daemon's interval.
  period_ms=$(python3 -c "
import re, sys
s = '${INTERVAL:-1s}'; m = re.fullmatch(r'([0-9.]+)(ms|s)', s)
print(int(float(m.group(1)) * (1000 if m.group(2) == 's' else 1)))")
  gap_ms=$(python3 -c "print(max(0.01, $period_ms / $N))")
  sed 's|^icmp://||' "$work/targets.txt" > "$work/fping.txt"
  fstart=$(date +%s.%N)
  # fping exits 1 when any address went unanswered: not a failure here.
  ftimes=$( { TIMEFORMAT='%U %S'; time { fping -q -c "$count" -p "$period_ms" -i "$gap_ms" -f "$work/fping.txt" >/dev/null 2>&1 || true; }; } 2>&1 | tail -1 )
  fend=$(date +%s.%N)
  if [ -n "$cg" ]; then dcores=$(awk -v u0="$u0" -v u1="$u1" -v s0="$s0" -v s1="$s1" 'BEGIN {print (u1 - u0) / 1e6 / (s1 - s0)}')
  else dcores=$(awk -v t0="$t0" -v t1="$t1" -v s0="$s0" -v s1="$s1" -v clk="$clk" 'BEGIN {print (t1 - t0) / clk / (s1 - s0)}'); fi
  awk -v ft="$ftimes" -v n="$N" -v c="$count" -v p="$period_ms" -v dc="$dcores" -v fs="$fstart" -v fe="$fend" 'BEGIN {
    split(ft, a, " "); fcpu = a[1] + a[2]
    fper = fcpu * 1e6 / (n * c); dper = dc * 1e6 / (n * 1000 / p)
    printf "fping reference    %d probes (-c %d -p %d) in %.1f s wall, %.2f s CPU: %.2f µs a probe\n", n * c, c, p, fe - fs, fcpu, fper
    printf "daemon             %.2f µs CPU a probe; daemon / fping = %.2f\n", dper, dper / fper }'
fi

if [ "${SINK:-jsonl}" != jsonl ]; then
  awk -v t0="$t0" -v t1="$t1" -v s0="$s0" -v s1="$s1" -v clk="$clk" -v hwm="$hwm" -v n="$N" 'BEGIN {
    printf "targets            %d (no file sink: Prometheus only)\n", n
    printf "cpu                %.3f cores\n", (t1 - t0) / clk / (s1 - s0)
    printf "peak RSS           %.1f MiB\n", hwm / 1024 }'
  exit 0
fi
python3 - "$work/scale.jsonl" "$N" "$t0" "$t1" "$s0" "$s1" "$clk" "$hwm" "$D" "$loop_end_ns" <<'PY'
import json, sys
path, n, t0, t1, s0, s1, clk, hwm, d, loop_end = sys.argv[1:]
n, clk, d, loop_end = int(n), int(clk), float(d), int(loop_end)
late_lags = []
cores = (int(t1) - int(t0)) / clk / (float(s1) - float(s0))
lags, rtts, outcomes, per_target = [], [], {}, {}
first, worst = None, (0, 0)
with open(path) as f:
    for line in f:
        p = json.loads(line)
        at = p["scheduled_unix_ns"]
        (lags if at < loop_end else late_lags).append(p["send_lag_ns"])
        first = at if first is None else min(first, at)
        worst = max(worst, (p["send_lag_ns"], at))
        if p.get("rtt_ns") is not None:
            rtts.append(p["rtt_ns"])
        outcomes[p["outcome"]] = outcomes.get(p["outcome"], 0) + 1
        per_target[p["target"]] = max(per_target.get(p["target"], -1), p["seq"])
def pct(xs, x):
    """The x quantile of sorted ns values, in µs."""
    return xs[min(len(xs) - 1, int(x * len(xs)))] / 1e3
lags.sort()
sent = len(lags) + len(late_lags)
# Every seq from 0 to the last one sent must be present: a gap is a missed slot.
missed = sum(last + 1 for last in per_target.values()) - sent
print(f"targets            {n}")
print(f"measured window    {float(s1) - float(s0):.1f} s (whole run {d + 2:.0f} s + drain)")
print(f"cpu                {cores:.3f} cores")
print(f"peak RSS           {int(hwm) / 1024:.1f} MiB")
print(f"probes             {sent} ({outcomes})")
print(f"targets that sent  {len(per_target)}")
print(f"missed slots       {missed}")
print(f"send lag p50/p99/max  {pct(lags, 0.5):.0f} / {pct(lags, 0.99):.0f} / {lags[-1] / 1e3:.0f} µs"
      f" ({len(lags)} slots before the end's fetches)")
late_lags.sort()
if late_lags:
    print(f"  at the end's text scrape and page: {pct(late_lags, 0.5):.0f} / {pct(late_lags, 0.99):.0f} / {late_lags[-1] / 1e3:.0f} µs"
          f" ({len(late_lags)} slots)")
print(f"the largest lag    {worst[0] / 1e3:.0f} µs, {(worst[1] - first) / 1e9:.2f} s after the first slot")
rtts.sort()
if rtts:
    print(f"rtt p50/p99           {pct(rtts, 0.5):.1f} / {pct(rtts, 0.99):.1f} µs")
PY

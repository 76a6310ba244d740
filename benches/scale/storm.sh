#!/usr/bin/env bash
# A scrape storm: the daemon probes 3 loopback targets (udp, tcp, icmp) at
# 20 ms while C clients (default 50, threads of one Python process, each on
# a kept connection) fetch /metrics in a loop for D seconds (default 20),
# one in ten the status page. Prints the daemon's send lag
# p50/p99/max and missed slots from its own JSON lines, with and without the
# storm (alternating, R rounds each, default 2), and what the clients got.
# Loopback only; every loop is bounded by time. Run as root from the repo
# root:
#
#   bash benches/scale/storm.sh
#   PROBER=/tmp/prober-old bash benches/scale/storm.sh   # another build
set -euo pipefail
cd "$(dirname "$0")/../.."
C=${C:-50}
D=${D:-20}
R=${R:-2}
PROBER=${PROBER:-target/release/prober}
[ -x "$PROBER" ] || cargo build --release -p prober-cli
work=$(mktemp -d /tmp/prober-storm.XXXXXX)
pid=
cleanup() {
  if [ -n "$pid" ]; then kill -TERM "$pid" 2>/dev/null && wait "$pid" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT

round() { # $1: storm (1) or quiet (0); $2: round number
  local storm=$1 n=$2 port=$((20000 + RANDOM % 10000)) mport=$((30000 + RANDOM % 10000))
  local dir="$work/r$n-$storm"
  mkdir -p "$dir"
  cat > "$dir/prober.toml" <<TOML
[serve]
udp = "127.0.0.1:$port"
tcp = "127.0.0.1:$port"
[metrics]
listen = "127.0.0.1:$mport"
[[job]]
name = "storm"
interval = "20ms"
timeout = "500ms"
targets = ["udp://127.0.0.1:$port", "tcp://127.0.0.1:$port", "icmp://127.0.0.1"]
sinks = { jsonl = { path = "storm.jsonl" } }
TOML
  "$PROBER" serve --quiet --config "$dir/prober.toml" > "$dir/stdout" 2> "$dir/stderr" &
  pid=$!
  sleep 1
  local end=$(( $(date +%s) + D ))
  local clients=()
  if [ "$storm" = 1 ]; then
    # One process of C threads, each a keep-alive connection scraping in a
    # loop (as scrapers do; a curl process per scrape spent most of the
    # two CPUs on process start-up, which measured the machine, not prober).
    python3 - "$end" "$mport" "$C" "$dir" <<'PY' &
import http.client, sys, threading, time
end, port, c, d = float(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
def client(i):
    path = "/" if i % 10 == 0 else "/metrics"
    codes = {}
    conn = None
    while time.time() < end:
        try:
            if conn is None:
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            conn.request("GET", path)
            r = conn.getresponse()
            r.read()
            codes[r.status] = codes.get(r.status, 0) + 1
        except Exception:
            codes[0] = codes.get(0, 0) + 1
            conn = None
    with open(f"{d}/codes.{i}", "w") as f:
        for k, v in codes.items():
            f.write(f"{k}\n" * v)
ts = [threading.Thread(target=client, args=(i,)) for i in range(c)]
for t in ts: t.start()
for t in ts: t.join()
PY
    clients+=($!)
  fi
  while [ "$(date +%s)" -lt "$end" ]; do sleep 1; done
  # The clients end by the time they were given; the daemon is not waited for.
  for c in "${clients[@]}"; do wait "$c" 2>/dev/null || true; done
  kill -TERM "$pid"
  wait "$pid" || true
  pid=
  python3 - "$dir" "$storm" "$D" <<'PY'
import glob, json, sys
d, storm, dur = sys.argv[1], sys.argv[2] == "1", float(sys.argv[3])
lags, seqs = [], {}
for line in open(f"{d}/storm.jsonl"):
    p = json.loads(line)
    lags.append(p["send_lag_ns"])
    seqs.setdefault(p["target"], []).append(p["seq"])
lags.sort()
q = lambda x: lags[min(len(lags) - 1, int(x * len(lags)))] / 1e3
missed = sum(max(s) + 1 - len(s) for s in seqs.values())
codes = {}
for f in glob.glob(f"{d}/codes.*"):
    for c in open(f):
        codes[c.strip()] = codes.get(c.strip(), 0) + 1
answered = sum(codes.values())
what = f"storm of {len(glob.glob(d + '/codes.*'))} clients" if storm else "no scrapes      "
print(f"{what}: send lag p50/p99/max {q(0.5):8.1f} / {q(0.99):8.1f} / {lags[-1] / 1e3:8.1f} µs, "
      f"{len(lags)} probes, missed {missed}"
      + (f"; {answered / dur:.0f} requests/s answered {dict(sorted(codes.items()))}" if storm else ""))
PY
}

for r in $(seq 1 "$R"); do
  round 0 "$r"
  round 1 "$r"
done

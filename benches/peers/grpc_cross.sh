#!/usr/bin/env bash
# gRPC cross pairs (issue: "where gRPC's time goes"): each client against
# each server, one unary Ping in flight, 64-byte payload, on loopback.
#
#   client \ server     prober serve --grpc     grpc-go echo (grpc-go-echo/)
#   prober run          prober -> prober        prober -> grpc-go
#   ghz (grpc-go)       ghz -> prober           ghz -> grpc-go
#
# Rounds alternate the four pairs; each prints p50 and p99 of the RTT in µs
# (prober: its JSON summary; ghz: its latency distribution), and a summary
# of medians over the rounds follows. Needs go (for the echo server and
# ghz, built on first use from the Go module proxy) and a release prober.
#
#   bash benches/peers/grpc_cross.sh            # ROUNDS=5 N=5000
#   ROUNDS=3 N=2000 PROBER=/tmp/prober bash benches/peers/grpc_cross.sh
#   PROBER_ARGS="--receive adaptive --spin-share 1" bash ...   # prober's client
set -euo pipefail
cd "$(dirname "$0")/../.."
ROUNDS=${ROUNDS:-5}
N=${N:-5000}
. benches/peers/grpc_tools.sh
work=$(mktemp -d /tmp/prober-grpc-cross.XXXXXX)
pp=$((30000 + RANDOM % 10000))
gp=$((pp + 1))
"$PROBER" serve --quiet --grpc "127.0.0.1:$pp" > /dev/null 2> "$work/prober-serve.err" &
ppid=$!
"$BIN/grpc-go-echo" -listen "127.0.0.1:$gp" 2> "$work/go-serve.err" &
gpid=$!
trap 'kill $ppid $gpid 2> /dev/null; rm -rf "$work"' EXIT
sleep 1
payload=$(head -c 64 /dev/zero | base64 -w0)

prober_pair() { # port -> "p50 p99" (µs)
  # -q: the summary only, as ghz gives its distribution only at the end.
  # Without it prober streamed a line per call into this Python, which
  # parsed them during the run on the same two vCPUs: p99 186.4 µs against
  # 86.4-110.4 in runs with -q (p99/p50 3.9 against 1.95-2.80).
  "$PROBER" run ${PROBER_ARGS:-} -q -o json -i 0 -c "$N" -d 60s -s 64 "grpc://127.0.0.1:$1" 2> /dev/null |
    python3 -c '
import json, sys
for line in sys.stdin:
    d = json.loads(line)
    if d.get("type") == "summary":
        r = d["rtt"]
        print("%.1f %.1f" % (r["p50"] / 1e3, r["p99"] / 1e3))'
}
ghz_pair() { # port -> "p50 p99" (µs)
  "$BIN/ghz" --insecure --proto proto/prober/v1/echo.proto --call prober.v1.Echo.Ping \
    -c 1 -n "$N" -d "{\"seq\":1,\"payload\":\"$payload\"}" --format json \
    "127.0.0.1:$1" 2> /dev/null |
    python3 -c '
import json, sys
d = json.load(sys.stdin)
q = {x["percentage"]: x["latency"] for x in d["latencyDistribution"]}
print(f"{q[50] / 1e3:.1f} {q[99] / 1e3:.1f}")'
}

: > "$work/all"
for r in $(seq "$ROUNDS"); do
  for pair in prober_prober prober_grpcgo ghz_prober ghz_grpcgo; do
    case $pair in
      prober_prober) out=$(prober_pair "$pp") ;;
      prober_grpcgo) out=$(prober_pair "$gp") ;;
      ghz_prober) out=$(ghz_pair "$pp") ;;
      ghz_grpcgo) out=$(ghz_pair "$gp") ;;
    esac
    echo "round $r  $pair  p50/p99 µs: $out"
    echo "$pair $out" >> "$work/all"
  done
done
python3 - "$work/all" <<'PY'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    pair, p50, p99 = line.split()
    rows.setdefault(pair, []).append((float(p50), float(p99)))
med = {k: (statistics.median(a for a, _ in v), statistics.median(b for _, b in v)) for k, v in rows.items()}
print()
print("| client -> server | p50 µs (median of rounds) | p99 µs | p99/p50 |")
print("|---|---|---|---|")
for k in ["prober_prober", "prober_grpcgo", "ghz_prober", "ghz_grpcgo"]:
    a, b = med[k]
    print(f"| {k.replace('_', ' -> ')} | {a:.1f} | {b:.1f} | {b / a:.1f} |")
g = med["ghz_grpcgo"][0]
print()
print(f"prober -> grpc-go / ghz -> grpc-go: {med['prober_grpcgo'][0] / g:.2f} (goal <= 0.9)")
print(f"ghz -> prober / ghz -> grpc-go:     {med['ghz_prober'][0] / g:.2f} (goal <= 0.9)")
PY

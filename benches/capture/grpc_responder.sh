#!/usr/bin/env bash
# The gRPC responder's parts (wake + dwell + send = t3k - t2k) against a
# packet capture of the same probes on loopback: `prober serve --grpc`,
# tcpdump on lo with nanosecond stamps, `prober run -o json grpc://…`, then
# grpc_responder.py pairs each probe's request and response segments.
# Loopback only; needs root for tcpdump.
#
# usage: benches/capture/grpc_responder.sh [COUNT] [INTERVAL]
#        (defaults: 300 probes at 10ms; back to back the pairing is loose)
set -euo pipefail
cd "$(dirname "$0")/../.."
COUNT=${1:-300} INTERVAL=${2:-10ms}
PROBER=${PROBER:-target/release/prober}
[ -x "$PROBER" ] || cargo build --release --locked -p prober-cli
PORT=$((30000 + RANDOM % 20000))
TMP=$(mktemp -d)
"$PROBER" serve --quiet --grpc "127.0.0.1:$PORT" > /dev/null &
SRV=$!
trap 'kill $SRV 2>/dev/null; rm -rf $TMP' EXIT
sleep 0.5
tcpdump -i lo -w "$TMP/g.pcap" --time-stamp-precision nano --immediate-mode -s 200 \
  "tcp port $PORT" 2> /dev/null &
DUMP=$!
sleep 1
"$PROBER" run -c "$COUNT" -i "$INTERVAL" -o json "grpc://127.0.0.1:$PORT" > "$TMP/g.json"
sleep 0.5
kill "$DUMP"
wait "$DUMP" 2> /dev/null || true
python3 benches/capture/grpc_responder.py "$TMP/g.pcap" "$TMP/g.json" "$PORT"

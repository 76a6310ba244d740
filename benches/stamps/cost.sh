#!/usr/bin/env bash
# What kernel transmit stamps cost: back-to-back RR p50 per protocol with
# stamps on and off (--no-tx-stamps: no client transmit stamps, and no
# responder send times asked for), ROUNDS rounds, each round one run of
# each in turn (on first in odd rounds, off first in even ones, so neither
# always runs on the warmer machine). Prints each side's median p50, the
# median of the rounds' differences (on - off), and the project's bound:
# 3 % of the off p50 or 0.5 us, whichever is larger.
#
#   benches/stamps/cost.sh [COUNT] [ROUNDS]     (default 20000 probes, 5 rounds)
#   PIN=1 benches/stamps/cost.sh 10000 21       client on CPU 0, responder on CPU 1
#   SERVE_ARGS="--receive adaptive" ...          the responder's options (here: it
#       polls for the next request after each answer, so a round trip does
#       not time how fast an idle vCPU wakes up); RUN_ARGS: the client's
#
# TARGETS (space-separated) picks the targets; by default ICMP, UDP, TCP,
# gRPC, STAMP, tcp-connect and tcp-crr (whose handshake stamps come from a
# BPF program on the loopback device's transmit hook, prober_sys::synbpf;
# benches/src/bin/hookcost.rs measures it without prober's runtime).
#
# Loopback only. ICMP uses a raw socket (run as root).
set -euo pipefail
cd "$(dirname "$0")/../.."
count=${1:-20000}
rounds=${2:-5}
cargo build --release --locked -p prober-cli >/dev/null 2>&1
bin=target/release/prober
client=(); server=()
if [ -n "${PIN:-}" ]; then client=(taskset -c 0); server=(taskset -c 1); fi
# shellcheck disable=SC2086 # word splitting of the option lists is meant
"${server[@]}" $bin serve ${SERVE_ARGS:-} --quiet --tcp 127.0.0.1:18707 --udp 127.0.0.1:18707 \
  --grpc 127.0.0.1:18708 --stamp 127.0.0.1:18862 --stamp-rate 0 >/dev/null &
srv=$!
trap 'kill $srv 2>/dev/null' EXIT
sleep 0.5
p50() {
  # shellcheck disable=SC2086
  "${client[@]}" "$bin" run ${RUN_ARGS:-} -q -o json -c "$count" -i 0 "$@" \
    | python3 -c 'import json,sys
for l in sys.stdin:
    d=json.loads(l)
    if d.get("type")=="summary": print(d["rtt"]["p50"])'
}
printf '%-30s %9s %9s %13s %8s %8s %s\n' target "on p50" "off p50" "on-off (med)" "%" bound verdict
targets=${TARGETS:-icmp://127.0.0.1 udp://127.0.0.1:18707 tcp://127.0.0.1:18707 grpc://127.0.0.1:18708 stamp://127.0.0.1:18862 tcp-connect://127.0.0.1:18707 tcp-crr://127.0.0.1:18707}
for t in $targets; do
  extra=()
  [[ $t == icmp* ]] && extra=(--icmp-socket raw)
  on=(); off=()
  for ((r = 0; r < rounds; r++)); do
    if ((r % 2 == 0)); then
      on+=("$(p50 "${extra[@]}" "$t")")
      off+=("$(p50 "${extra[@]}" --no-tx-stamps "$t")")
    else
      off+=("$(p50 "${extra[@]}" --no-tx-stamps "$t")")
      on+=("$(p50 "${extra[@]}" "$t")")
    fi
  done
  python3 - "$t" "${on[*]}" "${off[*]}" <<'PY'
import statistics as st, sys
t, on, off = sys.argv[1], [float(x) for x in sys.argv[2].split()], [float(x) for x in sys.argv[3].split()]
d = st.median(a - b for a, b in zip(on, off))
moff = st.median(off)
bound = max(0.03 * moff, 500)
print(f"{t:30} {st.median(on):9.0f} {moff:9.0f} {d:+13.0f} {100 * d / moff:+7.2f}% {bound:8.0f} "
      f"{'met' if d <= bound else 'NOT met'}")
print(f"{'':30} rounds on:  {' '.join(f'{x:.0f}' for x in on)}")
print(f"{'':30} rounds off: {' '.join(f'{x:.0f}' for x in off)}")
PY
done

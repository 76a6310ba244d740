#!/usr/bin/env bash
# Two builds' transmit-stamp cost, each against its own responder (so a
# responder change counts too): client on CPU 0, both responders on CPU 1;
# each round runs A on, A off, B on, B off (B first in even rounds), back
# to back (-i 0, C probes); then prints each build's median on, off, and
# the median of its rounds' on - off against the bound (3 % or 0.5 us).
# Loopback only.
#
#   A=/tmp/prober-old B=target/release/prober T=grpc R=21 C=10000 bash benches/stamps/ab_own.sh
set -euo pipefail
A=${A:?}; B=${B:?}; R=${R:-21}; C=${C:-10000}; T=${T:-grpc}
p1=$((30000 + RANDOM % 10000)); p2=$((p1+7))
taskset -c 1 $A serve --quiet --grpc 127.0.0.1:$((p1+1)) --tcp 127.0.0.1:$p1 --udp 127.0.0.1:$p1 >/dev/null & s1=$!
taskset -c 1 $B serve --quiet --grpc 127.0.0.1:$((p2+1)) --tcp 127.0.0.1:$p2 --udp 127.0.0.1:$p2 >/dev/null & s2=$!
sleep 0.5
g1=$p1; g2=$p2; if [ "$T" = grpc ]; then g1=$((p1+1)); g2=$((p2+1)); fi
p50() { local bin=$1; shift; taskset -c 0 $bin run -q -o json -c $C -i 0 "$@" | python3 -c 'import json,sys
for l in sys.stdin:
    d=json.loads(l)
    if d.get("type")=="summary": print(int(d["rtt"]["p50"]))'; }
out=$(mktemp); trap 'kill $s1 $s2; rm -f $out' EXIT
for ((r=1;r<=R;r++)); do
  if ((r % 2)); then
    echo "$r $(p50 $A $T://127.0.0.1:$g1) $(p50 $A --no-tx-stamps $T://127.0.0.1:$g1) $(p50 $B $T://127.0.0.1:$g2) $(p50 $B --no-tx-stamps $T://127.0.0.1:$g2)"
  else
    b1=$(p50 $B $T://127.0.0.1:$g2); b2=$(p50 $B --no-tx-stamps $T://127.0.0.1:$g2)
    echo "$r $(p50 $A $T://127.0.0.1:$g1) $(p50 $A --no-tx-stamps $T://127.0.0.1:$g1) $b1 $b2"
  fi
done | tee "$out"
python3 - "$out" <<'PY'
import statistics as st, sys
rows = [list(map(int, l.split())) for l in open(sys.argv[1]) if l.strip()]
for name, i in (("A", 1), ("B", 3)):
    on = [r[i] for r in rows]; off = [r[i + 1] for r in rows]
    d = [a - b for a, b in zip(on, off)]
    bound = max(0.03 * st.median(off), 500)
    q = st.quantiles(d, n=4) if len(d) > 1 else [d[0]] * 3
    print(f"{name}: on {st.median(on):.0f} off {st.median(off):.0f} on-off median {st.median(d):+.0f} "
          f"({100 * st.median(d) / st.median(off):+.2f} %), quartiles {q[0]:.0f} / {q[2]:.0f}, bound {bound:.0f}")
print(f"B on - A on, median of rounds: {st.median(r[3] - r[1] for r in rows):+.0f}")
PY

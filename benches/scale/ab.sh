#!/usr/bin/env bash
# Two daemon builds at 10,000 targets each, run at the same time (the
# machine's slow and fast spells fall on both alike; which starts first
# alternates), R rounds: each
# round prints both builds' CPU from their own cgroups (run.sh's "cpu
# (cgroup)"), and the end the median of the rounds' B/A ratios. The two
# daemons' ICMP sockets filter by ident, so neither reads the other's
# replies. Run as root from the repo root; settings as run.sh's (FLEET,
# N, D, ...):
#
#   A=/tmp/prober-old B=target/release/prober R=5 FLEET=1 D=30 bash benches/scale/ab.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
A=${A:?A=path to the first build}
B=${B:-target/release/prober}
R=${R:-5}
out=$(mktemp -d /tmp/prober-scale-ab.XXXXXX)
a= b=
# run.sh stops its daemon on TERM (its EXIT trap).
trap 'kill $a $b 2> /dev/null; rm -rf "$out"' EXIT
cores() { awk '/^cpu \(cgroup\)/ {print $3}' "$1"; }
echo "round | A cores | B cores | B/A"
for ((r = 1; r <= R; r++)); do
  # Which build starts first alternates from round to round.
  if ((r % 2)); then
    PROBER=$A bash benches/scale/run.sh > "$out/a" 2>&1 &
    a=$!
    PROBER=$B bash benches/scale/run.sh > "$out/b" 2>&1 &
    b=$!
  else
    PROBER=$B bash benches/scale/run.sh > "$out/b" 2>&1 &
    b=$!
    PROBER=$A bash benches/scale/run.sh > "$out/a" 2>&1 &
    a=$!
  fi
  # Each waited for on its own: a failed run shows below, whichever it was.
  wait "$a" || true
  wait "$b" || true
  a= b=
  ca=$(cores "$out/a"); cb=$(cores "$out/b")
  if [ -z "$ca" ] || [ -z "$cb" ]; then
    echo "round $r: no cgroup CPU figure (run.sh needs a cgroup v2 hierarchy)" >&2
    tail -3 "$out/a" "$out/b" >&2
    exit 1
  fi
  echo "$r | $ca | $cb | $(awk -v a="$ca" -v b="$cb" 'BEGIN {printf "%.3f", b / a}')"
done | tee "$out/rounds"
awk -F' [|] ' '{print $4}' "$out/rounds" | sort -g |
  awk '{v[NR] = $1} END {m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2; printf "median B/A %.3f over %d rounds\n", m, NR}'

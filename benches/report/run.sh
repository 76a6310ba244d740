#!/usr/bin/env bash
# The report's scale benchmark (issue: 1,000,000 samples per target, 4
# targets, rendered in < 5 s with < 1 GiB peak RSS, output < 5 MB).
# Generates the input once (2.1 GB, about a minute), then renders it
# ROUNDS times and prints wall time, peak RSS and output size per round.
#   benches/report/run.sh [ROUNDS]   (uses target/release/prober)
set -euo pipefail
cd "$(dirname "$0")/../.."
rounds=${1:-3}
bin=target/release/prober
[ -x "$bin" ] || cargo build --release --locked -p prober-cli
dir=${TMPDIR:-/tmp}/prober-report-bench
mkdir -p "$dir"
if [ ! -s "$dir/big.json" ]; then
  python3 benches/report/gen.py 1000000 4 > "$dir/big.json"
fi
echo "input: $(du -hL "$dir/big.json" | cut -f1), $(wc -l < "$dir/big.json") lines"
for r in $(seq "$rounds"); do
  /usr/bin/time -f "%e %M" -o "$dir/time" "$bin" report "$dir/big.json" -o "$dir/big.html" 2>/dev/null
  read -r secs kib < "$dir/time"
  echo "round $r: ${secs} s, peak RSS $((kib / 1024)) MiB, output $(( $(stat -c %s "$dir/big.html") / 1024 )) KiB"
done

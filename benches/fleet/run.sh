#!/usr/bin/env bash
# The fleet lab, start to finish: builds the fabric, runs the soak and the six
# faults, prints the table, tears everything down. Exit 0 only when every
# fault was found and named with no false-positive pair.
#   bash benches/fleet/run.sh              # the larger fabric (a benchmark)
#   SIZE=small bash benches/fleet/run.sh   # the CI fabric
# PROBER=path picks the binary (default target/release/prober); docs/fleet.md.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
if [ -z "${PROBER:-}" ]; then
  (cd "$here/../.." && cargo build --release --locked --quiet --bin prober)
fi
exec python3 "$here/lab.py" run

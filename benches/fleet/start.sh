#!/usr/bin/env bash
# Build the fleet lab and leave it running (idempotent: a lab already up is
# torn down first). Prometheus answers on 127.0.0.1:19090; docs/fleet.md.
set -euo pipefail
exec python3 "$(cd "$(dirname "$0")" && pwd)/lab.py" up

#!/usr/bin/env bash
# Stop the fleet lab and remove its namespaces and links (idempotent).
set -euo pipefail
exec python3 "$(cd "$(dirname "$0")" && pwd)/lab.py" down

#!/usr/bin/env bash
# The demo in one command: installs what is missing (npm packages, nats-server), then runs
# `troupe demo examples/demo.yaml`: embedded NATS, the coordinator, one task, its message flow live.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/ensure-deps.sh
exec node apps/cli/bin/troupe.mjs demo examples/demo.yaml "$@"

#!/usr/bin/env bash
# The demo in one command: installs what is missing (npm packages, nats-server), then runs
# `troupe demo examples/demo.yaml`: embedded NATS, the coordinator, one task, its message flow live.
set -euo pipefail
cd "$(dirname "$0")/.."

major=$(node -p 'process.versions.node.split(".")[0]' 2>/dev/null || echo 0)
if [ "$major" -lt 20 ]; then
  echo "Troupe needs Node.js 20 or newer (found: $(node --version 2>/dev/null || echo none))." >&2
  exit 1
fi

if [ ! -d node_modules ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then
  echo "Installing npm packages (npm ci)…" >&2
  npm ci --no-audit --no-fund --loglevel=error
fi

bash scripts/ensure-nats-server.sh

exec node apps/cli/bin/troupe.mjs demo examples/demo.yaml "$@"

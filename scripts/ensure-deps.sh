#!/usr/bin/env bash
# Installs what Troupe needs to run when it is missing: Node.js 20+ is checked, the npm packages are installed
# (npm ci, which also builds the CLI) when node_modules is absent or older than package-lock.json, and
# nats-server is installed (scripts/ensure-nats-server.sh); with --with-browser (before `npm test`), chromium too
# (scripts/ensure-chromium.sh). Run by `npm run demo` and before `npm test`.
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
if [ "${1:-}" = --with-browser ]; then bash scripts/ensure-chromium.sh; fi

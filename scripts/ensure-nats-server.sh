#!/usr/bin/env bash
# Makes sure a nats-server binary is available, installing Debian's package when it can.
# Skipped when NATS_URL points at a server or NATS_SERVER_BIN names a binary.
set -euo pipefail

if [ -n "${NATS_URL:-}" ] || [ -n "${NATS_SERVER_BIN:-}" ]; then exit 0; fi
if command -v nats-server >/dev/null 2>&1 || [ -x /usr/sbin/nats-server ]; then exit 0; fi

if command -v apt-get >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ]; then sudo=""; elif command -v sudo >/dev/null 2>&1; then sudo="sudo"; else sudo="none"; fi
  if [ "$sudo" != none ]; then
    echo "Installing nats-server (apt-get install nats-server)…" >&2
    $sudo apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq nats-server >/dev/null
    exit 0
  fi
fi
if command -v brew >/dev/null 2>&1; then
  echo "Installing nats-server (brew install nats-server)…" >&2
  brew install nats-server
  exit 0
fi

cat >&2 <<'MSG'
nats-server was not found and could not be installed automatically.
Install it (Debian/Ubuntu: sudo apt-get install nats-server; macOS: brew install nats-server;
others: the NATS server releases page), set NATS_SERVER_BIN to its path, or set NATS_URL
to use a NATS server that is already running (JetStream enabled).
MSG
exit 1

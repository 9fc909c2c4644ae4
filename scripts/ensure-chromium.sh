#!/usr/bin/env bash
# Makes sure a Chromium is available for the dashboard's browser tests (driven by playwright-core, which downloads
# no browser): Debian's chromium package, installed when it can be. Skipped when CHROMIUM_PATH names a binary.
set -euo pipefail

if [ -n "${CHROMIUM_PATH:-}" ]; then exit 0; fi
if command -v chromium >/dev/null 2>&1 || [ -x /usr/bin/chromium ]; then exit 0; fi

if command -v apt-get >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ]; then sudo=""; elif command -v sudo >/dev/null 2>&1; then sudo="sudo"; else sudo="none"; fi
  if [ "$sudo" != none ]; then
    echo "Installing chromium for the dashboard's browser tests (apt-get install chromium)…" >&2
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq chromium >/dev/null 2>&1 ||
      { $sudo apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq chromium >/dev/null; }
    exit 0
  fi
fi

cat >&2 <<'MSG'
Chromium was not found and could not be installed automatically; the dashboard's browser tests need it.
Install it (Debian/Ubuntu: sudo apt-get install chromium), or set CHROMIUM_PATH to a Chromium or Chrome binary.
MSG
exit 1

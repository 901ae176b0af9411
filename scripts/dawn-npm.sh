#!/usr/bin/env bash
# Installs Dawn for Node (npm `webgpu`, the version web/dawn/package-lock.json pins) into
# web/dawn/node_modules (git-ignored) with `npm ci`, when it is missing or the lock changed.
set -euo pipefail
cd "$(dirname "$0")/../web/dawn"
stamp=node_modules/.lock-installed
if [ -f node_modules/webgpu/package.json ] && [ -f "$stamp" ] && cmp -s package-lock.json "$stamp"; then
  exit 0
fi
command -v npm >/dev/null || { echo "dawn-npm: FAILED: npm not found (Debian: apt-get install npm)" >&2; exit 1; }
echo "== npm ci in web/dawn (Dawn for Node: $(grep -m1 -A1 '"node_modules/webgpu"' package-lock.json | sed -n 's/.*"version": "\(.*\)".*/webgpu \1/p'))"
npm ci --no-audit --no-fund --loglevel=error || { echo "dawn-npm: FAILED: npm ci (no network to the npm registry?)" >&2; exit 1; }
cp package-lock.json "$stamp"

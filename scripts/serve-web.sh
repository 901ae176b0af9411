#!/usr/bin/env bash
# Builds the browser app (scripts/build-web.sh) and serves web/ on 127.0.0.1 (docs/guide/browser.md's web
# command). Open the printed address in a browser with WebGPU; add
# `?autorun=1&precision=amp-f16&steps=100` to train without clicks.
#
# Usage: scripts/serve-web.sh [PORT]   (default 8000)
set -euo pipefail
cd "$(dirname "$0")/.."
port="${1:-8000}"
case "$port" in
  ''|*[!0-9]*) echo "serve-web: PORT must be a number, got \`$port\`" >&2; exit 2 ;;
esac

bash scripts/build-web.sh
echo "serve-web: http://127.0.0.1:$port/  (autorun: http://127.0.0.1:$port/?autorun=1&precision=amp-f16&steps=100; Ctrl-C stops)"
# Python's http.server sends .wasm as application/wasm, which WebAssembly streaming needs.
exec python3 -m http.server --bind 127.0.0.1 --directory web "$port"

#!/usr/bin/env bash
# End-to-end browser test of the web app: build it, serve web/, drive headless Chromium
# (WebGPU on SwiftShader, no GPU needed) through chromedriver with e2e.py.
#
#   bash web/e2e/run.sh [extra e2e.py args, e.g. --precisions amp-f16 --steps 20]
#
# Env:
#   WEBGPU_AMP_E2E_SKIP_BUILD=1   do not run scripts/build-web.sh (use the web/pkg already there)
#   WEBGPU_AMP_E2E_WEB_DIR=DIR    serve DIR instead of web/ (testing the harness itself)
#   WEBGPU_AMP_E2E_KEEP_TMP=1     keep the temp dir (server/chromedriver logs) afterwards
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
WEB_DIR="${WEBGPU_AMP_E2E_WEB_DIR:-$ROOT/web}"
CHROMIUM=/usr/bin/chromium
CHROMEDRIVER=/usr/bin/chromedriver

STEP="setup"
die() { echo "e2e: FAILED ($STEP): $*" >&2; exit 1; }

# --- 1. Chromium + chromedriver from Debian (no browser downloads on this network) -----------
STEP="install chromium"
if [[ ! -x $CHROMIUM || ! -x $CHROMEDRIVER ]]; then
    SUDO=()
    [[ $(id -u) -eq 0 ]] || SUDO=(sudo)
    echo "e2e: installing chromium + chromium-driver with apt"
    "${SUDO[@]}" apt-get update || die "apt-get update failed"
    "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive \
        apt-get install -y --no-install-recommends chromium chromium-driver \
        || die "apt-get install chromium chromium-driver failed"
fi
# chromedriver only drives the Chromium of its own major version; both come from one source
# package, but a half-upgraded system would fail later with a confusing session error.
version_of() {  # "Chromium 156.0.8078.79 built on ..." -> 156.0.8078.79
    local out
    out="$("$1" --version 2>/dev/null)" || return 1
    [[ $out =~ [0-9]+(\.[0-9]+)+ ]] && echo "${BASH_REMATCH[0]}"
}
chromium_ver="$(version_of "$CHROMIUM")" || die "$CHROMIUM --version failed"
driver_ver="$(version_of "$CHROMEDRIVER")" || die "$CHROMEDRIVER --version failed"
[[ ${chromium_ver%%.*} == "${driver_ver%%.*}" ]] \
    || die "chromium $chromium_ver and chromedriver $driver_ver differ in major version"
echo "e2e: chromium $chromium_ver, chromedriver $driver_ver"

# --- 2. Build the web app ------------------------------------------------------------------
STEP="build"
if [[ ${WEBGPU_AMP_E2E_SKIP_BUILD:-0} == 1 ]]; then
    echo "e2e: skipping the build (WEBGPU_AMP_E2E_SKIP_BUILD=1)"
else
    echo "e2e: building the web app (scripts/build-web.sh)"
    (cd "$ROOT" && bash scripts/build-web.sh) || die "scripts/build-web.sh failed"
fi
# The native CLI trains every browser run again, for the page-against-CLI comparison.
STEP="build the CLI"
echo "e2e: building the native CLI (cargo build), the reference for the browser runs"
(cd "$ROOT" && cargo build --quiet --bin webgpu-amp) || die "cargo build failed"
CLI="$ROOT/target/debug/webgpu-amp"
[[ -x $CLI ]] || die "no $CLI after cargo build"
STEP="build"
[[ -f $WEB_DIR/index.html ]] || die "$WEB_DIR/index.html does not exist"
WEB_DIR="$(cd "$WEB_DIR" && pwd)"
if [[ -z ${WEBGPU_AMP_E2E_WEB_DIR:-} ]]; then
    compgen -G "$WEB_DIR/pkg/*.wasm" >/dev/null || die "no $WEB_DIR/pkg/*.wasm (was the app built?)"
fi

# --- 3. Temp dir, cleanup of everything we start --------------------------------------------
STEP="setup"
TMP="$(mktemp -d "${TMPDIR:-/tmp}/webgpu-amp-e2e.XXXXXX")"
SERVER_PID=""
DRIVER_PID=""
E2E_PID=""

# Stop a process we started: SIGTERM (to its whole process group if it leads one: chromedriver
# and the server run in their own group, chromedriver's with every Chromium it started), wait
# up to 5 s, then SIGKILL.
stop() {
    local pid=$1 i
    kill -0 "$pid" 2>/dev/null || return 0
    kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true
    for i in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
}

cleanup() {
    local rc=$?
    trap - EXIT INT TERM
    [[ $rc -eq 130 || $rc -eq 143 ]] && echo "e2e: interrupted, cleaning up" >&2
    # Interrupted: let e2e.py delete its WebDriver session (it exits on SIGTERM), then the rest.
    [[ -n $E2E_PID ]] && stop "$E2E_PID"
    [[ -n $DRIVER_PID ]] && stop "$DRIVER_PID"
    [[ -n $SERVER_PID ]] && stop "$SERVER_PID"
    # Belt and braces: any Chromium left over is recognisable by its profile in our temp dir
    # (a unique path, so this never touches anyone else's browser).
    local left
    left="$(pgrep -f -- "--user-data-dir=$TMP/" || true)"
    if [[ -n $left ]]; then
        echo "e2e: killing leftover chromium processes: $(echo $left)" >&2
        kill -KILL $left 2>/dev/null || true
    fi
    if [[ $rc -ne 0 ]]; then
        for f in "$TMP/server.log" "$TMP/chromedriver.log"; do
            [[ -s $f ]] || continue
            if [[ $f == *chromedriver.log ]]; then
                echo "---- errors in chromedriver.log (includes Chromium's stderr) ----" >&2
                # Chrome's own stderr ends up here too (--enable-chrome-logs); keep GPU errors,
                # drop the harmless D-Bus noise of a machine without a session bus.
                grep -aE '^\[.*(:ERROR:|:FATAL:|\]\[SEVERE\])' "$f" | grep -avE 'dbus|cpufreq' | tail -n 40 >&2 || true
            else
                echo "---- last lines of $(basename "$f") ----" >&2
                tail -n 20 "$f" >&2
            fi
        done
    fi
    if [[ ${WEBGPU_AMP_E2E_KEEP_TMP:-0} == 1 ]]; then
        echo "e2e: kept $TMP" >&2
    else
        rm -rf "$TMP"
    fi
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# Wait until URL answers (any HTTP status), or the process PID dies, or ~20 s pass.
wait_http() {
    local url=$1 pid=$2 i
    for i in $(seq 200); do
        kill -0 "$pid" 2>/dev/null || return 1
        python3 - "$url" <<'EOF' 2>/dev/null && return 0
import sys, urllib.request, urllib.error
try:
    urllib.request.urlopen(sys.argv[1], timeout=2)
except urllib.error.HTTPError:
    pass
EOF
        sleep 0.1
    done
    return 1
}

# --- 4. Serve web/ on 127.0.0.1 ------------------------------------------------------------
# python3 -m http.server maps .wasm to application/wasm (Python >= 3.10 has it built in),
# which WebAssembly.instantiateStreaming insists on; checked below anyway.
STEP="web server"
PORT="$(free_port)"
setsid python3 -m http.server --bind 127.0.0.1 --directory "$WEB_DIR" "$PORT" \
    >"$TMP/server.log" 2>&1 </dev/null &
SERVER_PID=$!
BASE_URL="http://127.0.0.1:$PORT"
wait_http "$BASE_URL/index.html" "$SERVER_PID" || die "http.server did not come up on port $PORT"
wasm="$(cd "$WEB_DIR" && compgen -G 'pkg/*.wasm' | head -1 || true)"
if [[ -n $wasm ]]; then
    ctype="$(python3 -c 'import sys, urllib.request; print(urllib.request.urlopen(sys.argv[1]).headers.get_content_type())' \
        "$BASE_URL/$wasm")" || die "could not fetch $BASE_URL/$wasm"
    [[ $ctype == application/wasm ]] || die "$wasm is served as $ctype, not application/wasm"
fi
echo "e2e: serving $WEB_DIR at $BASE_URL"

# --- 5. chromedriver on 127.0.0.1 ------------------------------------------------------------
# setsid: own process group, so cleanup can take chromedriver and all its Chromiums at once.
STEP="chromedriver"
DPORT="$(free_port)"
setsid "$CHROMEDRIVER" --port="$DPORT" --log-path="$TMP/chromedriver.log" --enable-chrome-logs \
    >/dev/null 2>&1 </dev/null &
DRIVER_PID=$!
WEBDRIVER_URL="http://127.0.0.1:$DPORT"
wait_http "$WEBDRIVER_URL/status" "$DRIVER_PID" || die "chromedriver did not come up on port $DPORT"

# --- 6. The tests ------------------------------------------------------------------------------
# In the background + `wait`, so that a SIGTERM/SIGINT to this script runs the cleanup at once
# (bash defers traps until a foreground child exits, and a run may take many minutes).
# --expect-f16-storage packed: the flags pin WebGPU to SwiftShader, which has no shader-f16.
# --cli: the same runs on the native CLI (with --f16-storage packed, as the page reports),
# compared with the page's results.
STEP="tests"
python3 "$HERE/e2e.py" --base-url "$BASE_URL" --webdriver-url "$WEBDRIVER_URL" \
    --chromium "$CHROMIUM" --profile-root "$TMP" --expect-f16-storage packed --cli "$CLI" "$@" &
E2E_PID=$!
wait "$E2E_PID" || die "e2e.py reported failures (see above)"
E2E_PID=""
echo "e2e: all passed"

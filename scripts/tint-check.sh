#!/usr/bin/env bash
# The browser's WGSL through the browser's compiler: every WGSL variant the browser build can
# select (native f16, packed f16, bf16 and f32; every entry point with the bindings the Rust
# side binds) goes to Chrome's WebGPU engine, Dawn, whose WGSL compiler is Tint (naga is
# wgpu's; the two accept different things: commit a646de6). Dawn comes from the npm package
# `webgpu` (pinned in web/dawn/package-lock.json, installed into web/dawn/node_modules) and
# runs on Mesa 26's lavapipe (scripts/lavapipe-coop.sh), the CPU adapter where it offers
# `shader-f16` and `subgroups`, both enabled. Fails on any Tint, pipeline or binding error.
#
#   scripts/tint-check.sh [--bin PATH] [--only SHADER] [--full] [--break-builtins]
#
# --bin: the webgpu-amp binary that exports the variants (default: cargo build's);
# --only SHADER: only that shader's variants (e.g. layernorm);
# --full: every variant; by default each storage combination and each constant set of every
#   shader at least once (web/dawn/tint-check.mjs says why; about 2 minutes against 12);
# --break-builtins: break one variant the way a646de6 fixed it, to see the check fail.
set -euo pipefail
cd "$(dirname "$0")/.."

bin=""
pass=()
while [ $# -gt 0 ]; do
  case $1 in
    --bin) bin=$2; shift 2 ;;
    *) pass+=("$1"); shift ;;
  esac
done
if [ -z "$bin" ]; then
  cargo build -q --bin webgpu-amp
  bin="${CARGO_TARGET_DIR:-target}/debug/webgpu-amp"
fi
node=$(command -v node) || { echo "tint-check: FAILED: node not found (Debian: apt-get install npm)" >&2; exit 1; }
bash scripts/dawn-npm.sh

out="${CARGO_TARGET_DIR:-target}/tmp"
mkdir -p "$out"
"$bin" shaders --browser > "$out/browser-wgsl.json"
# The variants are cut into chunks, one Node process each, run on one lane per core (Dawn
# compiles one pipeline at a time). A process's memory grows with the pipelines it has made
# (about 1.3 GB per 136 variants here; a collection does not give it back), so a chunk is an
# eighth of the variants: about 1.5 GB per process rather than 5 GB with one per core.
jobs=${TINT_CHECK_JOBS:-$(nproc)}
chunks=${TINT_CHECK_CHUNKS:-8}
[ "$chunks" -ge "$jobs" ] || chunks=$jobs
rm -f "$out"/tint-check.*.log "$out"/tint-check.*.status
lane() { # LANE: the chunks LANE, LANE + jobs, ... one after another
  local chunk status
  for ((chunk = $1; chunk < chunks; chunk += jobs)); do
    status=0
    bash scripts/lavapipe-coop.sh run "$node" web/dawn/tint-check.mjs "$out/browser-wgsl.json" \
      --shard "$chunk/$chunks" ${pass[@]+"${pass[@]}"} > "$out/tint-check.$chunk.log" 2>&1 || status=$?
    echo "$status" > "$out/tint-check.$chunk.status"
  done
}
pids=()
for ((i = 0; i < jobs; i++)); do
  lane "$i" &
  pids+=($!)
done
for pid in "${pids[@]}"; do
  wait "$pid"
done
statuses=()
for ((chunk = 0; chunk < chunks; chunk++)); do
  statuses+=("$(cat "$out/tint-check.$chunk.status" 2>/dev/null || echo missing)")
done
# Dawn prints each error it delivers (web/dawn/tint-check.mjs says why they are not caught
# there); every other line of a log is a `@@` marker naming the variant or entry point being
# made, a progress line, or one of Dawn's two notes on its limits at device creation.
only=0
for arg in ${pass[@]+"${pass[@]}"}; do [ "$arg" = --only ] && only=1; done
python3 - "$out" "$only" "${statuses[@]}" <<'PY'
import sys
out, only, statuses = sys.argv[1], sys.argv[2] == "1", sys.argv[3:]
errors, crashed, totals = {}, [], [0, 0, 0, 0.0]
for shard, status in enumerate(statuses):
    status = int(status) if status.isdigit() else status
    log = f"{out}/tint-check.{shard}.log"
    current, done = "(before the first variant)", None
    try:
        text = open(log, encoding="utf-8", errors="replace").read()
    except OSError:
        text = ""
    for line in text.splitlines():
        if line.startswith(("@@ variant ", "@@ entry ")):
            current = line.split(" ", 2)[2]
        elif line.startswith("@@ done "):
            done = line.split()[2:]
        elif line.startswith("tint-check:"):
            if shard == 0 or "FAILED" in line:
                print(line)
        elif line.startswith("Warning: max") and "artificially reduced" in line:
            pass
        elif line.strip():
            errors.setdefault(current, []).append(line)
    if status != 0 or done is None:
        crashed.append(f"chunk {shard}: Dawn exited with status {status} while making {current} ({log})")
    else:
        totals = [totals[0] + int(done[0]), totals[1] + int(done[1]), totals[2] + int(done[2]),
                  totals[3] + float(done[3])]
for where, lines in list(errors.items())[:30]:
    print(f"tint-check: ERROR in {where}:\n    " + "\n    ".join(lines[:12]), file=sys.stderr)
if len(errors) > 30:
    print(f"tint-check: ... and {len(errors) - 30} more", file=sys.stderr)
if crashed:
    sys.exit("tint-check: FAILED: " + "; ".join(crashed))
if errors:
    sys.exit(f"tint-check: FAILED: {len(errors)} variants or entry points have Tint, pipeline or "
             f"binding errors (logs: {out}/tint-check.*.log)")
# The whole set must hold native f16 variants; one shader (--only) may be f32 alone.
if totals[1] == 0 and not only:
    sys.exit("tint-check: FAILED: no native f16 variant was compiled")
print(f"tint-check: ok: {totals[0]} variants ({totals[1]} with native f16), {totals[2]} entry points "
      f"compiled by Tint into pipelines and bound, no error ({len(statuses)} Dawn processes on "
      f"Mesa 26's lavapipe, {totals[3]:.0f} s of compiling in all)")
PY

#!/usr/bin/env bash
# Cross-target checks: the Metal (macOS), DX12 (Windows) and browser WebGPU (wasm32) code
# paths must compile and pass clippy even though CI runs on Linux. Nothing is linked, so no
# macOS or Windows SDK is needed: only the Rust standard library for each target, which
# rustup fetches. A target that cannot be fetched fails the run with a message; it is never
# skipped.
#
# Usage: scripts/check-targets.sh [TARGET...]   (default: all three)
set -euo pipefail
cd "$(dirname "$0")/.."

targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  targets=(aarch64-apple-darwin x86_64-pc-windows-msvc wasm32-unknown-unknown)
fi

if ! command -v rustup >/dev/null 2>&1; then
  echo "check-targets: FAILED: rustup not found; cross-target checks need rustup to add the" >&2
  echo "check-targets: standard library for ${targets[*]} (install Rust from https://rustup.rs)" >&2
  exit 1
fi

installed="$(rustup target list --installed)"
for t in "${targets[@]}"; do
  if ! grep -qx "$t" <<<"$installed"; then
    echo "== rustup target add $t"
    if ! rustup target add "$t"; then
      echo "check-targets: FAILED: rustup could not fetch the standard library for $t" >&2
      echo "check-targets: (offline, or no such target for this toolchain); the $t checks did not run" >&2
      exit 1
    fi
  fi
done

for t in "${targets[@]}"; do
  case "$t" in
    wasm32-*)
      # The library is what runs in the browser; the CLI is native only.
      what=(--lib)
      ;;
    *)
      what=(--lib --bins --examples)
      ;;
  esac
  # clippy type-checks everything `cargo check` would (its errors fail the run too), so a
  # separate `cargo check` would only compile the crate a second time per target.
  echo "== cargo clippy ${what[*]} --target $t -- -D warnings"
  cargo clippy "${what[@]}" --target "$t" -- -D warnings
done
echo "check-targets: ok (${targets[*]})"

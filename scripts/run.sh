#!/usr/bin/env bash
# README's main job, set-up included. Until the trainer lands this shows the adapters and
# the matmul benchmark; it will run `webgpu-amp compare` on the embedded data set.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup-debian.sh
if [ -z "${XDG_RUNTIME_DIR:-}" ]; then
  export XDG_RUNTIME_DIR="$(mktemp -d)"
fi
cargo run --release -- info

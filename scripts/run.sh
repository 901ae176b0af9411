#!/usr/bin/env bash
# README's main job, set-up included: train mnist-cnn on the embedded MNIST subset under f32
# and amp-f16 from the same initial weights, print the side-by-side table, and write
# report.json and report.png. Extra arguments go to `webgpu-amp compare`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup-debian.sh
if [ -z "${XDG_RUNTIME_DIR:-}" ]; then
  export XDG_RUNTIME_DIR="$(mktemp -d)"
fi
cargo run -q -- info
cargo run -q -- compare --model mnist-cnn --dataset default --epochs 1 "$@"

#!/usr/bin/env bash
# Measure a GPU: matmul per path, SimpleCNN, MLP and gpt-char steps (webgpu-amp and PyTorch
# eager side by side), written as one JSON and one Markdown table. BENCHMARKS.md, "Measuring
# a GPU", says how to run it; scripts/gpu_report.py holds the commands (a table) and the
# options (--bin, --out, --quick, --budget, --only, --list; --help lists them).
#
# Defaults: the release binary target/release/webgpu-amp, the report in target/gpu-report/,
# and for the PyTorch side .venv/bin/python where it exists, else python3 (PYTHON_TORCH
# overrides). The report itself needs only python3's standard library.
set -euo pipefail
cd "$(dirname "$0")/.."

# Vulkan's loader and Mesa want a runtime dir; any writable one will do.
if [ -z "${XDG_RUNTIME_DIR:-}" ]; then
  export XDG_RUNTIME_DIR="$(mktemp -d)"
fi

python_torch="${PYTHON_TORCH:-}"
if [ -z "$python_torch" ]; then
  python_torch=python3
  [ -x .venv/bin/python ] && python_torch=.venv/bin/python
fi
# A python that cannot import torch or use CUDA: the report says so (its probe), loudly.
exec python3 scripts/gpu_report.py --python-torch "$python_torch" "$@"

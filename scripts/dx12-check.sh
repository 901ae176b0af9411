#!/usr/bin/env bash
# The DX12 pass (scripts/dx12-wine.sh check [ci|full]): the Windows binary on Wine 10's
# Direct3D 12 (vkd3d) over lavapipe, against the Linux binary on Vulkan (the host's lavapipe).
#   ci    info, and mnist-cnn under amp-f16 compared with Vulkan (convolutions, pooling,
#         matmuls, the loss, the optimizer and the GradScaler's kernels through FXC)
#   full  the same, selftest (every op family; FXC compiles each variant on one core under
#         Wine: over 8 minutes on a 2-core machine, which CI's budget does not hold), mlp and
#         mnist-cnn under f32 and amp-f16, gpt-tiny under amp-f16, and info and selftest with DXC
# A train compares the DX12 run's summary with the Vulkan run's on the same data, seed (so
# the same initial weights and batches) and f16 storage (packed: FXC has no 16-bit types):
# the same steps, final scale and skipped steps exactly, the last loss within 2% (relative),
# the tolerance the browser's end-to-end test holds SwiftShader to against lavapipe.
set -euo pipefail
cd "$(dirname "$0")/.."
mode=${1:-full}
case $mode in ci | full) ;; *) echo "usage: $0 ci|full" >&2; exit 2 ;; esac
wine=scripts/dx12-wine.sh
dir=${DX12WINE_DIR:-.dx12wine}
out=$dir/root/opt/webgpu-amp/out
t0=$(date +%s)
lap() { echo "dx12-check: $1 ($(($(date +%s) - t0)) s so far)"; }

bash "$wine" setup
bash "$wine" build
lap "the Windows binary is built"
cargo build -q --bin webgpu-amp
linux="${CARGO_TARGET_DIR:-target}/debug/webgpu-amp"
rm -rf "$out"
mkdir -p "$out"

echo "== DX12 (Wine 10 + vkd3d on lavapipe, FXC): webgpu-amp info --backend dx12"
bash "$wine" run info --backend dx12 | tee "$out/info.txt"
grep -q "backend *dx12" "$out/info.txt" || { echo "dx12-check: FAILED: info lists no DX12 adapter" >&2; exit 1; }
grep -q "DX12 without DXC" "$out/info.txt" \
  || { echo "dx12-check: FAILED: info on DX12 with FXC does not say why f16 is packed" >&2; exit 1; }

if [ "$mode" = full ]; then
  echo "== DX12 (FXC): webgpu-amp selftest"
  bash "$wine" run selftest
  lap "DX12 selftest passed"
else
  echo "== DX12 (FXC): selftest left to \`scripts/dx12-wine.sh check full\` (over 8 minutes under Wine)"
fi

train() { # NAME MODEL PRECISION STEPS [DATASET]: the DX12 run and the Vulkan run, compared
  local name=$1 model=$2 precision=$3 steps=$4 dataset=${5:-default}
  local flags=(train --model "$model" --dataset "$dataset" --precision "$precision" --steps "$steps"
    --batch-size 32 --seed 0 --no-validate --f16-storage packed)
  echo "== train $model $precision, $steps steps: DX12 and Vulkan"
  bash "$wine" run "${flags[@]}" --backend dx12 --metrics "out/$name-dx12.jsonl" > "$out/$name-dx12.log" 2>&1 \
    || { cat "$out/$name-dx12.log" >&2; echo "dx12-check: FAILED: DX12 train $name" >&2; exit 1; }
  WEBGPU_AMP_BACKEND=vulkan "$linux" "${flags[@]}" --backend vulkan --metrics "$out/$name-vulkan.jsonl" \
    > "$out/$name-vulkan.log" 2>&1 \
    || { cat "$out/$name-vulkan.log" >&2; echo "dx12-check: FAILED: Vulkan train $name" >&2; exit 1; }
  python3 - "$out/$name-dx12.jsonl" "$out/$name-vulkan.jsonl" <<'PY'
import json, sys
def summary(path):
    with open(path) as f:
        lines = [json.loads(l) for l in f if l.strip()]
    return next(l["summary"] for l in reversed(lines) if "summary" in l)
dx12, vk = summary(sys.argv[1]), summary(sys.argv[2])
problems = [f"{k}: DX12 {dx12[k]} != Vulkan {vk[k]}" for k in ("steps", "final_scale", "skipped_steps")
            if dx12[k] != vk[k]]
rel = abs(dx12["final_loss"] - vk["final_loss"]) / max(abs(vk["final_loss"]), 1e-12)
print(f"   DX12 ({dx12['adapter']}, {dx12['backend']}): loss {dx12['first_loss']:.6g} -> {dx12['final_loss']:.6g}; "
      f"Vulkan ({vk['adapter']}): {vk['first_loss']:.6g} -> {vk['final_loss']:.6g}; last loss relative "
      f"difference {rel:.2e} (tolerance 0.02); scale {dx12['final_scale']}, skipped {dx12['skipped_steps']}")
if dx12["backend"] != "dx12":
    problems.append(f"the Windows run trained on {dx12['backend']}, not dx12")
if not rel <= 0.02:
    problems.append(f"last loss: DX12 {dx12['final_loss']} vs Vulkan {vk['final_loss']}")
if problems:
    sys.exit("dx12-check: FAILED: " + "; ".join(problems))
PY
  lap "train $name matches Vulkan"
}

train mnist-cnn-amp-f16 mnist-cnn amp-f16 6
if [ "$mode" = full ]; then
  train mnist-cnn-f32 mnist-cnn f32 6
  train mlp-f32 mlp f32 20
  train mlp-amp-f16 mlp amp-f16 20
  # A GPT: the LayerNorm that adds the residual, its fused backward and the GELU recompute.
  train gpt-tiny-amp-f16 gpt-tiny amp-f16 6 hamlet
  echo "== DX12 with DXC (dxcompiler.dll from PyPI's slangpy): info and selftest"
  # Measured 2026-11-27 (Wine 10.0, vkd3d 1.14, Mesa 25's lavapipe, slangpy 0.43.1's
  # dxcompiler.dll 1.9.2602.17): DXC loads and the D3D12 device is made, but with DXC wgpu
  # 30.0.1 exposes an adapter only at shader model 6.0 or later, which vkd3d 1.14 does not
  # report; so this step fails here. It stays a failure, not a skip: DXC is unchecked.
  if ! bash "$wine" run-dxc info --backend dx12 | tee "$out/info-dxc.txt"; then
    echo "dx12-check: FAILED: with DXC (dxcompiler.dll from slangpy) wgpu finds no DX12 adapter under Wine + vkd3d (it needs shader model 6.0, which vkd3d does not report), so native f16 on DX12 is NOT CHECKED here; the FXC pass above passed" >&2
    exit 1
  fi
  bash "$wine" run-dxc selftest
fi
lap "the DX12 pass ($mode) passed"

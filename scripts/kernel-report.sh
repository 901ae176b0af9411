#!/usr/bin/env bash
# The kernels compiled for real GPUs that are not here: Mesa's RADV (AMD RDNA3, Navi31) and NVK
# (NVIDIA Ampere, GA102) create real devices through Debian's mesa-drm-shim noop shims, and
# their compilers (ACO, NAK) build the pipelines a training step plans on that class, through
# the class's kernel table, and report registers, spills, scratch, LDS, occupancy, static
# cycles and the main loop's instruction mix. llama.cpp's Vulkan `mul_mm` (coopmat and SIMT,
# compiled as its build compiles it, with its tiles for the device) sits beside ours. Nothing
# runs on a GPU: this measures code, not time (BENCHMARKS.md has the times).
#
#   scripts/kernel-report.sh [--gate] [--out DIR] [--bin BINARY] [PRESET ...]
#
#   PRESET      training steps to plan (default: mnist-cnn simple-cnn gpt-char resnet18-cifar
#               llama-tiny smollm2-135m); each under amp-f16 and f32, plus `bench matmul`'s
#               GEMMs (1024, 4096)
#   --gate      CI: amp-f16 steps only, no GEMMs or llama.cpp rows; exits 1 on any spill in a
#               step kernel, and where a class whose device lists f16 cooperative matrices
#               does not run the step's products on them (scripts/test.sh runs it)
#   --out DIR   where report.json, report.md and the ISA go (default .kernel-report/out)
#   --bin       the webgpu-amp binary (default: target/debug/webgpu-amp, built if missing)
#   --tuning CLASS=FILE   a kernel table for one class (rdna3 or ampere): a tuning file for
#               that shimmed adapter (`webgpu-amp info` names it), e.g. to see what a tile
#               compiles to, or that the gate fails on one that spills
#
# Pinned (codegen moves between releases): Mesa, glslc (Debian trixie / trixie-backports,
# through scripts/lavapipe-coop.sh's private apt state in .kernel-report/mesa) and llama.cpp
# as vendored by PyPI's llama-cpp-python (its source distribution, unpacked once into
# .kernel-report/llama). Change a pin here and say so in BENCHMARKS.md.
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
MESA_VERSION=${KERNEL_REPORT_MESA:-26.1.6-1~bpo13+1}
LLAMA_CPP_PYTHON=${KERNEL_REPORT_LLAMA:-0.3.36}
DIR=${KERNEL_REPORT_DIR:-$REPO/.kernel-report}
OUT=$DIR/out
BIN=
GATE=0
PRESETS=()
declare -A TUNING=()
while [ $# -gt 0 ]; do
  case $1 in
    --gate) GATE=1 ;;
    --out) OUT=$2; shift ;;
    --bin) BIN=$2; shift ;;
    --tuning) TUNING[${2%%=*}]=$(realpath "${2#*=}"); shift ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    -*) echo "kernel-report: unknown option $1" >&2; exit 2 ;;
    *) PRESETS+=("$1") ;;
  esac
  shift
done
[ ${#PRESETS[@]} -gt 0 ] || PRESETS=(mnist-cnn simple-cnn gpt-char resnet18-cifar llama-tiny smollm2-135m)
die() { echo "kernel-report: $*" >&2; exit 1; }
export XDG_RUNTIME_DIR=${XDG_RUNTIME_DIR:-$(mktemp -d)}

# 1. Mesa (RADV, NVK, the DRM shims), glslc and the Vulkan headers, pinned.
M=$DIR/mesa
LIB=$M/root/usr/lib/x86_64-linux-gnu
COOPSIM_DIR=$M COOPSIM_MESA=$MESA_VERSION COOPSIM_EXTRA="mesa-drm-shim=$MESA_VERSION glslc libvulkan-dev" \
  bash "$REPO/scripts/lavapipe-coop.sh" setup >&2
for n in radeon nouveau; do
  sed -E "s#\"library_path\": *\"[^\"]*\"#\"library_path\": \"$LIB/libvulkan_$n.so\"#" \
    "$M/root/usr/share/vulkan/icd.d/${n}_icd.json" > "$M/${n}_icd.json"
done
# A program under Mesa's glibc (trixie's: the drivers need >= 2.41), on one shimmed GPU.
on_class() {
  local class=$1; shift
  local icd shim
  # Only the class's own table (a tuning file names one adapter), and not for `info`: it
  # checks a loaded table's numbers on the device, which on a shim computes nothing (the
  # kernels are planned on a dry twin, where no check runs).
  unset WEBGPU_AMP_TUNING
  [ -z "${TUNING[$class]:-}" ] || [ "${2:-}" = info ] || export WEBGPU_AMP_TUNING=${TUNING[$class]}
  case $class in
    rdna3) icd=radeon shim=amdgpu; export AMDGPU_GPU_ID=navi31 ;;
    ampere) icd=nouveau shim=nouveau; export NOUVEAU_CHIPSET=0x172 ;;
  esac
  VK_DRIVER_FILES=$M/${icd}_icd.json VK_ICD_FILENAMES=$M/${icd}_icd.json NODEVICE_SELECT=1 \
    WEBGPU_AMP_BACKEND=vulkan nice -n 10 "$LIB/ld-linux-x86-64.so.2" \
    --library-path "$LIB:$M/root/lib/x86_64-linux-gnu" --preload "$LIB/lib${shim}_noop_drm_shim.so" "$@"
}
glslc() {
  "$LIB/ld-linux-x86-64.so.2" --library-path "$LIB:$M/root/lib/x86_64-linux-gnu" "$M/root/usr/bin/glslc" "$@"
}

# 2. vkstats (SPIR-V -> pipelines -> the driver's statistics and ISA).
mkdir -p "$DIR/bin"
VKSTATS=$DIR/bin/vkstats
if [ ! -x "$VKSTATS" ] || [ "$REPO/scripts/kernel_report/vkstats.c" -nt "$VKSTATS" ]; then
  gcc -O1 -Wall -I "$M/root/usr/include" -o "$VKSTATS" "$REPO/scripts/kernel_report/vkstats.c" -ldl
fi

# 3. The binary whose kernels are reported.
if [ -z "$BIN" ]; then
  BIN=$REPO/target/debug/webgpu-amp
  [ -x "$BIN" ] || (cd "$REPO" && nice -n 5 cargo build --bin webgpu-amp >&2)
fi
[ -x "$BIN" ] || die "no binary at $BIN"

# 4. llama.cpp's mul_mm, compiled as vulkan-shaders-gen compiles matmul_f16 (f16 A and B, f32
#    out): coopmat without spirv-opt, SIMT with -O, --target-env=vulkan1.2.
LLAMA=$DIR/llama
SHADERS=$LLAMA/vulkan-shaders
if [ ! -f "$LLAMA/ready-$LLAMA_CPP_PYTHON" ]; then
  rm -rf "$LLAMA"; mkdir -p "$LLAMA/sdist"
  echo "kernel-report: llama-cpp-python $LLAMA_CPP_PYTHON (llama.cpp's source) from PyPI" >&2
  python3 -m pip download -q --no-deps "llama-cpp-python==$LLAMA_CPP_PYTHON" -d "$LLAMA/sdist" >&2
  tar xzf "$LLAMA"/sdist/llama_cpp_python-*.tar.gz -C "$LLAMA" --strip-components=6 --wildcards \
    '*/vendor/llama.cpp/ggml/src/ggml-vulkan/vulkan-shaders/*'
  rm -rf "$LLAMA/sdist"
  touch "$LLAMA/ready-$LLAMA_CPP_PYTHON"
fi
[ -f "$SHADERS/mul_mm.comp" ] || die "no mul_mm.comp in $SHADERS"
F16="-DFLOAT16=1 -DACC_TYPE=float -DACC_TYPEV2=vec2 -DACC_TYPE_VEC4=vec4 -DFLOAT_TYPE=float16_t
  -DFLOAT_TYPEV2=f16vec2 -DFLOAT_TYPEV4=f16vec4 -DFLOAT_TYPEV8=f16mat2x4 -DDATA_A_F16=1 -DLOAD_VEC_A=8
  -DLOAD_VEC_B=8 -DB_TYPE=f16mat2x4 -DB_TYPE_SCALAR=float16_t -DB_TYPEV4=f16vec4 -DD_TYPE=float"
mkdir -p "$LLAMA/spv"
# shellcheck disable=SC2086
[ -s "$LLAMA/spv/matmul_f16_cm1.spv" ] || glslc -fshader-stage=compute --target-env=vulkan1.2 \
  "$SHADERS/mul_mm.comp" -o "$LLAMA/spv/matmul_f16_cm1.spv" $F16 -DCOOPMAT=1
# shellcheck disable=SC2086
[ -s "$LLAMA/spv/matmul_f16.spv" ] || glslc -fshader-stage=compute --target-env=vulkan1.2 \
  "$SHADERS/mul_mm.comp" -o "$LLAMA/spv/matmul_f16.spv" -O $F16

# llama.cpp's large tiles (ggml_vk_load_shaders), spec constants BLOCK_SIZE, BM, BN, BK, WM,
# WN, WMITER, TM, TN, TK, WARP, then ALIGNED = 1 (mul_mm.comp fixes BK at 32 for f16 A): RADV's subgroup is 64 (AMD with coopmat and
# not AMD's own driver: 4 warps of 64x64); NVK's is 32 (4 warps of 64x64); SIMT: a device
# without coopmat (TM, TN 4).
llama_jobs() {
  local class=$1 warp=64 block=256
  [ "$class" = ampere ] && { warp=32; block=128; }
  local label
  label() { printf '{"id":"%s","who":"llama.cpp","kernel":"mul_mm %s","variant":"matmul_f16 aligned","tile":"%s","label":"spec %s","used_by":["anchor"]}' "$@"; }
  printf 'llama-cm1\t%s\tmain\tfull\t%s\t%s\n' "$LLAMA/spv/matmul_f16_cm1.spv" "$block,128,128,16,64,64,2,16,16,16,$warp,1" \
    "$(label llama-cm1 coopmat "128x128 BK32 ($((block / warp)) warps of 64x64, 16x16 fragments)" "$block,128,128,16,64,64,2,16,16,16,$warp,1")"
  printf 'llama-simt\t%s\tmain\tfull\t%s\t%s\n' "$LLAMA/spv/matmul_f16.spv" "128,128,128,16,$((2 * warp)),64,2,4,4,1,$warp,1" \
    "$(label llama-simt SIMT "128x128 BK32 ($((128 / warp)) warps of $((2 * warp))x64, 4x4 per thread)" "128,128,128,16,$((2 * warp)),64,2,4,4,1,$warp,1")"
}

DATE=$(date -u +%Y-%m-%d)
rm -rf "$OUT"; mkdir -p "$OUT"

# 5. Stand-ins for data no registry ships, in the custom data set format (src/data/custom.rs),
#    beside the report (a step's kernels depend on the shapes only): CIFAR-10's shapes for
#    the CIFAR ResNets (64 zero 3x32x32 images labelled 0..9), and token ids for a model whose
#    vocabulary is not the embedded text's (SmolLM2: 32 zero sequences of 1024 tokens, the
#    window `train` defaults to; the model's vocabulary sets the class count).
python3 - "$OUT" <<'PY'
import json, struct, sys
def save(path, tensors):
    head, data = {}, b''
    for name, (dtype, shape, raw) in tensors.items():
        head[name] = {'dtype': dtype, 'shape': shape, 'data_offsets': [len(data), len(data) + len(raw)]}
        data += raw
    head = json.dumps(head).encode()
    head += b' ' * (-len(head) % 8)
    open(path, 'wb').write(struct.pack('<Q', len(head)) + head + data)
save(sys.argv[1] + '/cifar-shape.safetensors',
     {'x': ('F32', [64, 3, 32, 32], bytes(4 * 64 * 3 * 32 * 32)), 'y': ('U8', [64], bytes(i % 10 for i in range(64)))})
save(sys.argv[1] + '/tokens-1024.safetensors',
     {'x': ('I32', [32, 1024], bytes(4 * 32 * 1024)), 'y': ('I32', [32, 1024], bytes(4 * 32 * 1024))})
PY
data_of() {
  case $1 in
    resnet*-cifar) echo "--dataset $OUT/cifar-shape.safetensors" ;;
    smollm2-*) echo "--dataset $OUT/tokens-1024.safetensors" ;;
  esac
}

# 6. Per class: what `info` says, the planned kernels as SPIR-V, the compiler's statistics.

PRECISIONS=(amp-f16 f32)
[ $GATE = 1 ] && PRECISIONS=(amp-f16)
for class in rdna3 ampere; do
  C=$OUT/$class; mkdir -p "$C/spv" "$C/ir"
  on_class $class "$BIN" info --json > "$C/info.raw.json" || die "$class: webgpu-amp info failed under the shim"
  # Both devices list 16x16x16 f16*f16->f32 cooperative matrices (RADV navi31, NVK 0x172):
  # both classes are tensor-core eligible, which is what the gate holds them to.
  python3 - "$C/info.raw.json" "$class" > "$C/info.json" <<'PY'
import json, sys
a = json.load(open(sys.argv[1]))[0]
tc = a['capabilities']['tensor_cores']
used = 'used: ' + json.dumps(tc['Used']) if 'Used' in tc else 'not used: ' + tc['NotUsed']
print(json.dumps({'class': sys.argv[2], 'adapter': a['name'], 'tensor_cores': used, 'lists_f16_coop': True}))
PY
  : > "$C/planned.jsonl"
  for p in "${PRESETS[@]}"; do
    for prec in "${PRECISIONS[@]}"; do
      # shellcheck disable=SC2046
      on_class $class "$BIN" kernels --model "$p" --precision "$prec" $(data_of "$p") --spirv "$C/spv/$p-$prec" \
        | python3 -c 'import json,sys; [print(json.dumps({**json.loads(l), "used_by": sys.argv[1]})) for l in sys.stdin]' "$p $prec" \
        >> "$C/planned.jsonl" || die "$class: planning $p $prec failed"
    done
  done
  if [ $GATE = 0 ]; then
    on_class $class "$BIN" kernels --gemm 1024,4096 --spirv "$C/spv/gemm" \
      | python3 -c 'import json,sys; [print(json.dumps({**json.loads(l), "used_by": "bench matmul"})) for l in sys.stdin]' \
      >> "$C/planned.jsonl" || die "$class: planning the GEMMs failed"
  fi
  # One job per distinct pipeline (exact label and build), with every step that plans it.
  python3 - "$C/planned.jsonl" "$REPO/scripts" > "$C/jobs.tsv" <<'PY'
import json, sys
sys.path.insert(0, sys.argv[2])
from kernel_report import consts_of, tile_of, variant_of
jobs = {}
for line in open(sys.argv[1]):
    e = json.loads(line)
    key = (e['label'], e['entry'], e['trusted'])
    if key not in jobs:
        c = consts_of(e['label'])
        jobs[key] = {'id': f"k{len(jobs):04d}", 'who': 'ours', 'kernel': f"{e['shader']}::{e['entry']}",
                     'variant': variant_of(e['label']) + (' trusted' if e['trusted'] else ''),
                     'tile': tile_of(e['shader'], e['entry'], c), 'label': e['label'], 'spv': e['spv'],
                     'entry': e['entry'], 'used_by': []}
    if e['used_by'] not in jobs[key]['used_by']:
        jobs[key]['used_by'].append(e['used_by'])
for j in jobs.values():
    print('\t'.join([j['id'], j['spv'], j['entry'], 'varying', '-', json.dumps(j)]))
PY
  [ $GATE = 1 ] || llama_jobs $class >> "$C/jobs.tsv"
  echo "kernel-report: $class: compiling $(wc -l < "$C/jobs.tsv") pipelines" >&2
  status=0
  cut -f1-5 "$C/jobs.tsv" | on_class $class "$VKSTATS" "$C/ir" > "$C/stats.jsonl" || status=$?
  [ $status = 0 ] || echo "kernel-report: $class: some pipelines failed to compile (vkstats exit $status)" >&2
  python3 "$REPO/scripts/kernel_report.py" rows "$C/rows.jsonl" "$C/jobs.tsv" "$C/stats.jsonl" $class
done

# 7. The report: JSON rows, and the Markdown table with what it was measured on.
cat "$OUT"/*/rows.jsonl > "$OUT/report.jsonl"
{
  echo "Static kernel report, $DATE: Mesa $MESA_VERSION (RADV navi31 = RDNA3 gfx1100; NVK 0x172 ="
  echo "Ampere GA102) through mesa-drm-shim, llama.cpp from llama-cpp-python $LLAMA_CPP_PYTHON,"
  echo "\`scripts/kernel-report.sh$([ $GATE = 1 ] && echo ' --gate')$(for c in "${!TUNING[@]}"; do echo -n " --tuning $c=${TUNING[$c]}"; done) ${PRESETS[*]}\` on $(git -C "$REPO" rev-parse --short HEAD)."
  for class in rdna3 ampere; do
    echo "$class: $(python3 -c 'import json,sys; i=json.load(open(sys.argv[1])); print(i["adapter"], "| tensor cores", i["tensor_cores"])' "$OUT/$class/info.json")"
  done
  echo
  python3 "$REPO/scripts/kernel_report.py" table "$OUT/report.jsonl"
} > "$OUT/report.md"
echo "kernel-report: $(wc -l < "$OUT/report.jsonl") pipelines; $OUT/report.md, $OUT/report.jsonl, ISA in $OUT/*/ir" >&2
if [ $GATE = 1 ]; then
  python3 "$REPO/scripts/kernel_report.py" gate "$OUT/report.jsonl" "$OUT"/*/info.json
fi

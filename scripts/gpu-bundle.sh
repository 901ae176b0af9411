#!/usr/bin/env bash
# Everything scripts/gpu-report.sh needs on a GPU machine that has no Rust toolchain and no
# network (the workplace's lent GPU machine: see BENCHMARKS.md, "Measuring a GPU"), in one
# git-ignored folder to carry there:
#   .gpu-bundle/webgpu-amp   the release binary, stripped (it links only glibc and loads
#                            libvulkan.so.1 at run time);
#   .gpu-bundle/debs/*.deb   the Vulkan loader (Debian's libvulkan1) and glvnd's libraries
#                            (NVIDIA's Vulkan driver is libGLX_nvidia.so.0, which needs
#                            libGLdispatch.so.0: without them the loader finds "no drivers",
#                            seen on the lent H200), downloaded with a private apt state
#                            under /tmp (the system's own is untouched).
# The scripts themselves are tracked files and travel with the working tree. Then it prints
# the one command to run there. Options: --no-build (use target/release/webgpu-amp as it is),
# --out DIR (default .gpu-bundle; must be git-ignored).
set -euo pipefail
cd "$(dirname "$0")/.."

out=.gpu-bundle
build=1
while [ $# -gt 0 ]; do
  case "$1" in
    --no-build) build=0 ;;
    --out) out="$2"; shift ;;
    *) echo "error: unknown argument $1 (see the comment at the top of $0)" >&2; exit 2 ;;
  esac
  shift
done
if ! git check-ignore -q "$out/x"; then
  echo "error: $out is not git-ignored; it would travel as a tracked change (add it to .gitignore)" >&2
  exit 2
fi

if [ "$build" = 1 ]; then
  echo "== cargo build --release"
  cargo build --release
fi
mkdir -p "$out/debs"
echo "== $out/webgpu-amp (stripped)"
cp target/release/webgpu-amp "$out/webgpu-amp"
strip "$out/webgpu-amp"

echo "== $out/debs: the Vulkan loader and glvnd (which NVIDIA's Vulkan driver links)"
state=$(mktemp -d)
trap 'rm -rf "$state"' EXIT
mkdir -p "$state/partial"
apt_opts=(-oAPT::Architecture=amd64 -oAPT::Architectures=amd64 "-oDir::State::Lists=$state")
apt-get "${apt_opts[@]}" update -qq
rm -f "$out"/debs/*.deb
(cd "$out/debs" && apt-get "${apt_opts[@]}" download libvulkan1 libglvnd0 libglx0 libgl1 libegl1 libgles2 libopengl0)

size_kib=$(du -sk "$out" | cut -f1)
echo "== $out: $((size_kib / 1024)) MiB ($(ls "$out/debs"))"
if [ "$size_kib" -gt $((60 * 1024)) ]; then
  echo "error: $out is over 60 MiB; the device tool carries at most 64 MiB with the tree" >&2
  exit 1
fi

cat <<EOF

== To run on the lent GPU (the device tool's run, with carry ["$out"], timeout_s 600),
   from the checkout the tool sends (build the bundle there), as one line:

for f in $out/debs/*.deb; do dpkg -x \$f /; done; ldconfig; f=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json; [ -e \$f ] && export VK_DRIVER_FILES=\$f; export WEBGPU_AMP_BACKEND=vulkan; set -o pipefail; bash scripts/gpu-report.sh --bin $out/webgpu-amp --out \$OUT 2>&1 | tee \$OUT/gpu-report.log

== On a machine of your own with a GPU and Rust: cargo build --release && bash scripts/gpu-report.sh
EOF

#!/usr/bin/env bash
# Tensor cores without a GPU: Mesa 26's lavapipe (software Vulkan) implements
# VK_KHR_cooperative_matrix (8x8x8 f16*f16+f32->f32 at subgroup scope), which Debian 12's Mesa
# 22 does not. This script fetches that lavapipe and its whole runtime closure (glibc
# included: it needs glibc >= 2.41) from a newer Debian suite into a private folder, and runs
# programs under it, without touching apt's sources, /etc or the system's libraries.
#
#   scripts/lavapipe-coop.sh setup              fetch into .coopsim/ (idempotent; ~60 MB)
#   scripts/lavapipe-coop.sh run PROGRAM ARGS   run an ELF binary under it (setup first)
#   scripts/lavapipe-coop.sh cargo ARGS         cargo with test binaries under it, e.g.
#                                               `scripts/lavapipe-coop.sh cargo test --test matmul_coop`
#   scripts/lavapipe-coop.sh mirror             print the Debian archive this machine's apt uses
#
# A program under it sees one Vulkan adapter, `llvmpipe (LLVM ...)` of Mesa 26, and
# `--tensor-cores on` (or WEBGPU_AMP_TENSOR_CORES=on, on:8x8, on:16x16) runs the tensor-core
# kernels there. Programs it starts are not under it (they get the system's glibc): the tests
# and scripts/*_compat.py put $WEBGPU_AMP_RUNNER (set by `cargo` here: `scripts/lavapipe-coop.sh
# run`) before the webgpu-amp binary they start.
#
# Environment: COOPSIM_DIR     the folder (default .coopsim in the repository; git-ignored)
#              COOPSIM_SUITE   trixie-backports (default; Mesa 26.1) or sid (Mesa 26.2)
#              COOPSIM_MIRROR  the Debian archive (default: the one this machine's apt uses)
#              COOPSIM_KEYRING default /usr/share/keyrings/debian-archive-keyring.gpg
#              COOPSIM_MESA    pin Mesa to this Debian version (default: the suite's newest)
#              COOPSIM_EXTRA   more packages (`name` or `name=version`) fetched into the same
#                              root with their closure (scripts/kernel-report.sh: the DRM shims,
#                              glslc, the Vulkan headers)
set -euo pipefail

SCRIPT=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/$(basename "${BASH_SOURCE[0]}")
REPO=$(cd "$(dirname "$SCRIPT")/.." && pwd)
DIR=${COOPSIM_DIR:-$REPO/.coopsim}
SUITE=${COOPSIM_SUITE:-trixie-backports}
TRIPLE=x86_64-linux-gnu
ROOT=$DIR/root
LIBDIR=$ROOT/usr/lib/$TRIPLE
LOADER=$LIBDIR/ld-linux-x86-64.so.2
MESA_PIN=${COOPSIM_MESA:-}
EXTRA=${COOPSIM_EXTRA:-}
STAMP=$DIR/ready-$SUITE${MESA_PIN:+-$MESA_PIN}${EXTRA:+-$(echo "$EXTRA" | tr ' =' '_-')}

die() { echo "lavapipe-coop: $*" >&2; exit 1; }

# The Debian archive this machine's apt already uses (the first non-security URL of its
# sources, deb822 or one-line), so no mirror is written here.
apt_mirror() {
  cat /etc/apt/sources.list.d/*.sources /etc/apt/sources.list /etc/apt/sources.list.d/*.list \
    2>/dev/null | awk '
      /^URIs:/ { for (i = 2; i <= NF; i++) if ($i !~ /security/) { print $i; exit } }
      /^deb / { for (i = 2; i <= NF; i++) if ($i ~ /^https?:/ && $i !~ /security/) { print $i; exit } }' \
    || true
}

setup() {
  if [ -f "$STAMP" ] && [ -x "$LOADER" ] && [ -f "$DIR/icd.json" ]; then
    return 0
  fi
  command -v apt-get >/dev/null && command -v dpkg >/dev/null || die "needs apt-get and dpkg (Debian)"
  local mirror keyring apt t0
  mirror=${COOPSIM_MIRROR:-$(apt_mirror)}
  [ -n "$mirror" ] || die "no Debian archive in the apt sources; set COOPSIM_MIRROR"
  keyring=${COOPSIM_KEYRING:-/usr/share/keyrings/debian-archive-keyring.gpg}
  [ -r "$keyring" ] || die "keyring $keyring not readable; set COOPSIM_KEYRING"
  t0=$(date +%s)
  mkdir -p "$DIR"
  apt=$DIR/apt
  rm -rf "$apt" "$DIR/debs" "$ROOT"
  mkdir -p "$apt/lists/partial" "$apt/cache/archives/partial" "$DIR/debs"
  : > "$apt/status"
  local suites=$SUITE
  case $SUITE in *-backports) suites="${SUITE%-backports} $SUITE" ;; esac
  for s in $suites; do
    echo "deb [arch=amd64 signed-by=$keyring] $mirror $s main"
  done > "$apt/sources.list"
  # A private apt: its own sources, lists, cache and an empty dpkg status, so resolving
  # lists the whole runtime closure; nothing of the system's apt is read or written.
  local opts=(-o Dir::Etc::SourceList="$apt/sources.list" -o Dir::Etc::SourceParts=/dev/null
    -o Dir::Etc::Preferences=/dev/null -o Dir::Etc::PreferencesParts=/dev/null
    -o Dir::State="$apt" -o Dir::State::Lists="$apt/lists" -o Dir::State::status="$apt/status"
    -o Dir::Cache="$apt/cache" -o Dir::Cache::pkgcache= -o Dir::Cache::srcpkgcache=
    -o APT::Architecture=amd64 -o APT::Architectures=amd64 -o Debug::NoLocking=1
    -o Acquire::IndexTargets::deb::DEP-11::DefaultEnabled=false
    -o APT::Sandbox::User="$(id -un)")
  echo "lavapipe-coop: apt-get update ($suites from $mirror)" >&2
  local log
  log=$(apt-get "${opts[@]}" update -q 2>&1) || { echo "$log" >&2; die "apt-get update failed"; }
  if grep -q -E 'GPG error|NO_PUBKEY|not signed|BADSIG|EXPKEYSIG' <<<"$log"; then
    echo "$log" >&2; die "the $suites signatures do not verify against $keyring"
  fi
  # shellcheck disable=SC2086
  apt-get "${opts[@]}" install -s -q --no-install-recommends -t "$SUITE" \
    "mesa-vulkan-drivers${MESA_PIN:+=$MESA_PIN}" libvulkan1 $EXTRA > "$apt/resolve.txt" \
    || { cat "$apt/resolve.txt" >&2; die "resolving failed${MESA_PIN:+ (is Mesa $MESA_PIN still in $SUITE? the pin names a Debian version)}"; }
  awk '/^Inst /{ v = $3; gsub(/[()]/, "", v); print $2 "=" v }' "$apt/resolve.txt" > "$apt/packages.txt"
  grep -q '^mesa-vulkan-drivers=' "$apt/packages.txt" || die "mesa-vulkan-drivers did not resolve"
  echo "lavapipe-coop: downloading $(wc -l < "$apt/packages.txt") packages" >&2
  # shellcheck disable=SC2046
  (cd "$DIR/debs" && apt-get "${opts[@]}" download -qq $(cat "$apt/packages.txt") >&2)
  echo "lavapipe-coop: extracting $(du -sh "$DIR/debs" | cut -f1)" >&2
  mkdir -p "$ROOT"
  for deb in "$DIR"/debs/*.deb; do dpkg -x "$deb" "$ROOT"; done
  [ -x "$LOADER" ] || die "no glibc loader at $LOADER"
  [ -f "$LIBDIR/libvulkan_lvp.so" ] || die "no libvulkan_lvp.so in $LIBDIR"
  # The driver manifest, pointing at the extracted library by absolute path.
  sed -E "s#\"library_path\": *\"[^\"]*\"#\"library_path\": \"$LIBDIR/libvulkan_lvp.so\"#" \
    "$ROOT/usr/share/vulkan/icd.d/lvp_icd.json" > "$DIR/icd.json"
  sed -n 's/^mesa-vulkan-drivers=//p' "$apt/packages.txt" > "$DIR/mesa-version"
  rm -rf "$DIR/debs"
  rm -f "$DIR"/ready-*
  touch "$STAMP"
  echo "lavapipe-coop: Mesa $(cat "$DIR/mesa-version") ready in $DIR ($(( $(date +%s) - t0 )) s)" >&2
}

# The environment of a program under the private lavapipe: its manifest as the only Vulkan
# driver, without the system's (Mesa 22) device-select layer, on the Vulkan backend.
export_env() {
  export VK_DRIVER_FILES="$DIR/icd.json" VK_ICD_FILENAMES="$DIR/icd.json" NODEVICE_SELECT=1
  export WEBGPU_AMP_BACKEND=vulkan
}

run() {
  [ $# -ge 1 ] || die "usage: $0 run PROGRAM [ARGS...]"
  setup
  local program=$1
  shift
  case $program in */*) ;; *) program=$(command -v -- "$program") || die "not found: $1" ;; esac
  [ "$(head -c 4 "$program" | od -An -c | tr -d ' ')" = '177ELF' ] \
    || die "$program is not an ELF binary: run the binary itself, not a script"
  export_env
  exec "$LOADER" --library-path "$LIBDIR:$ROOT/lib/$TRIPLE" "$program" "$@"
}

case ${1:-} in
  setup) setup; echo "Mesa $(cat "$DIR/mesa-version") lavapipe in $DIR" ;;
  mirror) apt_mirror ;;
  run) shift; run "$@" ;;
  cargo)
    shift
    setup
    export CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_RUNNER="$SCRIPT run"
    export WEBGPU_AMP_RUNNER="$SCRIPT run"
    export WEBGPU_AMP_BACKEND=vulkan
    exec cargo "$@"
    ;;
  *) sed -n '2,/^set -euo/p' "$SCRIPT" | sed '$d; s/^# \{0,1\}//' >&2; exit 2 ;;
esac

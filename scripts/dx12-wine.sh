#!/usr/bin/env bash
# DX12, executed on a Linux machine without a GPU: the Windows build of webgpu-amp (mingw-w64
# cross build) runs under Wine 10's Direct3D 12 (its bundled vkd3d translates D3D12 to Vulkan)
# on Mesa's lavapipe, inside a Debian trixie root kept in a private folder. Debian 12's
# Wine 8 (vkd3d 1.6) returns zeros from every dispatch, so the root is needed; nothing of the
# host system changes but the Debian packages the script installs when missing (debootstrap,
# mingw-w64, debian-archive-keyring) and the rustup target x86_64-pc-windows-gnu.
#
#   scripts/dx12-wine.sh setup        the root (debootstrap --variant=minbase trixie, then Wine,
#                                     Mesa's Vulkan drivers and Xvfb), the Wine prefix with
#                                     Direct3D on Vulkan, and Microsoft's FXC from a PyPI
#                                     wheel (idempotent; about 2 GB)
#   scripts/dx12-wine.sh build        the Windows binary: cargo build --target x86_64-pc-windows-gnu
#   scripts/dx12-wine.sh run ARGS     webgpu-amp.exe ARGS under Wine (FXC; setup and build first)
#   scripts/dx12-wine.sh check [ci|full]
#                                     setup, build, then on DX12: `info` and training compared
#                                     with the same run on Vulkan (Mesa 22's lavapipe, the
#                                     host's): `ci` trains mnist-cnn under amp-f16; `full` (the
#                                     default) also runs `selftest` (every op family forward and
#                                     backward against the CPU reference in f32, packed f16 and
#                                     bf16), trains mlp and mnist-cnn under f32 and amp-f16 and
#                                     gpt-tiny under amp-f16, and runs `info` and `selftest`
#                                     again with DXC (below)
#
# The shader compilers. wgpu compiles WGSL to HLSL and then with FXC (d3dcompiler_47.dll,
# shader model 5.1: no 16-bit types, so f16 is stored packed) or DXC (dxcompiler.dll). Wine's
# own d3dcompiler_47 rejects wgpu's HLSL, so Microsoft's is used: it ships inside the PyPI wheel
# kivy-deps.angle, and runs with WINEDLLOVERRIDES=d3dcompiler_47=n. Microsoft's DXC ships
# inside the PyPI wheel slangpy (dxcompiler.dll and dxil.dll); `run-dxc` puts them beside the
# binary (WGPU_DX12_COMPILER=dxc).
#
# Environment: DX12WINE_DIR         the folder (default .dx12wine in the repository; git-ignored)
#              DX12WINE_MIRROR      the Debian archive (default: the one this machine's apt uses)
#              DX12WINE_TARGET_DIR  cargo's target folder for the Windows build (default: the usual)
set -euo pipefail

SCRIPT=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/$(basename "${BASH_SOURCE[0]}")
REPO=$(cd "$(dirname "$SCRIPT")/.." && pwd)
DIR=${DX12WINE_DIR:-$REPO/.dx12wine}
ROOT=$DIR/root
SUITE=trixie
# Inside the root: the binary and its DLLs, and the Wine prefix.
APP=/opt/webgpu-amp
PREFIX=/opt/wineprefix
TARGET=x86_64-pc-windows-gnu
# The Windows build's cargo target folder (default: the usual one, which shares its build
# scripts and proc macros with the Linux build).
WIN_TARGET_DIR=${DX12WINE_TARGET_DIR:-${CARGO_TARGET_DIR:-$REPO/target}}
EXE=$WIN_TARGET_DIR/$TARGET/debug/webgpu-amp.exe
# The wheels the compilers come from, pinned (PyPI).
ANGLE_WHEEL=kivy-deps.angle==0.5.0
DXC_WHEEL=slangpy==0.43.1
ROOT_PACKAGES="wine64 wine mesa-vulkan-drivers libvulkan1 xvfb xauth"
STAMP=$DIR/ready-$SUITE

die() { echo "dx12-wine: FAILED: $*" >&2; exit 1; }
say() { echo "dx12-wine: $*" >&2; }
as_root() { if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi; }

host_tools() {
  local need=()
  command -v debootstrap >/dev/null || need+=(debootstrap)
  command -v x86_64-w64-mingw32-gcc >/dev/null || need+=(mingw-w64)
  [ -r /usr/share/keyrings/debian-archive-keyring.gpg ] || need+=(debian-archive-keyring)
  if [ ${#need[@]} -gt 0 ]; then
    say "installing ${need[*]}"
    as_root apt-get update -q
    DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -q "${need[@]}" \
      || die "could not install ${need[*]}"
  fi
}

# Runs a command in the root, in a mount namespace of its own: /proc, /sys and /dev are bound
# for it and vanish with it, whatever way it ends.
in_root() {
  as_root unshare --mount --propagation private -- /bin/sh -c '
    root=$1; shift
    mount -t proc proc "$root/proc" && mount --rbind /sys "$root/sys" \
      && mount --rbind /dev "$root/dev" && mount -t tmpfs tmpfs "$root/tmp" || exit 97
    exec chroot "$root" /usr/bin/env -i HOME=/root LANG=C.UTF-8 \
      PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin "$@"' sh "$ROOT" "$@"
}

setup() {
  if [ -f "$STAMP" ] && [ -f "$ROOT$APP/d3dcompiler_47.dll" ] && [ -d "$ROOT$PREFIX/drive_c" ]; then
    return 0
  fi
  host_tools
  local mirror keyring t0
  mirror=${DX12WINE_MIRROR:-$(bash "$REPO/scripts/lavapipe-coop.sh" mirror)}
  [ -n "$mirror" ] || die "no Debian archive in the apt sources; set DX12WINE_MIRROR"
  keyring=/usr/share/keyrings/debian-archive-keyring.gpg
  [ -r "$keyring" ] || die "keyring $keyring not readable"
  t0=$(date +%s)
  rm -rf "$ROOT" "$DIR"/ready-*
  mkdir -p "$DIR"
  say "debootstrap --variant=minbase $SUITE from $mirror (about 1.5 min)"
  as_root unshare --mount --propagation private -- debootstrap --variant=minbase \
    --keyring="$keyring" "$SUITE" "$ROOT" "$mirror" > "$DIR/debootstrap.log" 2>&1 \
    || { tail -20 "$DIR/debootstrap.log" >&2; die "debootstrap failed (no network to $mirror?)"; }
  local t1
  t1=$(date +%s)
  say "root ready in $((t1 - t0)) s; apt-get install $ROOT_PACKAGES"
  in_root apt-get update -q > "$DIR/apt.log" 2>&1 \
    && in_root /usr/bin/env DEBIAN_FRONTEND=noninteractive \
      apt-get install -y -q --no-install-recommends $ROOT_PACKAGES >> "$DIR/apt.log" 2>&1 \
    || { tail -20 "$DIR/apt.log" >&2; die "apt-get install in the root failed"; }
  in_root apt-get clean
  local t2
  t2=$(date +%s)
  say "packages installed in $((t2 - t1)) s: $(in_root wine --version 2>/dev/null)"
  compilers fxc
  say "Wine prefix $PREFIX (wineboot; HKCU\\Software\\Wine\\Direct3D renderer=vulkan)"
  in_root /usr/bin/env WINEPREFIX=$PREFIX WINEDEBUG=-all xvfb-run -a /bin/sh -c '
    wineboot -i && wine reg add "HKCU\\Software\\Wine\\Direct3D" /v renderer /t REG_SZ /d vulkan /f \
      && wineserver -w' > "$DIR/prefix.log" 2>&1 \
    || { tail -20 "$DIR/prefix.log" >&2; die "making the Wine prefix failed"; }
  in_root /usr/bin/env WINEPREFIX=$PREFIX WINEDEBUG=-all wine reg query 'HKCU\Software\Wine\Direct3D' /v renderer \
    2>/dev/null | grep -q vulkan || die "the prefix's Direct3D renderer is not vulkan"
  touch "$STAMP"
  say "set up in $(($(date +%s) - t0)) s; $(du -sh "$DIR" | cut -f1) in $DIR"
}

# Microsoft's FXC (d3dcompiler_47.dll; `setup`) or DXC (dxcompiler.dll and dxil.dll; the first
# `run-dxc`) from its wheel: WHICH is fxc or dxc.
compilers() {
  local which=$1 whl=$DIR/wheels wheel prefix
  case $which in
    fxc) wheel=$ANGLE_WHEEL prefix=kivy_deps_angle ;;
    dxc) wheel=$DXC_WHEEL prefix=slangpy ;;
  esac
  mkdir -p "$whl" "$ROOT$APP/dxc"
  python3 -m pip download -q "$wheel" --platform win_amd64 --python-version 3.11 \
    --only-binary=:all: --no-deps -d "$whl" || die "pip download $wheel failed"
  python3 - "$whl" "$ROOT$APP" "$prefix" <<'EOF' || die "a compiler DLL is missing from $wheel"
import glob, os, sys, zipfile
wheels, app, prefix = sys.argv[1:]
dlls = {"kivy_deps_angle": {"d3dcompiler_47.dll": app},
        "slangpy": {"dxcompiler.dll": app + "/dxc", "dxil.dll": app + "/dxc"}}[prefix]
(wheel,) = glob.glob(os.path.join(wheels, prefix + "-*.whl"))
with zipfile.ZipFile(wheel) as z:
    for name in z.namelist():
        base = os.path.basename(name)
        if base in dlls:
            with open(os.path.join(dlls.pop(base), base), "wb") as f:
                f.write(z.read(name))
if dlls:
    sys.exit(f"{wheel}: no {', '.join(dlls)}")
EOF
}

build() {
  host_tools
  rustup target list --installed | grep -qx "$TARGET" || rustup target add "$TARGET" \
    || die "rustup could not fetch the standard library for $TARGET"
  say "cargo build --target $TARGET --bin webgpu-amp"
  (cd "$REPO" && CARGO_TARGET_DIR=$WIN_TARGET_DIR \
    CARGO_TARGET_X86_64_PC_WINDOWS_GNU_LINKER=x86_64-w64-mingw32-gcc \
    cargo build --target "$TARGET" --bin webgpu-amp) || die "the Windows cross build failed"
}

# webgpu-amp.exe ARGS under Wine in the root, on its X display; the working directory is the
# binary's folder (Z:$APP), and ARGS may name files there relative to it. COMPILER is fxc or
# dxc (DXC: the folder with dxcompiler.dll is the working directory and on PATH).
run_exe() {
  local compiler=$1
  shift
  [ -f "$EXE" ] || die "no $EXE: run '$0 build' first"
  [ -f "$STAMP" ] || die "no root in $DIR: run '$0 setup' first"
  cp "$EXE" "$ROOT$APP/webgpu-amp.exe"
  cp "$ROOT$APP/webgpu-amp.exe" "$ROOT$APP/dxc/webgpu-amp.exe"
  local cwd=$APP env=(WGPU_DX12_COMPILER=fxc)
  if [ "$compiler" = dxc ]; then
    [ -f "$ROOT$APP/dxc/dxcompiler.dll" ] || compilers dxc
    cwd=$APP/dxc
    env=(WGPU_DX12_COMPILER=dxc)
  fi
  in_root /usr/bin/env WINEPREFIX=$PREFIX WINEDEBUG="${WINEDEBUG:--all}" \
    WINEDLLOVERRIDES=d3dcompiler_47=n "${env[@]}" WEBGPU_AMP_BACKEND=dx12 \
    xvfb-run -a /bin/sh -c 'cd "$1" && shift && wine ./webgpu-amp.exe "$@"; rc=$?; wineserver -w; exit $rc' \
    sh "$cwd" "$@"
}

case ${1:-} in
  setup) setup ;;
  build) build ;;
  run) shift; run_exe fxc "$@" ;;
  run-dxc) shift; run_exe dxc "$@" ;;
  check) shift; exec bash "$REPO/scripts/dx12-check.sh" "${1:-full}" ;;
  *) sed -n '2,/^set -euo/p' "$SCRIPT" | sed '$d; s/^# \{0,1\}//' >&2; exit 2 ;;
esac

#!/usr/bin/env bash
# Builds the browser app into web/pkg (next to web/index.html):
#   1. the library for wasm32-unknown-unknown as a cdylib (profile `web`: release, size-minded);
#   2. wasm-bindgen's JS glue (`--target web`), with wasm-bindgen-cli installed from crates.io
#      at exactly the wasm-bindgen version in Cargo.lock when it is missing or differs;
#   3. wasm-opt -Os when binaryen's wasm-opt is on PATH (Debian: `apt-get install binaryen`).
# Prints the bundle size (raw and gzipped). Serve web/ with any static server, e.g.
#   python3 -m http.server --bind 127.0.0.1 --directory web 8000
set -euo pipefail
cd "$(dirname "$0")/.."

target=wasm32-unknown-unknown
if ! rustup target list --installed | grep -qx "$target"; then
  echo "== rustup target add $target"
  rustup target add "$target"
fi

# wasm-bindgen's CLI and crate must be the same version, or the glue does not match.
want="$(awk '/^name = "wasm-bindgen"$/ { getline; gsub(/version = |"/, ""); print; exit }' Cargo.lock)"
if [ -z "$want" ]; then
  echo "build-web: no wasm-bindgen in Cargo.lock" >&2
  exit 1
fi
have="$(wasm-bindgen --version 2>/dev/null | awk '{ print $2 }' || true)"
if [ "$have" != "$want" ]; then
  echo "== cargo install wasm-bindgen-cli --version $want (found: ${have:-none})"
  # --locked keeps the CLI's own tested dependencies; when one of them is no longer in the
  # registry (yanked), fall back to the newest compatible ones. The first attempt's errors
  # are shown only if the fallback fails too.
  log="$(mktemp)"
  if ! cargo install -q --locked wasm-bindgen-cli --version "$want" 2>"$log"; then
    echo "   (--locked failed: $(grep -m1 '^error' "$log" || echo 'see below'); retrying without it)"
    if ! cargo install -q wasm-bindgen-cli --version "$want"; then
      cat "$log" >&2
      rm -f "$log"
      echo "build-web: could not install wasm-bindgen-cli $want" >&2
      exit 1
    fi
  fi
  rm -f "$log"
fi
export PATH="${CARGO_HOME:-$HOME/.cargo}/bin:$PATH"

echo "== cargo rustc --lib --crate-type cdylib --profile web --target $target"
cargo rustc -q --lib --crate-type cdylib --profile web --target "$target"
wasm="target/$target/web/webgpu_amp.wasm"

if command -v wasm-opt >/dev/null 2>&1 && [ "${WEBGPU_AMP_WASM_OPT:-1}" != 0 ]; then
  echo "== wasm-opt -Os ($(wasm-opt --version))"
  # Before wasm-bindgen: older binaryens (Debian 12 has 108) mangle the externref table
  # that wasm-bindgen adds. Rust's wasm32 output uses these post-MVP features; older
  # binaryens need them named.
  wasm-opt -Os --enable-bulk-memory --enable-mutable-globals --enable-sign-ext \
    --enable-nontrapping-float-to-int --enable-reference-types --enable-multivalue \
    "$wasm" -o "${wasm%.wasm}.opt.wasm"
  wasm="${wasm%.wasm}.opt.wasm"
else
  echo "== wasm-opt not found (Debian: apt-get install binaryen) or WEBGPU_AMP_WASM_OPT=0: bundle left unoptimised"
fi

echo "== wasm-bindgen --target web -> web/pkg"
rm -rf web/pkg
wasm-bindgen --target web --no-typescript --out-name webgpu_amp --out-dir web/pkg "$wasm"
bundle=web/pkg/webgpu_amp_bg.wasm

raw=$(stat -c %s "$bundle")
gz=$(gzip -9 -c "$bundle" | wc -c)
js=$(stat -c %s web/pkg/webgpu_amp.js)
awk -v raw="$raw" -v gz="$gz" -v js="$js" 'BEGIN {
  printf "build-web: wasm %.2f MiB (%.2f MiB gzipped), JS glue %d KiB -> web/pkg\n",
    raw / 1048576, gz / 1048576, js / 1024 }'

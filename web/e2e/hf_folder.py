"""The Hugging Face folder case of the browser e2e (issue 41): a Llama folder written by
transformers with a byte-level BPE tokenizer.json (scripts/hf_fixture.py `page`, in the venv
of scripts/python-venv.sh) is picked with the page's folder input (#hf-folder), fine-tuned
under amp-f16 by an autorun with model=hf:, and compared with `webgpu-amp train --model
hf:DIR` on the same text: the first loss within FIRST_LOSS_RTOL, the rest as every CLI case."""

import os
import subprocess
import time

from browser import WebDriverError, log

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
PYTHON = os.path.join(ROOT, ".venv", "bin", "python")

# The first step's loss runs the same weights on the same batch, before Adam has carried any
# difference between SwiftShader's and lavapipe's last bits: far tighter than LOSS_RTOL, and
# far looser than what a run from other weights gives (the folder's are the point).
FIRST_LOSS_RTOL = 1e-3
# 3 steps of Adam at 1e-2 take the CLI from 5.773 (about ln 320) to 5.359.
LOSS_RATIO = 0.97


def make_folder(root):
    """The fixture folder under `root`; raises RuntimeError (saying how to get the venv)."""
    if not os.path.exists(PYTHON):
        raise RuntimeError(f"no {PYTHON}: `bash scripts/python-venv.sh` makes it (transformers, "
                           "tokenizers), or pass --skip-hf-folder")
    out = subprocess.run([PYTHON, os.path.join(ROOT, "scripts", "hf_fixture.py"), "page", root],
                         capture_output=True, text=True, timeout=600)
    if out.returncode != 0:
        raise RuntimeError(f"scripts/hf_fixture.py page failed: {out.stderr.strip()[-2000:]}")
    return out.stdout.strip().splitlines()[-1]


def pick(wd, folder, timeout=120):
    """Pick `folder`'s files with the page's folder input and wait for the page to take them.
    Returns a list of problems (empty: picked)."""
    files = sorted(os.path.join(folder, f) for f in os.listdir(folder))
    element = wd.find("#hf-folder")
    count = "return document.getElementById('hf-folder').files.length;"
    # A webkitdirectory input takes the folder itself (ChromeDriver sends Chromium its files;
    # a list of the files is accepted and dropped, measured with Chromium 156). A `multiple`
    # input without it takes newline-separated paths: the fallback.
    how = "the folder"
    try:
        wd.send_keys(element, folder)
    except WebDriverError as e:
        log(f"   the folder was refused ({e}); sending its {len(files)} files")
    time.sleep(1)
    if not wd.execute(count):
        wd.send_keys(element, "\n".join(files))
        how = f"{len(files)} files"
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        state = wd.execute("const s = document.getElementById('folder-status');"
                           "const f = document.getElementById('hf-folder').files;"
                           "return {text: s.textContent, error: s.className === 'error',"
                           " files: f.length, relative: f.length ? f[0].webkitRelativePath : ''};")
        if state["error"]:
            return [f"the page refused the folder: {state['text']}"]
        if state["text"].startswith("picked "):
            log(f"   picked {how}: {state['text']}")
            return []
        time.sleep(0.5)
    return [f"the page did not take the folder within {timeout}s: the input holds "
            f"{state['files']} files (the first's relative path {state['relative']!r}), the "
            f"line beside it says {state['text']!r}"]


def check(res, case):
    """What a folder's result must hold beyond every run's checks."""
    problems = []
    if not str(res.get("model", "")).startswith("hf:"):
        problems.append(f"model is {res.get('model')!r}, not the picked folder's hf:NAME")
    text = res.get("sample")
    # Decoded by the folder's tokenizer: the prompt (a newline) and what was sampled.
    if not isinstance(text, str) or not text.startswith("\n") or len(text) < 2:
        problems.append(f"no sampled text beyond the prompt: {text!r}")
    return problems


def compare_first_loss(res, cli):
    page, native = res["first_loss"], cli["first_loss"]
    diff = abs(page - native) / max(abs(native), 1e-12)
    log(f"   first loss: page {page:.7g}, CLI {native:.7g}, relative difference {diff:.2e} "
        f"(tolerance {FIRST_LOSS_RTOL})")
    if not diff <= FIRST_LOSS_RTOL:
        return [f"first loss: page {page} vs CLI {native}: relative difference {diff:.3g} > "
                f"{FIRST_LOSS_RTOL}"]
    return []

"""The Hugging Face folder case of the browser e2e (issue 41): a Llama folder written by
transformers with a byte-level BPE tokenizer.json (scripts/hf_fixture.py `page`, in the venv
of scripts/python-venv.sh) is picked with the page's folder input (#hf-folder), fine-tuned
under amp-f16 by an autorun with model=hf:, and compared with `webgpu-amp train --model
hf:DIR` on the same text: the first loss within FIRST_LOSS_RTOL, the rest as every CLI case.
Before it, a folder that is not a Llama one must be refused beside the input, by name."""

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
NOT_LLAMA = "not-llama"
# What #status says while an autorun of model=hf: waits for its folder.
WAITING = "waiting for a Hugging Face folder"
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
    folder = out.stdout.strip().splitlines()[-1]
    # Beside it, a folder that is not a Llama one, which the page must refuse by name.
    other = os.path.join(os.path.dirname(folder), NOT_LLAMA)
    os.makedirs(other, exist_ok=True)
    with open(os.path.join(other, "config.json"), "w") as f:
        f.write('{"model_type": "gpt2", "n_embd": 32, "n_layer": 2}')
    return folder


def pick(wd, folder, timeout=120):
    """First a folder that is not a Llama one, which the page must refuse beside the input
    naming its config.json; then `folder`, which the page must take. Returns a list of
    problems (empty: picked)."""
    other = os.path.join(os.path.dirname(folder), NOT_LLAMA)
    state, _ = send(wd, other, timeout)
    if not (state["error"] and "config.json" in state["text"] and "gpt2" in state["text"]):
        return [f"a folder that is not a Llama one: the line beside the input says "
                f"{state['text']!r} (error: {state['error']})"]
    log(f"   refused {NOT_LLAMA}: {state['text']}")
    # The autorun (model=hf:) waits for a folder, and says so.
    t0 = time.monotonic()
    status = ""
    while WAITING not in status and time.monotonic() - t0 < timeout:
        time.sleep(0.5)
        status = wd.execute("return document.getElementById('status').textContent;")
    if WAITING not in status:
        return [f"#status does not say the autorun waits for a folder: {status!r}"]
    log(f"   #status: {status!r}")
    state, how = send(wd, folder, timeout)
    if state["error"]:
        return [f"the page refused the folder: {state['text']}"]
    if not state["text"].startswith("picked "):
        return [f"the page did not take the folder within {timeout}s: the input holds "
                f"{state['files']} files (the first's relative path {state['relative']!r}), "
                f"the line beside it says {state['text']!r}"]
    # transformers' generation_config.json is not one the app reads: left unread, and said.
    if "not read: generation_config.json" not in state["text"]:
        return [f"the line beside the input does not say generation_config.json was left "
                f"unread: {state['text']!r}"]
    log(f"   picked {how}: {state['text']}")
    return []


def send(wd, folder, timeout):
    """Pick `folder` with the page's folder input; (the line beside the input once the page
    has answered or `timeout` passed, how the folder was sent)."""
    files = sorted(os.path.join(folder, f) for f in os.listdir(folder))
    # A fresh start: no line beside the input, no files in it (a second pick through
    # ChromeDriver would otherwise keep the first's files).
    wd.execute("const s = document.getElementById('folder-status');"
               "s.textContent = ''; s.className = '';"
               "document.getElementById('hf-folder').value = '';")
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
    while True:
        state = wd.execute("const s = document.getElementById('folder-status');"
                           "const f = document.getElementById('hf-folder').files;"
                           "return {text: s.textContent, error: s.className === 'error',"
                           " files: f.length, relative: f.length ? f[0].webkitRelativePath : ''};")
        answered = state["error"] or state["text"].startswith("picked ")
        if answered or time.monotonic() - t0 > timeout:
            return state, how
        time.sleep(0.5)


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

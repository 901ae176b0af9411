"""What the PyTorch cross-checks (pytorch_compat.py, nanogpt_compat.py, resnet_compat.py, ...) share: what they do
when torch, safetensors or numpy cannot be imported (re-run the script with the venv's python
when scripts/python-venv.sh made one, else fail loudly: a missing torch is an error, never a
skip), how they start a binary ($WEBGPU_AMP_RUNNER), their `--tensor-cores` check, and how a
script of several cases runs them and reports."""

import os
import shlex
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VENV_PYTHON = os.path.join(ROOT, ".venv", "bin", "python")


def torch_missing(error, what, script):
    """Called from `except ImportError as error`; does not return."""
    venv_dir = os.path.dirname(os.path.dirname(VENV_PYTHON))
    in_venv = os.path.realpath(sys.prefix) == os.path.realpath(venv_dir)
    if os.path.exists(VENV_PYTHON) and not in_venv and not os.environ.get("WEBGPU_AMP_COMPAT_REEXEC"):
        # The venv made by scripts/python-venv.sh is there: use it.
        os.environ["WEBGPU_AMP_COMPAT_REEXEC"] = "1"
        os.execv(VENV_PYTHON, [VENV_PYTHON, os.path.abspath(script)] + sys.argv[1:])
    name = os.path.basename(script)
    print(
        f"error: the {what} needs torch, safetensors and numpy, and "
        f"{sys.executable} cannot import them ({error}).\n"
        f"Install them into .venv with `bash scripts/python-venv.sh`, then run "
        f"`.venv/bin/python scripts/{name}`.",
        file=sys.stderr,
    )
    sys.exit(1)


def runner():
    """Words to put before a webgpu-amp binary given by path: $WEBGPU_AMP_RUNNER
    (`scripts/lavapipe-coop.sh run` runs it under Mesa 26's lavapipe, which a child of this
    script does not get otherwise). `cargo run` needs none: it applies cargo's own target
    runner (`scripts/lavapipe-coop.sh cargo` sets both)."""
    return shlex.split(os.environ.get("WEBGPU_AMP_RUNNER", ""))


def adapter_line(stdout):
    """The `adapter: ...` line of a run's output (a skipped step's line can come before it:
    the summary, adapter first, is printed when the run ends); "?" when there is none."""
    return next((line for line in (stdout or "").splitlines() if line.startswith("adapter:")), "?")


def tensor_core_check(setting, reported):
    """With `--tensor-cores SETTING` (on:8x8 or on:16x16), the run must report the tensor
    cores of that shape (`reported`: what it printed); returns a problem, or None."""
    if not setting:
        return None
    edge = setting.split(":")[1].split("x")[0] if ":" in setting else ""
    want = f"tensor cores {edge}x{edge}x{edge}" if edge else "tensor cores"
    return None if want in (reported or "") else f"the run did not use {want}: {reported!r}"


TENSOR_CORE_HELP = ("run ours with `--tensor-cores SETTING` (on, on:8x8 or on:16x16; Mesa 26's "
                    "lavapipe: scripts/lavapipe-coop.sh) and fail a case whose run does not "
                    "report those tensor cores; the default cases are then the native amp-f16 ones")


def run_cases(names, run_one):
    """Runs each case as `run_one(name, workdir)` (True when it holds) in one temporary
    folder, prints a line per case and exits 1 when any failed."""
    import tempfile

    results = {}
    with tempfile.TemporaryDirectory() as workdir:
        for name in names:
            results[name] = run_one(name, workdir)
    print()
    for name, good in results.items():
        print(f"{name}: {'ok' if good else 'FAILED'}")
    sys.exit(0 if all(results.values()) else 1)

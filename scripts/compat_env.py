"""What both PyTorch cross-checks (pytorch_compat.py, nanogpt_compat.py) do when torch,
safetensors or numpy cannot be imported: re-run the script with the venv's python when
scripts/python-venv.sh made one, else fail loudly (a missing torch is an error, never a
skip)."""

import os
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

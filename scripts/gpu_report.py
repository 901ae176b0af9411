#!/usr/bin/env python3
"""Measure a GPU in one go (`bash scripts/gpu-report.sh`, which runs this): every command of
MEASUREMENTS below, most important first, each under its own time limit and all of them
under one budget, then one JSON (every command, its status, its numbers) and one Markdown
table (device, driver, date, every command, webgpu-amp and PyTorch side by side).

Standard library only (it runs on a GPU machine's python3). The PyTorch side is
scripts/gpu_report_torch.py, run with --python-torch; when that python cannot use CUDA the
report says "PyTorch CUDA not available" on stderr, in the JSON and in the Markdown.

A command whose flag this binary's `--help` does not list (`--tensor-cores` before issue 20,
`--attention` before issue 23, `bench tune` before issue 29) is not run; it is recorded as
"flag not available in this binary".
The first command tunes the kernel table on this GPU (`bench tune`); every later command runs
with the tuning file it writes (WEBGPU_AMP_TUNING), kept in the report folder as tuning.json.
`--quick` runs every measurement at tiny sizes with few steps: a test of the report itself
(tests/gpu_report.rs), whose numbers measure nothing.
Exit status: 0 once both files are written (a failed or timed-out command is a row saying
so), 2 on bad arguments or when the binary does not exist.
"""

import argparse
import datetime
import json
import os
import platform
import re
import shlex
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpu_report_md  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
TORCH_SCRIPT = os.path.join("scripts", "gpu_report_torch.py")  # commands run in ROOT

OK, FAILED, TIMEOUT = "ok", "failed", "timeout"
NO_FLAG = "flag not available in this binary"
NO_CUDA = "PyTorch CUDA not available"
NO_BUDGET = "skipped: total budget spent"

# One measurement per entry, in the order they run (most important first). `args` is the
# command line; `{name}` fields come from `full` or `quick`, and `{bin}`, `{py}` (the torch
# python) and `{torch}` (gpu_report_torch.py) from the run. `needs`: flags that the
# subcommand's --help must list. `budget`: seconds before the command is killed.
STEP = ["{bin}", "bench", "step", "--json", "--models", "{model}", "--batch-size", "{b}",
        "--steps", "{steps}"]
MATMUL = ["{bin}", "bench", "matmul", "--json", "--sizes", "{n}", "--repeats", "{repeats}"]
TORCH = ["{py}", "{torch}", "--steps", "{steps}", "--warmup", "{warmup}"]
QUICK_TORCH = dict(steps=1, warmup=1, quick="--quick")
# gpt-char takes minutes a step on a CPU adapter; so would ResNet-18 at the three precisions.
QUICK_MODEL = {"gpt-char": "gpt-tiny", "resnet18-cifar": "resnet-tiny"}


def matmul(id, what, kernel, storage, n, quick_n, repeats, budget):
    return dict(id=id, what=what, args=MATMUL + ["--kernel", kernel, "--storages", storage],
                budget=budget, full=dict(n=n, repeats=repeats), quick=dict(n=quick_n, repeats=1))


def step(id, what, model, b, quick_b, steps, flags, budget, needs=()):
    return dict(id=id, what=what, args=STEP + flags, budget=budget, needs=list(needs),
                full=dict(model=model, b=b, steps=steps),
                quick=dict(model=QUICK_MODEL.get(model, model), b=quick_b, steps=1))


BOTH = ["--precisions", "f32,amp-f16"]
THREE = "f32,amp-f16,amp-bf16"
MEASUREMENTS = [
    # First: tune the kernel table on this GPU (bench tune, within its own --budget); every
    # later command runs with the table it writes (WEBGPU_AMP_TUNING), which the report
    # folder keeps as tuning.json, ready to commit under tuning/.
    dict(id="tune", what="kernel table tuned on this adapter (bench tune)",
         args=["{bin}", "bench", "tune", "--budget", "{tune_s}", "--out", "{tuning}", "{quick}"],
         budget=150, needs=["--budget"], full=dict(tune_s=110, quick=None),
         quick=dict(tune_s=400, quick="--quick")),
    dict(id="info", what="adapters, capabilities, matmul path per mode, kernel table",
         args=["{bin}", "info", "--json"], budget=60),
    matmul("matmul-tc-4096", "matmul n³, tensor cores (f16 in and out, f32 accumulate)",
           "coop", "f16", 4096, 64, 5, 90),
    step("simple-cnn-b64", "SimpleCNN 3x32x32, f32 and amp-f16, profiled",
         "simple-cnn", 64, 2, 50, BOTH + ["--profile"], 120),
    dict(id="torch-probe", what="PyTorch: version, CUDA, device", side="pytorch",
         args=["{py}", "{torch}", "--group", "probe"], budget=90),
    dict(id="torch-cnn", what="PyTorch eager SimpleCNN, f32 and AMP", side="pytorch",
         args=TORCH + ["--group", "cnn", "--batch-sizes", "{b64},{b256}", "{quick}"], budget=120,
         full=dict(b64=64, b256=256, steps=50, warmup=5, quick=None),
         quick=dict(b64=2, b256=4, **QUICK_TORCH)),
    step("gpt-char-b64", "gpt-char (nanoGPT baby GPT) T256, f32 and amp-f16, profiled",
         "gpt-char", 64, 1, 10, BOTH + ["--profile"], 240),
    dict(id="torch-gpt", what="PyTorch eager nanoGPT, f32 and AMP, manual and SDPA attention",
         side="pytorch", budget=180,
         args=TORCH + ["--group", "gpt", "--batch-sizes", "{b}", "{quick}"],
         full=dict(b=64, steps=10, warmup=3, quick=None), quick=dict(b=1, **QUICK_TORCH)),
    step("simple-cnn-b256", "SimpleCNN 3x32x32, f32 and amp-f16, profiled",
         "simple-cnn", 256, 4, 30, BOTH + ["--profile"], 120),
    step("mlp-b128", "MLP 784-256-10, f32 and amp-f16, profiled",
         "mlp", 128, 4, 100, BOTH + ["--profile"], 90),
    dict(id="torch-mlp", what="PyTorch eager MLP, f32 and AMP", side="pytorch", budget=90,
         args=TORCH + ["--group", "mlp", "--batch-sizes", "{b}", "{quick}"],
         full=dict(b=128, steps=100, warmup=5, quick=None), quick=dict(b=4, **QUICK_TORCH)),
    matmul("matmul-simt-f32-4096", "matmul n³, SIMT body, f32", "tiled", "f32", 4096, 64, 5, 90),
    matmul("matmul-simt-f16-4096", "matmul n³, SIMT body, f16 storage (f32 math)",
           "tiled", "f16", 4096, 64, 5, 90),
    dict(id="torch-matmul", what="PyTorch matmul 4096³ and 8192³: f32, TF32, f16", side="pytorch",
         args=["{py}", "{torch}", "--group", "matmul", "--repeats", "{repeats}", "{quick}"],
         budget=90, full=dict(repeats=5, quick=None), quick=dict(repeats=1, quick="--quick")),
    matmul("matmul-tc-8192", "matmul n³, tensor cores", "coop", "f16", 8192, 128, 5, 90),
    matmul("matmul-simt-f32-8192", "matmul n³, SIMT body, f32", "tiled", "f32", 8192, 128, 3, 120),
    matmul("matmul-simt-f16-8192", "matmul n³, SIMT body, f16 storage",
           "tiled", "f16", 8192, 128, 3, 120),
    step("simple-cnn-b64-tc-off", "SimpleCNN amp-f16 without tensor cores", "simple-cnn", 64, 2,
         50, ["--precisions", "amp-f16", "--tensor-cores", "off"], 90, ["--tensor-cores"]),
    step("gpt-char-b64-unfused", "gpt-char, unfused attention (B×H×T×T scores)", "gpt-char",
         64, 1, 10, BOTH + ["--attention", "unfused"], 180, ["--attention"]),
    step("gpt-char-b64-fused", "gpt-char, fused attention", "gpt-char", 64, 1, 10,
         BOTH + ["--attention", "fused"], 180, ["--attention"]),
    step("gpt-char-b64-tc-off", "gpt-char amp-f16 without tensor cores", "gpt-char", 64, 1, 10,
         ["--precisions", "amp-f16", "--tensor-cores", "off"], 150, ["--tensor-cores"]),
    # The peers' workloads (issues 40 and 41), PyTorch's side: kuangliu's CIFAR ResNet-18 at
    # batch 128, airbench94's net at batch 1024 (its step: about 8 ms on an A100), and
    # SmolLM2-135M on Inferena's protocol (batch 1, 128 tokens; H100: PyTorch about 9.9 ms
    # with TF32, meganeura 38 ms, f32, forward + loss + backward).
    dict(id="torch-resnet", what="PyTorch eager CIFAR ResNet-18, f32, AMP f16 and bf16",
         side="pytorch", budget=150,
         args=TORCH + ["--group", "resnet", "--batch-sizes", "{b}", "--precisions", THREE,
                       "{quick}"],
         full=dict(b=128, steps=20, warmup=5, quick=None), quick=dict(b=2, **QUICK_TORCH)),
    # Our side of the ResNet row: the same model (nn/resnet, kuangliu's names and 11,173,962
    # parameters) and batch, on random images, SGD with momentum 0.9 and weight decay 5e-4.
    step("resnet18-cifar-b128", "CIFAR ResNet-18 (kuangliu), f32, amp-f16 and amp-bf16",
         "resnet18-cifar", 128, 2, 20, ["--precisions", THREE], 240),
    dict(id="torch-airbench", what="PyTorch eager airbench94 net, f32, AMP f16 and bf16",
         side="pytorch", budget=150,
         args=TORCH + ["--group", "airbench", "--batch-sizes", "{b}", "--precisions", THREE,
                       "{quick}"],
         full=dict(b=1024, steps=20, warmup=5, quick=None), quick=dict(b=2, **QUICK_TORCH)),
    # Our side of Inferena's protocol: SmolLM2-135M at batch 1 x 128 tokens: its step row's
    # `passes` time forward, forward + loss + backward and the whole AdamW step (the Markdown's
    # "Inferena's protocol" puts them beside PyTorch's three variants; the side-by-side table
    # pairs the whole step with PyTorch's `step`). --quick: llama-tiny at 16 tokens.
    dict(id="smollm2-b1-t128", what="SmolLM2-135M step, batch 1 x 128 (Inferena's protocol): "
         "forward, forward+backward, AdamW step; f32, AMP f16 and bf16", budget=240,
         needs=["--seq-len"],
         args=STEP + ["--precisions", THREE, "--seq-len", "{t}"],
         full=dict(model="smollm2-135m", b=1, steps=20, t=128),
         quick=dict(model="llama-tiny", b=1, steps=1, t=16)),
    dict(id="torch-llama", what="PyTorch eager SmolLM2-135M (transformers), batch 1 x 128: "
         "forward, forward+backward, AdamW step; f32, TF32, AMP f16 and bf16", side="pytorch",
         budget=240,
         args=TORCH + ["--group", "llama", "--batch-sizes", "1", "--seq-len", "{t}",
                       "--precisions", "f32,tf32,amp-f16,amp-bf16", "{quick}"],
         full=dict(t=128, steps=20, warmup=5, quick=None), quick=dict(t=16, **QUICK_TORCH)),
]


def say(line):
    print(line, file=sys.stderr, flush=True)


def command_line(m, mode, run):
    """The argv of a measurement in this mode; an empty `{quick}`-style field is dropped."""
    fields = dict(m.get(mode, {}), bin=run["bin"], py=run["python_torch"], torch=TORCH_SCRIPT,
                  tuning=run.get("tuning", ""))
    argv = []
    for a in m["args"]:
        v = a.format(**fields)
        if v != "None":
            argv.append(v)
    return argv


def run_command(argv, limit, env):
    """(exit code or None on timeout, stdout, stderr, seconds). The command runs in its own
    process group, killed whole at the limit."""
    start = time.monotonic()
    try:
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, env=env, start_new_session=True, cwd=ROOT)
    except OSError as e:
        return 127, "", f"cannot run {argv[0]}: {e}", 0.0
    try:
        out, err = proc.communicate(timeout=limit)
        code = proc.returncode
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        code = None
    return code, out, err, time.monotonic() - start


def help_text(run, sub, env):
    key = " ".join(sub)
    if key not in run["help"]:
        code, out, err, _ = run_command([run["bin"], *sub, "--help"], 60, env)
        run["help"][key] = out if code == 0 else ""
    return run["help"][key]


def json_values(text):
    """Every JSON value in `text`: the whole text if it is one, else one per line."""
    try:
        return [json.loads(text)]
    except ValueError:
        pass
    values = []
    for line in text.splitlines():
        line = line.strip()
        if line.startswith(("{", "[")):
            try:
                values.append(json.loads(line))
            except ValueError:
                pass
    return values


def rows_of(m, values):
    """The report's rows from a command's JSON output."""
    side = m.get("side", "webgpu-amp")
    rows, profiles = [], []
    for v in values:
        if isinstance(v, dict) and "results" in v and m["args"][1:3] == ["bench", "matmul"]:
            for r in v["results"]:
                rows.append(dict(kind="matmul", side=side, adapter=v.get("adapter"),
                                 backend=v.get("backend"),
                                 path=f"{r['kernel']} {r['storage']}",
                                 n=r["n"], ms=r["seconds"] * 1e3, tflops=r["gflops"] / 1e3,
                                 batch=r["batch"], timing=v.get("timing")))
        elif isinstance(v, dict) and v.get("kind") in ("step", "matmul", "scaler_overhead"):
            row = dict(v, side=side)
            if side == "webgpu-amp" and v["kind"] == "step":
                row["variant"] = variant_of(m)
            rows.append(row)
        elif isinstance(v, dict) and v.get("kind") == "profile":
            profiles.append(v)
    return rows, profiles


def variant_of(m):
    """How a step command differs from the defaults, for the tables."""
    a = m["args"]
    extra = [f"{f} {a[a.index(f) + 1]}" for f in ("--tensor-cores", "--attention") if f in a]
    return ", ".join(extra) or "default"


def measure(m, mode, run, env, deadline):
    argv = command_line(m, mode, run)
    entry = dict(id=m["id"], what=m["what"], side=m.get("side", "webgpu-amp"),
                 command=shlex.join(argv), budget_s=m["budget"], rows=[], profiles=[])
    if entry["side"] == "pytorch" and m["id"] != "torch-probe" and not run["torch"].get("cuda"):
        return dict(entry, status=NO_CUDA, note=run["torch"].get("reason", ""))
    for flag in m.get("needs", []):
        sub = m["args"][1:3]
        if not re.search(re.escape(flag) + r"\b", help_text(run, sub, env)):
            return dict(entry, status=NO_FLAG,
                        note=f"`{run['bin']} {' '.join(sub)} --help` does not list {flag}")
    left = deadline - time.monotonic()
    if left < min(15, m["budget"]):
        return dict(entry, status=NO_BUDGET, note=f"{max(left, 0):.0f} s of the budget left")
    limit = min(m["budget"], left)
    code, out, err, secs = run_command(argv, limit, env)
    entry.update(seconds=round(secs, 2), exit_code=code,
                 stderr_tail=err[-2000:], values=json_values(out))
    # Rows printed before a timeout or a failure are kept: each says what it measured.
    entry["rows"], entry["profiles"] = rows_of(m, entry["values"])
    for row in entry["rows"] + entry["profiles"]:
        row["measurement"] = m["id"]
    if m["id"] not in ("info", "torch-probe", "tune"):
        entry.pop("values")
    partial = f"; {len(entry['rows'])} rows before that" if entry["rows"] else ""
    if code is None:
        return dict(entry, status=TIMEOUT, note=f"killed after {limit:.0f} s{partial}")
    if code != 0:
        last = [line for line in err.splitlines() if line.strip()]
        return dict(entry, status=FAILED, note=(last[-1] if last else f"exit {code}") + partial)
    if not entry["rows"] and m["id"] not in ("info", "torch-probe", "tune"):
        return dict(entry, status=FAILED, note="exit 0 but no measurement in its output")
    return dict(entry, status=OK, note="")


def device_of(entries):
    """The adapter the benchmarks ran on (named by their output; `bench matmul` also names
    its backend), with `info`'s details of that adapter."""
    ours = [r for e in entries for r in e["rows"] if r["side"] == "webgpu-amp"]
    names = sorted({r["adapter"] for r in ours if r.get("adapter")})
    backend = next((r["backend"] for r in ours if r.get("backend")), None)
    device = dict(adapter=names[0] if names else None, backend=backend)
    if len(names) > 1:
        device["warning"] = f"the benchmarks ran on several adapters: {names}"
    info = next((e for e in entries if e["id"] == "info"), {})
    for adapters in info.get("values", []):
        matches = [a for a in adapters if isinstance(adapters, list)
                   and a.get("name") == device["adapter"]
                   and backend in (None, a.get("backend"))]
        for a in matches[:1]:
            device.update((k, a.get(k)) for k in ("backend", "device_type", "driver",
                                                  "driver_info"))
            device["tensor_cores"] = a.get("capabilities", {}).get("tensor_cores")
            device["matmul_paths"] = {x["mode"]: x.get("matmul") for x in a.get("modes", [])}
    return device


def nvidia_smi():
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total,"
                              "clocks.max.sm,power.limit", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30)
        return out.stdout.strip() or out.stderr.strip()
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"not available ({e})"


def git_commit():
    try:
        out = subprocess.run(["git", "-C", ROOT, "describe", "--always", "--dirty"],
                             capture_output=True, text=True, timeout=30)
        return out.stdout.strip() or "unknown (no git repository)"
    except (OSError, subprocess.TimeoutExpired):
        return "unknown (no git)"


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--bin", default=os.path.join(ROOT, "target", "release", "webgpu-amp"))
    p.add_argument("--out", default=os.path.join(ROOT, "target", "gpu-report"),
                   help="folder for gpu-report.json and gpu-report.md")
    p.add_argument("--python-torch", default=sys.executable,
                   help="the python that runs the PyTorch side")
    p.add_argument("--quick", action="store_true", help="tiny sizes, one step: a test")
    p.add_argument("--budget", type=float, help="seconds for everything (540, quick 600)")
    p.add_argument("--only", help="comma-separated measurement ids (default: all)")
    p.add_argument("--list", action="store_true", help="print the commands and exit")
    args = p.parse_args()
    mode = "quick" if args.quick else "full"
    # Paths inside the repository are written relative to it (commands run there).
    binary = os.path.relpath(os.path.abspath(args.bin), ROOT)
    binary = os.path.abspath(args.bin) if binary.startswith("..") else os.path.join(".", binary)
    run = dict(bin=binary, python_torch=args.python_torch, help={},
               torch={}, tuning=os.path.join(os.path.abspath(args.out), "tuning.json"))
    chosen = MEASUREMENTS
    if args.only:
        ids = args.only.split(",")
        unknown = set(ids) - {m["id"] for m in MEASUREMENTS}
        if unknown:
            p.error(f"--only: unknown ids {sorted(unknown)}")
        chosen = [m for m in MEASUREMENTS if m["id"] in ids or m["id"] == "torch-probe"]
    if args.list:
        for m in chosen:
            print(f"{m['id']:<24} {shlex.join(command_line(m, mode, run))}")
        return 0
    if not os.access(os.path.join(ROOT, run["bin"]), os.X_OK):
        p.error(f"no executable webgpu-amp at {run['bin']} (cargo build --release, or --bin)")
    os.makedirs(args.out, exist_ok=True)
    budget = args.budget or (600 if args.quick else 540)
    started = time.monotonic()
    deadline = started + budget
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    report = dict(report="webgpu-amp GPU report", format=1, mode=mode,
                  date=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                  host=dict(machine=platform.machine(), system=platform.platform(),
                            node=platform.node(), cpus=os.cpu_count()),
                  binary=dict(path=run["bin"], commit=git_commit()), budget_s=budget,
                  nvidia_smi=nvidia_smi(), env={k: v for k, v in os.environ.items()
                                               if k.startswith(("WEBGPU_AMP_", "VK_"))})
    entries = []
    for i, m in enumerate(chosen, 1):
        entry = measure(m, mode, run, env, deadline)
        entries.append(entry)
        say(f"[{i}/{len(chosen)}] {m['id']}: {entry['status']}"
            + (f" in {entry['seconds']} s" if "seconds" in entry else "")
            + (f" ({entry['note']})" if entry["note"] else ""))
        if m["id"] == "tune":
            # Measure with the tuned table from here on; without one, the built-in table.
            if entry["status"] == OK and os.path.exists(run["tuning"]):
                env["WEBGPU_AMP_TUNING"] = run["tuning"]
                report["tuning"] = dict(file=run["tuning"], used=True)
            else:
                report["tuning"] = dict(file=None, used=False,
                                        reason=f"bench tune {entry['status']}: {entry['note']}")
                say(f"!!! measuring with the built-in kernel table: tune {entry['status']}")
        if m["id"] == "torch-probe":
            probe = next((v for v in entry.get("values", []) if v.get("kind") == "probe"), None)
            run["torch"] = probe or dict(cuda=False, reason=f"probe {entry['status']}: "
                                                            f"{entry['note']}")
            if not run["torch"].get("cuda"):
                say(f"\n!!! {NO_CUDA}: {run['torch'].get('reason')}\n"
                    f"!!! the PyTorch side of the report is empty; rows say '{NO_CUDA}'\n")
    version = subprocess.run([run["bin"], "--version"], capture_output=True, text=True)
    report["binary"]["version"] = version.stdout.strip()
    report["binary"]["flags"] = {f: bool(re.search(re.escape(f) + r"\b", help_text(run, s, env)))
                                 for f, s in (("--tensor-cores", ["bench", "step"]),
                                              ("--attention", ["bench", "step"]),
                                              ("--storages", ["bench", "matmul"]))}
    report.update(device=device_of(entries), torch=run["torch"],
                  elapsed_s=round(time.monotonic() - started, 1), measurements=entries)
    report["rows"] = [r for e in entries for r in e["rows"]]
    json_path = os.path.join(args.out, "gpu-report.json")
    md_path = os.path.join(args.out, "gpu-report.md")
    with open(json_path, "w") as f:
        json.dump(report, f, indent=1)
    markdown = gpu_report_md.render(report)
    with open(md_path, "w") as f:
        f.write(markdown)
    print(markdown)
    say(f"wrote {json_path} and {md_path} ({report['elapsed_s']} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

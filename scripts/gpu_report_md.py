"""The Markdown of scripts/gpu_report.py's report: device, driver and date first, the issue's
targets, the numbers (webgpu-amp and PyTorch side by side), the profiles, and every command
with its status. Standard library only."""

NO_CUDA = "PyTorch CUDA not available"


# Columns that hold numbers (right-aligned).
NUMERIC = {"#", "n", "s", "batch", "ms", "TFLOP/s", "samples/s", "tokens/s", "peak MB",
           "GPU ms", "with ms", "without ms", "overhead %", "webgpu-amp ms", "PyTorch ms",
           "ratio ×", "webgpu-amp MB", "PyTorch MB"}


def table(header, rows):
    lines = ["| " + " | ".join(header) + " |",
             "|" + "|".join("---:" if h in NUMERIC else "---" for h in header) + "|"]
    lines += ["| " + " | ".join(str(c).replace("|", "\\|") for c in row) + " |" for row in rows]
    return "\n".join(lines)


def num(v, digits=2):
    if v is None:
        return "-"
    if abs(v) >= 1000:
        return f"{v:,.0f}"
    if abs(v) >= 100:
        return f"{v:.0f}" if digits < 2 else f"{v:.1f}"
    return f"{v:.{digits}f}" if abs(v) >= 1 or v == 0 else f"{v:.{digits}g}"


def mb(b):
    return num(b / 1e6) if b else "-"


def steps(report, side=None):
    return [r for r in report["rows"] if r["kind"] == "step" and side in (None, r["side"])]


def find(rows, **want):
    return next((r for r in rows if all(r.get(k) == v for k, v in want.items())), None)


def plain(value):
    """A JSON value as words: `{"NotUsed": "CPU adapter"}` -> `NotUsed: CPU adapter`."""
    if isinstance(value, dict):
        return "; ".join(f"{k}: {plain(v)}" for k, v in value.items())
    if isinstance(value, list):
        return ", ".join(plain(v) for v in value)
    return "-" if value is None else str(value)


def header(report):
    d, t, b = report["device"], report.get("torch") or {}, report["binary"]
    if t.get("cuda"):
        torch = (f"torch {t['torch']} (CUDA {t.get('cuda_version')}, cuDNN {t.get('cudnn')}) "
                 f"on {t.get('device')} (sm {t.get('capability')}, {t.get('memory_gb')} GiB)")
    else:
        torch = f"**{NO_CUDA}**: {t.get('reason', 'not probed')}"
    flags = ", ".join(f"{f} {'yes' if ok else 'no'}" for f, ok in b.get("flags", {}).items())
    items = [
        ("date (UTC)", report["date"]),
        ("adapter", f"{d.get('adapter')} ({d.get('backend')}, {d.get('device_type')})"),
        ("driver", ": ".join(x for x in (d.get("driver"), d.get("driver_info")) if x) or "-"),
        ("tensor cores", plain(d.get("tensor_cores"))),
        ("matmul path per mode", plain(d.get("matmul_paths"))),
        ("kernel table", plain(report.get("tuning")) if report.get("tuning") else "-"),
        ("nvidia-smi", report.get("nvidia_smi")),
        ("PyTorch", torch),
        ("binary", f"{b['path']} ({b.get('version')}, {b['commit']}); flags: {flags}"),
        ("host", ", ".join(f"{k} {v}" for k, v in report["host"].items())),
        ("environment", plain(report.get("env")) or "-"),
        ("time", f"{report['elapsed_s']} s of a {report['budget_s']:.0f} s budget"),
    ]
    out = [f"# webgpu-amp GPU report ({report['mode']})", ""]
    if report["mode"] == "quick":
        out += ["**Quick mode: tiny sizes and one step each, a test of the report; these "
                "numbers measure nothing.**", ""]
    if d.get("device_type") == "Cpu":
        out += ["**The benchmarks ran on a CPU adapter: these are not GPU numbers.**", ""]
    if d.get("warning"):
        out += [f"**{d['warning']}**", ""]
    out.append(table(["", ""], [(k, v) for k, v in items]))
    return out


def targets(report):
    """Issue 20's acceptance targets, judged from the rows (not in quick mode)."""
    rows = report["rows"]
    quick = report["mode"] == "quick"

    def verdict(ok):
        if quick:
            return "n/a (quick mode)"
        return "not measured" if ok is None else ("met" if ok else "NOT met")

    out = []
    tc = find(rows, measurement="matmul-tc-4096", kind="matmul")
    v = tc["tflops"] if tc else None
    out.append(("tensor-core matmul 4096³ ≥ 200 TFLOP/s", f"{num(v)} TFLOP/s",
                verdict(None if v is None else v >= 200)))
    for model, measurement, variant, words in (
            ("simple-cnn", "simple-cnn-b64", "eager", ""),
            ("gpt-char", "gpt-char-b64", "manual", ", manual attention")):
        ours = find(rows, measurement=measurement, kind="step", precision="amp-f16",
                    scaler=True)
        theirs = find(rows, side="pytorch", precision="amp-f16", variant=variant,
                      batch_size=ours["batch_size"] if ours else None,
                      model=ours["model"] if ours else None)
        ok = None if not (ours and theirs) else ours["ms_per_step"] <= theirs["ms_per_step"]
        out.append((f"{model} b64 amp-f16 step ≤ PyTorch eager AMP{words}",
                    f"{num(ours and ours['ms_per_step'])} vs "
                    f"{num(theirs and theirs['ms_per_step'])} ms", verdict(ok)))
    f32 = find(rows, measurement="simple-cnn-b256", kind="step", precision="f32")
    amp = find(rows, measurement="simple-cnn-b256", kind="step", precision="amp-f16",
               scaler=True)
    ratio = f32["ms_per_step"] / amp["ms_per_step"] if f32 and amp else None
    out.append(("simple-cnn b256: amp-f16 ≥ 1.5× faster than f32", f"{num(ratio)}×",
                verdict(None if ratio is None else ratio >= 1.5)))
    simt = find(rows, measurement="matmul-simt-f32-4096", kind="matmul")
    v = simt["tflops"] if simt else None
    out.append(("(issue 15) SIMT f32 matmul 4096³ ≥ 20 TFLOP/s", f"{num(v)} TFLOP/s",
                verdict(None if v is None else v >= 20)))
    mlp = find(rows, measurement="mlp-b128", kind="step", precision="f32")
    v = mlp["ms_per_step"] if mlp else None
    out.append(("(issue 15) MLP b128 f32 step ≤ 0.5 ms (Adam here; the issue's was SGD)",
                f"{num(v, 3)} ms", verdict(None if v is None else v <= 0.5)))
    return ["", "## Targets (issues 20 and 29, and issue 15's)", "",
            table(["target", "measured", "verdict"], out)]


def matmuls(report):
    rows = [r for r in report["rows"] if r["kind"] == "matmul"]
    body = [(r["side"], r["path"], r["n"], num(r["ms"], 3), num(r["tflops"], 3))
            for r in sorted(rows, key=lambda r: (r["n"], r["side"] != "webgpu-amp"))]
    return ["", "## Matmul (n×n×n, median)", "",
            table(["side", "path", "n", "ms", "TFLOP/s"], body)]


def step_tables(report):
    order = ["f32", "amp-f16", "amp-bf16", "f16"]
    key = (lambda r: (r["model"], r["batch_size"], order.index(r["precision"])
                      if r["precision"] in order else 9, r["side"] != "webgpu-amp"))
    body = []
    for r in sorted(steps(report), key=key):
        scaler = "" if r["side"] == "pytorch" or r["precision"] != "amp-f16" else (
            " (scaler on)" if r.get("scaler") else " (scaler off)")
        body.append((r["model"], r["batch_size"], r["precision"] + scaler, r["side"],
                     r.get("variant", ""), num(r["ms_per_step"], 3), num(r["images_per_sec"], 0),
                     num(r.get("tokens_per_sec"), 0), mb(r["peak_gpu_bytes"])))
    out = ["", "## Training steps", "",
           "ms per optimizer step after warm-up; peak MB: webgpu-amp's counting allocator, "
           "PyTorch's torch.cuda.max_memory_allocated.", "",
           table(["model", "batch", "precision", "side", "variant", "ms", "samples/s",
                  "tokens/s", "peak MB"], body)]
    pairs = []
    for ours in sorted(steps(report, "webgpu-amp"), key=key):
        if ours.get("variant") != "default" or ours.get("scaler") is False:
            continue
        for theirs in steps(report, "pytorch"):
            # A whole step against a whole step: not PyTorch's forward-only rows (llama).
            if theirs.get("variant") in ("forward", "forward+backward"):
                continue
            if all(theirs[k] == ours[k] for k in ("model", "batch_size", "precision")):
                pairs.append((ours["model"], ours["batch_size"], ours["precision"],
                              num(ours["ms_per_step"], 3), theirs["variant"],
                              num(theirs["ms_per_step"], 3),
                              num(theirs["ms_per_step"] / ours["ms_per_step"]),
                              mb(ours["peak_gpu_bytes"]), mb(theirs["peak_gpu_bytes"])))
    out += ["", "### Side by side (PyTorch ms / webgpu-amp ms: above 1, webgpu-amp is faster)",
            "", table(["model", "batch", "precision", "webgpu-amp ms", "PyTorch", "PyTorch ms",
                       "ratio ×", "webgpu-amp MB", "PyTorch MB"], pairs)
            if pairs else "No pair: the PyTorch side did not run (see PyTorch above)."]
    overhead = [(r["model"], r["batch_size"], num(r["ms_per_step_with_scaler"], 3),
                 num(r["ms_per_step_without_scaler"], 3), num(r["overhead_percent"], 1))
                for r in report["rows"] if r["kind"] == "scaler_overhead"]
    out += ["", "### GradScaler overhead (webgpu-amp amp-f16)", "",
            table(["model", "batch", "with ms", "without ms", "overhead %"], overhead)]
    return out


def inferena(report):
    """Inferena's protocol (SmolLM2-135M, batch 1 x 128; llama-tiny in quick mode): our three
    timings of a Llama step (`passes` of its step row) beside PyTorch's three variants."""
    order = ["f32", "tf32", "amp-f16", "amp-bf16", "f16"]
    body = []
    for r in steps(report, "webgpu-amp"):
        p = r.get("passes")
        if p:
            body.append((r["model"], r["batch_size"], r["precision"], "webgpu-amp",
                         num(p["forward_ms"], 3), num(p["forward_backward_ms"], 3),
                         num(p["step_ms"], 3), num(r["ms_per_step"], 3),
                         f"{p['timed_by']}, the step's kernels"))
    theirs = {}
    for r in steps(report, "pytorch"):
        if r.get("variant") in ("forward", "forward+backward", "step"):
            key = (r["model"], r["batch_size"], r["precision"])
            theirs.setdefault(key, {})[r["variant"]] = r["ms_per_step"]
    for (model, batch, precision), v in theirs.items():
        body.append((model, batch, precision, "pytorch", num(v.get("forward"), 3),
                     num(v.get("forward+backward"), 3), num(v.get("step"), 3),
                     num(v.get("step"), 3), "CUDA events around eager calls"))
    if not body:
        return []
    body.sort(key=lambda b: (b[0], b[1], order.index(b[2]) if b[2] in order else 9, b[3]))
    return ["", "## Inferena's protocol (ms: forward, forward + loss + backward, AdamW step)", "",
            "Inferena's \"training\" figure is forward + loss + backward (H100 f32: PyTorch about "
            "9.9 ms with TF32, meganeura 38 ms). Ours time the step's kernels of those phases, "
            "repeated in one pass (no host encoding); `whole step` is our trainer's wall clock "
            "per step, host work included, as PyTorch's figures include its launches.", "",
            table(["model", "batch", "precision", "side", "forward", "forward+backward", "step",
                   "whole step", "timed by"], body)]


def profiles(report):
    body = []
    for e in report["measurements"]:
        for p in e.get("profiles", []):
            prof, gpu = p["profile"], p["profile"].get("gpu")
            host = prof["host"]
            if gpu:
                phases = ", ".join(f"{x['phase']} {num(x['ms'], 3)}"
                                   for x in gpu["phases"] if x["kernels"])
                top = max(gpu["kernels"], key=lambda k: k["ms"], default=None)
                gpu_cells = (num(gpu["kernels_ms"], 3), phases,
                             f"{top['label']} {num(top['ms'], 3)}" if top else "-")
            else:
                gpu_cells = ("-", prof.get("gpu_unavailable", "no GPU times"), "-")
            body.append((p["model"], p["batch_size"], p["precision"], *gpu_cells,
                         f"{num(host['encode_ms'], 3)} / {num(host['submit_ms'], 3)} / "
                         f"{num(host['readback_ms'], 3)}"))
    return ["", "## Profiles (`--profile`: GPU ms per step by phase; host ms per step)", "",
            table(["model", "batch", "precision", "GPU ms", "phases (ms)", "slowest kernel (ms)",
                   "host encode / submit / read-back ms"], body)]


def commands(report):
    body = [(i, e["id"], e["status"], num(e.get("seconds"), 1), f"`{e['command']}`",
             e.get("note", "")) for i, e in enumerate(report["measurements"], 1)]
    return ["", "## Commands (in the order they ran)", "",
            table(["#", "id", "status", "s", "command", "note"], body)]


def render(report):
    lines = (header(report) + targets(report) + matmuls(report) + step_tables(report)
             + inferena(report) + profiles(report) + commands(report))
    return "\n".join(lines) + "\n"


if __name__ == "__main__":  # re-render a report: python3 scripts/gpu_report_md.py REPORT.json
    import json
    import sys

    with open(sys.argv[1]) as f:
        sys.stdout.write(render(json.load(f)))

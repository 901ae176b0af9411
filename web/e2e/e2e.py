#!/usr/bin/env python3
"""End-to-end browser test for the webgpu-amp web app (driver half; run.sh does the setup).

Talks W3C WebDriver to an already running chromedriver with urllib only (no selenium, no npm),
so it runs on a bare Debian box.  For every precision it starts a fresh headless Chromium whose
WebGPU is SwiftShader (CPU Vulkan), loads index.html?autorun=1&precision=P&steps=N and waits for
the page to publish `window.webgpuAmpResult`.  With --cli it trains the same run with the native
CLI (`webgpu-amp train`, same model, data, seed, batch, optimizer, learning rate, steps and f16
storage) and requires the same final GradScaler scale and skipped-step count, and a last loss
within LOSS_RTOL.  An amp-f16 run whose first scale (2^40) overflows the f16 backward must skip
steps, the same ones as the CLI.  A gpt-tiny run (model=gpt-tiny, batch 8, a few steps) trains on
the embedded text: its loss must fall below GPT_LOSS_RATIO of the first, agree with the CLI as
above, and it must publish text sampled at its last step whose characters all come from that
text.  Two runs check that training never waits for frames: one in
a Chromium that cannot present WebGPU frames (only --enable-unsafe-webgpu), one in a tab hidden
behind another (no animation frames at all).  Then the "no WebGPU" path: a Chromium without
WebGPU must show a visible #message that mentions WebGPU.

Usage (normally via `bash web/e2e/run.sh`):
  e2e.py --base-url http://127.0.0.1:8000 --webdriver-url http://127.0.0.1:9515 \
         [--precisions f32,amp-f16] [--steps 100] [--timeout 600] [--expect-f16-storage packed] \
         [--cli target/debug/webgpu-amp] [--skip-frameless]
"""

import argparse
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request

CHROMIUM = "/usr/bin/chromium"

# Flags for every Chromium we start (headless, on a machine whose network only reaches package
# registries).
BASE_FLAGS = [
    "--headless",  # new headless mode; the page still gets a real (SwiftShader) GPU process
    "--no-sandbox",  # we run as root in a container; the sandbox refuses to start as root
    # Chromium phones home at start-up (variations, component updater, sync, QUIC probes).
    # Those connections are refused here and only cost time/log noise, so switch them off.
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    # Containers often have a tiny /dev/shm; Chromium crashes when it runs out.  /tmp is fine.
    "--disable-dev-shm-usage",
    # The app trains inside requestAnimationFrame.  Headless, rAF runs at 60 Hz in a visible
    # window even when the page has no focus, but stops in a background *tab* (hidden), so we
    # never open a second tab; and never let the renderer be throttled.
    "--disable-renderer-backgrounding",
    "--window-size=1280,800",
    # NOT --disable-gpu: it removes the GPU process and with it WebGPU (requestAdapter -> null).
]

# What makes WebGPU work headless without a GPU (Chromium 156, Debian 12), found by trial:
WEBGPU_FLAGS = [
    # WebGPU is not enabled by default on Linux; without this requestAdapter() returns null
    # ("No available adapters").  This alone gives a SwiftShader adapter and working compute...
    "--enable-unsafe-webgpu",
    # ...but a WebGPU *canvas* then kills the device on the first present ("A valid external
    # Instance reference no longer exists"; GPU log: "Could not find SharedImageBackingFactory
    # ... WebgpuSwapChainTexture") because the compositor is in software mode.  Running the GPU
    # process on Vulkan (SwiftShader) with ANGLE on Vulkan gives the compositor a backend that
    # can share the swap-chain texture.  All three are needed; any two still crash the canvas.
    "--enable-features=Vulkan",
    "--use-vulkan=swiftshader",
    "--use-angle=vulkan",
    # Ask for the SwiftShader adapter even on a machine with a real GPU (there it is untested;
    # here it is the only adapter anyway): runs stay comparable, and the adapter never has
    # shader-f16, so f16 storage must be "packed".
    "--use-webgpu-adapter=swiftshader",
    # Fills GPUAdapterInfo.description ("SwiftShader Device (Subzero)"), which wgpu reports as
    # AdapterInfo::name; without it the name is "" and the page cannot say what it runs on.
    "--enable-webgpu-developer-features",
]

# A Chromium that has WebGPU (SwiftShader) but cannot present a WebGPU canvas: only the flag
# that enables WebGPU, none of the Vulkan/ANGLE flags above.  The page's canvas never shows a
# frame (eframe's renderer fails or its device is lost on the first present), so training must
# not depend on frames: it runs on a device of its own, driven by a timer.
FRAMELESS_FLAGS = ["--enable-unsafe-webgpu", "--enable-webgpu-developer-features"]

# The amp-f16 overflow run: a first GradScaler scale of 2^40 makes the f16 backward of the
# loss overflow (2^40 / batch far above 65504), so steps are skipped and the scale halves until
# the gradients fit.  Which steps are skipped depends on the gradients' size against 65504 with
# a wide margin (about 10% at the last skipped step, see README), not on rounding, so the page
# on SwiftShader and the CLI on lavapipe must skip exactly the same number.
OVERFLOW_SCALE = 2 ** 40

# The last loss of the page and the CLI may differ by this much (relative).  Both compute the
# same run from the same weights and batches, but on different drivers (SwiftShader in the
# browser, Mesa lavapipe for the CLI), whose f32 sums and exp/log differ in the last bits;
# f16 storage rounds those to half precision, and Adam carries the differences from step to
# step.  Measured over 100 steps: see README ("In the browser") for the numbers; 2% is a few
# times the largest difference measured and far below a real bug (a wrong storage, scale or
# batch order changes the loss by tens of percent).
LOSS_RTOL = 0.02

# The gpt-tiny run trains on the embedded text (`hamlet`, in the wasm); its sampled text may only
# use characters of that text.  A few steps of Adam at 1e-3 take the loss from ln(vocabulary)
# down by well over 5%.
HAMLET_GZ = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "src", "data",
                         "embedded", "hamlet_gut.txt.gz")
GPT_LOSS_RATIO = 0.95


def hamlet_chars():
    import gzip
    with gzip.open(HAMLET_GZ, "rt", encoding="utf-8") as f:
        return set(f.read())


# The "no WebGPU" runs.  Plain Chromium on Linux has navigator.gpu but requestAdapter() -> null;
# a page served from a non-secure origin has no navigator.gpu at all (it is [SecureContext]).
INSECURE_HOST = "webgpu-amp-insecure.test"
NO_WEBGPU_MODES = {
    # navigator.gpu exists, requestAdapter() resolves to null (no --enable-unsafe-webgpu;
    # --disable-gpu too, so it stays null even if a future Chromium enables WebGPU on Linux).
    "no-adapter": ["--disable-gpu"],
    # navigator.gpu is undefined: load the page via a name that maps to 127.0.0.1 but is not a
    # "potentially trustworthy" origin (127.0.0.1/localhost are), so it is not a secure context.
    "no-api": [f"--host-resolver-rules=MAP {INSECURE_HOST} 127.0.0.1"],
}

RESULT_FIELDS = {
    "ok": bool, "error": (str, type(None)), "adapter": str, "backend": str, "f16_storage": str,
    "trained_storage": str, "precision": str, "model": str, "dataset": str, "batch_size": int,
    "steps": int,
    "first_loss": (int, float), "last_loss": (int, float), "final_scale": (int, float),
    "skipped_steps": int, "ms_per_step": (int, float),
}

# Injected into the autorun's tab before it is hidden: log visibility changes, and copy the
# result (and the log) into localStorage, where another tab of the same origin can read them
# while this one stays in the background.
WATCH_HIDDEN_JS = """
const log = window.__e2eVisibility = [{hidden: document.hidden, t: performance.now()}];
const save = () => {
  localStorage.setItem('e2e-visibility', JSON.stringify(log));
  if (window.webgpuAmpResult !== undefined) {
    localStorage.setItem('e2e-result', JSON.stringify(
      Object.assign({finished_at: window.__e2eFinished ??= performance.now()},
                    window.webgpuAmpResult)));
  }
  localStorage.setItem('e2e-status', (document.getElementById('status') || {}).textContent || '');
};
document.addEventListener('visibilitychange', () => {
  log.push({hidden: document.hidden, t: performance.now()});
  save();
});
// A hidden tab's timers are throttled (about once a second), which is fine for this.
setInterval(save, 200);
localStorage.removeItem('e2e-result');
save();
return document.hidden;
"""

# Snapshot of the page state, taken once per poll.
SNAPSHOT_JS = """
const vis = (el) => !!el && !el.hidden && el.getClientRects().length > 0
                    && getComputedStyle(el).visibility !== 'hidden';
const text = (id) => { const el = document.getElementById(id);
                       return el ? {visible: vis(el), text: el.textContent.trim()} : null; };
const nav = performance.getEntriesByType('navigation')[0];
return {result: window.webgpuAmpResult ?? null, status: text('status'), message: text('message'),
        resultText: text('result'), readyState: document.readyState, hasGpu: !!navigator.gpu,
        httpStatus: nav ? nav.responseStatus : null};
"""


def log(*a):
    print(*a, flush=True)


class WebDriverError(RuntimeError):
    pass


class WebDriver:
    """The few W3C WebDriver endpoints we need, over plain HTTP+JSON."""

    def __init__(self, url):
        self.url = url.rstrip("/")
        self.sid = None

    def _req(self, method, path, body=None, timeout=180):
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, method=method,
                                     headers={"Content-Type": "application/json; charset=utf-8"})
        try:
            with urllib.request.urlopen(req, timeout=timeout) as resp:
                return json.loads(resp.read() or b"{}").get("value")
        except urllib.error.HTTPError as e:
            try:
                v = json.loads(e.read()).get("value", {})
                msg = f"{v.get('error')}: {v.get('message', '').splitlines()[0] if v.get('message') else ''}"
            except Exception:  # not JSON
                msg = str(e)
            raise WebDriverError(f"{method} {path} -> HTTP {e.code} {msg}") from None
        except (urllib.error.URLError, OSError) as e:
            raise WebDriverError(f"{method} {path} -> {e}") from None

    def status(self):
        return self._req("GET", "/status", timeout=10)

    def new_session(self, binary, args):
        caps = {"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {"binary": binary, "args": args},
            # keep console messages so /se/log can return them when something goes wrong
            "goog:loggingPrefs": {"browser": "ALL"},
            "timeouts": {"pageLoad": 120_000, "script": 30_000},
        }}}
        v = self._req("POST", "/session", caps)
        self.sid = v["sessionId"]
        return v.get("capabilities", {})

    def _s(self, method, path, body=None, **kw):
        return self._req(method, f"/session/{self.sid}{path}", body, **kw)

    def navigate(self, url):
        self._s("POST", "/url", {"url": url})

    def new_tab(self):
        """Open a new tab and return its window handle (it is not switched to)."""
        return self._s("POST", "/window/new", {"type": "tab"})["handle"]

    def switch_to(self, handle):
        self._s("POST", "/window", {"handle": handle})

    def window_handle(self):
        return self._s("GET", "/window")

    def close_window(self):
        return self._s("DELETE", "/window")

    def execute(self, script, *args):
        return self._s("POST", "/execute/sync", {"script": script, "args": list(args)})

    def screenshot(self, path):
        """Save the viewport as a PNG (WebDriver returns it base64-encoded)."""
        import base64
        with open(path, "wb") as f:
            f.write(base64.b64decode(self._s("GET", "/screenshot")))

    def browser_log(self):
        """Console messages since the last call (chromedriver's legacy log endpoint)."""
        for path in ("/se/log", "/log"):
            try:
                return self._s("POST", path, {"type": "browser"}, timeout=30) or []
            except WebDriverError:
                continue
        return []

    def delete_session(self):
        if self.sid:
            sid, self.sid = self.sid, None
            self._req("DELETE", f"/session/{sid}", timeout=60)


def fmt_console(entries, last=100):
    # (the 404 for /favicon.ico that every page load logs is just noise)
    lines = [f"  [{e.get('level')}] {e.get('message')}" for e in entries
             if "favicon.ico" not in str(e.get("message"))]
    if len(lines) > last:
        lines = [f"  ... {len(lines) - last} earlier messages left out"] + lines[-last:]
    return "\n".join(lines) or "  (empty)"


def snapshot(wd):
    """The page state, or None while the page is too busy to answer (a long synchronous task
    on the main thread blocks execute/sync until the script timeout)."""
    try:
        return wd.execute(SNAPSHOT_JS) or {}
    except WebDriverError as e:
        if "timeout" in str(e) or "timed out" in str(e):
            log(f"   (page busy: {e})")
            return None
        raise


def http_error(snap):
    st = snap.get("httpStatus")
    return f"index.html answered HTTP {st}" if isinstance(st, int) and st >= 400 else None


def browser_session(args, extra_flags, label):
    """Start a fresh Chromium (own profile dir) for one run; returns (driver, profile_dir)."""
    wd = WebDriver(args.webdriver_url)
    profile = tempfile.mkdtemp(prefix=f"chromium-{label}-", dir=args.profile_root)
    flags = BASE_FLAGS + [f"--user-data-dir={profile}"] + extra_flags
    t0 = time.monotonic()
    caps = wd.new_session(args.chromium, flags)
    log(f"   chromium {caps.get('browserVersion', '?')} started in {time.monotonic() - t0:.1f}s")
    return wd, profile


def close_session(wd, profile, problems, console):
    """End one run's browser: on failure first print its console (what the page logged),
    then delete the WebDriver session and the profile dir."""
    if wd is not None and wd.sid:
        if problems:
            try:
                console += wd.browser_log()
            except WebDriverError:
                pass
        try:
            wd.delete_session()
        except WebDriverError as e:
            log(f"   (could not delete the WebDriver session: {e})")
    if profile:
        shutil.rmtree(profile, ignore_errors=True)
    if problems and console:
        log("   browser console:\n" + fmt_console(console))


def check_result(res, case, args):
    """Returns a list of problems (empty = pass)."""
    problems = []
    precision, steps = case["precision"], case["steps"]
    if not isinstance(res, dict):
        return [f"webgpuAmpResult is not an object: {res!r}"]
    if res.get("ok") is not True:
        # a failed start publishes just {ok: false, error}; the error is what matters
        return [f"ok is {json.dumps(res.get('ok'))}; error: {res.get('error')}"]
    for k, typ in RESULT_FIELDS.items():
        if k not in res:
            problems.append(f"missing field {k!r}")
        elif not isinstance(res[k], typ) or (typ is int and isinstance(res[k], bool)):
            problems.append(f"field {k!r} has the wrong type: {res[k]!r}")
    if problems:
        return problems
    if res["precision"] != precision:
        problems.append(f"precision is {res['precision']!r}, asked for {precision!r}")
    if res["steps"] != steps:
        problems.append(f"steps is {res['steps']}, asked for {steps}")
    first, last = res["first_loss"], res["last_loss"]
    if not (math.isfinite(first) and math.isfinite(last)):
        problems.append(f"loss is not finite: first {first}, last {last}")
    elif case.get("loss_drop", True) and not last < case.get("loss_ratio", 0.7) * first:
        problems.append(f"loss did not drop enough: last {last} >= "
                        f"{case.get('loss_ratio', 0.7)} * first {first}")
    if case.get("model") is not None and res["model"] != case["model"]:
        problems.append(f"model is {res['model']!r}, asked for {case['model']!r}")
    if case.get("sample"):
        # A GPT publishes the text it sampled at its last step: the prompt (a newline) and
        # what it wrote, every character from the text it trained on.
        text, at = res.get("sample"), res.get("sample_step")
        if res["dataset"] != "hamlet":
            problems.append(f"a GPT trains on the embedded text by default, not {res['dataset']!r}")
        if not isinstance(text, str) or len(text) < 2:
            problems.append(f"no sampled text beyond the prompt: {text!r}")
        else:
            outside = sorted(set(text) - hamlet_chars())
            if outside:
                problems.append(f"sampled text {text!r} has characters outside the vocabulary: "
                                f"{outside!r}")
        if at != steps:
            problems.append(f"the last sample was taken at step {at!r}, not the last step {steps}")
    # An adapter without shader-f16 (SwiftShader never has it) must fall back to packed f16.
    want = args.expect_f16_storage
    if want is None and "swiftshader" in res["adapter"].lower():
        want = "packed"
    if want is not None and res["f16_storage"] != want:
        problems.append(f"f16_storage is {res['f16_storage']!r}, expected {want!r} "
                        f"(adapter {res['adapter']!r})")
    # What the run's trainer really stored its f16 tensors in must be what the page reports.
    trained = {"f32": "f32", "amp-bf16": "bf16"}.get(precision, res["f16_storage"])
    if res["trained_storage"] != trained:
        problems.append(f"{precision} trained with {res['trained_storage']!r} storage, but the "
                        f"page reports f16 storage {res['f16_storage']!r}")
    scale = case.get("init_scale")
    if scale is not None:
        skipped = res["skipped_steps"]
        if not 0 < skipped < steps:
            problems.append(f"a first scale of {scale} must skip some steps (on inf) and then "
                            f"train: {skipped} of {steps} skipped")
        elif res["final_scale"] != scale / 2 ** skipped:
            problems.append(f"final scale {res['final_scale']} after {skipped} skips from "
                            f"{scale} (each skip halves it, nothing else moves it here)")
    return problems


def cli_reference(args, case, res):
    """Train the page's run with the native CLI; its summary (final_loss, final_scale,
    skipped_steps, steps, f16_storage), or raises RuntimeError."""
    with tempfile.TemporaryDirectory(prefix="webgpu-amp-e2e-cli-") as tmp:
        metrics = os.path.join(tmp, "metrics.jsonl")
        # The page's recipe, spelled out: a GPT's CLI defaults (nanoGPT's AdamW, cosine
        # schedule, clipping) differ from the app's plain Adam.
        cmd = [args.cli, "train", "--model", res["model"], "--dataset", res["dataset"],
               "--precision", case["precision"], "--steps", str(case["steps"]),
               "--batch-size", str(res["batch_size"]), "--optimizer", "adam", "--lr", "0.001",
               "--beta2", "0.999", "--weight-decay", "0", "--clip-grad-norm", "0",
               "--lr-schedule", "constant",
               "--seed", "0", "--no-validate", "--f16-storage", res["f16_storage"],
               "--metrics", metrics]
        if case.get("init_scale") is not None:
            cmd += ["--init-scale", str(case["init_scale"])]
        t0 = time.monotonic()
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
        if out.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} failed ({out.returncode}): {out.stderr.strip()}")
        with open(metrics) as f:
            lines = [json.loads(line) for line in f if line.strip()]
        summary = next(v["summary"] for v in reversed(lines) if "summary" in v)
        log(f"   CLI ({summary['backend']}, {summary['f16_storage']} f16) in "
            f"{time.monotonic() - t0:.1f}s: loss {summary['first_loss']:.6g} -> "
            f"{summary['final_loss']:.6g}, scale {summary['final_scale']}, "
            f"skipped {summary['skipped_steps']}")
        return summary


def compare_with_cli(res, cli):
    """The page against the CLI for the same run: exact scale, skips and steps; the last loss
    within LOSS_RTOL (relative)."""
    problems = []
    for key, cli_key in (("steps", "steps"), ("final_scale", "final_scale"),
                         ("skipped_steps", "skipped_steps")):
        if res[key] != cli[cli_key]:
            problems.append(f"{key}: page {res[key]} != CLI {cli[cli_key]}")
    page, native = res["last_loss"], cli["final_loss"]
    diff = abs(page - native) / max(abs(native), 1e-12)
    log(f"   last loss: page {page:.6g}, CLI {native:.6g}, relative difference {diff:.2e} "
        f"(tolerance {LOSS_RTOL})")
    if not diff <= LOSS_RTOL:
        problems.append(f"last loss: page {page} vs CLI {native}: relative difference "
                        f"{diff:.3g} > {LOSS_RTOL}")
    return problems


def wait_for_result(wd, args, t0, console, label):
    """Poll the page until it publishes a result; returns (result, snapshot, problems)."""
    last_print = last_status = None
    snap = {}
    while True:
        elapsed = time.monotonic() - t0
        if elapsed > args.timeout:
            return None, snap, [f"no window.webgpuAmpResult after {args.timeout:.0f}s"]
        snap = snapshot(wd) or snap
        if http_error(snap):
            return None, snap, [http_error(snap)]
        res = snap.get("result")
        if isinstance(res, str):  # tolerate a JSON string instead of an object
            try:
                res = json.loads(res)
            except ValueError:
                pass
        if res is not None:
            if args.screenshots:
                # A frame or two more, so the canvas shows the finished run.
                time.sleep(1)
                os.makedirs(args.screenshots, exist_ok=True)
                shot = os.path.join(args.screenshots, f"{label.replace('/', '-')}.png")
                wd.screenshot(shot)
                log(f"   screenshot: {shot}")
            return res, snap, []
        # A Rust panic (console_error_panic_hook) never sets the result: fail fast.
        console += wd.browser_log()
        panics = [e for e in console if "panicked at" in str(e.get("message"))]
        if panics:
            msg = str(panics[0].get("message"))
            msg = msg[msg.index("panicked at"):].replace("\\n", " ").rstrip('"')
            return None, snap, ["the page panicked: " + msg]
        # progress: on a #status change (at most every 5 s), else every 30 s
        status = (snap.get("status") or {}).get("text")
        since = time.monotonic() - last_print if last_print else 1e9
        if (status != last_status and since >= 5) or since >= 30:
            msg = snap.get("message") or {}
            extra = f" | #message: {msg['text']}" if msg.get("visible") and msg.get("text") else ""
            log(f"   [{elapsed:5.0f}s] #status: {status!r}{extra}")
            last_print, last_status = time.monotonic(), status
        time.sleep(1)


def wait_hidden(wd, args, t0):
    """The autorun's tab is hidden behind a second tab (same origin) from which its progress
    is read out of localStorage.  Returns (result, problems)."""
    problems = []
    autorun_tab = wd.window_handle()
    was_hidden = wd.execute(WATCH_HIDDEN_JS)
    if was_hidden:
        return None, ["the autorun's tab was hidden before another tab covered it"]
    other = wd.new_tab()
    wd.switch_to(other)
    # Same origin (a directory listing of web/pkg), so localStorage is shared.
    wd.navigate(f"{args.base_url}/pkg/")
    res = None
    last_status = None
    while True:
        elapsed = time.monotonic() - t0
        if elapsed > args.timeout:
            problems.append(f"no result from the hidden tab after {args.timeout:.0f}s")
            break
        state = wd.execute("return {result: localStorage.getItem('e2e-result'), "
                           "visibility: localStorage.getItem('e2e-visibility'), "
                           "status: localStorage.getItem('e2e-status')};")
        status = state.get("status")
        if status != last_status:
            log(f"   [{elapsed:5.0f}s] hidden tab #status: {status!r}")
            last_status = status
        if state.get("result"):
            res = json.loads(state["result"])
            visibility = json.loads(state.get("visibility") or "[]")
            finished = res.get("finished_at", 0)
            hidden_at = [v["t"] for v in visibility if v["hidden"]]
            if not hidden_at:
                problems.append("the autorun's tab never became hidden (document.hidden stayed "
                                "false): the hidden-tab case did not test what it should")
            elif min(hidden_at) >= finished:
                problems.append("the run finished before its tab was hidden; use more --steps")
            else:
                log(f"   hidden {finished - min(hidden_at):.0f} ms before the run finished "
                    f"(visibility log: {visibility})")
            break
        time.sleep(1)
    wd.close_window()
    wd.switch_to(autorun_tab)
    return res, problems


def run_training(args, case):
    label = case["label"]
    log(f"-- e2e {label}: {case['steps']} steps")
    wd = None
    profile = None
    problems = []
    res = None
    console = []
    snap = {}
    try:
        wd, profile = browser_session(args, case["flags"], label.replace("/", "-"))
        params = {"autorun": 1, "precision": case["precision"], "steps": case["steps"]}
        if case.get("init_scale") is not None:
            params["init_scale"] = case["init_scale"]
        for key in ("model", "batch"):
            if case.get(key) is not None:
                params[key] = case[key]
        url = f"{args.base_url}/index.html?{urllib.parse.urlencode(params)}"
        t0 = time.monotonic()
        wd.navigate(url)
        if case.get("hidden"):
            res, problems = wait_hidden(wd, args, t0)
        else:
            res, snap, problems = wait_for_result(wd, args, t0, console, label)
        log(f"   finished after {time.monotonic() - t0:.1f}s")
        if res is not None:
            problems += check_result(res, case, args)
            if not problems and case.get("cli") and args.cli:
                try:
                    problems += compare_with_cli(res, cli_reference(args, case, res))
                except (RuntimeError, subprocess.SubprocessError, OSError, StopIteration,
                        ValueError, KeyError) as e:
                    problems.append(f"the CLI reference run failed: {e}")
        if problems and res is None:
            # Say what the page showed, to tell a hang from a missing-WebGPU message.
            for key in ("status", "message", "resultText"):
                el = snap.get(key)
                log(f"   #{'result' if key == 'resultText' else key}: "
                    + (f"{el['text']!r} (visible: {el['visible']})" if el else "(no such element)"))
            log(f"   document.readyState: {snap.get('readyState')}, navigator.gpu: {snap.get('hasGpu')}")
        if res is not None:
            msg = (snapshot(wd) or {}).get("message") or {}
            if msg.get("visible"):
                log(f"   #message: {msg.get('text')!r}")
    except WebDriverError as e:
        problems.append(f"webdriver: {e}")
    finally:
        close_session(wd, profile, problems, console)
    ok = not problems
    log(f"== e2e {label}: {'ok' if ok else 'FAILED'}")
    if res is not None:
        log(json.dumps(res, indent=2, sort_keys=False))
    for p in problems:
        log(f"   FAIL: {p}")
    summary = (f"{label}: ok, loss {res['first_loss']:.4g} -> {res['last_loss']:.4g}, "
               f"{res['ms_per_step']:.1f} ms/step, scale {res['final_scale']:g}, "
               f"skipped {res['skipped_steps']}, f16 storage {res['f16_storage']}, "
               f"adapter {res['adapter']!r}"
               + (f", sampled {res['sample']!r}" if res.get("sample") else "")
               if ok else f"{label}: FAILED ({problems[0].splitlines()[0]})")
    return ok, summary


def run_no_webgpu(args, mode):
    label = f"no-webgpu/{mode}"
    log(f"-- e2e {label}: expect a visible #message about WebGPU")
    wd = None
    profile = None
    problems = []
    console = []
    snap = {}
    try:
        wd, profile = browser_session(args, NO_WEBGPU_MODES[mode], f"no-webgpu-{mode}")
        base = args.base_url
        if mode == "no-api":
            u = urllib.parse.urlsplit(base)
            base = urllib.parse.urlunsplit(u._replace(netloc=f"{INSECURE_HOST}:{u.port or 80}"))
        t0 = time.monotonic()
        wd.navigate(f"{base}/index.html")
        while True:
            snap = snapshot(wd) or snap
            if http_error(snap):
                problems.append(http_error(snap))
                break
            msg = snap.get("message") or {}
            if msg.get("visible") and "WebGPU" in msg.get("text", ""):  # case matters: not "webgpu-amp"
                log(f"   #message after {time.monotonic() - t0:.1f}s: {msg['text']!r} "
                    f"(navigator.gpu: {snap.get('hasGpu')})")
                break
            if time.monotonic() - t0 > args.no_webgpu_timeout:
                problems.append(f"no visible #message mentioning WebGPU within "
                                f"{args.no_webgpu_timeout:.0f}s")
                log(f"   #message: {msg or '(no such element)'}, #status: {snap.get('status')}, "
                    f"navigator.gpu: {snap.get('hasGpu')}")
                break
            time.sleep(0.5)
        if mode == "no-api" and snap.get("hasGpu"):
            problems.append("navigator.gpu was defined; the no-api run did not test what it should")
        if snap.get("result") is not None:
            problems.append(f"the page published a result without WebGPU: {snap['result']!r}")
    except WebDriverError as e:
        problems.append(f"webdriver: {e}")
    finally:
        close_session(wd, profile, problems, console)
    ok = not problems
    log(f"== e2e {label}: {'ok' if ok else 'FAILED'}")
    for p in problems:
        log(f"   FAIL: {p}")
    return ok, f"{label}: {'ok' if ok else 'FAILED (' + problems[0].splitlines()[0] + ')'}"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base-url", required=True, help="where web/ is served, e.g. http://127.0.0.1:8000")
    ap.add_argument("--webdriver-url", required=True, help="chromedriver, e.g. http://127.0.0.1:9515")
    ap.add_argument("--precisions", default="f32,amp-f16",
                    help="comma- or space-separated list (default: f32,amp-f16)")
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--timeout", type=float, default=600, help="seconds per training run (default 600)")
    ap.add_argument("--expect-f16-storage", choices=["native", "packed", "none"],
                    help="require this f16_storage in every result (default: 'packed' if the "
                         "adapter name contains SwiftShader, otherwise no check)")
    ap.add_argument("--screenshots", metavar="DIR", default=None,
                    help="save each training run's page as DIR/PRECISION.png when it finishes")
    ap.add_argument("--skip-no-webgpu", action="store_true", help="skip the runs without WebGPU")
    ap.add_argument("--skip-frameless", action="store_true",
                    help="skip the runs without frames (no WebGPU presentation, hidden tab)")
    ap.add_argument("--skip-overflow", action="store_true",
                    help="skip the amp-f16 run whose first scale overflows")
    ap.add_argument("--frameless-steps", type=int, default=20,
                    help="steps of the runs without frames (default 20)")
    ap.add_argument("--skip-gpt", action="store_true",
                    help="skip the gpt-tiny run (text data, sampled text)")
    ap.add_argument("--gpt-steps", type=int, default=12,
                    help="steps of the gpt-tiny run (default 12)")
    ap.add_argument("--cli", default=None,
                    help="the native webgpu-amp binary: train every precision's run with it too "
                         "and compare (final scale, skipped steps exactly; last loss within "
                         f"{LOSS_RTOL:g} relative)")
    ap.add_argument("--no-webgpu-modes", default="no-adapter,no-api",
                    help="which no-WebGPU runs: no-adapter (navigator.gpu present, adapter null), "
                         "no-api (navigator.gpu undefined); default both")
    ap.add_argument("--no-webgpu-timeout", type=float, default=60)
    ap.add_argument("--chromium", default=os.environ.get("WEBGPU_AMP_E2E_CHROMIUM", CHROMIUM))
    ap.add_argument("--profile-root", default=None,
                    help="directory for the throwaway Chromium profiles (default: system temp)")
    args = ap.parse_args()
    # run.sh stops us with SIGTERM; exit through the finally blocks so sessions get deleted.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    args.base_url = args.base_url.rstrip("/")
    precisions = [p for p in args.precisions.replace(",", " ").split() if p]
    modes = [] if args.skip_no_webgpu else [m for m in args.no_webgpu_modes.replace(",", " ").split() if m]
    for m in modes:
        if m not in NO_WEBGPU_MODES:
            ap.error(f"unknown no-WebGPU mode {m!r} (known: {', '.join(NO_WEBGPU_MODES)})")
    if args.steps < 1:
        ap.error("--steps must be >= 1")

    try:
        WebDriver(args.webdriver_url).status()
    except WebDriverError as e:
        log(f"e2e: FAILED: chromedriver is not answering at {args.webdriver_url}: {e}")
        return 2

    cases = [{"label": p, "precision": p, "steps": args.steps, "flags": WEBGPU_FLAGS, "cli": True}
             for p in precisions]
    if not args.skip_overflow:
        cases.append({"label": "amp-f16/overflow", "precision": "amp-f16", "steps": args.steps,
                      "flags": WEBGPU_FLAGS, "cli": True, "init_scale": OVERFLOW_SCALE,
                      # the skipped steps do not train; the loss drop is not the point here
                      "loss_drop": False})
    if not args.skip_gpt:
        cases.append({"label": "gpt-tiny/amp-f16", "precision": "amp-f16", "steps": args.gpt_steps,
                      "model": "gpt-tiny", "batch": 8, "flags": WEBGPU_FLAGS, "cli": True,
                      "loss_ratio": GPT_LOSS_RATIO, "sample": True})
    if not args.skip_frameless:
        n = args.frameless_steps
        cases += [
            {"label": "frameless/f32", "precision": "f32", "steps": n, "flags": FRAMELESS_FLAGS,
             "loss_drop": False},
            {"label": "hidden-tab/f32", "precision": "f32", "steps": n, "flags": WEBGPU_FLAGS,
             "hidden": True, "loss_drop": False},
        ]
    t0 = time.monotonic()
    outcomes = [run_training(args, c) for c in cases]
    outcomes += [run_no_webgpu(args, m) for m in modes]
    failed = sum(1 for ok, _ in outcomes if not ok)
    log("")
    for _, line in outcomes:
        log(f"   {line}")
    log(f"== e2e summary: {len(outcomes) - failed}/{len(outcomes)} passed in "
        f"{time.monotonic() - t0:.0f}s" + (f", {failed} FAILED" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

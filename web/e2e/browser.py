"""The browser half of the end-to-end test: the Chromium flags that give headless WebGPU on
SwiftShader, a minimal W3C WebDriver client over urllib, and one fresh Chromium per run."""

import json
import shutil
import tempfile
import time
import urllib.error
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

    def find(self, css):
        """The element `css` selects (its WebDriver reference)."""
        return self._s("POST", "/element", {"using": "css selector", "value": css})

    def send_keys(self, element, text):
        """Type `text` into `element`; into a file input, newline-separated paths pick those
        files (a `multiple` input takes several)."""
        ref = next(iter(element.values()))
        self._s("POST", f"/element/{ref}/value", {"text": text})

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

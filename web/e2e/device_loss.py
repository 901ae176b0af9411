"""The e2e case of a GPU device lost mid-run (issue 22): the page's test hook
`lose_device_at=N` destroys the training device while step N is in flight, and the page must
not freeze: it publishes a result with `ok: false` and an error that names the loss and the
step, and shows the same line in its visible #message.

e2e.py hands in its helpers (`h`): browser_session, wait_for_result, close_session, snapshot,
log and WEBGPU_FLAGS, so this file needs nothing from it at import time.
"""

import re
import urllib.parse

LOSE_AT = 3


def check(res, message):
    """Problems with the published result `res` and the #message element (empty = pass)."""
    if not isinstance(res, dict):
        return [f"webgpuAmpResult is not an object: {res!r}"]
    if res.get("ok") is not False:
        return [f"ok is {res.get('ok')!r}: the run should have failed with a lost device"]
    error = res.get("error") or ""
    problems = []
    if "the GPU device was lost" not in error:
        problems.append(f"the error does not say the device was lost: {error!r}")
    # The browser reports the loss asynchronously: the run notices it at step N or soon after.
    stopped = re.search(r"the run stopped at step (\d+)", error)
    if not stopped or not LOSE_AT <= int(stopped.group(1)) < 20:
        problems.append(f"the error does not name a step from {LOSE_AT} on: {error!r}")
    text = (message or {}).get("text") or ""
    if not (message or {}).get("visible") or error not in text:
        problems.append(f"#message does not show the error: {message!r}")
    return problems


def run(args, h):
    label = "device-loss/f32"
    h.log(f"-- e2e {label}: lose_device_at={LOSE_AT}")
    wd = profile = None
    problems, console, res = [], [], None
    try:
        wd, profile = h.browser_session(args, h.WEBGPU_FLAGS, "device-loss")
        params = {"autorun": 1, "precision": "f32", "steps": 20, "lose_device_at": LOSE_AT}
        t0 = h.time.monotonic()
        wd.navigate(f"{args.base_url}/index.html?{urllib.parse.urlencode(params)}")
        res, _, problems = h.wait_for_result(wd, args, t0, console, label)
        h.log(f"   finished after {h.time.monotonic() - t0:.1f}s")
        if res is not None:
            message = (h.snapshot(wd) or {}).get("message")
            h.log(f"   error: {res.get('error')!r}; #message: {message!r}")
            problems += check(res, message)
    except h.WebDriverError as e:
        problems.append(f"webdriver: {e}")
    finally:
        h.close_session(wd, profile, problems, console)
    ok = not problems
    h.log(f"== e2e {label}: {'ok' if ok else 'FAILED'}")
    for p in problems:
        h.log(f"   FAIL: {p}")
    return ok, f"{label}: " + ("ok" if ok else f"FAILED ({problems[0].splitlines()[0]})")

"""Debian's Chromium, headless, for the report's page tests.

:func:`open_page` loads a page over the DevTools protocol on a pipe (``--remote-debugging-pipe``:
JSON messages ending in a NUL byte on file descriptors 3 and 4; stdlib only, no websocket, no
port) and returns what a person would have seen go wrong: console errors and warnings, uncaught
exceptions, log entries (a resource that failed to load), every request for anything but the
page itself, plus the value of a script run after the load. :func:`dump_dom` and
:func:`screenshot` use Chromium's own ``--dump-dom`` and ``--screenshot``.
"""
from __future__ import annotations

import json
import os
import select
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-extensions",
         "--disable-default-apps", "--mute-audio"]


def binary() -> str:
    path = shutil.which("chromium")
    assert path, "chromium not found: install Debian's chromium package (`make system-deps`)"
    return path


def _run(args: list[str], timeout: float = 120) -> subprocess.CompletedProcess:
    with tempfile.TemporaryDirectory(prefix="fw-chromium-") as profile:
        return subprocess.run([binary(), *FLAGS, f"--user-data-dir={profile}", *args], capture_output=True,
                              timeout=timeout)


def dump_dom(url: str) -> str:
    """The DOM after load, as Chromium serialises it (``--dump-dom``)."""
    done = _run(["--virtual-time-budget=5000", "--dump-dom", url])
    assert done.returncode == 0, done.stderr.decode(errors="replace")[-2000:]
    return done.stdout.decode()


def screenshot(url: str, out: Path, width: int = 1280, height: int = 2400) -> Path:
    done = _run([f"--window-size={width},{height}", "--hide-scrollbars", "--virtual-time-budget=5000",
                 f"--screenshot={out}", url])
    assert done.returncode == 0 and out.exists(), done.stderr.decode(errors="replace")[-2000:]
    return out


class _Pipe:
    """The DevTools protocol over Chromium's pipe: commands out, responses and events in."""

    def __init__(self, proc: subprocess.Popen, to_chrome: int, from_chrome: int) -> None:
        self.proc, self.out, self.inp = proc, to_chrome, from_chrome
        self.buf = b""
        self.events: list[dict] = []
        self.n = 0

    def send(self, method: str, params: dict | None = None, session: str | None = None,
             timeout: float = 30.0) -> dict:
        self.n += 1
        msg = {"id": self.n, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        os.write(self.out, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            for m in self._read(deadline):
                if m.get("id") == self.n:
                    assert "error" not in m, (method, m["error"])
                    return m.get("result", {})
                self.events.append(m)

    def wait_event(self, method: str, timeout: float = 30.0) -> dict:
        deadline = time.monotonic() + timeout
        while True:
            for i, e in enumerate(self.events):
                if e.get("method") == method:
                    return self.events.pop(i)
            self.events.extend(self._read(deadline))

    def drain(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        try:
            while True:
                self.events.extend(self._read(deadline))
        except TimeoutError:
            pass

    def _read(self, deadline: float) -> list[dict]:
        while b"\0" not in self.buf:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("no answer from chromium")
            ready, _, _ = select.select([self.inp], [], [], left)
            if ready:
                chunk = os.read(self.inp, 1 << 16)
                if not chunk:
                    raise RuntimeError(f"chromium closed its pipe (exit {self.proc.poll()})")
                self.buf += chunk
        *messages, self.buf = self.buf.split(b"\0")
        return [json.loads(m) for m in messages if m]


def open_page(url: str, expression: str, settle_s: float = 1.0, width: int | None = None) -> dict:
    """Load ``url``; returns ``problems`` (console errors and warnings, exceptions, error log
    entries), ``requests`` (URLs other than ``url`` itself) and ``value`` (``expression``'s).
    ``width``: the viewport's CSS pixels (Emulation.setDeviceMetricsOverride), else Chromium's."""
    to_r, to_w = os.pipe()  # we write, chromium reads (its fd 3)
    from_r, from_w = os.pipe()  # chromium writes (its fd 4), we read

    def fds() -> None:
        os.dup2(to_r, 3)
        os.dup2(from_w, 4)

    with tempfile.TemporaryDirectory(prefix="fw-chromium-") as profile:
        proc = subprocess.Popen([binary(), *FLAGS, f"--user-data-dir={profile}", "--remote-debugging-pipe",
                                 "about:blank"], preexec_fn=fds, close_fds=False, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
        os.close(to_r)
        os.close(from_w)
        cdp = _Pipe(proc, to_w, from_r)
        try:
            target = cdp.send("Target.createTarget", {"url": "about:blank"})["targetId"]
            session = cdp.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
            for domain in ("Page", "Runtime", "Log", "Network"):
                cdp.send(f"{domain}.enable", session=session)
            if width:
                cdp.send("Emulation.setDeviceMetricsOverride", {"width": width, "height": 900,
                         "deviceScaleFactor": 1, "mobile": False}, session=session)
            cdp.send("Page.navigate", {"url": url}, session=session)
            cdp.wait_event("Page.loadEventFired")
            cdp.drain(settle_s)
            value = cdp.send("Runtime.evaluate", {"expression": expression, "returnByValue": True},
                             session=session)
            assert "exceptionDetails" not in value, value["exceptionDetails"]
            cdp.drain(0.2)
            return {"problems": _problems(cdp.events), "value": value["result"].get("value"),
                    "requests": [e["params"]["request"]["url"] for e in cdp.events
                                 if e.get("method") == "Network.requestWillBeSent"
                                 and e["params"]["request"]["url"] != url]}
        finally:
            try:
                cdp.send("Browser.close", timeout=10)
            except Exception:  # already gone: nothing to close
                pass
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            os.close(to_w)
            os.close(from_r)


def _problems(events: list[dict]) -> list[str]:
    out = []
    for e in events:
        method, p = e.get("method"), e.get("params", {})
        if method == "Runtime.consoleAPICalled" and p.get("type") in ("error", "warning", "assert"):
            args = " ".join(str(a.get("value", a.get("description"))) for a in p["args"])
            out.append(f"console.{p['type']}: {args}")
        elif method == "Runtime.exceptionThrown":
            d = p["exceptionDetails"]
            out.append(f"exception: {d.get('exception', {}).get('description') or d.get('text')}")
        elif method == "Log.entryAdded" and p["entry"]["level"] in ("error", "warning"):
            out.append(f"log {p['entry']['level']}: {p['entry']['text']} {p['entry'].get('url', '')}")
    return out

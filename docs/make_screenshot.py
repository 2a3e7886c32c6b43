"""Take docs/fencing-rate-zombie-storm.png: Prometheus's graph of the fencing rate during a
``zombie-storm`` demo, rendered by headless Chromium (all on loopback).

    .venv/bin/python docs/make_screenshot.py [--minutes 4]

Needs Debian's ``prometheus`` and ``chromium`` packages.
"""
from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "docs" / "fencing-rate-zombie-storm.png"
EXPR = "sum by (error) (rate(fencewatch_broker_errors_total[1m]))"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_http(url: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=2):
                return
        except OSError:
            time.sleep(1)
    raise SystemExit(f"{url} did not answer within {timeout:.0f}s")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--minutes", type=float, default=4.0, help="how long the demo runs before the screenshot")
    args = ap.parse_args()
    for binary in ("prometheus", "chromium"):
        if not shutil.which(binary):
            raise SystemExit(f"{binary} not found: apt-get install -y {binary}")
    work = Path(tempfile.mkdtemp(prefix="fencewatch-shot-"))
    metrics_port, prom_port = free_port(), free_port()
    demo = subprocess.Popen([str(Path(sys.executable).with_name("fencewatch")), "demo", "--profile", "zombie-storm",
                             "--metrics-port", str(metrics_port), "--duration", f"{args.minutes + 2}m"],
                            stdout=(work / "demo.log").open("w"), stderr=subprocess.STDOUT, start_new_session=True)
    (work / "prometheus.yml").write_text(
        "global: {scrape_interval: 2s}\nscrape_configs:\n  - job_name: fencewatch\n"
        f"    static_configs: [{{targets: ['127.0.0.1:{metrics_port}']}}]\n")
    prom = subprocess.Popen(["prometheus", f"--config.file={work / 'prometheus.yml'}",
                             f"--web.listen-address=127.0.0.1:{prom_port}", f"--storage.tsdb.path={work / 'data'}"],
                            stdout=(work / "prometheus.log").open("w"), stderr=subprocess.STDOUT)
    try:
        wait_http(f"http://127.0.0.1:{metrics_port}/metrics", 240)
        print(f"demo and Prometheus up; collecting for {args.minutes} min ...", flush=True)
        time.sleep(args.minutes * 60)
        query = urllib.parse.urlencode({"g0.expr": EXPR, "g0.tab": "0", "g0.range_input": f"{int(args.minutes) + 1}m",
                                        "g0.stacked": "0", "g0.show_exemplars": "0"})
        url = f"http://127.0.0.1:{prom_port}/graph?{query}"
        subprocess.run(["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                        "--disable-component-update", "--disable-sync", "--no-first-run",
                        f"--user-data-dir={work / 'chromium'}", "--window-size=1400,900",
                        "--virtual-time-budget=15000", f"--screenshot={OUT}", url], check=True, timeout=120,
                       capture_output=True)
        print(f"wrote {OUT}")
    finally:
        prom.terminate()
        os.killpg(demo.pid, signal.SIGINT)
        try:
            demo.wait(120)
        except subprocess.TimeoutExpired:
            os.killpg(demo.pid, signal.SIGKILL)
        prom.wait(30)
    return 0


if __name__ == "__main__":
    sys.exit(main())

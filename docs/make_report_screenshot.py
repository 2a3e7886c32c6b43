"""Take docs/report.png: the top of a `fencewatch report` page for a simulated `mixed` trace
(groups that go empty and lose their offsets, unclean elections), rendered by headless Chromium.

    .venv/bin/python docs/make_report_screenshot.py

Needs Debian's ``chromium`` package. Everything runs offline, in a temporary directory.
"""
from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "docs" / "report.png"
FENCEWATCH = str(Path(sys.executable).with_name("fencewatch"))
SIMULATE = ["--profile", "mixed", "--duration", "20m", "--groups", "6", "--seed", "0",
            "--set", "empty_fraction=0.4", "--set", "empty_after_ms=240000", "--set", "retention_minutes=6",
            "--set", "retention_check_interval_ms=60000"]
RULES = ["--retention", "6m", "--retention-check-interval", "1m"]


def main() -> int:
    if not shutil.which("chromium"):
        raise SystemExit("chromium not found: apt-get install -y chromium")
    with tempfile.TemporaryDirectory(prefix="fencewatch-report-shot-") as tmp:
        work = Path(tmp)
        run = lambda *args: subprocess.run([FENCEWATCH, *args], check=True, capture_output=True)  # noqa: E731
        run("simulate", *SIMULATE, "--out", str(work / "trace.jsonl"))
        run("report", "--events", str(work / "trace.jsonl"), *RULES, "--out", str(work / "report.html"))
        subprocess.run(["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                        "--disable-component-update", "--disable-sync", "--no-first-run",
                        f"--user-data-dir={work / 'chromium'}", "--window-size=1280,1700", "--hide-scrollbars",
                        "--virtual-time-budget=5000", f"--screenshot={OUT}", (work / "report.html").as_uri()],
                       check=True, timeout=120, capture_output=True)
        from PIL import Image  # matplotlib's dependency: a 256-colour PNG is a third of the size

        with Image.open(OUT) as im:
            im.convert("RGB").quantize(256, method=Image.Quantize.FASTOCTREE).save(OUT, optimize=True)
        print(f"wrote {OUT} (the page: {(work / 'report.html').stat().st_size:,} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

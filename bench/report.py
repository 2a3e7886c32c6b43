"""Write one benchmark's section into docs/benchmarks.md (replacing its previous run, keeping
the notes after a ``<!-- notes -->`` line)."""
from __future__ import annotations

import datetime as _dt
import os
import platform
import re
import subprocess
from pathlib import Path

DOC = Path(__file__).resolve().parent.parent / "docs" / "benchmarks.md"


def machine() -> str:
    model = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    return f"nproc={os.cpu_count()}, {model}, Python {platform.python_version()}, load average when written {load:.2f}"


def commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              cwd=DOC.parent).stdout.strip() or "unknown"
    except OSError:
        return "unknown"


NOTES_MARKER = "<!-- notes -->"


def write_section(name: str, command: str, body: str) -> None:
    """Replace (or append) the section headed ``## <name>`` in docs/benchmarks.md.

    Whatever the old section holds from a line ``<!-- notes -->`` to its end (hand-written
    findings, earlier runs kept for comparison, ``###`` subsections) is kept, after the new
    generated part; a section without that line is replaced whole."""
    date = _dt.date.today().isoformat()
    section = (f"## {name} ({date}, commit {commit()})\n\nCommand: `{command}`\n"
               f"Machine: {machine()}\n\n{body.rstrip()}\n")
    text = DOC.read_text() if DOC.exists() else "# Benchmarks\n\nEach section: command, machine, date, numbers.\n"
    pattern = re.compile(rf"^## {re.escape(name)} \(.*?(?=^## |\Z)", re.S | re.M)
    old = pattern.search(text)
    if old:
        notes = re.search(rf"^{re.escape(NOTES_MARKER)}[ \t]*$", old.group(0), re.M)
        kept = "\n" + old.group(0)[notes.start():].rstrip() + "\n" if notes else ""
        text = text[:old.start()] + section + kept + "\n" + text[old.end():]
    else:
        text = text.rstrip() + "\n\n" + section
    DOC.parent.mkdir(parents=True, exist_ok=True)
    DOC.write_text(text)


def pin_one_core() -> None:
    """Run this process on one core, as the single-core targets are stated (no-op where unsupported)."""
    try:
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
    except (AttributeError, OSError):
        pass

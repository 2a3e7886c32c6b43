"""Write one benchmark run into the docs: docs/benchmarks.md holds each benchmark's newest run,
docs/archive/benchmarks-history.md every earlier run (newest first)."""
from __future__ import annotations

import datetime as _dt
import os
import platform
import re
import subprocess
from pathlib import Path

DOC = Path(__file__).resolve().parent.parent / "docs" / "benchmarks.md"
HISTORY = DOC.parent / "archive" / "benchmarks-history.md"


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
FIGURES_END = "<!-- end of figures: a new benchmark's section goes above this line -->"
HISTORY_TOP = "<!-- newest first: runs replaced in docs/benchmarks.md go below this line -->"
NOT_READ = ("_Not read yet. The run this one replaced, with its reading, is at the top of "
            "docs/archive/benchmarks-history.md._")
_DOC_START = "# Benchmarks\n\nEach section: command, machine, date, numbers.\n"
_HISTORY_START = f"# Benchmark history\n\nEarlier runs, newest first.\n\n{HISTORY_TOP}\n"


def write_section(name: str, command: str, body: str, *, history: bool = False) -> None:
    """Write a run as the section ``## <name> (<date>, commit <c>)``.

    In docs/benchmarks.md (``history`` false) the section of that name is replaced, and the run
    it held moves whole to the top of the history, with its reading (whatever follows a line
    ``<!-- notes -->``: findings written by hand), so the figures page never reads a new run
    with an old run's words; the new section then has that marker and a line saying it is not
    read yet. A new name goes above the figures' end marker (at the end without one).
    ``history`` true (a same-moment A/B of one change) writes the run to the top of the history."""
    date = _dt.date.today().isoformat()
    section = (f"## {name} ({date}, commit {commit()})\n\nCommand: `{command}`\n"
               f"Machine: {machine()}\n\n{body.rstrip()}\n")
    if history:
        _to_history(section)
        return
    text = DOC.read_text() if DOC.exists() else _DOC_START
    end = re.escape(FIGURES_END)
    pattern = re.compile(rf"^## {re.escape(name)} \(.*?(?=^## |^{end}|\Z)", re.S | re.M)
    old = pattern.search(text)
    if old:
        notes = re.search(rf"^{re.escape(NOTES_MARKER)}[ \t]*$", old.group(0), re.M)
        if notes:
            section += f"\n{NOTES_MARKER}\n\n{NOT_READ}\n"
        _to_history(old.group(0))
        text = text[:old.start()] + section + "\n" + text[old.end():]
    elif FIGURES_END in text:
        at = text.index(FIGURES_END)
        text = text[:at] + section + "\n" + text[at:]
    else:
        text = text.rstrip() + "\n\n" + section
    DOC.parent.mkdir(parents=True, exist_ok=True)
    DOC.write_text(text)


def _to_history(section: str) -> None:
    """``section`` at the top of the history's runs (below its marker)."""
    text = HISTORY.read_text() if HISTORY.exists() else _HISTORY_START
    if HISTORY_TOP not in text:
        text = text.rstrip() + f"\n\n{HISTORY_TOP}\n"
    at = text.index(HISTORY_TOP) + len(HISTORY_TOP)
    rest = text[at:].strip("\n")
    text = text[:at] + "\n\n" + section.strip() + "\n" + (f"\n{rest}\n" if rest else "")
    HISTORY.parent.mkdir(parents=True, exist_ok=True)
    HISTORY.write_text(text)


def pin_one_core() -> None:
    """Run this process on one core, as the single-core targets are stated (no-op where unsupported)."""
    try:
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
    except (AttributeError, OSError):
        pass

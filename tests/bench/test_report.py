"""bench/report.py's write_section: a bench rewriting its section moves the run it replaces, with
the reading after ``<!-- notes -->``, to the top of the history, and leaves the other sections
alone; bench_soak's NMT parsing and options."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench import bench_soak, report  # noqa: E402


@pytest.fixture
def doc(tmp_path, monkeypatch):
    path = tmp_path / "benchmarks.md"
    monkeypatch.setattr(report, "DOC", path)
    monkeypatch.setattr(report, "HISTORY", tmp_path / "archive" / "benchmarks-history.md")
    monkeypatch.setattr(report, "commit", lambda: "abc1234")
    return path


DOC = f"""# Benchmarks

## A (2026-01-01, commit 1111111)

old A table

## Soak (2026-01-01, commit 1111111)

old soak table \\d

<!-- notes -->

What this run says: hand-written.

### The soak before

older table

## C (2026-01-01, commit 1111111)

C table

{report.FIGURES_END}

## How to read these figures

The bars.
"""


def test_rewrite_moves_the_old_run_and_its_reading_to_the_history(doc):
    doc.write_text(DOC)
    report.write_section("Soak", "python bench/bench_soak.py", "new soak table \\d")
    text, history = doc.read_text(), report.HISTORY.read_text()
    assert "old soak table" not in text and "hand-written" not in text and "### The soak before" not in text
    assert text.count("## Soak (") == 1 and text.count(report.NOTES_MARKER) == 1
    assert text.index("new soak table \\d") < text.index(report.NOTES_MARKER) < text.index(report.NOT_READ) < text.index("## C (")
    assert "old A table" in text and "C table" in text and text.endswith("The bars.\n")
    assert history.index(report.HISTORY_TOP) < history.index("## Soak (2026-01-01, commit 1111111)")
    assert history.index("old soak table \\d") < history.index("hand-written") < history.index("### The soak before")
    assert "## C (" not in history
    report.write_section("Soak", "python bench/bench_soak.py", "newer")  # twice: both earlier runs kept, newest first
    history = report.HISTORY.read_text()
    assert history.index("new soak table") < history.index("old soak table") and history.count("hand-written") == 1
    assert history.count(report.NOT_READ) == 1 and doc.read_text().count(report.NOTES_MARKER) == 1


def test_section_without_notes_is_replaced_whole(doc):
    doc.write_text(DOC)
    report.write_section("A", "cmd", "new A")
    text = doc.read_text()
    assert "old A table" not in text and "new A" in text
    assert text.index("new A") < text.index("## Soak (") and "hand-written" in text
    assert text.split("## Soak (")[0].count(report.NOTES_MARKER) == 0  # no reading to wait for
    assert "old A table" in report.HISTORY.read_text()


def test_last_section_and_new_section_stay_above_the_figures_end(doc):
    doc.write_text(DOC)
    report.write_section("C", "cmd", "new C")
    report.write_section("D", "cmd", "D table")
    text = doc.read_text()
    assert "C table" not in text and text.count(report.FIGURES_END) == 1
    assert text.index("new C") < text.index("## D (") < text.index(report.FIGURES_END) < text.index("## How to read")
    assert text.endswith("The bars.\n") and "C table" in report.HISTORY.read_text()


def test_new_section_without_the_figures_end_is_appended(doc):
    doc.write_text(DOC.replace(report.FIGURES_END, ""))
    report.write_section("D", "cmd", "D table")
    assert doc.read_text().endswith("D table\n")


def test_an_ab_goes_to_the_top_of_the_history(doc):
    doc.write_text(DOC)
    report.HISTORY.parent.mkdir()
    report.HISTORY.write_text(f"# History\n\nintro\n\n{report.HISTORY_TOP}\n\n## Older (2025-12-01, commit 0)\n\nold\n")
    report.write_section("replay A/B against 1111111", "python bench/ab_replay.py 1111111", "a/b table", history=True)
    history = report.HISTORY.read_text()
    assert doc.read_text() == DOC
    assert history.index("intro") < history.index(report.HISTORY_TOP) < history.index("a/b table") < history.index("## Older")
    assert history.endswith("old\n")


NMT = """12345:

Native Memory Tracking:

(Omitting categories weighting less than 1KB)

Total: reserved=2779012KB, committed=892040KB
-                 Java Heap (reserved=1048576KB, committed=528384KB)
                            (mmap: reserved=1048576KB, committed=528384KB)

-                     Class (reserved=1050120KB, committed=22536KB)
                            (classes #28011)

-                    Thread (reserved=318888KB, committed=33228KB)
                            (thread #309)
                            (malloc=547KB #1874) (peak=594KB #2286)

-               Arena Chunk (reserved=3178KB, committed=3178KB)
                            (malloc=181KB #669) (at peak)
"""


def test_nmt_parse(monkeypatch):
    class Done:
        stdout = NMT

    monkeypatch.setattr(bench_soak.subprocess, "run", lambda *a, **k: Done)
    monkeypatch.setattr(bench_soak, "smaps_mb", lambda pid, heap: {})
    out = bench_soak.nmt_mb(2**31 - 1)  # no such process: /proc of a real one would be read
    assert out["nmt_java_heap"] == 516.0 and out["nmt_thread"] == pytest.approx(33228 / 1024)
    assert out["nmt_arena_chunk"] == pytest.approx(3178 / 1024) and out["nmt_total"] == pytest.approx(892040 / 1024)
    assert out["nmt_malloc"] == pytest.approx((547 + 181) / 1024)
    assert out["nmt_malloc_peaks"] == pytest.approx((594 + 181) / 1024)


def test_nmt_added_to_the_jobs_java_options():
    from fencewatch.streaming.runtime.session import LOCAL_JVM_OPTIONS

    nmt = "-XX:NativeMemoryTracking=summary"
    assert bench_soak.with_nmt(["spark.x=1"]) == ["spark.x=1", f"spark.driver.extraJavaOptions={LOCAL_JVM_OPTIONS} {nmt}"]
    assert bench_soak.with_nmt(["spark.driver.extraJavaOptions=-Xss4m"]) == [f"spark.driver.extraJavaOptions=-Xss4m {nmt}"]

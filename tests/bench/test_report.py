"""bench/report.py's write_section: a bench rewriting its section keeps the notes after
``<!-- notes -->`` and leaves the other sections alone; bench_soak's NMT parsing and options."""
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
    monkeypatch.setattr(report, "commit", lambda: "abc1234")
    return path


DOC = """# Benchmarks

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
"""


def test_rewrite_keeps_notes_and_other_sections(doc):
    doc.write_text(DOC)
    report.write_section("Soak", "python bench/bench_soak.py", "new soak table \\d")
    text = doc.read_text()
    assert "old soak table" not in text
    assert text.count("## Soak (") == 1
    new, notes = text.index("new soak table \\d"), text.index("<!-- notes -->")
    assert new < notes < text.index("hand-written") < text.index("### The soak before") < text.index("## C (")
    assert "old A table" in text and "C table" in text
    report.write_section("Soak", "python bench/bench_soak.py", "newer")  # twice: still one copy of the notes
    assert doc.read_text().count("hand-written") == 1 and doc.read_text().count("<!-- notes -->") == 1


def test_section_without_marker_is_replaced_whole(doc):
    doc.write_text(DOC)
    report.write_section("A", "cmd", "new A")
    text = doc.read_text()
    assert "old A table" not in text and "new A" in text
    assert text.index("new A") < text.index("## Soak (") and "hand-written" in text


def test_last_section_and_new_section(doc):
    doc.write_text(DOC)
    report.write_section("C", "cmd", "new C")
    report.write_section("D", "cmd", "D table")
    text = doc.read_text()
    assert "C table" not in text and text.index("new C") < text.index("## D (") and text.endswith("D table\n")


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
    out = bench_soak.nmt_mb(12345)
    assert out["nmt_java_heap"] == 516.0 and out["nmt_thread"] == pytest.approx(33228 / 1024)
    assert out["nmt_arena_chunk"] == pytest.approx(3178 / 1024) and out["nmt_total"] == pytest.approx(892040 / 1024)
    assert out["nmt_malloc"] == pytest.approx((547 + 181) / 1024)
    assert out["nmt_malloc_peaks"] == pytest.approx((594 + 181) / 1024)


def test_nmt_added_to_the_jobs_java_options():
    from fencewatch.streaming.runtime.session import LOCAL_JVM_OPTIONS

    nmt = "-XX:NativeMemoryTracking=summary"
    assert bench_soak.with_nmt(["spark.x=1"]) == ["spark.x=1", f"spark.driver.extraJavaOptions={LOCAL_JVM_OPTIONS} {nmt}"]
    assert bench_soak.with_nmt(["spark.driver.extraJavaOptions=-Xss4m"]) == [f"spark.driver.extraJavaOptions=-Xss4m {nmt}"]

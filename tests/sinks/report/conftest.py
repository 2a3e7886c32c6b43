"""A simulated trace (the ``mixed`` profile, with groups that go empty and offsets that expire)
run through ``fencewatch replay``, and its report: shared by the report's tests."""
from __future__ import annotations

import json

import pytest
from report_helpers import RULES, SIMULATE, fencewatch


@pytest.fixture(scope="session")
def mixed_run(tmp_path_factory) -> dict:
    """Paths of the trace, its verdicts and alerts, replay's stderr summary, and the report."""
    d = tmp_path_factory.mktemp("report")
    fencewatch("simulate", *SIMULATE, "--out", str(d / "trace.jsonl"))
    replayed = fencewatch("replay", str(d / "trace.jsonl"), "--out", str(d / "verdicts.jsonl"),
                          "--alerts", str(d / "alerts.jsonl"), *RULES)
    reported = fencewatch("report", str(d / "verdicts.jsonl"), "--alerts", str(d / "alerts.jsonl"),
                          "--out", str(d / "report.html"), "--json", str(d / "summary.json"))
    return {"dir": d, "trace": d / "trace.jsonl", "verdicts": d / "verdicts.jsonl", "alerts": d / "alerts.jsonl",
            "replay_stderr": replayed.stderr, "report_stdout": reported.stdout, "html": d / "report.html",
            "summary": json.loads((d / "summary.json").read_text())}

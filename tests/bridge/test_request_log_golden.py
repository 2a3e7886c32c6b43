"""The decoder's fast paths change no output: 857 lines (the benchmark's mix and the shapes the
fast paths leave to the general ones, ``make_request_log_golden.py``) through four bridges give
the events, counts and problems recorded by the decoder before the fast paths (main 6bae636),
compared as JSON text so that key order counts too."""

from __future__ import annotations

import json
import lzma

import pytest

from fencewatch.streaming.bridge.request_log import RequestLogBridge
from make_request_log_golden import CONFIGS, GOLDEN


def _golden() -> tuple[dict, list[dict]]:
    with lzma.open(GOLDEN, "rt", encoding="utf-8") as f:
        head, *runs = (json.loads(x) for x in f)
    return head, runs


HEAD, RUNS = _golden()


@pytest.mark.parametrize("run", RUNS, ids=[json.dumps(r["config"]) for r in RUNS])
def test_outputs_equal_the_recorded_ones(run):
    b = RequestLogBridge(HEAD["names"], **run["config"])
    for n, (case, want) in enumerate(zip(HEAD["cases"], run["events"])):
        line = case["line"].encode() if case["bytes"] else case["line"]
        got = b.map_line(line, str(n), ts=case["ts"])
        assert json.dumps(got) == json.dumps(want), (n, case["line"][:200])
    assert dict(sorted(b.counts.items())) == run["counts"]
    assert [list(p) for p in b.problems] == run["problems"]


def test_the_corpus_covers_the_paths():
    """Every bridge configuration recorded; the fast paths and the general ones both met."""
    assert [r["config"] for r in RUNS] == list(CONFIGS)
    counts = RUNS[0]["counts"]
    assert counts["lines"] == len(HEAD["cases"]) > 800
    assert counts["OFFSET_COMMIT"] > 100 and counts["CONSUMER_GROUP_HEARTBEAT"] > 300
    assert counts["TXN_OFFSET_COMMIT"] and counts["problem.NO_RESPONSE_PARTITION"]
    assert {k for k in counts if k.startswith(("broken.", "skipped.", "dropped."))} >= {
        "broken.BAD_JSON", "broken.MISSING_FIELD", "broken.BAD_FIELD", "broken.BAD_TIMESTAMP", "skipped.OTHER_API",
        "skipped.EMPTY", "skipped.OTHER_LOGGER", "skipped.EMPTY_COMMIT", "dropped.NOT_COORDINATOR"}
    assert any(len(e) > 1 for r in RUNS for e in r["events"])  # a line with several events

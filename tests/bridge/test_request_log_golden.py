"""The decoder's fast paths change no output: 880 lines (the benchmark's mix, the shapes the
fast paths leave to the general ones, and heartbeats answered UNKNOWN_MEMBER_ID /
FENCED_MEMBER_EPOCH with commits of several API versions, ``make_request_log_golden.py``) through
four bridges give the events, counts and problems recorded by the decoder before the fast paths
(main 6bae636; since contract §10.1 g and h with ``api_version`` on commits and the added lines'
outputs), compared as JSON text so that key order counts too."""

from __future__ import annotations

import json
import lzma
import sys

import pytest

from fencewatch.state.records import check_event
from fencewatch.streaming.ingest.request_log import RequestLogBridge
from make_request_log_golden import CONFIGS, GOLDEN, ROOT
from request_log_lines import heartbeat, log_line, offset_commit


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


@pytest.mark.parametrize("run", RUNS, ids=[json.dumps(r["config"]) for r in RUNS])
def test_every_event_written_is_declared(run):
    """The bridge's output structs write the declared fields of their type (``state.records``;
    checked at import by name, here on every event of the corpus, nested records too)."""
    b = RequestLogBridge(HEAD["names"], **run["config"])
    types = set()
    for n, case in enumerate(HEAD["cases"]):
        line = case["line"].encode() if case["bytes"] else case["line"]
        for e in b.map_line(line, str(n), ts=case["ts"]):
            check_event(f"request log line {n}", e)
            types.add(e["type"])
    assert {"heartbeat", "offset_commit", "txn_offset_commit", "member_assignment", "member_left"} <= types


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


# -- the JSON the commands write: event_json, straight from the Structs --------------------------

def _dumps(event: dict) -> bytes:
    return json.dumps(event, separators=(",", ":")).encode()


@pytest.mark.parametrize("run", RUNS, ids=[json.dumps(r["config"]) for r in RUNS])
def test_event_json_is_the_recorded_events_json_dumps(run):
    """The commands' bytes equal ``json.dumps(event, separators=(",", ":"))`` of the recorded
    dicts (key order included), for every bridge configuration of the golden corpus."""
    b = RequestLogBridge(HEAD["names"], **run["config"])
    written = 0
    for n, (case, want) in enumerate(zip(HEAD["cases"], run["events"])):
        line = case["line"].encode() if case["bytes"] else case["line"]
        got = b.map_line_json(line, str(n), ts=case["ts"])
        assert got == [_dumps(e) for e in want], (n, case["line"][:200])
        written += len(got)
    assert written > 800
    assert dict(sorted(b.counts.items())) == run["counts"]


@pytest.mark.parametrize("carry", [True, False])
def test_event_json_equals_json_dumps_of_map_line_on_the_bench_corpus(carry):
    """3,000 lines of the benchmark's mix (another seed than the golden corpus): the bytes path
    and the dicts path (``map_line``) agree byte for byte, and so do the bridges' states."""
    sys.path.insert(0, str(ROOT / "bench"))
    from bench_request_log import build

    lines, names = build(3000, seed=5)
    a, b = RequestLogBridge(names, carry=carry), RequestLogBridge(names, carry=carry)
    kinds = set()
    for n, line in enumerate(lines):
        dicts = a.map_line(line, str(n))
        kinds.update(e["type"] for e in dicts)
        assert b.map_line_json(line, str(n)) == [_dumps(e) for e in dicts], n
    assert kinds == {"heartbeat", "member_assignment", "offset_commit", "txn_offset_commit"}
    assert a.counts == b.counts and a.members == b.members


@pytest.mark.parametrize("text", [
    "".join(map(chr, range(0x20))) + "\x7f", "caf\u00e9", "\u6f22\u5b57", "\U0001f600 emoji", 'quote " back \\ slash',
    "plain-ascii /~", "del\x7f only"])
def test_event_json_escapes_as_json_dumps(text):
    """Text msgspec writes differently (non-ASCII, DEL: ``json.dumps`` escapes them) takes the
    dicts' way; control characters, quotes and backslashes are written alike."""
    tid = "AAAAAAAAAAAAAAAAAAAAAA"
    lines = [log_line(offset_commit(9, "g" + text, 3, "m" + text, [("t" + text, [(0, 5, 1)])], metadata=text)),
             log_line(offset_commit(8, "g", 3, "m", [("t", [(0, 5, 1), (1, 6, 1)])], instance=text,
                                    codes={("t", 1): 22})),
             log_line(heartbeat(1, "g" + text, "m" + text, 4, response_epoch=5, assignment=[(tid, [0])],
                                owned=[(tid, [0, 1])], subscribed=["s" + text], instance=text)),
             log_line(heartbeat(1, "g" + text, "m" + text, -2, instance=text))]
    for carry in (True, False):
        a = RequestLogBridge({tid: "n" + text}, carry=carry, cluster="c" + text)
        b = RequestLogBridge({tid: "n" + text}, carry=carry, cluster="c" + text)
        for n, line in enumerate(lines):
            dicts = a.map_line(line, str(n))
            assert dicts, (n, a.problems)
            assert b.map_line_json(line, str(n)) == [_dumps(e) for e in dicts], n

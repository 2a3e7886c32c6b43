"""``RequestLogBridge.events_many`` (what the commands call) gives what ``events`` gives line by
line: the same events, counts, problems and member state, for text, bytes and file lines (with
their newline), in any batch size; arbitrary lines never make it raise. And the batch encoders
(``events_json_lines``, ``events_json_many``) write ``event_json``'s bytes."""

from __future__ import annotations

import json
import sys

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fencewatch.streaming.ingest.request_log import (RequestLogBridge, event_json, events_json_lines,
                                                     events_json_many)
from make_request_log_golden import CONFIGS, ROOT
from request_log_lines import heartbeat, kafka_id, log_line, offset_commit
from test_request_log import VALID, json_values, mutate
from test_request_log_golden import HEAD

STAMP = "2026-11-20 09:00:00,123"


def _state(b: RequestLogBridge):
    members = {k: (m.epoch, m.assigned, m.owned, m.subscribed, m.instance_id) for k, m in b.members.items()}
    return dict(b.counts), list(b.problems), members, b.unresolved_ids


def _same(lines, names, config, batch, tss=None):
    """``events`` line by line against ``events_many`` in batches of ``batch``."""
    one, many = RequestLogBridge(names, **config), RequestLogBridge(names, **config)
    tss = tss or [None] * len(lines)
    want = [msgspec.json.encode(one.events(line, str(n), ts=ts)) for n, (line, ts) in enumerate(zip(lines, tss))]
    got = []
    for k in range(0, len(lines), batch):
        got += map(msgspec.json.encode, many.events_many(lines[k:k + batch], [str(n) for n in range(k, k + batch)][
            :len(lines[k:k + batch])], tss[k:k + batch]))
    assert got == want
    assert _state(many) == _state(one)
    return many


def _forms(line: str, form: str, j: int):
    if form == "str":
        return line
    if form == "bytes":
        return line.encode("utf-8", "surrogatepass")
    if form == "file":
        return line.encode("utf-8", "surrogatepass") + b"\n"
    raw = line.encode("utf-8", "surrogatepass")
    return [line, raw, raw + b"\n", bytearray(raw), raw + b"\r\n", memoryview(raw)][j % 6]


@pytest.mark.parametrize("config", CONFIGS, ids=json.dumps)
@pytest.mark.parametrize("form", ["str", "bytes", "file", "mixed"])
def test_the_golden_corpus_in_batches_as_line_by_line(config, form):
    cases = HEAD["cases"]
    lines = [_forms(c["line"], form, j) for j, c in enumerate(cases)]
    for batch in (1, 7, 1000):
        _same(lines, HEAD["names"], config, batch, [c["ts"] for c in cases])


@pytest.mark.parametrize("carry", [True, False])
@pytest.mark.parametrize("form", ["str", "bytes", "file"])
def test_the_bench_corpus_in_batches_as_line_by_line(carry, form):
    sys.path.insert(0, str(ROOT / "bench"))
    from bench_request_log import build

    lines, names = build(3000, seed=11)
    b = _same([_forms(x, form, 0) for x in lines], names, {"carry": carry}, 500)
    assert b.counts["CONSUMER_GROUP_HEARTBEAT"] > 1500 and b.counts["OFFSET_COMMIT"] > 500


def test_on_unresolved_is_called_after_the_line_that_met_an_unknown_id():
    """The live bridge refreshes the names there: the next line resolves."""
    tid = kafka_id(__import__("uuid").UUID(int=7))
    line = log_line(offset_commit(10, "g", 1, "m", [(tid, [(0, 5, 1)])]), stamp=STAMP)
    b = RequestLogBridge()
    calls = []

    def learn():
        calls.append(b.unresolved_ids)
        b.topic_names.learn(__import__("uuid").UUID(int=7).bytes, "orders")

    out = b.events_many([line, line.encode(), line], ["0", "1", "2"], on_unresolved=learn)
    assert calls == [1]
    assert [e.offsets[0].topic for evs in out for e in evs] == [str(__import__("uuid").UUID(int=7)), "orders",
                                                                "orders"]


def test_the_batch_encoders_write_event_json():
    sys.path.insert(0, str(ROOT / "bench"))
    from bench_request_log import build

    lines, names = build(2000, seed=13)
    lines += [log_line(offset_commit(9, "g\u00e9\x7f", 3, "m", [("t", [(0, 5, 1)])], metadata="x\ny"))]
    b = RequestLogBridge(names, cluster="c")
    events = [e for evs in b.events_many(lines, [str(n) for n in range(len(lines))]) for e in evs]
    want = [event_json(e) for e in events]
    assert events_json_many(events) == want
    assert events_json_lines(events) == b"".join(x + b"\n" for x in want)
    assert events_json_many([]) == [] and events_json_lines([]) == b""


# -- arbitrary input: never raises, and the same as line by line ---------------------------------

PRIMER = log_line(heartbeat(1, "g", "m", 1), stamp=STAMP)  # the second read once: the fast way is open


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(st.text(), st.text(st.characters(codec=None, categories=None)), st.binary()),
       st.sampled_from(["", f"[{STAMP}] DEBUG Completed request:", "Completed request:",
                        f"[{STAMP}] DEBUG Completed request:"
                        '{"isForwarded":false,"requestHeader":{"requestApiKey":68,']),
       st.sampled_from(["", " (kafka.request.logger)", " (kafka.request.logger)\n"]))
def test_arbitrary_lines_in_batches_as_line_by_line(text, prefix, suffix):
    line = prefix + text + suffix if isinstance(text, str) else prefix.encode() + text + suffix.encode()
    for config in ({}, {"carry": False}):
        _same([PRIMER, line, PRIMER.encode(), line], {}, config, 4, [1, 2, 3, 4])


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_arbitrary_json_in_batches_as_line_by_line(data):
    obj = mutate(data.draw(st.sampled_from(VALID)), data.draw)
    if data.draw(st.booleans()):
        obj = data.draw(st.dictionaries(st.sampled_from(["requestHeader", "request", "response", "isForwarded"]),
                                        json_values, max_size=4))
    line = log_line(obj, stamp=STAMP) if isinstance(obj, dict) else json.dumps(obj)
    raw = line.encode("utf-8", "surrogatepass")
    b = _same([PRIMER, line, raw, raw + b"\n"], {}, {}, 4, [1, 2, 3, 4])
    assert b.counts["broken.INTERNAL"] == 0, b.problems

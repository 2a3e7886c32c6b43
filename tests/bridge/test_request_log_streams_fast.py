"""StreamsGroupHeartbeat (88) lines give the same events whichever way the decoder reads them.

In Kafka's default layout, at a second the regex has already read, the bridge cuts a line by
position (``frame.FAST_APIS``) and parses its body without the header; any other form (here the
same line behind a shipper's prefix) takes the general way: regex or text search, the whole
line parsed. Over the real Kafka Streams captures (``tests/fixtures/kafka-streams/*/
request-log.txt``: API 88 with TxnOffsetCommit and the EndTxn lines the decoder skips), the
position-based way, ``events_many``'s batch loop (bytes lines, as the commands read them) and
the general way give the same event JSON, byte for byte, line by line, and the same counts,
problems and member tracker, for each bridge configuration.
"""

from __future__ import annotations

import json
from pathlib import Path

import msgspec
import pytest

from fencewatch.streaming.ingest.request_log import RequestLogBridge

CAPTURES = Path(__file__).resolve().parents[1] / "fixtures" / "kafka-streams"
VERSIONS = sorted(p.name for p in CAPTURES.iterdir() if (p / "request-log.txt").is_file())
CONFIGS = ({}, {"cluster": "c1"}, {"carry": False}, {"carry": False, "cluster": "c1"})
PREFIX = "<15>1 2026-12-03T13:23:19Z broker-1 kafka[42]: "  # a shipper's own header: the general way


def _capture(version: str) -> tuple[list[str], dict[str, str]]:
    folder = CAPTURES / version
    lines = (folder / "request-log.txt").read_text(encoding="utf-8").splitlines()
    return lines, json.loads((folder / "topic-ids.json").read_text())


def _state(b: RequestLogBridge):
    members = {k: (m.epoch, m.assigned, m.owned, m.subscribed, m.instance_id) for k, m in b.members.items()}
    return dict(b.counts), list(b.problems), members, b.unresolved_ids


def _line_by_line(lines, names, config):
    b = RequestLogBridge(names, **config)
    return [msgspec.json.encode(b.events(x, str(n))) for n, x in enumerate(lines)], _state(b)


def _in_batches(lines, names, config, batch=50):
    b = RequestLogBridge(names, **config)
    out = []
    for k in range(0, len(lines), batch):
        out += map(msgspec.json.encode, b.events_many(lines[k:k + batch], [str(n) for n in range(k, k + batch)]
                                                      [:len(lines[k:k + batch])]))
    return out, _state(b)


def test_every_capture_is_mostly_streams_heartbeats():
    """The comparison below reads what it claims to: hundreds of API 88 lines per capture."""
    assert VERSIONS == ["4.2.2", "4.3.1", "4.4.0"]
    for version in VERSIONS:
        lines, _ = _capture(version)
        assert sum('"requestHeader":{"requestApiKey":88,' in x[:120] for x in lines) > 300


@pytest.mark.parametrize("config", CONFIGS, ids=json.dumps)
@pytest.mark.parametrize("version", VERSIONS)
def test_fast_and_general_ways_give_the_same_events(version, config):
    lines, names = _capture(version)
    general, general_state = _line_by_line([PREFIX + x for x in lines], names, config)
    fast, fast_state = _line_by_line(lines, names, config)
    assert fast == general
    assert fast_state == general_state
    many, many_state = _in_batches([x.encode() for x in lines], names, config)
    assert many == general
    assert many_state == general_state
    files, files_state = _in_batches([x.encode() + b"\n" for x in lines], names, config, batch=7)
    assert (files, files_state) == (general, general_state)
    counts = general_state[0]
    assert counts["STREAMS_GROUP_HEARTBEAT"] > 300 and counts["events"] >= counts["STREAMS_GROUP_HEARTBEAT"]


def test_in_kafkas_layout_a_streams_heartbeats_header_is_read_for_its_key_only():
    """The witness that the position-based way is taken: as for ConsumerGroupHeartbeat
    (docs/request-log.md), a wrong-typed ``clientId`` in the header of a default-layout line at a
    known second is not read there (the event is the same as the good line's); behind a prefix,
    the general way reads the header and reports ``BAD_FIELD``."""
    lines, names = _capture("4.4.0")
    n = next(i for i, x in enumerate(lines) if '"requestApiKey":88,' in x[:120] and '"errorCode":0,' in x)
    good = lines[n]
    bad = good.replace('"clientId":"', '"clientId":7,"x":"', 1)
    assert bad != good
    fast = RequestLogBridge(names)
    fast.events(good, "0")  # the regex's way reads the second once
    want = fast.map_line(good, "1")
    assert fast.map_line(bad, "2") == [dict(e, event_id="2") for e in want] and want
    general = RequestLogBridge(names)
    assert general.map_line(PREFIX + bad, "0") == [] and general.counts["broken.BAD_FIELD"] == 1

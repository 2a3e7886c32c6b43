"""10,000 fuzzed records through the decoders the job runs: JSON, Avro, ``__consumer_offsets`` (the
bridge, then JSON, as in the job) and broker request-log lines (``RequestLogBridge`` as the job's
mapper runs it, then JSON). Every input decodes or becomes a dead letter with a reason; nothing
raises, nothing hangs (Hypothesis' deadline per record)."""
from __future__ import annotations

import json
import struct
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fencewatch.streaming.ingest.events import DecodeError, UnknownType, decode_avro_record, decode_json_line
from fencewatch.state.avro_codec import encode_avro

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bridge"))
from bridge_encoder import encode_record  # noqa: E402  (the bridge tests' encoder, from Kafka's schemas)
import request_log_lines as rl  # noqa: E402  (request-log lines as Kafka writes them)

FUZZ = settings(max_examples=2_500, deadline=2_000, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
COUNT = {"json": 0, "avro": 0, "consumer_offsets": 0, "request_log": 0}

VALID = [
    {"type": "offset_commit", "ts": 1_735_689_600_000, "group_id": "g", "member_id": "m", "member_epoch": 3,
     "offsets": [{"topic": "t", "partition": 0, "offset": 10, "leader_epoch": 1}], "error_code": 0},
    {"type": "member_assignment", "ts": 1_735_689_600_000, "group_id": "g", "member_id": "m", "member_epoch": 3,
     "assigned": [{"topic": "t", "partitions": [0, 1], "assignment_epochs": [3, 2]}], "pending_revocation": []},
    {"type": "heartbeat", "ts": 1, "group_id": "g", "member_id": "m", "request_epoch": 1, "response_epoch": 2},
    {"type": "classic_sync", "ts": 1, "group_id": "g", "generation": 1, "assignments": {"m": [{"topic": "t",
                                                                                              "partitions": [0]}]}},
    {"type": "partition_epochs", "ts": 1, "topic": "t", "partition": 0, "log_end_offset": 5,
     "epochs": [{"epoch": 0, "start_offset": 0}]},
    {"type": "txn_offset_commit", "ts": 1, "group_id": "g", "transactional_id": "x", "producer_id": 1,
     "producer_epoch": 0, "offsets": [{"topic": "t", "partition": 0, "offset": 1}]},
]

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-2 ** 70, max_value=2 ** 70) | st.floats()
    | st.text(max_size=40),
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=12), inner, max_size=5),
    max_leaves=20)


@st.composite
def mutated_events(draw):
    """A valid event with fields replaced, dropped or added: close enough to reach deep checks."""
    event = json.loads(json.dumps(draw(st.sampled_from(VALID))))
    for _ in range(draw(st.integers(1, 4))):
        action = draw(st.sampled_from(["replace", "drop", "add", "nest"]))
        keys = sorted(event)
        if action == "replace" and keys:
            event[draw(st.sampled_from(keys))] = draw(json_values)
        elif action == "drop" and keys:
            event.pop(draw(st.sampled_from(keys)))
        elif action == "add":
            event[draw(st.text(max_size=10))] = draw(json_values)
        elif action == "nest":
            for k in ("offsets", "assigned", "epochs"):
                if isinstance(event.get(k), list) and event[k] and isinstance(event[k][0], dict):
                    inner = event[k][0]
                    inner[draw(st.sampled_from(sorted(inner) or ["x"]))] = draw(json_values)
    return event


def ok(res) -> bool:
    if isinstance(res, DecodeError):
        return bool(res.code) and len(res.reason) < 5_000
    return isinstance(res, UnknownType) or hasattr(res, "ts")


@pytest.mark.slow
@FUZZ
@given(st.one_of(mutated_events().map(lambda e: json.dumps(e).encode()), st.binary(max_size=300),
                 json_values.map(lambda v: json.dumps(v).encode())))
def test_json_decoder_never_raises(data):
    COUNT["json"] += 1
    assert ok(decode_json_line(data, seq=1, default_event_id="e", coords="t[0]@1"))


@st.composite
def avro_records(draw):
    event = draw(st.sampled_from(VALID))
    body = bytearray(encode_avro(event))
    for _ in range(draw(st.integers(0, 4))):
        action = draw(st.sampled_from(["flip", "cut", "insert"]))
        if action == "flip" and body:
            i = draw(st.integers(0, len(body) - 1))
            body[i] = draw(st.integers(0, 255))
        elif action == "cut" and body:
            del body[draw(st.integers(0, len(body) - 1)):]
        elif action == "insert":
            i = draw(st.integers(0, len(body)))
            body[i:i] = draw(st.binary(min_size=1, max_size=20))
    return bytes(body)


@pytest.mark.slow
@FUZZ
@given(st.one_of(avro_records(), st.binary(max_size=300), st.binary(max_size=300).map(lambda b: b"\x00\x00\x00\x00\x01" + b)))
def test_avro_decoder_never_raises(data):
    COUNT["avro"] += 1
    assert ok(decode_avro_record(data, seq=1, default_event_id="e", coords="t[0]@1"))


SEED_RECORDS = [
    encode_record(3, {"groupId": "g"}, 0, {"epoch": 4}),
    encode_record(6, {"groupId": "g"}, 0, {"assignmentEpoch": 4}),
]


@st.composite
def consumer_offsets_records(draw):
    key, value = draw(st.sampled_from(SEED_RECORDS))
    value = bytearray(value or b"")
    which = draw(st.sampled_from(["value", "key", "random"]))
    if which == "random":
        return (struct.pack(">h", draw(st.integers(-2, 40))) + draw(st.binary(max_size=80)),
                draw(st.none() | st.binary(max_size=200).map(lambda b: struct.pack(">h", 0) + b)))
    target = bytearray(key) if which == "key" else value
    for _ in range(draw(st.integers(1, 4))):
        if target and draw(st.booleans()):
            target[draw(st.integers(0, len(target) - 1))] = draw(st.integers(0, 255))
        else:
            del target[draw(st.integers(0, len(target))):]
    return (bytes(target), bytes(value)) if which == "key" else (key, bytes(target))


@pytest.mark.slow
@FUZZ
@given(consumer_offsets_records())
def test_consumer_offsets_decoder_never_raises(record):
    from fencewatch.streaming.ingest.consumer_offsets.mapping import decode_record
    from fencewatch.streaming.ingest.consumer_offsets.records import RecordDecodeError

    COUNT["consumer_offsets"] += 1
    key, value = record
    try:
        events = decode_record(key, value, 1_735_689_600_000, "__consumer_offsets/0/1")
    except RecordDecodeError as exc:  # the job's dead letter (or a skipped unknown type)
        assert exc.code
        return
    for e in events:
        assert ok(decode_json_line(json.dumps(e).encode(), seq=1, default_event_id="e", coords="c"))


TOPIC_ID = rl.kafka_id(__import__("uuid").UUID(int=7))
SEED_LINES = [
    rl.offset_commit(9, "g", 5, "m", [("orders", [(0, 42, 3), (1, 7, 3)])], codes={("orders", 1): 113}),
    rl.offset_commit(10, "g", 5, "m", [(TOPIC_ID, [(0, 42, 3)])], instance="i-1"),
    rl.txn_offset_commit(4, "g", 5, "m", [("orders", [(2, 9, 1)])], codes={("orders", 2): 22}),
    rl.heartbeat(1, "g", "m", 4, response_epoch=5, assignment=[(TOPIC_ID, [0, 1])], owned=[(TOPIC_ID, [0])],
                 subscribed=["orders"]),
    rl.heartbeat(0, "g", "m", -1),
    rl.heartbeat(1, "g", "", 0, response_member="m2", error=25),
]


def _mutate_tree(draw, node):
    """Replace, drop or add one field somewhere in a request-log JSON body."""
    path = []
    while isinstance(node, (dict, list)) and node and draw(st.booleans()):
        key = draw(st.sampled_from(sorted(node))) if isinstance(node, dict) else draw(st.integers(0, len(node) - 1))
        path.append((node, key))
        node = node[key]
    if not path:
        return
    parent, key = path[-1]
    action = draw(st.sampled_from(["replace", "drop", "add"]))
    if action == "replace":
        parent[key] = draw(json_values)
    elif action == "drop":
        del parent[key]
    elif isinstance(parent, dict):
        parent[draw(st.text(max_size=10))] = draw(json_values)
    else:
        parent.insert(key, draw(json_values))


@st.composite
def request_log_lines(draw):
    """A line as Kafka writes it with its JSON mutated, its text cut or flipped, or random text."""
    obj = json.loads(json.dumps(draw(st.sampled_from(SEED_LINES))))
    which = draw(st.sampled_from(["tree", "text", "random"]))
    if which == "random":
        return draw(st.binary(max_size=300) | st.text(max_size=300).map(str.encode))
    if which == "tree":
        for _ in range(draw(st.integers(1, 4))):
            _mutate_tree(draw, obj)
        return rl.log_line(obj).encode()
    line = bytearray(rl.log_line(obj).encode())
    for _ in range(draw(st.integers(1, 4))):
        if line and draw(st.booleans()):
            line[draw(st.integers(0, len(line) - 1))] = draw(st.integers(0, 255))
        else:
            del line[draw(st.integers(0, len(line))):]
    return bytes(line)


@pytest.mark.slow
@FUZZ
@given(request_log_lines())
def test_request_log_decoder_never_raises(line):
    """As ``request_log_source.make_request_log_mapper`` runs it: a broken line is a dead letter with
    its code (``problems``), every event it gives decodes; no line reaches the bridge's INTERNAL."""
    from fencewatch.streaming.ingest.request_log import RequestLogBridge

    COUNT["request_log"] += 1
    bridge = RequestLogBridge({TOPIC_ID: "orders"}, carry=False)
    events = bridge.map_line(line, "fencewatch.request-log/0/1", ts=1_735_689_600_000)
    assert not bridge.counts["broken.INTERNAL"], bridge.problems
    if bridge.problems:
        _, code, _ = bridge.problems.pop()
        assert code and not events
        return
    for e in events:
        assert ok(decode_json_line(json.dumps(e).encode(), seq=1, default_event_id="e", coords="c"))


def test_fuzz_table_row():
    """Runs after the four fuzzers (file order): their count in docs/reliability.md."""
    from reliability_harness import record_row

    total = sum(COUNT.values())
    if total < 10_000:
        pytest.skip(f"the fuzzers ran {total} records (a partial run)")
    record_row("fuzz_decoders", load=", ".join(f"{n:,} {k}" for k, n in COUNT.items()) + " records (Hypothesis)",
               fault="malformed and mutated records", outcome="every record decoded or a dead letter; no exception, "
               "none over the 2 s deadline", verdicts="-", alerts="-", lost=0, duplicated=0, source="any")

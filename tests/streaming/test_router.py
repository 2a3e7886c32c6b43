"""The router (``mapInPandas`` function) and the default batch size, without Spark."""
import json

import msgspec
import pandas as pd

from fencewatch.streaming.runtime.inputs import default_max_offsets
from fencewatch.streaming.runtime.columns import DLQ_KEY, ROUTED
from fencewatch.streaming.runtime.routing import parse_key, topic_bucket, unpack_frame
from fencewatch.streaming.runtime.state_fn import make_router


def frame(lines):
    n = len(lines)
    return pd.DataFrame({"value": lines, "seq": range(n), "event_id": [f"e{i}" for i in range(n)],
                         "coords": [f"off[0]@{i}" for i in range(n)], "source": ["offsets"] * n,
                         "record_ts": [0] * n, "bad_reason": [None] * n})


def commit(ts, group, parts, topic="orders"):
    return json.dumps({"type": "offset_commit", "ts": ts, "group_id": group, "member_id": "m", "member_epoch": 3,
                       "offsets": [{"topic": topic, "partition": p, "offset": 10 * p, "leader_epoch": 1}
                                   for p in parts], "error_code": 0}).encode()


def test_one_row_per_key_with_its_records_in_input_order():
    lines = [commit(100, "g1", [0, 1]), commit(101, "g2", [2]), b"{broken", commit(102, "g1", [1], topic="pay"),
             json.dumps({"type": "heartbeat", "ts": 103, "group_id": "g1", "member_id": "m", "request_epoch": 3,
                         "response_epoch": 3}).encode()]
    (out,) = list(make_router()([frame(lines)]))
    assert list(out.columns) == ROUTED.fieldNames()
    rows = {k: r for k, r in zip(out["key"], out.itertuples())}
    orders_key, pay_key = topic_bucket("default", "orders"), topic_bucket("default", "pay")
    assert orders_key != pay_key and orders_key.startswith("t\x1fdefault\x1f#")
    assert set(rows) == {"g\x1fdefault\x1fg1", "g\x1fdefault\x1fg2", orders_key, pay_key, DLQ_KEY}
    # A group key gets its records themselves (decoded where they are judged), in input order.
    g1, counts = unpack_frame(rows["g\x1fdefault\x1fg1"].payload)
    assert g1 == [[0, 100, lines[0], "e0"], [3, 102, lines[3], "e3"], [4, 103, lines[4], "e4"]]
    assert counts == {"offset_commit": 2, "heartbeat": 1}
    assert rows["g\x1fdefault\x1fg1"].events == 3 and rows["g\x1fdefault\x1fg1"].ts == 103
    assert rows["g\x1fdefault\x1fg1"].source == "offsets"
    # A topic's bucket gets each stored commit's columns and the topic; they are not counted as events.
    orders, counts = unpack_frame(rows[orders_key].payload)
    assert orders == [[100, 0, "g1", [0, 1], [0, 10], [1, 1], "orders"], [101, 1, "g2", [2], [20], [1], "orders"]]
    assert counts == {}
    assert rows[orders_key].events == 0
    assert sum(out["events"]) == 4  # every good input event once
    # The bad line stays a row of its own, with its bytes, reason and coordinates.
    etype, seq, raw, reason, coords = msgspec.msgpack.decode(rows[DLQ_KEY].payload)
    assert (etype, seq, raw, coords) == ("dlq", 2, b"{broken", "off[0]@2") and reason.startswith("INVALID_JSON")
    assert parse_key("g\x1fdefault\x1fg1") == ("g", "default", "g1")


def test_default_batch_is_about_one_trigger_of_work():
    one = default_max_offsets(1_000, 2)
    assert default_max_offsets(2_000, 2) == 2 * one  # a longer trigger reads more per batch
    assert default_max_offsets(1_000, 4) == 2 * one  # so do more cores
    assert default_max_offsets(1, 1) >= 1_000  # never a trickle


def test_held_records_are_decoded_when_released():
    """A key holds its records undecoded (a backlog read unevenly keeps some across micro-batches:
    stored with the state each batch, a record costs a bytes copy, an event a Python object
    per field) and decodes them on release."""
    from fencewatch.streaming.ingest.events import decode_json_line
    from fencewatch.streaming.runtime.routing import decode_released, read_items

    lines = [commit(100, "g1", [0, 1]), commit(101, "g1", [1])]
    (out,) = list(make_router()([frame(lines)]))
    row = out[out["key"] == "g\x1fdefault\x1fg1"].iloc[0]
    counts = __import__("collections").Counter()
    held = read_items(("g", "default", "g1"), row.source, row.payload, counts, now=7)
    assert [(ts, seq, now) for ts, seq, _, now in held] == [(100, 0, 7), (101, 1, 7)]
    assert all(type(p) is tuple and len(p) == 2 and isinstance(p[0], bytes) for _, _, p, _ in held)
    assert counts == {("offset_commit", "offsets"): 2}
    dead: list = []
    released = decode_released(("g", "default", "g1"), held, dead)
    assert dead == []
    assert [ev for _, _, ev, _ in released] == [
        decode_json_line(line, seq=i, default_event_id=f"e{i}", coords="") for i, line in enumerate(lines)]

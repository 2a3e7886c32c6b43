"""The router (``mapInPandas`` function) and the default batch size, without Spark."""
import json

import msgspec
import pandas as pd

from fencewatch.streaming.job import default_max_offsets
from fencewatch.streaming.schemas import DLQ_KEY, ROUTED
from fencewatch.streaming.routing import parse_key
from fencewatch.streaming.state_fn import make_router


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
    assert set(rows) == {"g\x1fdefault\x1fg1", "g\x1fdefault\x1fg2", "t\x1fdefault\x1forders",
                         "t\x1fdefault\x1fpay", DLQ_KEY}
    # A group key gets its records themselves (decoded where they are judged), in input order.
    g1, counts = msgspec.msgpack.decode(rows["g\x1fdefault\x1fg1"].payload)
    assert g1 == [[0, lines[0], "e0"], [3, lines[3], "e3"], [4, lines[4], "e4"]]
    assert counts == {"offset_commit": 2, "heartbeat": 1}
    assert rows["g\x1fdefault\x1fg1"].events == 3 and rows["g\x1fdefault\x1fg1"].ts == 103
    assert rows["g\x1fdefault\x1fg1"].source == "offsets"
    # A topic key gets each stored commit's columns; they are not counted as events.
    orders, counts = msgspec.msgpack.decode(rows["t\x1fdefault\x1forders"].payload)
    assert orders == [[100, 0, "g1", [0, 1], [0, 10], [1, 1]], [101, 1, "g2", [2], [20], [1]]]
    assert counts == {}
    assert rows["t\x1fdefault\x1forders"].events == 0
    assert sum(out["events"]) == 4  # every good input event once
    # The bad line stays a row of its own, with its bytes, reason and coordinates.
    dead = rows[DLQ_KEY]
    assert dead.payload == b"{broken" and dead.reason.startswith("INVALID_JSON") and dead.coords == "off[0]@2"
    assert parse_key("g\x1fdefault\x1fg1") == ("g", "default", "g1")


def test_default_batch_is_about_one_trigger_of_work():
    one = default_max_offsets(1_000, 2)
    assert default_max_offsets(2_000, 2) == 2 * one  # a longer trigger reads more per batch
    assert default_max_offsets(1_000, 4) == 2 * one  # so do more cores
    assert default_max_offsets(1, 1) >= 1_000  # never a trickle

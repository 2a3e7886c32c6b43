"""The router (``mapInArrow`` function) and the default batch size, without Spark."""
import json

import msgspec
import pandas as pd
import pyarrow as pa
import pytest

from fencewatch.state.engine import group_key
from fencewatch.streaming.runtime.input_plan import default_max_offsets
from fencewatch.streaming.runtime.columns import DLQ_KEY, ROUTED
from fencewatch.streaming.runtime.hold import Held, Record, StoredCommit
from fencewatch.streaming.runtime.routing import make_router, parse_key, read_key_frame, topic_bucket, unpack_frame


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
    g1, commits, counts = read_key_frame(rows["g\x1fdefault\x1fg1"].payload)
    assert g1 == [Held(100, 0, Record(lines[0], "e0")), Held(102, 3, Record(lines[3], "e3")),
                  Held(103, 4, Record(lines[4], "e4"))]
    assert commits == [] and counts == {"offset_commit": 2, "heartbeat": 1}
    assert rows["g\x1fdefault\x1fg1"].events == 3 and rows["g\x1fdefault\x1fg1"].ts == 103
    assert rows["g\x1fdefault\x1fg1"].source == "offsets"
    # A topic's bucket gets each stored commit's columns and the topic; they are not counted as events.
    records, orders, counts = read_key_frame(rows[orders_key].payload)
    assert orders == [Held(100, 0, StoredCommit("orders", "g1", (0, 1), (0, 10), (1, 1))),
                      Held(101, 1, StoredCommit("orders", "g2", (2,), (20,), (1,)))]
    assert records == [] and counts == {}
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
    held = read_items(group_key("default", "g1"), row.source, row.payload, counts, now=7)
    assert [(h.ts, h.seq, h.arrived) for h in held] == [(100, 0, 7), (101, 1, 7)]
    assert [h.payload for h in held] == [Record(lines[0], "e0"), Record(lines[1], "e1")]
    assert counts == {("offset_commit", "offsets"): 2}
    dead: list = []
    released = decode_released(group_key("default", "g1"), held, dead)
    assert dead == []
    assert [h.payload for h in released] == [
        decode_json_line(line, seq=i, default_event_id=f"e{i}", coords="") for i, line in enumerate(lines)]


def _rows(out) -> list[tuple]:
    """Routed rows, their frames unpacked, in a comparable order."""
    table = out.to_pandas() if isinstance(out, pa.RecordBatch) else out
    return sorted((r.key, r.ts, r.source, r.events, r.caught_up,
                   repr(msgspec.msgpack.decode(r.payload) if r.key == DLQ_KEY else unpack_frame(r.payload)))
                  for r in table.itertuples())


def _mixed_lines() -> list[bytes]:
    return [commit(100, "g1", [0, 1]), json.dumps({"type": "heartbeat", "ts": 101, "group_id": "g1", "member_id": "m",
                                                   "request_epoch": 3, "response_epoch": 3}).encode(),
            b"{broken", commit(102, "g2", [2], topic="pay"), json.dumps({"type": "nope", "ts": 1}).encode(),
            commit(103, "g1", [1])]


def test_an_arrow_batch_routes_as_its_pandas_frame():
    """Spark hands the job's router Arrow batches (``mapInArrow``); tests and benches hand it pandas
    frames. Both give the same rows, each in the form it came in, nulls and all."""
    df = frame(_mixed_lines())
    df.loc[2, "record_ts"] = None  # a bad record without a timestamp: NaN in pandas, null in Arrow
    (arrow_out,) = list(make_router(group_buckets=3)([pa.RecordBatch.from_pandas(df, preserve_index=False)]))
    (pandas_out,) = list(make_router(group_buckets=3)([df]))
    assert isinstance(arrow_out, pa.RecordBatch) and isinstance(pandas_out, pd.DataFrame)
    assert arrow_out.schema.names == ROUTED.fieldNames()
    assert _rows(arrow_out) == _rows(pandas_out)
    assert any(r[0] == DLQ_KEY for r in _rows(arrow_out))


@pytest.mark.parametrize("caught_up", [True, False])
def test_spark_connectors_own_columns_route_as_the_records_they_name(caught_up, monkeypatch):
    """The connector's projection when the events source is the router's only input (``inputs.
    _event_inputs``): value, offset, partition and the topic's rank, no string per record. The
    router makes seq, event id, source and coordinates as the full projection gives them, so the
    routed rows are the same; the caught-up mark is the driver's (``routing.task_caught_up``)."""
    from fencewatch.streaming.runtime import routing

    monkeypatch.setattr(routing, "task_caught_up", lambda: caught_up)
    lines = _mixed_lines()
    topics = (("hb.t", "heartbeats", 0), ("off.t", "offsets", 1))
    ranks = [0 if b'"heartbeat"' in line else 1 for line in lines]
    offsets, partitions = [7 + i for i in range(len(lines))], [i % 3 for i in range(len(lines))]
    slim = pa.RecordBatch.from_pydict({"value": lines, "offset": offsets, "partition": partitions,
                                       "rank": ranks, "record_ts": [5_000 + i for i in range(len(lines))]})
    names = {rank: (topic, source) for topic, source, rank in topics}
    full = pd.DataFrame({
        "value": lines, "seq": [o * 4 + r for o, r in zip(offsets, ranks)],
        "event_id": [f"{names[r][0]}/{p}/{o}" for o, p, r in zip(offsets, partitions, ranks)],
        "coords": [f"{names[r][0]}[{p}]@{o}" for o, p, r in zip(offsets, partitions, ranks)],
        "source": [names[r][1] for r in ranks], "record_ts": [5_000 + i for i in range(len(lines))],
        "bad_reason": [None] * len(lines), "caught_up": [caught_up] * len(lines)})
    (out,) = list(make_router(group_buckets=4, kafka_topics=topics)([slim]))
    (expected,) = list(make_router(group_buckets=4)([full]))
    assert _rows(out) == _rows(expected)
    dead = [msgspec.msgpack.decode(r.payload) for r in out.to_pandas().itertuples() if r.key == DLQ_KEY]
    assert sorted((d[0], d[4]) for d in dead) == [("dlq", "off.t[2]@9"), ("unknown", "off.t[1]@11")]
    assert {r.caught_up for r in out.to_pandas().itertuples()} == {caught_up}


@pytest.mark.parametrize("marks, driver, want", [
    ([True, True], False, True),  # the source read every partition to its end: caught up
    ([True, False], True, False),  # any record's "not yet" holds the whole batch back
    ([True, None], True, True),  # unknown for some: the driver's mark decides (Spark's connector)
    ([True, None], False, False),
])
def test_the_caught_up_mark_of_a_batch(marks, driver, want, monkeypatch):
    from fencewatch.streaming.runtime import routing

    monkeypatch.setattr(routing, "task_caught_up", lambda: driver)
    df = frame([commit(100, "g1", [0]), commit(101, "g2", [1])]).assign(caught_up=marks)
    (out,) = list(make_router()([pa.RecordBatch.from_pandas(df, preserve_index=False)]))
    assert set(out.column("caught_up").to_pylist()) == {want}

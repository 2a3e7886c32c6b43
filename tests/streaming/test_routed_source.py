"""``fencewatch-routed`` (the router inside the Kafka source's ``read``) on a real broker and a
real local Spark: the same routed items, dead letters and caught-up marks as ``fencewatch-kafka``
followed by the ``mapInPandas`` router, which it replaces for ``--source events``."""
from __future__ import annotations

import json
import tempfile

import msgspec

import pytest
from confluent_kafka import Producer

from fencewatch.state.engine import KeyKind, group_key
from fencewatch.streaming.config import settings as cfgmod
from fencewatch.streaming.runtime.inputs import build_inputs
from fencewatch.streaming.runtime.routing import key_string, make_router, parse_key, read_bucket, read_key_frame
from fencewatch.streaming.runtime.columns import DLQ_KEY, ROUTED

pytestmark = [pytest.mark.spark, pytest.mark.broker]


def _events(n_groups=6, rounds=5):
    out = []
    for r in range(rounds):
        for g in range(n_groups):
            ts = 1_000 + r * 100 + g
            out.append(("hb", {"type": "heartbeat", "ts": ts, "group_id": f"g{g}", "member_id": f"m{g}",
                               "request_epoch": r, "response_epoch": r}))
            out.append(("off", {"type": "offset_commit", "ts": ts + 1, "group_id": f"g{g}", "member_id": f"m{g}",
                                "member_epoch": r, "error_code": 0,
                                "offsets": [{"topic": f"orders{g % 2}", "partition": p, "offset": 10 * r + p,
                                             "leader_epoch": 1} for p in range(3)]}))
    return out


def _collect(df):
    """Every routed row of a streaming DataFrame read to the end (AvailableNow)."""
    rows = []
    q = (df.writeStream.foreachBatch(lambda b, _: rows.extend(b.collect()))
         .option("checkpointLocation", tempfile.mkdtemp()).trigger(availableNow=True).start())
    q.awaitTermination(120)
    assert q.exception() is None
    return rows


def _items(rows):
    """key -> its items (seq, source, the Held entry's bytes) in seq order, a group bucket's groups
    each under its own group key; dead letters; caught-up marks."""
    by_key, dead, marks = {}, [], set()
    for r in rows:
        if r["key"] == DLQ_KEY:
            dead.append(tuple(msgspec.msgpack.decode(r["payload"])))  # (etype, seq, record, reason, coordinates)
            continue
        kind, cluster, _ = parse_key(r["key"])
        if kind is KeyKind.GROUP_BUCKET:
            frames = [(key_string(group_key(cluster, g)), records) for g, (records, _, _) in read_bucket(r["payload"])]
        else:
            records, commits, _ = read_key_frame(r["payload"])
            frames = [(r["key"], records + commits)]
        for key, items in frames:
            by_key.setdefault(key, []).extend((h.seq, r["source"], msgspec.msgpack.encode(h)) for h in items)
        marks.add(r["caught_up"])
    return {k: sorted(v) for k, v in by_key.items()}, sorted(dead), marks


def test_routed_source_gives_the_routers_items(spark, broker, topic_factory):
    hb, off = topic_factory(partitions=2, prefix="hb"), topic_factory(partitions=2, prefix="off")
    p = Producer({"bootstrap.servers": broker, "batch.num.messages": 1})
    for where, e in _events():
        p.produce(hb if where == "hb" else off, key=e["group_id"].encode(), value=json.dumps(e).encode())
    p.produce(off, key=b"g0", value=b'{"type": "offset_commit", "ts": ')  # a dead letter
    p.produce(off, key=b"g1", value=json.dumps({"type": "from_the_future", "ts": 5}).encode())  # unknown type
    p.flush(30)
    cfg = cfgmod.load_config(environ={}, overrides={"streaming": {
        "bootstrap_servers": broker, "starting_offsets": "earliest", "heartbeats_topic": hb, "offsets_topic": off}})

    routed = build_inputs(spark, cfg)  # our source: routes inside read()
    assert routed.schema == ROUTED

    from fencewatch.streaming.runtime.input_plan import InputPlan
    from fencewatch.streaming.runtime.inputs import _event_inputs
    options = {"startingOffsets": "earliest", "maxOffsetsPerTrigger": "100000"}
    legacy = _event_inputs(spark, cfg, InputPlan.build(spark, cfg), options).mapInPandas(
        make_router("json", group_buckets=cfg.streaming.group_buckets), ROUTED)

    routed_rows = _collect(routed)
    assert {parse_key(r["key"])[0] for r in routed_rows if r["key"] != DLQ_KEY} == {"G", "t"}  # groups in buckets
    new_items, new_dead, new_marks = _items(routed_rows)
    old_items, old_dead, old_marks = _items(_collect(legacy))
    assert new_items == old_items
    assert new_dead == old_dead
    assert new_marks == old_marks == {False}  # AvailableNow batches are not marked caught up
    assert {d[0] for d in new_dead} == {"dlq", "unknown"}
    # spark.read (a one-shot range) routes the same records the same way
    from fencewatch.streaming.runtime.routed_source import NAME, ROUTER_OPTION, RouterSpec
    batch = (spark.read.format(NAME).option("kafka.bootstrap.servers", broker).option("subscribe", f"{hb},{off}")
             .option(ROUTER_OPTION, RouterSpec(((hb, "heartbeats", 0), (off, "offsets", 1))).to_option())
             .option("startingOffsets", "earliest").option("endingOffsets", "latest").load())
    batch_items, batch_dead, _ = _items(batch.collect())
    assert (batch_items, batch_dead) == (new_items, new_dead)
    # group and topic keys both there, with every event once
    assert sum(1 for k in new_items if k.startswith("g")) == 6
    assert sum(len(v) for k, v in new_items.items() if k.startswith("g")) == 60

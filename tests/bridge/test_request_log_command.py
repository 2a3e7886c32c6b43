"""``fencewatch bridge --from-request-log`` offline, and the live request-log bridge on the
embedded broker (Tansu): lines in a topic -> SPEC events on the heartbeats / offsets topics."""

from __future__ import annotations

import argparse
import json
import uuid

import pytest

from fencewatch.streaming.commands.bridge import register
from request_log_lines import envelope, heartbeat, kafka_id, log_line, offset_commit

ORDERS = kafka_id(uuid.UUID(int=0xA1))


def parse(argv):
    parser = argparse.ArgumentParser(prog="fencewatch")
    register(parser.add_subparsers(dest="command"))
    return parser.parse_args(argv)


def lines() -> list[bytes]:
    return [
        log_line(heartbeat(1, "g", "m-1", 0, response_epoch=3, assignment=[(ORDERS, [0, 1])], owned=[],
                           subscribed=["orders"])).encode(),
        b"[2026-11-20 09:00:01,000] INFO [GroupCoordinator 1]: something (kafka.coordinator.group.GroupCoordinator)",
        log_line(envelope(1, 17, {"topics": []}, {"responses": []}), stamp="2026-11-20 09:00:01,500").encode(),
        b"[2026-11-20 09:00:02,000] DEBUG Completed request:{\"requestHeader\": (kafka.request.logger)",
        b"\xff\xfe not utf-8",
        log_line(offset_commit(10, "g", 2, "m-1", [(ORDERS, [(0, 40, 1)])], codes={(ORDERS, 0): 113}),
                 stamp="2026-11-20 09:00:03,000").encode(),
    ]


def test_from_request_log_file(tmp_path, capsys):
    path = tmp_path / "kafka-request.log"
    path.write_bytes(b"\n".join(lines()) + b"\n")
    ids = tmp_path / "ids.json"
    ids.write_text(json.dumps({str(uuid.UUID(int=0xA1)): "orders"}))
    out = tmp_path / "events.jsonl"
    args = parse(["bridge", "--from-request-log", str(path), "--topic-ids", str(ids), "--out", str(out),
                  "--log-timezone", "Europe/Paris", "--cluster", "east"])
    assert args.func(args) == 0
    events = [json.loads(x) for x in out.read_text().splitlines()]
    assert [(e["type"], e["event_id"]) for e in events] == [("heartbeat", "0"), ("member_assignment", "0"),
                                                            ("offset_commit", "5")]
    assert events[1]["assigned"] == [{"topic": "orders", "partitions": [0, 1]}]
    assert events[2]["offsets"][0]["topic"] == "orders" and events[2]["error_code"] == 113
    assert events[2]["ts"] == 1795165203000 - 3_600_000 and events[0]["cluster"] == "east"
    err = capsys.readouterr().err
    assert "line 3: BAD_JSON" in err and "line 4: BAD_ENCODING" in err
    assert "6 lines, 3 events" in err and "'skipped.OTHER_API': 1" in err and "'skipped.OTHER_LOGGER': 1" in err


def test_from_request_log_stdin(monkeypatch, capsys):
    import io
    import sys

    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"\n".join(lines()))))
    args = parse(["bridge", "--from-request-log", "-"])
    assert args.func(args) == 0
    events = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert events[2]["offsets"][0]["topic"] == str(uuid.UUID(int=0xA1))  # unresolved: the UUID string


def test_bad_timezone_is_a_clear_error(tmp_path, capsys):
    args = parse(["bridge", "--from-request-log", str(tmp_path / "x"), "--log-timezone", "Mars/Olympus"])
    assert args.func(args) == 2
    assert "Mars/Olympus" in capsys.readouterr().err


def read_events(bootstrap: str, topic: str, expected: int, deadline_s: float = 60.0) -> list[tuple[str, dict]]:
    import time

    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"read-{topic}", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    out: list[tuple[str, dict]] = []
    end = time.monotonic() + deadline_s
    try:
        while len(out) < expected and time.monotonic() < end:
            msg = consumer.poll(0.5)
            if msg is not None and not msg.error():
                out.append((msg.key().decode(), json.loads(msg.value())))
    finally:
        consumer.close()
    return out


@pytest.mark.broker
@pytest.mark.slow
def test_live_request_log_bridge(broker, topic_factory):
    """Lines as a shipper writes them (one per record, some message-only) -> events, keyed by group."""
    from confluent_kafka import Producer

    source, heartbeats, offsets = topic_factory(1, "reqlog"), topic_factory(1, "hb"), topic_factory(1, "off")
    data = topic_factory(1, "orders")
    from confluent_kafka import TopicCollection
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": broker})
    tid = admin.describe_topics(TopicCollection([data]))[data].result(timeout=30).topic_id
    data_id = kafka_id(uuid.UUID(int=((tid.get_most_significant_bits() % (1 << 64)) << 64)
                                 | (tid.get_least_significant_bits() % (1 << 64))))
    records = [
        log_line(heartbeat(1, "g", "m-1", 0, response_epoch=3, assignment=[(data_id, [0])], owned=[])).encode(),
        b"not a request-log line",
        # message-only (a shipper that kept only %m): the record's timestamp is the event's ts
        ("Completed request:" + json.dumps(offset_commit(10, "g", 2, "m-1", [(data_id, [(0, 40, 1)])],
                                                          codes={(data_id, 0): 113}))).encode(),
    ]
    p = Producer({"bootstrap.servers": broker})
    for value in records[:-1]:
        p.produce(source, value=value, partition=0, timestamp=1_700_000_000_000)
    p.flush(30)
    p.produce(source, value=records[-1], partition=0, timestamp=1_700_000_000_777)  # Tansu: a last lone batch
    assert p.flush(30) == 0

    args = parse(["bridge", "--bootstrap-servers", broker, "--request-log-topic", source,
                  "--heartbeats-topic", heartbeats, "--offsets-topic", offsets, "--stop-at-end", "--metrics-port", "0",
                  "-X", f"group.id=bridge-{source}"])
    assert args.func(args) == 0
    hb = read_events(broker, heartbeats, 2)
    off = read_events(broker, offsets, 1)
    assert [(k, e["type"]) for k, e in hb] == [("g", "heartbeat"), ("g", "member_assignment")]
    assert hb[1][1]["assigned"] == [{"topic": data, "partitions": [0]}]  # id resolved through metadata
    (key, commit), = off
    assert (key, commit["type"], commit["error_code"], commit["ts"]) == ("g", "offset_commit", 113, 1_700_000_000_777)
    assert commit["offsets"][0]["topic"] == data and commit["event_id"] == f"{source}/0/2"

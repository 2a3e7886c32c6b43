"""``fencewatch bridge --from-file``: JSON lines of raw records -> SPEC events, through
``register(subparsers)`` and argparse as the CLI will call it."""

from __future__ import annotations

import argparse
import base64
import io
import json
import struct
import uuid

import pytest

from bridge_encoder import encode_record
from fencewatch.streaming.commands.bridge import parse_client_config, register, run_from_file
from fencewatch.streaming.ingest.consumer_offsets.records import uuid_to_kafka_string

ORDERS = uuid.UUID(int=0xA1).bytes


def line(key, value, ts):
    return json.dumps({"key": base64.b64encode(key).decode(),
                       "value": base64.b64encode(value).decode() if value is not None else None,
                       "timestamp": ts})


def records_file(tmp_path):
    commit = encode_record(1, {"group": "g", "topic": "orders", "partition": 2}, 3,
                           {"offset": 10, "leaderEpoch": 1, "metadata": "", "commitTimestamp": 90})
    assignment = encode_record(8, {"groupId": "g", "memberId": "m"}, 0, {
        "memberEpoch": 3, "previousMemberEpoch": 2, "state": 0,
        "assignedPartitions": [{"topicId": ORDERS, "partitions": [2], "assignmentEpochs": [3]}],
        "partitionsPendingRevocation": []})
    lines = [
        line(*commit, 100),
        "this is not json",
        line(struct.pack(">h", 14) + b"\x00\x01g\x00\x01m", b"\x00\x00", 101),  # share group record: skipped
        line(commit[0][:5], commit[1], 102),  # truncated key
        "",
        json.dumps({"key": "!!!", "value": None, "timestamp": 1}),
        line(*assignment, 103),
        line(commit[0], None, 104),
    ]
    path = tmp_path / "records.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


def parse(argv):
    parser = argparse.ArgumentParser(prog="fencewatch")
    register(parser.add_subparsers(dest="command"))
    return parser.parse_args(argv)


def test_from_file_events_errors_and_line_numbers(tmp_path, capsys):
    path = records_file(tmp_path)
    ids = tmp_path / "ids.json"
    ids.write_text(json.dumps({uuid_to_kafka_string(ORDERS): "orders"}))
    out = tmp_path / "events.jsonl"
    args = parse(["bridge", "--from-file", str(path), "--out", str(out), "--topic-ids", str(ids)])
    assert args.func(args) == 0
    events = [json.loads(x) for x in out.read_text().splitlines()]
    assert [(e["type"], e["event_id"]) for e in events] == [
        ("offset_committed", "0"), ("member_assignment", "6"), ("group_state", "6"), ("offset_deleted", "7")]
    assert events[0]["ts"] == 100 and events[0]["offset"] == 10
    assert events[1]["assigned"] == [{"topic": "orders", "partitions": [2], "assignment_epochs": [3]}]
    err = capsys.readouterr().err
    assert "line 1: BAD_LINE" in err
    assert "line 2: UNKNOWN_RECORD_TYPE: ShareGroupCurrentMemberAssignment (type 14) is not decoded" in err
    assert "line 3: MALFORMED_KEY" in err
    assert "line 4: empty line" in err
    assert "line 5: BAD_LINE: bad base64" in err
    assert "8 records" not in err and "bridge: 5 records, 4 events, 5 skipped" in err


def test_from_file_to_stdout_without_topic_ids_writes_uuid(tmp_path, capsys):
    path = records_file(tmp_path)
    args = parse(["bridge", "--from-file", str(path), "--cluster", "east"])
    assert args.func(args) == 0
    events = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert events[1]["assigned"][0]["topic"] == str(uuid.UUID(bytes=ORDERS))
    assert all(e["cluster"] == "east" for e in events)


def test_dump_records_prints_kafka_json(tmp_path, capsys):
    path = records_file(tmp_path)
    args = parse(["bridge", "--from-file", str(path), "--dump-records"])
    assert args.func(args) == 0
    first = json.loads(capsys.readouterr().out.splitlines()[0])
    assert first == {"key": {"type": 1, "data": {"group": "g", "topic": "orders", "partition": 2}},
                     "value": {"version": 3, "data": {"offset": 10, "leaderEpoch": 1, "metadata": "",
                                                      "commitTimestamp": 90}}}


def test_bad_topic_ids_file_and_missing_source_are_clear_errors(tmp_path, capsys):
    ids = tmp_path / "ids.json"
    ids.write_text(json.dumps({"not-a-uuid": "x"}))
    args = parse(["bridge", "--from-file", str(tmp_path / "none.jsonl"), "--topic-ids", str(ids)])
    assert args.func(args) == 2
    assert "--topic-ids" in capsys.readouterr().err
    args = parse(["bridge", "--from-file", str(tmp_path / "none.jsonl")])
    assert args.func(args) == 2
    args = parse(["bridge"])
    assert args.func(args) == 2
    assert "--bootstrap-servers" in capsys.readouterr().err
    args = parse(["bridge", "--cluster", " ", "--bootstrap-servers", "127.0.0.1:1"])
    assert args.func(args) == 2
    assert capsys.readouterr().err.splitlines() == [
        'fencewatch bridge: --cluster must not be empty (it is a label value); leave it out for "default"']


def test_run_from_file_is_callable_on_streams():
    commit = encode_record(1, {"group": "g", "topic": "t", "partition": 0}, 4,
                           {"offset": 1, "leaderEpoch": 0, "metadata": "", "commitTimestamp": 5})
    out, err = io.StringIO(), io.StringIO()
    assert run_from_file(io.StringIO(line(*commit, 7) + "\n"), out, err) == 0
    assert json.loads(out.getvalue())["event_id"] == "0"


def test_client_config_pairs_and_properties_file(tmp_path):
    props = tmp_path / "client.properties"
    props.write_text("# comment\nsecurity.protocol=SASL_SSL\nsasl.mechanism: PLAIN\n\n")
    conf = parse_client_config(["sasl.username=u", "sasl.password=p=w"], str(props))
    assert conf == {"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN", "sasl.username": "u",
                    "sasl.password": "p=w"}
    with pytest.raises(ValueError, match="expected key=value"):
        parse_client_config(["novalue"], None)

"""Every field has a bound: a record over one is a dead letter naming the field, on both decoders
and both paths (the fast typed path and the checked one); records under them decode as before."""
from __future__ import annotations

import json

import pytest

from fencewatch.streaming.ingest import events as d
from fencewatch.streaming.ingest.events import DecodeError, decode_avro_record, decode_json_line, decode_json_lines
from fencewatch.state.avro_codec import encode_avro


def poison(size: int = 900_000) -> dict:
    """The input that once stopped the job (issue 15): a valid assignment, its member id 900 KB."""
    return {"type": "member_assignment", "ts": 1_735_689_600_000, "group_id": "group-00001", "event_id": "poison",
            "member_id": "m" * size, "protocol": "consumer", "member_epoch": 1000, "state": "STABLE",
            "assigned": [{"topic": "topic-0", "partitions": [0]}], "pending_revocation": []}


def decode(line, fmt="json"):
    if fmt == "avro":
        return decode_avro_record(encode_avro(json.loads(line)), seq=1, default_event_id="x", coords="t[0]@1")
    return decode_json_line(line, seq=1, default_event_id="x", coords="t[0]@1")


@pytest.mark.parametrize("fmt", ["json", "avro"])
def test_the_900kb_member_id_is_a_dead_letter_naming_the_field(fmt):
    res = decode(json.dumps(poison()), fmt)
    assert isinstance(res, DecodeError)
    assert res.code == "FIELD_TOO_LONG" and res.params["field"] == "member_id"
    assert res.params["length"] == "900000" and len(res.reason) < 300


@pytest.mark.parametrize("fmt", ["json", "avro"])
def test_at_the_bound_the_event_is_judged(fmt):
    res = decode(json.dumps(poison(d.MAX_STRING_CHARS)), fmt)
    assert not isinstance(res, DecodeError) and len(res.member_id) == d.MAX_STRING_CHARS
    over = decode(json.dumps(poison(d.MAX_STRING_CHARS + 1)), fmt)
    assert isinstance(over, DecodeError) and over.code == "FIELD_TOO_LONG"


@pytest.mark.parametrize("field,value", [
    ("group_id", "g" * 40_000), ("event_id", "e" * 40_000), ("cluster", "c" * 40_000),
    ("subscribed_topics", ["t" * 40_000]), ("assigned", [{"topic": "t" * 40_000, "partitions": [0]}]),
])
def test_every_string_of_an_assignment_is_bounded(field, value):
    res = decode(json.dumps({**poison(10), field: value}))
    assert isinstance(res, DecodeError) and res.code == "FIELD_TOO_LONG" and res.params["field"] == field


def test_commit_metadata_topic_and_partition_lists_are_bounded():
    commit = {"type": "offset_commit", "ts": 1, "group_id": "g", "member_id": "m", "member_epoch": 1,
              "offsets": [{"topic": "t", "partition": 0, "offset": 1, "leader_epoch": 0, "metadata": "z" * 40_000}]}
    res = decode(json.dumps(commit))
    assert isinstance(res, DecodeError) and res.code == "FIELD_TOO_LONG" and res.params["field"] == "offsets"
    many = {**commit, "offsets": [{"topic": "t", "partition": i, "offset": 1, "leader_epoch": 0}
                                  for i in range(3_000)]}
    assert not isinstance(decode(json.dumps(many)), DecodeError)  # 3,000 partitions: a big, real commit
    sync = {"type": "classic_sync", "ts": 1, "group_id": "g", "generation": 1,
            "assignments": {"m": [{"topic": "t", "partitions": [0] * (d.MAX_PARTITIONS + 1)}]}}
    res = decode(json.dumps(sync))
    assert isinstance(res, DecodeError) and res.code == "TOO_MANY_ENTRIES"


def test_a_record_over_the_record_bound_is_a_dead_letter_without_parsing():
    line = json.dumps({**poison(10), "padding": "p" * (d.MAX_RECORD_BYTES + 1)})
    res = decode(line)
    assert isinstance(res, DecodeError) and res.code == "RECORD_TOO_LARGE"
    res = decode_avro_record(b"\x00" * (d.MAX_RECORD_BYTES + 1), seq=1, default_event_id="x", coords="c")
    assert isinstance(res, DecodeError) and res.code == "RECORD_TOO_LARGE"


def test_replay_files_apply_the_same_bounds():
    good = json.dumps({**poison(10), "event_id": "ok"})
    errors, unknown = [], {}
    events = decode_json_lines([good, json.dumps(poison()), good], errors, unknown)
    assert [e.event_id for e in events] == ["ok", "ok"]
    assert [e.code for e in errors] == ["FIELD_TOO_LONG"] and errors[0].coords == "line 2"


def test_a_reason_quoting_the_input_is_bounded():
    res = decode('{"type": "offset_commit", "ts": "' + "x" * 50_000 + '"}')
    assert isinstance(res, DecodeError) and len(res.reason) < 1_000

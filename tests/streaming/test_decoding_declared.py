"""The decoders follow the declaration of the input events (``state.records``): what each type
requires, what an absent field stands for, the closed sets, the fast paths' structs, the
request-log bridge's output structs. Each check is seen failing, naming the field, on a
changed copy of the declaration (in a child interpreter where it is checked at import)."""
from __future__ import annotations

import dataclasses
import json
import subprocess
import sys

import msgspec
import pytest

from fencewatch.state.records import EVENTS, HEADER, EventType, RecordDrift
from fencewatch.streaming.ingest import builders, fast_paths
from fencewatch.streaming.ingest.events import DecodeError, decode_json_line, event_from_dict

# One valid event per type with every required field (and only those): what each test varies.
MINIMAL = {
    EventType.MEMBER_ASSIGNMENT: {"member_id": "m", "member_epoch": 3, "assigned": []},
    EventType.MEMBER_LEFT: {"member_id": "m"},
    EventType.HEARTBEAT: {"member_id": "m"},
    EventType.CLASSIC_JOIN: {"member_id": "m"},
    EventType.CLASSIC_GENERATION: {"member_id": "m", "generation": 2},
    EventType.CLASSIC_SYNC: {"generation": 2, "assignments": {}},
    EventType.GROUP_STATE: {"state": "Stable"},
    EventType.STREAMS_TOPOLOGY: {"topology_epoch": 0, "subtopologies": []},
    EventType.OFFSET_COMMIT: {"offsets": []},
    EventType.TXN_OFFSET_COMMIT: {"offsets": []},
    EventType.OFFSET_COMMITTED: {"topic": "t", "partition": 0, "offset": 5},
    EventType.OFFSET_DELETED: {"topic": "t", "partition": 0},
    EventType.PARTITION_EPOCHS: {"topic": "t", "partition": 0, "log_end_offset": 9},
}


def minimal(etype: EventType) -> dict:
    group = {"group_id": "g"} if etype is not EventType.PARTITION_EPOCHS else {}
    return {"type": etype.value, "ts": 1, **group, **MINIMAL[etype]}


def decode(d: dict):
    return event_from_dict(d, seq=0, default_event_id="0", coords="line 1")


def test_minimal_events_carry_every_required_field_and_decode():
    for etype, record in EVENTS.items():
        d = minimal(etype)
        assert sorted(d) == sorted(s.name for s in record.slots if s.required), etype
        assert not isinstance(decode(d), DecodeError), etype


@pytest.mark.parametrize("etype", list(EventType), ids=str)
def test_each_required_field_missing_is_named(etype):
    for slot in EVENTS[etype].slots:
        if slot.required and slot.name != "type":
            d = minimal(etype)
            del d[slot.name]
            res = decode(d)
            assert isinstance(res, DecodeError) and (res.code, res.params["field"]) == ("MISSING_FIELD", slot.name)


_AS_TYPED = {"protocol": lambda v: v.value if hasattr(v, "value") else v,  # Protocol on member_assignment
             "state": lambda v: v.value if hasattr(v, "value") else v,  # MemberState likewise
             "owned": lambda v: list(v), "epochs": lambda v: list(v), "pending_revocation": lambda v: list(v)}


@pytest.mark.parametrize("etype", list(EventType), ids=str)
def test_an_absent_optional_field_decodes_to_its_declared_default(etype):
    ev = decode(minimal(etype))
    for slot in EVENTS[etype].slots:
        if not slot.required and slot.read and slot.name not in HEADER:
            got = getattr(ev, slot.name)
            assert _AS_TYPED.get(slot.name, lambda v: v)(got) == slot.default, (etype, slot.name, got)


def test_a_closed_set_is_enforced_and_listed():
    res = decode({**minimal(EventType.MEMBER_LEFT), "reason": "kicked"})
    reasons = EVENTS[EventType.MEMBER_LEFT].slot("reason").values
    assert res.code == "INVALID_VALUE" and res.params == {"type": "member_left", "field": "reason",
                                                          "value": "kicked", "valid": ",".join(reasons)}


def test_fast_path_structs_are_the_declared_fields_with_their_defaults():
    for struct, etype in ((fast_paths.CommitLine, EventType.OFFSET_COMMIT),
                          (fast_paths.TxnCommitLine, EventType.TXN_OFFSET_COMMIT),
                          (fast_paths.AssignmentLine, EventType.MEMBER_ASSIGNMENT)):
        record = EVENTS[etype]
        assert set(struct.__struct_fields__) == set(record.read_names) - {"type"}
        assert struct.__struct_config__.tag == etype.value
        fields = {f.name: f for f in msgspec.structs.fields(struct)}
        for slot in record.slots:
            if slot.read and slot.name != "type":
                f = fields[slot.name]
                if f.required:
                    assert slot.required, slot.name
                else:
                    default = f.default_factory() if f.default is msgspec.NODEFAULT else f.default
                    assert not slot.required and default == slot.default, slot.name


def test_the_typed_path_takes_a_declared_default_change():
    """The structs are made from the declaration: a changed default is what the typed path reads."""
    commit = EVENTS[EventType.OFFSET_COMMIT]
    changed = dataclasses.replace(commit, slots=tuple(
        dataclasses.replace(s, default="admin") if s.name == "member_id" else s for s in commit.slots))
    line = fast_paths._struct("Line", changed, tuple(n for n in changed.read_names if n != "type"))
    got = msgspec.json.decode(b'{"ts":1,"group_id":"g","offsets":[]}', type=line)
    assert got.member_id == "admin"


def test_a_builder_whose_fields_drift_is_refused_at_registration():
    before = dict(builders.BUILDERS)

    def heartbeat(ts, cluster, eid, seq, group_id, member_id, request_epok, response_epoch, error_code):
        raise AssertionError("never registered")

    with pytest.raises(RecordDrift, match="field 'request_epok' is not a declared field of heartbeat.*"
                                          "declared field 'request_epoch' of heartbeat is missing"):
        builders.builds(EventType.HEARTBEAT)(heartbeat)
    assert builders.BUILDERS == before


def test_a_declared_field_with_no_reader_is_named():
    slot = dataclasses.replace(EVENTS[EventType.CLASSIC_SYNC].slot("assignments"), required=False, default={})
    with pytest.raises(RecordDrift, match="no reader for field 'assignments'"):
        builders.reader_for(slot)


# Changes to the declaration made before anything imports it, and the check that must name them.
DRIFTS = [
    pytest.param("TOPIC_PARTITIONS", "topic", "assignment_epochs", "assigned_epochs",
                 "fencewatch.streaming.ingest.fields.topic_partitions", id="topic partitions row"),
    pytest.param("EVENTS", "member_left", "instance_id", "static_instance_id",
                 "fencewatch.streaming.ingest.request_log.output.MemberLeft", id="request-log output struct"),
    pytest.param("EVENTS", "offset_committed", "commit_ts", "committed_ts",
                 "fencewatch.state.events.OffsetCommitted", id="typed event"),
    pytest.param("PARTITION_OFFSET", "topic", "leader_epoch", "epoch",
                 "fencewatch.state.events.CommitOffset", id="commit offset row"),
]


@pytest.mark.parametrize("table, record, old, new, where", DRIFTS)
def test_a_renamed_declared_field_fails_at_import_naming_it(table, record, old, new, where):
    code = f"""
import dataclasses
from fencewatch.state import records
def renamed(r):
    return dataclasses.replace(r, slots=tuple(
        dataclasses.replace(s, field=dataclasses.replace(s.field, name={new!r})) if s.name == {old!r} else s
        for s in r.slots))
if {table!r} == "EVENTS":
    records.EVENTS[records.EventType({record!r})] = renamed(records.EVENTS[records.EventType({record!r})])
else:
    setattr(records, {table!r}, renamed(getattr(records, {table!r})))
try:
    import fencewatch.streaming.ingest.events, fencewatch.streaming.ingest.request_log
except records.RecordDrift as exc:
    print(exc)
"""
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert res.stdout.startswith(where + ":"), res.stdout
    assert repr(new) in res.stdout or repr(old) in res.stdout, res.stdout


def test_unchanged_declaration_imports_cleanly():
    res = subprocess.run([sys.executable, "-c", "import fencewatch.streaming.ingest.events, "
                          "fencewatch.streaming.ingest.request_log, fencewatch.sim.emit, fencewatch.sinks.jsonl"],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr


def test_json_decoding_of_a_declared_event_round_trips_its_fields():
    line = json.dumps({**minimal(EventType.HEARTBEAT), "request_epoch": 4, "response_epoch": 5, "error_code": 110})
    ev = decode_json_line(line, seq=3, default_event_id="3", coords="line 4")
    assert (ev.request_epoch, ev.response_epoch, ev.error_code, ev.event_id) == (4, 5, 110, "3")


@pytest.mark.parametrize("etype", [EventType.OFFSET_COMMIT, EventType.TXN_OFFSET_COMMIT])
def test_api_version_reaches_the_typed_commit_on_every_path(etype):
    """Contract §10.1 h: a commit's ``api_version`` is ``state.events.OffsetCommit.api_version``
    whichever path decodes it (the typed msgspec path, the parsed-dict fast path, the general
    one); absent, None; of the wrong type, a dead letter naming it. JSON only: Avro schema id 1
    has no such field, so an Avro record gives None."""
    from fencewatch.state.avro_codec import encode_avro
    from fencewatch.streaming.ingest.avro import decode_avro_record

    row = {"topic": "t", "partition": 0, "offset": 5, "leader_epoch": 1}
    d = {**minimal(etype), "member_id": "m", "member_epoch": 4, "offsets": [row], "api_version": 6}
    transactional = etype is EventType.TXN_OFFSET_COMMIT
    typed = fast_paths.typed_event(json.dumps(d).encode(), 0, "0")
    fast = fast_paths.fast_commit(d, 0, "0", transactional)
    general = builders.build_event({**d, "offsets": [{**row, "metadata": "m"}]}, d["type"], 0, "0")
    assert typed.api_version == fast.api_version == general.api_version == 6
    assert typed == fast == general._replace(offsets=typed.offsets)
    assert decode({k: v for k, v in d.items() if k != "api_version"}).api_version is None
    bad = decode({**d, "api_version": "6"})
    assert isinstance(bad, DecodeError) and (bad.code, bad.params["field"]) == ("WRONG_TYPE", "api_version")
    avro = decode_avro_record(encode_avro(d), seq=0, default_event_id="0", coords="record 0")
    assert avro.api_version is None and avro.member_epoch == 4

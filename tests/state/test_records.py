"""One declaration per record (issue 37): the input events (``state.records``), verdicts and
alerts (``state.model``). Everything mirroring them derives from them or is checked at import;
these tests change a declaration (a monkeypatched copy) and see each check name the field."""
from __future__ import annotations

import dataclasses

import fastavro
import pytest
from fastavro.schema import fingerprint, to_parsing_canonical_form

from fencewatch.state import events as typed
from fencewatch.state import records
from fencewatch.state.model import POLICY_ANSWER_FIELD, Alert, PartitionJudgement, Policy, verdict_part
from fencewatch.state.records import (EVENTS, FIELDS, EventType, InputTopic, RecordDrift, alert_avro_schema,
                                      check_event, check_names, event_avro_schema)

# SHA-256 of the Parsing Canonical Form (names, types, field order) of schema id 1 as released.
RELEASED_SCHEMA_FINGERPRINT = "c9b9b27ab671ee2b7b5d02bd9256fe392e3b129f004f7ae36cdb75b134f5ab12"


def _without(record: records.Record, name: str) -> records.Record:
    return dataclasses.replace(record, slots=tuple(s for s in record.slots if s.name != name))


# --------------------------------------------------------------------------- the declaration itself

def test_every_event_type_is_declared_once_on_one_topic():
    assert set(EVENTS) == set(EventType)
    assert {t for ts in records.EVENT_TYPES_ON.values() for t in ts} == set(EventType)
    assert records.EVENT_TYPES_ON[InputTopic.HEARTBEATS].isdisjoint(records.EVENT_TYPES_ON[InputTopic.OFFSETS])
    for etype, record in EVENTS.items():
        assert record.name == etype.value
        assert len(set(record.names)) == len(record.names), etype
        assert all(n in FIELDS for n in record.names), etype


def test_a_field_name_has_one_type_wherever_it_appears():
    """Nested records reuse the top-level field of the same name, or declare one of the same type."""
    for nested in (records.TOPIC_PARTITIONS, records.PARTITION_OFFSET):
        for slot in nested.slots:
            if slot.name in FIELDS:
                assert slot.field.type == FIELDS[slot.name].type, (nested.name, slot.name)


def test_the_avro_schema_is_the_one_readers_of_schema_id_1_decode_with():
    """Bodies are decoded with the schema as it is, by position: its fields, their types and order
    are those of the released schema id 1 (docs may say more), every optional one null by default."""
    schema = event_avro_schema()
    canonical = to_parsing_canonical_form(fastavro.parse_schema(schema))
    assert fingerprint(canonical, "SHA-256") == RELEASED_SCHEMA_FINGERPRINT
    for f in schema["fields"]:
        assert f.get("default", "required") == ("required" if f["name"] in ("type", "ts") else None), f["name"]


def test_a_field_added_to_the_declaration_changes_the_avro_schema_only_when_it_says_so(monkeypatch):
    added = records.Field("rebalance_reason", records.STRING, "why", avro=False)
    monkeypatch.setitem(FIELDS, added.name, added)
    assert "rebalance_reason" not in [f["name"] for f in event_avro_schema()["fields"]]
    monkeypatch.setitem(FIELDS, added.name, dataclasses.replace(added, avro=True))
    assert event_avro_schema()["fields"][-1]["name"] == "rebalance_reason"


def test_api_version_is_a_json_only_field_of_both_commit_types():
    """Contract §10.1 h: declared once, optional on ``offset_commit`` and ``txn_offset_commit``,
    read (the typed event carries it, None when absent), and outside Avro schema id 1."""
    assert FIELDS["api_version"].type == records.INT and FIELDS["api_version"].avro is False
    assert "api_version" not in [f["name"] for f in event_avro_schema()["fields"]]
    having = {etype for etype, record in EVENTS.items() if "api_version" in record.names}
    assert having == {EventType.OFFSET_COMMIT, EventType.TXN_OFFSET_COMMIT}
    for etype in having:
        slot = EVENTS[etype].slot("api_version")
        assert (slot.required, slot.default, slot.read) == (False, None, True)
    assert typed.OffsetCommit._field_defaults["api_version"] is None


def test_alert_avro_schema_follows_the_alert_dataclass():
    schema = alert_avro_schema()
    assert [f["name"] for f in schema["fields"]] == [f.name for f in dataclasses.fields(Alert)] == list(
        records.ALERT_FIELDS)
    assert {f["name"]: f["type"] for f in schema["fields"]}["details"] == {"type": "map", "values": "string"}


# --------------------------------------------------------------------------- checks name the field

def test_check_names_names_extra_and_missing_fields():
    with pytest.raises(RecordDrift, match=r"field 'grup_id' is not a declared field of heartbeat.*"
                                          r"declared field 'group_id' of heartbeat is missing"):
        check_names("here", ["grup_id", "ts"], ["group_id", "ts"], record="heartbeat")
    check_names("here", ["ts", "group_id"], ["group_id", "ts"])  # any order


def test_check_event_refuses_an_unknown_type_and_checks_nested_records():
    with pytest.raises(RecordDrift, match="'offset_comit' is not an event type"):
        check_event("here", {"type": "offset_comit", "ts": 1})
    with pytest.raises(RecordDrift, match=r"assigned\[0\]: field 'partition' is not a declared field of TopicPartitions"):
        check_event("here", {"type": "member_assignment", "ts": 1, "group_id": "g", "member_id": "m",
                             "member_epoch": 1, "assigned": [{"topic": "t", "partitions": [0], "partition": 0}]})


def test_typed_events_are_checked_against_the_declaration(monkeypatch):
    typed._check_classes()  # as at import
    monkeypatch.setitem(typed.EVENTS, EventType.HEARTBEAT, _without(EVENTS[EventType.HEARTBEAT], "error_code"))
    with pytest.raises(RecordDrift, match=r"fencewatch.state.events.Heartbeat: field 'error_code' is not a declared field"):
        typed._check_classes()


def test_a_declared_field_the_typed_event_lacks_is_named(monkeypatch):
    hb = EVENTS[EventType.HEARTBEAT]
    extra = records.optional(records.Field("rebalance_timeout_ms", records.INT, "the member's rebalance timeout"))
    monkeypatch.setitem(typed.EVENTS, EventType.HEARTBEAT, dataclasses.replace(hb, slots=(*hb.slots, extra)))
    with pytest.raises(RecordDrift, match="declared field 'rebalance_timeout_ms' of heartbeat is missing"):
        typed._check_classes()


# --------------------------------------------------------------------------- verdicts

def test_policy_answer_fields_are_judgement_fields():
    assert set(POLICY_ANSWER_FIELD) == set(Policy)
    assert set(POLICY_ANSWER_FIELD.values()) <= set(PartitionJudgement._fields)
    assert POLICY_ANSWER_FIELD[Policy.ASSIGNMENT_EPOCH] == "assignment_epoch_check"  # the epoch has that name


def test_verdict_parts_take_declared_fields_only():
    part = verdict_part("Part", ("cluster", "kip1251"), "doc", __name__)
    assert part._fields == ("cluster", "kip1251")
    with pytest.raises(TypeError, match=r"\['kip1252'\] are not verdict fields"):
        verdict_part("Part", ("cluster", "kip1252"), "doc", __name__)

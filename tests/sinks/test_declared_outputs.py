"""Verdict and alert writers derive from the one declaration (``state.model``): the JSON lines
keys, how each field renders (by its declared type), the alert's dict and Avro schema."""
from __future__ import annotations

import dataclasses
import json

import pytest

from fencewatch.sinks import jsonl
from fencewatch.sinks.kafka import ALERT_SCHEMA, decode_alert_avro, encode_alert_avro
from fencewatch.sinks.prometheus import summarize_verdicts
from fencewatch.state.model import (VERDICT_OUTPUT_FIELDS, Alert, CommitVerdicts, PartitionJudgement, UniformParts,
                                    Verdict)
from fencewatch.state.records import ALERT_FIELDS
from fencewatch.state.status import VerdictShape

JUDGEMENT = PartitionJudgement("orders", 3, 5, 0, "STALE_MEMBER_EPOCH", "NONE", "NONE", "NONE", "avoidable", False,
                               None)
COMMIT = CommitVerdicts('e"1', 10, "default", "g", "m", "commit", 4, 5, None, None, False, UniformParts((JUDGEMENT,)))


def test_verdict_lines_have_the_declared_keys_in_order():
    line = jsonl.commit_verdicts_json(COMMIT)[0]
    assert list(json.loads(line)) == list(VERDICT_OUTPUT_FIELDS)
    assert json.loads(line)["event_id"] == 'e"1' and json.loads(line)["class"] == "avoidable"


def test_a_verdict_field_of_a_type_with_no_json_form_is_named(monkeypatch):
    monkeypatch.setitem(jsonl._TYPES, "lag_seconds", "float")
    with pytest.raises(TypeError, match="no JSON format for verdict field 'lag_seconds' of type 'float'"):
        jsonl._template(("lag_seconds",))


def test_alert_records_follow_the_alert_declaration():
    alert = Alert("a-1", 7, "default", "g", "ZOMBIE_COMMIT", "warning", "s", {"z": "1", "a": "2"})
    record = jsonl.alert_dict(alert)
    assert tuple(record) == ALERT_FIELDS == tuple(f.name for f in dataclasses.fields(Alert))
    assert list(record["details"]) == ["a", "z"]
    assert [f["name"] for f in ALERT_SCHEMA["fields"]] == list(ALERT_FIELDS)
    assert decode_alert_avro(encode_alert_avro(record)) == record


def test_verdict_shapes_from_records_and_from_tuples_agree():
    """Metrics read verdict records by the declared names (``class`` in dicts, ``cls`` on tuples)."""
    verdict = COMMIT.expand()[0]
    assert type(verdict) is Verdict
    from_tuple, _, _ = summarize_verdicts([verdict])
    from_dict, _, _ = summarize_verdicts([jsonl.verdict_dict(verdict)])
    assert from_tuple == from_dict
    (shape,) = from_dict
    assert shape == VerdictShape("default", "g", "commit", "STALE_MEMBER_EPOCH", "NONE", "NONE", "NONE",
                                 "avoidable", False, None)

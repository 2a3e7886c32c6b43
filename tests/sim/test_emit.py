"""One event definition, three encodings: the JSON fast paths and Avro must say what the dicts say."""

from __future__ import annotations

import dataclasses
import io
import json

import fastavro
import pytest

from fencewatch.sim.emit import DictEmitter, JsonEmitter, Truth
from fencewatch.sim.world import SimConfig, Simulator
from fencewatch.sim.profiles import profile
from fencewatch.sim.topology import PartitionLog
from fencewatch.sim.writers import AvroContainerWriter
from fencewatch.state.records import EventType, RecordDrift, check_event
from fencewatch.state.avro_codec import AvroWireError, decode_avro, decode_body, encode_avro, encode_body
from fencewatch.streaming.ingest.avro import parsed_schema

PARSED_SCHEMA = parsed_schema()


def run(config: SimConfig, emitter_class):
    out: list = []
    emitter = emitter_class(
        lambda kind, key, payload: out.append((kind, key, payload)),
        event_id_prefix=config.id_prefix,
        cluster=config.cluster,
        labels=config.labels,
        assignment_epochs=config.assignment_epochs,
    )
    Simulator(config, emitter).run()
    return out


@pytest.mark.parametrize(
    "options",
    [
        pytest.param({}, id="defaults"),
        pytest.param({"cluster": "east-1", "assignment_epochs": True}, id="cluster+assignment_epochs"),
        pytest.param({"labels": False}, id="no labels"),
    ],
)
def test_json_lines_parse_to_exactly_the_dict_events(options):
    knobs = dataclasses.replace(profile("mixed"), eos_fraction=0.2, groups=6)
    config = SimConfig(knobs=knobs, seed=5, duration_ms=1_200_000, **options)
    dicts = run(config, DictEmitter)
    lines = run(config, JsonEmitter)
    assert len(dicts) == len(lines) > 1_000
    types = set()
    for (kind_d, key_d, event), (kind_j, key_j, line) in zip(dicts, lines):
        assert "\n" not in line
        assert json.loads(line) == event
        assert (kind_d, key_d) == (kind_j, key_j)
        types.add(event["type"])
    assert {"heartbeat", "offset_commit", "txn_offset_commit", "member_assignment", "classic_join"} <= types


def test_every_simulated_event_writes_the_declared_fields_of_its_type():
    """The emitters (dicts, and the JSON fast paths) write each type's declared fields
    (``state.records``), every required one, nested records too: a field renamed on either
    side fails here, naming it. Every type the simulator writes is covered."""
    knobs = dataclasses.replace(profile("mixed"), eos_fraction=0.3, groups=6, committed_records=True)
    config = SimConfig(knobs=knobs, seed=9, duration_ms=1_200_000, assignment_epochs=True, cluster="east-1")
    written = set()
    for emitter_class in (DictEmitter, JsonEmitter):
        payloads = run(config, emitter_class)
        # Expiry takes a stopped group and days of retention: its tombstone is emitted directly.
        emitter_class(lambda *out: payloads.append(out), cluster="east-1").offset_deleted(
            1, "g", PartitionLog("t", 0, 0, 0, 1), Truth("expired", "retention"))
        for _, _, payload in payloads:
            event = payload if isinstance(payload, dict) else json.loads(payload)
            check_event(emitter_class.__name__, event)
            written.add(event["type"])
    assert written == set(EventType) - NOT_SIMULATED


NOT_SIMULATED = {EventType.CLASSIC_GENERATION, EventType.STREAMS_TOPOLOGY}
"""Types only a real input writes: a JoinGroup response (the request log); the simulator's classic
rebalance goes from its joins to its SyncGroup at one instant (sim/world/rebalances.py); a streams
group's topology is written by the ``streams`` profile only, not by this test's mixed run
(``test_streams_profile.py`` checks its events)."""


def test_a_field_the_declaration_lacks_is_named():
    with pytest.raises(RecordDrift, match="'request_epok' is not a declared field of heartbeat"):
        check_event("sim", {"type": "heartbeat", "ts": 1, "group_id": "g", "member_id": "m", "request_epok": 1})
    with pytest.raises(RecordDrift, match="required field 'start_offset' of EpochEntry is missing"):
        check_event("sim", {"type": "partition_epochs", "ts": 1, "topic": "t", "partition": 0,
                            "log_end_offset": 5, "epochs": [{"epoch": 1}]})


def test_truth_json_is_the_dict():
    truth = Truth("zombie", "delayed_request", False, ["a", None], ["zombie", "stale"], {"k": "v \"q\""})
    assert json.loads(truth.as_json()) == truth.as_dict()
    assert truth.as_dict() is not truth.as_dict()  # callers get their own copy


def test_every_simulated_event_round_trips_through_avro_byte_for_byte_with_fastavro():
    """The compiled codec writes what fastavro (the reference) writes, and reads what it reads."""
    knobs = dataclasses.replace(profile("mixed"), eos_fraction=0.0, groups=6, committed_records=True)
    config = SimConfig(knobs=knobs, seed=9, duration_ms=3_600_000, assignment_epochs=True)
    events = [payload for _, _, payload in run(config, DictEmitter)]
    types = {e["type"] for e in events}
    assert {"partition_epochs", "classic_sync", "offset_committed", "member_left"} <= types
    seen_types = set()
    for event in events:
        body = encode_body(event)
        if event["type"] not in seen_types or "truth" in event and len(seen_types) < 40:
            seen_types.add(event["type"])
            reference = io.BytesIO()
            fastavro.schemaless_writer(reference, PARSED_SCHEMA, event)
            assert body == reference.getvalue(), event
            assert decode_body(body) == fastavro.schemaless_reader(io.BytesIO(body), PARSED_SCHEMA)
        assert decode_avro(encode_avro(event)) == event
        assert decode_avro(encode_avro(event, wire="plain"), wire="plain") == event


def test_avro_container_file_opens_with_fastavro(tmp_path):
    events = [{"type": "heartbeat", "ts": i, "group_id": "g", "member_id": "m", "request_epoch": i % 70 - 3,
               "response_epoch": 2**40, "error_code": 0} for i in range(10_000)]
    path = tmp_path / "events.avro"
    with path.open("wb") as fh:
        writer = AvroContainerWriter(fh, block_records=999)
        for event in events:
            writer.write(event)
        writer.flush()
    with path.open("rb") as fh:
        records = list(fastavro.reader(fh))
    assert [{k: v for k, v in r.items() if v is not None} for r in records] == events


@pytest.mark.parametrize(
    "data, problem",
    [
        pytest.param(b"", "truncated", id="empty"),
        pytest.param(encode_body({"type": "heartbeat", "ts": 1})[:-3], "truncated", id="cut short"),
        pytest.param(b"\x12heartbeat\x02" + b"\x04" + b"\x00" * 40, "union branch", id="bad union index"),
        pytest.param(b"\x04\xff\xfe\x02" + b"\x00" * 40, "UTF-8", id="not utf-8"),
        pytest.param(b"\x01" + b"\x00" * 40, "runs past", id="negative string length"),
        pytest.param(b"\x02x" + b"\xff" * 12, "varint", id="endless varint"),
    ],
)
def test_malformed_avro_bodies_raise_avro_wire_error(data, problem):
    with pytest.raises(AvroWireError, match=problem):
        decode_avro(data, wire="plain")


@pytest.mark.parametrize(
    "event, problem",
    [
        pytest.param({"ts": 1}, "FencewatchEvent.type: missing required field", id="missing type"),
        pytest.param({"type": "x", "ts": "1"}, "FencewatchEvent.ts: expected an int", id="ts as string"),
        pytest.param({"type": "x", "ts": 1, "offsets": [{"topic": "t", "partition": 0, "offset": 1.5}]},
                     "PartitionOffset.offset: expected an int", id="float offset"),
        pytest.param({"type": "x", "ts": 1, "truth": {"scenario": "s", "current_owner": 1}},
                     "SimTruth.current_owner: expected a boolean", id="int as boolean"),
    ],
)
def test_encoding_bad_events_names_the_field(event, problem):
    with pytest.raises((TypeError, ValueError), match=problem):
        encode_avro(event)


def test_confluent_wire_format_header():
    event = {"type": "heartbeat", "ts": 5, "group_id": "g", "member_id": "m", "request_epoch": 1,
             "response_epoch": 2, "error_code": 0}
    data = encode_avro(event, schema_id=42)
    assert data[:5] == b"\x00\x00\x00\x00\x2a"
    body = io.BytesIO(data[5:])
    record = fastavro.schemaless_reader(body, PARSED_SCHEMA)
    assert record["member_id"] == "m" and record["truth"] is None
    assert decode_avro(data, expected_schema_id=42) == event
    with pytest.raises(AvroWireError, match="unknown schema id 42"):
        decode_avro(data, expected_schema_id=1)
    with pytest.raises(AvroWireError, match="magic byte"):
        decode_avro(b"\x01" + data[1:])
    with pytest.raises(AvroWireError):
        decode_avro(b"\x00\x00")
    with pytest.raises(AvroWireError, match="trailing"):
        decode_avro(data + b"\x00")
    with pytest.raises(ValueError, match="unknown Avro wire format"):
        encode_avro(event, wire="json")  # type: ignore[arg-type]


def test_unsafe_names_are_refused():
    with pytest.raises(ValueError, match="topic name"):
        PartitionLog('bad"topic', 0, 0, 0, 1)
    with pytest.raises(ValueError, match="cluster name"):
        JsonEmitter(lambda *a: None, cluster="a b")

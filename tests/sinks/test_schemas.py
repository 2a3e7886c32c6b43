"""The shipped ``.avsc`` files (docs/schemas/) are the one declaration (``state/records.py``)
written out: they fail this test when either drifts, and they read what fencewatch writes."""
from __future__ import annotations

import io
import json

import fastavro

from fencewatch.sinks import schemas
from fencewatch.sinks.jsonl import alert_dict
from fencewatch.sinks.kafka import encode_alert_avro
from fencewatch.state.avro_codec import EVENT_SCHEMA
from fencewatch.state.model import Alert
from fencewatch.state.records import alert_avro_schema, event_avro_schema


def test_checked_in_schema_files_match_the_declaration():
    assert schemas.stale() == [], "run python -m fencewatch.sinks.schemas"
    assert json.loads((schemas.SCHEMA_DIR / "fencewatch-event.avsc").read_text()) == event_avro_schema() == EVENT_SCHEMA
    assert json.loads((schemas.SCHEMA_DIR / "fencewatch-alert.avsc").read_text()) == alert_avro_schema()


def test_a_drifted_file_is_reported(tmp_path, capsys):
    assert schemas.main(["--out", str(tmp_path)]) == 0
    assert schemas.main(["--out", str(tmp_path), "--check"]) == 0
    alert = tmp_path / "fencewatch-alert.avsc"
    drifted = json.loads(alert.read_text())
    drifted["fields"] = drifted["fields"][:-1]  # a field the declaration has, missing from the file
    alert.write_text(json.dumps(drifted, indent=2) + "\n")
    (tmp_path / "fencewatch-event.avsc").unlink()
    assert schemas.stale(tmp_path) == ["fencewatch-event.avsc", "fencewatch-alert.avsc"]
    assert schemas.main(["--out", str(tmp_path), "--check"]) == 1
    assert "fencewatch-alert.avsc is out of date" in capsys.readouterr().err


def test_the_alert_file_reads_the_alerts_fencewatch_writes():
    """A consumer holding only the file decodes an alert's Avro body (after the 5-byte Confluent header)."""
    record = alert_dict(Alert("a-1", 7, "default", "g", "ZOMBIE_COMMIT", "critical", "s", {"member": "m-1"}))
    schema = fastavro.parse_schema(json.loads((schemas.SCHEMA_DIR / "fencewatch-alert.avsc").read_text()))
    body = io.BytesIO(encode_alert_avro(record)[5:])
    assert fastavro.schemaless_reader(body, schema) == record


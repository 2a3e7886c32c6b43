"""Kafka outputs of the streaming job: verdicts (JSON), alerts (Avro or JSON), dead letters.

``foreachBatch`` is at-least-once, so the writer is idempotent by batch id: it
remembers the last batch it finished (a small marker file beside the query's
checkpoint) and skips a batch it already wrote. A crash between the produce and
the marker replays one batch; alert ids are deterministic, so consumers
deduplicate on ``alert_id`` (the record key).
"""
from __future__ import annotations

import io
import json
import logging
import os
import struct
from pathlib import Path
from typing import Callable, Iterable, Mapping

import fastavro

log = logging.getLogger(__name__)

ALERT_SCHEMA = fastavro.parse_schema({
    "type": "record", "name": "FencewatchAlert", "namespace": "io.fencewatch",
    "doc": "An alert (SPEC 8); alert_id is deterministic: the same input gives the same id.",
    "fields": [
        {"name": "alert_id", "type": "string"},
        {"name": "ts", "type": "long"},
        {"name": "cluster", "type": "string"},
        {"name": "group_id", "type": "string"},
        {"name": "kind", "type": "string"},
        {"name": "severity", "type": "string"},
        {"name": "summary", "type": "string"},
        {"name": "details", "type": {"type": "map", "values": "string"}},
    ],
})
ALERT_SCHEMA_ID = 2  # the Confluent wire-format id we stamp (the input event schema is 1)
_HEADER = struct.Struct(">bI")


def encode_alert_avro(alert: Mapping, schema_id: int = ALERT_SCHEMA_ID) -> bytes:
    buf = io.BytesIO()
    buf.write(_HEADER.pack(0, schema_id))
    fastavro.schemaless_writer(buf, ALERT_SCHEMA, dict(alert))
    return buf.getvalue()


def decode_alert_avro(data: bytes) -> dict:
    buf = io.BytesIO(data)
    buf.read(_HEADER.size)
    return fastavro.schemaless_reader(buf, ALERT_SCHEMA)


class BatchMarker:
    """The last batch id whose outputs were fully written, persisted next to the checkpoint."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)

    def last(self) -> int:
        try:
            return int(self.path.read_text().strip())
        except (OSError, ValueError):
            return -1

    def done(self, batch_id: int) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(str(batch_id))
        os.replace(tmp, self.path)


class KafkaOutputs:
    """Writes one micro-batch's records; ``write_batch`` returns False for a batch already written."""

    def __init__(self, client_config: Mapping[str, str], *, verdicts_topic: str | None, alerts_topic: str | None,
                 dlq_topic: str | None, alerts_format: str = "avro", marker: BatchMarker | None = None,
                 alert_serializer: Callable[[Mapping, str], bytes] | None = None):
        """``alert_serializer(alert, topic)`` replaces the fixed-id Avro encoding (a Schema Registry's)."""
        from confluent_kafka import Producer

        cfg = {"linger.ms": "20", "batch.num.messages": "10000", "compression.type": "lz4",
               "enable.idempotence": "true", **dict(client_config)}
        self._producer = Producer(cfg)
        self.verdicts_topic = verdicts_topic
        self.alerts_topic = alerts_topic
        self.dlq_topic = dlq_topic
        self.alerts_format = alerts_format
        self.marker = marker
        self._alert_serializer = alert_serializer
        self._errors: list[str] = []

    def _on_delivery(self, err, msg) -> None:
        if err is not None:
            self._errors.append(f"{msg.topic()}: {err}")

    def _produce(self, topic: str, value: bytes, key: bytes | None = None, headers=None) -> None:
        while True:
            try:
                self._producer.produce(topic, value=value, key=key, headers=headers, on_delivery=self._on_delivery)
                return
            except BufferError:
                self._producer.poll(0.05)  # local queue full: let deliveries drain

    def write_batch(self, batch_id: int, *, verdict_lines: Iterable[str] = (), alerts: Iterable[Mapping] = (),
                    dead_letters: Iterable[tuple[bytes | None, str, str]] = ()) -> bool:
        if self.marker is not None and batch_id <= self.marker.last():
            log.info("batch %d already written to Kafka, skipped (foreachBatch retry)", batch_id)
            return False
        if self.verdicts_topic:
            for line in verdict_lines:
                self._produce(self.verdicts_topic, line.encode())
        if self.alerts_topic:
            for a in alerts:
                value = (json.dumps(a, separators=(",", ":")).encode() if self.alerts_format != "avro"
                         else self._alert_serializer(a, self.alerts_topic) if self._alert_serializer
                         else encode_alert_avro(a))
                self._produce(self.alerts_topic, value, key=a["alert_id"].encode())
        if self.dlq_topic:
            for raw, reason, coords in dead_letters:
                self._produce(self.dlq_topic, raw or b"", headers=[("fencewatch.reason", reason.encode()),
                                                                   ("fencewatch.source", coords.encode())])
        remaining = self._producer.flush(60)
        if remaining or self._errors:
            problems = self._errors[:5]
            self._errors.clear()
            raise RuntimeError(f"Kafka outputs of batch {batch_id} not delivered: {remaining} pending, {problems}")
        if self.marker is not None:
            self.marker.done(batch_id)
        return True

    def close(self) -> None:
        self._producer.flush(30)

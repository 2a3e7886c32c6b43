"""Kafka outputs of the streaming job: verdicts (JSON), alerts (JSON, or Avro through a registry), dead letters.

Exactly once on any broker and any checkpoint file system (docs/reliability.md). ``foreachBatch``
is at-least-once, so each batch is written in two logged steps: before the first record, the sink
log (a file in the query's checkpoint, written through Spark's checkpoint file manager) says
"batch N pending, output topics ended at these offsets"; after the last delivery it says "batch N
done". Alerts and dead letters carry the header ``fencewatch.batch: N``; verdict lines (about four
per commit) carry none, since a header costs the producer more than the record itself. A batch
found done is skipped; a batch found pending (the process died between producing and logging) is
completed: the records of batch N already in the output topics since the logged offsets are read
back (alerts and dead letters by their header, verdict lines by being there: nothing of this job
follows the logged offsets but batch N), counted by their bytes (key and value, in any order or
partition), and only the records not found are produced. Nothing is duplicated, whatever moment
the crash hit, because Spark runs the batch again with what its first attempt logged in
``offsets/N`` (input offsets, the source's caught-up mark, the batch's time) and the query gives
the same records from them (issue 33: a rerun that lost the mark kept events its first attempt had
written, and wrote them a batch later).

No record can stop the job: an output over ``max_record_bytes`` is cut to fit (alerts: their
longest fields, flagged ``fencewatch.truncated``), and a record the broker still refuses for good
(size, policy) becomes a bounded dead letter with the reason ``OUTPUT_REJECTED``; only a failure
that may pass (broker down, timeout) fails the batch, which Spark then retries.
"""
from __future__ import annotations

import functools
import hashlib
import io
import json
import logging
import os
import struct
import time
from collections import Counter
from pathlib import Path
from typing import Callable, Iterable, Mapping, Protocol

import fastavro

from fencewatch.sinks.group_views import group_view_key
from fencewatch.sinks.kafka_topics import MISSING_TOPIC_ERRORS, OutputTopicError, deleted_topics
from fencewatch.state.records import alert_avro_schema

log = logging.getLogger(__name__)

ALERT_SCHEMA = fastavro.parse_schema(alert_avro_schema())  # from ``state.model.Alert``
ALERT_SCHEMA_ID = 2  # the Confluent wire-format id we stamp (the input event schema is 1)
_HEADER = struct.Struct(">bI")
# The producer settings the writer chooses (no secrets among them), kept for tests and logs.
_PRODUCER_SETTINGS_SHOWN = ("linger.ms", "batch.num.messages", "compression.type", "enable.idempotence",
                            "message.max.bytes", "delivery.report.only.error")

# librdkafka's default message.max.bytes; a topic's default max.message.bytes (1 MiB) is above it.
DEFAULT_MAX_RECORD_BYTES = 1_000_000
HEADROOM = 4_096  # record overhead and headers, kept free below the limit
BATCH_HEADER = "fencewatch.batch"
#: The group id of the consumer that reads a pending batch back (assign only, never committed;
#: librdkafka still looks its coordinator up, which needs Describe on the group).
READBACK_GROUP = "fencewatch-sink-readback"
TRUNCATED = "fencewatch.truncated"
# Delivery errors that will not pass on a retry: the record goes to the DLQ instead. A topic that
# may not be there (:data:`TOPIC_GONE_ERRORS`) is not among them: gone, it stops the job
# (``KafkaOutputs._topics_missing``), since its records and the DLQ's would be lost for good otherwise.
PERMANENT_ERRORS = frozenset({"MSG_SIZE_TOO_LARGE", "_MSG_SIZE_TOO_LARGE", "INVALID_RECORD", "CORRUPT_MESSAGE",
                              "RECORD_LIST_TOO_LARGE", "POLICY_VIOLATION", "INVALID_REQUIRED_ACKS",
                              "_INVALID_ARG", "TOPIC_AUTHORIZATION_FAILED"})
#: Delivery errors after which the topic is asked about: the start check's missing-topic errors,
#: ``_UNKNOWN_PARTITION``, what librdkafka says once a deleted topic's metadata shows no
#: partitions (seen on Apache Kafka 4.2: "partition count changed from 1 to 0"), and ``_DESTROY``,
#: what the records still queued on those partitions get when librdkafka drops them (seen in a
#: loaded clean-clone run: "Broker handle destroyed for termination"). The topic is asked about
#: before the job stops: one the brokers still describe fails the batch as any other error does.
TOPIC_GONE_ERRORS = MISSING_TOPIC_ERRORS | {"_UNKNOWN_PARTITION", "_DESTROY"}
#: librdkafka waits this long (its default: 30 s) before it fails the records of a topic its
#: metadata no longer shows: a grace for topics just created, which the output topics are not
#: (checked, or created and waited for, before the first batch). A deleted topic stops the job
#: within seconds instead of half a minute per batch; ``streaming.kafka`` may set it.
TOPIC_GONE_AFTER_MS = 5_000


def encode_alert_avro(alert: Mapping, schema_id: int = ALERT_SCHEMA_ID) -> bytes:
    buf = io.BytesIO()
    buf.write(_HEADER.pack(0, schema_id))
    fastavro.schemaless_writer(buf, ALERT_SCHEMA, dict(alert))
    return buf.getvalue()


def decode_alert_avro(data: bytes) -> dict:
    buf = io.BytesIO(data)
    buf.read(_HEADER.size)
    return fastavro.schemaless_reader(buf, ALERT_SCHEMA)


def fit_alert(alert: Mapping, limit: int) -> dict:
    """The alert, or, when its encoding would pass ``limit`` bytes, the alert with its longest
    string fields cut (``...(+N)``) and ``details[fencewatch.truncated]`` naming them. The id,
    kind, severity, group and time are kept: consumers still key and route it."""
    a = dict(alert)
    a["details"] = dict(a.get("details") or {})
    size = len(json.dumps(a, separators=(",", ":")))
    if size <= limit:
        return a
    cut: list[str] = []
    budget = max(256, (limit - 2_048) // (len(a["details"]) + 1))
    if len(a.get("summary", "")) > budget:
        a["summary"] = _cut(a["summary"], budget)
        cut.append("summary")
    for k in sorted(a["details"]):
        if len(k) > 256:  # a key is cut too (the map's keys are ours, never long in practice)
            a["details"][_cut(k, 256)] = a["details"].pop(k)
            k = _cut(k, 256)
        if len(a["details"][k]) > budget:
            a["details"][k] = _cut(a["details"][k], budget)
            cut.append(k)
    a["details"] = dict(list(a["details"].items())[:1_000])
    a["details"][TRUNCATED] = ",".join(cut)[:1_000] or "details"
    return a


def _cut(text: str, n: int) -> str:
    return text if len(text) <= n else f"{text[:n]}...(+{len(text) - n})"


# --------------------------------------------------------------------------- the sink log

class SinkLog(Protocol):
    """Where the sink logs its progress: one small document, replaced atomically."""

    def read(self) -> str | None: ...

    def write(self, text: str) -> None: ...


class BatchMarker:
    """A :class:`SinkLog` in a local file, written durably: a temporary file fsynced, renamed over
    the log, the directory fsynced (what Spark's checkpoint file manager does on a local disk, with
    the same atomicity). The job's log on a local checkpoint (``streaming.runtime.checkpoint.sink_log``);
    HDFS and object stores go through Spark's manager (``checkpoint.CheckpointSinkLog``), whose log
    this one reads and replaces: Hadoop's checksum of an older write (``.NAME.crc``) is removed on
    the first write, so a checkpoint moves between the two either way."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        self._crc: Path | None = self.path.with_name(f".{self.path.name}.crc")

    def read(self) -> str | None:
        try:
            return self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return None

    def write(self, text: str) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        with open(tmp, "wb") as f:
            f.write(text.encode())
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)
        if self._crc is not None:
            self._crc.unlink(missing_ok=True)  # Hadoop's checksum of an older content
            self._crc = None
        fd = os.open(self.path.parent, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


SINK_LOG_FORMAT = 1
"""The sink log's format: ``{"format": 1, "batch": N, "status": "pending" | "done", "start": offsets}``
(``start``, pending batches only: the output topics' end offsets, ``{topic: {partition: offset}}``).
JSON, small and read by people mending a checkpoint; fencewatch 0.1.0 wrote it without ``format``."""


def log_entry(batch: int, status: str, start: Mapping[str, Mapping[str, int]] | None = None) -> str:
    """The sink log's document (:data:`SINK_LOG_FORMAT`) for batch ``batch``."""
    doc = {"format": SINK_LOG_FORMAT, "batch": batch, "status": status}
    if start is not None:
        doc["start"] = start
    return json.dumps(doc)


def parse_log(text: str | None) -> dict:
    """The sink log's document as ``{"batch", "status", "start"}``; no log: batch -1, done.
    A document of another format, or none, is a ``ValueError`` that says which."""
    if not text:
        return {"batch": -1, "status": "done", "start": {}}
    try:
        doc = json.loads(text)
    except ValueError:
        doc = None
    if not isinstance(doc, dict):
        raise ValueError(f"unreadable sink log: {text[:200]!r}")
    if doc.get("format") != SINK_LOG_FORMAT:
        written = "fencewatch 0.1.0" if "format" not in doc else f"format {doc['format']!r}"
        raise ValueError(f"sink log of {written}; this version reads format {SINK_LOG_FORMAT} "
                         f"(docs/reliability.md, \"State format\"): {text[:200]!r}")
    batch, status, start = doc.get("batch"), doc.get("status"), doc.get("start", {})
    if not isinstance(batch, int) or status not in ("pending", "done") or not isinstance(start, dict):
        raise ValueError(f"unreadable sink log: {text[:200]!r}")
    return {"batch": batch, "status": status, "start": start}


# --------------------------------------------------------------------------- the writer

class KafkaOutputs:
    """Writes one micro-batch's records; ``write_batch`` returns False for a batch already written."""

    def __init__(self, client_config: Mapping[str, str], *, verdicts_topic: str | None, alerts_topic: str | None,
                 dlq_topic: str | None, groups_topic: str | None = None, alerts_format: str = "auto",
                 marker: SinkLog | None = None,
                 max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES,
                 alert_serializer: Callable[[Mapping, str], bytes] | None = None,
                 topics_gone: Callable[[list[str]], Mapping[str, str]] | None = None):
        """``alerts_format``: ``json``; ``avro``, through ``alert_serializer(alert, topic)`` (a Schema
        Registry's) or else with the fixed schema id 2 (offline files and tests: no registry knows
        that id); ``auto``: ``avro`` with a serializer, ``json`` without (the job's default).
        ``topics_gone(names)``: of the topics the producer found missing, those the brokers confirm
        are gone, each with the one line to show (the job's: ``output_topics.topics_gone``, the
        start check's wording); default: DescribeTopics with this client."""
        from confluent_kafka import Producer

        self._client = dict(client_config)
        # Delivery reports for failures only: the writer acts on failures alone, and a report per
        # record would be a Python call each (docs/decisions.md, "Outputs and exactly-once").
        cfg = {"linger.ms": "20", "batch.num.messages": "10000", "compression.type": "lz4",
               "enable.idempotence": "true", "message.max.bytes": str(max_record_bytes + HEADROOM),
               "delivery.report.only.error": True,
               # librdkafka's own lines through logging, never raw to stderr (unless the caller gave one)
               "logger": logging.getLogger("fencewatch.kafka.producer"),
               "topic.metadata.propagation.max.ms": str(TOPIC_GONE_AFTER_MS), **self._client,
               # One callback for the producer, not an object per record.
               "on_delivery": self._on_delivery}
        flag = cfg["delivery.report.only.error"]  # a Python-client setting: a bool, not a string
        cfg["delivery.report.only.error"] = flag if isinstance(flag, bool) else str(flag).lower() == "true"
        self.producer_config = {k: v for k, v in cfg.items() if k in _PRODUCER_SETTINGS_SHOWN}
        self._producer = Producer(cfg)
        self._consumer = None  # offsets and read-back, made when first needed
        self.verdicts_topic = verdicts_topic
        self.alerts_topic = alerts_topic
        self.dlq_topic = dlq_topic
        self.groups_topic = groups_topic  # compacted: (cluster/group key, snapshot JSON or None) records
        if alerts_format not in ("auto", "avro", "json"):
            raise ValueError(f"unknown alerts_format {alerts_format!r}; valid: auto, avro, json")
        self.alerts_format = (("avro" if alert_serializer is not None else "json") if alerts_format == "auto"
                              else alerts_format)
        self.marker = marker
        self.max_record_bytes = max_record_bytes
        self._alert_serializer = alert_serializer
        self._retry: list[str] = []  # delivery failures that may pass: the batch fails, Spark retries it
        self._rejected: list[tuple] = []  # (topic, value, error, headers): to the DLQ
        self._missing: Counter = Counter()  # records refused because their topic is not there, by topic
        self._topics_gone = topics_gone or functools.partial(deleted_topics, self._client)
        self._already: Counter = Counter()  # records of a pending batch found in the topics
        self._headers: list = []
        self._batch = -1
        self.stats = Counter()  # records produced, rerouted, skipped as already written, cut

    # -- producing

    def _on_delivery(self, err, msg) -> None:
        if err is None:
            return
        if err.name() in TOPIC_GONE_ERRORS and not err.fatal():
            self._missing[msg.topic()] += 1
        elif err.name() in PERMANENT_ERRORS and not err.fatal():
            self._rejected.append((msg.topic(), msg.value() or b"", err.name(), msg.headers()))
        else:
            self._retry.append(f"{msg.topic()}: {err}")

    def _produce(self, topic: str, value: bytes, key: bytes | None = None, headers=None) -> None:
        headers = self._headers + list(headers or ())
        if self._already and self._already[(topic, _digest(key, value))] > 0:
            self._already[(topic, _digest(key, value))] -= 1
            self.stats["skipped"] += 1
            return
        while True:
            try:
                self._producer.produce(topic, value=value, key=key, headers=headers or None)
                self.stats["produced"] += 1
                return
            except BufferError:
                self._producer.poll(0.05)  # local queue full: let deliveries drain
            except Exception as exc:  # KafkaException: refused before sending (e.g. _MSG_SIZE_TOO_LARGE)
                name = getattr(exc.args[0], "name", lambda: type(exc).__name__)() if exc.args else type(exc).__name__
                if name in TOPIC_GONE_ERRORS:  # the producer's metadata already says it is gone
                    self._missing[topic] += 1
                else:
                    self._rejected.append((topic, value, str(name), headers))
                return

    def _produce_lines(self, topic: str, lines: Iterable[str]) -> None:
        """Verdict lines, ~4 per commit: :meth:`_produce`'s work in one loop (no key, no header,
        nothing of the batch in Kafka yet); what the producer refuses or has no room for goes
        through :meth:`_produce_line`, which waits or records the refusal. Verdict lines carry no
        batch header: it cost the producer more than the rest of the call (docs/reliability.md,
        "Exactly-once outputs on any checkpoint file system")."""
        produce = self._producer.produce
        limit = self.max_record_bytes - HEADROOM
        n = 0
        for value in lines:
            if type(value) is str:
                value = value.encode()
            if len(value) > limit:
                self._rejected.append((topic, value, "OUTPUT_TOO_LARGE", None))
                continue
            try:
                produce(topic, value)
                n += 1
            except Exception:  # BufferError (queue full) or refused: the careful path
                self._produce_line(topic, value)
        self.stats["produced"] += n

    def _produce_line(self, topic: str, value: bytes) -> None:
        """A verdict line through :meth:`_produce`, without the batch header."""
        headers, self._headers = self._headers, []
        try:
            self._produce(topic, value)
        finally:
            self._headers = headers

    def _dead_letter(self, raw: bytes, reason: str, coords: str, extra=()) -> None:
        """A dead letter, bounded: the record cut to fit, the original length in a header."""
        headers = [("fencewatch.reason", _cut(reason, 2_000).encode()), ("fencewatch.source", _cut(coords, 1_000).encode()),
                   *extra]
        limit = self.max_record_bytes - HEADROOM
        if len(raw) > limit:
            headers.append((TRUNCATED, str(len(raw)).encode()))
            raw = raw[:limit]
        self._produce(self.dlq_topic, raw, headers=headers)

    def _fits(self, value: bytes) -> bool:
        return len(value) <= self.max_record_bytes - HEADROOM

    def write_batch(self, batch_id: int, *, verdict_lines: Iterable[str | bytes] = (), alerts: Iterable[Mapping] = (),
                    dead_letters: Iterable[tuple[bytes | None, str, str]] = ()) -> bool:
        """A whole batch at once: :meth:`begin`, :meth:`write`, :meth:`commit`."""
        if not self.begin(batch_id):
            return False
        self.write(verdict_lines=verdict_lines, alerts=alerts, dead_letters=dead_letters)
        self.commit(batch_id)
        return True

    def begin(self, batch_id: int) -> bool:
        """Start batch ``batch_id``; False: it was written already (skip it)."""
        state = parse_log(self.marker.read()) if self.marker is not None else None
        if state is not None and (batch_id < state["batch"] or (batch_id == state["batch"]
                                                                  and state["status"] == "done")):
            log.info("batch %d already written to Kafka, skipped (foreachBatch retry)", batch_id)
            return False
        self._batch = batch_id
        self._headers = [(BATCH_HEADER, str(batch_id).encode())]
        self._already = Counter()
        self._retry.clear()
        self._rejected.clear()
        self._missing.clear()
        if state is not None:
            if batch_id == state["batch"]:  # pending: the last attempt died between producing and logging
                self._already = self._written(batch_id, state["start"])
                log.warning("batch %d was being written when the job stopped: %d of its records are in Kafka, "
                            "the rest follow", batch_id, sum(self._already.values()))
            else:
                self.marker.write(log_entry(batch_id, "pending", self._ends()))
        return True

    def write(self, *, verdict_lines: Iterable[str | bytes] = (), alerts: Iterable[Mapping] = (),
              dead_letters: Iterable[tuple[bytes | None, str, str]] = (),
              group_views: Iterable[tuple[str, str, str | None]] = ()) -> None:
        """Produce some of the current batch's records (call as often as needed). ``group_views``:
        (cluster, group id, snapshot JSON or None for a forgotten group), keyed ``cluster/group``
        on the compacted groups topic (:func:`group_view_key`)."""
        self._write(self._batch, verdict_lines, alerts, dead_letters)
        if self.groups_topic:
            for cluster, group_id, view in group_views:
                value = None if view is None else view.encode()
                if value is not None and not self._fits(value):
                    self._rejected.append((self.groups_topic, value, "OUTPUT_TOO_LARGE", None))
                    continue
                self._produce(self.groups_topic, value, key=group_view_key(cluster, group_id))

    def commit(self, batch_id: int) -> None:
        """Wait for every delivery of the batch, then log it done."""
        self._flush(batch_id)
        if self.marker is not None:
            self.marker.write(log_entry(batch_id, "done"))

    def _write(self, batch_id, verdict_lines, alerts, dead_letters) -> None:
        if self.verdicts_topic and not self._already:
            self._produce_lines(self.verdicts_topic, verdict_lines)
        elif self.verdicts_topic:  # a pending batch again: each record checked against what is there
            for line in verdict_lines:
                value = line.encode() if type(line) is str else line
                if self._fits(value):
                    self._produce_line(self.verdicts_topic, value)
                else:
                    self._rejected.append((self.verdicts_topic, value, "OUTPUT_TOO_LARGE", None))
        if self.alerts_topic:
            limit = self.max_record_bytes - HEADROOM
            for a in alerts:
                a = fit_alert(a, limit // 2)  # Avro and JSON encodings are both below the JSON text's size
                if TRUNCATED in a["details"]:
                    self.stats["cut"] += 1
                value = (json.dumps(a, separators=(",", ":")).encode() if self.alerts_format != "avro"
                         else self._alert_serializer(a, self.alerts_topic) if self._alert_serializer
                         else encode_alert_avro(a))
                self._produce(self.alerts_topic, value, key=a["alert_id"].encode()[:1_000])
        if self.dlq_topic:
            for raw, reason, coords in dead_letters:
                self._dead_letter(raw or b"", reason, coords)
        self._producer.poll(0)

    def _flush(self, batch_id: int) -> None:
        """Wait for every delivery; refused records become dead letters (twice at most: a dead
        letter refused in turn is written as its reason alone). Records whose topic is not there
        stop the job (:meth:`_topics_missing`) before anything is rerouted."""
        for attempt in range(3):
            remaining = self._producer.flush(60)
            if self._missing:
                self._topics_missing(batch_id)
            if remaining or self._retry:
                problems = self._retry[:5]
                self._retry.clear()
                self._rejected.clear()
                raise RuntimeError(f"Kafka outputs of batch {batch_id} not delivered: {remaining} pending, {problems}")
            rejected, self._rejected = self._rejected, []
            if not rejected:
                return
            rerouted, dropped = Counter(), Counter()  # by (topic, error): one line each, not one per record
            for topic, value, error, headers in rejected:
                self.stats["rerouted"] += 1
                if self.dlq_topic is None or (topic == self.dlq_topic and not value):
                    dropped[(topic, error)] += 1
                    self.stats["dropped"] += 1
                    continue
                rerouted[(topic, error)] += 1
                if topic == self.dlq_topic:  # a refused dead letter: sent again as its headers alone
                    kept = [(k, v) for k, v in headers or () if k not in (BATCH_HEADER, TRUNCATED)]
                    self._produce(self.dlq_topic, b"", headers=kept + [(TRUNCATED, str(len(value)).encode())])
                    continue
                self._dead_letter(value, f"OUTPUT_REJECTED(topic={topic}, error={error}, bytes={len(value)})",
                                  f"output {topic}")
            for (topic, error), n in sorted(rerouted.items()):
                log.warning("batch %d: %d record(s) for %s refused (%s): sent to the dead-letter topic%s", batch_id,
                            n, topic, error, " as their headers alone" if topic == self.dlq_topic else "")
            for (topic, error), n in sorted(dropped.items()):
                log.error("batch %d: %d record(s) for %s refused (%s) and no dead-letter topic takes them; dropped",
                          batch_id, n, topic, error)
        raise RuntimeError(f"batch {batch_id}: dead letters refused repeatedly")

    def _topics_missing(self, batch_id: int) -> None:
        """Records refused because their topic is not there (deleted while the job runs): asked
        again the way the start check asks (DescribeTopics), a topic gone for good is an
        :class:`OutputTopicError` whose message is the one line to show; the batch is not logged
        done, so a start after the topic is back writes it (the sink log completes it exactly
        once). Nothing is rerouted: the DLQ is no place for a whole topic's records, and it is
        often gone too. A topic the brokers still describe (metadata not yet propagated) is a
        failure that may pass: the batch fails and Spark runs it again."""
        missing, self._missing = self._missing, Counter()
        self._rejected.clear()
        self._retry.clear()
        names = sorted(missing)
        try:
            gone = dict(self._topics_gone(names))
        except Exception as exc:  # the cluster did not answer: not known to be gone
            log.debug("describing %s failed", names, exc_info=exc)
            gone = {}
        confirmed = [n for n in names if n in gone]
        if confirmed:
            others = confirmed[1:]
            raise OutputTopicError(confirmed[0], gone[confirmed[0]] + (
                f" (the same for {', '.join(others)})" if others else "") +
                f"; micro-batch {batch_id} is not committed: the next start writes it")
        counts = ", ".join(f"{missing[n]} for {n}" for n in names)
        raise RuntimeError(f"Kafka outputs of batch {batch_id} not delivered: {counts} refused as an unknown topic, "
                           "which the brokers still describe")

    # -- what is already there

    def _reader(self):
        if self._consumer is None:
            from confluent_kafka import Consumer

            self._consumer = Consumer({"logger": logging.getLogger("fencewatch.kafka.consumer"), **self._client,
                                       "group.id": READBACK_GROUP,
                                       "enable.auto.commit": "false", "enable.partition.eof": "true",
                                       "fetch.max.bytes": str(4 * self.max_record_bytes),
                                       "max.partition.fetch.bytes": str(2 * self.max_record_bytes)})
        return self._consumer

    def _topics(self) -> list[str]:
        return sorted({t for t in (self.verdicts_topic, self.alerts_topic, self.dlq_topic, self.groups_topic) if t})

    def _ends(self) -> dict:
        """End offsets of every partition of the output topics (where this batch's records start)."""
        from confluent_kafka import TopicPartition

        c = self._reader()
        out = {}
        for t in self._topics():  # metadata of our topics only: a cluster may hold thousands
            meta = c.list_topics(t, timeout=10).topics.get(t)
            parts = meta.partitions if meta is not None and meta.error is None else {}
            out[t] = {str(p): c.get_watermark_offsets(TopicPartition(t, p), timeout=10, cached=False)[1]
                      for p in sorted(parts)}
        return out

    def _written(self, batch_id: int, start: Mapping, idle_s: float = 1.0) -> Counter:
        """(topic, digest) of the records of ``batch_id`` in the output topics since ``start``.
        Read to the end of each partition and then ``idle_s`` more (a broker's high watermark may
        lag the last produce: NOTES.md)."""
        from confluent_kafka import KafkaError, TopicPartition

        c = self._reader()
        tps = [tp for t, parts in start.items() for tp in self._since(c, t, parts)]
        found: Counter = Counter()
        if not tps:
            return found
        c.assign(tps)
        want = str(batch_id).encode()
        eof, last = set(), time.monotonic()
        while len(eof) < len(tps) or time.monotonic() - last < idle_s:
            msg = c.poll(0.1)
            if msg is None:
                if time.monotonic() - last > 60:
                    raise RuntimeError(f"batch {batch_id}: reading back the outputs stalled")
                continue
            last = time.monotonic()
            if msg.error() is not None:
                if msg.error().code() == KafkaError._PARTITION_EOF:
                    eof.add((msg.topic(), msg.partition()))
                    continue
                raise RuntimeError(f"batch {batch_id}: reading back {msg.topic()}: {msg.error()}")
            # Verdict lines carry no header: every one after the logged offsets is batch N's.
            if msg.topic() == self.verdicts_topic or dict(msg.headers() or ()).get(BATCH_HEADER) == want:
                found[(msg.topic(), _digest(msg.key(), msg.value()))] += 1
        c.unassign()
        return found

    @staticmethod
    def _since(c, topic: str, parts: Mapping) -> list:
        """Where the records of a pending batch start in ``topic``'s partitions. A topic deleted
        and created again since the offsets were logged (a job stopped by its deletion, issue 46)
        starts again at 0: a logged offset past a partition's end means that, and the partition is
        read from its beginning; a partition the new topic lacks holds nothing of the batch. No
        partitions logged: the topic was not there when the batch began, so all of it is the batch's."""
        from confluent_kafka import TopicPartition

        meta = c.list_topics(topic, timeout=10).topics.get(topic)
        exists = meta.partitions if meta is not None and meta.error is None else {}
        logged = {int(p): int(off) for p, off in parts.items()} or {p: -1 for p in exists}
        out = []
        for p, off in sorted(logged.items()):
            if p not in exists:
                continue
            low, high = c.get_watermark_offsets(TopicPartition(topic, p), timeout=10, cached=False)
            out.append(TopicPartition(topic, p, off if 0 <= off <= high else low))
        return out

    def close(self) -> None:
        self._producer.flush(30)
        if self._consumer is not None:
            self._consumer.close()


def _digest(key: bytes | None, value: bytes | None) -> bytes:
    h = hashlib.blake2b(digest_size=16)
    h.update(len(key or b"").to_bytes(4, "big"))
    h.update(key or b"")
    h.update(value or b"")
    return h.digest()

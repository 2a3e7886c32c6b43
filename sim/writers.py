"""Where simulated events go: JSON lines, Avro files, Kafka topics; and output pacing.

What lives here: writers with one method, ``write(kind, key, payload)``
(the emitter's callback, see :mod:`fencewatch.sim.emit`), plus ``close()``:

* :class:`JsonLinesWriter` -- one JSON object per line to a text stream;
* :class:`AvroFileWriter` -- an Avro object container file of ``FencewatchEvent``
  (:class:`AvroContainerWriter`, with the compiled codec of ``state.avro_codec``);
* :class:`KafkaWriter` -- the heartbeats and offsets topics, keyed by group id
  (``topic-partition`` for partition-scoped events), JSON or Avro values
  (Confluent wire format or plain body);
* :class:`Pacer` -- throttles a run to N events/s or to simulated time.

Kafka writes partition records themselves with Java's default partitioner
(murmur2 of the key), so a group's events land on the same partition of each
topic whichever client produced them, and so the writer knows each
partition's last record. On close it holds that last record back and sends it
alone, one flush per partition: brokers that report the high watermark as the
base offset of the last batch + 1 (Tansu, see NOTES.md) then show every record
to readers that trust the watermark. Paced, it sends what it holds whenever the
:class:`Pacer` waits (:meth:`KafkaWriter.release`): a held record otherwise
reached the broker only with its partition's next record, seconds after its
``ts`` on a quiet partition, while the other topic's later events of the same
group were already read (the job applied them first: MODEL_DIVERGENCE alerts
on the demo's own traffic).

May import: confluent_kafka and fencewatch.state (the Avro codec of the declared events).
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Callable
from typing import IO, Any

from fencewatch.sim.emit import HEARTBEATS, OFFSETS

__all__ = ["AvroContainerWriter", "AvroFileWriter", "JsonLinesWriter", "KafkaWriter", "Pacer", "murmur2_partition"]

log = logging.getLogger(__name__)


class JsonLinesWriter:
    """Write JSON strings as lines; buffered (the emitter already built the strings)."""

    def __init__(self, stream: IO[str], *, buffer_lines: int = 8192) -> None:
        self._stream = stream
        self._buffer: list[str] = []
        self._limit = buffer_lines
        self.count = 0

    def write(self, kind: int, key: str, line: str) -> None:
        buffer = self._buffer
        buffer.append(line)
        if len(buffer) >= self._limit:
            self.flush()

    def flush(self) -> None:
        if self._buffer:
            self.count += len(self._buffer)
            self._buffer.append("")
            self._stream.write("\n".join(self._buffer))
            self._buffer.clear()
            self._stream.flush()

    def close(self) -> None:
        self.flush()


class AvroContainerWriter:
    """An Avro object container file of FencewatchEvent (null codec), written with the compiled encoder."""

    def __init__(self, stream: IO[bytes], *, block_records: int = 4096) -> None:
        from fencewatch.state.avro_codec import EVENT_SCHEMA, encode_body_into, write_long

        self._encode = encode_body_into
        self._write_long = write_long
        self._stream = stream
        self._sync = os.urandom(16)
        self._block = bytearray()
        self._count = 0
        self._limit = block_records
        header = bytearray(b"Obj\x01")
        meta = {"avro.schema": json.dumps(EVENT_SCHEMA).encode(), "avro.codec": b"null"}
        write_long(len(meta), header)
        for key, value in meta.items():
            write_long(len(key), header)
            header += key.encode()
            write_long(len(value), header)
            header += value
        header.append(0)
        header += self._sync
        stream.write(header)

    def write(self, event: dict[str, Any]) -> None:
        self._encode(event, self._block)
        self._count += 1
        if self._count >= self._limit:
            self.flush()

    def flush(self) -> None:
        if self._count:
            head = bytearray()
            self._write_long(self._count, head)
            self._write_long(len(self._block), head)
            self._stream.write(head + self._block + self._sync)
            self._block = bytearray()
            self._count = 0
        self._stream.flush()


class AvroFileWriter:
    """Write event dicts to an Avro object container file (schema embedded, null codec)."""

    def __init__(self, stream: IO[bytes]) -> None:
        self._writer = AvroContainerWriter(stream)
        self.count = 0

    def write(self, kind: int, key: str, event: dict[str, Any]) -> None:
        self._writer.write(event)
        self.count += 1

    def close(self) -> None:
        self._writer.flush()


def _murmur2(data: bytes) -> int:
    """Kafka's ``Utils.murmur2`` (the Java client's default partitioner hash)."""
    length = len(data)
    seed = 0x9747B28C
    m = 0x5BD1E995
    r = 24
    h = (seed ^ length) & 0xFFFFFFFF
    length4 = length // 4
    for i in range(length4):
        i4 = i * 4
        k = data[i4] | (data[i4 + 1] << 8) | (data[i4 + 2] << 16) | (data[i4 + 3] << 24)
        k = (k * m) & 0xFFFFFFFF
        k ^= k >> r
        k = (k * m) & 0xFFFFFFFF
        h = (h * m) & 0xFFFFFFFF
        h ^= k
    extra = length % 4
    index = length & ~3
    if extra == 3:
        h ^= data[index + 2] << 16
    if extra >= 2:
        h ^= data[index + 1] << 8
    if extra >= 1:
        h ^= data[index]
        h = (h * m) & 0xFFFFFFFF
    h ^= h >> 13
    h = (h * m) & 0xFFFFFFFF
    h ^= h >> 15
    return h


def murmur2_partition(key: bytes, partitions: int) -> int:
    """The partition Java's default partitioner picks for a keyed record."""
    return (_murmur2(key) & 0x7FFFFFFF) % partitions


class KafkaWriter:
    """Produce events to the heartbeats and offsets topics with confluent-kafka."""

    def __init__(
        self,
        bootstrap_servers: str,
        *,
        heartbeats_topic: str = "fencewatch.heartbeats",
        offsets_topic: str = "fencewatch.offsets",
        value_format: str = "json",
        avro_wire: str = "confluent",
        schema_id: int = 1,
        create_partitions: int = 4,
        producer_config: dict[str, Any] | None = None,
    ) -> None:
        from confluent_kafka import KafkaException, Producer

        from fencewatch.state.avro_codec import encode_avro

        if value_format not in ("json", "avro"):
            raise ValueError(f"unknown value format {value_format!r}; valid: json, avro")
        if avro_wire not in ("confluent", "plain"):
            raise ValueError(f"unknown Avro wire format {avro_wire!r}; valid: confluent, plain")
        config = {
            "bootstrap.servers": bootstrap_servers,
            # librdkafka's own lines through logging, never raw to stderr (a caller's logger wins)
            "logger": logging.getLogger("fencewatch.kafka.simulator"),
            "linger.ms": 20,
            "batch.num.messages": 10000,
            "queue.buffering.max.messages": 500000,
            "queue.buffering.max.kbytes": 1048576,
            "enable.idempotence": False,
            # Report failures only: a Python callback per delivered record costs more than producing it.
            "delivery.report.only.error": True,
        }
        config.update(producer_config or {})
        self._topics = {HEARTBEATS: heartbeats_topic, OFFSETS: offsets_topic}
        self.failed = 0
        self.count = 0
        self._producer = Producer({**config, "on_delivery": self._on_delivery})
        try:
            self._counts = self._ensure_topics(config, create_partitions)
        except KafkaException as exc:
            self._producer = None
            raise RuntimeError(f"cannot use topics {heartbeats_topic}, {offsets_topic} at {bootstrap_servers}: {exc}") from exc
        self._avro = value_format == "avro"
        self._encode = encode_avro
        self._wire = avro_wire
        self._schema_id = schema_id
        # Per kind: key -> (topic, partition, key bytes, held-record slot).
        self._routes: dict[int, dict[str, tuple[str, int, bytes, tuple[int, int]]]] = {HEARTBEATS: {}, OFFSETS: {}}
        # (kind, partition) -> (route, value) of the partition's latest record, held back until the
        # partition's next record or close().
        self._held: dict[tuple[int, int], tuple[tuple, bytes]] = {}

    def _ensure_topics(self, config: dict[str, Any], partitions: int) -> dict[int, int]:
        """Partition counts of the two topics; create missing ones (logged)."""
        from confluent_kafka.admin import AdminClient, NewTopic

        # librdkafka's socket.timeout.ms bounds a metadata request; 15 s at most.
        timeout = min(15.0, float(config.get("socket.timeout.ms", 60000)) / 1000)
        metadata = self._producer.list_topics(timeout=timeout)
        missing = [t for t in set(self._topics.values()) if t not in metadata.topics or metadata.topics[t].error is not None]
        if missing:
            admin_config = {
                k: v for k, v in config.items() if not k.startswith(("linger", "batch", "queue", "enable.idem", "delivery."))
            }
            admin = AdminClient(admin_config)
            log.info("creating topics %s with %d partitions", ", ".join(sorted(missing)), partitions)
            futures = admin.create_topics([NewTopic(t, num_partitions=partitions, replication_factor=1) for t in sorted(missing)])
            for topic, future in futures.items():
                try:
                    future.result(timeout=30)
                except Exception as exc:  # TOPIC_ALREADY_EXISTS from a concurrent creator is fine
                    if "TOPIC_ALREADY_EXISTS" not in str(exc):
                        raise
            deadline = time.monotonic() + 30
            while True:
                metadata = self._producer.list_topics(timeout=timeout)
                if all(t in metadata.topics and metadata.topics[t].partitions for t in missing):
                    break
                if time.monotonic() > deadline:
                    raise RuntimeError(f"topics {missing} not visible after creation")
                time.sleep(0.1)
        return {kind: len(metadata.topics[topic].partitions) for kind, topic in self._topics.items()}

    def _on_delivery(self, err, _msg) -> None:
        if err is not None:
            self.failed += 1
            if self.failed <= 10:
                log.error("delivery failed: %s", err)

    def _produce(self, topic: str, partition: int, key: bytes, value: bytes) -> None:
        producer = self._producer
        while True:
            try:
                producer.produce(topic, value, key, partition)
                return
            except BufferError:
                producer.poll(0.05)

    def write(self, kind: int, key: str, payload: Any) -> None:
        route = self._routes[kind].get(key)
        if route is None:
            key_bytes = key.encode()
            partition = murmur2_partition(key_bytes, self._counts[kind])
            route = self._routes[kind][key] = (self._topics[kind], partition, key_bytes, (kind, partition))
        if self._avro:
            value = self._encode(payload, wire=self._wire, schema_id=self._schema_id)
        else:
            value = payload.encode()
        held = self._held
        slot = route[3]
        previous = held.get(slot)
        held[slot] = (route, value)
        self.count += 1
        if previous is not None:
            before = previous[0]
            try:
                self._producer.produce(before[0], previous[1], before[2], before[1])
            except BufferError:
                self._produce(before[0], before[1], before[2], previous[1])
            if not self.count & 1023:
                self._producer.poll(0)

    def release(self) -> None:
        """Send every held record now: the writer is paced and the simulation waits for the wall
        clock, so every record written so far is due (held, it would wait for its partition's
        next record, however long that takes). close() then holds back only what came after."""
        held = self._held
        if not held:
            return
        for route, value in held.values():
            self._produce(route[0], route[1], route[2], value)
        held.clear()
        self._producer.poll(0)

    def close(self) -> None:
        """Flush everything, then send each partition's last record alone (watermark quirk)."""
        producer = self._producer
        remaining = producer.flush(60)
        for _, (route, value) in sorted(self._held.items(), key=lambda item: item[0]):
            self._produce(route[0], route[1], route[2], value)
            remaining = producer.flush(30)
        self._held.clear()
        # Drop the producer now: it holds our delivery callback (a cycle the GC would free late,
        # leaving a client that keeps reconnecting to a broker that may be gone).
        self._producer = None
        if remaining:
            raise RuntimeError(f"{remaining} records still queued after flush")
        if self.failed:
            raise RuntimeError(f"{self.failed} records failed delivery")


class Pacer:
    """Throttle a run: ``rate`` events/s of wall time, or simulated time at ``speed`` x real time."""

    def __init__(self, *, rate: float | None = None, realtime_speed: float | None = None, start_ts: int = 0,
                 sleep: Callable[[float], None] = time.sleep, clock: Callable[[], float] = time.monotonic,
                 on_wait: Callable[[], None] | None = None) -> None:
        """``on_wait``: called before each sleep (the writer's :meth:`KafkaWriter.release`: what
        was written is due now)."""
        if (rate is None) == (realtime_speed is None):
            raise ValueError("give exactly one of rate and realtime_speed")
        if rate is not None and rate <= 0:
            raise ValueError(f"rate must be > 0 events/s, got {rate}")
        if realtime_speed is not None and realtime_speed <= 0:
            raise ValueError(f"speed must be > 0, got {realtime_speed}")
        self._rate = rate
        self._speed = realtime_speed
        self._start_ts = start_ts
        self._sleep = sleep
        self._clock = clock
        self._on_wait = on_wait
        self._t0 = clock()

    def __call__(self, events: int, sim_ts: int) -> None:
        if self._rate is not None:
            due = self._t0 + events / self._rate
        else:
            due = self._t0 + (sim_ts - self._start_ts) / 1000.0 / self._speed
        delay = due - self._clock()
        if delay > 0.001:
            if self._on_wait is not None:
                self._on_wait()
                delay = due - self._clock()
                if delay <= 0.001:
                    return
            self._sleep(delay)

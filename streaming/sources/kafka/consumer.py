"""Reading on the executors: one consumer per offset range, records into Arrow batches.

What lives here: :func:`read_split` / :func:`read_partition` (what the source's ``read`` runs),
the per-range consumer (:class:`_RangeRead`: assigned at the range start, no group join, done
when its position reaches the range end), :class:`BatchBuilder` (records column-wise into
``pyarrow.RecordBatch``es of Spark's Kafka schema) and :func:`kafka_schema` itself.

Offsets have gaps (compaction, transaction markers, aborted records), so a range is done by the
consumer's position, never by counting records.

Imports: the standard library, pyspark, pyarrow, numpy, confluent_kafka and this package.
"""

from __future__ import annotations

import bisect
import itertools
import logging
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from fencewatch.streaming.config.kafka import redact
from fencewatch.streaming.sources.kafka.client import CONFIG_ERRORS, ClientLog, consumer_config
from fencewatch.streaming.sources.kafka.options import data_loss
from fencewatch.streaming.sources.kafka.planning import KafkaInputPartition, KafkaInputSplit

log = logging.getLogger(__name__)

#: Rows per Arrow batch handed to Spark from ``read``.
ARROW_BATCH_ROWS = 32_768
#: Most records asked of librdkafka per ``consume`` call.
CONSUME_BATCH = 10_000
#: Ranges of a task whose consumers are assigned at once (:func:`read_split`).
RANGES_AHEAD = 4
#: How long one ``consume`` call may block, seconds. Reads end by position,
#: so this only costs time when a range ends in an offset gap.
CONSUME_WAIT_S = 0.05


def kafka_schema(include_headers: bool = False, include_caught_up: bool = False) -> StructType:
    """Spark's Kafka source schema (``KafkaRecordToRowConverter.kafkaSchema``); all nullable.
    ``include_caught_up`` (option ``includeCaughtUp``, this source's own) adds ``caught_up``:
    true on every row of a micro-batch that reads each subscribed partition up to the end offsets
    found when the batch was planned (nothing available was left for a later batch)."""
    fields = [
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),
        StructField("timestampType", IntegerType()),
    ]
    if include_headers:
        header = StructType([StructField("key", StringType()), StructField("value", BinaryType())])
        fields.append(StructField("headers", ArrayType(header)))
    if include_caught_up:
        fields.append(StructField("caught_up", BooleanType()))
    return StructType(fields)



def read_split(split: KafkaInputPartition | KafkaInputSplit,
               flush: Callable[["BatchBuilder"], Any] | None = None) -> Iterator[Any]:
    """The batches of each range of ``split`` (or the one range; see :func:`read_partition`), one
    after the other. Each range gets a consumer of its own: one consumer assigned range after range was
    much slower (librdkafka restarts its fetch at each assignment; docs/kafka-source.md). The
    next :data:`RANGES_AHEAD` ranges' consumers are assigned before the first is read, so their
    connections, metadata and first fetches overlap instead of queueing behind the range before
    (each took 20-70 ms against a local broker, and a live micro-batch's task read four ranges
    one after the other); a task over a topic of many partitions still opens only a few at once."""
    waiting = iter(split.ranges if isinstance(split, KafkaInputSplit) else (split,))
    readings: deque[_RangeRead] = deque()

    def assign_ahead() -> None:
        while len(readings) < RANGES_AHEAD:
            part = next(waiting, None)
            if part is None:
                return
            readings.append(_RangeRead(part))
            readings[-1].start()

    try:
        assign_ahead()
        while readings:
            reading = readings[0]
            reading.resume()
            yield from _read_range(reading, flush)
            readings.popleft().close()
            assign_ahead()
    finally:
        for reading in readings:
            reading.close()


def read_partition(part: KafkaInputPartition, flush: Callable[["BatchBuilder"], Any] | None = None
                   ) -> Iterator[Any]:
    """Yield ``pyarrow.RecordBatch``es with the records of ``part``'s offset range.

    Stops when the consumer position reaches ``until_offset`` (control records
    and compaction leave offset gaps, so counting records would hang).
    ``flush``: turns the records gathered so far (a :class:`BatchBuilder`, emptied after) into
    the batch to yield, or None for nothing; default: Spark's Kafka schema
    (:meth:`BatchBuilder.flush`). A caller with a schema of its own transforms the records here,
    in the task that reads them, instead of in a stage after the source.
    """
    return read_split(part, flush)


def _read_range(reading: _RangeRead, flush: Callable[["BatchBuilder"], Any] | None) -> Iterator[Any]:
    """The batches of a started range, read to its end."""
    from confluent_kafka import KafkaException

    flush = flush or BatchBuilder.flush
    builder = reading.builder
    try:
        while reading.position < reading.until:
            reading.step()
            if builder.rows >= ARROW_BATCH_ROWS:
                batch = flush(builder)
                if batch is not None:
                    yield batch
        if builder.rows:
            batch = flush(builder)
            if batch is not None:
                yield batch
    except KafkaException as exc:
        raise reading.failed(exc) from exc


class _RangeRead:
    """One range's consumer, the records it has gathered, and how far it has read."""

    def __init__(self, part: KafkaInputPartition) -> None:
        from confluent_kafka import Consumer
        from pyspark.sql.pandas.types import to_arrow_schema

        spec = part.spec
        schema = to_arrow_schema(kafka_schema(spec.include_headers, spec.include_caught_up), timezone="UTC")
        self.part = part
        self.where = f"{part.topic}[{part.partition}]"
        self.position = part.from_offset
        self.until = part.until_offset
        self.client_errors: list[str] = []
        self.fatal: list[Any] = []
        self.client_log = ClientLog()
        self.consumer = Consumer(consumer_config(spec, self._on_error, self.client_log))
        self.builder = BatchBuilder(part.topic, part.partition, schema, spec.include_headers,
                                    part.caught_up if spec.include_caught_up else None)
        self.last_progress = time.monotonic()

    def _on_error(self, err) -> None:
        # Client-level errors (auth, TLS, all brokers down) come here, not as messages.
        self.client_errors.append(str(err))
        del self.client_errors[:-5]
        if err.fatal() or err.code() in CONFIG_ERRORS:
            self.fatal.append(err)

    def start(self) -> None:
        from confluent_kafka import KafkaException, TopicPartition

        try:
            self.consumer.assign([TopicPartition(self.part.topic, self.part.partition, self.position)])
        except KafkaException as exc:
            raise self.failed(exc) from exc
        self.last_progress = time.monotonic()

    def failed(self, exc: Exception) -> RuntimeError:
        """The task's error for a client exception, naming where the range was."""
        return RuntimeError(f"reading {self.where} at offset {self.position} failed: {exc}")

    def resume(self) -> None:
        """Its turn to be read (:func:`read_split`): the wait for the ranges before it is not a
        stall of its own (``kafkaConsumer.pollTimeoutMs`` counts from now)."""
        self.last_progress = time.monotonic()

    def close(self) -> None:
        """Once: a range read to its end stops fetching while the next ones are read."""
        if self.consumer is not None:
            consumer, self.consumer = self.consumer, None
            consumer.close()

    def step(self) -> None:
        """One ``consume`` call: its records in range to the builder, the position past them."""
        from confluent_kafka import Message, TopicPartition

        part, spec, until = self.part, self.part.spec, self.until
        messages = self.consumer.consume(min(until - self.position, CONSUME_BATCH), timeout=CONSUME_WAIT_S)
        before = self.position
        if messages and not any(map(Message.error, messages)):
            self._take_all(messages)
        else:
            self._take_each(messages)
        if self.fatal:
            raise RuntimeError(f"cannot read {self.where}: {self.fatal[0]} (check kafka.security.protocol, SASL "
                               f"and SSL settings: {redact(dict(spec.client_config))})")
        if self.position < until and not messages:
            # Nothing delivered: the range may end in control records or other gaps.
            current = self.consumer.position([TopicPartition(part.topic, part.partition)])[0].offset
            if current > self.position:
                self.position = current
        if self.position > before:
            self.last_progress = time.monotonic()
        elif time.monotonic() - self.last_progress > spec.poll_timeout_ms / 1000.0:
            raise TimeoutError(
                f"no progress reading {self.where} at offset {self.position} (range {part.from_offset}..{until}) "
                f"for {spec.poll_timeout_ms} ms (kafkaConsumer.pollTimeoutMs); last client errors: "
                f"{'; '.join(self.client_errors) or 'none'}; client log: {self.client_log.last()}")

    def _take_all(self, messages: Sequence[Any]) -> None:
        """Fast path, no error among ``messages``: column-wise, no Python code per record.
        Offsets ascend within a partition, so the in-range slice is found by bisection."""
        from confluent_kafka import Message

        position, until = self.position, self.until
        offsets = list(map(Message.offset, messages))
        lo = bisect.bisect_left(offsets, position) if offsets[0] < position else 0
        hi = len(offsets)
        if offsets[-1] >= until:
            hi = bisect.bisect_left(offsets, until)
        if hi > lo:
            self.builder.extend(messages[lo:hi], offsets[lo:hi])
            self.position = offsets[hi - 1] + 1
        if hi < len(offsets):
            self.position = until

    def _take_each(self, messages: Sequence[Any]) -> None:
        """Record by record, errors handled where they stand."""
        until = self.until
        for msg in messages:
            err = msg.error()
            if err is not None:
                self.position = _on_read_error(self.consumer, err, self.part, self.position)
                if self.position >= until:
                    break
                continue
            offset = msg.offset()
            if offset >= until:
                self.position = until
                break
            if offset < self.position:
                continue  # re-delivered after a re-assign; already emitted
            self.builder.extend([msg], [offset])
            self.position = offset + 1


def _on_read_error(consumer, err, part: KafkaInputPartition, position: int) -> int:
    """Handle a per-partition consumer error; returns the position to continue from."""
    from confluent_kafka import KafkaError, KafkaException, TopicPartition

    where = f"{part.topic}[{part.partition}]"
    code = err.code()
    if code == KafkaError._PARTITION_EOF:
        return position
    if code == KafkaError._AUTO_OFFSET_RESET or code == KafkaError.OFFSET_OUT_OF_RANGE:
        low, high = consumer.get_watermark_offsets(TopicPartition(part.topic, part.partition),
                                                   timeout=10, cached=False)
        if low > position:
            data_loss(part.spec.fail_on_data_loss,
                       f"{where} offsets {position}..{min(low, part.until_offset) - 1} were deleted before they "
                       f"were read (log start offset is now {low})")
            if low >= part.until_offset:
                return part.until_offset
            consumer.assign([TopicPartition(part.topic, part.partition, low)])
            return low
        raise RuntimeError(f"offset {position} of {where} is out of range [{low}, {high}): {err}")
    if code in (KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_PARTITION, KafkaError._UNKNOWN_TOPIC):
        data_loss(part.spec.fail_on_data_loss,
                   f"{where} disappeared while offsets {position}..{part.until_offset - 1} were unread")
        return part.until_offset
    if err.fatal() or not err.retriable():
        raise KafkaException(err)
    log.debug("retriable error reading %s: %s", where, err)
    return position



class BatchBuilder:
    """Column lists for one Arrow batch of one topic-partition."""

    __slots__ = ("topic", "partition", "schema", "headers_on", "caught_up", "keys", "values", "offsets", "stamps",
                 "headers")

    def __init__(self, topic: str, partition: int, schema, include_headers: bool,
                 caught_up: bool | None = None) -> None:
        self.topic = topic
        self.partition = partition
        self.schema = schema
        self.headers_on = include_headers
        self.caught_up = caught_up  # None: no such column
        self._reset()

    def _reset(self) -> None:
        self.keys: list[bytes | None] = []
        self.values: list[bytes | None] = []
        self.offsets: list[int] = []
        self.stamps: list[tuple[int, int]] = []
        self.headers: list[list[dict[str, Any]] | None] = []

    @property
    def rows(self) -> int:
        return len(self.offsets)

    def extend(self, messages: Sequence[Any], offsets: Sequence[int]) -> None:
        from confluent_kafka import Message

        self.keys.extend(map(Message.key, messages))
        self.values.extend(map(Message.value, messages))
        self.offsets.extend(offsets)
        self.stamps.extend(map(Message.timestamp, messages))
        if self.headers_on:
            for msg in messages:
                headers = msg.headers()
                self.headers.append([{"key": k, "value": v} for k, v in headers] if headers else None)

    def clear(self) -> None:
        self._reset()

    def flush(self):
        import numpy as np
        import pyarrow as pa

        n = len(self.offsets)
        # (librdkafka type, ms): types 0 none, 1 create time, 2 log append time;
        # Spark/Java number them -1, 0, 1. No timestamp -> null.
        stamps = np.array(self.stamps, dtype=np.int64).reshape(n, 2)
        types = stamps[:, 0] - 1
        arrays = [
            pa.array(self.keys, type=pa.binary()),
            pa.array(self.values, type=pa.binary()),
            pa.array(itertools.repeat(self.topic, n), type=pa.string(), size=n),
            pa.array(np.full(n, self.partition, dtype=np.int32)),
            pa.array(self.offsets, type=pa.int64()),
            pa.array(stamps[:, 1] * 1000, type=self.schema.field("timestamp").type, mask=types < 0),
            pa.array(types.astype(np.int32)),
        ]
        if self.headers_on:
            arrays.append(pa.array(self.headers, type=self.schema.field("headers").type))
        if self.caught_up is not None:
            arrays.append(pa.array(np.full(n, self.caught_up, dtype=bool)))
        batch = pa.RecordBatch.from_arrays(arrays, schema=self.schema)
        self._reset()
        return batch



"""A Kafka streaming source for Spark written with the Python Data Source API.

What lives here: ``fencewatch-kafka``, a Spark 4 Python data source over
confluent-kafka with the output schema and the options of Spark's own Kafka
connector (``format("kafka")``), for machines where that connector's jars
cannot be fetched; and :func:`read_kafka_stream` / :func:`read_kafka_batch`,
which use Spark's connector when its JVM class is loadable and this source
otherwise. docs/kafka-source.md lists options, security settings and limits.

How offsets flow (the Spark checkpoint owns them; Kafka group offsets are
never read or committed):
- ``initialOffset`` resolves ``startingOffsets`` to concrete offsets;
- ``latestOffset(start, limit)`` asks the brokers for end offsets (the last
  stable offset under ``read_committed``), applies ``maxOffsetsPerTrigger``
  and the ``Trigger.AvailableNow`` target, and checks for data loss;
- ``partitions(start, end)`` turns ``[start, end)`` per topic-partition into
  input partitions (split when large), each carrying everything ``read`` needs;
- ``read`` runs on executors: one consumer assigned at the range start,
  reading until its position reaches the range end. Offsets may have gaps
  (compaction, transaction markers, aborted records), so "done" is decided by
  the consumer position, never by counting records.

End offsets come from ListOffsets, like Spark's connector. Tansu (the test
broker) may under-report them by one producer batch until the next produce:
those records are read in a later micro-batch, never skipped or read twice.

Imports: pyspark, pyarrow, confluent_kafka, and kafka_config from this package.
"""

from __future__ import annotations

import bisect
import itertools
import json
import logging
import math
import os
import re
import sys
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
)
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

from fencewatch.streaming.config.kafka import KafkaConfigError, redact, to_java, to_librdkafka
from fencewatch.streaming.sources.pacing import BatchPacer

try:  # Spark >= 4.2
    from pyspark.sql.streaming.datasource import (
        ReadAllAvailable,
        ReadMaxRows,
        SupportsTriggerAvailableNow,
    )
except ImportError:  # pragma: no cover - Spark 4.0/4.1: no admission control, no AvailableNow
    ReadAllAvailable = ReadMaxRows = None  # type: ignore[assignment,misc]

    class SupportsTriggerAvailableNow:  # type: ignore[no-redef]
        """Stand-in so the class statement below works on Spark 4.0/4.1."""


log = logging.getLogger(__name__)

#: Short name to use with ``spark.readStream.format(...)``.
SHORT_NAME = "fencewatch-kafka"
#: Spark's own connector; present on clusters started with ``--packages``.
JVM_PROVIDER_CLASS = "org.apache.spark.sql.kafka010.KafkaSourceProvider"

#: Spark's sentinels inside a startingOffsets/endingOffsets JSON.
EARLIEST = -2
LATEST = -1

#: Rows per Arrow batch handed to Spark from ``read``.
ARROW_BATCH_ROWS = 32_768
#: Most records asked of librdkafka per ``consume`` call.
CONSUME_BATCH = 10_000
#: How long one ``consume`` call may block, seconds. Reads end by position,
#: so this only costs time when a range ends in an offset gap.
CONSUME_WAIT_S = 0.05

TopicPartitionKey = tuple[str, int]

# --------------------------------------------------------------------------- schema


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


# --------------------------------------------------------------------------- errors


class KafkaSourceError(ValueError):
    """A source option is missing or invalid; raised when the DataFrame is defined."""


class KafkaDataLossError(RuntimeError):
    """Records the query was due to read are gone (``failOnDataLoss=true``)."""


_DATA_LOSS_HINT = (
    "Records were lost before the query read them: they aged out (retention), or the topic "
    "was deleted or re-created. If the query should go on and skip what is missing, set the "
    "source option failOnDataLoss=false (a warning is logged for every gap instead)."
)


def _data_loss(fail: bool, message: str) -> None:
    if fail:
        raise KafkaDataLossError(f"{message}. {_DATA_LOSS_HINT}")
    log.warning("%s; skipping (failOnDataLoss=false)", message)


def _tp(tp: TopicPartitionKey) -> str:
    return f"{tp[0]}[{tp[1]}]"


# --------------------------------------------------------------------------- options

_KNOWN_OPTIONS = {
    "subscribe": "subscribe",
    "subscribepattern": "subscribePattern",
    "assign": "assign",
    "startingoffsets": "startingOffsets",
    "endingoffsets": "endingOffsets",
    "failondataloss": "failOnDataLoss",
    "maxoffsetspertrigger": "maxOffsetsPerTrigger",
    # ours: the per-batch limit adapts to the job's speed (sources/pacing.py)
    "targetbatchdurationms": "targetBatchDurationMs",
    "initialoffsetspertrigger": "initialOffsetsPerTrigger",
    "taskspertrigger": "tasksPerTrigger",  # ours: a micro-batch read in this many balanced tasks
    "minpartitions": "minPartitions",
    "maxrecordsperpartition": "maxRecordsPerPartition",
    "includeheaders": "includeHeaders",
    "includecaughtup": "includeCaughtUp",
    "groupidprefix": "groupIdPrefix",
    "kafkaconsumer.polltimeoutms": "kafkaConsumer.pollTimeoutMs",
    "fetchoffset.numretries": "fetchOffset.numRetries",
    "fetchoffset.retryintervalms": "fetchOffset.retryIntervalMs",
}
# Options of Spark's connector this source does not implement: refuse them
# clearly rather than run with different semantics.
_SPARK_ONLY_OPTIONS = {
    "startingoffsetsbytimestamp": "startingOffsetsByTimestamp",
    "startingtimestamp": "startingTimestamp",
    "startingoffsetsbytimestampstrategy": "startingOffsetsByTimestampStrategy",
    "endingoffsetsbytimestamp": "endingOffsetsByTimestamp",
    "endingtimestamp": "endingTimestamp",
    "minoffsetspertrigger": "minOffsetsPerTrigger",
    "maxtriggerdelay": "maxTriggerDelay",
}
_ISOLATION_LEVELS = ("read_uncommitted", "read_committed")


@dataclass(frozen=True, slots=True)
class SourceOptions:
    """Validated source options. ``client_config`` is librdkafka's (secrets inside: see __repr__)."""

    client_config: tuple[tuple[str, str], ...]
    group_id: str
    isolation_level: str
    subscribe: tuple[str, ...] = ()
    subscribe_pattern: str | None = None
    assign: tuple[TopicPartitionKey, ...] = ()
    starting_offsets: str | tuple[tuple[TopicPartitionKey, int], ...] = "latest"
    ending_offsets: str | tuple[tuple[TopicPartitionKey, int], ...] | None = None
    fail_on_data_loss: bool = True
    max_offsets_per_trigger: int | None = None
    target_batch_duration_ms: int | None = None  # set: adaptive limit, capped by max_offsets_per_trigger
    initial_offsets_per_trigger: int | None = None
    tasks_per_trigger: int | None = None  # set: balance() the ranges into this many tasks
    min_partitions: int | None = None
    max_records_per_partition: int | None = None
    include_headers: bool = False
    include_caught_up: bool = False
    poll_timeout_ms: int = 120_000
    fetch_offset_num_retries: int = 3
    fetch_offset_retry_interval_ms: int = 10

    def config(self) -> dict[str, str]:
        return dict(self.client_config)

    def __repr__(self) -> str:
        return (f"SourceOptions(subscription={self.describe_subscription()}, "
                f"client_config={redact(self.config())}, starting_offsets={self.starting_offsets!r}, "
                f"fail_on_data_loss={self.fail_on_data_loss}, "
                f"max_offsets_per_trigger={self.max_offsets_per_trigger})")

    def describe_subscription(self) -> str:
        if self.subscribe:
            return "subscribe=" + ",".join(self.subscribe)
        if self.subscribe_pattern is not None:
            return f"subscribePattern={self.subscribe_pattern}"
        return "assign=" + ",".join(_tp(tp) for tp in self.assign)


def _parse_bool(name: str, value: str) -> bool:
    lowered = value.strip().lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    raise KafkaSourceError(f"option {name} must be true or false, got {value!r}")


def _parse_positive(name: str, value: str, *, allow_zero: bool = False) -> int:
    try:
        number = int(value.strip())
    except ValueError:
        raise KafkaSourceError(f"option {name} must be a positive integer, got {value!r}") from None
    if number < 0 or (number == 0 and not allow_zero):
        raise KafkaSourceError(f"option {name} must be a positive integer, got {value!r}")
    return number


def _parse_offsets_json(name: str, value: str) -> tuple[tuple[TopicPartitionKey, int], ...]:
    """``{"topic": {"0": 23, "1": -2}}`` -> sorted ((topic, partition), offset) pairs."""
    try:
        parsed = json.loads(value)
    except json.JSONDecodeError as exc:
        raise KafkaSourceError(
            f"option {name} must be 'earliest', 'latest' or JSON like "
            f'{{"topicA":{{"0":23,"1":-2}}}} (-2 = earliest, -1 = latest); got {value!r} ({exc.msg})'
        ) from None
    if not isinstance(parsed, dict) or not parsed:
        raise KafkaSourceError(f"option {name} JSON must be a non-empty object of topics, got {value!r}")
    pairs: list[tuple[TopicPartitionKey, int]] = []
    for topic, partitions in parsed.items():
        if not isinstance(partitions, dict):
            raise KafkaSourceError(f"option {name}: topic {topic!r} must map partitions to offsets")
        for partition, offset in partitions.items():
            try:
                p = int(partition)
            except (TypeError, ValueError):
                raise KafkaSourceError(f"option {name}: partition {partition!r} of {topic!r} is not a number") from None
            if not isinstance(offset, int) or isinstance(offset, bool) or offset < EARLIEST:
                raise KafkaSourceError(
                    f"option {name}: offset for {topic}[{p}] must be >= 0, -2 (earliest) or -1 (latest), got {offset!r}")
            pairs.append(((topic, p), offset))
    return tuple(sorted(pairs))


def _parse_assign(value: str) -> tuple[TopicPartitionKey, ...]:
    try:
        parsed = json.loads(value)
    except json.JSONDecodeError:
        parsed = None
    if not isinstance(parsed, dict) or not parsed or not all(
        isinstance(ps, list) and ps and all(isinstance(p, int) and not isinstance(p, bool) and p >= 0 for p in ps)
        for ps in parsed.values()
    ):
        raise KafkaSourceError(f'option assign must be JSON like {{"topicA":[0,1],"topicB":[2]}}, got {value!r}')
    return tuple(sorted({(t, p) for t, ps in parsed.items() for p in ps}))


def parse_options(options: Mapping[str, str], *, streaming: bool = True) -> SourceOptions:
    """Validate Spark-style Kafka source options; every problem is a :class:`KafkaSourceError`."""
    source: dict[str, str] = {}
    kafka: dict[str, str] = {}
    for raw_key, raw_value in options.items():
        key = raw_key.strip().lower()
        value = "" if raw_value is None else str(raw_value)
        if key.startswith("kafka.") and key != "kafkaconsumer.polltimeoutms":
            kafka[key[len("kafka."):]] = value
        elif key in _KNOWN_OPTIONS:
            source[key] = value
        elif key in _SPARK_ONLY_OPTIONS:
            raise KafkaSourceError(
                f"option {_SPARK_ONLY_OPTIONS[key]} is supported by Spark's own Kafka connector "
                f"(format('kafka'), needs spark-sql-kafka-0-10 on the classpath) but not by {SHORT_NAME}")
        else:
            valid = ", ".join(sorted(_KNOWN_OPTIONS.values()))
            raise KafkaSourceError(f"unknown option {raw_key!r} for {SHORT_NAME}; valid: {valid}, kafka.*")

    strategies = [k for k in ("subscribe", "subscribepattern", "assign") if k in source]
    if len(strategies) != 1:
        raise KafkaSourceError(
            ("one" if not strategies else "only one") +
            " of the options subscribe, subscribePattern, assign must be set")
    subscribe: tuple[str, ...] = ()
    pattern: str | None = None
    assign: tuple[TopicPartitionKey, ...] = ()
    if "subscribe" in source:
        subscribe = tuple(dict.fromkeys(t.strip() for t in source["subscribe"].split(",") if t.strip()))
        if not subscribe:
            raise KafkaSourceError(f"option subscribe names no topics: {source['subscribe']!r}")
    elif "subscribepattern" in source:
        pattern = source["subscribepattern"].strip()
        if not pattern:
            raise KafkaSourceError("option subscribePattern is empty")
        try:
            re.compile(pattern)
        except re.error as exc:
            raise KafkaSourceError(f"option subscribePattern is not a valid regular expression: {exc}") from None
    else:
        assign = _parse_assign(source["assign"])

    if not kafka.get("bootstrap.servers", "").strip():
        raise KafkaSourceError("option kafka.bootstrap.servers must be set")

    starting_raw = source.get("startingoffsets", "latest" if streaming else "earliest").strip()
    starting: str | tuple[tuple[TopicPartitionKey, int], ...]
    if starting_raw.lower() in ("earliest", "latest"):
        starting = starting_raw.lower()
        if not streaming and starting == "latest":
            raise KafkaSourceError("startingOffsets=latest is not valid for batch queries; use earliest or JSON")
    else:
        starting = _parse_offsets_json("startingOffsets", starting_raw)
        if not streaming and any(o == LATEST for _, o in starting):
            raise KafkaSourceError("startingOffsets may not use -1 (latest) in batch queries")

    ending: str | tuple[tuple[TopicPartitionKey, int], ...] | None = None
    if "endingoffsets" in source:
        if streaming:
            raise KafkaSourceError("option endingOffsets is only valid for batch queries (spark.read)")
        ending_raw = source["endingoffsets"].strip()
        if ending_raw.lower() == "latest":
            ending = "latest"
        elif ending_raw.lower() == "earliest":
            raise KafkaSourceError("endingOffsets=earliest is not valid; use latest or JSON")
        else:
            ending = _parse_offsets_json("endingOffsets", ending_raw)
            if any(o == EARLIEST for _, o in ending):
                raise KafkaSourceError("endingOffsets may not use -2 (earliest)")
    elif not streaming:
        ending = "latest"

    fail_on_data_loss = _parse_bool("failOnDataLoss", source.get("failondataloss", "true"))
    max_offsets = (_parse_positive("maxOffsetsPerTrigger", source["maxoffsetspertrigger"])
                   if "maxoffsetspertrigger" in source else None)
    target_ms = (_parse_positive("targetBatchDurationMs", source["targetbatchdurationms"])
                 if "targetbatchdurationms" in source else None)
    initial = (_parse_positive("initialOffsetsPerTrigger", source["initialoffsetspertrigger"])
               if "initialoffsetspertrigger" in source else None)
    if initial is not None and target_ms is None:
        raise KafkaSourceError("initialOffsetsPerTrigger needs targetBatchDurationMs (the adaptive limit)")
    tasks = (_parse_positive("tasksPerTrigger", source["taskspertrigger"]) if "taskspertrigger" in source else None)
    min_partitions = (_parse_positive("minPartitions", source["minpartitions"])
                      if "minpartitions" in source else None)
    max_records = (_parse_positive("maxRecordsPerPartition", source["maxrecordsperpartition"])
                   if "maxrecordsperpartition" in source else None)
    include_headers = _parse_bool("includeHeaders", source.get("includeheaders", "false"))
    include_caught_up = _parse_bool("includeCaughtUp", source.get("includecaughtup", "false"))
    poll_timeout_ms = _parse_positive("kafkaConsumer.pollTimeoutMs",
                                      source.get("kafkaconsumer.polltimeoutms", "120000"))
    retries = _parse_positive("fetchOffset.numRetries", source.get("fetchoffset.numretries", "3"),
                              allow_zero=True)
    retry_ms = _parse_positive("fetchOffset.retryIntervalMs",
                               source.get("fetchoffset.retryintervalms", "10"), allow_zero=True)

    isolation = kafka.pop("isolation.level", "read_uncommitted").strip().lower()
    if isolation not in _ISOLATION_LEVELS:
        raise KafkaSourceError(f"kafka.isolation.level must be one of {', '.join(_ISOLATION_LEVELS)}, got {isolation!r}")
    group_id = kafka.pop("group.id", "").strip()
    prefix = source.get("groupidprefix", GROUP_ID_PREFIX).strip() or GROUP_ID_PREFIX
    if group_id:
        log.warning("kafka.group.id is set: every consumer of this query uses group %r (the source "
                    "never joins or commits to it, but broker ACLs will see it)", group_id)
    else:
        group_id = f"{prefix}-{uuid.uuid4()}"
    try:
        client, ignored = to_librdkafka(kafka)
    except KafkaConfigError as exc:
        raise KafkaSourceError(str(exc)) from None
    if ignored:
        log.warning("Kafka options with no effect on %s (Java consumer settings): %s",
                    SHORT_NAME, ", ".join(f"kafka.{k}" for k in sorted(ignored)))
    return SourceOptions(
        client_config=tuple(sorted(client.items())),
        group_id=group_id,
        isolation_level=isolation,
        subscribe=subscribe,
        subscribe_pattern=pattern,
        assign=assign,
        starting_offsets=starting,
        ending_offsets=ending,
        fail_on_data_loss=fail_on_data_loss,
        max_offsets_per_trigger=max_offsets,
        target_batch_duration_ms=target_ms,
        initial_offsets_per_trigger=initial,
        tasks_per_trigger=tasks,
        min_partitions=min_partitions,
        max_records_per_partition=max_records,
        include_headers=include_headers,
        include_caught_up=include_caught_up,
        poll_timeout_ms=poll_timeout_ms,
        fetch_offset_num_retries=retries,
        fetch_offset_retry_interval_ms=retry_ms,
    )


# --------------------------------------------------------------------------- offsets JSON


CAUGHT_UP = "fencewatch:caught_up"
"""Key of a planned end offset (``includeCaughtUp`` only, and only when true): the micro-batch reads
every partition to the end it had when planned. It travels with the offsets because Spark writes
them to ``offsets/N`` before the batch runs, so a batch run again after a crash is judged with the
mark its first attempt had (the rows' ``caught_up`` decides which held events go, docs/reliability.md).
``:`` cannot be in a topic name."""


def offsets_to_json(offsets: Mapping[TopicPartitionKey, int], *, caught_up: bool = False) -> dict:
    """Checkpoint form ``{"topic": {"0": 42}}``: topics and partitions sorted, then
    :data:`CAUGHT_UP` when ``caught_up``.

    Spark compares offsets as JSON strings, so equal offsets must always be
    written in the same order.
    """
    out: dict = {}
    for topic, partition in sorted(offsets):
        out.setdefault(topic, {})[str(partition)] = int(offsets[(topic, partition)])
    if caught_up:
        out[CAUGHT_UP] = True
    return out


def offsets_from_json(offsets: Mapping | None) -> dict[TopicPartitionKey, int]:
    if not offsets:
        return {}
    return {(topic, int(p)): int(o) for topic, parts in offsets.items() if topic != CAUGHT_UP
            for p, o in parts.items()}


def caught_up_mark(offsets: Mapping | None) -> bool:
    """Whether a planned end offset carries :data:`CAUGHT_UP`."""
    return bool(offsets) and offsets.get(CAUGHT_UP) is True


# --------------------------------------------------------------------------- planning helpers


def rate_limit(begin: Mapping[TopicPartitionKey, int], end: Mapping[TopicPartitionKey, int],
               max_offsets: int) -> dict[TopicPartitionKey, int]:
    """End offsets advancing at most ``max_offsets`` in total past ``begin``.

    Every partition with a backlog first gets one offset (so a quiet partition
    is never starved by a busy one), the rest is shared in proportion to the
    backlog with largest-remainder rounding, so the total is exactly
    ``min(max_offsets, backlog)``.
    """
    lag = {tp: max(0, end[tp] - begin.get(tp, end[tp])) for tp in end}
    total = sum(lag.values())
    if total <= max_offsets:
        return dict(end)
    quota = {tp: 0 for tp in end}
    lagging = sorted((tp for tp in end if lag[tp] > 0), key=lambda tp: (-lag[tp], tp))
    budget = max_offsets
    if budget >= len(lagging):
        for tp in lagging:
            quota[tp] = 1
        budget -= len(lagging)
    else:  # fewer offsets than busy partitions: the largest backlogs go first
        for tp in lagging[:budget]:
            quota[tp] = 1
        budget = 0
    rest = {tp: lag[tp] - quota[tp] for tp in lagging}
    rest_total = sum(rest.values())
    if budget and rest_total:
        shares = {tp: budget * rest[tp] / rest_total for tp in lagging}
        floors = {tp: min(rest[tp], math.floor(shares[tp])) for tp in lagging}
        left = budget - sum(floors.values())
        for tp in sorted(lagging, key=lambda tp: (-(shares[tp] - floors[tp]), tp)):
            if left <= 0:
                break
            if floors[tp] < rest[tp]:
                floors[tp] += 1
                left -= 1
        for tp in lagging:
            quota[tp] += floors[tp]
    return {tp: (begin[tp] + quota[tp]) if tp in begin else end[tp] for tp in end}


def split_ranges(ranges: Sequence[tuple[TopicPartitionKey, int, int]], *, min_partitions: int | None,
                 max_records: int | None) -> list[tuple[TopicPartitionKey, int, int]]:
    """Split ``(tp, from, until)`` ranges: at most ``max_records`` each, at least ``min_partitions`` in all."""
    sizes = [until - frm for _, frm, until in ranges]
    total = sum(sizes)
    out: list[tuple[TopicPartitionKey, int, int]] = []
    for (tp, frm, until), size in zip(ranges, sizes):
        parts = 1
        if max_records:
            parts = max(parts, math.ceil(size / max_records))
        if min_partitions and total and len(ranges) < min_partitions:
            parts = max(parts, math.ceil(min_partitions * size / total))
        parts = max(1, min(parts, size))
        step, extra = divmod(size, parts)
        start = frm
        for i in range(parts):
            stop = start + step + (1 if i < extra else 0)
            out.append((tp, start, stop))
            start = stop
    return out


# --------------------------------------------------------------------------- input partitions


@dataclass(frozen=True, slots=True)
class ReadSpec:
    """What an executor needs to read any range of one query; secrets redacted in repr."""

    client_config: tuple[tuple[str, str], ...]
    group_id: str
    isolation_level: str
    fail_on_data_loss: bool
    poll_timeout_ms: int
    include_headers: bool
    include_caught_up: bool = False

    def __repr__(self) -> str:
        return (f"ReadSpec(client_config={redact(dict(self.client_config))}, group_id={self.group_id!r}, "
                f"isolation_level={self.isolation_level!r}, fail_on_data_loss={self.fail_on_data_loss})")

    @classmethod
    def of(cls, options: SourceOptions) -> ReadSpec:
        return cls(options.client_config, options.group_id, options.isolation_level,
                   options.fail_on_data_loss, options.poll_timeout_ms, options.include_headers,
                   options.include_caught_up)


@dataclass(frozen=True, slots=True)
class KafkaInputPartition(InputPartition):
    """Offsets ``[from_offset, until_offset)`` of one topic-partition."""

    topic: str
    partition: int
    from_offset: int
    until_offset: int
    spec: ReadSpec = field(repr=False)
    caught_up: bool = False  # the micro-batch reads every partition to the end found at planning

    def __repr__(self) -> str:
        return f"KafkaInputPartition({self.topic}[{self.partition}] {self.from_offset}..{self.until_offset})"


@dataclass(frozen=True, slots=True)
class KafkaInputSplit(InputPartition):
    """Ranges read by one task, one after the other (``tasksPerTrigger``: a micro-batch in as
    many tasks as the job has cores, each with about the same number of records)."""

    ranges: tuple[KafkaInputPartition, ...]

    def __repr__(self) -> str:
        return f"KafkaInputSplit({', '.join(map(repr, self.ranges))})"


def balance(parts: Sequence[KafkaInputPartition], n: int) -> list[KafkaInputSplit]:
    """``parts`` in ``n`` splits of about equal record counts (offset spans), cutting a range
    where a split is full. Why: one task per topic-partition range, coalesced to the cores, put
    a light topic's ranges in one task and a heavy one's in the other (the heartbeats topic holds
    a tenth of the events, the offsets topic the rest): half the cores sat idle through the
    source stage (docs/benchmarks.md, issue 14)."""
    total = sum(p.until_offset - p.from_offset for p in parts)
    if n <= 1 or total <= 0 or not parts:
        return [KafkaInputSplit(tuple(parts))] if parts else []
    share = math.ceil(total / n)
    splits: list[KafkaInputSplit] = []
    current: list[KafkaInputPartition] = []
    room = share
    for part in parts:
        frm = part.from_offset
        while frm < part.until_offset:
            take = min(part.until_offset - frm, room)
            current.append(KafkaInputPartition(part.topic, part.partition, frm, frm + take, part.spec, part.caught_up))
            frm += take
            room -= take
            if room == 0:
                splits.append(KafkaInputSplit(tuple(current)))
                current, room = [], share
    if current:
        splits.append(KafkaInputSplit(tuple(current)))
    return splits


# --------------------------------------------------------------------------- driver side


class _ClientLog:
    """librdkafka's ``logger``: forwards to logging and keeps the last error lines.

    Failures such as a TLS handshake against a plaintext listener are only
    logged by librdkafka, never raised; keeping them lets a timeout say why.
    """

    _logger = logging.getLogger(__name__ + ".librdkafka")

    def __init__(self) -> None:
        self.errors: list[str] = []

    def log(self, level: int, fmt: str, *args: object) -> None:
        self._logger.log(level, fmt, *args)
        if level >= logging.ERROR or (level >= logging.WARNING and "FAIL" in str(args[:1])):
            self.errors.append(fmt % args if args else fmt)
            del self.errors[:-3]

    def last(self) -> str:
        return "; ".join(self.errors) or "none"


class _OffsetReader:
    """Driver-side metadata and ListOffsets through one AdminClient (not picklable)."""

    def __init__(self, options: SourceOptions) -> None:
        from confluent_kafka.admin import AdminClient

        self._options = options
        config = options.config()
        _validate_consumer_config(options)
        self._client_log = _ClientLog()
        self._config_errors: list[Any] = []

        def on_error(err) -> None:
            if err.fatal() or err.code() in _CONFIG_ERRORS:
                self._config_errors.append(err)

        self._admin = AdminClient({**config, "logger": self._client_log, "error_cb": on_error})
        # Per request; with fetchOffset.numRetries a dead bootstrap fails in minutes, not hours.
        self._timeout_s = min(30.0, max(1.0, options.poll_timeout_ms / 1000.0))
        self._missing_logged: set[str] = set()

    def partitions(self) -> tuple[set[TopicPartitionKey], set[str]]:
        """Partitions the subscription covers now, and topics whose metadata errored (unknown)."""
        metadata = self._retry("metadata", lambda: self._admin.list_topics(timeout=self._timeout_s))
        found: set[TopicPartitionKey] = set()
        unknown: set[str] = set()
        opts = self._options
        if opts.subscribe:
            wanted = set(opts.subscribe)
        elif opts.subscribe_pattern is not None:
            regex = re.compile(opts.subscribe_pattern)
            wanted = {t for t in metadata.topics if regex.fullmatch(t)}
        else:
            wanted = {t for t, _ in opts.assign}
        for topic in sorted(wanted):
            meta = metadata.topics.get(topic)
            if meta is None:
                if topic not in self._missing_logged:
                    log.info("topic %s does not exist (yet); it is read from its earliest offset once it does", topic)
                    self._missing_logged.add(topic)
                continue
            if meta.error is not None:
                unknown.add(topic)
                log.warning("metadata for topic %s failed this round: %s", topic, meta.error)
                continue
            for p in meta.partitions:
                found.add((topic, p))
        if opts.assign:
            found &= set(opts.assign)
        return found, unknown

    def list_offsets(self, tps: Iterable[TopicPartitionKey], which: Literal["earliest", "latest"],
                     isolation_level: str | None = None) -> dict[TopicPartitionKey, int]:
        from confluent_kafka import IsolationLevel, TopicPartition
        from confluent_kafka.admin import OffsetSpec

        tps = sorted(set(tps))
        if not tps:
            return {}
        spec = OffsetSpec.earliest() if which == "earliest" else OffsetSpec.latest()
        level = IsolationLevel.READ_COMMITTED if (isolation_level or self._options.isolation_level) == \
            "read_committed" else IsolationLevel.READ_UNCOMMITTED

        def query() -> dict[TopicPartitionKey, int]:
            futures = self._admin.list_offsets({TopicPartition(t, p): spec for t, p in tps},
                                               isolation_level=level, request_timeout=self._timeout_s)
            result = {}
            for tp, future in futures.items():
                offset = future.result(timeout=self._timeout_s).offset
                if offset < 0:
                    raise RuntimeError(f"broker answered offset {offset} for {tp.topic}[{tp.partition}]")
                result[(tp.topic, tp.partition)] = offset
            return result

        return self._retry(f"{which} offsets", query)

    def _retry(self, what: str, call):
        attempts = self._options.fetch_offset_num_retries + 1
        for attempt in range(1, attempts + 1):
            try:
                return call()
            except Exception as exc:
                self._admin.poll(0)  # deliver queued client logs and error callbacks
                if self._config_errors:
                    raise RuntimeError(
                        f"could not fetch {what} from Kafka: {self._config_errors[0]} (check "
                        f"kafka.security.protocol, SASL and SSL settings: {redact(self._options.config())})"
                    ) from exc
                if attempt >= attempts:
                    raise RuntimeError(
                        f"could not fetch {what} from Kafka ({self._options.describe_subscription()}) after "
                        f"{attempts} attempts: {exc}; last client errors: {self._client_log.last()}") from exc
                log.debug("fetching %s failed (attempt %d): %s", what, attempt, exc)
                time.sleep(self._options.fetch_offset_retry_interval_ms / 1000.0)
        raise AssertionError("unreachable")


def _validate_consumer_config(options: SourceOptions) -> None:
    """Build (and close) a consumer so librdkafka rejects bad settings on the driver, early."""
    from confluent_kafka import Consumer, KafkaException

    try:
        consumer = Consumer(_consumer_config(ReadSpec.of(options), lambda err: None, _ClientLog()))
    except (KafkaException, ValueError, TypeError) as exc:
        raise KafkaSourceError(f"invalid Kafka client settings for {SHORT_NAME}: {exc} "
                               f"(settings: {redact(options.config())})") from None
    consumer.close()


GROUP_ID_PREFIX = "fencewatch-kafka-source"
"""Each query's consumers carry ``<prefix>-<uuid>`` as group id (``groupIdPrefix``): they only assign
partitions, but librdkafka looks the group's coordinator up, which needs Describe on the group
(``runtime.access``)."""

READ_AHEAD_MESSAGES = 2_000
"""librdkafka's prefetch per partition (``queued.min.messages``) unless ``kafka.queued.min.messages``
says otherwise. Its default, 100,000, suits a consumer that reads on and on; a task reads a bounded
range and closes, and whatever the client fetched past the range's end was fetched, parsed and
served for nothing. With a small prefetch the client waits ``fetch.queue.backoff.ms`` (default
1 s) each time its queue is full before fetching again: a task then crawled (16 s against 1.6 for
ranges of ~25,000 records), so that wait is :data:`READ_AHEAD_BACKOFF_MS`. Reading a backlog in
ranges of ~3,000 records (`mixed` events, embedded broker), the two cost 4.9-5.5 us of the
reader's CPU and 3.5-3.7 us of the broker's per record, against 6.3-8.9 and 5.0-5.1 with the
defaults (docs/kafka-source.md, issue 14)."""
READ_AHEAD_BACKOFF_MS = 5


def _consumer_config(spec: ReadSpec, error_cb, client_log: _ClientLog) -> dict[str, Any]:
    return {
        "queued.min.messages": READ_AHEAD_MESSAGES,
        "fetch.queue.backoff.ms": READ_AHEAD_BACKOFF_MS,
        **dict(spec.client_config),
        "group.id": spec.group_id,
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "auto.offset.reset": "error",
        "enable.partition.eof": False,
        "isolation.level": spec.isolation_level,
        "error_cb": error_cb,
        "logger": client_log,
    }


PACED_FLOOR = 1_000
"""The adaptive limit's floor (records per micro-batch)."""


def pacer_for(options: SourceOptions) -> BatchPacer | None:
    """The adaptive per-batch limit when ``targetBatchDurationMs`` is set: it starts at
    ``initialOffsetsPerTrigger`` (else the floor) and stays at or under ``maxOffsetsPerTrigger``."""
    if options.target_batch_duration_ms is None:
        return None
    cap = options.max_offsets_per_trigger or DEFAULT_PACED_CAP
    return BatchPacer(target_ms=options.target_batch_duration_ms, floor=min(PACED_FLOOR, cap), cap=cap,
                      limit=options.initial_offsets_per_trigger or PACED_FLOOR)


DEFAULT_PACED_CAP = 500_000
"""The adaptive limit's cap when ``maxOffsetsPerTrigger`` is not given."""


class _Planner:
    """Offset resolution and partition planning shared by the stream and batch readers."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self._reader: _OffsetReader | None = None

    @property
    def reader(self) -> _OffsetReader:
        if self._reader is None:
            self._reader = _OffsetReader(self.options)
            log.info("%s: %s, client %s", SHORT_NAME, self.options.describe_subscription(),
                     redact(self.options.config()))
        return self._reader

    def close(self) -> None:
        self._reader = None

    def resolve(self, spec: str | tuple[tuple[TopicPartitionKey, int], ...], name: str,
                tps: set[TopicPartitionKey]) -> dict[TopicPartitionKey, int]:
        """Concrete offsets for ``earliest``/``latest``/JSON over the partitions ``tps``."""
        if spec == "earliest":
            return self.reader.list_offsets(tps, "earliest")
        if spec == "latest":
            return self.reader.list_offsets(tps, "latest")
        wanted = dict(spec)  # type: ignore[arg-type]
        unknown = sorted(set(wanted) - tps)
        if unknown:
            raise KafkaSourceError(f"{name} names partitions that do not exist or are not subscribed: "
                                   + ", ".join(_tp(tp) for tp in unknown))
        missing = sorted(tps - set(wanted))
        if missing and not self.options.assign:
            raise KafkaSourceError(f"{name} JSON must give an offset for every subscribed partition; missing: "
                                   + ", ".join(_tp(tp) for tp in missing))
        earliest = self.reader.list_offsets([tp for tp, o in wanted.items() if o == EARLIEST], "earliest")
        latest = self.reader.list_offsets([tp for tp, o in wanted.items() if o != EARLIEST], "latest")
        beyond = sorted(tp for tp, o in wanted.items() if o >= 0 and o > latest[tp])
        if beyond:
            # Reading would wait for offsets that do not exist (and look like loss later).
            raise KafkaSourceError(f"{name} lies beyond the end of " + ", ".join(
                f"{_tp(tp)} (asked {wanted[tp]}, end offset {latest[tp]})" for tp in beyond))
        return {tp: (earliest[tp] if o == EARLIEST else latest[tp]) if o < 0 else o for tp, o in wanted.items()}

    def subscribed(self, tp: TopicPartitionKey) -> bool:
        """Whether the options (as given now, perhaps changed since the checkpoint) cover ``tp``."""
        opts = self.options
        if opts.subscribe:
            return tp[0] in opts.subscribe
        if opts.subscribe_pattern is not None:
            return re.fullmatch(opts.subscribe_pattern, tp[0]) is not None
        return tp in opts.assign

    def latest(self, start: Mapping[TopicPartitionKey, int]) -> dict[TopicPartitionKey, int]:
        """End offsets now, checked against ``start`` for partitions that vanished or went back."""
        opts = self.options
        tps, unknown_topics = self.reader.partitions()
        dropped = sorted(tp for tp in start if not self.subscribed(tp))
        if dropped:
            log.info("no longer subscribed, not read any more: %s", ", ".join(_tp(tp) for tp in dropped))
        gone = sorted(tp for tp in start
                      if tp not in tps and tp[0] not in unknown_topics and self.subscribed(tp))
        if gone:
            _data_loss(opts.fail_on_data_loss,
                       "partitions no longer exist (topic deleted?): " + ", ".join(_tp(tp) for tp in gone))
        latest = self.reader.list_offsets(tps, "latest")
        # Partitions whose topic metadata failed this round keep their offsets: no progress, no loss.
        for tp, offset in start.items():
            if tp[0] in unknown_topics and self.subscribed(tp):
                latest[tp] = offset
        behind = [tp for tp in latest if tp in start and latest[tp] < start[tp]]
        if behind and opts.isolation_level == "read_committed":
            # The last stable offset trails the start while a transaction is open (and
            # Tansu answers 0 then); the log itself has not moved back.
            high = self.reader.list_offsets(behind, "latest", "read_uncommitted")
            for tp in behind:
                if high[tp] >= start[tp]:
                    latest[tp] = start[tp]
        for tp in sorted(tp for tp in latest if tp in start and latest[tp] < start[tp]):
            _data_loss(opts.fail_on_data_loss,
                       f"end offset of {_tp(tp)} went back from {start[tp]} to {latest[tp]} (topic re-created?)")
        return latest

    def tasks(self, parts: list[KafkaInputPartition]) -> Sequence[InputPartition]:
        """The planned ranges as Spark's input partitions: :func:`balance`d into
        ``tasksPerTrigger`` tasks when set, else one task per range."""
        n = self.options.tasks_per_trigger
        return balance(parts, n) if n else parts

    def plan(self, start: Mapping[TopicPartitionKey, int],
             end: Mapping[TopicPartitionKey, int], *, caught_up: bool = False) -> list[KafkaInputPartition]:
        """Input partitions for ``[start, end)``; new partitions start at their earliest offset."""
        opts = self.options
        candidates = [tp for tp in end if tp not in start or start[tp] != end[tp]]
        if not candidates:
            return []
        earliest = self.reader.list_offsets(candidates, "earliest")
        backwards = [tp for tp in candidates if tp in start and start[tp] > end[tp]]
        high = self.reader.list_offsets(backwards, "latest", "read_uncommitted") if backwards else {}
        ranges: list[tuple[TopicPartitionKey, int, int]] = []
        for tp in sorted(candidates):
            until = end[tp]
            frm = start.get(tp)
            if frm is None:
                frm = earliest[tp]
                log.info("new partition %s: reading from its earliest offset %d", _tp(tp), frm)
            elif frm > until:
                if high.get(tp, -1) >= frm:
                    # The log still reaches frm, so this is not a reset: e.g. batch 0 re-planned
                    # after a restart with startingOffsets=latest resolved again. Nothing to read.
                    continue
                _data_loss(opts.fail_on_data_loss,
                           f"offsets of {_tp(tp)} went back from {frm} to {until} (topic re-created?)")
                frm = earliest[tp]
            if frm < earliest[tp] and frm < until:
                _data_loss(opts.fail_on_data_loss,
                           f"{_tp(tp)} offsets {frm}..{min(until, earliest[tp]) - 1} were deleted before "
                           f"they were read (log start offset is now {earliest[tp]})")
                frm = earliest[tp]
            if until > frm:
                ranges.append((tp, frm, until))
        spec = ReadSpec.of(opts)
        return [KafkaInputPartition(t, p, frm, until, spec, caught_up)
                for (t, p), frm, until in split_ranges(ranges, min_partitions=opts.min_partitions,
                                                       max_records=opts.max_records_per_partition)]


# --------------------------------------------------------------------------- executor side


def read_split(split: KafkaInputPartition | KafkaInputSplit,
               flush: Callable[["_BatchBuilder"], Any] | None = None) -> Iterator[Any]:
    """:func:`read_partition` over each range of ``split`` (or the one range), one after the
    other. Each range gets a consumer of its own: one consumer assigned range after range read
    200,000 records in 2.0 s where four read them in 0.75-1.3 s (librdkafka restarts its fetch
    at each assignment)."""
    for part in split.ranges if isinstance(split, KafkaInputSplit) else (split,):
        yield from read_partition(part, flush)


def read_partition(part: KafkaInputPartition, flush: Callable[["_BatchBuilder"], Any] | None = None
                   ) -> Iterator[Any]:
    """Yield ``pyarrow.RecordBatch``es with the records of ``part``'s offset range.

    Stops when the consumer position reaches ``until_offset`` (control records
    and compaction leave offset gaps, so counting records would hang).
    ``flush``: turns the records gathered so far (a :class:`_BatchBuilder`, emptied after) into
    the batch to yield, or None for nothing; default: Spark's Kafka schema
    (:meth:`_BatchBuilder.flush`). A caller with a schema of its own transforms the records here,
    in the task that reads them, instead of in a stage after the source.
    """
    flush = flush or _BatchBuilder.flush
    from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition
    from pyspark.sql.pandas.types import to_arrow_schema

    spec = part.spec
    schema = to_arrow_schema(kafka_schema(spec.include_headers, spec.include_caught_up), timezone="UTC")
    where = f"{part.topic}[{part.partition}]"
    client_errors: list[str] = []
    fatal: list[KafkaError] = []

    def on_error(err: KafkaError) -> None:
        # Client-level errors (auth, TLS, all brokers down) come here, not as messages.
        client_errors.append(str(err))
        del client_errors[:-5]
        if err.fatal() or err.code() in _CONFIG_ERRORS:
            fatal.append(err)

    client_log = _ClientLog()
    consumer = Consumer(_consumer_config(spec, on_error, client_log))
    builder = _BatchBuilder(part.topic, part.partition, schema, spec.include_headers,
                            part.caught_up if spec.include_caught_up else None)
    position = part.from_offset
    until = part.until_offset
    try:
        consumer.assign([TopicPartition(part.topic, part.partition, position)])
        last_progress = time.monotonic()
        while position < until:
            messages = consumer.consume(min(until - position, CONSUME_BATCH), timeout=CONSUME_WAIT_S)
            before = position
            if messages and not any(map(Message.error, messages)):
                # Fast path: column-wise, no Python code per record. Offsets ascend
                # within a partition, so the in-range slice is found by bisection.
                offsets = list(map(Message.offset, messages))
                lo = bisect.bisect_left(offsets, position) if offsets[0] < position else 0
                hi = len(offsets)
                if offsets[-1] >= until:
                    hi = bisect.bisect_left(offsets, until)
                if hi > lo:
                    builder.extend(messages[lo:hi], offsets[lo:hi])
                    position = offsets[hi - 1] + 1
                if hi < len(offsets):
                    position = until
            else:
                for msg in messages:
                    err = msg.error()
                    if err is not None:
                        position = _on_read_error(consumer, err, part, position)
                        if position >= until:
                            break
                        continue
                    offset = msg.offset()
                    if offset >= until:
                        position = until
                        break
                    if offset < position:
                        continue  # re-delivered after a re-assign; already emitted
                    builder.extend([msg], [offset])
                    position = offset + 1
            if fatal:
                raise RuntimeError(f"cannot read {where}: {fatal[0]} (check kafka.security.protocol, SASL "
                                   f"and SSL settings: {redact(dict(spec.client_config))})")
            if position < until and not messages:
                # Nothing delivered: the range may end in control records or other gaps.
                current = consumer.position([TopicPartition(part.topic, part.partition)])[0].offset
                if current > position:
                    position = current
            if position > before:
                last_progress = time.monotonic()
            elif time.monotonic() - last_progress > spec.poll_timeout_ms / 1000.0:
                raise TimeoutError(
                    f"no progress reading {where} at offset {position} (range {part.from_offset}..{until}) for "
                    f"{spec.poll_timeout_ms} ms (kafkaConsumer.pollTimeoutMs); last client errors: "
                    f"{'; '.join(client_errors) or 'none'}; client log: {client_log.last()}")
            if builder.rows >= ARROW_BATCH_ROWS:
                batch = flush(builder)
                if batch is not None:
                    yield batch
        if builder.rows:
            batch = flush(builder)
            if batch is not None:
                yield batch
    except KafkaException as exc:
        raise RuntimeError(f"reading {where} at offset {position} failed: {exc}") from exc
    finally:
        consumer.close()


def _config_error_codes() -> frozenset[int]:
    from confluent_kafka import KafkaError

    names = ("_AUTHENTICATION", "SASL_AUTHENTICATION_FAILED", "_SSL", "TOPIC_AUTHORIZATION_FAILED",
             "CLUSTER_AUTHORIZATION_FAILED", "_UNSUPPORTED_FEATURE", "ILLEGAL_SASL_STATE",
             "UNSUPPORTED_SASL_MECHANISM")
    return frozenset(getattr(KafkaError, n) for n in names if hasattr(KafkaError, n))


# Errors retrying cannot fix: fail the task now rather than after pollTimeoutMs.
_CONFIG_ERRORS = _config_error_codes()


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
            _data_loss(part.spec.fail_on_data_loss,
                       f"{where} offsets {position}..{min(low, part.until_offset) - 1} were deleted before they "
                       f"were read (log start offset is now {low})")
            if low >= part.until_offset:
                return part.until_offset
            consumer.assign([TopicPartition(part.topic, part.partition, low)])
            return low
        raise RuntimeError(f"offset {position} of {where} is out of range [{low}, {high}): {err}")
    if code in (KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_PARTITION, KafkaError._UNKNOWN_TOPIC):
        _data_loss(part.spec.fail_on_data_loss,
                   f"{where} disappeared while offsets {position}..{part.until_offset - 1} were unread")
        return part.until_offset
    if err.fatal() or not err.retriable():
        raise KafkaException(err)
    log.debug("retriable error reading %s: %s", where, err)
    return position


class _BatchBuilder:
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


# --------------------------------------------------------------------------- Spark classes


class KafkaStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batch reader; offsets are ``{"topic": {"partition": offset}}`` as Spark's Kafka source."""

    def __init__(self, options: SourceOptions) -> None:
        self._options = options
        self._planner = _Planner(options)
        self._target: dict[TopicPartitionKey, int] | None = None
        self._last_latest: dict[TopicPartitionKey, int] | None = None
        self._pacer = pacer_for(options)

    # The reader is pickled to the executors' read(); the admin client is not picklable.
    def __getstate__(self) -> dict[str, Any]:
        return {"_options": self._options}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["_options"])  # type: ignore[misc]

    def initialOffset(self) -> dict:
        tps, _ = self._planner.reader.partitions()
        offsets = self._planner.resolve(self._options.starting_offsets, "startingOffsets", tps)
        log.info("%s: starting offsets %s", SHORT_NAME, offsets_to_json(offsets))
        return offsets_to_json(offsets)

    def getDefaultReadLimit(self):
        if self._options.max_offsets_per_trigger is not None and ReadMaxRows is not None:
            return ReadMaxRows(self._options.max_offsets_per_trigger)
        return ReadAllAvailable() if ReadAllAvailable is not None else None

    def prepareForTriggerAvailableNow(self) -> None:
        """Fix the end of an AvailableNow run: the offsets that exist now."""
        tps, _ = self._planner.reader.partitions()
        self._target = self._planner.reader.list_offsets(tps, "latest")
        log.info("%s: Trigger.AvailableNow reads up to %s", SHORT_NAME, offsets_to_json(self._target))

    def latestOffset(self, start: dict | None = None, limit=None) -> dict:
        begin = offsets_from_json(start)
        if self._target is not None:
            # AvailableNow: never past the target; partitions in `start` keep their offsets.
            latest = {**begin, **{tp: max(o, begin.get(tp, o)) for tp, o in self._target.items()}}
        else:
            latest = self._planner.latest(begin)
        self._last_latest = available = latest
        # Partitions new since `start` (or reset after loss) begin at their earliest offset.
        fresh = [tp for tp in latest if tp not in begin or begin[tp] > latest[tp]]
        base = {tp: o for tp, o in begin.items() if tp in latest and o <= latest[tp]}
        if fresh:
            base.update(self._planner.reader.list_offsets(fresh, "earliest"))
        # Spark 4.0/4.1 call latestOffset() without arguments: no admission control there.
        max_rows = limit.max_rows if ReadMaxRows is not None and isinstance(limit, ReadMaxRows) else None
        if self._pacer is not None:
            backlog = sum(max(0, o - base.get(tp, o)) for tp, o in latest.items())
            paced = self._pacer.plan(time.monotonic(), backlog)
            max_rows = paced if max_rows is None else min(max_rows, paced)
        if max_rows is not None:
            latest = rate_limit(base, latest, max_rows)
        # Caught up: this batch ends where the logs ended at planning (an AvailableNow target is not
        # the logs' end). Marked in the offsets Spark logs, for a rerun of this batch to see it too.
        caught_up = (self._options.include_caught_up and self._target is None
                     and all(latest.get(tp, -1) >= o for tp, o in available.items()))
        return offsets_to_json(latest, caught_up=caught_up)

    def reportLatestOffset(self) -> dict | None:
        return None if self._last_latest is None else offsets_to_json(self._last_latest)

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        # The mark comes from the logged end, so a batch run again after a restart (planned by the
        # process that died) gets the mark it had: before, it had none, and its held events went a
        # batch later than in the first attempt, whose outputs were in Kafka already (issue 33).
        return self._planner.tasks(self._planner.plan(offsets_from_json(start), offsets_from_json(end),
                                                      caught_up=caught_up_mark(end)))

    def read(self, partition: InputPartition) -> Iterator[Any]:
        assert isinstance(partition, (KafkaInputPartition, KafkaInputSplit)), type(partition)
        return read_split(partition)

    def commit(self, end: dict) -> None:
        """Nothing to do: the checkpoint holds the offsets; Kafka groups are left alone."""

    def stop(self) -> None:
        self._planner.close()
        if isinstance(sys.exc_info()[1], (EOFError, ConnectionError)):
            _quiet_after_channel_closed()


def _quiet_after_channel_closed() -> None:
    """Spark's source runner calls ``stop`` when the JVM has closed its channel (the query is
    stopping): its handler then reports the EOF on the closed socket, fails, and prints two
    tracebacks for a normal stop (seen on a SIGTERM under load). Nothing can reach the JVM any
    more and the process is about to exit, so its stderr goes to /dev/null from here on."""
    log.debug("%s: the JVM closed the source runner's channel; exiting quietly", SHORT_NAME)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 2)
    os.close(devnull)


class KafkaBatchReader(DataSourceReader):
    """One-shot read of ``[startingOffsets, endingOffsets)`` (``spark.read``)."""

    def __init__(self, options: SourceOptions) -> None:
        self._options = options
        self._planner = _Planner(options)

    def __getstate__(self) -> dict[str, Any]:
        return {"_options": self._options}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["_options"])  # type: ignore[misc]

    def partitions(self) -> Sequence[InputPartition]:
        tps, _ = self._planner.reader.partitions()
        start = self._planner.resolve(self._options.starting_offsets, "startingOffsets", tps)
        assert self._options.ending_offsets is not None
        end = self._planner.resolve(self._options.ending_offsets, "endingOffsets", tps)
        for tp in sorted(tp for tp in end if tp in start and end[tp] < start[tp]):
            raise KafkaSourceError(f"endingOffsets {end[tp]} of {_tp(tp)} is before startingOffsets {start[tp]}")
        # Partitions only in `start` (assign with JSON) have nothing to read.
        planned = self._planner.tasks(self._planner.plan(start, {tp: end[tp] for tp in end if tp in start}))
        self._planner.close()
        return planned

    def read(self, partition: InputPartition) -> Iterator[Any]:
        assert isinstance(partition, (KafkaInputPartition, KafkaInputSplit)), type(partition)
        return read_split(partition)


class KafkaDataSource(DataSource):
    """``spark.readStream.format("fencewatch-kafka")``: Spark's Kafka source schema and options."""

    @classmethod
    def name(cls) -> str:
        return SHORT_NAME

    def __init__(self, options: Mapping[str, str]) -> None:
        super().__init__(options)  # type: ignore[arg-type]
        # Validate now so a bad option fails when the DataFrame is defined, not mid-query.
        # endingOffsets only makes sense for spark.read, so it decides which rules apply.
        streaming = not any(k.strip().lower() == "endingoffsets" for k in options)
        self._parsed = parse_options(options, streaming=streaming)

    def schema(self) -> StructType:
        return kafka_schema(self._parsed.include_headers, self._parsed.include_caught_up)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        if self._parsed.ending_offsets is not None:
            raise KafkaSourceError("option endingOffsets is only valid for batch queries (spark.read)")
        return KafkaStreamReader(self._parsed)

    def reader(self, schema: StructType) -> DataSourceReader:
        parsed = self._parsed if self._parsed.ending_offsets is not None else \
            parse_options(self.options, streaming=False)
        return KafkaBatchReader(parsed)


# --------------------------------------------------------------------------- helpers for callers


def spark_kafka_available(spark) -> bool:
    """True when Spark's own Kafka connector is on the driver's classpath (classic sessions only)."""
    try:
        jvm = spark._jvm  # Spark Connect sessions have no JVM gateway
        if jvm is None:
            return False
        loader = jvm.java.lang.Thread.currentThread().getContextClassLoader()
        jvm.java.lang.Class.forName(JVM_PROVIDER_CLASS, False, loader)
        return True
    except Exception:
        return False


def register(spark) -> None:
    """Register ``fencewatch-kafka`` with this session (idempotent)."""
    spark.dataSource.register(KafkaDataSource)


Implementation = Literal["auto", "spark", "python"]


def _reader_options(bootstrap: str | None, topics: str | Sequence[str] | None,
                    options: Mapping[str, str] | None) -> dict[str, str]:
    merged = {str(k): str(v) for k, v in (options or {}).items()}
    if bootstrap:
        merged["kafka.bootstrap.servers"] = bootstrap
    if topics:
        merged["subscribe"] = topics if isinstance(topics, str) else ",".join(topics)
    return merged


def _choose(spark, implementation: Implementation) -> str:
    if implementation == "python":
        return SHORT_NAME
    available = spark_kafka_available(spark)
    if implementation == "spark" and not available:
        raise KafkaSourceError(f"Spark's Kafka connector ({JVM_PROVIDER_CLASS}) is not on the classpath; "
                               "start Spark with --packages org.apache.spark:spark-sql-kafka-0-10_2.13:<version>")
    return "kafka" if available else SHORT_NAME


def _apply(reader, fmt: str, merged: Mapping[str, str]):
    if fmt == "kafka":
        kafka = {k[len("kafka."):]: v for k, v in merged.items() if k.lower().startswith("kafka.")}
        try:
            java = to_java(kafka)
        except KafkaConfigError as exc:
            raise KafkaSourceError(str(exc)) from None
        # includeCaughtUp is this source's own: Spark's connector has no such column (callers check)
        merged = {**{k: v for k, v in merged.items()
                     if not k.lower().startswith("kafka.") and k.lower() != "includecaughtup"},
                  **{f"kafka.{k}": v for k, v in java.items()}}
    return reader.format(fmt).options(**merged)


def read_kafka_stream(spark, *, bootstrap: str | None = None, topics: str | Sequence[str] | None = None,
                      options: Mapping[str, str] | None = None, implementation: Implementation = "auto"):
    """A streaming DataFrame over Kafka with Spark's Kafka schema.

    Uses ``format("kafka")`` when Spark's connector is loadable, else
    ``fencewatch-kafka``. ``options`` are Spark Kafka source options
    (``startingOffsets``, ``maxOffsetsPerTrigger``, ``kafka.*`` ...).
    """
    merged = _reader_options(bootstrap, topics, options)
    fmt = _choose(spark, implementation)
    if fmt == SHORT_NAME:
        parse_options(merged, streaming=True)  # fail here, with our message, on bad options
        register(spark)
    log.info("reading Kafka with format(%r)", fmt)
    return _apply(spark.readStream, fmt, merged).load()


def read_kafka_batch(spark, *, bootstrap: str | None = None, topics: str | Sequence[str] | None = None,
                     options: Mapping[str, str] | None = None, implementation: Implementation = "auto"):
    """A batch DataFrame of ``[startingOffsets, endingOffsets)`` (defaults: earliest, latest)."""
    merged = _reader_options(bootstrap, topics, options)
    fmt = _choose(spark, implementation)
    if fmt == SHORT_NAME:
        parse_options(merged, streaming=False)
        register(spark)
    return _apply(spark.read, fmt, merged).load()

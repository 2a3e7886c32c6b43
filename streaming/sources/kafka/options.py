"""The source's options: Spark's Kafka connector's names, validated once, when the DataFrame is defined.

What lives here: :class:`SourceOptions` and :func:`parse_options`, the two error types every
other module of the source raises, and the names they share (``SHORT_NAME``, the offset
sentinels, ``TopicPartitionKey``). docs/kafka-source.md lists the options.

Imports: the standard library and ``streaming.config.kafka`` (no pyspark: the configuration
checks options without starting Spark).
"""

from __future__ import annotations

import json
import logging
import re
import uuid
from collections.abc import Mapping
from dataclasses import dataclass

from fencewatch.streaming.config.kafka import KafkaConfigError, redact, to_librdkafka

log = logging.getLogger(__name__)

#: Short name to use with ``spark.readStream.format(...)``.
SHORT_NAME = "fencewatch-kafka"

#: Spark's sentinels inside a startingOffsets/endingOffsets JSON.
EARLIEST = -2
LATEST = -1

TopicPartitionKey = tuple[str, int]
OffsetsSpec = str | tuple[tuple[TopicPartitionKey, int], ...]

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


def data_loss(fail: bool, message: str) -> None:
    """``failOnDataLoss``: raise, or log the gap and let the caller skip it."""
    if fail:
        raise KafkaDataLossError(f"{message}. {_DATA_LOSS_HINT}")
    log.warning("%s; skipping (failOnDataLoss=false)", message)


def tp_name(tp: TopicPartitionKey) -> str:
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
GROUP_ID_PREFIX = "fencewatch-kafka-source"
"""Each query's consumers carry ``<prefix>-<uuid>`` as group id (``groupIdPrefix``): they only assign
partitions, but librdkafka looks the group's coordinator up, which needs Describe on the group
(``runtime.access``)."""


@dataclass(frozen=True, slots=True)
class SourceOptions:
    """Validated source options. ``client_config`` is librdkafka's (secrets inside: see __repr__)."""

    client_config: tuple[tuple[str, str], ...]
    group_id: str
    isolation_level: str
    subscribe: tuple[str, ...] = ()
    subscribe_pattern: str | None = None
    assign: tuple[TopicPartitionKey, ...] = ()
    starting_offsets: OffsetsSpec = "latest"
    ending_offsets: OffsetsSpec | None = None
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
        return "assign=" + ",".join(tp_name(tp) for tp in self.assign)


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


def _split(options: Mapping[str, str]) -> tuple[dict[str, str], dict[str, str]]:
    """(source options by lower-case name, ``kafka.*`` client settings without the prefix)."""
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
    return source, kafka


def _subscription(source: Mapping[str, str]) -> dict:
    """``subscribe`` / ``subscribe_pattern`` / ``assign``: exactly one of the three options."""
    strategies = [k for k in ("subscribe", "subscribepattern", "assign") if k in source]
    if len(strategies) != 1:
        raise KafkaSourceError(
            ("one" if not strategies else "only one") +
            " of the options subscribe, subscribePattern, assign must be set")
    if "subscribe" in source:
        subscribe = tuple(dict.fromkeys(t.strip() for t in source["subscribe"].split(",") if t.strip()))
        if not subscribe:
            raise KafkaSourceError(f"option subscribe names no topics: {source['subscribe']!r}")
        return {"subscribe": subscribe}
    if "subscribepattern" in source:
        pattern = source["subscribepattern"].strip()
        if not pattern:
            raise KafkaSourceError("option subscribePattern is empty")
        try:
            re.compile(pattern)
        except re.error as exc:
            raise KafkaSourceError(f"option subscribePattern is not a valid regular expression: {exc}") from None
        return {"subscribe_pattern": pattern}
    return {"assign": _parse_assign(source["assign"])}


def _starting(source: Mapping[str, str], streaming: bool) -> OffsetsSpec:
    starting_raw = source.get("startingoffsets", "latest" if streaming else "earliest").strip()
    if starting_raw.lower() in ("earliest", "latest"):
        starting = starting_raw.lower()
        if not streaming and starting == "latest":
            raise KafkaSourceError("startingOffsets=latest is not valid for batch queries; use earliest or JSON")
        return starting
    pairs = _parse_offsets_json("startingOffsets", starting_raw)
    if not streaming and any(o == LATEST for _, o in pairs):
        raise KafkaSourceError("startingOffsets may not use -1 (latest) in batch queries")
    return pairs


def _ending(source: Mapping[str, str], streaming: bool) -> OffsetsSpec | None:
    if "endingoffsets" not in source:
        return None if streaming else "latest"
    if streaming:
        raise KafkaSourceError("option endingOffsets is only valid for batch queries (spark.read)")
    ending_raw = source["endingoffsets"].strip()
    if ending_raw.lower() == "latest":
        return "latest"
    if ending_raw.lower() == "earliest":
        raise KafkaSourceError("endingOffsets=earliest is not valid; use latest or JSON")
    pairs = _parse_offsets_json("endingOffsets", ending_raw)
    if any(o == EARLIEST for _, o in pairs):
        raise KafkaSourceError("endingOffsets may not use -2 (earliest)")
    return pairs


# SourceOptions field <- (option's lower-case name, its spelling in messages); unset: None.
# Two tables, checked in this order with the adaptive limit's own check between them.
_PACING_COUNTS = (
    ("max_offsets_per_trigger", "maxoffsetspertrigger", "maxOffsetsPerTrigger"),
    ("target_batch_duration_ms", "targetbatchdurationms", "targetBatchDurationMs"),
    ("initial_offsets_per_trigger", "initialoffsetspertrigger", "initialOffsetsPerTrigger"),
)
_SPLIT_COUNTS = (
    ("tasks_per_trigger", "taskspertrigger", "tasksPerTrigger"),
    ("min_partitions", "minpartitions", "minPartitions"),
    ("max_records_per_partition", "maxrecordsperpartition", "maxRecordsPerPartition"),
)


def _counts(source: Mapping[str, str], table) -> dict:
    return {field: _parse_positive(name, source[key]) if key in source else None for field, key, name in table}


def _limits(source: Mapping[str, str]) -> dict:
    """The numeric and boolean options (admission control, splitting, columns, retries)."""
    out = {"fail_on_data_loss": _parse_bool("failOnDataLoss", source.get("failondataloss", "true")),
           **_counts(source, _PACING_COUNTS)}
    if out["initial_offsets_per_trigger"] is not None and out["target_batch_duration_ms"] is None:
        raise KafkaSourceError("initialOffsetsPerTrigger needs targetBatchDurationMs (the adaptive limit)")
    out.update(_counts(source, _SPLIT_COUNTS))
    out.update(
        include_headers=_parse_bool("includeHeaders", source.get("includeheaders", "false")),
        include_caught_up=_parse_bool("includeCaughtUp", source.get("includecaughtup", "false")),
        poll_timeout_ms=_parse_positive("kafkaConsumer.pollTimeoutMs",
                                        source.get("kafkaconsumer.polltimeoutms", "120000")),
        fetch_offset_num_retries=_parse_positive("fetchOffset.numRetries",
                                                 source.get("fetchoffset.numretries", "3"), allow_zero=True),
        fetch_offset_retry_interval_ms=_parse_positive("fetchOffset.retryIntervalMs",
                                                       source.get("fetchoffset.retryintervalms", "10"),
                                                       allow_zero=True),
    )
    return out


def _client(source: Mapping[str, str], kafka: dict[str, str]) -> dict:
    """librdkafka's settings from ``kafka.*`` (Java names translated), the isolation level and the group id."""
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
    return {"client_config": tuple(sorted(client.items())), "group_id": group_id, "isolation_level": isolation}


def parse_options(options: Mapping[str, str], *, streaming: bool = True) -> SourceOptions:
    """Validate Spark-style Kafka source options; every problem is a :class:`KafkaSourceError`.
    Checked in this order, so the first problem reported is the same whatever else is wrong:
    names, subscription, bootstrap, offsets, limits, client settings."""
    source, kafka = _split(options)
    subscription = _subscription(source)
    if not kafka.get("bootstrap.servers", "").strip():
        raise KafkaSourceError("option kafka.bootstrap.servers must be set")
    starting = _starting(source, streaming)
    ending = _ending(source, streaming)
    limits = _limits(source)
    return SourceOptions(**_client(source, kafka), **subscription, starting_offsets=starting,
                         ending_offsets=ending, **limits)

"""Which Kafka reader a query uses: Spark's own connector or ``fencewatch-kafka``, with one set of options.

What lives here: :func:`read_kafka_stream` / :func:`read_kafka_batch` (``format("kafka")`` when
Spark's connector is loadable, else this source; ``implementation`` forces one: the job decides
with ``streaming.kafka_source``, ``sources.connector``), :func:`spark_kafka_available` and
:func:`register`. For the connector, librdkafka-style client settings go back to the Java
client's names (``streaming.config.kafka.to_java``), so the same options work with both.

Imports: this package and ``streaming.config.kafka`` (pyspark only through the session given).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Literal

from fencewatch.streaming.config.kafka import KafkaConfigError, to_java
from fencewatch.streaming.sources.connector import JVM_PROVIDER_CLASS, missing_hint, provider_loadable  # noqa: F401
from fencewatch.streaming.sources.kafka.datasource import KafkaDataSource
from fencewatch.streaming.sources.kafka.options import SHORT_NAME, KafkaSourceError, parse_options

log = logging.getLogger(__name__)

def spark_kafka_available(spark) -> bool:
    """True when Spark's own Kafka connector is on the driver's classpath (classic sessions only)."""
    return provider_loadable(spark)


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
        raise KafkaSourceError(missing_hint(spark.version))
    return "kafka" if available else SHORT_NAME


CONNECTOR_MAX_POLL_RECORDS = 10_000
"""Records per ``poll`` of Spark's connector's consumers unless ``kafka.max.poll.records`` says
otherwise. Spark's ``InternalKafkaConsumer.fetch`` asks the broker for the partition's earliest and
latest offsets (two ListOffsets round trips) after every poll; kafka-clients' default of 500
records per poll made that a round trip pair per 500 records read, whatever a fetch had brought
(measured: docs/kafka-source.md, "Performance"). As the Python source's 10,000 per ``consume``."""


CONNECTOR_FETCH_MAX_WAIT_MS = 10
"""How long the broker holds a fetch of Spark's connector's consumers that finds no new record,
unless ``kafka.fetch.max.wait.ms`` says otherwise (Kafka's default: 500 ms). A task reads its range
``[start, end)`` and stops, but the consumer has already sent its next fetch, from ``end``, where
nothing is yet: the broker holds it. The next micro-batch's task takes the cached consumer, seeks
and polls, and the client sends no new fetch to that broker while one is in flight: the task
waited up to 500 ms per partition. Live, at 5,300 events/s (`local[2]`, 2026-11-28 05:12 UTC),
the source stage took 1.1-2.2 s instead of 0.2-0.3 s every few batches; with 10 ms the stalls went
(micro-batch p50 1.12 -> 0.73 s, decision p99 4.78 -> 2.92 s). An idle consumer sends no fetches:
Spark polls it only inside a task."""


def _apply(reader, fmt: str, merged: Mapping[str, str]):
    if fmt == "kafka":
        kafka = {k[len("kafka."):]: v for k, v in merged.items() if k.lower().startswith("kafka.")}
        try:
            java = {"max.poll.records": str(CONNECTOR_MAX_POLL_RECORDS),
                    "fetch.max.wait.ms": str(CONNECTOR_FETCH_MAX_WAIT_MS), **to_java(kafka)}
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

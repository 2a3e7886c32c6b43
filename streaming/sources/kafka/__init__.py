"""A Kafka streaming source for Spark written with the Python Data Source API.

What lives here: ``fencewatch-kafka``, a Spark 4 Python data source over
confluent-kafka with the output schema and the options of Spark's own Kafka
connector (``format("kafka")``); and :func:`read_kafka_stream` / :func:`read_kafka_batch`,
which pick Spark's connector or this source. docs/kafka-source.md lists options,
security settings and limits.

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

The modules, in the order a micro-batch meets them:

| module | what lives there |
|---|---|
| ``options`` | option names and checks (``parse_options``), the errors; no pyspark |
| ``offsets`` | the checkpoint's offsets JSON, ``rate_limit``; pure |
| ``client`` | librdkafka settings for the driver's and executors' clients |
| ``metadata`` | the driver's metadata and ListOffsets (``OffsetReader``) |
| ``planning`` | ``Planner``, input partitions, splitting and balancing ranges, the pacer |
| ``consumer`` | the executors' read of a range into Arrow batches; the schema |
| ``datasource`` | the Spark classes: data source, stream and batch readers |
| ``read`` | ``read_kafka_stream`` / ``read_kafka_batch``: which reader a query uses |

Names are loaded lazily, so ``options`` can be imported without pyspark.
"""

from __future__ import annotations

import importlib
from typing import Any

_WHERE = {
    "SHORT_NAME": "options", "EARLIEST": "options", "LATEST": "options", "KafkaSourceError": "options",
    "KafkaDataLossError": "options", "SourceOptions": "options", "parse_options": "options",
    "GROUP_ID_PREFIX": "options",
    "CAUGHT_UP": "offsets", "caught_up_mark": "offsets",
    "offsets_to_json": "offsets", "offsets_from_json": "offsets", "rate_limit": "offsets",
    "ReadSpec": "client", "READ_AHEAD_MESSAGES": "client", "READ_AHEAD_BACKOFF_MS": "client",
    "KafkaInputPartition": "planning", "KafkaInputSplit": "planning", "Planner": "planning",
    "balance": "planning", "split_ranges": "planning",
    "kafka_schema": "consumer", "read_partition": "consumer", "read_split": "consumer",
    "KafkaDataSource": "datasource", "KafkaStreamReader": "datasource", "KafkaBatchReader": "datasource",
    "JVM_PROVIDER_CLASS": "read", "read_kafka_stream": "read", "read_kafka_batch": "read",
    "register": "read", "spark_kafka_available": "read",
}

__all__ = sorted(_WHERE)


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)

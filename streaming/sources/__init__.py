"""Kafka sources for the Spark query (bytes in; decoding lives in ``fencewatch.streaming.ingest.events``).

Names are loaded lazily so ``kafka_config`` (standard library only) can be
used without importing pyspark.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "KafkaDataSource",
    "KafkaDataLossError",
    "KafkaSourceError",
    "SHORT_NAME",
    "kafka_schema",
    "read_kafka_batch",
    "read_kafka_stream",
    "register",
    "spark_kafka_available",
]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from fencewatch.streaming.sources import kafka

        return getattr(kafka, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

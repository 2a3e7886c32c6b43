"""Brokers for the demo, the tests and the benchmarks; the runtime never imports this package.

``kafka.KafkaBroker`` starts Apache Kafka's own broker from jars that ``make jars`` fetched;
``tansu.EmbeddedBroker`` starts Tansu, the earlier stand-in, still there for what
needs it (docs/kafka-source.md says where). :func:`embedded_broker` picks one by name.
"""

from __future__ import annotations

from typing import Any

#: What ``embedded_broker`` and ``fencewatch demo --broker`` take besides a version.
BROKER_CHOICES = ("kafka", "tansu")


def embedded_broker(spec: str = "kafka") -> Any:
    """An unstarted broker to use in ``with``: ``kafka`` (the default version), a Kafka
    version (``4.3``, ``4.3.1``) or ``tansu``."""
    spec = (spec or "kafka").strip().lower()
    if spec == "tansu":
        from fencewatch.streaming.brokers.tansu import EmbeddedBroker

        return EmbeddedBroker()
    from fencewatch.streaming.brokers.kafka import DEFAULT_VERSION, KafkaBroker

    version = DEFAULT_VERSION if spec == "kafka" else spec.removeprefix("kafka-")
    return KafkaBroker(version)

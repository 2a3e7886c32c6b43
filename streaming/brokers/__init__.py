"""Brokers for the demo, the tests and the benchmarks; the runtime never imports this package.

``kafka.KafkaBroker`` starts Apache Kafka's own broker from jars that ``make jars`` fetched;
``cluster.KafkaCluster`` three of its nodes as one cluster; ``tansu.EmbeddedBroker`` starts
Tansu, the earlier stand-in, still there for what needs it (docs/kafka-source.md says where). :func:`embedded_broker` picks one by name.
"""

from __future__ import annotations

from typing import Any

#: What ``embedded_broker`` and ``fencewatch demo --broker`` take besides a version.
BROKER_CHOICES = ("kafka", "tansu")


def embedded_broker(spec: str = "kafka", nodes: int = 1) -> Any:
    """An unstarted broker to use in ``with``: ``kafka`` (the default version), a Kafka
    version (``4.3``, ``4.3.1``) or ``tansu``; with ``nodes`` > 1 an Apache Kafka cluster of
    that many nodes (``cluster.KafkaCluster``: what a coordinator move needs)."""
    spec = (spec or "kafka").strip().lower()
    if spec == "tansu":
        if nodes != 1:
            raise ValueError(f"Tansu runs as one broker; {nodes} brokers need Apache Kafka (--broker kafka or a version)")
        from fencewatch.streaming.brokers.tansu import EmbeddedBroker

        return EmbeddedBroker()
    from fencewatch.streaming.brokers.kafka import DEFAULT_VERSION, KafkaBroker

    version = DEFAULT_VERSION if spec == "kafka" else spec.removeprefix("kafka-")
    if nodes != 1:
        from fencewatch.streaming.brokers.cluster import KafkaCluster

        return KafkaCluster(version, nodes=nodes)
    return KafkaBroker(version)

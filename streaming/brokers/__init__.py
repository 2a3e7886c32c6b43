"""Brokers for the demo, the tests and the benchmarks; the runtime never imports this package.

``kafka.KafkaBroker`` starts Apache Kafka's own broker from jars that ``make jars`` fetched.
"""

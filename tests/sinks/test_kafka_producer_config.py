"""The Kafka writer's producer settings: built without a broker (librdkafka connects lazily)."""
import pytest

from fencewatch.sinks.kafka import KafkaOutputs


@pytest.mark.parametrize("given, expected", [(None, True), ("false", False), ("TRUE", True), (False, False)])
def test_delivery_reports_for_failures_only_unless_the_user_says_otherwise(given, expected):
    client = {"bootstrap.servers": "127.0.0.1:1"}
    if given is not None:
        client["delivery.report.only.error"] = given  # a user's kafka.* setting arrives as text
    out = KafkaOutputs(client, verdicts_topic="v", alerts_topic=None, dlq_topic=None)
    try:
        assert out.producer_config["delivery.report.only.error"] is expected
    finally:
        out.close()

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


def test_alerts_format_auto_is_avro_only_with_a_serializer():
    client = {"bootstrap.servers": "127.0.0.1:1"}
    plain = KafkaOutputs(client, verdicts_topic=None, alerts_topic="a", dlq_topic=None)
    registry = KafkaOutputs(client, verdicts_topic=None, alerts_topic="a", dlq_topic=None,
                            alert_serializer=lambda alert, topic: b"")
    fixed = KafkaOutputs(client, verdicts_topic=None, alerts_topic="a", dlq_topic=None, alerts_format="avro")
    try:
        assert (plain.alerts_format, registry.alerts_format, fixed.alerts_format) == ("json", "avro", "avro")
    finally:
        for out in (plain, registry, fixed):
            out.close()
    with pytest.raises(ValueError, match="valid: auto, avro, json"):
        KafkaOutputs(client, verdicts_topic=None, alerts_topic="a", dlq_topic=None, alerts_format="xml")

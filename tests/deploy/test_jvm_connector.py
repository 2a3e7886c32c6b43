"""The options our code hands to Spark's own Kafka connector (``format("kafka")``), read back
from Spark's ``DataStreamReader`` in a session without the connector's jars (the ``spark``
fixture's): the connector itself runs for real in tests/streaming/test_connector_job.py and in
the fault tests (``kafka_source`` spark), with the jars ``make connector-jars`` fetches.

What is checked here, with a real local Spark:

- the options ``load()`` would pass to the provider, against the rules Spark's provider enforces
  before a query starts: ``KafkaSourceProvider.validateGeneralOptions`` and
  ``validateStreamOptions`` (apache/spark, connector/kafka-0-10-sql, read at 04fc74d), restated
  below;
- librdkafka-style client settings arrive as the Java client's (``sasl.jaas.config``), the form
  kafka-clients needs;
- without the jars, ``load()`` fails exactly where they are needed (Spark's "Failed to find data
  source: kafka", KAFKA_DATA_SOURCE_NOT_ENABLED from 4.3), and ``implementation="spark"`` says how
  to fetch them.
"""
from __future__ import annotations

import re

import pytest

pytestmark = [pytest.mark.spark, pytest.mark.slow]

# Spark's KafkaSourceProvider: exactly one strategy, a bootstrap, and these kafka.* refused.
STRATEGIES = ("assign", "subscribe", "subscribepattern")
REFUSED_KAFKA = ("auto.offset.reset", "key.deserializer", "value.deserializer", "enable.auto.commit",
                 "interceptor.classes")
# librdkafka names that kafka-clients does not know (it would ignore them: the login would fail).
LIBRDKAFKA_ONLY = ("sasl.username", "sasl.password", "ssl.ca.location", "ssl.key.location",
                   "ssl.certificate.location")


def spark_provider_problems(options: dict[str, str], *, streaming: bool) -> list[str]:
    """What Spark's KafkaSourceProvider would reject in these options (its checks, restated)."""
    lower = {k.lower(): v for k, v in options.items()}
    problems = []
    strategies = [s for s in STRATEGIES if s in lower]
    if len(strategies) != 1:
        problems.append(f"exactly one of {STRATEGIES} must be set, got {strategies}")
    elif strategies[0] == "subscribe" and not [t for t in lower["subscribe"].split(",") if t.strip()]:
        problems.append("no topics to subscribe to")
    elif strategies[0] == "assign" and not lower["assign"].strip().startswith("{"):
        problems.append("assign must be a JSON object")
    if "kafka.bootstrap.servers" not in lower:
        problems.append("kafka.bootstrap.servers must be specified")
    problems += [f"kafka.{k} is not supported" for k in REFUSED_KAFKA if f"kafka.{k}" in lower]
    if streaming and "endingoffsets" in lower:
        problems.append("ending offset not valid in streaming queries")
    for key in ("startingoffsets",):
        v = lower.get(key)
        if v is not None and v not in ("earliest", "latest") and not v.strip().startswith("{"):
            problems.append(f"{key} must be earliest, latest or JSON, got {v!r}")
    if "failondataloss" in lower and lower["failondataloss"] not in ("true", "false"):
        problems.append("failOnDataLoss must be true or false")
    if "maxoffsetspertrigger" in lower and not lower["maxoffsetspertrigger"].isdigit():
        problems.append("maxOffsetsPerTrigger must be a long")
    return problems


def _reader_state(spark, reader) -> tuple[str, dict[str, str]]:
    """(format, options) as Spark's DataStreamReader holds them for ``load()``."""
    j = reader._jreader
    fields = {}
    for name in ("source", "extraOptions"):
        f = j.getClass().getDeclaredField(name)
        f.setAccessible(True)
        fields[name] = f.get(j)
    as_java = spark._jvm.scala.jdk.javaapi.CollectionConverters.asJava
    return str(fields["source"]), dict(as_java(fields["extraOptions"].originalMap()))


def _job_options(cfg) -> dict[str, str]:
    """The source options ``fencewatch run`` builds from its config (streaming/runtime/inputs.py build_inputs)."""
    s = cfg.streaming
    options = {"startingOffsets": s.starting_offsets, "failOnDataLoss": str(s.fail_on_data_loss).lower()}
    if s.max_offsets_per_trigger:
        options["maxOffsetsPerTrigger"] = str(s.max_offsets_per_trigger)
    options.update({f"kafka.{k}": v for k, v in s.kafka.items()})
    return options


@pytest.fixture(scope="module")
def jvm_reader_options(spark):
    from fencewatch.streaming.config.settings import load_config
    from fencewatch.streaming.sources.kafka.read import _apply, _reader_options, spark_kafka_available

    assert not spark_kafka_available(spark), "the spark fixture's session is the one without the connector"
    # All client settings as -X gives them (merging file + environment + -X is the config's own test).
    cfg = load_config(
        environ={},
        overrides={"streaming": {"bootstrap_servers": "kafka-0:9093,kafka-1:9093", "starting_offsets": "earliest",
                                 "max_offsets_per_trigger": 50_000,
                                 "kafka": {"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
                                           "sasl.username": "fencewatch", "sasl.password": "pw"}}})
    s = cfg.streaming
    merged = _reader_options(s.bootstrap_servers, [s.heartbeats_topic, s.offsets_topic], _job_options(cfg))
    reader = _apply(spark.readStream, "kafka", merged)
    return cfg, reader, _reader_state(spark, reader)


def test_the_job_hands_spark_options_its_kafka_provider_accepts(jvm_reader_options):
    cfg, _, (fmt, options) = jvm_reader_options
    assert fmt == "kafka"
    assert spark_provider_problems(options, streaming=True) == []
    assert options["subscribe"] == f"{cfg.streaming.heartbeats_topic},{cfg.streaming.offsets_topic}"
    assert options["kafka.bootstrap.servers"] == "kafka-0:9093,kafka-1:9093"
    assert options["startingOffsets"] == "earliest" and options["maxOffsetsPerTrigger"] == "50000"
    # Spark's consumers ask for the partition's offset range after every poll: fewer, larger polls
    assert options["kafka.max.poll.records"] == "10000"
    # a fetch that finds nothing past a task's range is not held 500 ms (read.CONNECTOR_FETCH_MAX_WAIT_MS)
    assert options["kafka.fetch.max.wait.ms"] == "10"


def test_an_operators_fetch_wait_wins_in_javas_name(spark):
    """``kafka.fetch.max.wait.ms`` reaches Spark's connector under Java's name (the configuration
    turns it into librdkafka's ``fetch.wait.max.ms``; the connector's consumer ignored that name)."""
    from fencewatch.streaming.config.kafka import to_librdkafka
    from fencewatch.streaming.sources.kafka.read import _apply, _reader_options

    rd, _ = to_librdkafka({"fetch.max.wait.ms": "250"})
    reader = _apply(spark.readStream, "kafka", _reader_options("b:9092", ["t"], {f"kafka.{k}": v for k, v in rd.items()}))
    _, options = _reader_state(spark, reader)
    assert options["kafka.fetch.max.wait.ms"] == "250" and "kafka.fetch.wait.max.ms" not in options


def test_client_settings_reach_the_java_client_in_its_own_names(jvm_reader_options):
    _, _, (_, options) = jvm_reader_options
    kafka = {k[len("kafka."):]: v for k, v in options.items() if k.startswith("kafka.")}
    assert not [k for k in LIBRDKAFKA_ONLY if k in kafka], kafka.keys()
    assert kafka["security.protocol"] == "SASL_SSL" and kafka["sasl.mechanism"] == "SCRAM-SHA-512"
    jaas = kafka["sasl.jaas.config"]
    assert re.fullmatch(r'org\.apache\.kafka\.common\.security\.scram\.ScramLoginModule required '
                        r'username="fencewatch" password="pw";', jaas), jaas


def test_the_restated_rules_reject_what_spark_rejects():
    """Negative control for ``spark_provider_problems``: each rule can fail."""
    base = {"subscribe": "a", "kafka.bootstrap.servers": "h:1"}
    assert spark_provider_problems(base, streaming=True) == []
    assert spark_provider_problems({**base, "subscribePattern": "a.*"}, streaming=True)
    assert spark_provider_problems({"subscribe": "a"}, streaming=True)
    assert spark_provider_problems({**base, "kafka.auto.offset.reset": "earliest"}, streaming=True)
    assert spark_provider_problems({**base, "endingOffsets": "latest"}, streaming=True)
    assert spark_provider_problems({**base, "startingOffsets": "begin"}, streaming=True)


def test_load_stops_exactly_where_the_connector_jar_is_needed(jvm_reader_options, spark):
    from pyspark.errors import AnalysisException

    from fencewatch.streaming.sources.kafka import KafkaSourceError, read_kafka_stream

    _, reader, _ = jvm_reader_options
    # Spark 4.2 says it in words, 4.3 with its error class
    with pytest.raises(AnalysisException, match="KAFKA_DATA_SOURCE_NOT_ENABLED|Failed to find data source: kafka"):
        reader.load()
    with pytest.raises(KafkaSourceError, match=r"make connector-jars. fetches spark-sql-kafka-0-10_2\.13"):
        read_kafka_stream(spark, bootstrap="h:1", topics=["a"], implementation="spark")

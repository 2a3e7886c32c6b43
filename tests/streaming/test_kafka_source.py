"""The fencewatch-kafka Spark source: options, planning, reading over Tansu, and Spark queries.

Spark tests (marked ``spark``) run real streaming queries on local[2] against
the session broker; the others exercise the same code without Spark. Every
produce phase ends with one single-record produce per partition
(``produce_marker``) because Tansu under-reports the high watermark after a
batched produce until the next one (see docs/kafka-source.md).
"""

from __future__ import annotations

import json
import logging
from collections import Counter

import pytest
from confluent_kafka import Producer
from hypothesis import example, given, settings
from hypothesis import strategies as st

from fencewatch.streaming.brokers.common import delete_topics, create_topics, produce_marker
from fencewatch.streaming.sources.kafka import (
    KafkaDataLossError,
    KafkaInputPartition,
    KafkaSourceError,
    KafkaStreamReader,
    ReadSpec,
    Planner,
    kafka_schema,
    offsets_from_json,
    offsets_to_json,
    parse_options,
    rate_limit,
    read_kafka_batch,
    read_kafka_stream,
    balance,
    read_partition,
    read_split,
    split_ranges,
)
from fencewatch.streaming.config.kafka import KafkaConfigError, parse_jaas_credentials, to_java

BOOT = {"kafka.bootstrap.servers": "127.0.0.1:9"}


def _produce(bootstrap: str, topic: str, values: list[bytes], *, partitions: int,
             headers: list | None = None, timestamp_ms: int | None = None) -> None:
    """Batched produce (round-robin over partitions), then a marker per partition."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5,
                         "queue.buffering.max.messages": 2_000_000})
    for i, value in enumerate(values):
        kwargs = {}
        if headers is not None:
            kwargs["headers"] = headers
        if timestamp_ms is not None:
            kwargs["timestamp"] = timestamp_ms
        producer.produce(topic, value=value, key=b"k%d" % (i % 17), partition=i % partitions, **kwargs)
        if i % 10_000 == 0:
            producer.poll(0)
    assert producer.flush(60) == 0
    produce_marker({"bootstrap.servers": bootstrap}, topic, range(partitions), value=b"marker")


def _rows(batches) -> list[dict]:
    rows = []
    for batch in batches:
        rows.extend(batch.to_pylist())
    return rows


# --------------------------------------------------------------------------- options


@pytest.mark.parametrize(
    ("options", "message"),
    [
        pytest.param({**BOOT}, "one of the options subscribe, subscribePattern, assign", id="no-strategy"),
        pytest.param({**BOOT, "subscribe": "a", "assign": '{"a":[0]}'}, "only one of", id="two-strategies"),
        pytest.param({"subscribe": "a"}, "kafka.bootstrap.servers must be set", id="no-bootstrap"),
        pytest.param({**BOOT, "subscribe": " , "}, "names no topics", id="empty-subscribe"),
        pytest.param({**BOOT, "subscribePattern": "a("}, "not a valid regular expression", id="bad-pattern"),
        pytest.param({**BOOT, "assign": "[0]"}, "option assign must be JSON", id="bad-assign"),
        pytest.param({**BOOT, "subscribe": "a", "startingOffsets": "first"}, "'earliest', 'latest' or JSON",
                     id="bad-starting"),
        pytest.param({**BOOT, "subscribe": "a", "startingOffsets": '{"a":{"0":-3}}'}, "-2 (earliest)",
                     id="bad-starting-offset"),
        pytest.param({**BOOT, "subscribe": "a", "maxOffsetsPerTrigger": "many"}, "positive integer",
                     id="bad-max-offsets"),
        pytest.param({**BOOT, "subscribe": "a", "maxOffsetsPerTrigger": "0"}, "positive integer",
                     id="zero-max-offsets"),
        pytest.param({**BOOT, "subscribe": "a", "failOnDataLoss": "yes"}, "true or false", id="bad-bool"),
        pytest.param({**BOOT, "subscribe": "a", "startingTimestamp": "1"}, "Spark's own Kafka connector",
                     id="spark-only-option"),
        pytest.param({**BOOT, "subscribe": "a", "startOffsets": "earliest"}, "unknown option 'startOffsets'",
                     id="typo"),
        pytest.param({**BOOT, "subscribe": "a", "endingOffsets": "latest"}, "only valid for batch",
                     id="ending-in-stream"),
        pytest.param({**BOOT, "subscribe": "a", "kafka.auto.offset.reset": "earliest"}, "startingOffsets",
                     id="auto-offset-reset"),
        pytest.param({**BOOT, "subscribe": "a", "kafka.value.deserializer": "x"}, "always returned as bytes",
                     id="deserializer"),
        pytest.param({**BOOT, "subscribe": "a", "kafka.isolation.level": "serializable"}, "read_committed",
                     id="bad-isolation"),
        pytest.param({**BOOT, "subscribe": "a", "kafka.ssl.truststore.location": "/x.jks"}, "PEM",
                     id="jks-truststore"),
        pytest.param({**BOOT, "subscribe": "a", "kafka.sasl.jaas.config":
                      "com.sun.security.auth.module.Krb5LoginModule required useKeyTab=true;"},
                     "sasl.kerberos.keytab", id="kerberos-jaas"),
    ],
)
def test_bad_options_fail_with_a_clear_message(options, message):
    with pytest.raises(KafkaSourceError, match=message.replace("(", r"\(").replace(")", r"\)")):
        parse_options(options, streaming=True)


def test_batch_rejects_latest_start():
    with pytest.raises(KafkaSourceError, match="not valid for batch"):
        parse_options({**BOOT, "subscribe": "a", "startingOffsets": "latest"}, streaming=False)


def test_options_are_case_insensitive_and_defaults_match_spark():
    opts = parse_options({**BOOT, "SUBSCRIBE": "a, b,a", "MaxOffsetsPerTrigger": "10"})
    assert opts.subscribe == ("a", "b")
    assert opts.max_offsets_per_trigger == 10
    assert opts.starting_offsets == "latest"
    assert opts.fail_on_data_loss is True
    assert opts.isolation_level == "read_uncommitted"  # Spark's default, not librdkafka's
    assert parse_options({**BOOT, "subscribe": "a"}, streaming=False).starting_offsets == "earliest"


def test_a_task_s_consumer_reads_ahead_a_bounded_amount_unless_the_user_says_otherwise():
    """A task reads a bounded range: librdkafka's default prefetch (100,000 records per partition)
    fetched far past its end, for nothing (READ_AHEAD_MESSAGES)."""
    from fencewatch.streaming.sources.kafka.client import (READ_AHEAD_BACKOFF_MS, READ_AHEAD_MESSAGES, ClientLog,
                                                           consumer_config)

    def config(**kafka):
        opts = parse_options({**BOOT, "subscribe": "a", **{f"kafka.{k}": v for k, v in kafka.items()}})
        return consumer_config(ReadSpec.of(opts), lambda err: None, ClientLog())

    assert config()["queued.min.messages"] == READ_AHEAD_MESSAGES < 100_000
    # ... and a full queue is fetched again soon: librdkafka's 1 s wait made a task crawl
    assert config()["fetch.queue.backoff.ms"] == READ_AHEAD_BACKOFF_MS < 100
    assert config(**{"queued.min.messages": "50000"})["queued.min.messages"] == "50000"
    assert config(**{"queued.min.messages": "50000"})["enable.auto.commit"] is False  # ours still win where they must


def test_jaas_plain_and_scram_translate_to_librdkafka_and_secrets_stay_out_of_logs(caplog):
    jaas = ('org.apache.kafka.common.security.scram.ScramLoginModule required '
            'username="svc" password="s3cr\\"et";')
    opts = parse_options({**BOOT, "subscribe": "a", "kafka.security.protocol": "SASL_SSL",
                          "kafka.sasl.mechanism": "SCRAM-SHA-512", "kafka.sasl.jaas.config": jaas,
                          "kafka.ssl.truststore.type": "PEM", "kafka.ssl.truststore.location": "/ca.pem",
                          "kafka.fetch.max.wait.ms": "100", "kafka.max.poll.records": "500"})
    config = opts.config()
    assert config["sasl.username"] == "svc" and config["sasl.password"] == 's3cr"et'
    assert config["sasl.mechanisms"] == "SCRAM-SHA-512"
    assert config["ssl.ca.location"] == "/ca.pem"
    assert config["fetch.wait.max.ms"] == "100"
    assert "max.poll.records" not in config
    spec = ReadSpec.of(opts)
    part = KafkaInputPartition("a", 0, 0, 10, spec)
    for text in (repr(opts), repr(spec), repr(part)):
        assert "s3cr" not in text
    assert "[redacted]" in repr(opts)


def test_jaas_errors_never_echo_the_password():
    with pytest.raises(KafkaConfigError) as info:
        parse_jaas_credentials('org.apache.kafka.common.security.plain.PlainLoginModule required password="hunter2";')
    assert "hunter2" not in str(info.value)


def test_librdkafka_style_credentials_become_jaas_for_spark_connector():
    java = to_java({"bootstrap.servers": "b:9092", "sasl.mechanisms": "PLAIN", "sasl.username": "u",
                    "sasl.password": 'p"w', "ssl.ca.location": "/ca.pem"})
    assert java["sasl.mechanism"] == "PLAIN"
    assert java["sasl.jaas.config"] == ('org.apache.kafka.common.security.plain.PlainLoginModule required '
                                        'username="u" password="p\\"w";')
    assert parse_jaas_credentials(java["sasl.jaas.config"]) == ("u", 'p"w')
    assert (java["ssl.truststore.type"], java["ssl.truststore.location"]) == ("PEM", "/ca.pem")


# --------------------------------------------------------------------------- planning


def test_offsets_json_is_sorted_like_sparks_checkpoint():
    offsets = {("b", 10): 5, ("a", 2): 7, ("b", 2): 1, ("a", 0): 3}
    as_json = offsets_to_json(offsets)
    assert json.dumps(as_json) == '{"a": {"0": 3, "2": 7}, "b": {"2": 1, "10": 5}}'
    assert offsets_from_json(json.loads(json.dumps(as_json))) == offsets


tp_names = st.tuples(st.sampled_from(["a", "b"]), st.integers(0, 5))


@settings(max_examples=300, deadline=None)
@given(
    backlog=st.dictionaries(tp_names, st.tuples(st.integers(0, 10_000), st.integers(0, 5_000)), min_size=1),
    max_offsets=st.integers(1, 20_000),
)
def test_rate_limit_reads_exactly_the_budget_and_starves_nobody(backlog, max_offsets):
    begin = {tp: b for tp, (b, _) in backlog.items()}
    end = {tp: b + lag for tp, (b, lag) in backlog.items()}
    limited = rate_limit(begin, end, max_offsets)
    total_lag = sum(lag for _, lag in backlog.values())
    assert set(limited) == set(end)
    assert all(begin[tp] <= limited[tp] <= end[tp] for tp in end)
    assert sum(limited[tp] - begin[tp] for tp in end) == min(total_lag, max_offsets)
    lagging = [tp for tp, (_, lag) in backlog.items() if lag > 0]
    if max_offsets >= len(lagging):
        assert all(limited[tp] > begin[tp] for tp in lagging)


@settings(max_examples=200, deadline=None)
@given(
    sizes=st.lists(st.integers(1, 5_000), min_size=1, max_size=6),
    min_partitions=st.one_of(st.none(), st.integers(1, 20)),
    max_records=st.one_of(st.none(), st.integers(1, 3_000)),
)
def test_split_ranges_cover_each_range_exactly(sizes, min_partitions, max_records):
    ranges = [(("t", i), 100 * i, 100 * i + size) for i, size in enumerate(sizes)]
    pieces = split_ranges(ranges, min_partitions=min_partitions, max_records=max_records)
    for tp, frm, until in ranges:
        mine = [(a, b) for t, a, b in pieces if t == tp]
        assert mine[0][0] == frm and mine[-1][1] == until
        assert all(a < b for a, b in mine)
        assert all(prev[1] == nxt[0] for prev, nxt in zip(mine, mine[1:]))
        if max_records:
            assert all(b - a <= max_records for a, b in mine)
    if min_partitions:
        assert len(pieces) >= min(min_partitions, sum(sizes))


@settings(max_examples=200, deadline=None)
@given(sizes=st.lists(st.integers(1, 5_000), min_size=1, max_size=9), n=st.integers(1, 8))
@example(sizes=[5], n=4)  # three shares of two: three tasks
def test_balance_puts_each_offset_in_one_task_of_about_equal_size(sizes, n):
    spec = ReadSpec((), "g", "read_uncommitted", True, 1000, False)
    parts = [KafkaInputPartition("hb" if i < 2 else "off", i, 100 * i, 100 * i + size, spec) for i, size in
             enumerate(sizes)]
    splits = balance(parts, n)
    total = sum(sizes)
    share = -(-total // n)
    assert len(splits) == -(-total // share) <= n  # as many tasks as full shares take, never more than n
    counts = [sum(r.until_offset - r.from_offset for r in split.ranges) for split in splits]
    assert sum(counts) == total and max(counts) <= share  # no task reads more than its share
    assert all(c == share for c in counts[:-1])  # every task but the last reads exactly its share
    for p in parts:  # each range's offsets, once, in order
        mine = [r for split in splits for r in split.ranges if (r.topic, r.partition) == (p.topic, p.partition)]
        assert mine[0].from_offset == p.from_offset and mine[-1].until_offset == p.until_offset
        assert all(a.until_offset == b.from_offset for a, b in zip(mine, mine[1:]))


# --------------------------------------------------------------------------- reading over Tansu


def _spec(broker: str, **overrides) -> ReadSpec:
    opts = parse_options({"kafka.bootstrap.servers": broker, "subscribe": "x",
                          "kafkaConsumer.pollTimeoutMs": "20000", **overrides})
    return ReadSpec.of(opts)


@pytest.mark.broker
def test_read_partition_returns_exactly_the_range_as_spark_kafka_rows(broker, topic_factory):
    topic = topic_factory(partitions=1)
    _produce(broker, topic, [b"v%d" % i for i in range(5000)], partitions=1,
             headers=[("h", b"1"), ("n", None)], timestamp_ms=1_700_000_000_123)
    spec = _spec(broker, includeHeaders="true")
    batches = list(read_partition(KafkaInputPartition(topic, 0, 1000, 3000, spec)))
    rows = _rows(batches)
    assert [r["offset"] for r in rows] == list(range(1000, 3000))  # stops at the range end, more records exist
    assert [r["value"] for r in rows] == [b"v%d" % i for i in range(1000, 3000)]
    first = rows[0]
    assert first["topic"] == topic and first["partition"] == 0 and first["key"] == b"k%d" % (1000 % 17)
    assert first["timestampType"] == 0  # CreateTime in Java's numbering
    assert first["timestamp"].isoformat() == "2023-11-14T22:13:20.123000+00:00"
    assert first["headers"] == [{"key": "h", "value": b"1"}, {"key": "n", "value": None}]
    import pyarrow as pa
    from pyspark.sql.pandas.types import to_arrow_schema
    assert batches[0].schema.equals(to_arrow_schema(kafka_schema(True), timezone="UTC"))
    assert batches[0].schema.field("timestamp").type == pa.timestamp("us", tz="UTC")


@pytest.mark.broker
def test_a_split_reads_its_ranges_with_one_consumer_as_each_range_alone(broker, topic_factory):
    topic = topic_factory(partitions=3)
    _produce(broker, topic, [b"v%d" % i for i in range(3000)], partitions=3)
    spec = _spec(broker)
    parts = [KafkaInputPartition(topic, p, 0, 1000, spec) for p in range(3)]
    splits = balance(parts, 2)
    assert [len(s.ranges) for s in splits] == [2, 2]  # partition 1 is cut between the two tasks
    alone = [(r["partition"], r["offset"], r["value"]) for p in parts for r in _rows(read_partition(p))]
    together = [(r["partition"], r["offset"], r["value"]) for s in splits for r in _rows(read_split(s))]
    assert together == alone and len(alone) == 3000


@pytest.mark.broker
@pytest.mark.parametrize("ahead", [4, 2])
def test_a_split_assigns_the_next_ranges_before_reading_and_closes_each_at_its_end(broker, topic_factory, monkeypatch,
                                                                                   ahead):
    """The ranges' connections and first fetches overlap (a live task read four ranges one after
    the other), at most ``RANGES_AHEAD`` at once; each consumer closes when its range is read."""
    from fencewatch.streaming.sources.kafka import consumer as cons

    topic = topic_factory(partitions=3)
    _produce(broker, topic, [b"v%d" % i for i in range(3000)], partitions=3)
    split = balance([KafkaInputPartition(topic, p, 0, 1000, _spec(broker)) for p in range(3)], 1)[0]
    monkeypatch.setattr(cons, "RANGES_AHEAD", ahead)
    events = []
    for name in ("start", "close"):
        real = getattr(cons._RangeRead, name)
        monkeypatch.setattr(cons._RangeRead, name, lambda self, real=real, name=name: (
            events.append((name, self.part.partition)) if self.consumer is not None else None, real(self))[1])
    rows = []
    for batch in read_split(split):
        events.append(("batch", batch.column("partition")[0].as_py()))
        rows += batch.to_pylist()
    assert [e for e in events if e[0] == "start"] == [("start", 0), ("start", 1), ("start", 2)]
    assert events.index(("start", 1)) < events.index(("batch", 0))
    if ahead >= 3:
        assert events.index(("start", 2)) < events.index(("batch", 0))
    else:  # the third range waits for the first to be read and closed
        assert events.index(("close", 0)) < events.index(("start", 2)) < events.index(("batch", 1))
    # a range's consumer is closed before the next range's records are handed on
    assert events.index(("close", 0)) < events.index(("batch", 1)) and events.index(("close", 1)) < events.index(("batch", 2))
    assert [e for e in events if e[0] == "close"] == [("close", 0), ("close", 1), ("close", 2)]
    assert [(r["partition"], r["offset"]) for r in rows] == [(p, o) for p in range(3) for o in range(1000)]


@pytest.mark.broker
def test_read_committed_range_ending_on_a_transaction_marker_completes(broker, topic_factory):
    """Commit markers take offsets but are no records: the read must end by position."""
    topic = topic_factory(partitions=1)
    producer = Producer({"bootstrap.servers": broker, "transactional.id": f"tx-{topic}"})
    producer.init_transactions(30)
    for txn in range(3):
        producer.begin_transaction()
        for i in range(4):
            producer.produce(topic, value=b"t%d-%d" % (txn, i), partition=0)
        producer.commit_transaction(30)
    opts = parse_options({"kafka.bootstrap.servers": broker, "subscribe": topic,
                          "kafka.isolation.level": "read_committed", "startingOffsets": "earliest"})
    planner = Planner(opts)
    end = planner.latest({})
    assert end == {(topic, 0): 15}  # 12 records + 3 commit markers
    parts = planner.plan({(topic, 0): 0}, end)
    rows = _rows(b for part in parts for b in read_partition(part))
    assert [r["value"] for r in rows] == [b"t%d-%d" % (t, i) for t in range(3) for i in range(4)]
    assert [r["offset"] for r in rows] == [o for o in range(15) if o % 5 != 4]
    # Every range end, inside or right after a gap, yields exactly the records below it.
    spec = parts[0].spec
    for frm, until in [(0, 4), (0, 5), (0, 6), (3, 9), (4, 5), (5, 10), (9, 11), (14, 15)]:
        got = [r["offset"] for r in _rows(read_partition(KafkaInputPartition(topic, 0, frm, until, spec)))]
        assert got == [o for o in range(frm, until) if o % 5 != 4], (frm, until)


@pytest.mark.broker
def test_open_transaction_is_not_mistaken_for_data_loss(broker, topic_factory):
    """Under read_committed the end offset trails while a transaction is open.

    Tansu even answers 0 for the last stable offset then (after an earlier
    committed transaction); Apache Kafka answers the open transaction's first
    offset. Neither may be reported as data loss or move the query back.
    """
    topic = topic_factory(partitions=1)
    producer = Producer({"bootstrap.servers": broker, "transactional.id": f"open-{topic}"})
    producer.init_transactions(30)
    producer.begin_transaction()
    for i in range(5):
        producer.produce(topic, value=b"c%d" % i, partition=0)
    producer.commit_transaction(30)  # offsets 0..4 + commit marker at 5
    producer.begin_transaction()
    producer.produce(topic, value=b"pending", partition=0)
    producer.flush(30)
    try:
        opts = parse_options({"kafka.bootstrap.servers": broker, "subscribe": topic,
                              "kafka.isolation.level": "read_committed"})
        assert Planner(opts).latest({(topic, 0): 6}) == {(topic, 0): 6}
    finally:
        producer.abort_transaction(30)


@pytest.mark.broker
def test_deleted_topic_is_data_loss_unless_allowed(broker, caplog):
    import uuid

    topic = f"gone-{uuid.uuid4().hex[:8]}"
    config = {"bootstrap.servers": broker}
    create_topics(config, [topic], 1)
    _produce(broker, topic, [b"x"] * 10, partitions=1)
    delete_topics(config, [topic])
    strict = Planner(parse_options({"kafka.bootstrap.servers": broker, "subscribe": topic}))
    with pytest.raises(KafkaDataLossError, match=rf"{topic}\[0\].*failOnDataLoss=false"):
        strict.latest({(topic, 0): 5})
    lenient = Planner(parse_options({"kafka.bootstrap.servers": broker, "subscribe": topic,
                                      "failOnDataLoss": "false"}))
    with caplog.at_level(logging.WARNING):
        assert lenient.latest({(topic, 0): 5}) == {}
    assert "no longer exist" in caplog.text
    # A topic taken out of the subscription between runs is not data loss.
    other = Planner(parse_options({"kafka.bootstrap.servers": broker, "subscribe": f"{topic}-other"}))
    assert other.latest({(topic, 0): 5}) == {}


@pytest.mark.broker
def test_recreated_topic_restarts_from_earliest_when_loss_is_allowed(broker, topic_factory):
    import uuid

    topic = f"again-{uuid.uuid4().hex[:8]}"
    config = {"bootstrap.servers": broker}
    create_topics(config, [topic], 1)
    try:
        _produce(broker, topic, [b"old"] * 3, partitions=1)  # offsets 0..3 with the marker
        delete_topics(config, [topic])
        create_topics(config, [topic], 1)
        strict = Planner(parse_options({"kafka.bootstrap.servers": broker, "subscribe": topic}))
        old_end = {(topic, 0): 50}
        with pytest.raises(KafkaDataLossError, match="went back from 50"):
            strict.latest(old_end)
        lenient = Planner(parse_options({"kafka.bootstrap.servers": broker, "subscribe": topic,
                                          "failOnDataLoss": "false"}))
        _produce(broker, topic, [b"new1", b"new2"], partitions=1)
        end = lenient.latest(old_end)
        parts = lenient.plan(old_end, end)
        rows = _rows(b for part in parts for b in read_partition(part))
        assert [r["value"] for r in rows] == [b"new1", b"new2", b"marker"]
    finally:
        delete_topics(config, [topic])


@pytest.mark.broker
def test_sasl_settings_reach_librdkafka_and_auth_failure_is_clear(broker, topic_factory):
    """SASL against the plaintext test broker must fail fast, say why, and keep the password out."""
    topic = topic_factory(partitions=1)
    opts = parse_options({"kafka.bootstrap.servers": broker, "subscribe": topic,
                          "kafkaConsumer.pollTimeoutMs": "5000", "kafka.security.protocol": "SASL_PLAINTEXT",
                          "kafka.sasl.jaas.config": 'org.apache.kafka.common.security.plain.PlainLoginModule '
                                                    'required username="svc" password="hunter2";',
                          "kafka.sasl.mechanism": "PLAIN"})
    with pytest.raises(RuntimeError, match="_AUTHENTICATION|SASL") as on_executor:
        list(read_partition(KafkaInputPartition(topic, 0, 0, 1, ReadSpec.of(opts))))
    with pytest.raises(RuntimeError, match="_AUTHENTICATION|SASL") as on_driver:
        Planner(opts).latest({})
    for info in (on_executor, on_driver):
        assert "hunter2" not in str(info.value)
        assert "[redacted]" in str(info.value)


@pytest.mark.broker
def test_stream_reader_offsets_limit_and_new_partitions(broker, topic_factory):
    """Driver side without Spark: earliest start, ReadMaxRows budget, AvailableNow target."""
    from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

    topic = topic_factory(partitions=2)
    _produce(broker, topic, [b"v"] * 1000, partitions=2)  # 500 + marker per partition
    reader = KafkaStreamReader(parse_options({"kafka.bootstrap.servers": broker, "subscribe": topic,
                                              "startingOffsets": "earliest", "maxOffsetsPerTrigger": "300"}))
    start = reader.initialOffset()
    assert start == {topic: {"0": 0, "1": 0}}
    assert reader.getDefaultReadLimit() == ReadMaxRows(300)
    first = reader.latestOffset(start, ReadMaxRows(300))
    assert first == {topic: {"0": 150, "1": 150}}
    assert reader.latestOffset(start, ReadAllAvailable()) == {topic: {"0": 501, "1": 501}}
    # Partition 1 missing from `start` counts as new: it begins at its earliest offset.
    assert reader.latestOffset({topic: {"0": 501}}, ReadMaxRows(10)) == {topic: {"0": 501, "1": 10}}
    beyond = KafkaStreamReader(parse_options({"kafka.bootstrap.servers": broker, "subscribe": topic,
                                              "startingOffsets": json.dumps({topic: {"0": 9999, "1": -2}})}))
    with pytest.raises(KafkaSourceError, match=rf"beyond the end of {topic}\[0\] \(asked 9999, end offset 501\)"):
        beyond.initialOffset()
    missing = KafkaStreamReader(parse_options({"kafka.bootstrap.servers": broker, "subscribe": topic,
                                               "startingOffsets": json.dumps({topic: {"0": 3}})}))
    with pytest.raises(KafkaSourceError, match=rf"every subscribed partition; missing: {topic}\[1\]"):
        missing.initialOffset()
    reader.prepareForTriggerAvailableNow()
    _produce(broker, topic, [b"later"] * 10, partitions=2)
    assert reader.latestOffset(first, ReadAllAvailable()) == {topic: {"0": 501, "1": 501}}
    parts = reader.partitions(start, first)
    assert [(p.partition, p.from_offset, p.until_offset) for p in parts] == [(0, 0, 150), (1, 0, 150)]
    import pickle
    clone = pickle.loads(pickle.dumps(reader))  # what Spark ships to executors
    assert sum(b.num_rows for b in clone.read(parts[0])) == 150


@pytest.mark.broker
def test_caught_up_marks_batches_that_read_every_partition_to_its_end(broker, topic_factory):
    """includeCaughtUp: a batch cut short by maxOffsetsPerTrigger is not caught up, the one that
    reaches the end offsets found at planning is, and says so in its end offset (what Spark logs);
    a batch run again from the offset log by a new reader (a restart) keeps the mark it was planned
    with (issue 33: without it, a rerun held events its first attempt had written, and they were
    written again a batch later). The mark is a column on every row (what Hold.release reads)."""
    from pyspark.sql.streaming.datasource import ReadMaxRows

    topic = topic_factory(partitions=2)
    _produce(broker, topic, [b"v"] * 400, partitions=2)  # 200 + marker per partition
    options = {"kafka.bootstrap.servers": broker, "subscribe": topic, "startingOffsets": "earliest",
               "includeCaughtUp": "true"}
    reader = KafkaStreamReader(parse_options(options))
    start = reader.initialOffset()
    cut = reader.latestOffset(start, ReadMaxRows(100))
    assert not any(p.caught_up for p in reader.partitions(start, cut))
    assert "fencewatch:caught_up" not in cut
    end = reader.latestOffset(cut, ReadMaxRows(10_000))
    assert end["fencewatch:caught_up"] is True
    parts = reader.partitions(cut, end)
    assert parts and all(p.caught_up for p in parts)
    rows = _rows(b for p in parts for b in read_partition(p))
    assert len(rows) == 302 and all(r["caught_up"] is True for r in rows)
    logged = json.loads(json.dumps(end))  # as Spark writes offsets/N and reads it back
    _produce(broker, topic, [b"later"] * 10, partitions=2)  # the logs moved on before the restart
    restarted = KafkaStreamReader(parse_options(options))
    assert [p.caught_up for p in restarted.partitions(cut, logged)] == [True] * len(parts)
    assert not any(p.caught_up for p in restarted.partitions(start, json.loads(json.dumps(cut))))
    assert reader.latestOffset(end, ReadMaxRows(10_000)) != end  # the new records: a batch to plan
    plain = KafkaStreamReader(parse_options({k: v for k, v in options.items() if k != "includeCaughtUp"}))
    assert "fencewatch:caught_up" not in plain.latestOffset(end, ReadMaxRows(10_000))  # Spark's format
    plain = _rows(read_partition(KafkaInputPartition(topic, 0, 0, 10, _spec(broker))))
    assert "caught_up" not in plain[0]  # Spark's Kafka schema unless asked


@pytest.mark.broker
def test_subscribe_pattern_picks_up_topics_created_later(broker):
    import uuid

    prefix = f"pat-{uuid.uuid4().hex[:8]}"
    config = {"bootstrap.servers": broker}
    reader = KafkaStreamReader(parse_options({"kafka.bootstrap.servers": broker,
                                              "subscribePattern": rf"{prefix}-\d+"}))
    created = [f"{prefix}-1", f"{prefix}-2", f"{prefix}-x"]
    try:
        create_topics(config, created[:1], 1)
        _produce(broker, created[0], [b"a"] * 3, partitions=1)
        start = reader.initialOffset()  # startingOffsets=latest
        assert start == {created[0]: {"0": 4}}
        create_topics(config, created[1:], 1)
        _produce(broker, created[1], [b"b"] * 2, partitions=1)
        _produce(broker, created[2], [b"c"] * 2, partitions=1)  # does not match the pattern
        end = reader.latestOffset(start, None)
        assert end == {created[0]: {"0": 4}, created[1]: {"0": 3}}
        parts = reader.partitions(start, end)
        assert [(p.topic, p.from_offset, p.until_offset) for p in parts] == [(created[1], 0, 3)]
    finally:
        delete_topics(config, created)


# --------------------------------------------------------------------------- Spark


def _collector():
    """A foreachBatch function that keeps (batch_id, rows) on the driver."""
    seen: list[tuple[int, list]] = []

    def collect(df, batch_id):
        seen.append((batch_id, [tuple(r) for r in df.select("partition", "offset", "value").collect()]))

    return seen, collect


EXPECTED_SPARK_KAFKA_SCHEMA = (
    "struct<key:binary,value:binary,topic:string,partition:int,offset:bigint,"
    "timestamp:timestamp,timestampType:int>"
)


@pytest.mark.spark
@pytest.mark.broker
def test_schema_and_batch_read_match_sparks_kafka_source(spark, broker, topic_factory):
    topic = topic_factory(partitions=2)
    _produce(broker, topic, [b"v%d" % i for i in range(100)], partitions=2, headers=[("h", b"x")])
    df = read_kafka_batch(spark, bootstrap=broker, topics=topic)
    assert df.schema.simpleString() == EXPECTED_SPARK_KAFKA_SCHEMA
    assert all(f.nullable for f in df.schema.fields)
    with_headers = read_kafka_batch(spark, bootstrap=broker, topics=topic, options={"includeHeaders": "true"})
    assert with_headers.schema.simpleString() == (
        EXPECTED_SPARK_KAFKA_SCHEMA[:-1] + ",headers:array<struct<key:string,value:binary>>>")
    rows = with_headers.where("value != 'marker'").collect()
    assert sorted(r.value for r in rows) == sorted(b"v%d" % i for i in range(100))
    assert {tuple(h) for r in rows for h in r.headers} == {("h", b"x")}
    ending = read_kafka_batch(spark, bootstrap=broker, topics=topic, options={
        "startingOffsets": json.dumps({topic: {"0": 10, "1": -2}}),
        "endingOffsets": json.dumps({topic: {"0": 20, "1": 5}})})
    assert sorted((r.partition, r.offset) for r in ending.collect()) == \
        [(0, o) for o in range(10, 20)] + [(1, o) for o in range(5)]


@pytest.mark.spark
@pytest.mark.broker
def test_stream_reads_each_record_once_across_batches_and_restart(spark, broker, topic_factory, tmp_path):
    topic = topic_factory(partitions=3)
    checkpoint = str(tmp_path / "checkpoint")
    first = [b"a%d" % i for i in range(3000)]
    _produce(broker, topic, first, partitions=3)

    def run_available_now():
        seen, collect = _collector()
        df = read_kafka_stream(spark, bootstrap=broker, topics=topic, implementation="python",
                               options={"startingOffsets": "earliest", "maxOffsetsPerTrigger": "700"})
        query = (df.writeStream.foreachBatch(collect).option("checkpointLocation", checkpoint)
                 .trigger(availableNow=True).start())
        query.awaitTermination()
        assert query.exception() is None
        return seen

    seen = run_available_now()
    assert len(seen) >= 5 and all(len(rows) <= 700 for _, rows in seen)
    values = Counter(v for _, rows in seen for _, _, v in rows)
    assert values == Counter(first + [b"marker"] * 3)

    second = [b"b%d" % i for i in range(1000)]
    _produce(broker, topic, second, partitions=3)
    seen_again = run_available_now()
    assert min(batch for batch, _ in seen_again) > max(batch for batch, _ in seen)  # resumed, not restarted
    values_again = Counter(v for _, rows in seen_again for _, _, v in rows)
    assert values_again == Counter(second + [b"marker"] * 3)
    offsets = [(p, o) for _, rows in seen + seen_again for p, o, _ in rows]
    assert len(offsets) == len(set(offsets))


@pytest.mark.spark
@pytest.mark.broker
def test_starting_offsets_latest_skips_what_was_there(spark, broker, topic_factory, tmp_path):
    topic = topic_factory(partitions=2)
    _produce(broker, topic, [b"old%d" % i for i in range(500)], partitions=2)
    seen, collect = _collector()
    df = spark.readStream.format("fencewatch-kafka").options(**{
        "kafka.bootstrap.servers": broker, "subscribe": topic}).load()
    query = df.writeStream.foreachBatch(collect).option("checkpointLocation", str(tmp_path / "cp")).start()
    try:
        query.processAllAvailable()
        new = [b"new%d" % i for i in range(300)]
        _produce(broker, topic, new, partitions=2)
        query.processAllAvailable()
    finally:
        query.stop()
    assert Counter(v for _, rows in seen for _, _, v in rows) == Counter(new + [b"marker"] * 2)


@pytest.mark.spark
def test_bad_option_through_spark_names_the_option(spark):
    from fencewatch.streaming.sources.kafka import register

    register(spark)
    with pytest.raises(Exception, match="maxOffsetsPerTrigger must be a positive integer"):
        (spark.readStream.format("fencewatch-kafka")
         .options(**{"kafka.bootstrap.servers": "127.0.0.1:9", "subscribe": "t",
                     "maxOffsetsPerTrigger": "lots"}).load())
    with pytest.raises(KafkaSourceError, match="not on the classpath"):
        read_kafka_stream(spark, bootstrap="127.0.0.1:9", topics="t", implementation="spark")


# Spark's python_streaming_source_runner: the reader's calls in a loop, ``stop`` in its ``finally``,
# and a handler that reports the exception on the socket and dies printing it when that fails.
_RUNNER = """
import sys, traceback
from fencewatch.streaming.sources.kafka import KafkaStreamReader, parse_options
reader = KafkaStreamReader(parse_options({"kafka.bootstrap.servers": "127.0.0.1:9", "subscribe": "t"}))
try:
    try:
        raise {error}("the channel")
    finally:
        reader.stop()
except BaseException:
    traceback.print_exc()
    print("PySpark worker failed", file=sys.stderr)
"""


@pytest.mark.parametrize("error, quiet", [("EOFError", True), ("ConnectionResetError", True), ("ValueError", False)])
def test_the_source_runner_ends_quietly_only_when_the_jvm_closed_its_channel(error, quiet):
    """A query stopping closes the runner's socket: Spark's runner then printed two tracebacks
    into the job's log on SIGTERM. A real failure of the reader still prints its traceback."""
    import subprocess
    import sys

    run = subprocess.run([sys.executable, "-c", _RUNNER.replace("{error}", error)], capture_output=True, text=True,
                         timeout=60)
    assert run.returncode == 0, run.stderr
    if quiet:
        assert run.stderr == ""
    else:
        assert f"{error}: the channel" in run.stderr and "PySpark worker failed" in run.stderr

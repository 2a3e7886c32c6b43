"""The embedded broker: lifecycle, topics, and exactly-once produce/consume through it."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import time
from collections import Counter

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from fencewatch.streaming.brokers.common import BrokerStartError, ExternalBroker, produce_marker
from fencewatch.streaming.brokers.tansu import EmbeddedBroker, connect

pytestmark = pytest.mark.broker


def _process_gone(pid: int) -> bool:
    """True when ``pid`` no longer runs (absent, or a zombie nobody reaped yet)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            state = fh.read().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return True
    return state in ("Z", "X")


def _wait_gone(pid: int, deadline_s: float = 20.0) -> bool:
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        if _process_gone(pid):
            return True
        time.sleep(0.05)
    return _process_gone(pid)


def _produce_keyed(bootstrap: str, topic: str, n: int, keys: int) -> dict[int, list[tuple[bytes, bytes, int]]]:
    """Produce ``n`` keyed events in batches; returns delivered (key, value, offset) per partition."""
    delivered: dict[int, list[tuple[bytes, bytes, int]]] = {}
    errors: list[str] = []

    def on_delivery(err, msg) -> None:
        if err is not None:
            errors.append(str(err))
        else:
            delivered.setdefault(msg.partition(), []).append((msg.key(), msg.value(), msg.offset()))

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "enable.idempotence": False})
    for i in range(n):
        producer.produce(topic, key=b"k%d" % (i % keys), value=b"v%d" % i, on_delivery=on_delivery)
        if i % 1000 == 0:
            producer.poll(0)
    assert producer.flush(30) == 0
    assert errors == []
    return delivered


def _read_until(consumer: Consumer, ends: dict[int, int], topic: str, starts: dict[int, int] | None = None) -> list:
    """Consume until every partition's position reaches its end offset."""
    records = []
    starts = starts or {}
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        positions = consumer.position([TopicPartition(topic, p) for p in ends])
        # No position yet (nothing consumed since assign) means: at the assigned offset.
        if all((tp.offset if tp.offset >= 0 else starts.get(tp.partition, 0)) >= ends[tp.partition]
               for tp in positions):
            return records
        for msg in consumer.consume(500, timeout=0.5):
            assert msg.error() is None, msg.error()
            records.append(msg)
    raise AssertionError(f"did not reach end offsets {ends}; positions {positions}")


def test_start_answers_metadata_and_stop_kills_process():
    with EmbeddedBroker() as broker:
        pid = broker.pid
        assert broker.is_running
        host, port = broker.bootstrap.rsplit(":", 1)
        assert host == "127.0.0.1" and int(port) > 0
        metadata = AdminClient(broker.client_config()).list_topics(timeout=10)
        assert [b.host for b in metadata.brokers.values()] == ["127.0.0.1"]
    assert not broker.is_running
    assert _process_gone(pid)
    with pytest.raises(RuntimeError, match="not running"):
        broker.bootstrap
    broker.stop()  # idempotent


def test_exception_inside_context_still_stops_broker():
    broker = EmbeddedBroker()
    with pytest.raises(ZeroDivisionError):
        with broker:
            pid = broker.pid
            1 / 0
    assert _process_gone(pid)


def test_create_topics_makes_all_partitions_visible():
    with EmbeddedBroker() as broker:
        broker.create_topics(["alpha", "beta"], partitions=3)
        topics = AdminClient(broker.client_config()).list_topics(timeout=10).topics
        assert {name: len(topics[name].partitions) for name in ("alpha", "beta")} == {"alpha": 3, "beta": 3}
        broker.create_topics(["alpha"], partitions=3, exist_ok=True)
        with pytest.raises(RuntimeError, match="alpha"):
            broker.create_topics(["alpha"], partitions=3)
        broker.delete_topics(["beta"])
        assert "beta" not in AdminClient(broker.client_config()).list_topics(timeout=10).topics


def test_startup_failure_reports_broker_output(tmp_path):
    fake = tmp_path / "fake-tansu"
    fake.write_text("#!/bin/sh\necho 'boom: cannot start storage' >&2\nexit 3\n")
    fake.chmod(0o755)
    with pytest.raises(BrokerStartError, match="boom: cannot start storage") as info:
        EmbeddedBroker(binary=str(fake)).start()
    assert "code 3" in str(info.value)


def test_produced_keyed_events_are_consumed_exactly_once(broker, topic_factory):
    topic = topic_factory(partitions=3)
    delivered = _produce_keyed(broker, topic, n=6000, keys=50)
    ends = {p: max(o for _, _, o in recs) + 1 for p, recs in delivered.items()}

    consumer = Consumer({"bootstrap.servers": broker, "group.id": "exactly-once",
                         "enable.auto.commit": False, "auto.offset.reset": "error"})
    consumer.assign([TopicPartition(topic, p, 0) for p in ends])
    try:
        records = _read_until(consumer, ends, topic)
    finally:
        consumer.close()

    got = Counter((m.partition(), m.key(), m.value(), m.offset()) for m in records)
    want = Counter((p, k, v, o) for p, recs in delivered.items() for k, v, o in recs)
    assert got == want
    assert max(got.values()) == 1
    # Same key, same partition, produce order kept.
    for p, recs in delivered.items():
        assert [m.value() for m in records if m.partition() == p] == [v for _, v, _ in recs]


def test_group_commit_resumes_without_loss_or_duplicates(broker, topic_factory, group_id):
    topic = topic_factory(partitions=2)
    delivered = _produce_keyed(broker, topic, n=2000, keys=10)
    ends = {p: max(o for _, _, o in recs) + 1 for p, recs in delivered.items()}
    config = {"bootstrap.servers": broker, "group.id": group_id, "enable.auto.commit": False,
              "auto.offset.reset": "earliest"}

    first = Consumer(config)
    halfway = {p: end // 2 for p, end in ends.items()}
    first.assign([TopicPartition(topic, p, 0) for p in ends])
    seen = []
    try:
        seen = _read_until(first, halfway, topic)
        # Commit exactly what was read, not what librdkafka prefetched.
        last = {}
        for m in seen:
            last[m.partition()] = max(last.get(m.partition(), -1), m.offset())
        first.commit(offsets=[TopicPartition(topic, p, o + 1) for p, o in last.items()], asynchronous=False)
    finally:
        first.close()

    second = Consumer(config)
    committed = second.committed([TopicPartition(topic, p) for p in ends], timeout=10)
    second.assign(committed)
    try:
        rest = _read_until(second, ends, topic, starts={tp.partition: tp.offset for tp in committed})
    finally:
        second.close()

    values = Counter(m.value() for m in seen + rest)
    assert values == Counter(v for recs in delivered.values() for _, v, _ in recs)


def test_marker_produce_makes_watermark_exact(broker, topic_factory):
    """After a batched produce Tansu may under-report the high watermark; a marker fixes it."""
    topic = topic_factory(partitions=2)
    delivered = _produce_keyed(broker, topic, n=3000, keys=7)
    produce_marker({"bootstrap.servers": broker}, topic, [0, 1])
    consumer = Consumer({"bootstrap.servers": broker, "group.id": "wm"})
    try:
        for p in (0, 1):
            _, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10, cached=False)
            assert high == len(delivered.get(p, [])) + 1
    finally:
        consumer.close()


def test_connect_external_address_is_not_managed():
    handle = connect("127.0.0.1:1")
    assert isinstance(handle, ExternalBroker)
    assert handle.bootstrap == "127.0.0.1:1"
    handle.stop()
    with connect(None) as embedded:
        assert isinstance(embedded, EmbeddedBroker) and embedded.is_running
        pid = embedded.pid
    assert _process_gone(pid)


_CHILD = textwrap.dedent(
    """
    import signal, sys, time
    from fencewatch.streaming.brokers.tansu import EmbeddedBroker
    # An interactive owner: a shell starts background jobs with SIGINT ignored, and Python
    # keeps an ignored SIGINT ignored, so a suite run in the background would wait forever.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    broker = EmbeddedBroker().start()
    print(broker.pid, flush=True)
    if sys.argv[1] == "exit":
        sys.stdin.readline()  # the parent has seen the broker alive
        sys.exit(0)          # no stop(): atexit must do it
    time.sleep(600)          # waits for a signal
    """
)


@pytest.mark.parametrize("how", ["exit", "sigterm", "sigkill", "sigint"])
def test_broker_dies_with_its_owner(how):
    child = subprocess.Popen([sys.executable, "-c", _CHILD, how], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             text=True)
    try:
        broker_pid = int(child.stdout.readline())
        assert not _process_gone(broker_pid)
        if how == "exit":  # only now: an owner exiting at once raced the check above
            child.stdin.write("go\n")
            child.stdin.flush()
        else:
            child.send_signal({"sigterm": signal.SIGTERM, "sigkill": signal.SIGKILL,
                               "sigint": signal.SIGINT}[how])
        child.wait(timeout=30)
        assert _wait_gone(broker_pid), f"broker pid {broker_pid} outlived its owner ({how})"
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()

"""Apache Kafka's own broker as the project starts it: each version, KIP-848, request log, SASL, stop."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ResourcePatternType,
    ResourceType,
)

from fencewatch.streaming.brokers.common import BrokerStartError
from fencewatch.streaming.brokers.kafka import KafkaBroker, resolve_version, sweep_orphans

pytestmark = pytest.mark.broker

_REQUEST = re.compile(r"^\[[^\]]+\] DEBUG Completed request:(\{.*\}) \(kafka\.request\.logger\)$")


def _process_gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except FileNotFoundError:
        return True


def _wait_gone(pid: int, deadline_s: float = 30.0) -> bool:
    end = time.monotonic() + deadline_s
    while time.monotonic() < end and not _process_gone(pid):
        time.sleep(0.05)
    return _process_gone(pid)


def _requests(broker: KafkaBroker, group: str) -> list[dict]:
    """The request log's completed requests of ``group``, parsed, in log order."""
    out = []
    for line in broker.request_log_path.read_text(encoding="utf-8").splitlines():
        match = _REQUEST.match(line)
        assert match, f"not Kafka's request-log layout: {line[:200]}"
        entry = json.loads(match.group(1))
        if (entry.get("request") or {}).get("groupId") == group:
            out.append(entry)
    return out


def _consume(consumer: Consumer, n: int, timeout_s: float = 60.0) -> list:
    got: list = []
    deadline = time.monotonic() + timeout_s
    while len(got) < n and time.monotonic() < deadline:
        for msg in consumer.consume(n - len(got), timeout=0.5):
            assert msg.error() is None, msg.error()
            got.append(msg)
    assert len(got) == n, f"consumed {len(got)} of {n}"
    return got


def test_each_version_runs_a_kip848_group_and_logs_its_requests(kafka_broker_each_version, group_id, request):
    broker = kafka_broker_each_version
    asked = request.node.callspec.params["kafka_broker_each_version"]
    assert broker.version == resolve_version(asked)[0] and broker.version.startswith(asked)
    # The JVM really runs that version (AppInfoParser's start-up line), not just its folder name.
    assert f"Kafka version: {broker.version}" in broker.server_log_path.read_text(encoding="utf-8")

    topic = f"t-{group_id}"
    broker.create_topics([topic], partitions=2)
    producer = Producer(broker.client_config())
    for i in range(20):
        producer.produce(topic, key=b"k%d" % i, value=b"v%d" % i)
    assert producer.flush(30) == 0
    consumer = Consumer({**broker.client_config(), "group.id": group_id, "group.protocol": "consumer",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    try:
        records = _consume(consumer, 20)
        assert sorted(tp.partition for tp in consumer.assignment()) == [0, 1]
        committed = consumer.commit(asynchronous=False)
    finally:
        consumer.close()
    ends = {p: 1 + max(m.offset() for m in records if m.partition() == p) for p in (0, 1)}
    assert {tp.partition: tp.offset for tp in committed} == ends

    entries = _requests(broker, group_id)
    names = [e["requestHeader"]["requestApiKeyName"] for e in entries]
    assert "CONSUMER_GROUP_HEARTBEAT" in names and "OFFSET_COMMIT" in names
    joined = [e for e in entries if e["requestHeader"]["requestApiKey"] == 68 and e["response"]["errorCode"] == 0]
    epoch = max(e["response"]["memberEpoch"] for e in joined)
    assert epoch >= 1
    commit = next(e for e in entries if e["requestHeader"]["requestApiKey"] == 8)
    assert commit["request"]["generationIdOrMemberEpoch"] == epoch
    answered = {(t["name"], p["partitionIndex"]): p["errorCode"]
                for t in commit["response"]["topics"] for p in t["partitions"]}
    assert answered == {(topic, p): 0 for p in ends}
    broker.delete_topics([topic])


def test_a_killed_member_times_out_in_seconds(kafka_broker, group_id):
    """A group may lower its session timeout to 1 s: tests can make zombies quickly."""
    topic = f"t-{group_id}"
    kafka_broker.create_topics([topic])
    admin = AdminClient(kafka_broker.client_config())
    settings = [ConfigEntry("consumer.session.timeout.ms", "2000", incremental_operation=AlterConfigOpType.SET)]
    for future in admin.incremental_alter_configs([ConfigResource(ResourceType.GROUP, group_id,
                                                                  incremental_configs=settings)]).values():
        future.result(timeout=30)
    member = textwrap.dedent(f"""
        import sys
        from confluent_kafka import Consumer
        c = Consumer({{"bootstrap.servers": "{kafka_broker.bootstrap}", "group.id": "{group_id}",
                       "group.protocol": "consumer"}})
        c.subscribe(["{topic}"])
        while not c.assignment():
            c.poll(0.1)
        print("assigned", flush=True)
        sys.stdin.readline()
    """)
    child = subprocess.Popen([sys.executable, "-c", member], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "assigned"
        group = admin.describe_consumer_groups([group_id])[group_id].result(timeout=30)
        assert len(group.members) == 1
        child.kill()  # no leave heartbeat: only the session timeout can remove it
        child.wait(timeout=30)
        killed = time.monotonic()
        while group.members and time.monotonic() - killed < 30:
            time.sleep(0.2)
            group = admin.describe_consumer_groups([group_id])[group_id].result(timeout=30)
        assert not group.members, "the killed member is still in the group after 30 s"
        assert time.monotonic() - killed < 15
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    kafka_broker.delete_topics([topic])


@pytest.mark.slow
def test_sasl_scram_with_acls(tmp_path):
    with KafkaBroker(sasl=True, users={"alice": "alice-pw"}) as broker:
        admin = AdminClient(broker.client_config())
        assert list(admin.list_topics(timeout=30).brokers) == [1]
        broker.create_topics(["guarded"])

        wrong = AdminClient({**broker.client_config("alice", "not-her-password"), "logger": _silent()})
        with pytest.raises(KafkaException):
            wrong.list_topics(timeout=5)

        alice = AdminClient({**broker.client_config("alice"), "logger": _silent()})
        assert "guarded" not in alice.list_topics(timeout=30).topics  # authenticated, not authorized
        binding = AclBinding(ResourceType.TOPIC, "guarded", ResourcePatternType.LITERAL, "User:alice", "*",
                             AclOperation.DESCRIBE, AclPermissionType.ALLOW)
        for future in admin.create_acls([binding]).values():
            future.result(timeout=30)
        deadline = time.monotonic() + 30
        while "guarded" not in alice.list_topics(timeout=30).topics:
            assert time.monotonic() < deadline, "alice never saw the topic her ACL allows"
            time.sleep(0.2)
        assert "security.protocol" in broker.client_config() and broker.super_user == "admin"


def _silent():
    import logging

    quiet = logging.getLogger("tests.kafka_broker.librdkafka")
    quiet.propagate = False
    return quiet


def test_missing_jars_say_to_run_make_jars(tmp_path):
    with pytest.raises(BrokerStartError, match=r"no jars for Apache Kafka 4\.3 .*run `make jars`"):
        KafkaBroker("4.3", jars_dir=tmp_path).start()
    with pytest.raises(ValueError, match="MAJOR.MINOR"):
        resolve_version("latest", tmp_path)


def test_a_bad_setting_fails_with_the_broker_log(tmp_path):
    with pytest.raises(BrokerStartError, match="no.such.role") as info:
        KafkaBroker(properties={"process.roles": "no.such.role"}).start()
    assert "format.log" in str(info.value) or "server.log" in str(info.value)


_OWNER = textwrap.dedent(
    """
    import signal, sys, time
    from fencewatch.streaming.brokers.kafka import KafkaBroker
    signal.signal(signal.SIGINT, signal.default_int_handler)
    broker = KafkaBroker().start()
    print(broker.pid, broker.directory, flush=True)
    time.sleep(600)
    """
)


@pytest.mark.slow
@pytest.mark.parametrize("how", ["stop", "sigterm", "sigkill"])
def test_nothing_outlives_the_broker(how, tmp_path):
    if how == "stop":
        with KafkaBroker() as broker:
            pid, folder = broker.pid, broker.directory
            assert folder.is_dir() and not _process_gone(pid)
        assert _process_gone(pid) and not folder.exists()
        broker.stop()  # idempotent
        return
    child = subprocess.Popen([sys.executable, "-c", _OWNER], stdout=subprocess.PIPE, text=True,
                             env={**os.environ, "TMPDIR": str(tmp_path)})
    try:
        pid_text, folder = child.stdout.readline().split(" ", 1)
        pid = int(pid_text)
        assert not _process_gone(pid)
        child.send_signal(signal.SIGTERM if how == "sigterm" else signal.SIGKILL)
        child.wait(timeout=60)
        assert _wait_gone(pid), f"broker pid {pid} outlived its owner ({how})"
        folder = Path(folder.strip())
        if how == "sigterm":
            assert not folder.exists()
        else:  # nobody could remove it; the next broker started under this TMPDIR does
            assert folder.is_dir()
            sweep_orphans(tmp_path)
            assert not folder.exists()
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()


def test_a_cluster_id_never_starts_with_a_dash(monkeypatch):
    """``kafka-storage format -t -x...`` reads such an id as an option and the broker does not
    start (one start in 64): like Kafka's ``Uuid.randomUuid``, such an id is drawn again."""
    import uuid

    from fencewatch.streaming.brokers import kafka as kb

    drawn = iter([uuid.UUID(bytes=b"\xf8" + bytes(15)), uuid.UUID(bytes=b"\x10" + bytes(15))])
    monkeypatch.setattr(kb.uuid, "uuid4", lambda: next(drawn))
    assert kb._cluster_id() == "EAAAAAAAAAAAAAAAAAAAAA"

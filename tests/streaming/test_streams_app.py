"""fencewatch's Kafka Streams application (``streams-app/``, ``make streams-app``) against the
session's Apache Kafka broker: a streams group (KIP-1071) that counts exactly once while its
instances are stalled past their session and SIGKILLed, at-least-once commits through
OffsetCommit, and bad settings refused in one line."""

from __future__ import annotations

import re
import struct
import subprocess
import time
import uuid

import pytest
from confluent_kafka import Consumer, Producer, TopicCollection
from confluent_kafka.admin import AdminClient

from fencewatch.sim.live.expect import read_request_log
from fencewatch.streaming.brokers.common import BrokerStartError
from fencewatch.streaming.brokers.kafka import _java
from fencewatch.streaming.brokers.streams_app import MAIN_CLASS, StreamsApp, StreamsAppConfig, resolve_app
from fencewatch.streaming.ingest.consumer_offsets.records import uuid_to_kafka_string

pytestmark = [pytest.mark.broker, pytest.mark.slow]

VALUES = 8
SESSION = {"streams.session.timeout.ms": "2000", "streams.heartbeat.interval.ms": "200"}


def app_config(kafka_broker, topic_factory, guarantee: str, **extra) -> StreamsAppConfig:
    source, sink = topic_factory(partitions=4, prefix="streams-in"), topic_factory(partitions=2, prefix="streams-out")
    return StreamsAppConfig(kafka_broker.bootstrap, f"app-{uuid.uuid4().hex[:10]}", source, sink,
                            processing_guarantee=guarantee, commit_interval_ms=200, **extra)


def topic_id(bootstrap: str, name: str) -> str:
    admin = AdminClient({"bootstrap.servers": bootstrap})  # kept until the answer came
    tid = admin.describe_topics(TopicCollection([name]))[name].result(30).topic_id
    return uuid_to_kafka_string(struct.pack(">qq", tid.get_most_significant_bits(), tid.get_least_significant_bits()))


def produce(bootstrap: str, topic: str, start: int, count: int) -> None:
    p = Producer({"bootstrap.servers": bootstrap})
    for i in range(start, start + count):
        p.produce(topic, key=str(i), value=f"w{i % VALUES}")
    assert p.flush(30) == 0


def counts(bootstrap: str, topic: str, want: int, timeout_s: float = 90.0) -> dict[str, int]:
    """The latest count per value on the output topic (committed records only), read until each
    of the VALUES values reached ``want`` or the time is up."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"read-{uuid.uuid4().hex[:8]}",
                  "auto.offset.reset": "earliest", "isolation.level": "read_committed", "enable.auto.commit": False})
    c.subscribe([topic])
    latest: dict[str, int] = {}
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline:
            if len(latest) == VALUES and min(latest.values()) >= want:
                break
            m = c.poll(0.5)
            if m is None or m.error():
                continue
            latest[m.key().decode()] = struct.unpack(">q", m.value())[0]
    finally:
        c.close()
    return latest


def test_counts_exactly_once_while_an_instance_is_stalled_and_one_killed(kafka_broker, topic_factory):
    cfg = app_config(kafka_broker, topic_factory, "exactly_once_v2", num_stream_threads=2)
    with StreamsApp(cfg, kafka_broker.version, group_config=SESSION) as app:
        first, second = app.start(2).instances
        produce(cfg.bootstrap_servers, cfg.input, 0, 400)
        assert counts(cfg.bootstrap_servers, cfg.output, 50) == {f"w{v}": 50 for v in range(VALUES)}
        second.stall()  # past its 2 s session: fenced, its tasks go to the first
        time.sleep(4)
        second.resume()
        first.kill()  # mid-transaction, no leave: its tasks go back after the session timeout
        assert not first.is_alive and second.is_alive
        produce(cfg.bootstrap_servers, cfg.input, 400, 400)
        # exactly once: every record counted once, across the fence and the kill
        assert counts(cfg.bootstrap_servers, cfg.output, 100) == {f"w{v}": 100 for v in range(VALUES)}
        second.stop()
        said = second.lines()
    assert said[0].startswith(f"started application.id={cfg.application_id} group.protocol=streams "
                              "processing.guarantee=exactly_once_v2 num.stream.threads=2")
    assert said[-1] == "stopped" and "state=PENDING_SHUTDOWN->NOT_RUNNING" in said, said
    group = [o for o in read_request_log(kafka_broker.request_log_path.read_text(encoding="utf-8").splitlines())
             if (o.get("request") or {}).get("groupId") == cfg.application_id]
    apis = {o["requestHeader"]["requestApiKey"] for o in group}
    assert {88, 28} <= apis and 8 not in apis  # StreamsGroupHeartbeat; EOS commits in transactions
    assert any(o["response"].get("errorCode") == 25 for o in group if o["requestHeader"]["requestApiKey"] == 88)


def test_at_least_once_commits_with_offset_commit(kafka_broker, topic_factory):
    cfg = app_config(kafka_broker, topic_factory, "at_least_once")
    with StreamsApp(cfg, kafka_broker.version) as app:
        app.start(1)
        produce(cfg.bootstrap_servers, cfg.input, 0, 80)
        assert min(counts(cfg.bootstrap_servers, cfg.output, 10).values()) >= 10
        time.sleep(1)  # a commit interval or more after the counts
    commits = [o for o in read_request_log(kafka_broker.request_log_path.read_text(encoding="utf-8").splitlines())
               if o["requestHeader"]["requestApiKey"] == 8 and o["request"]["groupId"] == cfg.application_id]
    assert commits and all(o["request"]["generationIdOrMemberEpoch"] > 0 for o in commits)
    names = {cfg.input, f"{cfg.application_id}-by-value-repartition"}
    ids = {topic_id(cfg.bootstrap_servers, n): n for n in names}  # OffsetCommit v10 (4.2+) names topics by id
    assert {t.get("name") or ids[t["topicId"]] for o in commits for t in o["request"]["topics"]} == names


@pytest.mark.parametrize("args, message", [
    (["--input=a"], "missing --bootstrap-servers"),
    (["--bootstrap-servers=x:1", "--application-id=a", "--input=i", "--output=o", "--processing-guarantee=exactly_once"],
     "unknown processing guarantee 'exactly_once'; valid: exactly_once_v2, at_least_once"),
    (["--bootstrap-servers=x:1", "--application-id=a", "--input=i", "--output=o", "--num-stream-threads=two"],
     "--num-stream-threads must be an integer, got 'two'"),
    (["--colour=blue"], "unknown setting --colour; valid: --bootstrap-servers"),
    (["input"], "expected --name=value, got 'input'"),
])
def test_bad_settings_are_one_line_and_exit_2(args, message):
    _, folder = resolve_app("4.2")
    done = subprocess.run([_java(), "-cp", f"{folder}/*", MAIN_CLASS, *args], capture_output=True, text=True,
                          timeout=60, env={"PATH": "/usr/bin:/bin"})
    assert done.returncode == 2 and done.stdout == ""
    assert len(done.stderr.splitlines()) == 1 and message in done.stderr, done.stderr


def test_python_side_refuses_bad_settings_and_missing_builds(tmp_path):
    with pytest.raises(ValueError, match="valid: exactly_once_v2, at_least_once"):
        StreamsAppConfig("b:1", "a", "i", "o", processing_guarantee="exactly_once")
    with pytest.raises(ValueError, match="at least 1"):
        StreamsAppConfig("b:1", "a", "i", "o", num_stream_threads=0)
    with pytest.raises(BrokerStartError, match=re.escape("run `make streams-app`")):
        resolve_app("4.2", tmp_path)

"""The shipped rsyslog configuration, end to end: request-log file -> rsyslogd (imfile -> omkafka)
-> the lines topic on the embedded broker. Real rsyslog (Debian's rsyslog-kafka), real broker.

What must hold for `fencewatch run --source request-log` to see what the broker logged: every
line arrives exactly once, byte for byte (a ~150 KB commit line too), in file order, keyed by
the broker id; log4j's hourly roll and a shipper restart lose and repeat nothing; lines written
while Kafka is unreachable arrive once it is up; a line longer than the configured maximum ships
its head once (rsyslog reports it), never a second fragment. (A broker that goes away mid-stream
cannot be tested here: the embedded broker keeps topics in memory, so a restart loses them.)
"""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path

import pytest

from fencewatch.streaming.brokers.common import create_topics
from fencewatch.streaming.brokers.rsyslog import read_lines

pytestmark = [pytest.mark.broker, pytest.mark.slow]

OTHER_LOGGER = ("[2026-11-23 10:15:02,480] INFO [SocketServer listenerType=BROKER, nodeId=3] "
                "Created data-plane acceptor (kafka.network.SocketServer)")


def commit_line(partitions: int, correlation_id: int, error_code: int = 0) -> str:
    """An OffsetCommit v9 `Completed request:` line as Kafka's RequestConvertToJson writes it."""
    request = {"groupId": "orders", "generationIdOrMemberEpoch": 7, "memberId": "m-1", "groupInstanceId": None,
               "topics": [{"name": "payments", "partitions": [
                   {"partitionIndex": p, "committedOffset": 1200 + p, "committedLeaderEpoch": 4,
                    "committedMetadata": ""} for p in range(partitions)]}]}
    response = {"throttleTimeMs": 0, "topics": [{"name": "payments", "partitions": [
        {"partitionIndex": p, "errorCode": error_code} for p in range(partitions)]}]}
    body = {"isForwarded": False,
            "requestHeader": {"requestApiKey": 8, "requestApiVersion": 9, "correlationId": correlation_id,
                              "clientId": "c-1", "requestApiKeyName": "OFFSET_COMMIT"},
            "request": request, "response": response,
            "connection": "10.0.0.5:9092-10.0.1.7:53312-3-77", "totalTimeMs": 1.2, "requestQueueTimeMs": 0.1,
            "localTimeMs": 0.9, "remoteTimeMs": 0.0, "throttleTimeMs": 0, "responseQueueTimeMs": 0.05,
            "sendTimeMs": 0.1, "securityProtocol": "PLAINTEXT", "principal": "User:ANONYMOUS",
            "listener": "PLAINTEXT", "clientInformation": {"softwareName": "apache-kafka-java", "softwareVersion": "4.1.0"}}
    return f"[2026-11-23 10:15:02,481] DEBUG Completed request:{json.dumps(body, separators=(',', ':'))} (kafka.request.logger)"


def heartbeat_line(correlation_id: int) -> str:
    body = {"isForwarded": False,
            "requestHeader": {"requestApiKey": 68, "requestApiVersion": 1, "correlationId": correlation_id,
                              "clientId": "c-2", "requestApiKeyName": "CONSUMER_GROUP_HEARTBEAT"},
            "request": {"groupId": "orders", "memberId": "m-2", "memberEpoch": 7, "instanceId": None, "rackId": None,
                        "rebalanceTimeoutMs": -1, "subscribedTopicNames": None, "subscribedTopicRegex": None,
                        "serverAssignor": None, "topicPartitions": None},
            "response": {"throttleTimeMs": 0, "errorCode": 110, "errorMessage": "The member epoch is fenced by the group coordinator. The member must abandon all its partitions and rejoin.",
                         "memberId": "m-2", "memberEpoch": 7, "heartbeatIntervalMs": 5000, "assignment": None},
            "connection": "10.0.0.5:9092-10.0.1.8:41000-1-12", "totalTimeMs": 0.4}
    return f"[2026-11-23 10:15:02,482] DEBUG Completed request:{json.dumps(body, separators=(',', ':'))} (kafka.request.logger)"


CLASSIC_CAPTURE = Path(__file__).parents[1] / "fixtures" / "kafka" / "classic" / "4.4.0" / "request-log.txt"


def classic_lines() -> list[str]:
    """The first JoinGroup, SyncGroup and LeaveGroup lines a real 4.4.0 broker wrote (the classic
    capture): the classic protocol's lines ship as the commits' do."""
    first: dict[int, str] = {}
    for line in CLASSIC_CAPTURE.read_text(encoding="utf-8").splitlines():
        for api in (11, 14, 13):
            if f'"requestHeader":{{"requestApiKey":{api},' in line:
                first.setdefault(api, line)
    return [first[11], first[14], first[13]]


STREAMS_CAPTURE = Path(__file__).parents[1] / "fixtures" / "kafka-streams" / "4.4.0" / "request-log.txt"


def streams_heartbeat_lines() -> list[str]:
    """The first two StreamsGroupHeartbeat (88) lines a real 4.4.0 broker wrote (the Kafka Streams
    capture; the first a joining member's with its topology): they ship as the others do."""
    with open(STREAMS_CAPTURE, encoding="utf-8") as f:
        return [x.rstrip("\n") for x in f if '"requestHeader":{"requestApiKey":88,' in x[:120]][:2]


def append(path: Path, lines: list[str]) -> None:
    with open(path, "a", encoding="utf-8") as f:
        for line in lines:
            f.write(line + "\n")


def values(records) -> list[str]:
    return [r.value().decode("utf-8") for r in records]


@pytest.fixture
def lines_topic(broker):
    name = f"fencewatch.request-log-{os.urandom(4).hex()}"
    # the shipped topic settings (docs/real-cluster.md); 3 partitions so keying is visible
    create_topics({"bootstrap.servers": broker}, [name], 3, topic_config={"max.message.bytes": "8388608"})
    return name


def test_every_line_arrives_once_byte_for_byte_keyed_by_broker(broker, lines_topic, rsyslog_shipper, tmp_path):
    log = tmp_path / "kafka-request.log"
    log.touch()
    big = commit_line(1_150, correlation_id=1)
    assert 140_000 < len(big) < 200_000  # a ~1,000-partition commit: far above rsyslog's 8 KB default
    lines = [commit_line(3, 2, error_code=113), big, heartbeat_line(3), OTHER_LOGGER,
             commit_line(1, 4) + "\t tab and ünïcode kept", heartbeat_line(5), *classic_lines(),
             *streams_heartbeat_lines()]
    rsyslog_shipper(broker, lines_topic, log, broker_id="3")
    append(log, lines[:3])
    append(log, lines[3:])

    records = read_lines(broker, lines_topic, len(lines))

    assert values(records) == lines  # once each, byte for byte, in file order
    assert {r.key() for r in records} == {b"3"}
    assert len({r.partition() for r in records}) == 1  # one broker's lines stay in one partition


def test_hourly_roll_and_restart_lose_and_repeat_nothing(broker, lines_topic, rsyslog_shipper, tmp_path):
    log = tmp_path / "kafka-request.log"
    log.touch()
    shipper = rsyslog_shipper(broker, lines_topic, log, broker_id="1")
    before_roll = [commit_line(2, i) for i in range(10)]
    append(log, before_roll)
    assert values(read_lines(broker, lines_topic, len(before_roll), settle_s=0.5)) == before_roll
    # log4j2's RollingFile at the hour: rename, then a new file under the old name
    log.rename(tmp_path / "kafka-request.log.2026-11-23-10")
    after_roll = [heartbeat_line(100 + i) for i in range(5)]
    append(log, after_roll)
    assert values(read_lines(broker, lines_topic, 15, settle_s=0.5)) == before_roll + after_roll
    # the shipper stops (upgrade, reboot) while the broker keeps logging
    shipper.stop()
    while_down = [commit_line(1, 200 + i) for i in range(5)]
    append(log, while_down)
    rsyslog_shipper(broker, lines_topic, log, broker_id="1")

    records = read_lines(broker, lines_topic, 20)

    assert values(records) == before_roll + after_roll + while_down


def test_a_line_above_the_maximum_ships_its_head_once_and_never_a_second_fragment(
        broker, lines_topic, rsyslog_shipper, tmp_path):
    log = tmp_path / "kafka-request.log"
    log.touch()
    shipper = rsyslog_shipper(broker, lines_topic, log, broker_id="2")
    huge = commit_line(36_000, correlation_id=9)  # ~4.4 MB on one line, above maxMessageSize="4m"
    assert len(huge) > 4 * 1024 * 1024
    lines = [commit_line(1, 8), huge, commit_line(1, 10)]
    append(log, lines)

    records = read_lines(broker, lines_topic, 3)

    got = values(records)
    assert len(got) == 3 and got[0] == lines[0] and got[2] == lines[2]  # no fragment record in between
    assert huge.startswith(got[1]) and 4_000_000 < len(got[1]) < len(huge)  # the head: a broken line to the decoder
    shipper.stop()
    assert "discard" in shipper.log_text().lower() or "too long" in shipper.log_text().lower(), shipper.log_text()[-2000:]


def test_the_systemd_unit_sets_every_variable_the_config_reads():
    from fencewatch.streaming.brokers.rsyslog import SHIPPED_CONFIG

    code = "\n".join(line.split("#", 1)[0] for line in SHIPPED_CONFIG.read_text().splitlines())
    read = set(re.findall(r"`echo [^`$]*\$(\w+)", code))
    unit = (SHIPPED_CONFIG.parent / "fencewatch-rsyslog.service").read_text()
    assert read == {"FENCEWATCH_BROKER_ID", "FENCEWATCH_REQUEST_LOG", "FENCEWATCH_BOOTSTRAP_SERVERS",
                    "FENCEWATCH_REQUEST_LOG_TOPIC", "FENCEWATCH_RSYSLOG_WORKDIR"}
    assert read == set(re.findall(r"^Environment=(\w+)=", unit, re.M))
    assert "/etc/fencewatch/rsyslog-fencewatch.conf" in unit


def test_lines_written_while_kafka_is_unreachable_arrive_once_it_is_up(rsyslog_shipper, tmp_path):
    """The shipper starts before its Kafka (or loses it): lines wait in rsyslog/librdkafka, then arrive."""
    from fencewatch.streaming.brokers.common import free_port
    from fencewatch.streaming.brokers.kafka import KafkaBroker

    port = free_port()
    log = tmp_path / "kafka-request.log"
    log.touch()
    topic = "fencewatch.request-log"
    rsyslog_shipper(f"127.0.0.1:{port}", topic, log, broker_id="5")
    lines = [commit_line(2, i) for i in range(5)] + [heartbeat_line(10)]
    append(log, lines)
    time.sleep(3)  # the shipper has read the lines and is retrying against nothing
    # A fresh broker has no topics, and omkafka gives up on a record whose topic is missing (it
    # lands in omkafka-failed.data): with auto-creation the shipper's first metadata request makes
    # the topic, as a cluster that comes back would have it (without, it failed in one of two runs here).
    with KafkaBroker(port=port, properties={"auto.create.topics.enable": "true"}) as late:
        create_topics({"bootstrap.servers": late.bootstrap}, [topic], 1, exist_ok=True)
        records = read_lines(late.bootstrap, topic, len(lines))
        assert values(records) == lines
        assert {r.key() for r in records} == {b"5"}

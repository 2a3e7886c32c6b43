"""``simulate --format request-log``: the lines are what a Kafka broker's ``kafka.request.logger`` writes.

The golden field sets below are transcribed from Kafka's message specs
(``clients/src/main/resources/common/message/{OffsetCommit,TxnOffsetCommit,
ConsumerGroupHeartbeat}{Request,Response}.json``, branches 3.5-4.3 of the
confluentinc/kafka mirror): each field with the versions that have it, in
spec order, the order the generated ``*DataJsonConverter`` writes them. The
line's outer keys follow ``RequestConvertToJson.requestDescMetrics`` (4.3).
"""

from __future__ import annotations

import base64
import collections
import dataclasses
import json
import re
import uuid
from datetime import datetime, timezone

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fencewatch.sim.world import SimConfig, simulate
from fencewatch.sim.profiles import profile
from fencewatch.sim.request_log import (
    RELEASES,
    RequestLogEncoder,
    log_line,
    parse_broker_versions,
    topic_id,
    topic_id_uuid,
)
from fencewatch.streaming.cli import main

LINE = re.compile(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3})\] DEBUG Completed request:(\{.*\}) \(kafka\.request\.logger\)$")

OUTER = [
    "isForwarded", "requestHeader", "request", "response", "connection", "totalTimeMs", "requestQueueTimeMs",
    "localTimeMs", "remoteTimeMs", "throttleTimeMs", "responseQueueTimeMs", "sendTimeMs", "securityProtocol",
    "principal", "listener", "clientInformation",
]
HEADER = ["requestApiKey", "requestApiVersion", "correlationId", "clientId", "requestApiKeyName"]


def _in(versions: str, v: int) -> bool:
    """Kafka's version range syntax: ``"3+"``, ``"2-4"``, ``"1"``."""
    if versions.endswith("+"):
        return v >= int(versions[:-1])
    low, _, high = versions.partition("-")
    return int(low) <= v <= int(high or low)


def fields(spec: list[tuple[str, str]], v: int) -> list[str]:
    return [name for name, versions in spec if _in(versions, v)]


# (field, versions) in spec order.
OFFSET_COMMIT_REQUEST = [("groupId", "0+"), ("generationIdOrMemberEpoch", "1+"), ("memberId", "1+"),
                         ("groupInstanceId", "7+"), ("retentionTimeMs", "2-4"), ("topics", "0+")]
OFFSET_COMMIT_REQUEST_TOPIC = [("name", "0-9"), ("topicId", "10+"), ("partitions", "0+")]
OFFSET_COMMIT_REQUEST_PARTITION = [("partitionIndex", "0+"), ("committedOffset", "0+"),
                                   ("committedLeaderEpoch", "6+"), ("committedMetadata", "0+")]
OFFSET_COMMIT_RESPONSE = [("throttleTimeMs", "3+"), ("topics", "0+")]
OFFSET_COMMIT_RESPONSE_TOPIC = [("name", "0-9"), ("topicId", "10+"), ("partitions", "0+")]
TXN_REQUEST = [("transactionalId", "0+"), ("groupId", "0+"), ("producerId", "0+"), ("producerEpoch", "0+"),
               ("generationId", "3+"), ("memberId", "3+"), ("groupInstanceId", "3+"), ("topics", "0+")]
TXN_REQUEST_PARTITION = [("partitionIndex", "0+"), ("committedOffset", "0+"), ("committedLeaderEpoch", "2+"),
                         ("committedMetadata", "0+")]
TXN_RESPONSE = [("throttleTimeMs", "0+"), ("topics", "0+")]
HEARTBEAT_REQUEST = [("groupId", "0+"), ("memberId", "0+"), ("memberEpoch", "0+"), ("instanceId", "0+"),
                     ("rackId", "0+"), ("rebalanceTimeoutMs", "0+"), ("subscribedTopicNames", "0+"),
                     ("subscribedTopicRegex", "1+"), ("serverAssignor", "0+"), ("topicPartitions", "0+")]
HEARTBEAT_RESPONSE = [("throttleTimeMs", "0+"), ("errorCode", "0+"), ("errorMessage", "0+"), ("memberId", "0+"),
                      ("memberEpoch", "0+"), ("heartbeatIntervalMs", "0+"), ("assignment", "0+")]

T0 = 1_763_625_600_123  # 2025-11-20 08:00:00,123 UTC


def payload(line: str) -> dict:
    match = LINE.match(line)
    assert match, line[:200]
    return json.loads(match.group(2))


def commit(kind: str = "offset_commit", *, group: str = "g", member: str = "m-1", epoch: int = 5, ts: int = T0,
           partitions: int = 2, error: int = 0, **extra) -> dict:
    event = {"type": kind, "ts": ts, "group_id": group, "event_id": "e", "member_id": member, "member_epoch": epoch,
             "offsets": [{"topic": "orders", "partition": p, "offset": 100 + p, "leader_epoch": 3}
                         for p in range(partitions)] + [{"topic": "pay", "partition": 0, "offset": 7, "leader_epoch": 1}],
             "error_code": error}
    if kind == "txn_offset_commit":
        event.update(transactional_id="tx-1", producer_id=4000, producer_epoch=2)
    event.update(extra)
    return event


def heartbeat(request_epoch: int, response_epoch: int, *, member: str = "m-1", error: int = 0, ts: int = T0,
              group: str = "g") -> dict:
    return {"type": "heartbeat", "ts": ts, "group_id": group, "event_id": "e", "member_id": member,
            "request_epoch": request_epoch, "response_epoch": response_epoch, "error_code": error}


def assignment(epoch: int, assigned: dict, pending: dict | None = None, *, member: str = "m-1", ts: int = T0,
               group: str = "g", instance_id: str | None = None) -> dict:
    event = {"type": "member_assignment", "ts": ts, "group_id": group, "event_id": "e", "member_id": member,
             "protocol": "consumer", "member_epoch": epoch, "previous_member_epoch": epoch - 1, "state": "STABLE",
             "assigned": [{"topic": t, "partitions": p} for t, p in assigned.items()],
             "pending_revocation": [{"topic": t, "partitions": p} for t, p in (pending or {}).items()],
             "subscribed_topics": ["orders", "pay"], "group_epoch": epoch, "target_assignment_epoch": epoch}
    if instance_id is not None:
        event["instance_id"] = instance_id
    return event


def classic_join(group: str = "g", member: str = "m-1") -> dict:
    return {"type": "classic_join", "ts": T0 - 10, "group_id": group, "event_id": "e", "member_id": member,
            "generation": -1, "owned": [], "protocol": "classic"}


# ---------------------------------------------------------------------------- golden field sets


@pytest.mark.parametrize("version", range(2, 11), ids=lambda v: f"v{v}")
def test_offset_commit_fields_per_version(version):
    enc = RequestLogEncoder(broker_versions="all")
    broker = "4.2" if version == 10 else "3.9"
    enc.pin_group("g", broker, offset_commit=version)
    enc.add(classic_join())  # a classic group: old clients may commit with any version
    ((key, line),) = enc.add(commit(epoch=9, error=22))
    assert key == "g"
    body = payload(line)
    assert list(body) == OUTER
    assert list(body["requestHeader"]) == HEADER
    assert body["requestHeader"]["requestApiKey"] == 8
    assert body["requestHeader"]["requestApiVersion"] == version
    assert body["requestHeader"]["requestApiKeyName"] == "OFFSET_COMMIT"
    request, response = body["request"], body["response"]
    assert list(request) == fields(OFFSET_COMMIT_REQUEST, version)
    assert request["generationIdOrMemberEpoch"] == 9 and request["memberId"] == "m-1"
    for topic in request["topics"]:
        assert list(topic) == fields(OFFSET_COMMIT_REQUEST_TOPIC, version)
        for partition in topic["partitions"]:
            assert list(partition) == fields(OFFSET_COMMIT_REQUEST_PARTITION, version)
    assert list(response) == fields(OFFSET_COMMIT_RESPONSE, version)
    for topic in response["topics"]:
        assert list(topic) == fields(OFFSET_COMMIT_RESPONSE_TOPIC, version)
        assert all(p == {"partitionIndex": p["partitionIndex"], "errorCode": 22} for p in topic["partitions"])
    names = {"orders": topic_id("orders"), "pay": topic_id("pay")} if version == 10 else {"orders": "orders", "pay": "pay"}
    key_name = "topicId" if version == 10 else "name"
    assert [t[key_name] for t in request["topics"]] == [names["orders"], names["pay"]]
    assert [[p["partitionIndex"] for p in t["partitions"]] for t in request["topics"]] == [[0, 1], [0]]
    assert [p["committedOffset"] for p in request["topics"][0]["partitions"]] == [100, 101]
    if version >= 7:
        assert request["groupInstanceId"] is None
    if version <= 4:
        assert request["retentionTimeMs"] == -1


def test_brokers_up_to_3_5_name_the_epoch_generation_id():
    enc = RequestLogEncoder(broker_versions="3.5,4.0")
    enc.pin_group("g", "3.5", offset_commit=8)
    enc.add(classic_join())
    ((_, line),) = enc.add(commit(epoch=4))
    request = payload(line)["request"]
    assert list(request)[:3] == ["groupId", "generationId", "memberId"]
    assert request["generationId"] == 4 and "generationIdOrMemberEpoch" not in request


@pytest.mark.parametrize("version", range(0, 6), ids=lambda v: f"v{v}")
def test_txn_offset_commit_fields_per_version(version):
    enc = RequestLogEncoder()
    enc.pin_group("g", "4.0", txn_offset_commit=version)
    ((_, line),) = enc.add(commit("txn_offset_commit", error=22, instance_id="i-1"))
    body = payload(line)
    assert body["requestHeader"]["requestApiKey"] == 28
    assert body["requestHeader"]["requestApiVersion"] == version
    assert body["requestHeader"]["requestApiKeyName"] == "TXN_OFFSET_COMMIT"
    assert body["requestHeader"]["clientId"] == "producer-tx-1"
    request, response = body["request"], body["response"]
    assert list(request) == fields(TXN_REQUEST, version)
    assert (request["transactionalId"], request["producerId"], request["producerEpoch"]) == ("tx-1", 4000, 2)
    if version >= 3:
        assert (request["generationId"], request["memberId"], request["groupInstanceId"]) == (5, "m-1", "i-1")
    for topic in request["topics"]:
        assert list(topic) == ["name", "partitions"]
        for partition in topic["partitions"]:
            assert list(partition) == fields(TXN_REQUEST_PARTITION, version)
    assert list(response) == fields(TXN_RESPONSE, version)
    assert [p["errorCode"] for t in response["topics"] for p in t["partitions"]] == [22, 22, 22]


@pytest.mark.parametrize("version", [0, 1], ids=lambda v: f"v{v}")
def test_heartbeat_fields_join_change_and_leave(version):
    enc = RequestLogEncoder()
    enc.pin_group("g", "4.0", heartbeat=version)
    lines = enc.encode_all([
        heartbeat(0, 1),
        assignment(1, {"orders": [0, 1, 2]}, instance_id="i-1"),
        heartbeat(1, 1),  # nothing changed
        heartbeat(1, 2),  # the epoch moves, the partitions stay: assignment null
        assignment(2, {"orders": [0, 1, 2]}, instance_id="i-1"),
        heartbeat(2, 3),  # partition 2 must be revoked first
        assignment(3, {"orders": [0, 1]}, {"orders": [2]}, instance_id="i-1"),
        heartbeat(3, 3, error=0),
        heartbeat(-2, -2),  # static leave
        {"type": "member_left", "ts": T0, "group_id": "g", "event_id": "e", "member_id": "m-1",
         "reason": "static_leave", "member_epoch": -2, "instance_id": "i-1"},
    ])
    bodies = [payload(line) for _, line in lines]
    assert len(bodies) == 6
    for body in bodies:
        assert list(body) == OUTER
        assert body["requestHeader"]["requestApiKey"] == 68
        assert body["requestHeader"]["requestApiVersion"] == version
        assert body["requestHeader"]["requestApiKeyName"] == "CONSUMER_GROUP_HEARTBEAT"
        assert list(body["request"]) == fields(HEARTBEAT_REQUEST, version)
        assert list(body["response"]) == fields(HEARTBEAT_RESPONSE, version)
    join, idle, bump, revoke, after, leave = bodies
    orders = topic_id("orders")
    # A join is a full request; v0's coordinator names the member, v1's client does.
    assert join["request"]["memberId"] == ("" if version == 0 else "m-1")
    assert join["request"]["memberEpoch"] == 0 and join["request"]["rebalanceTimeoutMs"] == 300000
    assert join["request"]["subscribedTopicNames"] == ["orders", "pay"]
    assert join["request"]["topicPartitions"] == [] and join["request"]["instanceId"] == "i-1"
    assert join["response"]["memberId"] == "m-1" and join["response"]["memberEpoch"] == 1
    assert join["response"]["assignment"] == {"topicPartitions": [{"topicId": orders, "partitions": [0, 1, 2]}]}
    assert join["response"]["heartbeatIntervalMs"] == 5000
    # Later heartbeats send only what changed.
    assert idle["request"]["rebalanceTimeoutMs"] == -1 and idle["request"]["subscribedTopicNames"] is None
    assert idle["request"]["topicPartitions"] == [{"topicId": orders, "partitions": [0, 1, 2]}]
    assert idle["response"]["assignment"] is None and idle["response"]["memberEpoch"] == 1
    assert bump["request"]["topicPartitions"] == [{"topicId": orders, "partitions": [0, 1, 2]}]
    assert bump["response"]["memberEpoch"] == 2 and bump["response"]["assignment"] is None
    # The member still owns the partition it must give up; the response assigns the rest.
    assert revoke["request"]["topicPartitions"] == [{"topicId": orders, "partitions": [0, 1, 2]}]
    assert revoke["response"]["assignment"] == {"topicPartitions": [{"topicId": orders, "partitions": [0, 1]}]}
    assert after["request"]["topicPartitions"] is None  # unchanged since the last request
    assert leave["request"]["memberEpoch"] == -2 and leave["response"]["memberEpoch"] == -2
    assert leave["request"]["topicPartitions"] is None and leave["response"]["assignment"] is None
    assert enc.counts["member_left:static_leave:carried"] == 1
    assert enc.counts["member_assignment:carried"] == 3


def test_error_heartbeat_is_kafkas_error_response():
    enc = RequestLogEncoder()
    lines = enc.encode_all([heartbeat(0, 1), assignment(1, {"orders": [0]}), heartbeat(7, 7, error=110),
                            {"type": "member_left", "ts": T0, "group_id": "g", "event_id": "e", "member_id": "m-1",
                             "reason": "fenced", "member_epoch": 1}])
    response = payload(lines[-1][1])["response"]
    assert response == {"throttleTimeMs": 0, "errorCode": 110, "errorMessage": response["errorMessage"],
                        "memberId": None, "memberEpoch": 0, "heartbeatIntervalMs": 0, "assignment": None}
    assert "fenced" in response["errorMessage"]
    assert enc.counts["member_left:fenced:skipped"] == 1


# ---------------------------------------------------------------------------- the line


def test_wrapper_time_stamp_is_the_events_ts_in_utc():
    enc = RequestLogEncoder()
    ((_, line),) = enc.add(commit(ts=T0))
    match = LINE.match(line)
    assert match.group(1) == "2025-11-20 08:00:00,123"
    parsed = datetime.strptime(match.group(1), "%Y-%m-%d %H:%M:%S,%f").replace(tzinfo=timezone.utc)
    assert int(parsed.timestamp() * 1000) == T0
    assert line == log_line(T0, match.group(2))
    body = json.loads(match.group(2))
    assert body["connection"].count("-") == 3 and ":9092-" in body["connection"]
    assert isinstance(body["totalTimeMs"], float) and body["totalTimeMs"] >= body["remoteTimeMs"]
    assert body["principal"] == "User:ANONYMOUS" and body["listener"] == "PLAINTEXT"
    assert body["clientInformation"]["softwareName"] == "apache-kafka-java"


def test_a_1000_partition_commit_is_one_line():
    enc = RequestLogEncoder()
    event = commit(partitions=1000)
    ((_, line),) = enc.add(event)
    assert "\n" not in line and "\r" not in line
    body = payload(line)
    assert sum(len(t["partitions"]) for t in body["request"]["topics"]) == 1001
    assert 100_000 < len(line) < 250_000  # ~130 bytes of JSON per partition (research/real-cluster-feed.md)


def test_topic_ids_are_kafka_uuids_and_deterministic():
    seen = set()
    for n in range(2000):
        text = topic_id(f"topic-{n}")
        assert re.fullmatch(r"[A-Za-z0-9_-]{22}", text) and not text.startswith("-")
        value = topic_id_uuid(f"topic-{n}")
        assert value.version == 4 and value.variant == uuid.RFC_4122
        assert base64.urlsafe_b64decode(text + "==") == value.bytes
        seen.add(text)
    assert len(seen) == 2000
    assert topic_id("orders") == topic_id("orders") != topic_id("orders2")


def test_broker_versions():
    assert parse_broker_versions("all") == tuple(RELEASES)
    assert parse_broker_versions("4.2, 3.7,4.2") == ("4.2", "3.7")
    with pytest.raises(ValueError, match="unknown broker version '9.9'; valid: all, 3.5"):
        parse_broker_versions("3.7,9.9")
    with pytest.raises(ValueError, match="cannot coordinate KIP-848 groups"):
        parse_broker_versions("3.5,3.6")
    with pytest.raises(ValueError, match="OffsetCommit v10: broker 4.1 accepts v2-v9"):
        RequestLogEncoder().pin_group("g", "4.1", offset_commit=10)


# ---------------------------------------------------------------------------- whole runs


def run(name: str = "mixed", **knobs) -> list[dict]:
    knobs = dataclasses.replace(profile(name), **{"groups": 12, **knobs})
    return simulate(SimConfig(knobs=knobs, seed=5, duration_ms=300_000))


@pytest.fixture(scope="module")
def mixed_events() -> list[dict]:
    return run("mixed", committed_records=True, unclean_elections_per_hour=20.0, admin_commit_per_hour=4.0,
               eos_fraction=0.3)


def test_every_event_is_encoded_carried_or_counted_as_skipped(mixed_events):
    enc = RequestLogEncoder(broker_versions="all", client_versions="all")
    lines = enc.encode_all(mixed_events)
    by_type = collections.Counter(e["type"] for e in mixed_events)
    accounted = collections.Counter()
    for key, n in enc.counts.items():
        if key.endswith((":encoded", ":carried", ":skipped")):
            accounted[key.split(":")[0]] += n
    assert accounted == by_type
    # Every encoded event is one line; carried ones ride on a heartbeat's line.
    encoded = sum(n for k, n in enc.counts.items() if k.endswith(":encoded"))
    assert len(lines) == enc.lines == encoded
    skipped = enc.skipped()
    for kind in ("classic_join", "classic_sync", "group_state", "offset_committed", "partition_epochs"):
        assert skipped.get(kind, 0) == by_type[kind] > 0
    assert enc.counts["member_assignment:skipped"] == 0  # the simulator delivers every change with a heartbeat
    for _, line in lines:
        assert list(payload(line)) == OUTER


@pytest.mark.slow
def test_version_mixes(mixed_events):
    newest = RequestLogEncoder()
    newest.encode_all(mixed_events)
    assert {"OFFSET_COMMIT v9", "OFFSET_COMMIT v10", "CONSUMER_GROUP_HEARTBEAT v0", "CONSUMER_GROUP_HEARTBEAT v1"} <= set(newest.versions)
    every = RequestLogEncoder(broker_versions="all", client_versions="all")
    lines = every.encode_all(simulate(SimConfig(
        knobs=dataclasses.replace(profile("mixed"), groups=24, eos_fraction=0.5, classic_fraction=0.5, pause_per_hour=0.0),
        seed=5, duration_ms=120_000)))
    assert {f"OFFSET_COMMIT v{v}" for v in range(2, 11)} <= set(every.versions)
    assert {f"TXN_OFFSET_COMMIT v{v}" for v in range(0, 6)} <= set(every.versions)
    assert {"CONSUMER_GROUP_HEARTBEAT v0", "CONSUMER_GROUP_HEARTBEAT v1"} <= set(every.versions)
    # KIP-848 members commit with v9+; old versions come from classic groups; v10 names topics by id only.
    for _, line in lines:
        body = payload(line)
        header, request = body["requestHeader"], body["request"]
        if header["requestApiKey"] == 8:
            epoch_field = "generationId" if "generationId" in request else "generationIdOrMemberEpoch"
            assert epoch_field in request
            names = {next(iter(t)) for t in request["topics"]}
            assert names <= ({"topicId"} if header["requestApiVersion"] == 10 else {"name"})
        if header["requestApiKey"] == 68:
            assert body["clientInformation"]["softwareVersion"][:3] in ("3.7", "3.8", "3.9", "4.0", "4.1", "4.2", "4.3")


@pytest.mark.slow
def test_deterministic(mixed_events):
    first = RequestLogEncoder(broker_versions="all", client_versions="all").encode_all(mixed_events)
    again = RequestLogEncoder(broker_versions="all", client_versions="all").encode_all(
        run("mixed", committed_records=True, unclean_elections_per_hour=20.0, admin_commit_per_hour=4.0,
            eos_fraction=0.3))
    assert first == again


def test_command_writes_lines_and_topic_ids(tmp_path, capsys):
    out, ids = tmp_path / "request.log", tmp_path / "ids.json"
    args = ["simulate", "--profile", "zombie-storm", "--seed", "3", "--groups", "4", "--duration", "5m",
            "--format", "request-log", "--broker-versions", "all"]
    assert main(args + ["--out", str(out), "--topic-ids-out", str(ids)]) == 0
    err = capsys.readouterr().err
    assert "request-log lines=" in err and "skipped: " in err
    lines = out.read_text().splitlines()
    assert lines and all(LINE.match(line) for line in lines)
    names = json.loads(ids.read_text())
    assert names == {topic_id(name): name for name in names.values()}
    used = set()
    for line in lines:
        body = payload(line)
        for topic in body["request"].get("topics") or ():
            if "topicId" in topic:
                used.add(topic["topicId"])
        for tp in body["request"].get("topicPartitions") or ():
            used.add(tp["topicId"])
    assert used and used <= set(names)
    again = tmp_path / "again.log"
    assert main(args + ["--out", str(again), "--quiet"]) == 0
    assert again.read_text() == out.read_text()


def test_command_rejects_bad_options(tmp_path, capsys):
    assert main(["simulate", "--topic-ids-out", str(tmp_path / "x.json"), "--out", str(tmp_path / "o")]) == 2
    assert "--topic-ids-out needs --format request-log" in capsys.readouterr().err
    assert main(["simulate", "--format", "request-log", "--broker-versions", "3.5", "--out", str(tmp_path / "o")]) == 2
    assert "cannot coordinate KIP-848 groups" in capsys.readouterr().err
    assert main(["simulate", "--format", "request-log", "--request-log-topic", "t", "--out", str(tmp_path / "o")]) == 2
    assert "--request-log-topic needs --format request-log and --bootstrap-servers" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    name=st.sampled_from(["steady", "rolling-restart", "zombie-storm", "eos-heavy", "expiry-hazard", "mixed"]),
    seed=st.integers(0, 10_000),
    brokers=st.lists(st.sampled_from(sorted(RELEASES)), min_size=1, max_size=4),
    clients=st.sampled_from(["newest", "all"]),
)
def test_any_run_gives_well_formed_lines_and_accounts_for_every_event(name, seed, brokers, clients):
    brokers = [*brokers, "4.0"]  # at least one release that hosts KIP-848 groups
    knobs = dataclasses.replace(profile(name), groups=3, eos_fraction=min(profile(name).eos_fraction, 0.3))
    events = simulate(SimConfig(knobs=knobs, seed=seed, duration_ms=120_000))
    enc = RequestLogEncoder(broker_versions=",".join(brokers), client_versions=clients)
    lines = enc.encode_all(events)
    accounted = collections.Counter()
    for key, n in enc.counts.items():
        if key.endswith((":encoded", ":carried", ":skipped")):
            accounted[key.split(":")[0]] += n
    assert accounted == collections.Counter(e["type"] for e in events)
    by_group = collections.defaultdict(list)
    for group, line in lines:
        body = payload(line)
        assert body["request"]["groupId"] == group
        assert body["requestHeader"]["requestApiKey"] in (8, 28, 68)
        release = RELEASES[enc.group_versions(group)["broker"]]
        assert release.name in brokers
        by_group[group].append(LINE.match(line).group(1))
    for stamps in by_group.values():
        assert stamps == sorted(stamps)  # a group's lines in time order, as one coordinator logs them


@pytest.mark.broker
@pytest.mark.slow
def test_lines_topic_holds_the_files_lines_keyed_by_group(broker, topic_factory, tmp_path):
    from confluent_kafka import Consumer, TopicPartition

    from fencewatch.sim.run import run_simulation
    from fencewatch.sim.writers import murmur2_partition

    topic = topic_factory(partitions=3, prefix="reqlog")
    cfg = SimConfig(knobs=dataclasses.replace(profile("zombie-storm"), groups=5), seed=2, duration_ms=300_000)
    summary = run_simulation(cfg, fmt="request-log", bootstrap_servers=broker, request_log_topic=topic)
    path = tmp_path / "lines.log"
    run_simulation(cfg, fmt="request-log", out=str(path))
    expected = path.read_text().splitlines()
    assert summary["lines"] == len(expected) > 1000
    consumer = Consumer({"bootstrap.servers": broker, "group.id": f"r-{topic}", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(3)])
    records = []
    try:
        while len(records) < len(expected):
            batch = consumer.consume(num_messages=10_000, timeout=5)
            assert batch, f"only {len(records)} of {len(expected)} lines arrived"
            records.extend(batch)
    finally:
        consumer.close()
    by_partition = collections.defaultdict(list)
    for msg in records:
        group = json.loads(LINE.match(msg.value().decode()).group(2))["request"]["groupId"]
        assert msg.key().decode() == group and msg.partition() == murmur2_partition(msg.key(), 3)
        by_partition[msg.partition()].append(msg.value().decode())
    for partition, got in by_partition.items():
        assert got == [line for line in expected if murmur2_partition(payload(line)["request"]["groupId"].encode(), 3) == partition]

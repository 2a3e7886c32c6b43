"""deploy/kubernetes/strimzi: valid Strimzi resources (its 1.2.0 CRD schemas), topics and ACLs
that cover what fencewatch's configuration reads and writes, and broker logging that puts the
request log where fencewatch can read it, run in real log4j-core.

The ACL check restates Kafka's authorizer (AclAuthorizer / StandardAuthorizer): an ALLOW on the
resource by literal name, by prefix, or the literal wildcard ``*``; Read, Write, Delete and
Alter imply Describe; AlterConfigs implies DescribeConfigs (Kafka's ``AuthorizerUtils`` /
``acl`` documentation). No Strimzi operator or broker runs here.
"""
from __future__ import annotations

import copy
import json
import re
import subprocess
from pathlib import Path

import kubernetes_validate
import pytest

from fencewatch.streaming.ingest.request_log import DECODED_APIS

import crd_schemas
import test_kubernetes as k8s
from deploy_files import KUBERNETES, build, rendered
from test_log4j2_filter import HERE, message, spark_jars, streams_heartbeat_message

STRIMZI = KUBERNETES / "strimzi"
SHIPPER = "fencewatch-request-log"  # the KafkaUser of the brokers' KafkaAppender
IMPLIES = {"Describe": {"Read", "Write", "Delete", "Alter", "Describe", "All"},
           "DescribeConfigs": {"AlterConfigs", "DescribeConfigs", "All"}}


def _docs() -> list[dict]:
    return build(STRIMZI)


def _of(kind: str) -> dict[str, dict]:
    return {d["metadata"]["name"]: d for d in _docs() if d["kind"] == kind}


@pytest.mark.parametrize("doc", _docs(), ids=lambda d: f"{d['kind']}/{d['metadata']['name']}")
def test_resource_is_valid(doc):
    if (doc["apiVersion"], doc["kind"]) in crd_schemas.stored():
        assert crd_schemas.problems(doc) == []
    else:
        kubernetes_validate.validate(doc, k8s.K8S, strict=True)
    assert doc["metadata"]["labels"]["strimzi.io/cluster"], "Strimzi's operators pick resources by cluster label"


def _minimal_kafka() -> dict:
    """A Kafka resource with only what its CRD requires, for the patch to land on."""
    return {"apiVersion": "kafka.strimzi.io/v1", "kind": "Kafka", "metadata": {"name": "my-cluster", "namespace": "kafka"},
            "spec": {"kafka": {"listeners": [{"name": "tls", "port": 9093, "type": "internal", "tls": True,
                                              "authentication": {"type": "scram-sha-512"}}]}}}


def _merge(target: dict, patch: dict) -> dict:
    """RFC 7386 JSON merge patch (kubectl patch --type merge)."""
    out = copy.deepcopy(target)
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        elif isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def test_the_kafka_patch_gives_a_valid_kafka_resource_logging_from_the_shipped_config_map():
    import yaml

    patch = yaml.safe_load((STRIMZI / "kafka-patch.yaml").read_text())
    kafka = _merge(_minimal_kafka(), patch)
    assert crd_schemas.problems(kafka) == []
    ref = kafka["spec"]["kafka"]["logging"]["valueFrom"]["configMapKeyRef"]
    assert ref["key"] in _of("ConfigMap")[ref["name"]]["data"]
    broken = _merge(kafka, {"spec": {"kafka": {"logging": {"type": "file"}}}})
    assert crd_schemas.problems(broken), "negative control: the Kafka CRD's schema is applied"


def test_there_is_a_topic_for_every_topic_fencewatch_is_configured_with():
    cfg = k8s.job_config()
    wanted = {cfg.streaming.heartbeats_topic, cfg.streaming.offsets_topic, cfg.streaming.request_log_topic,
              cfg.sinks.verdicts_topic, cfg.sinks.alerts_topic, cfg.sinks.dlq_topic}
    topics = {t.get("spec", {}).get("topicName", name): t for name, t in _of("KafkaTopic").items()}
    assert set(topics) == wanted
    assert int(topics[cfg.streaming.request_log_topic]["spec"]["config"]["max.message.bytes"]) == 8 * 1024 * 1024


def allowed(user: dict, resource_type: str, name: str, operation: str) -> bool:
    """Kafka's decision for an ALLOW-only ACL list (see the module docstring)."""
    for acl in user["spec"]["authorization"]["acls"]:
        res = acl["resource"]
        if acl.get("type", "allow") != "allow" or res["type"] != resource_type:
            continue
        if resource_type != "cluster":
            pattern = res.get("patternType", "literal")
            if not (res["name"] == "*" or (pattern == "literal" and res["name"] == name)
                    or (pattern == "prefix" and name.startswith(res["name"]))):
                continue
        if set(acl["operations"]) & IMPLIES.get(operation, {operation, "All"}):
            return True
    return False


def test_the_jobs_acls_cover_what_it_reads_and_writes():
    """Every need of ``runtime.access.job_needs`` (what `fencewatch doctor` checks), for the job's
    configuration with every source on, and nothing it does not need."""
    from dataclasses import replace

    from fencewatch.streaming.runtime.access import job_needs

    cfg = k8s.job_config()
    user = _of("KafkaUser")[cfg.streaming.kafka["sasl.username"]]
    every_source = replace(cfg, streaming=replace(cfg.streaming, source="events,consumer-offsets,request-log"))
    words = {"READ": "Read", "WRITE": "Write", "DESCRIBE": "Describe", "DESCRIBE_CONFIGS": "DescribeConfigs"}
    for need in job_needs(every_source):
        name = f"{need.name}-8f14e45f" if need.prefixed else "orders" if need.name == "*" else need.name
        for op in need.operations:
            assert allowed(user, need.resource, name, words[op]), (need, op)
    assert not allowed(user, "topic", "orders", "Read")
    assert not allowed(user, "topic", cfg.streaming.heartbeats_topic, "Write"), "the job never writes its input"


def test_the_bridges_acls_cover_what_it_reads_and_writes():
    args, env = k8s.bridge_args()
    user = _of("KafkaUser")[env["FENCEWATCH_STREAMING__KAFKA__SASL_USERNAME"]]
    assert allowed(user, "topic", args.source_topic, "Read")
    assert allowed(user, "topic", args.heartbeats_topic, "Write") and allowed(user, "topic", args.offsets_topic, "Write")
    assert allowed(user, "topic", k8s.job_config().streaming.request_log_topic, "Read")
    assert allowed(user, "group", "fencewatch-bridge-8f14e45f", "Read")
    assert not allowed(user, "group", "payments", "Read")
    assert not allowed(user, "topic", k8s.job_config().sinks.alerts_topic, "Write")


def test_the_usernames_the_secret_documents_are_the_strimzi_users():
    from k8s_objects import SECRET_VALUES

    users = set(_of("KafkaUser")) - {SHIPPER}  # the brokers' own, not fencewatch's
    assert {SECRET_VALUES["job-sasl-username"], SECRET_VALUES["bridge-sasl-username"]} == users
    settings = k8s.one("ConfigMap", "fencewatch-kafka")["data"]
    assert settings["FENCEWATCH_STREAMING__KAFKA__SASL_MECHANISM"] == "SCRAM-SHA-512"
    assert {u["spec"]["authentication"]["type"] for u in _of("KafkaUser").values()} == {"scram-sha-512"}


# --------------------------------------------------------------------------- broker logging


def _log4j2(tmp_path: Path, properties: str, messages: list[str]) -> tuple[list[str], list[str]]:
    """(stdout lines, stderr lines) of real log4j-core logging ``messages`` on kafka.request.logger."""
    config = tmp_path / "log4j2.properties"
    config.write_text(properties)
    classpath = ":".join(str(p) for p in sorted(spark_jars().glob("log4j-*.jar")))
    done = subprocess.run(["java", "-cp", classpath, f"-Dlog4j2.configurationFile={config}",
                           str(HERE / "Log4j2FilterCheck.java")],
                          input="\n".join(messages) + "\n", capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "StatusLogger" not in done.stderr, done.stderr  # a configuration log4j could not read
    return done.stdout.splitlines(), done.stderr.splitlines()


def _decoded(lines: list[str]) -> list:
    from fencewatch.streaming.ingest.consumer_offsets.mapping import TopicNames
    from fencewatch.streaming.ingest.request_log import RequestLogBridge

    bridge = RequestLogBridge(TopicNames(None))
    return [e for i, line in enumerate(lines) for e in bridge.events(line, f"e{i}")]


def _broker_logging() -> str:
    return _of("ConfigMap")["fencewatch-kafka-logging"]["data"]["log4j2.properties"]


# A whole OffsetCommit v9 line's message, as RequestConvertToJson writes it (the decoder's input).
OFFSET_COMMIT = "Completed request:" + json.dumps({
    "isForwarded": False,
    "requestHeader": {"requestApiKey": 8, "requestApiVersion": 9, "correlationId": 5, "clientId": "c",
                      "requestApiKeyName": "OFFSET_COMMIT"},
    "request": {"groupId": "orders-app", "generationIdOrMemberEpoch": 3, "memberId": "m-1", "groupInstanceId": None,
                "topics": [{"name": "orders", "partitions": [{"partitionIndex": 0, "committedOffset": 10,
                                                              "committedLeaderEpoch": -1, "committedMetadata": ""}]}]},
    "response": {"throttleTimeMs": 0, "topics": [{"name": "orders", "partitions": [{"partitionIndex": 0, "errorCode": 0}]}]},
    "connection": "10.0.0.1:9093-10.0.0.2:50000-1", "totalTimeMs": 1.2, "requestQueueTimeMs": 0.1, "localTimeMs": 1,
    "remoteTimeMs": 0, "throttleTimeMs": 0, "responseQueueTimeMs": 0, "sendTimeMs": 0, "securityProtocol": "SASL_SSL",
    "principal": "User:orders-app", "listener": "TLS", "clientInformation": {"softwareName": "x", "softwareVersion": "1"}},
    separators=(",", ":"))
KEPT = [OFFSET_COMMIT, message(28, "TXN_OFFSET_COMMIT"), message(68, "CONSUMER_GROUP_HEARTBEAT"),
        streams_heartbeat_message()]
DROPPED = [message(0, "PRODUCE"), message(1, "FETCH"), message(1, "FETCH", client_id='x "requestApiKey":8, y'),
           message(3, "METADATA")]


@pytest.mark.slow
def test_the_brokers_request_log_goes_to_stderr_in_kafkas_layout_and_decodes(tmp_path):
    stdout, stderr = _log4j2(tmp_path, _broker_logging(), [DROPPED[0], KEPT[0], DROPPED[1], KEPT[1], DROPPED[2], KEPT[2],
                                                           DROPPED[3], KEPT[3]])
    assert stdout == [], "the broker's other logs (stdout) carry no request-log line"
    assert len(stderr) == len(KEPT)
    assert all(line.endswith(" (kafka.request.logger)") and line.startswith("[") for line in stderr)
    assert [line.split("] DEBUG ", 1)[1].removesuffix(" (kafka.request.logger)") for line in stderr] == KEPT
    commits = _decoded(stderr[:1])
    assert [(type(e).__name__, e.group_id, e.member_epoch) for e in commits] == [("OffsetCommit", "orders-app", 3)]
    streams = _decoded(stderr[3:])  # a Kafka Streams member's heartbeat (API 88), from a real broker's capture
    assert [type(e).__name__ for e in streams] == ["Heartbeat"] and streams[0].group_id.endswith("streams-app")


@pytest.mark.slow
def test_inline_logging_alone_would_give_lines_fencewatch_cannot_read(tmp_path):
    """Control: what `logging: {type: inline, loggers: {logger.requestlogger.level: DEBUG}}` does,
    Strimzi's default file with the level raised: every API, in Strimzi's console layout."""
    lines = [line for line in _broker_logging().splitlines()
             if not line.startswith("appender.request.") and "requestlogger.appenderRef" not in line
             and "requestlogger.appenderRefs" not in line]
    lines += ["logger.requestlogger.appenderRefs = console", "logger.requestlogger.appenderRef.console.ref = STDOUT"]
    stdout, _ = _log4j2(tmp_path, "\n".join(lines) + "\n", [OFFSET_COMMIT, DROPPED[1]])
    assert len(stdout) == 2, "no filter: every API"
    assert _decoded(stdout) == [], "the thread name in brackets is read where the time stamp should be"


# --------------------------------------------------------------------------- no node agent


def _appender_logging() -> str:
    return _of("ConfigMap")["fencewatch-kafka-logging"]["data"]["log4j2-kafka-appender.properties"]


def test_the_appender_patch_gives_a_valid_kafka_resource_with_every_variable_the_file_reads():
    import yaml

    patch = yaml.safe_load((STRIMZI / "kafka-patch-appender.yaml").read_text())
    kafka = _merge(_minimal_kafka(), patch)
    assert crd_schemas.problems(kafka) == []
    ref = kafka["spec"]["kafka"]["logging"]["valueFrom"]["configMapKeyRef"]
    assert ref["key"] == "log4j2-kafka-appender.properties" and ref["key"] in _of("ConfigMap")[ref["name"]]["data"]
    env = {e["name"]: e for e in kafka["spec"]["kafka"]["template"]["kafkaContainer"]["env"]}
    read = set(re.findall(r"\$\{env:(\w+)", _appender_logging()))
    # Strimzi's start script exports the node id; FENCEWATCH_REQUEST_LOG_TOPIC and _PROTOCOL have defaults.
    assert read - set(env) == {"STRIMZI_BROKER_ID", "FENCEWATCH_REQUEST_LOG_TOPIC", "FENCEWATCH_REQUEST_LOG_PROTOCOL"}
    assert set(env) <= read
    assert env["FENCEWATCH_REQUEST_LOG_PASSWORD"]["valueFrom"]["secretKeyRef"]["name"] == SHIPPER
    assert env["FENCEWATCH_REQUEST_LOG_USER"]["value"] == SHIPPER


def test_the_shippers_acls_allow_writing_the_lines_topic_only():
    user = _of("KafkaUser")[SHIPPER]
    topic = k8s.job_config().streaming.request_log_topic
    assert allowed(user, "topic", topic, "Write") and allowed(user, "topic", topic, "Describe")
    assert not allowed(user, "topic", topic, "Read")
    assert not allowed(user, "topic", k8s.job_config().sinks.alerts_topic, "Write")


def _commit_offsets(bootstrap: str, topic: str, group: str, offsets: list[int]) -> float:
    """A KIP-848 consumer of ``group`` commits ``offsets`` of ``topic``[0] one by one; the seconds the commits took."""
    import time

    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "group.protocol": "consumer",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + 60
        while not consumer.assignment() and time.monotonic() < deadline:
            consumer.poll(0.2)
        assert consumer.assignment(), "no assignment within 60 s"
        began = time.monotonic()
        for offset in offsets:
            consumer.commit(offsets=[TopicPartition(topic, 0, offset)], asynchronous=False)
        return time.monotonic() - began
    finally:
        consumer.close()


def _records_until(bootstrap: str, topic: str, done, timeout_s: float = 60.0) -> list:
    import time
    import uuid

    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"read-{uuid.uuid4().hex}",
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, 0)])
    records: list = []
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline and not done(records):
            msg = consumer.poll(0.5)
            if msg is not None and not msg.error():
                records.append(msg)
        return records
    finally:
        consumer.close()


@pytest.mark.slow
@pytest.mark.broker
def test_the_broker_writes_its_own_request_log_to_the_lines_topic_across_a_restart():
    """The ConfigMap's file in Apache Kafka 4.2 itself: the broker's KafkaAppender writes the
    commits it answered to the lines topic, keyed by node id, in the decoder's format, none lost
    at start-up or after a restart, and it never holds the broker's requests up. One network
    thread, the worst case: the appender's producer shares it with every client (measured: with
    the KafkaAppender straight on the logger, no AsyncAppender, each start froze that thread for
    max.block.ms and lost the first lines; docs/real-cluster.md)."""
    from fencewatch.streaming.brokers.common import free_port
    from fencewatch.streaming.brokers.kafka import KafkaBroker

    port = free_port()
    env = {"STRIMZI_BROKER_ID": "1", "FENCEWATCH_REQUEST_LOG_BOOTSTRAP": f"127.0.0.1:{port}",
           "FENCEWATCH_REQUEST_LOG_PROTOCOL": "PLAINTEXT"}
    text = _appender_logging()
    with KafkaBroker(port=port, env=env, log4j2=lambda folder, bootstrap: text,
                     properties={"num.network.threads": "1"}) as broker:
        lines_topic = "fencewatch.request-log"
        broker.create_topics([lines_topic, "orders"])
        def commits(records) -> dict[str, list[int]]:
            found: dict[str, list[int]] = {}
            for e in _decoded([r.value().decode("utf-8") for r in records]):
                if type(e).__name__ == "OffsetCommit":
                    found.setdefault(e.group_id, []).extend(o.offset for o in e.offsets)
            return found

        first = _commit_offsets(broker.bootstrap, "orders", "before-restart", [1, 2, 3])
        # One node: the lines' partition leader is the broker that stops, so lines still in the
        # appender when SIGTERM comes cannot be flushed (docs/real-cluster.md, "Stop"); wait until
        # the first start's lines are in, then restart. What this asserts of the restart: no line
        # lost at the new start, while the producer waits for metadata.
        before = _records_until(broker.bootstrap, lines_topic, lambda rs: commits(rs).get("before-restart") == [1, 2, 3])
        assert commits(before) == {"before-restart": [1, 2, 3]}, "every commit of the first start, in order"
        broker.restart()
        second = _commit_offsets(broker.bootstrap, "orders", "after-restart", [4, 5])

        want = {"before-restart": [1, 2, 3], "after-restart": [4, 5]}
        records = _records_until(broker.bootstrap, lines_topic, lambda rs: commits(rs) == want)
        server_log = (broker.directory / "stdout.log").read_text(errors="replace")
    assert commits(records) == want, "every commit, once, in order, before and after the restart"
    assert {r.key() for r in records} == {b"1"}, "keyed by the node id"
    apis = {re.search(rb'"requestApiKey":(\d+),', r.value()).group(1) for r in records}
    assert apis <= {str(a).encode() for a in DECODED_APIS} and b"68" in apis, \
        "no Produce line of the appender's own producer"
    assert "Unable to write to Kafka" not in server_log
    assert "Recursive logging" not in server_log
    # A frozen network thread holds a commit for max.block.ms (60 s); unhindered, they take well under 1 s.
    assert first < 20 and second < 20, (first, second)

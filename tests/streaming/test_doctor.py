"""``fencewatch doctor`` against Apache Kafka's own broker with SASL/SCRAM and ACLs enforced.

One broker for the module (``KafkaBroker(sasl=True)``, super user ``admin``): one principal per
ACL failure, each missing exactly one kind of ACL the job needs, granted with the AdminClient's
``create_acls``; a KIP-848 group's real request-log lines (from this broker's own
``kafka-request.log``) shipped to a request-log topic, plus a stale copy and a garbled one.
Each failure the doctor knows is provoked once, and the all-green case passes. The doctor runs
in-process (``cli.main``) and its lines are read from stdout; a run takes about a second. The
module took 27-34 s on the shared 2-core machine (``pytest tests/streaming/test_doctor.py -m "not
slow"``), most of it the broker's start and a KIP-848 group's first commits; the ``slow`` test
per Kafka version adds a 4.2, 4.3 and 4.4 broker unless the session already runs them.
"""
from __future__ import annotations

import logging
import re
import socket
import time

import pytest

from fencewatch.streaming.brokers.tansu import free_port
from fencewatch.streaming.cli import main

pytestmark = pytest.mark.broker

PASSWORD = "fw-pass-1"
ALL_ACLS = "fw"
#: principal -> the one grant it lacks (see _grants)
LACKING = {"fw-nodescribe": "describe", "fw-noread": "read-input", "fw-nowrite": "write-output",
           "fw-nooffsets": "read-consumer-offsets", "fw-nogroup": "source-group"}
TOPICS = {"rl": "fw.request-log", "stale": "fw.request-log-stale", "garbled": "fw.request-log-garbled",
          "alerts": "fw.alerts", "dlq": "fw.dlq", "verdicts": "fw.verdicts", "orders": "orders"}
TWO_HOURS_MS = 2 * 3600 * 1000


def _quiet():
    log = logging.getLogger("tests.doctor.kafka")
    log.setLevel(logging.CRITICAL)
    return log


def _grants(user: str) -> list:
    """The ACLs the job needs for ``JOB_ARGS`` (runtime.access.job_needs), less the one ``user`` lacks."""
    from confluent_kafka.admin import AclBinding, AclOperation, AclPermissionType, ResourcePatternType, ResourceType

    def acl(kind, name, op, pattern=ResourcePatternType.LITERAL):
        return AclBinding(kind, name, pattern, f"User:{user}", "*", op, AclPermissionType.ALLOW)

    lacking = LACKING.get(user)
    out = [acl(ResourceType.TOPIC, t, op) for t in (TOPICS["alerts"], TOPICS["dlq"], TOPICS["verdicts"])
           for op in (AclOperation.READ, AclOperation.WRITE)
           if not (lacking == "write-output" and t == TOPICS["alerts"] and op == AclOperation.WRITE)]
    if lacking != "read-input":  # every request-log topic of this module: a prefix
        out.append(acl(ResourceType.TOPIC, "fw.request-log", AclOperation.READ, ResourcePatternType.PREFIXED))
    if lacking != "read-consumer-offsets":
        out.append(acl(ResourceType.TOPIC, "__consumer_offsets", AclOperation.READ))
    if lacking != "source-group":  # the groups its consumers name (runtime.access)
        out.append(acl(ResourceType.GROUP, "fencewatch-kafka-source", AclOperation.DESCRIBE,
                       ResourcePatternType.PREFIXED))
    out.append(acl(ResourceType.GROUP, "fencewatch-sink-readback", AclOperation.DESCRIBE))
    if lacking != "describe":
        out += [acl(ResourceType.TOPIC, "*", AclOperation.DESCRIBE),
                acl(ResourceType.BROKER, "kafka-cluster", AclOperation.DESCRIBE),
                acl(ResourceType.BROKER, "kafka-cluster", AclOperation.DESCRIBE_CONFIGS)]
    if lacking not in ("describe", "source-group"):  # Describe on every group covers the source's too
        out.append(acl(ResourceType.GROUP, "*", AclOperation.DESCRIBE))
    return out


def _kip848_lines(broker) -> list[bytes]:
    """A KIP-848 group's heartbeats and commits as this broker logged them (its request log)."""
    from confluent_kafka import Consumer, Producer

    producer = Producer({**broker.client_config(), "logger": _quiet()})
    for i in range(20):
        producer.produce(TOPICS["orders"], b"x", partition=i % 2)
    producer.flush(10)
    consumer = Consumer({**broker.client_config(), "logger": _quiet(), "group.id": "doctor-g848",
                         "group.protocol": "consumer", "auto.offset.reset": "earliest"})
    consumer.subscribe([TOPICS["orders"]])
    commits, deadline = 0, time.monotonic() + 30
    while commits < 5 and time.monotonic() < deadline:
        msg = consumer.poll(0.2)
        if msg is not None and msg.error() is None:
            consumer.commit(msg, asynchronous=False)
            commits += 1
    consumer.close()
    lines = [line for line in broker.request_log_path.read_bytes().split(b"\n")
             if b'"requestApiKey":68,' in line or b'"requestApiKey":8,' in line]
    assert commits == 5 and len(lines) >= 8, (commits, len(lines))
    return lines


@pytest.fixture(scope="module")
def cluster():
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient

    from fencewatch.streaming.brokers.kafka import KafkaBroker

    users = {name: PASSWORD for name in (ALL_ACLS, *LACKING)}
    with KafkaBroker(sasl=True, users=users) as broker:
        broker.create_topics(TOPICS.values(), partitions=2)
        lines = _kip848_lines(broker)
        producer = Producer({**broker.client_config(), "logger": _quiet()})
        now = int(time.time() * 1000)
        for i, line in enumerate(lines):
            producer.produce(TOPICS["rl"], line, key=b"1", partition=i % 2)
            producer.produce(TOPICS["stale"], line, partition=i % 2, timestamp=now - TWO_HOURS_MS)
            # a shipper that wraps each line in a JSON envelope, and one that cuts long lines
            garbled = b'{"log": "%s"}' % line.replace(b'"', b'\\"') if i % 2 else line[:120]
            producer.produce(TOPICS["garbled"], garbled, partition=i % 2)
        assert producer.flush(10) == 0
        admin = AdminClient({**broker.client_config(), "logger": _quiet()})
        for future in admin.create_acls([g for user in users for g in _grants(user)]).values():
            future.result()
        yield broker


def job_args(broker, user: str = ALL_ACLS, password: str = PASSWORD, mechanism: str = "SCRAM-SHA-512") -> list[str]:
    """`fencewatch run`'s flags for a request-log + __consumer_offsets deployment."""
    return ["--bootstrap-servers", broker.bootstrap, "-X", "security.protocol=SASL_PLAINTEXT",
            "-X", f"sasl.mechanism={mechanism}", "-X", f"sasl.username={user}", "-X", f"sasl.password={password}",
            "--source", "request-log,consumer-offsets", "--request-log-topic", TOPICS["rl"],
            "--alerts-topic", TOPICS["alerts"], "--dlq-topic", TOPICS["dlq"], "--verdicts-topic", TOPICS["verdicts"],
            "--metrics-port", "0", "--timeout", "5"]


def doctor(capsys, tmp_path, args: list[str]) -> tuple[int, list[tuple[str, str, str]]]:
    """Exit code and (status, check, text) lines of one run."""
    if "--checkpoint" not in args:
        args = [*args, "--checkpoint", str(tmp_path / "cp")]
    capsys.readouterr()
    rc = main(["doctor", *args])
    out = capsys.readouterr().out
    lines = [m.groups() for m in re.finditer(r"^(OK|WARN|FAIL|SKIP)\s+(.+?)  +(.*)$", out, re.M)]
    assert out.strip().endswith(("ready", "run it again")), out
    return rc, lines


def only(lines, status: str) -> dict[str, str]:
    return {check: text for s, check, text in lines if s == status}


@pytest.fixture(autouse=True)
def _no_fencewatch_settings_in_env(monkeypatch):
    """Only the variables a test sets: a developer's own FENCEWATCH_* settings would change the lines."""
    import os

    from fencewatch.streaming.config.env_check import OTHER_VARIABLES

    for name in list(os.environ):
        if name.startswith("FENCEWATCH_") and name not in OTHER_VARIABLES:
            monkeypatch.delenv(name)


def test_all_green(cluster, capsys, tmp_path):
    rc, lines = doctor(capsys, tmp_path, job_args(cluster))
    assert rc == 0 and not only(lines, "FAIL") and not only(lines, "WARN"), lines
    ok = only(lines, "OK")
    assert {"config", "environment", "connection", "acl topic fw.request-log", "acl topic __consumer_offsets",
            "acl topic fw.alerts", "acl topic fw.dlq", "acl topic fw.verdicts", "acl group fencewatch-kafka-source*",
            "acl group fencewatch-sink-readback", "acl cluster", "acl groups", "brokers",
            "kip-848", "broker_policy", "request-log age", "request-log lines", "topic ids", "schema registry",
            "checkpoint", "metrics port"} <= set(ok)
    assert "User:fw (SASL_PLAINTEXT, SCRAM-SHA-512)" in ok["connection"]
    assert f"Apache Kafka {cluster.version.rsplit('.', 1)[0]}" in ok["brokers"]
    assert ok["kip-848"].startswith("on: group.coordinator.rebalance.protocols=classic,consumer")
    assert "1 consumer (KIP-848)" in ok["kip-848"]
    assert "(100.0%)" in ok["request-log lines"]


@pytest.mark.parametrize("case, expected", [
    ("password", "authentication failed: wrong user name or password"),
    ("mechanism", "the brokers do not offer this SASL mechanism (they offer SCRAM-SHA-512"),
    ("unreachable", "the brokers are unreachable"),
    ("protocol", "the broker closed the connection"),
])
def test_connection_failures_say_which(cluster, capsys, tmp_path, case, expected):
    args = job_args(cluster, password="not-the-password-9" if case == "password" else PASSWORD,
                    mechanism="SCRAM-SHA-256" if case == "mechanism" else "SCRAM-SHA-512")
    if case == "unreachable":
        args[1] = f"127.0.0.1:{free_port('127.0.0.1')}"
        args[-1] = "2"  # --timeout: a refused connection is retried until then
    if case == "protocol":  # PLAINTEXT against the SASL listener
        args[args.index("security.protocol=SASL_PLAINTEXT")] = "security.protocol=PLAINTEXT"
    began = time.monotonic()
    rc, lines = doctor(capsys, tmp_path, args)
    assert rc == 1 and expected in only(lines, "FAIL")["connection"], lines
    assert "SKIP" in {s for s, c, _ in lines if c == "kafka"}
    assert time.monotonic() - began < 8  # an authentication error ends the wait at once


def test_missing_describe_leaves_topic_ids_without_names(cluster, capsys, tmp_path):
    rc, lines = doctor(capsys, tmp_path, job_args(cluster, "fw-nodescribe"))
    failed, warned = only(lines, "FAIL"), only(lines, "WARN")
    assert rc == 1 and set(failed) == {"topic ids"}, "\n".join(map(str, lines))
    assert "topic id(s) in the newest request-log lines have no name" in failed["topic ids"]
    assert "--allow-principal User:fw-nodescribe --operation Describe --topic '*'" in failed["topic ids"]
    # the doctor's own ACLs: the job runs without them, so a warning with the grant
    assert "--operation Describe --operation DescribeConfigs --cluster" in warned["acl cluster"]
    assert "--operation Describe --group '*'" in warned["acl groups"]
    assert "not readable (no DescribeConfigs)" in only(lines, "OK")["kip-848"]


@pytest.mark.parametrize("user, check, operation", [
    ("fw-noread", "acl topic fw.request-log", "--operation Read --topic fw.request-log"),
    ("fw-nowrite", "acl topic fw.alerts", "--operation Write --topic fw.alerts"),
    ("fw-nooffsets", "acl topic __consumer_offsets", "--operation Read --topic __consumer_offsets"),
    ("fw-nogroup", "acl group fencewatch-kafka-source*",
     "--operation Describe --group fencewatch-kafka-source --resource-pattern-type prefixed"),
])
def test_a_missing_acl_names_the_grant(cluster, capsys, tmp_path, user, check, operation):
    rc, lines = doctor(capsys, tmp_path, job_args(cluster, user))
    failed = only(lines, "FAIL")
    assert rc == 1 and check in failed, lines
    assert f"User:{user} may not" in failed[check]
    assert f"kafka-acls.sh --bootstrap-server {cluster.bootstrap} --command-config admin.properties --add " \
           f"--allow-principal User:{user} {operation}" in failed[check]
    if user == "fw-noread":
        assert ("SKIP", "request-log", "fw.request-log not read: see its acl line") in lines
    assert len(failed) == 1, failed


def test_a_stale_request_log(cluster, capsys, tmp_path):
    args = job_args(cluster)
    args[args.index("--request-log-topic") + 1] = TOPICS["stale"]
    rc, lines = doctor(capsys, tmp_path, args)
    failed = only(lines, "FAIL")
    assert rc == 1 and set(failed) == {"request-log age"}, lines
    assert "its newest record is 2.0 h old" in failed["request-log age"]
    assert "kafka.request.logger must be at DEBUG" in failed["request-log age"]


def test_undecodable_lines(cluster, capsys, tmp_path):
    args = job_args(cluster)
    args[args.index("--request-log-topic") + 1] = TOPICS["garbled"]
    rc, lines = doctor(capsys, tmp_path, args)
    failed = only(lines, "FAIL")
    assert rc == 1 and set(failed) == {"request-log lines"}, lines
    text = failed["request-log lines"]
    assert re.search(r"^0 of the newest \d+ lines decode \(0\.0%\)", text)
    assert "BAD_JSON" in text and "no JSON envelope" in text


def test_local_preconditions(cluster, capsys, tmp_path, monkeypatch):
    """An unreachable registry, an unwritable checkpoint, a taken port, an unknown variable: all
    in one run (they are checked independently of one another and of Kafka)."""
    registry = f"http://127.0.0.1:{free_port('127.0.0.1')}"
    monkeypatch.setenv("FENCEWATCH_STREAMING__SCHEMA_REGISTRY__URL", registry)
    monkeypatch.setenv("FENCEWATCH_STREAMING__BOOTSTRAP_SERVER", "typo:9092")
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        args = job_args(cluster)
        args[args.index("--metrics-port") + 1] = str(taken.getsockname()[1])
        rc, lines = doctor(capsys, tmp_path, [*args, "--checkpoint", str(blocker / "cp")])
    failed = only(lines, "FAIL")
    assert rc == 1 and set(failed) == {"schema registry", "checkpoint", "metrics port", "environment"}, lines
    assert failed["schema registry"].startswith(f"{registry} does not answer")
    assert f"{blocker} is not a folder" in failed["checkpoint"]
    assert "Address already in use" in failed["metrics port"] and "--metrics-port" in failed["metrics port"]
    assert failed["environment"] == ("FENCEWATCH_STREAMING__BOOTSTRAP_SERVER sets nothing (no setting by that name) "
                                     "Fix: use FENCEWATCH_STREAMING__BOOTSTRAP_SERVERS")
    assert "alerts as Avro (a Schema Registry is set)" in only(lines, "OK")["config"]


def test_broker_policy_and_config_refusals(cluster, capsys, tmp_path):
    rc, lines = doctor(capsys, tmp_path, [*job_args(cluster), "--broker-policy", "kip1251"])
    assert rc == 0 and "--broker-policy strict" in only(lines, "WARN")["broker_policy"], lines
    rc, lines = doctor(capsys, tmp_path, [*job_args(cluster), "--alerts-format", "avro"])
    assert rc == 1 and "no Schema Registry is configured" in only(lines, "FAIL")["config"], lines
    assert ("SKIP", "kafka", "not checked: the configuration does not load") in lines


@pytest.mark.slow
def test_the_release_each_version_runs_and_the_policy_it_wants(kafka_broker_each_version, capsys, tmp_path):
    """4.2 vs 4.3 vs 4.4 from ApiVersions alone (their OffsetCommit and ConsumerGroupHeartbeat
    versions are the same), and the broker_policy each judges with (no ACLs on these brokers)."""
    broker = kafka_broker_each_version
    release = broker.version.rsplit(".", 1)[0]
    _, lines = doctor(capsys, tmp_path, ["--bootstrap-servers", broker.bootstrap, "--metrics-port", "0",
                                          "--broker-policy", "strict"])
    assert only(lines, "OK")["brokers"].startswith(f"Apache Kafka {release} on broker(s) 1"), lines
    if release == "4.2":
        assert only(lines, "OK")["broker_policy"] == "strict, as the brokers (4.2) judge"
    else:
        assert "Fix: --broker-policy kip1251" in only(lines, "WARN")["broker_policy"]

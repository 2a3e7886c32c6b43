"""``fencewatch doctor``'s parts that need no broker: the ACL list against docs/deploy.md, the
ApiVersions answer and the release it names, unknown ``FENCEWATCH_*`` variables, librdkafka's
connection errors, the checkpoint and port checks, and the request-log line sample.
The same checks against a real broker with ACLs: ``test_doctor.py``."""
from __future__ import annotations

import re
import socket
import struct
from dataclasses import replace
from pathlib import Path

import pytest

from fencewatch.streaming.config import settings as cfgmod
from fencewatch.streaming.runtime.access import ALL, CLUSTER, SOURCE_GROUP_PREFIX, job_needs

ROOT = Path(__file__).resolve().parents[2]
WORDS = {"Read": "READ", "Write": "WRITE", "Describe": "DESCRIBE", "DescribeConfigs": "DESCRIBE_CONFIGS"}


def every_source() -> cfgmod.Config:
    return cfgmod.load_config(environ={}, overrides={
        "streaming": {"source": "events,consumer-offsets,request-log"},
        "sinks": {"verdicts_topic": "fencewatch.verdicts"}})


def deploy_md_job_acls() -> set[tuple]:
    """The job's rows of docs/deploy.md's ACL table as (resource, name, operation, prefixed)."""
    text = (ROOT / "docs" / "deploy.md").read_text()
    table = text[text.index("## Kafka ACLs"):text.index("## Managed Kafka")]
    rows = set()
    for line in table.splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if len(cells) != 4 or cells[0] != "job" or cells[2] == "none":
            continue
        resource = cells[1].split()[0].rstrip("s")
        names = re.findall(r"`([^`]+)`", cells[1]) or [CLUSTER]
        for name in names:
            for op in cells[2].split(", "):
                rows.add((resource, name, WORDS[op], "(prefixed)" in cells[1]))
    return rows


def test_deploy_md_lists_exactly_the_acls_the_doctor_checks():
    needs = {(n.resource, n.name, op, n.prefixed) for n in job_needs(every_source()) for op in n.operations}
    assert deploy_md_job_acls() == needs


def test_the_needs_follow_the_configuration():
    events = job_needs(cfgmod.load_config(environ={}))
    topics = {n.name: n.operations for n in events if n.resource == "topic"}
    assert topics == {"fencewatch.heartbeats": ("READ",), "fencewatch.offsets": ("READ",),
                      "fencewatch.alerts": ("WRITE", "READ"), "fencewatch.dlq": ("WRITE", "READ")}
    with_ids = cfgmod.load_config(environ={}, overrides={"streaming": {"source": "request-log",
                                                                       "topic_ids_file": "ids.json"}})
    assert ALL not in {n.name for n in job_needs(with_ids) if n.resource == "topic"}
    own_group = cfgmod.load_config(environ={}, overrides={"streaming": {"kafka": {"group.id": "team-a"}}})
    (source,) = [n for n in job_needs(own_group) if n.resource == "group" and n.name == "team-a"]
    assert not source.prefixed and source.required
    assert [n for n in job_needs(every_source()) if not n.required] == [
        n for n in job_needs(every_source()) if n.resource == "cluster" or n.name == ALL and n.resource == "group"]


def test_the_group_ids_are_the_ones_the_consumers_carry():
    from fencewatch.sinks.kafka import READBACK_GROUP
    from fencewatch.streaming.sources.kafka import GROUP_ID_PREFIX

    assert SOURCE_GROUP_PREFIX == GROUP_ID_PREFIX
    assert READBACK_GROUP in {n.name for n in job_needs(every_source()) if n.resource == "group"}


# --------------------------------------------------------------------------- ApiVersions


def _compact(s: str) -> bytes:
    from fencewatch.streaming.sources.api_versions import _uvarint

    return _uvarint(len(s) + 1) + s.encode()


def _answer_v3(apis: dict, supported: dict, finalized: dict) -> bytes:
    """An ApiVersions v3 answer body, as Kafka's message spec lays it out."""
    from fencewatch.streaming.sources.api_versions import _uvarint

    body = struct.pack(">h", 0) + _uvarint(len(apis) + 1)
    for key, (lo, hi) in apis.items():
        body += struct.pack(">hhh", key, lo, hi) + b"\x00"
    body += struct.pack(">i", 0)
    sup = _uvarint(len(supported) + 1) + b"".join(_compact(n) + struct.pack(">hh", lo, hi) + b"\x00"
                                                  for n, (lo, hi) in supported.items())
    fin = _uvarint(len(finalized) + 1) + b"".join(_compact(n) + struct.pack(">hh", lvl, lvl) + b"\x00"
                                                  for n, lvl in finalized.items())
    epoch = struct.pack(">q", 7)
    tags = [(0, sup), (1, epoch), (2, fin)]
    return body + _uvarint(len(tags)) + b"".join(_uvarint(t) + _uvarint(len(v)) + v for t, v in tags)


@pytest.mark.parametrize("level, release", [(29, "4.2"), (30, "4.3"), (33, "4.4"), (34, "newer than 4.4"),
                                            (27, "4.1"), (21, "3.9"), (15, "3.7")])
def test_the_release_comes_from_the_highest_metadata_version(level, release):
    from fencewatch.streaming.sources.api_versions import kafka_release, parse_answer

    info = parse_answer(_answer_v3({8: (2, 10), 68: (0, 1)}, {"metadata.version": (7, level)},
                                   {"metadata.version": level, "group.version": 1}))
    assert info.apis == {8: (2, 10), 68: (0, 1)} and info.max_version(68) == 1
    assert info.finalized_features == {"metadata.version": level, "group.version": 1}
    assert kafka_release(info) == release


def test_an_old_broker_answers_in_v0_and_names_no_release():
    from fencewatch.streaming.sources.api_versions import kafka_release, parse_answer, release_at_least

    body = struct.pack(">hi", 35, 2) + struct.pack(">hhh", 8, 0, 8) + struct.pack(">hhh", 18, 0, 2)
    info = parse_answer(body)
    assert info.apis == {8: (0, 8), 18: (0, 2)} and kafka_release(info) is None
    assert release_at_least("4.4", "4.3") and not release_at_least("4.2", "4.3")
    assert release_at_least("newer than 4.4", "4.3") and not release_at_least(None, "4.3")


# --------------------------------------------------------------------------- environment


@pytest.mark.parametrize("name, nearest, fatal", [
    ("FENCEWATCH_STREAMING__BOOTSTRAP_SERVER", "FENCEWATCH_STREAMING__BOOTSTRAP_SERVERS", True),
    ("FENCEWATCH_STREAMING_BOOTSTRAP_SERVERS", "FENCEWATCH_STREAMING__BOOTSTRAP_SERVERS", True),
    ("FENCEWATCH_STREAMNG__SOURCE", "FENCEWATCH_STREAMING__SOURCE", True),
    ("FENCEWATCH_SINK__ALERTS_TOPIC", "FENCEWATCH_SINKS__ALERTS_TOPIC", True),
    ("FENCEWATCH_STREAMING__KAFKA_SASL_PASSWORD", "FENCEWATCH_STREAMING__KAFKA__SASL_PASSWORD", True),
    ("FENCEWATCH_SINKS__METRICS__PORT", "FENCEWATCH_SINKS__METRICS_PORT", True),
    ("FENCEWATCH_STATE__WARMUP", "FENCEWATCH_STATE__WARMUP_MS", True),
    ("FENCEWATCH_NOTHING_LIKE_IT", None, True),
    ("FENCEWATCH_BOOTSTRAP_SERVERS", "FENCEWATCH_STREAMING__BOOTSTRAP_SERVERS", False),  # the shipper's
    ("FENCEWATCH_GRAFANA_URL", "FENCEWATCH_SINKS__GRAFANA_URL", False),  # deprecated
])
def test_a_variable_that_sets_nothing_is_named_with_the_nearest_setting(name, nearest, fatal):
    from fencewatch.streaming.config.env_check import env_problems

    (problem,) = env_problems({name: "x"})
    assert (problem.name, problem.nearest, problem.fatal) == (name, nearest, fatal)
    # and the configuration indeed ignores it (the environment layer is lenient)
    assert cfgmod.load_config(environ={name: "x"}) == cfgmod.Config()


def test_settings_and_other_parts_variables_are_no_problem():
    from fencewatch.streaming.config.env_check import env_problems

    env = {"FENCEWATCH_STREAMING__BOOTSTRAP_SERVERS": "b:9092", "FENCEWATCH_STREAMING__KAFKA__SASL_PASSWORD": "pw",
           "FENCEWATCH_STREAMING__SPARK_CONF": '{"spark.driver.memory": "2g"}', "FENCEWATCH_WORKER_TRIM": "0",
           "FENCEWATCH_JARS_DIR": "/opt/jars", "PATH": "/bin"}
    assert env_problems(env) == []


# --------------------------------------------------------------------------- connection errors


@pytest.mark.parametrize("errors, logs, says, fix", [
    ([("_AUTHENTICATION", "sasl_ssl://b:9096/bootstrap: SASL authentication error: Authentication failed during "
      "authentication due to invalid credentials with SASL mechanism SCRAM-SHA-512 (after 3ms in state AUTH_REQ)"),
      ("_ALL_BROKERS_DOWN", "1/1 brokers are down")], [], "wrong user name or password", "sasl.password"),
    ([("_AUTHENTICATION", "sasl_ssl://b:9096/bootstrap: SASL PLAIN mechanism handshake failed: Broker: Unsupported "
      "SASL mechanism: broker's supported mechanisms: SCRAM-SHA-256,SCRAM-SHA-512 (after 3ms)")], [],
     "they offer SCRAM-SHA-256,SCRAM-SHA-512", "set sasl.mechanism"),
    ([("_RESOLVE", "b:9092/bootstrap: Failed to resolve 'b:9092': Name or service not known")], [],
     "does not resolve", "bootstrap_servers"),
    ([("_TRANSPORT", "ssl://b:9092/bootstrap: SSL handshake failed: Disconnected: SSL connection closed by peer: "
      "connecting to a PLAINTEXT broker listener? (after 107ms in state SSL_HANDSHAKE)")], [],
     "TLS handshake failed", "security.protocol"),
    ([("_TRANSPORT", "b:9092/bootstrap: Connect to ipv4#10.0.0.1:9092 failed: Connection refused")], [],
     "unreachable", "that the brokers run"),
    ([("_ALL_BROKERS_DOWN", "0/2 brokers are down")],
     ["FAIL [rdkafka#producer-6] [thrd:b:9092/bootstrap]: b:9092/bootstrap: Disconnected: connection closed by "
      "peer: receive 0 after POLLIN (after 1ms in state UP)"], "closed the connection", "another security.protocol"),
])
def test_connection_errors_are_explained(errors, logs, says, fix):
    from fencewatch.streaming.commands.doctor_kafka import explain_connection

    text, advice = explain_connection(errors, {"security.protocol": "PLAINTEXT"}, logs)
    assert says in text and fix in advice, (text, advice)
    assert "bootstrap:" not in text  # librdkafka's broker prefix is cut


# --------------------------------------------------------------------------- local checks


def test_checkpoint_writable_or_why_not(tmp_path):
    from fencewatch.streaming.runtime.checkpoint import is_local, writable_problem

    assert writable_problem(str(tmp_path / "not" / "yet" / "there")) is None  # the job creates it
    assert writable_problem(f"file://{tmp_path}/cp") is None
    assert list(tmp_path.iterdir()) == []  # the probe file is gone
    blocker = tmp_path / "file"
    blocker.write_text("x")
    assert writable_problem(str(blocker / "cp")) == f"{blocker} is not a folder"
    assert not is_local("s3a://bucket/cp") and not is_local("hdfs://nn/cp")


def test_a_taken_port_is_named():
    from fencewatch.sinks.exposition import port_problem

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert port_problem("127.0.0.1", port) == f"127.0.0.1:{port}: Address already in use"
    assert port_problem("127.0.0.1", port) is None
    assert port_problem("127.0.0.1", 0) is None


def test_line_sample_counts_what_the_decoder_reads():
    from fencewatch.streaming.ingest.line_sample import judge_lines

    real = [line for line in (ROOT / "tests/fixtures/kafka/4.3.1/request-log.txt").read_bytes().split(b"\n") if line][:50]
    other_api = real[0].replace(b'"requestApiKey":', b'"requestApiKey":1,"x":', 1)
    lines = [*real, b'{"log": "' + real[1].replace(b'"', b'\\"') + b'"}', real[2][:90], b"rsyslogd: started", other_api]
    sample = judge_lines(lines, [str(i) for i in range(len(lines))])
    assert (sample.lines, sample.judged, sample.other_apis, sample.not_request_log) == (54, 50, 1, 1)
    assert sum(sample.broken.values()) == 2 and sample.readable == 51
    assert sample.share == pytest.approx(51 / 54)
    assert sample.example is not None and sample.example[0] in ("50", "51")
    clean = judge_lines(real, [str(i) for i in range(len(real))], topic_ids={})
    assert clean.share == 1.0 and clean.unresolved_topic_ids > 0  # v10 commits and heartbeats name topics by id


@pytest.mark.parametrize("releases, consumer, streams, rows", [
    (["4.2"], "strict", "kip1251", [("OK", "broker_policy")]),
    (["4.3"], "strict", "kip1251", [("WARN", "broker_policy")]),
    (["4.2"], "strict", "strict", [("OK", "broker_policy"), ("WARN", "streams_broker_policy")]),
    (["4.1"], "strict", "kip1251", [("OK", "broker_policy"), ("WARN", "streams_broker_policy")]),
    (["newer than 4.4"], "kip1251", "kip1251", [("OK", "broker_policy")]),
])
def test_the_policies_follow_the_release_by_group_type(releases, consumer, streams, rows):
    """``broker_policy`` is the consumer groups' (strict to 4.2, kip1251 from 4.3),
    ``streams_broker_policy`` the streams groups' (kip1251 from 4.2: fencing.KIP1251_SINCE)."""
    import io

    from fencewatch.streaming.commands.doctor import Report
    from fencewatch.streaming.commands.doctor_kafka import check_policy
    from fencewatch.streaming.config import settings as cfgmod

    cfg = cfgmod.load_config(overrides={"state": {"broker_policy": consumer, "streams_broker_policy": streams}})
    report = Report(out=io.StringIO())
    check_policy(report, cfg, {"releases": {str(i): r for i, r in enumerate(releases)}})
    assert [(s, c) for s, c, _ in report.lines] == rows, report.lines

"""``fencewatch report`` reading the job's output topics (verdicts as JSON lines, alerts in Avro
as the job writes them, one in JSON, one undecodable) from the test broker: the same numbers as
from the files, progress on stderr, the bad record counted."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from fencewatch.sinks.kafka import encode_alert_avro

FENCEWATCH = str(Path(sys.executable).with_name("fencewatch"))
pytestmark = pytest.mark.broker


def run(*args: str) -> subprocess.CompletedProcess:
    done = subprocess.run([FENCEWATCH, *args], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def produce(bootstrap: str, topic: str, partitions: list[list[bytes]]) -> None:
    """Each partition's records in order; the last one alone after a flush, so that the broker's
    end offset counts every record (the test broker reports a batch's base offset + 1)."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for p, values in enumerate(partitions):
        for value in values[:-1]:
            producer.produce(topic, value, partition=p)
        producer.flush(30)
    for p, values in enumerate(partitions):
        producer.produce(topic, values[-1], partition=p)
        producer.flush(30)


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("report-topics")
    # ~4k verdicts and ~30 alerts (unclean elections truncate logs under committed offsets)
    run("simulate", "--profile", "mixed", "--duration", "10m", "--groups", "3", "--seed", "2",
        "--set", "eos_fraction=0", "--set", "unclean_elections_per_hour=60", "--out", str(d / "trace.jsonl"))
    run("replay", str(d / "trace.jsonl"), "--out", str(d / "verdicts.jsonl"), "--alerts", str(d / "alerts.jsonl"))
    return d


def test_topics_give_the_same_report_as_files(broker, topic_factory, files, tmp_path):
    lines = (files / "verdicts.jsonl").read_bytes().splitlines()
    alerts = [json.loads(x) for x in (files / "alerts.jsonl").read_text().splitlines()]
    assert len(lines) > 1000 and alerts
    # a request's lines stay together in one partition, requests spread over three
    parts: list[list[bytes]] = [[], [], []]
    requests: dict[str, int] = {}
    for line in lines:
        event_id = json.loads(line)["event_id"]
        parts[requests.setdefault(event_id, len(requests) % 3)].append(line)
    verdicts_topic, alerts_topic = topic_factory(partitions=3, prefix="verdicts"), topic_factory(prefix="alerts")
    produce(broker, verdicts_topic, parts)
    values = [encode_alert_avro(a) for a in alerts[1:]] + [json.dumps(alerts[0]).encode(), b"\x00\x01not avro"]
    produce(broker, alerts_topic, [values])

    done = run("report", "--bootstrap-servers", broker, "--verdicts-topic", verdicts_topic,
               "--alerts-topic", alerts_topic, "--out", str(tmp_path / "t.html"))
    from_topics = json.loads((tmp_path / "t.json").read_text())
    run("report", str(files / "verdicts.jsonl"), "--alerts", str(files / "alerts.jsonl"),
        "--out", str(tmp_path / "f.html"))
    from_files = json.loads((tmp_path / "f.json").read_text())
    for key in ("totals", "groups", "series", "expiry", "truncation", "top_members", "range"):
        assert from_topics[key] == from_files[key], key
    inputs = {i["name"]: i for i in from_topics["inputs"]}
    assert inputs[verdicts_topic]["records"] == len(lines) and inputs[verdicts_topic]["bad"] == 0
    assert inputs[alerts_topic]["records"] == len(alerts) + 1 and inputs[alerts_topic]["bad"] == 1
    codes = [x["code"] for x in from_topics["limits"]]
    assert "TOPIC_SNAPSHOT" in codes and "BAD_RECORDS" in codes
    assert f"report: reading {verdicts_topic}: 3 partition(s), {len(lines):,} records" in done.stderr
    assert f"report: read {len(lines):,} records from topic {verdicts_topic}" in done.stderr
    assert "fencewatch report:" in done.stdout


def test_a_missing_topic_is_a_clear_error(broker, tmp_path):
    done = subprocess.run([FENCEWATCH, "report", "--bootstrap-servers", broker, "--verdicts-topic",
                           "no-such-topic-for-report", "--out", str(tmp_path / "x.html")],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert "no-such-topic-for-report" in done.stderr

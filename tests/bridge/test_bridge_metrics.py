"""The bridge's own metrics and probes after a short live run on the test broker.

Each run reads a uuid-named source topic while its exporter serves on a free port; the test
scrapes /metrics, /healthz and /readyz over HTTP as Prometheus and a kubelet would, while the
bridge runs and after it stopped.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import struct
import threading
import time
import urllib.error
import urllib.request
import uuid

import pytest

from bridge_encoder import encode_record
from fencewatch.sinks.bridge_metrics import BridgeMetrics
from fencewatch.sinks.health import HealthConfig
from fencewatch.streaming.commands.bridge import _bridge_metrics, register
from fencewatch.streaming.ingest.request_log import RequestLogBridge
from fencewatch.streaming.commands.bridge_loop import run_bridge, run_request_log_bridge
from request_log_lines import heartbeat, kafka_id, log_line, offset_commit

HEALTH = HealthConfig(trigger_s=0.5, ready_triggers=20)


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as res:
            return res.status, res.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


CLUSTER = {"cluster": "default"}  # the bridge's --cluster, on every series of its own


def sample(text: str, name: str, **labels: str) -> float | None:
    """The value of one series in exposition text (labels in any order), None when absent; a
    ``fencewatch_bridge_*`` series has the ``cluster`` label of :data:`CLUSTER` unless given."""
    if name.startswith("fencewatch_bridge_"):
        labels = {**CLUSTER, **labels}
    for line in text.splitlines():
        m = re.fullmatch(rf"{name}(?:\{{(.*)\}})? (\S+)", line)
        if m and dict(re.findall(r'(\w+)="([^"]*)"', m.group(1) or "")) == labels:
            return float(m.group(2))
    return None


class Running:
    """A live loop in a thread, stopped by the test (as SIGTERM stops the command)."""

    def __init__(self, target, *args, **kwargs) -> None:
        self.stop = threading.Event()
        self.result: list = []
        self.thread = threading.Thread(target=lambda: self.result.append(
            target(*args, should_stop=self.stop.is_set, **kwargs)), daemon=True)
        self.thread.start()

    def end(self) -> int:
        self.stop.set()
        self.thread.join(60)
        return self.result[0]


def wait_metric(base: str, name: str, at_least: float, timeout_s: float = 60, **labels: str) -> str:
    deadline = time.monotonic() + timeout_s
    while True:
        _, text = get(base + "/metrics")
        value = sample(text, name, **labels)
        if (value is not None and value >= at_least) or time.monotonic() > deadline:
            return text
        time.sleep(0.2)


@pytest.mark.broker
def test_request_log_bridge_metrics_and_probes(broker, topic_factory):
    from confluent_kafka import Producer

    source, heartbeats, offsets = topic_factory(1, "reqlog"), topic_factory(1, "hb"), topic_factory(1, "off")
    data_id = kafka_id(uuid.uuid4())
    lines = [
        log_line(heartbeat(1, "g", "m-1", 0, response_epoch=3, assignment=[(data_id, [0])], owned=[])),
        log_line(heartbeat(1, "g", "m-1", 3, error=16)),  # NOT_COORDINATOR: no event, counted
        "[2026-11-20 09:00:01,000] DEBUG Completed request:{\"requestHeader\": (kafka.request.logger)",  # broken
        log_line(offset_commit(9, "g", 3, "m-1", [("orders", [(0, 40, 1)])], codes={("orders", 0): 113})),
    ]
    p = Producer({"bootstrap.servers": broker})
    for line in lines:
        p.produce(source, value=line.encode(), partition=0)
    p.flush(30)
    p.produce(source, value=b"not a request-log line", partition=0)  # Tansu: a last lone batch
    assert p.flush(30) == 0

    metrics = BridgeMetrics("request_log", port=0, health=HEALTH)
    host, port = metrics.start()
    base = f"http://{host}:{port}"
    started = time.time()
    try:
        run = Running(run_request_log_bridge, {"bootstrap.servers": broker, "group.id": f"b-{source}"}, source,
                      RequestLogBridge(), heartbeats_topic=heartbeats, offsets_topic=offsets, metrics=metrics)
        text = wait_metric(base, "fencewatch_bridge_records_total", 5, input="request_log")
        text = wait_metric(base, "fencewatch_bridge_source_lag_records", 0)  # the lag gauge is set
        assert sample(text, "fencewatch_bridge_records_total", input="request_log") == 5
        assert sample(text, "fencewatch_bridge_events_total", type="heartbeat") == 1
        assert sample(text, "fencewatch_bridge_events_total", type="member_assignment") == 1
        assert sample(text, "fencewatch_bridge_events_total", type="offset_commit") == 1
        assert sample(text, "fencewatch_bridge_undecodable_records_total", reason="BAD_JSON") == 1
        assert sample(text, "fencewatch_bridge_undecodable_records_total", reason="MALFORMED_KEY") == 0
        assert sample(text, "fencewatch_bridge_coordinator_routing_answers_total",
                      api="ConsumerGroupHeartbeat", error="NOT_COORDINATOR") == 1
        assert sample(text, "fencewatch_bridge_coordinator_routing_answers_total",
                      api="OffsetCommit", error="NOT_COORDINATOR") == 0
        assert sample(text, "fencewatch_bridge_source_lag_records") == 0
        assert started <= sample(text, "fencewatch_bridge_last_produce_timestamp_seconds") <= time.time()
        assert sample(text, "fencewatch_bridge_up") == 1
        assert sample(text, "fencewatch_bridge_delivery_failures_total") == 0
        assert "fencewatch_build_info{" in text and "fencewatch_batches_total" not in text  # the bridge's own
        code, body = get(base + "/healthz")
        assert (code, json.loads(body)["status"]) == (200, "ok")
        code, body = get(base + "/readyz")
        assert (code, json.loads(body)["status"]) == (200, "ready"), body
        assert run.end() == 0
        code, body = get(base + "/healthz")  # the loop has ended: not live
        assert (code, json.loads(body)["status"]) == (503, "stopped")
        assert sample(get(base + "/metrics")[1], "fencewatch_bridge_up") == 0
    finally:
        metrics.close()


def topic_id_of(bootstrap: str, topic: str) -> bytes:
    from confluent_kafka import TopicCollection
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})  # held until the answer is in
    tid = admin.describe_topics(TopicCollection([topic]))[topic].result(timeout=30).topic_id
    return struct.pack(">qq", tid.get_most_significant_bits(), tid.get_least_significant_bits())


@pytest.mark.broker
def test_consumer_offsets_bridge_metrics(broker, topic_factory):
    from confluent_kafka import Producer

    source, heartbeats, offsets = topic_factory(1, "coord"), topic_factory(1, "hb"), topic_factory(1, "off")
    data = topic_factory(1, "orders")
    data_id = topic_id_of(broker, data)
    ts = 1_700_000_000_000
    records = [encode_record(3, {"groupId": "app"}, 0, {"epoch": 1}),
               encode_record(1, {"group": "app", "topic": data, "partition": 0}, 4,
                             {"offset": 3, "leaderEpoch": 0, "metadata": "", "commitTimestamp": ts,
                              "topicId": data_id}),
               (struct.pack(">h", 1) + b"\x00", b"\x00\x03"),  # a key cut short: undecodable
               encode_record(1, {"group": "old", "topic": data, "partition": 0})]  # a tombstone: offset_deleted
    p = Producer({"bootstrap.servers": broker})
    for key, value in records[:-1]:
        p.produce(source, key=key, value=value, timestamp=ts, partition=0)
    p.flush(30)
    key, value = records[-1]
    p.produce(source, key=key, value=value, timestamp=ts, partition=0)  # Tansu: a last lone batch
    assert p.flush(30) == 0

    metrics = BridgeMetrics("consumer_offsets", port=0, health=HEALTH, cluster="eu-1")
    host, port = metrics.start()
    base = f"http://{host}:{port}"
    try:
        run = Running(run_bridge, {"bootstrap.servers": broker}, source_topic=source, heartbeats_topic=heartbeats,
                      offsets_topic=offsets, partition_poll_interval=0, metrics=metrics)
        text = wait_metric(base, "fencewatch_bridge_records_total", 4, input="consumer_offsets", cluster="eu-1")
        text = wait_metric(base, "fencewatch_bridge_source_lag_records", 0, cluster="eu-1")
        assert sample(text, "fencewatch_bridge_records_total", input="consumer_offsets") is None  # not "default"
        assert sample(text, "fencewatch_bridge_records_total", input="consumer_offsets", cluster="eu-1") == 4
        assert sample(text, "fencewatch_bridge_undecodable_records_total", reason="MALFORMED_KEY", cluster="eu-1") == 1
        assert sample(text, "fencewatch_bridge_events_total", type="offset_committed", cluster="eu-1") == 1
        assert sample(text, "fencewatch_bridge_events_total", type="offset_deleted", cluster="eu-1") == 1
        assert sample(text, "fencewatch_bridge_source_lag_records", cluster="eu-1") == 0
        assert get(base + "/readyz")[0] == 200
        assert run.end() == 0
    finally:
        metrics.close()


def test_the_command_serves_on_metrics_port_else_the_environments_else_9465(monkeypatch):
    from fencewatch.streaming.config import settings as cfgmod

    parser = argparse.ArgumentParser()
    register(parser.add_subparsers())

    def port(argv, env=None):
        for k in ("FENCEWATCH_SINKS__METRICS_PORT", "FENCEWATCH_SINKS__METRICS_HOST"):
            monkeypatch.delenv(k, raising=False)
        for k, v in (env or {}).items():
            monkeypatch.setenv(k, v)
        args = parser.parse_args(["bridge", "--bootstrap-servers", "127.0.0.1:1", *argv])
        cfg = cfgmod.load_config(overrides={"streaming": {"bootstrap_servers": "127.0.0.1:1"}})
        m = _bridge_metrics(cfg, args)
        return m.host, m.port, m.source, m.health.config.trigger_s

    assert _bridge_metrics(cfgmod.load_config(), parser.parse_args(["bridge", "--cluster", "eu-1"])).cluster == "eu-1"

    assert port([]) == ("127.0.0.1", 9465, "consumer_offsets", 0.5)
    assert port(["--metrics-port", "0", "--request-log-topic", "t"])[1:3] == (0, "request_log")
    assert port([], {"FENCEWATCH_SINKS__METRICS_PORT": "9500", "FENCEWATCH_SINKS__METRICS_HOST": "0.0.0.0"})[:2] == \
        ("0.0.0.0", 9500)
    assert port(["--metrics-port", "9501"], {"FENCEWATCH_SINKS__METRICS_PORT": "9500"})[1] == 9501

"""Fixtures for the dashboard / alert-rule tests: a metrics source and a real Prometheus.

- ``metrics_target`` (module): a live fencewatch metrics endpoint to scrape. Today it is
  a :class:`MetricsSink` fed by :class:`SyntheticFeed` (plain verdict/alert/status records
  shaped like the streaming job's, a few clusters and groups, one batch every 0.25 s).
  To test against the real job instead, override this fixture with one that starts
  ``fencewatch demo`` and returns its address; nothing else changes.
- ``broker_jmx_target`` (module): a STAND-IN for the brokers' Prometheus JMX exporter (a
  Java agent that needs a Kafka broker; neither runs here): a prometheus_client endpoint
  serving ``kafka_network_requestmetrics_errors_total{request,error}`` exactly as the rule in
  ``deploy/request-log/jmx-exporter-kafka-errors.yml`` names the broker's ErrorsPerSec meters,
  for two brokers, so the "Brokers (no tap)" panels and rules run against real Prometheus.
- ``prometheus`` (module): Debian's ``prometheus`` binary on a free loopback port,
  scraping ``metrics_target`` (job ``fencewatch``) and ``broker_jmx_target`` (job ``kafka``)
  every second with the shipped alert rules loaded (evaluated every second). Fails, not skips, when the binary is missing:
  ``make test`` installs it (``make system-deps``).
"""

from __future__ import annotations

import json
import random
import shutil
import socket
import subprocess
import threading
import time
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import pytest

from fencewatch.sinks.metrics import MetricsConfig
from fencewatch.sinks.prometheus import MetricsSink

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "dashboards" / "prometheus" / "rules" / "fencewatch.rules.yml"


@dataclass(frozen=True)
class MetricsTarget:
    """Where to scrape, and a group that has every kind of data (for the drill-down)."""

    address: str
    focus_cluster: str
    focus_group: str


@dataclass(frozen=True)
class PrometheusServer:
    url: str
    log: Path = field(repr=False)

    def api(self, path: str, **params: str | list[str]) -> dict:
        query = urllib.parse.urlencode(params, doseq=True)
        with urllib.request.urlopen(f"{self.url}{path}?{query}", timeout=10) as response:
            body = json.load(response)
        assert body["status"] == "success", body
        return body["data"]

    def query(self, expr: str) -> list[dict]:
        return self.api("/api/v1/query", query=expr)["result"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class SyntheticFeed:
    """Micro-batches shaped like the streaming job's, with every verdict class and alert kind
    the dashboards chart: zombies, avoidable aborts, unsafe accepts, divergence, truncation,
    a fencing spike, an empty group whose offsets expire, dead letters."""

    GROUPS = (
        # cluster, group, protocol, state
        ("east", "orders", "consumer", "Stable"),
        ("east", "payments", "consumer", "Reconciling"),
        ("east", "billing", "consumer", "Empty"),
        ("west", "audit", "classic", "Stable"),
    )

    def __init__(self, seed: int = 7) -> None:
        self.rng = random.Random(seed)
        self.step = 0

    def verdict(self, cluster, group, kind, cls, strict="NONE", kip1251="NONE", broker_error=None, **extra):
        self.step_event += 1
        return {
            "event_id": f"{group}/{self.step}/{self.step_event}", "ts": int(time.time() * 1000), "cluster": cluster,
            "group_id": group, "member_id": "m", "kind": kind, "client_epoch": 3, "broker_epoch": 4, "topic": "t",
            "partition": 0, "assignment_epoch": 3, "revocation_epoch": 0, "strict": strict,
            "member_revocation": strict, "assignment_epoch_check": kip1251, "kip1251": kip1251, "class": cls,
            "unsafe": False, "owner_member_id": None, "broker_error": broker_error, "model_agrees": None, **extra,
        }

    def batch(self) -> dict:
        self.step += 1
        self.step_event = 0
        step, rng = self.step, self.rng
        now_ms = int(time.time() * 1000)
        verdicts = []
        for _ in range(8):
            verdicts.append(self.verdict("east", "orders", "commit", "accepted", broker_error="NONE", model_agrees=True))
        verdicts.append(self.verdict("east", "orders", "commit", "avoidable", strict="STALE_MEMBER_EPOCH",
                                     broker_error="STALE_MEMBER_EPOCH", model_agrees=True))
        if step % 2 == 0:
            verdicts.append(self.verdict("east", "orders", "commit", "zombie", strict="STALE_MEMBER_EPOCH",
                                         kip1251="STALE_MEMBER_EPOCH", broker_error="STALE_MEMBER_EPOCH",
                                         owner_member_id="m2", model_agrees=True))
        for _ in range(3):
            verdicts.append(self.verdict("east", "payments", "txn_commit", "accepted"))
        verdicts.append(self.verdict("east", "payments", "txn_commit", "avoidable", strict="ILLEGAL_GENERATION",
                                     broker_error="ILLEGAL_GENERATION", model_agrees=True))
        if step % 3 == 0:
            verdicts.append(self.verdict("east", "payments", "txn_commit", "stale", strict="ILLEGAL_GENERATION",
                                         kip1251="ILLEGAL_GENERATION", broker_error="NONE", model_agrees=False))
            verdicts.append(self.verdict("east", "payments", "commit", "accepted", unsafe=True))
        verdicts.append(self.verdict("west", "audit", "commit", "accepted"))
        if step % 4 == 0:
            verdicts.append(self.verdict("west", "audit", "commit", "stale", strict="ILLEGAL_GENERATION",
                                         kip1251="ILLEGAL_GENERATION", broker_error="ILLEGAL_GENERATION"))
        alerts = []
        if step % 2 == 0:
            alerts.append({"alert_id": f"z{step}", "ts": now_ms, "cluster": "east", "group_id": "orders",
                           "kind": "ZOMBIE_COMMIT", "severity": "warning", "summary": "zombie", "details": {}})
        if step == 3:
            alerts.append({"alert_id": "spike", "ts": now_ms, "cluster": "east", "group_id": "orders",
                           "kind": "FENCING_SPIKE", "severity": "warning", "summary": "spike",
                           "details": {"status": "firing"}})
        if step % 5 == 0:
            alerts.append({"alert_id": f"t{step}", "ts": now_ms, "cluster": "east", "group_id": "payments",
                           "kind": "LOG_TRUNCATION", "severity": "critical", "summary": "truncated", "details": {}})
            alerts.append({"alert_id": f"o{step}", "ts": now_ms, "cluster": "west", "group_id": "audit",
                           "kind": "OFFSET_OUT_OF_RANGE", "severity": "warning", "summary": "oor", "details": {}})
        status = []
        for cluster, group, protocol, state in self.GROUPS:
            empty = state == "Empty"
            status.append({
                "cluster": cluster, "group_id": group, "protocol": protocol,
                "members": 0 if empty else 3 + step % 2, "partitions_held": 0 if empty else 12,
                "group_epoch": 10 + step // 4, "max_member_epoch": 10 + step // 4,
                "expiry_deadline_ms": now_ms + 50 * 60_000 if group in ("billing", "payments") else None,
                "rebalances_total": step // 4, "state": state,
            })
        events = {
            ("east", "orders", "heartbeat", "heartbeats"): 20,
            ("east", "orders", "member_assignment", "heartbeats"): 1 + step % 2,
            ("east", "orders", "offset_commit", "offsets"): 10,
            ("east", "payments", "txn_offset_commit", "offsets"): 5,
            ("east", "payments", "heartbeat", "heartbeats"): 8,
            ("east", "billing", "group_state", "heartbeats"): 1,
            ("west", "audit", "classic_join", "heartbeats"): 1,
            ("west", "audit", "offset_commit", "offsets"): 2,
            ("east", "", "partition_epochs", "offsets"): 1,
        }
        return {
            "batch_id": step,
            "verdicts": verdicts,
            "alerts": alerts,
            "group_status": status,
            "events": events,
            "heartbeat_errors": {("east", "orders", 110): step % 3},
            "dlq": {"MISSING_FIELD": 1} if step % 4 == 0 else {},
            "batch_duration_s": rng.uniform(0.1, 0.9),
            "decision_latencies_s": [rng.uniform(0.05, 3.0) for _ in verdicts],
            "input_lag_records": rng.randint(0, 500),
            "state_rows": 40 + step, "state_memory_bytes": rng.randint(1, 64) * 2**20,
            "last_event_ts_ms": now_ms - rng.randint(0, 2000),
        }


@pytest.fixture(scope="module")
def metrics_target() -> Iterator[MetricsTarget]:
    """A MetricsSink on a free loopback port, fed by SyntheticFeed until the module ends."""
    sink = MetricsSink(MetricsConfig(port=0))
    host, port = sink.start()
    feed = SyntheticFeed()
    stop = threading.Event()

    def run() -> None:
        while not stop.is_set():
            sink.add_batch(**feed.batch())
            stop.wait(0.25)

    thread = threading.Thread(target=run, name="synthetic-feed", daemon=True)
    thread.start()
    try:
        yield MetricsTarget(f"{host}:{port}", focus_cluster="east", focus_group="payments")
    finally:
        stop.set()
        thread.join(5)
        sink.close()


class BrokerErrorMeters:
    """Counters shaped like the JMX exporter's view of two brokers' ErrorsPerSec meters (stand-in)."""

    RATES = {  # (instance, request, error) -> per second; commits count partitions
        ("broker-1:7071", "OffsetCommit", "NONE"): 400.0,
        ("broker-1:7071", "OffsetCommit", "STALE_MEMBER_EPOCH"): 12.0,
        ("broker-1:7071", "TxnOffsetCommit", "NONE"): 50.0,
        ("broker-1:7071", "TxnOffsetCommit", "ILLEGAL_GENERATION"): 2.0,
        ("broker-1:7071", "ConsumerGroupHeartbeat", "NONE"): 80.0,
        ("broker-1:7071", "ConsumerGroupHeartbeat", "FENCED_MEMBER_EPOCH"): 0.5,
        ("broker-2:7071", "OffsetCommit", "NONE"): 300.0,
        ("broker-2:7071", "ConsumerGroupHeartbeat", "NONE"): 60.0,
        ("broker-2:7071", "ConsumerGroupHeartbeat", "FENCED_MEMBER_EPOCH"): 1.0,
    }

    def __init__(self) -> None:
        self.started = time.monotonic()

    def collect(self):
        from prometheus_client.core import CounterMetricFamily

        family = CounterMetricFamily("kafka_network_requestmetrics_errors", "ErrorsPerSec (stand-in)",
                                     labels=["broker", "request", "error"])
        elapsed = time.monotonic() - self.started
        for (instance, request, error), rate in self.RATES.items():
            family.add_metric([instance, request, error], rate * elapsed)
        yield family


@pytest.fixture(scope="module")
def broker_jmx_target() -> Iterator[str]:
    """Address of the stand-in JMX exporter (see the module docstring)."""
    from prometheus_client import CollectorRegistry, start_http_server

    registry = CollectorRegistry()
    registry.register(BrokerErrorMeters())
    server, thread = start_http_server(0, addr="127.0.0.1", registry=registry)
    try:
        yield f"127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


@pytest.fixture(scope="module")
def prometheus(metrics_target: MetricsTarget, broker_jmx_target: str,
               tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrometheusServer]:
    binary = shutil.which("prometheus")
    assert binary, "prometheus not found: install Debian's prometheus package (`make system-deps`)"
    workdir = tmp_path_factory.mktemp("prometheus")
    config = workdir / "prometheus.yml"
    config.write_text(
        "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
        f"rule_files:\n  - {RULES}\n"
        "scrape_configs:\n  - job_name: fencewatch\n    static_configs:\n"
        f"      - targets: ['{metrics_target.address}']\n"
        # one target stands in for every broker: its "broker" label becomes `instance`, as if scraped apart
        "  - job_name: kafka\n    static_configs:\n"
        f"      - targets: ['{broker_jmx_target}']\n"
        "    metric_relabel_configs:\n"
        "      - {source_labels: [broker], target_label: instance}\n"
        "      - {regex: broker, action: labeldrop}\n"
    )
    proc, server = launch_prometheus(binary, config, workdir)
    try:
        yield server
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def launch_prometheus(binary: str, config: Path, workdir: Path) -> tuple[subprocess.Popen, PrometheusServer]:
    """Start Debian's Prometheus on a free loopback port with this config; return once it is ready."""
    port = free_port()
    log = workdir / "prometheus.log"
    with log.open("w") as out:
        proc = subprocess.Popen(
            [binary, f"--config.file={config}", f"--web.listen-address=127.0.0.1:{port}",
             f"--storage.tsdb.path={workdir / 'data'}", "--log.level=warn"],
            stdout=out, stderr=subprocess.STDOUT,
        )
    server = PrometheusServer(f"http://127.0.0.1:{port}", log)
    deadline = time.monotonic() + 30
    while True:
        if proc.poll() is not None:
            raise AssertionError(f"prometheus exited ({proc.returncode}):\n{log.read_text()}")
        try:
            with urllib.request.urlopen(f"{server.url}/-/ready", timeout=2) as response:
                if response.status == 200:
                    return proc, server
        except OSError:
            pass
        if time.monotonic() >= deadline:
            proc.kill()
            raise AssertionError(f"prometheus not ready after 30 s:\n{log.read_text()}")
        time.sleep(0.2)

"""Several clusters in one Prometheus: two jobs (each its own exporter, as two ``fencewatch run``
with ``--cluster eu-1`` and ``--cluster us-2``) and their two bridges, scraped by a real
Prometheus. Each job judges a group named ``g`` of its own cluster; ``sum by (cluster, group)``,
as every shipped rule and panel aggregates, keeps the two groups apart.

The jobs' outputs are made as ``run --source request-log`` makes them, without Spark: the
request-log mapper with the job's ``streaming.cluster`` (``settings.job_cluster``), the rules
(``replay.judge_events``, the engine the Spark state function runs), then the job's exporter
(``MetricsSink``) fed the verdicts and event counts as the job's writer feeds it.
"""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
import urllib.request
from collections import Counter
from pathlib import Path

import pandas as pd
import pytest

from fencewatch.sinks.bridge_metrics import BridgeMetrics
from fencewatch.sinks.jsonl import alert_json, commit_verdicts_block
from fencewatch.sinks.metrics import MetricsConfig
from fencewatch.sinks.prometheus import MetricsSink
from fencewatch.streaming.config.settings import job_cluster, load_config
from fencewatch.streaming.runtime.replay import judge_events
from fencewatch.streaming.runtime.request_log_input import make_request_log_mapper

from .conftest import PrometheusServer, launch_prometheus

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bridge"))
from test_request_log_judged import ORDERS, scenario  # noqa: E402

# eu-1's job reads the whole scenario, us-2's its first three lines: the same group name, other counts
JOBS = {"eu-1": scenario(), "us-2": scenario()[:3]}


def job_batch(cluster_setting: str, lines: list[str]) -> dict:
    """One micro-batch of a ``run --source request-log --cluster <setting>`` job, for its exporter."""
    cfg = load_config(environ={"FENCEWATCH_STREAMING__CLUSTER": cluster_setting})
    frame = pd.DataFrame({"value": [x.encode() for x in lines], "topic": "rl", "partition": 0,
                          "offset": range(len(lines)), "record_ts": 5})
    (out,) = list(make_request_log_mapper({ORDERS: "orders"}, cluster=job_cluster(cfg.streaming))(iter([frame])))
    events = [json.loads(v) for v in out["value"]]
    result = judge_events(events)
    assert not result.errors, result.errors
    verdicts = [json.loads(x) for cv in result.commit_verdicts for x in commit_verdicts_block(cv).split("\n")]
    counts = Counter((e.get("cluster", "default"), e["group_id"], e["type"], "request_log") for e in events)
    return {"batch_id": 1, "verdicts": verdicts, "alerts": [json.loads(alert_json(a)) for a in result.alert_records],
            "events": dict(counts)}


def start_prometheus(workdir: Path, jobs: dict[str, list[str]]):
    binary = shutil.which("prometheus")
    assert binary, "prometheus not found: install Debian's prometheus package (`make system-deps`)"
    config = workdir / "prometheus.yml"
    config.write_text("global:\n  scrape_interval: 1s\nscrape_configs:\n" + "".join(
        f"  - job_name: {name}\n    static_configs:\n      - targets: {json.dumps(targets)}\n"
        for name, targets in jobs.items()))
    return launch_prometheus(binary, config, workdir)


def by_labels(result: list[dict], *names: str) -> dict[tuple, float]:
    return {tuple(r["metric"].get(n, "") for n in names): float(r["value"][1]) for r in result}


def wait_for(server: PrometheusServer, expr: str, names: tuple[str, ...], want: dict, timeout_s: float = 30):
    deadline = time.monotonic() + timeout_s
    while True:
        got = by_labels(server.query(expr), *names)
        if got == want or time.monotonic() > deadline:
            return got
        time.sleep(0.5)


@pytest.fixture
def two_clusters(tmp_path):
    batches = {c: job_batch(c, lines) for c, lines in JOBS.items()}
    sinks, bridges, targets = [], [], []
    try:
        for cluster, batch in batches.items():
            sink = MetricsSink(MetricsConfig(port=0))
            targets.append("%s:%d" % sink.start())
            sink.add_batch(**batch)
            sinks.append(sink)
            bridge = BridgeMetrics("request_log", port=0, cluster=cluster)
            bridge.start()
            bridge.add(records=len(JOBS[cluster]))
            bridges.append(bridge)
        proc, server = start_prometheus(tmp_path, {
            "fencewatch": targets,
            "fencewatch-bridge": [f"127.0.0.1:{b.port}" for b in bridges]})
        try:
            yield server, batches
        finally:
            proc.terminate()
            proc.wait(10)
    finally:
        for s in (*sinks, *bridges):
            s.close()


def test_sum_by_cluster_and_group_keeps_same_named_groups_of_two_clusters_apart(two_clusters):
    server, batches = two_clusters
    judged = {c: len(b["verdicts"]) for c, b in batches.items()}  # one (commit, partition) each, per policy
    assert judged["eu-1"] != judged["us-2"] and all(judged.values())  # the two jobs are told apart by value
    assert {v["cluster"] for v in batches["eu-1"]["verdicts"]} == {"eu-1"}

    expr = 'sum by (cluster, group) (fencewatch_commits_judged_total{policy="strict"})'
    want = {("eu-1", "g"): judged["eu-1"], ("us-2", "g"): judged["us-2"]}
    assert wait_for(server, expr, ("cluster", "group"), want) == want
    # what two jobs without the setting gave: one group, both clusters' commits in it
    merged = by_labels(server.query('sum by (group) (fencewatch_commits_judged_total{policy="strict"})'), "group")
    assert merged == {("g",): judged["eu-1"] + judged["us-2"]}
    events = by_labels(server.query('sum by (cluster, group) (fencewatch_events_total{type="offset_commit"})'),
                       "cluster", "group")
    commits = {(c, "g"): sum(n for (_, _, etype, _), n in b["events"].items() if etype == "offset_commit")
               for c, b in batches.items()}
    assert events == commits and commits[("eu-1", "g")] > commits[("us-2", "g")] == 1

    bridges = wait_for(server, "sum by (cluster) (fencewatch_bridge_records_total)", ("cluster",),
                       {("eu-1",): len(JOBS["eu-1"]), ("us-2",): len(JOBS["us-2"])})
    assert bridges == {("eu-1",): len(JOBS["eu-1"]), ("us-2",): len(JOBS["us-2"])}
    assert not by_labels(server.query('fencewatch_commits_judged_total{cluster="default"}'), "cluster")

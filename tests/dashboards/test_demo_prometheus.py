"""The dashboard/alert-rule end-to-end tests again, with Prometheus scraping ``fencewatch demo``.

Same tests as test_prometheus_e2e.py (imported below); only the metrics source differs:
the real demo (embedded broker, simulator, Spark job, exporter) in a subprocess, with
a short offset retention and some groups going empty so expiry panels have data.
Panel queries are checked with the dashboards' "All" selection: no single live group
has every kind of data (an empty group has an expiry countdown but no member epochs),
so the one-group drill-down is checked against the synthetic feed in test_prometheus_e2e.
"""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from collections import Counter
from pathlib import Path

import pytest

from .conftest import MetricsTarget, free_port
from fencewatch.dashboards import generate

from .test_prometheus_e2e import (substitute, test_alert_rules_load_and_evaluate,  # noqa: F401
                                  test_every_metric_in_the_dashboards_exists_in_prometheus, test_target_is_scraped,
                                  test_variable_queries_list_values, wait_for)

pytestmark = [pytest.mark.spark, pytest.mark.broker, pytest.mark.slow]
DEMO_ARGS = ["--profile", "mixed", "--groups", "8", "--trigger", "1s", "--retention", "3m", "--expiry-warning", "2m",
             "--set", "empty_fraction=0.25", "--set", "empty_after_ms=20000",
             "--bad-record-every", "3s", "--duration", "15m"]


_DEMO: dict = {}  # the running demo's process and log, for the last test


def _judged_groups(text: str) -> Counter:
    """(cluster, group) -> verdicts judged, from the exposition text."""
    out: Counter = Counter()
    for line in text.splitlines():
        if line.startswith("fencewatch_commits_judged_total{"):
            labels = dict(re.findall(r'(\w+)="([^"]*)"', line.split("}")[0]))
            value = float(line.rsplit(" ", 1)[1])
            if value > 0 and labels.get("group") not in (None, "other"):
                out[(labels["cluster"], labels["group"])] += value
    return out


@pytest.fixture(scope="module")
def metrics_target(tmp_path_factory) -> MetricsTarget:
    port = free_port()
    log = tmp_path_factory.mktemp("demo") / "demo.log"
    exe = Path(sys.executable).with_name("fencewatch")
    with log.open("w") as out:
        proc = subprocess.Popen([str(exe), "demo", "--metrics-port", str(port), *DEMO_ARGS], stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 240
        text = ""
        while time.monotonic() < deadline:
            assert proc.poll() is None, f"demo exited:\n{log.read_text()[-3000:]}"
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as r:
                    text = r.read().decode()
            except OSError:
                pass
            judged = _judged_groups(text)
            if judged:
                break
            time.sleep(2)
        assert judged, f"the demo judged nothing:\n{log.read_text()[-3000:]}"
        # The drill-down focus: the busiest group (it has verdicts of several classes).
        (cluster, group), _ = judged.most_common(1)[0]
        _DEMO.update(proc=proc, log=log)
        yield MetricsTarget(f"127.0.0.1:{port}", focus_cluster=cluster, focus_group=group)
    finally:
        if proc.poll() is None:  # the last test stops it itself
            os.killpg(proc.pid, signal.SIGINT)
            try:
                proc.wait(90)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)


def test_every_dashboard_panel_query_returns_data_for_all_groups(prometheus, metrics_target):
    queries = [(name, title, ref, substitute(expr)) for name, dashboard in generate.dashboards().items()
               for title, ref, expr in generate.panel_queries(dashboard)]
    assert len(queries) > 50

    def check():
        return [(dash, title, ref, expr) for dash, title, ref, expr in queries if not prometheus.query(expr)]

    wait_for(check, "panel queries with no data", prometheus)


def test_the_demo_stops_quietly_with_an_honest_summary(metrics_target):
    """Last in the module: Ctrl-C ends the demo with its summary, start-up latency apart from the
    steady figures, the simulator healthy, no alert the simulator's traffic does not script, and
    no ERROR line or traceback anywhere in its output (the broker stops after the producers)."""
    proc, log = _DEMO["proc"], _DEMO["log"]
    os.killpg(proc.pid, signal.SIGINT)
    assert proc.wait(90) == 0, log.read_text()[-3000:]
    text = log.read_text()
    assert not [line for line in text.splitlines() if " ERROR " in line or line.startswith("Traceback")], text[-3000:]
    summary = text[text.rindex("events judged"):]
    assert re.search(r"decision latency, start-up +p50 [\d.]+ s, p99 [\d.]+ s", summary), summary
    assert re.search(r"decision latency p50, steady +[\d.]+ s", summary), summary
    assert re.search(r"simulator +ok", summary), summary
    assert "MODEL_DIVERGENCE" not in summary, summary

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


GROUPS_PAGE_FACTS = """JSON.stringify((() => {
  const tables = [...document.querySelectorAll("table")];
  const head = t => [...t.querySelectorAll("th")].map(th => th.textContent);
  return {title: document.title, tables: tables.length,
          groups: [...tables[0].querySelectorAll("tbody tr")].map(tr => tr.children[1].textContent),
          member_heads: tables.length > 1 ? head(tables[1]) : [],
          member_rows: tables.slice(1).reduce((n, t) => n + t.querySelectorAll("tbody tr").length, 0),
          scroll_width: document.documentElement.scrollWidth};
})())"""


def test_the_groups_page_and_command_show_the_judged_groups_members(metrics_target):
    """``fencewatch groups`` on the demo's broker (its groups topic, written by the job as groups
    change) and the job's /groups page in real Chromium show the groups Prometheus sees judged,
    each with members whose partitions carry assignment epochs."""
    import json as _json

    sys.path.insert(0, str(Path(__file__).parents[1] / "sinks" / "report"))
    from headless_chromium import open_page

    port = metrics_target.address.rsplit(":", 1)[1]
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        judged = {g for _, g in _judged_groups(r.read().decode())}
    seen = open_page(f"http://127.0.0.1:{port}/groups", GROUPS_PAGE_FACTS, width=1280)
    assert seen["problems"] == [] and seen["requests"] == []
    facts = _json.loads(seen["value"])
    assert judged <= set(facts["groups"]), (judged, facts)
    assert "assigned (partition@assignment epoch)" in facts["member_heads"] and facts["member_rows"] >= len(judged)
    assert facts["scroll_width"] <= 1280, facts  # fits the page

    bootstrap = re.search(r"fencewatch demo: broker (\S+),", _DEMO["log"].read_text()).group(1)
    exe = Path(sys.executable).with_name("fencewatch")
    out = subprocess.run([str(exe), "groups", "--bootstrap-servers", bootstrap, "--groups-topic", "fencewatch.groups",
                          "--format", "json"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    views = _json.loads(out.stdout)
    assert judged <= {v["group_id"] for v in views}, (judged, [v["group_id"] for v in views])
    for v in views:
        if v["group_id"] in judged and v["members"]:
            parts = [p for m in v["members"] for p in m["assigned_partitions"]]
            assert all(isinstance(p["assignment_epoch"], int) and p["assignment_epoch"] >= 0 for p in parts)
    table = subprocess.run([str(exe), "groups", "--bootstrap-servers", bootstrap, "--groups-topic",
                            "fencewatch.groups"], capture_output=True, text=True, timeout=120)
    assert table.returncode == 0 and table.stdout.startswith("CLUSTER") and "Traceback" not in table.stderr
    missing = subprocess.run([str(exe), "groups", "--bootstrap-servers", bootstrap, "--groups-topic", "no.such.topic"],
                             capture_output=True, text=True, timeout=120)
    assert missing.returncode != 0 and "Traceback" not in missing.stderr
    assert "no.such.topic" in missing.stderr.strip().splitlines()[-1], missing.stderr


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

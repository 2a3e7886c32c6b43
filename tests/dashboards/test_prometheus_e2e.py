"""Dashboards and alert rules against a real Prometheus scraping a live fencewatch endpoint.

Every panel query of every dashboard must return data through Prometheus's HTTP API,
every metric the dashboards use must exist in Prometheus, the variable queries must
list values, and the shipped rule file must load and evaluate without errors.
The metrics source is the `metrics_target` fixture (tests/dashboards/conftest.py).
"""

from __future__ import annotations

import re
import time
import urllib.error

from fencewatch.dashboards import generate

from .test_dashboards import confirm_lines, confirm_queries

RATE_WINDOW = "1m"  # $__rate_interval / $__range with a 1 s scrape interval
PATIENCE_S = 45  # upper bound for Prometheus to collect enough samples; not a speed check


def substitute(expr: str, cluster: str = ".*", group: str = ".*") -> str:
    return (
        expr.replace("$__rate_interval", RATE_WINDOW)
        .replace("$__range", RATE_WINDOW)
        .replace("$cluster", cluster)
        .replace("$group", group)
    )


def promql_regex(value: str) -> str:
    """A literal as a PromQL regex inside a double-quoted string (backslashes doubled)."""
    return re.escape(value).replace("\\", "\\\\")


def every_query(metrics_target):
    """(dashboard, panel, refId, PromQL) with variables substituted: all groups, and the focus group."""
    for name, dashboard in generate.dashboards().items():
        for title, ref, expr in generate.panel_queries(dashboard):
            yield name, title, ref, substitute(expr)
            if dashboard["uid"] == generate.GROUP_UID:
                focused = substitute(expr, promql_regex(metrics_target.focus_cluster),
                                     promql_regex(metrics_target.focus_group))
                yield f"{name} ({metrics_target.focus_group})", title, ref, focused


def wait_for(check, what: str, prometheus):
    """Poll `check()` (returns a list of problems) until it returns none or patience runs out."""
    deadline = time.monotonic() + PATIENCE_S
    while True:
        problems = check()
        if not problems or time.monotonic() > deadline:
            break
        time.sleep(1)
    assert not problems, f"{what}:\n" + "\n".join(map(str, problems)) + f"\nprometheus log:\n{prometheus.log.read_text()[-2000:]}"


def test_target_is_scraped(prometheus, metrics_target):
    def check():
        targets = prometheus.api("/api/v1/targets")["activeTargets"]
        up = {t["labels"]["job"] for t in targets if t["health"] == "up"}
        return [] if {"fencewatch", "kafka"} <= up else [targets]

    wait_for(check, "fencewatch (or the stand-in kafka JMX) target never came up", prometheus)
    assert prometheus.query('fencewatch_up{job="fencewatch"} == 1')


def test_every_dashboard_panel_query_returns_data(prometheus, metrics_target):
    queries = list(every_query(metrics_target))
    assert len(queries) > 60

    def check():
        return [(dash, title, ref, expr) for dash, title, ref, expr in queries if not prometheus.query(expr)]

    wait_for(check, "panel queries with no data", prometheus)


def test_every_metric_in_the_dashboards_exists_in_prometheus(prometheus, metrics_target):
    used = set()
    for dashboard in generate.dashboards().values():
        for _, _, expr in generate.panel_queries(dashboard):
            used |= set(re.findall(r"\bfencewatch_[a-z0-9_]+", expr))
        for variable in dashboard["templating"]["list"]:
            used |= set(re.findall(r"\bfencewatch_[a-z0-9_]+", variable.get("definition", "")))
    assert "fencewatch_commits_judged_total" in used

    def check():
        names = set(prometheus.api("/api/v1/label/__name__/values"))
        return sorted(used - names)

    wait_for(check, "metrics used by dashboards but absent in Prometheus", prometheus)


def test_variable_queries_list_values(prometheus, metrics_target):
    def check():
        problems = []
        for dashboard in generate.dashboards().values():
            for variable in dashboard["templating"]["list"]:
                if variable["type"] != "query":
                    continue
                match = re.fullmatch(r"label_values\((.+), (\w+)\)", variable["definition"])
                assert match, variable["definition"]
                selector, label = substitute(match.group(1)), match.group(2)
                values = prometheus.api(f"/api/v1/label/{label}/values", **{"match[]": selector})
                if not values:
                    problems.append((dashboard["uid"], variable["name"], selector))
                if label == "group" and not {metrics_target.focus_group} <= set(values):
                    problems.append((dashboard["uid"], "focus group not listed", values))
        return problems

    wait_for(check, "variables without values", prometheus)


def test_alert_rules_load_and_evaluate(prometheus, metrics_target):
    shipped = set(re.findall(r"^\s+- alert: (\w+)$", generate.PACKAGE_DIR.joinpath(
        "prometheus", "rules", "fencewatch.rules.yml").read_text(), re.M))
    assert len(shipped) >= 9

    def check():
        rules = [r for g in prometheus.api("/api/v1/rules")["groups"] for r in g["rules"]]
        loaded = {r["name"] for r in rules}
        problems = [f"not loaded: {sorted(shipped - loaded)}"] if shipped - loaded else []
        problems += [(r["name"], r["health"], r.get("lastError")) for r in rules if r["health"] != "ok"]
        return problems

    wait_for(check, "alert rules not loaded or failing", prometheus)


def test_every_runbook_confirm_query_runs_in_prometheus(prometheus, metrics_target):
    """docs/alerts.md's Confirm queries are what the on-call pastes into Prometheus: each one
    parses and evaluates there (Prometheus answers a bad one with HTTP 400), and the ones on
    the job's own series (scraped here; no bridge runs) return data."""
    queries = {q: name for name, line in confirm_lines().items() for q in confirm_queries(line)}
    assert len(queries) >= 16
    for query, name in queries.items():
        try:
            prometheus.query(query)
        except urllib.error.HTTPError as e:
            raise AssertionError(f"{name}: {query}: {e.read().decode()}") from None

    def check():
        return sorted(q for q in ("fencewatch_up", "fencewatch_input_lag_records",
                                  "time() - fencewatch_last_batch_timestamp_seconds")
                      if q in queries and not prometheus.query(q))

    wait_for(check, "Confirm queries on the job's own gauges with no data", prometheus)

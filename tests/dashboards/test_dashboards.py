"""Static checks of the generated dashboards, provisioning files and alert-rule docs."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from fencewatch.dashboards import generate
from fencewatch.dashboards import rules as rule_generator
from fencewatch.sinks import metrics

ROOT = Path(__file__).resolve().parents[2]
DASH = ROOT / "dashboards"
RULES = DASH / "prometheus" / "rules" / "fencewatch.rules.yml"
METRIC_RE = re.compile(r"\bfencewatch_[a-z0-9_]+")


def rule_exprs() -> dict[str, str]:
    doc = yaml.safe_load(RULES.read_text())
    return {r["alert"]: r["expr"] for g in doc["groups"] for r in g["rules"]}


def test_checked_in_files_are_up_to_date():
    assert generate.stale() == [], "run: python -m fencewatch.dashboards.generate"
    assert generate.main(["--check"]) == 0


def test_check_mode_reports_a_stale_file(tmp_path, monkeypatch):
    monkeypatch.setattr(generate, "DASHBOARD_DIR", tmp_path)
    monkeypatch.setattr(generate, "REPO_ROOT", tmp_path)  # no pyproject.toml: dashboards only
    assert generate.main(["--check"]) == 1
    assert generate.main([]) == 0
    assert generate.main(["--check"]) == 0
    (tmp_path / "fencewatch-fleet.json").write_text("{}")
    assert generate.main(["--check"]) == 1


@pytest.mark.parametrize("name", sorted(generate.dashboards()))
def test_dashboard_model(name):
    d = json.loads((DASH / "grafana" / "dashboards" / name).read_text())
    assert d["schemaVersion"] == 42
    assert d["uid"] == name.removesuffix(".json") and len(d["uid"]) <= 40
    assert "id" not in d  # provisioning assigns ids
    variables = {v["name"]: v for v in d["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    for var in ("cluster", "group"):
        assert variables[var]["type"] == "query"
        assert variables[var]["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
    ids = [p["id"] for p in d["panels"]]
    assert len(ids) == len(set(ids))
    for panel in d["panels"]:
        pos = panel["gridPos"]
        assert 0 <= pos["x"] and pos["x"] + pos["w"] <= 24
        if panel["type"] == "row":
            continue
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            assert target["datasource"]["uid"] == "${datasource}"
            expr = target["expr"]
            assert expr.count("(") == expr.count(")") and expr.count("{") == expr.count("}"), expr
            # every selector on a metric with cluster/group labels filters on the variables
            for metric, selector in re.findall(r"(fencewatch_[a-z0-9_]+)(\{[^}]*\})?", expr):
                spec = metrics.series_names()[metric]
                if "cluster" in spec.labels:
                    assert 'cluster=~"$cluster"' in selector, (panel["title"], expr)
                if "group" in spec.labels:
                    assert 'group=~"$group"' in selector, (panel["title"], expr)


def test_required_panels_exist():
    titles = {
        d["uid"]: {p["title"] for p in d["panels"]} for d in generate.dashboards().values()
    }
    assert {"Fencing rejections by class (strict)", "Avoidable aborts", "Zombie commits",
            "Top groups by fencing errors"} <= titles[generate.FLEET_UID]
    assert {"Epochs", "Members and partitions", "Verdicts by class (strict)", "Offset expiry countdown",
            "Truncations"} <= titles[generate.GROUP_UID]
    assert {"Input lag", "Batch duration", "Decision latency", "Dead letters"} <= titles[generate.HEALTH_UID]


def test_every_metric_in_dashboards_and_rules_is_defined():
    defined = metrics.series_names()
    used = set()
    for d in generate.dashboards().values():
        used |= set(METRIC_RE.findall(json.dumps(d)))
    used_by_rules = set(METRIC_RE.findall(RULES.read_text()))
    assert used_by_rules and used
    assert sorted((used | used_by_rules) - set(defined)) == []


def test_docs_alerts_has_a_runbook_for_every_rule():
    doc = (ROOT / "docs" / "alerts.md").read_text()
    rules = yaml.safe_load(RULES.read_text())
    for group in rules["groups"]:
        for rule in group["rules"]:
            name = rule["alert"]
            assert f"\n### {name}\n" in doc, name
            # absolute (Alertmanager links it) and pointing at this section's anchor
            assert rule["annotations"]["runbook_url"] == f"{rule_generator.AlertRulesConfig().runbook_base_url}#{name.lower()}"
            assert rule["labels"]["severity"] in ("info", "warning", "critical")
            section = doc.split(f"### {name}\n", 1)[1].split("\n### ", 1)[0]
            assert "Runbook:" in section and f"`{rule['labels']['severity']}`" in section, name


# A Confirm query names one of these: fencewatch's own series, a scrape target's `up`, or the
# brokers' JMX meter the no-tap rules read. Other backticked text on the line (a command, a
# topic, a placeholder) is not PromQL.
_PROMQL_RE = re.compile(r"\bfencewatch_[a-z0-9_]+|\bkafka_network_requestmetrics_errors_total\b|^up\{")


def confirm_lines(doc: str | None = None) -> dict[str, str]:
    """Each alert's "Confirm:" item of docs/alerts.md (joined onto one line), by alert name; an
    alert without one is missing from the result."""
    doc = (ROOT / "docs" / "alerts.md").read_text() if doc is None else doc
    found = {}
    for section in doc.split("\n### ")[1:]:
        name, _, body = section.partition("\n")
        item = re.search(r"^- Confirm: (.*?)(?=^- |\Z)", body, re.M | re.S)
        if item:
            found[name.strip()] = " ".join(item.group(1).split())
    return found


_NAMED_RE = re.compile(r"\b(?:fencewatch|kafka)_[a-z0-9_]+\b|\bup(?=\{)")


def confirm_queries(line: str) -> list[str]:
    """The PromQL queries of a Confirm line: its backticked spans that name a metric."""
    return [span for span in re.findall(r"`([^`]+)`", line) if _PROMQL_RE.search(span)]


def test_every_alert_runbook_says_how_to_confirm_it_with_the_rules_own_metrics():
    """The on-call's first step: a query (or command) that shows the alert is real. Each alert's
    Confirm line queries at least one metric its rule reads, and only metrics that exist."""
    lines = confirm_lines()
    exprs = rule_exprs()
    assert sorted(set(exprs) - set(lines)) == [], "alerts without a Confirm: line in docs/alerts.md"
    defined = set(metrics.series_names()) | {"up", "kafka_network_requestmetrics_errors_total"}
    for name, expr in exprs.items():
        queries = confirm_queries(lines[name])
        assert queries, f"{name}: no PromQL query on its Confirm line"
        named = {m for q in queries for m in _NAMED_RE.findall(q)}
        assert named <= defined, f"{name}: {sorted(named - defined)} are no metrics"
        read_by_rule = set(METRIC_RE.findall(expr)) | set(re.findall(r"\bkafka_network_requestmetrics_errors_total\b|\bup\b", expr))
        assert named & read_by_rule, f"{name}: its Confirm queries read none of {sorted(read_by_rule)}"


def test_the_confirm_check_would_catch_a_missing_line_or_a_misspelt_metric():
    """Negative controls: drop one alert's Confirm line and the parsing no longer finds it; a
    misspelt metric is seen as a name that is not defined."""
    doc = (ROOT / "docs" / "alerts.md").read_text()
    start = doc.index("### FencewatchZombieCommit\n")
    cut = doc[:start] + re.sub(r"^- Confirm:.*?(?=^- )", "", doc[start:], count=1, flags=re.M | re.S)
    assert "FencewatchZombieCommit" not in confirm_lines(cut) and "FencewatchUnsafeAccept" in confirm_lines(cut)
    line = confirm_lines()["FencewatchZombieCommit"].replace("fencewatch_zombie_commits_total", "fencewatch_zombie_commit_total")
    assert set(_NAMED_RE.findall(" ".join(confirm_queries(line)))) - set(metrics.series_names()) == {"fencewatch_zombie_commit_total"}


def test_provisioning_files():
    ds = yaml.safe_load((DASH / "grafana" / "provisioning" / "datasources" / "fencewatch.yml").read_text())
    assert ds["apiVersion"] == 1 and ds["datasources"][0]["type"] == "prometheus"
    prov = yaml.safe_load((DASH / "grafana" / "provisioning" / "dashboards" / "fencewatch.yml").read_text())
    provider = prov["providers"][0]
    assert provider["type"] == "file" and provider["options"]["path"].startswith("/")
    prom = yaml.safe_load((DASH / "prometheus" / "prometheus.yml").read_text())
    for rule_file in prom["rule_files"]:
        assert (DASH / "prometheus" / rule_file).exists()
    assert prom["scrape_configs"][0]["job_name"] == "fencewatch"
    assert 'up{job="fencewatch"}' in rule_exprs()["FencewatchMonitorAbsent"]
    assert prom["scrape_configs"][0]["static_configs"][0]["targets"] == [
        f"{metrics.MetricsConfig().host}:{metrics.MetricsConfig().port}"
    ]


def test_metrics_doc_states_the_jobs_own_group_budget_default():
    from fencewatch.streaming.config.settings import SinksConfig

    assert SinksConfig().metrics_top_groups == metrics.MetricsConfig().max_groups  # one default
    doc = (ROOT / "docs" / "metrics.md").read_text()
    assert f"`sinks.metrics_top_groups`, default {SinksConfig().metrics_top_groups})" in doc


def test_every_deprecated_alias_names_a_defined_metric_and_is_documented():
    aliases = [m for m in metrics.METRICS if m.alias_of]
    assert aliases
    doc = (ROOT / "docs" / "metrics.md").read_text().split("## Deprecated names", 1)[1]
    for alias in aliases:
        assert alias.alias_of in metrics.BY_NAME and not metrics.BY_NAME[alias.alias_of].alias_of
        assert f"| `{alias.name}` | `{alias.alias_of}` |" in doc
    used = json.dumps(generate.dashboards()) + RULES.read_text()
    assert not any(re.search(rf"\b{a.name}\b", used) for a in aliases)  # shipped files use the new names

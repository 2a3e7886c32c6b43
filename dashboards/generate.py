"""Generate fencewatch's Grafana dashboards (classic JSON model, schemaVersion 42).

Why generated: three dashboards share one datasource variable, the `cluster` /
`group` variables and one label selector; writing them by hand drifts. The
output is checked in under `dashboards/grafana/dashboards/` so Grafana's file
provisioning (and `fencewatch grafana push`) needs no Python at all.

    python -m fencewatch.dashboards.generate          # rewrite the JSON (and docs/metrics.md)
    python -m fencewatch.dashboards.generate --check  # exit 1 if anything checked in is stale

Metric names come from `fencewatch.sinks.metrics` (`_m("...")` fails on an
undefined name), so a renamed metric breaks generation, not a dashboard.
Every PromQL expression uses `$cluster`/`$group` as regexes (`=~`), and
`$__rate_interval` / `$__range`; the end-to-end test substitutes them and
runs each expression against a real Prometheus.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path
from typing import Any, Iterator

from fencewatch.dashboards.rules import KAFKA_ERRORS
from fencewatch.sinks import metrics

log = logging.getLogger(__name__)

SCHEMA_VERSION = 42
PACKAGE_DIR = Path(__file__).resolve().parent
DASHBOARD_DIR = PACKAGE_DIR / "grafana" / "dashboards"
REPO_ROOT = PACKAGE_DIR.parent
METRICS_DOC = REPO_ROOT / "docs" / "metrics.md"
DS = {"type": "prometheus", "uid": "${datasource}"}
TAG = "fencewatch"
FENCING = "STALE_MEMBER_EPOCH|ILLEGAL_GENERATION"

FLEET_UID = "fencewatch-fleet"
GROUP_UID = "fencewatch-group"
HEALTH_UID = "fencewatch-health"


def _m(name: str) -> str:
    """A defined metric's series name (histogram series via their _bucket/_sum/_count names)."""
    full = metrics.PREFIX + name
    if full not in metrics.series_names():
        raise KeyError(f"dashboard uses undefined metric {full}")
    return full


def _sel(*extra: str, group: bool = True) -> str:
    parts = ['cluster=~"$cluster"'] + (['group=~"$group"'] if group else []) + list(extra)
    return "{" + ",".join(parts) + "}"


def _rate(name: str, *extra: str, by: str = "", fn: str = "rate", window: str = "$__rate_interval") -> str:
    grouping = f" by ({by}) " if by else ""
    return f"sum{grouping}({fn}({_m(name)}{_sel(*extra)}[{window}]))"


# ------------------------------------------------------------------ panel model


class _Layout:
    """Places panels left to right in 24 columns, wrapping rows; ids are stable by order."""

    def __init__(self) -> None:
        self.x = 0
        self.y = 0
        self.row_h = 0
        self.next_id = 1
        self.panels: list[dict[str, Any]] = []

    def _pos(self, w: int, h: int) -> dict[str, int]:
        if self.x + w > 24:
            self.x, self.y, self.row_h = 0, self.y + self.row_h, 0
        pos = {"h": h, "w": w, "x": self.x, "y": self.y}
        self.x += w
        self.row_h = max(self.row_h, h)
        return pos

    def _id(self) -> int:
        self.next_id += 1
        return self.next_id - 1

    def row(self, title: str) -> None:
        if self.x:
            self.x, self.y, self.row_h = 0, self.y + self.row_h, 0
        self.panels.append(
            {"collapsed": False, "gridPos": {"h": 1, "w": 24, "x": 0, "y": self.y}, "id": self._id(),
             "panels": [], "title": title, "type": "row"}
        )
        self.y += 1

    def add(self, panel: dict[str, Any], w: int, h: int) -> None:
        panel = {"id": self._id(), "gridPos": self._pos(w, h), **panel}
        self.panels.append(panel)


def _target(expr: str, legend: str = "", ref: str = "A", instant: bool = False, fmt: str = "time_series") -> dict:
    return {
        "datasource": DS,
        "editorMode": "code",
        "expr": expr,
        "format": fmt,
        "instant": instant,
        "legendFormat": legend or "__auto",
        "range": not instant,
        "refId": ref,
    }


def _targets(*queries: tuple[str, str] | str, instant: bool = False, fmt: str = "time_series") -> list[dict]:
    out = []
    for i, q in enumerate(queries):
        expr, legend = (q, "") if isinstance(q, str) else q
        out.append(_target(expr, legend, chr(ord("A") + i), instant, fmt))
    return out


def _thresholds(red: float | None, amber: float | None = None) -> dict:
    steps: list[dict[str, Any]] = [{"color": "green", "value": None}]
    if amber is not None:
        steps.append({"color": "orange", "value": amber})
    if red is not None:
        steps.append({"color": "red", "value": red})
    return {"mode": "absolute", "steps": steps}


def timeseries(title: str, description: str, *queries, unit: str = "short", stack: bool = False) -> dict:
    return {
        "type": "timeseries",
        "title": title,
        "description": description,
        "datasource": DS,
        "targets": _targets(*queries),
        "fieldConfig": {
            "defaults": {
                "unit": unit,
                "color": {"mode": "palette-classic"},
                "custom": {
                    "drawStyle": "line",
                    "lineWidth": 1,
                    "fillOpacity": 15 if stack else 5,
                    "showPoints": "never",
                    "spanNulls": False,
                    "stacking": {"group": "A", "mode": "normal" if stack else "none"},
                },
            },
            "overrides": [],
        },
        "options": {
            "legend": {"calcs": ["lastNotNull", "max"], "displayMode": "table", "placement": "bottom", "showLegend": True},
            "tooltip": {"mode": "multi", "sort": "desc"},
        },
    }


def stat(title: str, description: str, query, unit: str = "short", red: float | None = None,
         amber: float | None = None, text_mode: str = "auto") -> dict:
    return {
        "type": "stat",
        "title": title,
        "description": description,
        "datasource": DS,
        "targets": _targets(query, instant=True),
        "fieldConfig": {
            "defaults": {"unit": unit, "color": {"mode": "thresholds"}, "thresholds": _thresholds(red, amber), "mappings": []},
            "overrides": [],
        },
        "options": {
            "colorMode": "value",
            "graphMode": "none",
            "justifyMode": "auto",
            "orientation": "auto",
            "reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
            "textMode": text_mode,
        },
    }


def bargauge(title: str, description: str, query, unit: str = "short", link: dict | None = None) -> dict:
    defaults: dict[str, Any] = {"unit": unit, "color": {"mode": "continuous-GrYlRd"}, "min": 0, "thresholds": _thresholds(None)}
    if link:
        defaults["links"] = [link]
    return {
        "type": "bargauge",
        "title": title,
        "description": description,
        "datasource": DS,
        "targets": _targets(query, instant=True),
        "fieldConfig": {"defaults": defaults, "overrides": []},
        "options": {
            "displayMode": "gradient",
            "orientation": "horizontal",
            "reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
            "showUnfilled": True,
            "valueMode": "color",
        },
    }


def table(title: str, description: str, query, *, keep_value: bool = False) -> dict:
    hidden = {"Time": True, "__name__": True, **({} if keep_value else {"Value": True})}
    return {
        "type": "table",
        "title": title,
        "description": description,
        "datasource": DS,
        "targets": _targets(query, instant=True, fmt="table"),
        "fieldConfig": {"defaults": {}, "overrides": []},
        "options": {"showHeader": True, "cellHeight": "sm"},
        "transformations": [{"id": "organize", "options": {"excludeByName": hidden}}],
    }


# ------------------------------------------------------------------ variables


def _datasource_var() -> dict:
    return {
        "name": "datasource", "label": "Data source", "type": "datasource", "query": "prometheus",
        "current": {}, "hide": 0, "includeAll": False, "multi": False, "options": [], "refresh": 1, "regex": "",
    }


def _query_var(name: str, label: str, query: str, multi: bool) -> dict:
    return {
        "name": name,
        "label": label,
        "type": "query",
        "datasource": DS,
        "definition": query,
        "query": {"qryType": 1, "query": query, "refId": "PrometheusVariableQueryEditor-VariableQuery"},
        "current": {},
        "hide": 0,
        "includeAll": multi,
        "allValue": ".*" if multi else None,
        "multi": multi,
        "options": [],
        "refresh": 2,
        "regex": "",
        "sort": 1,
    }


def _variables(multi: bool) -> list[dict]:
    return [
        _datasource_var(),
        _query_var("cluster", "Cluster", f"label_values({_m('events_total')}, cluster)", multi),
        _query_var("group", "Group", f'label_values({_m("events_total")}{{cluster=~"$cluster"}}, group)', multi),
    ]


def _dashboard(uid: str, title: str, description: str, panels: list[dict], multi: bool) -> dict:
    return {
        "uid": uid,
        "title": title,
        "description": description,
        "tags": [TAG],
        "editable": True,
        "graphTooltip": 1,
        "timezone": "browser",
        "refresh": "30s",
        "time": {"from": "now-1h", "to": "now"},
        "fiscalYearStartMonth": 0,
        "liveNow": False,
        "schemaVersion": SCHEMA_VERSION,
        "version": 1,
        "annotations": {
            "list": [
                {
                    "builtIn": 1, "datasource": {"type": "grafana", "uid": "-- Grafana --"}, "enable": True,
                    "hide": True, "iconColor": "rgba(0, 211, 255, 1)", "name": "Annotations & Alerts", "type": "dashboard",
                },
                {
                    # alerts posted by `fencewatch grafana push --annotations-from`
                    "datasource": {"type": "grafana", "uid": "-- Grafana --"}, "enable": True, "hide": False,
                    "iconColor": "red", "name": "fencewatch alerts",
                    "target": {"type": "tags", "tags": [TAG], "limit": 200, "matchAny": False},
                },
            ]
        },
        "links": [
            {"title": "fencewatch", "type": "dashboards", "tags": [TAG], "asDropdown": True,
             "includeVars": True, "keepTime": True, "icon": "external link", "targetBlank": False},
        ],
        "templating": {"list": _variables(multi)},
        "panels": panels,
    }


# ------------------------------------------------------------------ dashboards


def fleet_overview() -> dict:
    lay = _Layout()
    lay.row("Now")
    lay.add(stat("Fencing errors /s", "STALE_MEMBER_EPOCH + ILLEGAL_GENERATION answers from the brokers.",
                 _rate("broker_errors_total", f'error=~"{FENCING}"'), "reqps", red=5, amber=1), 4, 4)
    lay.add(stat("Avoidable aborts", "Share of aborted transactions that kip1251 (Kafka 4.3) would have accepted.",
                 f"{_rate('avoidable_aborts_total', fn='increase', window='$__range')} / "
                 f"clamp_min({_rate('aborted_transactions_total', fn='increase', window='$__range')}, 1)",
                 "percentunit", red=0.5, amber=0.1), 4, 4)
    lay.add(stat("Zombie commits", "Commits by fenced members for partitions another member now holds (time range).",
                 _rate("zombie_commits_total", fn="increase", window="$__range"), red=1), 4, 4)
    lay.add(stat("Unsafe accepts", "Commits a policy accepts that could overwrite the new owner's offsets (time range).",
                 _rate("unsafe_accepts_total", fn="increase", window="$__range"), red=1), 4, 4)
    lay.add(stat("Spikes firing", "Groups with FENCING_SPIKE or TXN_ABORT_STORM firing now.",
                 f"sum({_m('alerts_firing')}{_sel()})", red=1), 4, 4)
    lay.add(stat("Groups", "Groups the monitor's model knows.", f"sum({_m('groups')}{_sel(group=False)})"), 4, 4)
    lay.row("Fencing")
    lay.add(timeseries("Fencing rejections by class (strict)",
                       "Per-partition rejections under KIP-848's strict check, by verdict class: avoidable = an "
                       "upgrade to KIP-1251 saves it, zombie = another member holds the partition.",
                       (_rate("commits_judged_total", 'policy="strict"', 'result!="NONE"', by="class"), "{{class}}"),
                       unit="reqps", stack=True), 12, 8)
    lay.add(timeseries("Broker errors", "Errors the brokers answered to commits and heartbeats.",
                       (_rate("broker_errors_total", by="api, error"), "{{api}} {{error}}"), unit="reqps"), 12, 8)
    lay.add(timeseries("Rejections by policy", "What each fencing policy would reject: the gap between strict and "
                       "kip1251 is what a broker upgrade removes.",
                       (_rate("commits_judged_total", 'result!="NONE"', by="policy"), "{{policy}}"), unit="reqps"), 8, 8)
    lay.add(timeseries("Aborted transactions", "Rejected transactional commits, and those kip1251 would have accepted.",
                       (_rate("aborted_transactions_total"), "aborted"), (_rate("avoidable_aborts_total"), "avoidable"),
                       unit="reqps"), 8, 8)
    lay.add(timeseries("Zombies and unsafe accepts", "Zombie commits and unsafe accepts per second.",
                       (_rate("zombie_commits_total", by="kind"), "zombie {{kind}}"),
                       (_rate("unsafe_accepts_total", by="kind"), "unsafe {{kind}}"), unit="reqps"), 8, 8)
    lay.row("Top groups")
    drill = {
        "title": "Group drill-down",
        "url": f"/d/{GROUP_UID}?var-cluster=${{__field.labels.cluster}}&var-group=${{__field.labels.group}}&${{__url_time_range}}",
    }
    top_fencing = _rate("broker_errors_total", f'error=~"{FENCING}"', by="cluster, group")
    top_avoidable = _rate("commits_judged_total", 'policy="strict"', 'class="avoidable"', by="cluster, group")
    lay.add(bargauge("Top groups by fencing errors", "STALE_MEMBER_EPOCH + ILLEGAL_GENERATION per second; click for the drill-down.",
                     (f"topk(10, {top_fencing})", "{{cluster}} / {{group}}"), "reqps", drill), 8, 9)
    lay.add(bargauge("Top groups by avoidable fencing", "Strict rejections that kip1251 would accept, per second.",
                     (f"topk(10, {top_avoidable})", "{{cluster}} / {{group}}"), "reqps", drill), 8, 9)
    lay.add(timeseries("Alerts raised", "fencewatch alerts by kind (resolved notices not counted).",
                       (_rate("alerts_total", by="kind", fn="increase"), "{{kind}}"), stack=True), 8, 9)
    _no_tap_row(lay)
    return _dashboard(FLEET_UID, "fencewatch / Fleet overview",
                      "Fencing across every monitored consumer group: rates by class, avoidable share, zombies, top groups.",
                      lay.panels, multi=True)


def _kafka_errors(requests: str, errors: str, by: str = "", window: str = "$__rate_interval") -> str:
    """The brokers' ErrorsPerSec meters as the JMX exporter names them (rules.KAFKA_ERRORS); no
    cluster/group labels exist there, so these queries ignore the $cluster/$group variables."""
    grouping = f" by ({by}) " if by else ""
    return f'sum{grouping}(rate({KAFKA_ERRORS}{{request=~"{requests}",error=~"{errors}"}}[{window}]))'


def _no_tap_row(lay: _Layout) -> None:
    """Fencing seen by the brokers themselves: works where the request log may not be switched on."""
    commits, fenced = "OffsetCommit|TxnOffsetCommit", "STALE_MEMBER_EPOCH|ILLEGAL_GENERATION"
    lay.row("Brokers (no tap: JMX ErrorsPerSec)")
    lay.add(stat("Commit partitions fenced /s", "STALE_MEMBER_EPOCH + ILLEGAL_GENERATION per partition of "
                 "OffsetCommit/TxnOffsetCommit responses, all brokers (the meter counts partitions: one rejected "
                 "50-partition commit adds 50). Not filtered by $cluster: the brokers' meters carry no such label.",
                 _kafka_errors(commits, fenced), "short", red=5, amber=1), 6, 4)
    lay.add(stat("Members fenced /s", "ConsumerGroupHeartbeat answered FENCED_MEMBER_EPOCH (once per response), "
                 "all brokers.", _kafka_errors("ConsumerGroupHeartbeat", "FENCED_MEMBER_EPOCH"), "short",
                 red=1, amber=0.1), 6, 4)
    lay.add(stat("Fenced share of commit partitions", "Fenced commit partitions / all commit partition answers "
                 "(error=\"NONE\" included): independent of commit sizes.",
                 f"{_kafka_errors(commits, fenced, window='$__range')} / "
                 f"{_kafka_errors(commits, '.+', window='$__range')}", "percentunit", red=0.05, amber=0.01), 6, 4)
    lay.add(stat("Brokers reporting fencing", "Brokers whose meters show fencing errors in the time range.",
                 f"count({_kafka_errors(commits + '|ConsumerGroupHeartbeat', fenced + '|FENCED_MEMBER_EPOCH', by='instance', window='$__range')} > 0)"),
            6, 4)
    lay.add(timeseries("Fencing errors by broker", "Per broker (the coordinator of the affected groups), request "
                       "and error. Commit rows count partitions, heartbeat rows responses.",
                       (_kafka_errors(commits + "|ConsumerGroupHeartbeat", fenced + "|FENCED_MEMBER_EPOCH",
                                      by="instance, request, error"), "{{instance}} {{request}} {{error}}")), 24, 8)


def group_drilldown() -> dict:
    lay = _Layout()
    lay.row("Group")
    lay.add(stat("Members", "Members the model holds.", f"sum({_m('group_members')}{_sel()})"), 4, 4)
    lay.add(stat("Partitions held", "Assigned or pending revocation.", f"sum({_m('group_partitions_held')}{_sel()})"), 4, 4)
    lay.add(stat("Group epoch", "The group's epoch.", f"max({_m('group_epoch')}{_sel()})"), 4, 4)
    lay.add(stat("State", "The group's state.", (f"{_m('group_state')}{_sel()} == 1", "{{state}}"), text_mode="name"), 4, 4)
    lay.add(stat("Offsets expire in", "Time until the earliest committed offset expires (KIP-211 / Kafka as shipped).",
                 f"min({_m('group_offsets_expiry_deadline_timestamp_seconds')}{_sel()}) - time()", "dtdurations",
                 red=None), 4, 4)
    lay.add(stat("Spike firing", "FENCING_SPIKE / TXN_ABORT_STORM firing for this group.",
                 f"sum({_m('alerts_firing')}{_sel()})", red=1), 4, 4)
    lay.row("Epochs and membership")
    lay.add(timeseries("Epochs", "Group epoch and the highest member epoch.",
                       (f"max({_m('group_epoch')}{_sel()})", "group epoch"),
                       (f"max({_m('group_max_member_epoch')}{_sel()})", "max member epoch")), 8, 8)
    lay.add(timeseries("Members and partitions", "Members by protocol and partitions held.",
                       (f"sum by (protocol) ({_m('group_members')}{_sel()})", "members ({{protocol}})"),
                       (f"sum({_m('group_partitions_held')}{_sel()})", "partitions held")), 8, 8)
    lay.add(timeseries("Rebalances", "Rebalances per interval.",
                       (_rate("group_rebalances_total", fn="increase"), "rebalances")), 8, 8)
    lay.add(table("Members by protocol",
                  "Members the model holds now, by protocol. Each member with its member epoch and its partitions "
                  "at their assignment epochs: the job's /groups page, or `fencewatch groups --group` (docs/groups.md).",
                  f"sum by (cluster, group, protocol) ({_m('group_members')}{_sel()})", keep_value=True), 24, 5)
    lay.row("Verdicts")
    lay.add(timeseries("Verdicts by class (strict)", "Every (commit, partition) verdict once, by class.",
                       (_rate("commits_judged_total", 'policy="strict"', by="class"), "{{class}}"), unit="reqps", stack=True), 8, 8)
    lay.add(timeseries("Rejections by policy", "Per-partition rejections each policy would answer.",
                       (_rate("commits_judged_total", 'result!="NONE"', by="policy, result"), "{{policy}} {{result}}"),
                       unit="reqps"), 8, 8)
    lay.add(timeseries("Broker errors", "What the brokers answered.",
                       (_rate("broker_errors_total", by="api, error"), "{{api}} {{error}}"), unit="reqps"), 8, 8)
    lay.add(timeseries("Transactions", "Aborted transactions and those kip1251 would have saved.",
                       (_rate("aborted_transactions_total"), "aborted"), (_rate("avoidable_aborts_total"), "avoidable"),
                       unit="reqps"), 8, 8)
    lay.add(timeseries("Model vs broker", "Verdicts whose broker answer the model predicted (agree) or not (diverge).",
                       (_rate("model_comparisons_total", by="outcome"), "{{outcome}}"), unit="reqps"), 8, 8)
    lay.add(timeseries("Zombies and unsafe accepts", "Per second.",
                       (_rate("zombie_commits_total"), "zombie"), (_rate("unsafe_accepts_total"), "unsafe"), unit="reqps"), 8, 8)
    lay.row("Offsets and log")
    lay.add(timeseries("Offset expiry countdown", "Seconds until the earliest committed offset expires; below zero: "
                       "due at the next cleanup.",
                       (f"min by (group) ({_m('group_offsets_expiry_deadline_timestamp_seconds')}{_sel()}) - time()", "{{group}}"),
                       unit="s"), 8, 8)
    lay.add(timeseries("Truncations", "LOG_TRUNCATION (KIP-320 divergence) and OFFSET_OUT_OF_RANGE per interval.",
                       (_rate("truncations_total", by="reason", fn="increase"), "{{reason}}")), 8, 8)
    lay.add(timeseries("Alerts", "Alerts raised per interval, and lifecycle alerts firing.",
                       (_rate("alerts_total", by="kind", fn="increase"), "{{kind}}"),
                       (f"sum by (kind) ({_m('alerts_firing')}{_sel()})", "firing {{kind}}")), 8, 8)
    return _dashboard(GROUP_UID, "fencewatch / Group drill-down",
                      "One consumer group: epochs, members, verdicts by policy, offset expiry, truncations.",
                      lay.panels, multi=False)


def monitor_health() -> dict:
    lay = _Layout()
    lay.row("Monitor")
    lay.add(stat("Up", "1 while the job reports healthy and completes micro-batches.", f"min({_m('up')})",
                 red=None, text_mode="value"), 4, 4)
    lay.add(stat("Input lag", "Records not yet read.", f"sum({_m('input_lag_records')})", amber=10_000, red=1_000_000), 5, 4)
    lay.add(stat("Event-time lag", "Now minus the newest coordinator timestamp processed.",
                 f"time() - max({_m('last_event_timestamp_seconds')})", "s", amber=60, red=300), 5, 4)
    lay.add(stat("Since last batch", "Now minus the end of the last micro-batch.",
                 f"time() - max({_m('last_batch_timestamp_seconds')})", "s", amber=60, red=300), 5, 4)
    lay.add(stat("DLQ records", "Dead-lettered input records in the time range.",
                 f"sum(increase({_m('dlq_records_total')}[$__range]))", amber=1), 5, 4)
    lay.row("Throughput and latency")
    lay.add(timeseries("Batch duration", "Micro-batch wall time quantiles.",
                       *[(f"histogram_quantile({q}, sum by (le) (rate({_m('batch_duration_seconds_bucket')}[$__rate_interval])))",
                          f"p{int(q * 100)}") for q in (0.5, 0.95, 0.99)], unit="s"), 8, 8)
    lay.add(timeseries("Decision latency", "Coordinator timestamp to verdict/alert, quantiles.",
                       *[(f"histogram_quantile({q}, sum by (le) (rate({_m('decision_latency_seconds_bucket')}[$__rate_interval])))",
                          f"p{int(q * 100)}") for q in (0.5, 0.95, 0.99)], unit="s"), 8, 8)
    lay.add(timeseries("Batches", "Micro-batches per second and input lag.",
                       (f"sum(rate({_m('batches_total')}[$__rate_interval]))", "batches/s"),
                       (f"sum({_m('input_lag_records')})", "lag (records)")), 8, 8)
    lay.add(timeseries("Events by type", "Input events per second by type and input.",
                       (_rate("events_total", by="type, source"), "{{type}} ({{source}})"), unit="reqps", stack=True), 12, 8)
    lay.add(timeseries("Dead letters", "Records sent to fencewatch.dlq per second, by reason.",
                       (f"sum by (reason) (rate({_m('dlq_records_total')}[$__rate_interval]))", "{{reason}}"),
                       unit="reqps"), 12, 8)
    lay.row("Exporter")
    lay.add(timeseries("Group label budget", "Groups with their own series and groups folded into group=\"other\".",
                       (f"sum by (disposition) ({_m('exporter_groups')}{_sel(group=False)})", "{{disposition}}"),
                       (f"sum by (record) (rate({_m('exporter_rejected_records_total')}[$__rate_interval]))",
                        "rejected {{record}}")), 8, 8)
    lay.add(timeseries("State store memory", "Memory the query's state stores report (RocksDB: native, outside "
                       "the JVM heap; size the driver or executors for it).",
                       (f"sum({_m('state_memory_bytes')})", "memory"), unit="bytes"), 8, 8)
    lay.add(table("Build", "Running versions.", f"{_m('build_info')}"), 8, 8)
    return _dashboard(HEALTH_UID, "fencewatch / Monitor health",
                      "The monitor itself: up, lag, batch time, decision latency, dead letters.", lay.panels, multi=True)


def dashboards() -> dict[str, dict]:
    """File name -> dashboard model."""
    return {
        f"{d['uid']}.json": d
        for d in (fleet_overview(), group_drilldown(), monitor_health())
    }


def panel_queries(dashboard: dict) -> Iterator[tuple[str, str, str]]:
    """(panel title, refId, expr) of every query in a dashboard."""
    for panel in dashboard["panels"]:
        for target in panel.get("targets", []):
            yield panel["title"], target["refId"], target["expr"]


def render(dashboard: dict) -> str:
    return json.dumps(dashboard, indent=2, ensure_ascii=False) + "\n"


def metrics_doc() -> str:
    aliases = [m for m in metrics.METRICS if m.alias_of]
    deprecated = "".join(f"| `{m.name}` | `{m.alias_of}` |\n" for m in aliases)
    return (
        "# Metrics\n\n"
        "Served by the streaming job's driver (`sinks/prometheus.py`, default `http://127.0.0.1:9464/metrics`).\n"
        "Generated from `sinks/metrics.py` by `python -m fencewatch.dashboards.generate`; do not edit the table by hand.\n\n"
        "Labels are `cluster`, `group` and closed enums only (values in parentheses; anything else is exported as the\n"
        f"last value). `group` is bounded: the `max_groups` (`sinks.metrics_top_groups`, default "
        f"{metrics.MetricsConfig().max_groups}) most active groups keep their own series, groups\n"
        "with a critical finding first, then imminent offset expiry or a firing spike; every other group is counted in\n"
        "`group=\"other\"` of its cluster. A critical finding is an alert of severity `critical` (the state decides which:\n"
        "UNSAFE_ACCEPT, DUPLICATE_ASSIGNMENT, LOG_TRUNCATION, OFFSETS_EXPIRED without members); it pins the group's own\n"
        "label until the newest event is `MetricsConfig.critical_hold_s` (default "
        f"{metrics.MetricsConfig().critical_hold_s:g} s) past the group's last one, so the\n"
        "unsafe accepts, truncations and alerts of a small group are read under its name, not `other` (more pinned\n"
        "groups than `max_groups`: the busiest of them keep labels). Series of deleted groups (state\n"
        "`Dead`, also the last status of a group the monitor forgets: contract §4.4) and of groups that lose their slot\n"
        "are removed; counters never go backwards because a folded group's increments go to `other` from the moment it\n"
        "is folded. A group promoted out of `other` is exposed at 0 first and its increments count from the next\n"
        "scrape, so `increase()` sees the increment that promoted it (a counter's first sample is no increase).\n\n"
        "Per-group counters that alert rules read (zombies, unsafe accepts, aborts, truncations, fencing errors, model\n"
        "comparisons, rebalances) are exported at 0 as soon as a group has series, so `rate()` and `increase()` see 0\n"
        "rather than nothing.\n\n"
        "**Several clusters.** `cluster` is the event's (contract §1): the bridge's `--cluster`, or the job's own\n"
        "`streaming.cluster` (`--cluster`, `FENCEWATCH_STREAMING__CLUSTER`) for what it decodes itself\n"
        "(`--source consumer-offsets`, `request-log`). Give every cluster's job and bridge its own name, and one\n"
        "Prometheus holds them all: every shipped rule and panel aggregates `by (cluster, group)` and the dashboards\n"
        "have a `cluster` variable (tests/dashboards/test_several_clusters.py). The job's own health series\n"
        "(`fencewatch_up`, batches, lag, state) describe the job, not a cluster: `job` and `instance` tell jobs apart.\n\n"
        + metrics.markdown_table()
        + "\n## Probes\n\n"
        "The same port serves `/healthz` (liveness: the query runs, its main loop reports) and `/readyz` (readiness:\n"
        "a micro-batch completed within `sinks.health_ready_triggers` trigger intervals and the input lag is within\n"
        "`sinks.health_max_lag_records`), each a short JSON answer, 200 or 503 with the reason: docs/health.md.\n"
        "\n## The bridge's metrics\n\n"
        "Served by `fencewatch bridge` in its live modes on its own port (`--metrics-port`, default\n"
        "`http://127.0.0.1:9465/metrics`), with the same `/healthz` and `/readyz` (its loop is the work, one poll of its\n"
        "source topic the unit of progress), and `fencewatch_build_info`. Every series of the bridge's own has the\n"
        "`cluster` label of its `--cluster` (default `default`), so several bridges in one Prometheus stay apart.\n\n"
        + metrics.markdown_table("bridge")
        + "\n## Deprecated names\n\n"
        "Renamed to follow Prometheus' naming conventions (a gauge holding a Unix time ends in `_timestamp_seconds`).\n"
        "The old name is still exported, with the same values, for one release (0.2.x) and removed after it:\n"
        "move dashboards, rules and recording rules to the new name now. The shipped dashboards and rules use\n"
        "the new names only.\n\n"
        "| deprecated name | use instead |\n|---|---|\n" + deprecated
    )


def outputs() -> dict[Path, str]:
    """Every generated file -> its content (docs/ files only in a source checkout)."""
    from fencewatch.dashboards import rules

    files = {DASHBOARD_DIR / name: render(d) for name, d in dashboards().items()}
    files[DASHBOARD_DIR.parents[1] / "prometheus" / "rules" / "fencewatch.rules.yml"] = rules.render()
    if (REPO_ROOT / "pyproject.toml").exists():
        files[METRICS_DOC] = metrics_doc()
        files[REPO_ROOT / "docs" / "reference-alerting.yaml"] = rules.defaults_yaml()
        files[REPO_ROOT / "deploy" / "kubernetes" / "prometheusrule.yaml"] = rules.render_prometheus_rule()
    return files


def stale() -> list[Path]:
    """Generated files whose checked-in content differs from what generation gives."""
    return [path for path, text in outputs().items() if not path.exists() or path.read_text() != text]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m fencewatch.dashboards.generate", description=__doc__.split("\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if a checked-in file is out of date")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    if args.check:
        bad = stale()
        for path in bad:
            log.error("out of date: %s (run python -m fencewatch.dashboards.generate)", path)
        return 1 if bad else 0
    for path, text in outputs().items():
        path.parent.mkdir(parents=True, exist_ok=True)
        if not path.exists() or path.read_text() != text:
            path.write_text(text)
            log.info("wrote %s", path)
    return 0


if __name__ == "__main__":
    sys.exit(main())

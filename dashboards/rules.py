"""Generate fencewatch's Prometheus alert rules from one typed configuration.

Why generated: operators set thresholds and the runbook address per deployment,
and Alertmanager only links an absolute `runbook_url`. Hand-edited copies of a
rules file drift; a generator with typed, validated settings does not. The file
checked in at `dashboards/prometheus/rules/fencewatch.rules.yml` is this
generator's output with the defaults (`generate --check` keeps it honest), and
its `promtool test rules` tests are written against those defaults.

    python -m fencewatch.dashboards.rules --print-defaults > alerting.yaml   # edit it
    python -m fencewatch.dashboards.rules --config alerting.yaml --out /etc/prometheus/rules/fencewatch.rules.yml
    python -m fencewatch.dashboards.rules --runbook-base-url https://git.example.com/kafka/fencewatch/-/blob/main/docs/alerts.md

Two families of rules: over fencewatch's own metrics (`docs/metrics.md`), and
"no tap" rules over the brokers' own `kafka.network:type=RequestMetrics,name=ErrorsPerSec`
meters as the Prometheus JMX exporter names them, for clusters where request
logging is not allowed (deploy/request-log/jmx-exporter-kafka-errors.yml).
"""

from __future__ import annotations

import argparse
import logging
import re
import sys
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Mapping

import yaml

from fencewatch.sinks import metrics

log = logging.getLogger(__name__)

PACKAGE_DIR = Path(__file__).resolve().parent
#: The JMX exporter's name for kafka.network:type=RequestMetrics,name=ErrorsPerSec (a counter per
#: request and error; the example kafka-kraft config's generic `...PerSec` rule, or ours in deploy/).
KAFKA_ERRORS = "kafka_network_requestmetrics_errors_total"
_DURATION = re.compile(r"^(\d+(ms|s|m|h|d|w|y))+$")
#: Where the rules' runbook_url points by default: docs/alerts.md, one section (anchor) per alert.
#: A repository path, not a made-up host: generate with --runbook-base-url for a clickable link.
DEFAULT_RUNBOOK_BASE_URL = "docs/alerts.md"
#: An absolute http(s) address, or a relative path (no scheme); never a fragment or whitespace.
_RUNBOOK_BASE = re.compile(r"(https?://[^/\s#]+[^\s#]*|(?![a-zA-Z][\w+.-]*:)[^\s#]+)")


def _setting(default: Any, help_text: str) -> Any:
    return field(default=default, metadata={"help": help_text})


@dataclass(frozen=True, slots=True)
class AlertRulesConfig:
    """Every setting of the generated alert rules (docs/alerts.md explains each alert)."""

    runbook_base_url: str = _setting(
        DEFAULT_RUNBOOK_BASE_URL,
        "address of docs/alerts.md (the runbooks) as your operators read it, e.g. your Git host's view of it; "
        "each rule links <this>#<alert name lower-cased>. The default is the file's path in the repository: "
        "not a link Alertmanager can open, so set it (--runbook-base-url)")
    fencing_spike_floor_per_min: float = _setting(
        20, "FencewatchFencingSpike: STALE_MEMBER_EPOCH + ILLEGAL_GENERATION answers per minute a group must exceed")
    fencing_spike_multiple: float = _setting(
        3, "FencewatchFencingSpike: ... and this many times its rate over the baseline window before")
    fencing_spike_window: str = _setting("5m", "FencewatchFencingSpike: rate window")
    fencing_spike_baseline: str = _setting("1h", "FencewatchFencingSpike: baseline window (ending where the rate window starts)")
    fencing_spike_for: str = _setting("2m", "FencewatchFencingSpike: how long the condition must hold")
    fencing_spike_keep_firing_for: str = _setting("10m", "FencewatchFencingSpike: hysteresis after the storm")
    avoidable_aborts_per_15m: float = _setting(5, "FencewatchAvoidableAborts: aborted transactions in 15m that kip1251 would have accepted")
    offsets_expiry_warning_s: float = _setting(3600, "FencewatchOffsetsExpiring: warn this many seconds before the earliest offset expires")
    monitor_stalled_after_s: float = _setting(300, "FencewatchMonitorStalled: no micro-batch completed for this long")
    monitor_job: str = _setting(
        "fencewatch", "FencewatchMonitorAbsent: the job label Prometheus gives the fencewatch job's target (the "
                      "compose stack's job_name; deploy/kubernetes' PodMonitor: the driver pod's "
                      "app.kubernetes.io/name)")
    bridge_job: str = _setting(
        "fencewatch-bridge", "FencewatchBridgeAbsent: the job label of `fencewatch bridge`'s target (compose's "
                             "job_name; deploy/kubernetes' PodMonitor: the bridge pod's app.kubernetes.io/name); "
                             "empty: no such rule (no bridge deployed, e.g. a request-log feed)")
    input_lag_records: float = _setting(1_000_000, "FencewatchInputLagging: records in the input topics not yet read")
    input_lag_for: str = _setting("10m", "FencewatchInputLagging: how long the lag must stay above the threshold")
    input_stale_after_s: float = _setting(
        900, "FencewatchInputStalled: the newest event processed is older than this (0: no such rule, e.g. a "
             "commit-only feed of a quiet cluster)")
    kafka_selector: str = _setting(
        "", "label matchers added to every query of the brokers' metrics, e.g. job=\"kafka\" (empty: all)")
    broker_commit_fencing_floor_per_min: float = _setting(
        200, "FencewatchBrokerCommitFencing: rejected commit PARTITIONS per minute on one broker (the meter counts "
             "each partition: one rejected 50-partition commit adds 50)")
    broker_member_fencing_floor_per_min: float = _setting(
        20, "FencewatchBrokerMemberFencing: FENCED_MEMBER_EPOCH heartbeat answers per minute on one broker")
    broker_fencing_multiple: float = _setting(3, "both broker rules: ... and this many times the broker's baseline rate")
    broker_fencing_for: str = _setting("5m", "both broker rules: how long the condition must hold")

    def validate(self) -> list[str]:
        problems = []
        if not _RUNBOOK_BASE.fullmatch(self.runbook_base_url):
            problems.append("runbook_base_url must be an absolute http(s) address or a relative path, without "
                            f"'#' or spaces, got {self.runbook_base_url!r}")
        for f in fields(self):
            value = getattr(self, f.name)
            if f.type == "str" and f.name.endswith(("_window", "_baseline", "_for")) and not _DURATION.match(value):
                problems.append(f"{f.name} must be a Prometheus duration like 5m or 1h30m, got {value!r}")
            if f.type == "float" and (not isinstance(value, (int, float)) or isinstance(value, bool) or value < 0):
                problems.append(f"{f.name} must be a number >= 0, got {value!r}")
        if not re.fullmatch(r'[^"\\\n]+', self.monitor_job):
            problems.append(f"monitor_job must be a label value without quotes or backslashes, got {self.monitor_job!r}")
        if not re.fullmatch(r'[^"\\\n]*', self.bridge_job):
            problems.append(f"bridge_job must be a label value without quotes or backslashes, got {self.bridge_job!r}")
        if self.kafka_selector and not re.fullmatch(r'\s*\w+\s*(=|!=|=~|!~)\s*"[^"]*"(\s*,\s*\w+\s*(=|!=|=~|!~)\s*"[^"]*")*\s*',
                                                    self.kafka_selector):
            problems.append(f"kafka_selector must be label matchers like job=\"kafka\", got {self.kafka_selector!r}")
        return problems


class AlertRulesConfigError(ValueError):
    """A bad setting; the message names it and what is valid."""


def load(file: str | Path | None = None, overrides: Mapping[str, str] | None = None) -> AlertRulesConfig:
    """Defaults, then a YAML file (a flat mapping of the fields), then `--set key=value` overrides."""
    values: dict[str, Any] = {}
    if file is not None:
        doc = yaml.safe_load(Path(file).read_text()) or {}
        if not isinstance(doc, dict):
            raise AlertRulesConfigError(f"{file}: expected a mapping of settings, got {type(doc).__name__}")
        values.update(doc)
    for key, raw in (overrides or {}).items():
        values[key] = raw if key in ("runbook_base_url", "kafka_selector", "monitor_job", "bridge_job") else yaml.safe_load(raw)
    by_name = {f.name: f for f in fields(AlertRulesConfig)}
    unknown = sorted(set(values) - set(by_name))
    if unknown:
        raise AlertRulesConfigError(f"unknown setting(s) {', '.join(unknown)}; valid: {', '.join(by_name)}")
    for key, value in values.items():
        if by_name[key].type == "str" and not isinstance(value, str):
            values[key] = str(value)
    config = AlertRulesConfig(**values)
    problems = config.validate()
    if problems:
        raise AlertRulesConfigError("; ".join(problems))
    return config


def defaults_yaml() -> str:
    """The reference settings file: every field with its default and what it does."""
    lines = ["# fencewatch alert-rule settings (python -m fencewatch.dashboards.rules --config THIS_FILE).",
             "# Generated from dashboards/rules.py; every value here is the default.", ""]
    for f in fields(AlertRulesConfig):
        lines.append(f"# {f.metadata['help']}")
        lines.append(yaml.safe_dump({f.name: f.default}, default_flow_style=False, width=1000).rstrip())
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------ rules


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else repr(float(x))


def _m(name: str) -> str:
    full = metrics.PREFIX + name
    if full not in metrics.series_names():
        raise KeyError(f"rule uses undefined metric {full}")
    return full


def _rule(c: AlertRulesConfig, alert: str, expr: str, severity: str, summary: str, description: str, *,
          for_: str | None = None, keep_firing_for: str | None = None) -> dict:
    rule: dict[str, Any] = {"alert": alert, "expr": expr}
    if for_:
        rule["for"] = for_
    if keep_firing_for:
        rule["keep_firing_for"] = keep_firing_for
    rule["labels"] = {"severity": severity}
    rule["annotations"] = {"summary": summary, "description": description,
                           "runbook_url": f"{c.runbook_base_url}#{alert.lower()}"}
    return rule


def _spike(rate_now: str, rate_before: str, by: str, floor_per_min: float, multiple: float) -> str:
    """`rate_now` above a floor AND above `multiple` x `rate_before` (no history: the floor alone).

    Both sides aggregate to the same labels; `by` names them for vector matching (empty: match on
    every label, for `sum without (...)` sides). A series created lazily (Kafka's error meters exist
    only after the first error) has no baseline, so the `unless` branch lets the floor decide alone.
    """
    on = f" on ({by})" if by else ""
    return (
        f"(\n  {rate_now} * 60 > {_num(floor_per_min)}\n)\n"
        f"and{on}\n(\n"
        f"    {rate_now}\n  > {_num(multiple)} * {rate_before}\n"
        f"  or{on}\n  (\n"
        f"      {rate_now}\n    unless{on}\n      {rate_before}\n  )\n)\n"
    )


def fencing_rules(c: AlertRulesConfig) -> list[dict]:
    errors = f'{_m("broker_errors_total")}{{error=~"{"|".join(metrics.FENCING_ERRORS)}"}}'
    now = f"sum by (cluster, group) (rate({errors}[{c.fencing_spike_window}]))"
    before = (f"sum by (cluster, group) (rate({errors}[{c.fencing_spike_baseline}] "
              f"offset {c.fencing_spike_window}))")
    floor, mult = _num(c.fencing_spike_floor_per_min), _num(c.fencing_spike_multiple)
    return [
        _rule(c, "FencewatchFencingSpike", _spike(now, before, "cluster, group", c.fencing_spike_floor_per_min,
                                                  c.fencing_spike_multiple), "warning",
              "Fencing spike in {{ $labels.cluster }}/{{ $labels.group }}",
              f"{{{{ $value | humanize }}}} STALE_MEMBER_EPOCH/ILLEGAL_GENERATION answers per minute over "
              f"{c.fencing_spike_window}, above {floor}/min and {mult}x the previous {c.fencing_spike_baseline}.",
              for_=c.fencing_spike_for, keep_firing_for=c.fencing_spike_keep_firing_for),
        _rule(c, "FencewatchAvoidableAborts",
              f"sum by (cluster, group) (increase({_m('avoidable_aborts_total')}[15m])) >= {_num(c.avoidable_aborts_per_15m)}",
              "warning", "Avoidable transaction aborts in {{ $labels.cluster }}/{{ $labels.group }}",
              "{{ $value | humanize }} aborted transactions in 15m that KIP-1251 would have accepted.", for_="5m"),
        _rule(c, "FencewatchZombieCommit", f"sum by (cluster, group) (increase({_m('zombie_commits_total')}[5m])) > 0",
              "warning", "Zombie commits in {{ $labels.cluster }}/{{ $labels.group }}",
              "A fenced member committed offsets for partitions another member now owns ({{ $value | humanize }} in 5m)."),
        _rule(c, "FencewatchUnsafeAccept", f"sum by (cluster, group) (increase({_m('unsafe_accepts_total')}[5m])) > 0",
              "critical", "Unsafe commit accepted in {{ $labels.cluster }}/{{ $labels.group }}",
              "A fencing policy accepted a commit while another member holds the partition at an epoch <= the "
              "commit's ({{ $value | humanize }} in 5m): the new owner's offsets may be overwritten."),
        _rule(c, "FencewatchModelDivergence",
              f'sum by (cluster, group) (increase({_m("model_comparisons_total")}{{outcome="diverge"}}[15m])) > 0',
              "warning", "fencewatch's model disagrees with the broker in {{ $labels.cluster }}/{{ $labels.group }}",
              "{{ $value | humanize }} commits in 15m where the broker's answer differs from the modelled policy.",
              for_="5m"),
    ]


def offsets_rules(c: AlertRulesConfig) -> list[dict]:
    return [
        _rule(c, "FencewatchOffsetsExpiring",
              f"min by (cluster, group) ({_m('group_offsets_expiry_deadline_timestamp_seconds')}) - time() "
              f"< {_num(c.offsets_expiry_warning_s)}",
              "warning", "Committed offsets of {{ $labels.cluster }}/{{ $labels.group }} expire soon",
              "The earliest committed offset expires in {{ $value | humanizeDuration }} (negative: at the next cleanup)."),
        _rule(c, "FencewatchLogTruncation",
              f'sum by (cluster, group) (increase({_m("truncations_total")}{{reason="LOG_TRUNCATION"}}[10m])) > 0',
              "critical", "Log truncation below committed offsets in {{ $labels.cluster }}/{{ $labels.group }}",
              "{{ $value | humanize }} committed offsets point past their leader epoch's end offset (KIP-320): "
              "consumed records are gone."),
        _rule(c, "FencewatchOffsetOutOfRange",
              f'sum by (cluster, group) (increase({_m("truncations_total")}{{reason="OFFSET_OUT_OF_RANGE"}}[10m])) > 0',
              "warning", "Committed offsets below the log start in {{ $labels.cluster }}/{{ $labels.group }}",
              "{{ $value | humanize }} committed offsets are below the log start offset; consumers will apply "
              "auto.offset.reset."),
    ]


def monitor_rules(c: AlertRulesConfig) -> list[dict]:
    stalled = _num(c.monitor_stalled_after_s)
    rules = [
        _rule(c, "FencewatchMonitorStalled",
              f"{_m('up')} == 0 or (time() - {_m('last_batch_timestamp_seconds')}) > {stalled}",
              "critical", "fencewatch on {{ $labels.instance }} is not completing micro-batches",
              f"No micro-batch completed for more than {stalled} s, or the job reports itself unhealthy.", for_="2m"),
        # fencewatch_up, not build_info: the bridge serves build_info too, so while it runs, a
        # gone job would leave build_info present; fencewatch_up is served by the job alone, on
        # every scrape from the first (sinks/metrics.py: exporter="job"). A gone driver pod also
        # leaves no up == 0 (its PodMonitor target disappears): absent() is what sees it.
        _rule(c, "FencewatchMonitorAbsent",
              f'absent({_m("up")}) or up{{job="{c.monitor_job}"}} == 0',
              "critical", "The fencewatch job is down or not scraped",
              f"Prometheus has no {_m('up')} series (served by the streaming job alone), or the job's "
              f"target (job=\"{c.monitor_job}\") is down: no verdict and no alert is being produced.", for_="5m"),
        _rule(c, "FencewatchDeadLetters", f"sum(increase({_m('dlq_records_total')}[10m])) > 0",
              "info", "fencewatch dead-lettered input records",
              "{{ $value | humanize }} records in 10m could not be decoded and went to fencewatch.dlq."),
        _rule(c, "FencewatchInputLagging", f"{_m('input_lag_records')} > {_num(c.input_lag_records)}",
              "warning", "fencewatch on {{ $labels.instance }} falls behind its input",
              f"{{{{ $value | humanize }}}} input records not yet read (above {_num(c.input_lag_records)} for "
              f"{c.input_lag_for}): verdicts and alerts arrive late.", for_=c.input_lag_for),
    ]
    if c.bridge_job:
        rules.append(_rule(
            c, "FencewatchBridgeAbsent",
            f'absent({_m("bridge_up")}) or up{{job="{c.bridge_job}"}} == 0',
            "critical", "fencewatch bridge is down or not scraped",
            f"Prometheus has no {_m('bridge_up')} series (served by `fencewatch bridge` alone), or the bridge's "
            f"target (job=\"{c.bridge_job}\") is down: the job's input topics get no new events.", for_="5m"))
    if c.input_stale_after_s > 0:
        # Healthy batches, but nothing new comes in: the bridge, the log shipper or the source stopped.
        rules.append(_rule(
            c, "FencewatchInputStalled",
            f"(time() - {_m('last_event_timestamp_seconds')}) > {_num(c.input_stale_after_s)} and on (instance) "
            f"{_m('up')} == 1",
            "warning", "fencewatch on {{ $labels.instance }} receives no new events",
            f"The newest event processed is {{{{ $value | humanizeDuration }}}} old (limit {_num(c.input_stale_after_s)} s) "
            "while micro-batches complete: the feed (bridge, log shipper, source topics) has stopped.", for_="5m"))
    return rules


def broker_rules(c: AlertRulesConfig) -> list[dict]:
    """No-tap rules over the brokers' ErrorsPerSec meters: per broker and request type, no group labels.

    `sum without (error)` keeps every target label (job, instance, and any cluster label the
    operator's relabelling adds) and sums the fencing errors of one request type.
    """
    sel = (c.kafka_selector.strip() + ",") if c.kafka_selector.strip() else ""
    commits = f'{KAFKA_ERRORS}{{{sel}request=~"OffsetCommit|TxnOffsetCommit",error=~"STALE_MEMBER_EPOCH|ILLEGAL_GENERATION"}}'
    members = f'{KAFKA_ERRORS}{{{sel}request="ConsumerGroupHeartbeat",error="FENCED_MEMBER_EPOCH"}}'
    mult = _num(c.broker_fencing_multiple)

    def rates(series: str) -> tuple[str, str]:
        return (f"sum without (error) (rate({series}[5m]))", f"sum without (error) (rate({series}[1h] offset 5m))")

    return [
        _rule(c, "FencewatchBrokerCommitFencing",
              _spike(*rates(commits), "", c.broker_commit_fencing_floor_per_min, c.broker_fencing_multiple),
              "warning", "Commits fenced on broker {{ $labels.instance }} ({{ $labels.request }})",
              f"{{{{ $value | humanize }}}} commit partitions per minute answered STALE_MEMBER_EPOCH/ILLEGAL_GENERATION "
              f"over 5m (the broker counts each partition), above {_num(c.broker_commit_fencing_floor_per_min)}/min "
              f"and {mult}x the previous hour. No group label: find the group with fencewatch or the broker's request log.",
              for_=c.broker_fencing_for),
        _rule(c, "FencewatchBrokerMemberFencing",
              _spike(*rates(members), "", c.broker_member_fencing_floor_per_min, c.broker_fencing_multiple),
              "warning", "Members fenced on broker {{ $labels.instance }}",
              f"{{{{ $value | humanize }}}} heartbeats per minute answered FENCED_MEMBER_EPOCH over 5m, above "
              f"{_num(c.broker_member_fencing_floor_per_min)}/min and {mult}x the previous hour: consumers are being "
              "fenced and rejoin.",
              for_=c.broker_fencing_for),
    ]


def rule_groups(c: AlertRulesConfig) -> list[dict]:
    return [
        {"name": "fencewatch.fencing", "rules": fencing_rules(c)},
        {"name": "fencewatch.offsets", "rules": offsets_rules(c)},
        {"name": "fencewatch.monitor", "rules": monitor_rules(c)},
        {"name": "fencewatch.brokers", "rules": broker_rules(c)},
    ]


class _Dumper(yaml.SafeDumper):
    def increase_indent(self, flow: bool = False, indentless: bool = False) -> None:
        return super().increase_indent(flow, False)  # indent list items under their key


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.Node:
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style="|" if "\n" in value else None)


_Dumper.add_representer(str, _str)

HEADER = """\
# fencewatch alert rules. GENERATED by `python -m fencewatch.dashboards.rules` (dashboards/rules.py):
# change the settings (--config / --set, docs/alerts.md "Settings"), not this file.
# Runbooks: docs/alerts.md. Unit tests: ../tests/fencewatch.rules.test.yml (promtool test rules,
# written for the default settings). Thresholds of the fencewatch.* groups are per (cluster, group);
# group="other" holds the groups beyond the exporter's max_groups. fencewatch.brokers reads the
# brokers' own ErrorsPerSec meters (JMX exporter rule: deploy/request-log/jmx-exporter-kafka-errors.yml).
"""


WHY = {
    "FencewatchFencingSpike": (
        "A group's STALE_MEMBER_EPOCH + ILLEGAL_GENERATION rate is above an absolute floor AND above a multiple of",
        "its own rate over the baseline before (no history: the floor alone). Mirrors state/spike.py's",
        "FENCING_SPIKE (which alerts on Kafka); keep_firing_for is the hysteresis that stops a storm",
        "hovering around the threshold from flapping."),
    "FencewatchAvoidableAborts": (
        "Transactions aborted only because the member's epoch was stale: KIP-1251 (Kafka 4.3 consumer",
        "groups, 4.2 streams groups) would have accepted every partition of these commits."),
    "FencewatchInputStalled": (
        "Batches complete but nothing new arrives: the feed stopped, not the job (FencewatchMonitorStalled).",),
    "FencewatchBrokerCommitFencing": (
        "No tap: the brokers' own kafka.network:type=RequestMetrics,name=ErrorsPerSec meters. They count",
        "every partition of a commit response (a rejected 50-partition commit adds 50), exist only after the",
        "first error of their kind (no baseline yet: the floor alone), and carry no group label.",),
}


def render(c: AlertRulesConfig | None = None) -> str:
    c = c or AlertRulesConfig()
    body = yaml.dump({"groups": rule_groups(c)}, Dumper=_Dumper, sort_keys=False, width=1000,
                     default_flow_style=False, allow_unicode=True)
    out = []
    for line in body.splitlines():
        if line.startswith("  - name: ") and out and out[-1] != "groups:":
            out.append("")
        name = line.strip().removeprefix("- alert: ")
        if line.lstrip().startswith("- alert: "):
            indent = line[: len(line) - len(line.lstrip())]
            if out and not out[-1].strip().endswith("rules:"):
                out.append("")
            out.extend(f"{indent}# {text}" for text in WHY.get(name, ()))
        out.append(line)
    return HEADER + "\n".join(out) + "\n"


PROMETHEUS_RULE_HEADER = """\
# fencewatch alert rules as a PrometheusRule of the Prometheus operator (monitoring.coreos.com/v1).
# GENERATED by `python -m fencewatch.dashboards.rules --format prometheusrule` (dashboards/rules.py)
# from the same settings as dashboards/prometheus/rules/fencewatch.rules.yml: change the settings
# (--config / --set, e.g. --set monitor_job=... for another scrape job label), not this file.
"""


def render_prometheus_rule(c: AlertRulesConfig | None = None, *, name: str = "fencewatch",
                           namespace: str = "fencewatch", labels: Mapping[str, str] | None = None) -> str:
    """The rule groups of :func:`render` inside a PrometheusRule object, for clusters where the
    Prometheus operator loads rules from the API instead of from files."""
    c = c or AlertRulesConfig()
    metadata: dict[str, Any] = {"name": name, "namespace": namespace,
                                "labels": {"app.kubernetes.io/part-of": "fencewatch", **(labels or {})}}
    doc = {"apiVersion": "monitoring.coreos.com/v1", "kind": "PrometheusRule", "metadata": metadata,
           "spec": {"groups": rule_groups(c)}}
    return PROMETHEUS_RULE_HEADER + yaml.dump(doc, Dumper=_Dumper, sort_keys=False, width=1000,
                                              default_flow_style=False, allow_unicode=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m fencewatch.dashboards.rules", description=__doc__.split("\n")[0])
    parser.add_argument("--config", help="YAML file of settings (see --print-defaults)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override one setting")
    parser.add_argument("--runbook-base-url", metavar="URL",
                        help="where operators read docs/alerts.md; each runbook_url is URL#<alert name lower-cased> "
                             f"(the same as --set runbook_base_url=URL; default: {DEFAULT_RUNBOOK_BASE_URL})")
    parser.add_argument("--out", help="write the rules here (default: stdout)")
    parser.add_argument("--print-defaults", action="store_true", help="print every setting with its default")
    parser.add_argument("--format", choices=("rules", "prometheusrule"), default="rules",
                        help="a Prometheus rules file (default), or a PrometheusRule object for the Prometheus operator")
    parser.add_argument("--name", default="fencewatch", help="--format prometheusrule: metadata.name")
    parser.add_argument("--namespace", default="fencewatch", help="--format prometheusrule: metadata.namespace")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    if args.print_defaults:
        sys.stdout.write(defaults_yaml())
        return 0
    overrides = {}
    for item in args.set:
        key, sep, value = item.partition("=")
        if not sep:
            log.error("--set expects KEY=VALUE, got %r", item)
            return 2
        overrides[key.strip()] = value
    if args.runbook_base_url is not None:
        overrides["runbook_base_url"] = args.runbook_base_url
    try:
        config = load(args.config, overrides)
    except (AlertRulesConfigError, OSError, yaml.YAMLError, TypeError) as exc:
        log.error("alert rules: %s", exc)
        return 2
    text = (render(config) if args.format == "rules"
            else render_prometheus_rule(config, name=args.name, namespace=args.namespace))
    if args.out:
        Path(args.out).write_text(text)
        log.info("wrote %s", args.out)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())

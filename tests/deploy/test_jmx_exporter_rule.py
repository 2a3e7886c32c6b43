"""The JMX exporter rule the no-tap alerts assume (deploy/request-log/jmx-exporter-kafka-errors.yml).

jmx_exporter (a Java agent on the brokers) cannot run here, so this checks its documented matching
on the bean strings it builds (`domain<key=value, ...><>attribute`, the whole string must match,
Java regex = Python `re` for these patterns): our rule and the generic PerSec rule of jmx_exporter's
examples/kafka-kraft-3_0_0.yml give the same series, which is the one the rules and panels query.
"""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from fencewatch.dashboards import generate, rules

ROOT = Path(__file__).resolve().parents[2]
OURS = yaml.safe_load((ROOT / "deploy" / "request-log" / "jmx-exporter-kafka-errors.yml").read_text())["rules"]
# jmx_exporter examples/kafka-kraft-3_0_0.yml, "Generic per-second counters with 0-2 key/value pairs"
GENERIC = {"pattern": r"kafka.(\w+)<type=(.+), name=(.+)PerSec\w*, (.+)=(.+), (.+)=(.+)><>Count",
           "name": "kafka_$1_$2_$3_total", "labels": {"$4": "$5", "$6": "$7"}}


def bean(request: str, error: str) -> str:
    return f"kafka.network<type=RequestMetrics, name=ErrorsPerSec, request={request}, error={error}><>Count"


def apply(rule: dict, text: str, lowercase_name: bool) -> tuple[str, dict] | None:
    match = re.fullmatch(rule["pattern"], text)
    if not match:
        return None

    def sub(template: str) -> str:
        return re.sub(r"\$(\d+)", lambda m: match.group(int(m.group(1))), template)

    name = sub(rule["name"])
    return (name.lower() if lowercase_name else name), {sub(k): sub(v) for k, v in rule["labels"].items()}


def test_our_rule_and_the_generic_example_rule_name_the_meter_alike():
    for request in ("OffsetCommit", "TxnOffsetCommit", "ConsumerGroupHeartbeat"):
        for error in ("STALE_MEMBER_EPOCH", "ILLEGAL_GENERATION", "FENCED_MEMBER_EPOCH", "NONE"):
            expected = (rules.KAFKA_ERRORS, {"request": request, "error": error})
            assert apply(OURS[0], bean(request, error), lowercase_name=False) == expected
            assert apply(OURS[0], bean(request, error), lowercase_name=True) == expected
            assert apply(GENERIC, bean(request, error), lowercase_name=True) == expected


def test_our_rule_keeps_only_the_three_apis():
    assert apply(OURS[0], bean("Produce", "NOT_LEADER_OR_FOLLOWER"), lowercase_name=False) is None
    assert apply(OURS[0], bean("Heartbeat", "ILLEGAL_GENERATION"), lowercase_name=False) is None


def test_rules_and_panels_query_that_series():
    assert rules.KAFKA_ERRORS in rules.render()
    fleet = generate.dashboards()[f"{generate.FLEET_UID}.json"]
    assert any(rules.KAFKA_ERRORS in expr for _, _, expr in generate.panel_queries(fleet))

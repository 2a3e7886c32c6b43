"""``fencewatch report`` on a simulated trace, cross-checked with what ``fencewatch replay`` says
of the same trace (its class and alert counts) and with the exporter's request rules (the
``fencewatch_aborted_transactions_total`` / ``fencewatch_avoidable_aborts_total`` facts)."""
from __future__ import annotations

import json
import re
from collections import Counter

from fencewatch.sinks.prometheus import summarize_verdicts

from report_helpers import RULES, fencewatch


def _counts(stderr: str, label: str) -> dict[str, int]:
    line = next(x for x in stderr.splitlines() if x.strip().startswith(label))
    return {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", line)}


def test_classes_and_alerts_equal_replays_own_counts(mixed_run):
    s = mixed_run["summary"]
    t = s["totals"]
    classes = _counts(mixed_run["replay_stderr"], "verdicts by class:")
    assert {k: v for k, v in t["classes"].items() if v} == classes
    assert t["verdicts"] == sum(classes.values())
    # an avoidable verdict is one strict rejects and kip1251 accepts (contract §3)
    assert t["avoidable"]["kip1251"]["verdicts"] == classes["avoidable"] > 0
    assert t["zombie"]["verdicts"] == classes["zombie"] > 0
    alerts = _counts(mixed_run["replay_stderr"], "alerts by kind:")
    reported = {k: v for k, v in s["alerts"]["by_cluster"][0]["counts"].items() if v}
    assert reported == alerts
    assert s["truncation"]["counts"]["LOG_TRUNCATION"] == alerts["LOG_TRUNCATION"]
    assert s["expiry"]["counts"]["forecasts"] == alerts["OFFSETS_EXPIRING"]
    assert s["expiry"]["counts"]["expired_alerts"] == alerts["OFFSETS_EXPIRED"]


def test_requests_and_aborts_equal_the_exporters_rules(mixed_run):
    verdicts = [json.loads(line) for line in mixed_run["verdicts"].open()]
    t = mixed_run["summary"]["totals"]
    assert t["requests"] == len({v["event_id"] for v in verdicts})
    assert t["rejected"]["requests"] == len({v["event_id"] for v in verdicts if v["strict"] != "NONE"})
    _, facts, bad = summarize_verdicts(verdicts, "strict")
    assert not bad
    aborted = sum(n for f, n in facts.items() if f.aborted)
    avoidable = sum(n for f, n in facts.items() if f.avoidable)
    assert t["aborted_transactions"]["requests"] == aborted > 0
    assert t["aborted_transactions"]["saved"]["kip1251"] == avoidable > 0
    per_group = Counter()
    for f, n in facts.items():
        per_group[f.group_id] += n * f.aborted
    assert {g["group_id"]: g["aborted_transactions"]["requests"] for g in mixed_run["summary"]["groups"]
            if g["aborted_transactions"]["requests"]} == {g: n for g, n in per_group.items() if n}


def test_events_run_through_replay_give_the_same_numbers(mixed_run, tmp_path):
    fencewatch("report", "--events", str(mixed_run["trace"]), *RULES, "--out", str(tmp_path / "r.html"))
    s = json.loads((tmp_path / "r.json").read_text())
    ref = mixed_run["summary"]
    assert s["totals"] == ref["totals"]
    assert s["groups"] == ref["groups"] and s["series"] == ref["series"]
    assert s["expiry"] == ref["expiry"] and s["truncation"] == ref["truncation"]
    codes = [x["code"] for x in s["limits"]]
    # the simulator's member_assignment events carry no assignment epochs (a 4.2 coordinator)
    assert "EPOCHS_DERIVED" in codes and "EPOCH_SOURCE_UNKNOWN" not in codes


def test_the_command_prints_the_headline_with_policy_and_range(mixed_run):
    out = mixed_run["report_stdout"]
    t = mixed_run["summary"]["totals"]
    assert f"rejected under strict (the brokers' check): {t['rejected']['requests']:,} requests" in out
    assert f"kip1251 {t['avoidable']['kip1251']['requests']:,}" in out
    assert mixed_run["summary"]["range"]["from"] in out and mixed_run["summary"]["range"]["to"] in out

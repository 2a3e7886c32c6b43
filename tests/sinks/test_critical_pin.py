"""A group with a critical finding keeps its own `group` label while the finding lasts
(sinks/group_limiter.py, sinks/prometheus.py; issue 46 item 7), and its first increment is not
lost to Prometheus when it comes out of `other` (promtool runs the shipped rules on real scrapes)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from fencewatch.sinks.metrics import OTHER, GroupLimiter, MetricsConfig
from fencewatch.sinks.prometheus import MetricsSink
from test_prometheus_sink import BUILD, scrape

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "dashboards" / "prometheus" / "rules" / "fencewatch.rules.yml"
T0 = 1_800_000_000_000  # event time of the first batch, ms


def k(group: str) -> tuple[str, str]:
    return ("east", group)


def make_sink(**config) -> MetricsSink:
    return MetricsSink(MetricsConfig(**config), clock=lambda: T0 / 1000, build_labels=BUILD)


def groups_of(data, name: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for (n, labels), v in data.items():
        if n == name:
            group = dict(labels)["group"]
            out[group] = out.get(group, 0.0) + v
    return out


def busy(n: int = 1000) -> dict:
    return {("east", "busy", "heartbeat", "heartbeats"): n}


def unsafe_verdict(group: str, ts: int) -> dict:
    return {
        "event_id": f"e-{ts}", "ts": ts, "cluster": "east", "group_id": group, "member_id": "m1",
        "kind": "commit", "client_epoch": 5, "broker_epoch": 5, "topic": "orders", "partition": 0,
        "assignment_epoch": 5, "revocation_epoch": 0, "strict": "NONE", "member_revocation": "NONE",
        "assignment_epoch_check": "NONE", "kip1251": "NONE", "class": "accepted", "unsafe": True,
        "owner_member_id": "m2", "broker_error": None, "model_agrees": None,
    }


def alert(kind: str, group: str, severity: str, ts: int | None, **details) -> dict:
    return {"alert_id": f"{kind}-{group}-{ts}", "ts": ts, "cluster": "east", "group_id": group, "kind": kind,
            "severity": severity, "summary": kind, "details": details}


# ------------------------------------------------------------------ limiter


def test_limiter_pinned_group_outranks_urgent_and_busy_groups_and_is_not_displaced():
    lim = GroupLimiter(max_groups=1, decay=1.0)
    lim.observe({k("busy"): 1000})
    promoted, demoted = lim.observe({k("busy"): 1000, k("critical"): 1}, pinned=[k("critical")])
    assert (promoted, demoted) == ({k("critical")}, {k("busy")})
    # neither an urgent group (expiring offsets, a spike) nor a far busier one takes the slot
    assert lim.observe({k("busy"): 10**6, k("expiring"): 0}, urgent=[k("expiring")], pinned=[k("critical")]) == (set(), set())
    assert lim.label(k("critical")) == "critical" and lim.label(k("busy")) == OTHER
    # the pin over, an urgent group wins the slot at once
    assert lim.observe({k("expiring"): 0}, urgent=[k("expiring")]) == ({k("expiring")}, {k("critical")})


def test_limiter_folded_means_seen_and_counted_in_other():
    lim = GroupLimiter(max_groups=1)
    lim.observe({k("a"): 10, k("b"): 1})
    assert not lim.folded(k("a")) and lim.folded(k("b")) and not lim.folded(k("never-seen"))


# ------------------------------------------------------------------ the sink


def test_a_critical_finding_pins_the_group_while_it_lasts_then_it_folds_back():
    sink = make_sink(max_groups=1, critical_hold_s=600, activity_decay=0.5)
    sink.add_batch(events={**busy(), ("east", "quiet", "heartbeat", "heartbeats"): 1}, last_event_ts_ms=T0)
    assert set(groups_of(scrape(sink), "fencewatch_events_total")) == {"busy", "other"}

    ts = T0 + 60_000
    sink.add_batch(events=busy(), verdicts=[unsafe_verdict("quiet", ts)],
                   alerts=[alert("UNSAFE_ACCEPT", "quiet", "critical", ts)], last_event_ts_ms=ts)
    scrape(sink)  # exposes quiet's zeros
    data = scrape(sink)
    assert groups_of(data, "fencewatch_unsafe_accepts_total") == {"quiet": 1, OTHER: 0}  # not "other"
    assert groups_of(data, "fencewatch_alerts_total") == {"quiet": 1}

    # the finding lasts: a far busier group does not take the slot within critical_hold_s
    for minute in range(2, 11):
        sink.add_batch(events=busy(10**5), last_event_ts_ms=T0 + minute * 60_000)
        data = scrape(sink)
        assert "quiet" in groups_of(data, "fencewatch_unsafe_accepts_total"), f"minute {minute}"
        assert "busy" not in groups_of(data, "fencewatch_events_total")

    # past it (event time 11m+ > 1m + 600 s) the busier group wins the slot back: quiet folds
    sink.add_batch(events=busy(10**5), last_event_ts_ms=T0 + 12 * 60_000)
    data = scrape(sink)
    assert "quiet" not in groups_of(data, "fencewatch_unsafe_accepts_total")
    assert groups_of(data, "fencewatch_events_total")["busy"] == 0  # out of "other": 0 first
    other_before = groups_of(data, "fencewatch_events_total")[OTHER]
    sink.add_batch(events={("east", "quiet", "heartbeat", "heartbeats"): 3}, last_event_ts_ms=T0 + 13 * 60_000)
    data = scrape(sink)
    assert "quiet" not in groups_of(data, "fencewatch_events_total")
    assert groups_of(data, "fencewatch_events_total")[OTHER] == other_before + 3
    assert groups_of(data, "fencewatch_events_total")["busy"] == 10**5


def test_a_zombie_commit_pins_though_a_warning_and_other_warnings_do_not():
    sink = make_sink(max_groups=1, critical_hold_s=600, activity_decay=0.5)
    sink.add_batch(events={**busy(), ("east", "zombie", "heartbeat", "heartbeats"): 1,
                           ("east", "oor", "heartbeat", "heartbeats"): 1}, last_event_ts_ms=T0)
    sink.add_batch(events=busy(), alerts=[alert("OFFSET_OUT_OF_RANGE", "oor", "warning", T0)], last_event_ts_ms=T0)
    assert set(groups_of(scrape(sink), "fencewatch_alerts_total")) == {OTHER}  # a plain warning stays in "other"
    sink.add_batch(events=busy(), alerts=[alert("ZOMBIE_COMMIT", "zombie", "warning", T0)], last_event_ts_ms=T0)
    scrape(sink)  # the promoted group's zeros first
    sink.add_batch(events=busy(), alerts=[alert("ZOMBIE_COMMIT", "zombie", "warning", T0 + 1)], last_event_ts_ms=T0)
    assert groups_of(scrape(sink), "fencewatch_alerts_total").get("zombie", 0) >= 1


def test_a_newer_critical_finding_extends_the_pin():
    sink = make_sink(max_groups=1, critical_hold_s=600, activity_decay=0.5)
    sink.add_batch(events={**busy(), ("east", "quiet", "heartbeat", "heartbeats"): 1}, last_event_ts_ms=T0)
    sink.add_batch(events=busy(), alerts=[alert("LOG_TRUNCATION", "quiet", "critical", T0)], last_event_ts_ms=T0)
    # a second critical alert 9 minutes later: the pin now lasts until 19m
    sink.add_batch(events=busy(), alerts=[alert("DUPLICATE_ASSIGNMENT", "quiet", "critical", T0 + 9 * 60_000)],
                   last_event_ts_ms=T0 + 9 * 60_000)
    sink.add_batch(events=busy(10**5), last_event_ts_ms=T0 + 15 * 60_000)
    assert "quiet" in groups_of(scrape(sink), "fencewatch_truncations_total")
    sink.add_batch(events=busy(10**5), last_event_ts_ms=T0 + 20 * 60_000)
    assert "quiet" not in groups_of(scrape(sink), "fencewatch_truncations_total")


def test_a_critical_alert_without_a_usable_ts_pins_from_the_batch_event_time():
    sink = make_sink(max_groups=1, critical_hold_s=600, activity_decay=0.5)
    sink.add_batch(events={**busy(), ("east", "quiet", "heartbeat", "heartbeats"): 1}, last_event_ts_ms=T0)
    sink.add_batch(alerts=[alert("UNSAFE_ACCEPT", "quiet", "critical", None)], last_event_ts_ms=T0 + 60_000)
    sink.add_batch(alerts=[alert("UNSAFE_ACCEPT", "quiet", "critical", bad) for bad in ("not-a-number", float("inf"))],
                   last_event_ts_ms=T0 + 120_000)
    sink.add_batch(events=busy(10**5), last_event_ts_ms=T0 + 11 * 60_000)
    assert "quiet" in groups_of(scrape(sink), "fencewatch_alerts_total")  # until 2m + 600 s
    sink.add_batch(events=busy(10**5), last_event_ts_ms=T0 + 13 * 60_000)
    assert "quiet" not in groups_of(scrape(sink), "fencewatch_alerts_total")


def test_a_promoted_group_shows_zero_first_and_its_increments_on_the_next_scrape():
    """The first-increment hazard: the increment that promoted a group out of "other" must be an
    increase Prometheus can see, so the group's series are exposed at 0 before they count."""
    sink = make_sink(max_groups=1)
    sink.add_batch(events={**busy(), ("east", "quiet", "heartbeat", "heartbeats"): 1}, last_event_ts_ms=T0)
    sink.add_batch(verdicts=[unsafe_verdict("quiet", T0)] * 2,
                   alerts=[alert("UNSAFE_ACCEPT", "quiet", "critical", T0)], last_event_ts_ms=T0)
    first = scrape(sink)
    assert groups_of(first, "fencewatch_unsafe_accepts_total") == {"quiet": 0, OTHER: 0}
    assert groups_of(first, "fencewatch_alerts_total") == {"quiet": 0}
    # a batch before the next scrape adds to what is held; nothing goes to "other"
    sink.add_batch(verdicts=[unsafe_verdict("quiet", T0)], last_event_ts_ms=T0)
    second = scrape(sink)
    assert groups_of(second, "fencewatch_unsafe_accepts_total") == {"quiet": 3, OTHER: 0}
    assert groups_of(second, "fencewatch_alerts_total") == {"quiet": 1}
    # from then on increments count at once
    sink.add_batch(verdicts=[unsafe_verdict("quiet", T0)], last_event_ts_ms=T0)
    assert groups_of(scrape(sink), "fencewatch_unsafe_accepts_total") == {"quiet": 4, OTHER: 0}


def test_a_group_deleted_while_pinned_and_held_leaves_nothing_behind():
    sink = make_sink(max_groups=1)
    sink.add_batch(events={**busy(), ("east", "quiet", "heartbeat", "heartbeats"): 1}, last_event_ts_ms=T0)
    sink.add_batch(verdicts=[unsafe_verdict("quiet", T0)], alerts=[alert("UNSAFE_ACCEPT", "quiet", "critical", T0)],
                   deleted_groups=[("east", "quiet")], last_event_ts_ms=T0)
    scrape(sink)
    data = scrape(sink)
    assert "quiet" not in groups_of(data, "fencewatch_unsafe_accepts_total")
    assert sink._pinned_until == {} and sink._held == {}


def test_a_negative_hold_is_refused():
    with pytest.raises(ValueError, match=r"critical_hold_s=-1; valid: >= 0"):
        MetricsSink(MetricsConfig(critical_hold_s=-1))


# ------------------------------------------------------------------ promtool


def _input_series(scrapes: list[dict], names: tuple[str, ...]) -> list[dict]:
    """promtool input_series, one per label set seen, one value per scrape ('_': absent then)."""
    label_sets = sorted({(n, labels) for data in scrapes for (n, labels) in data if n in names},
                        key=lambda x: (x[0], sorted(x[1])))
    out = []
    for name, labels in label_sets:
        selector = ",".join(f'{key}="{val}"' for key, val in sorted(labels))
        values = " ".join(_num(data[(name, labels)]) if (name, labels) in data else "_" for data in scrapes)
        out.append({"series": f"{name}{{{selector}}}", "values": values})
    return out


def _num(v: float) -> str:
    return str(int(v)) if float(v).is_integer() else repr(v)


def test_promtool_the_shipped_rules_fire_on_the_pinned_group_including_its_first_increment(tmp_path):
    """Scrapes one minute apart of a sink where a small group, counted in "other", gets an unsafe
    accept and a log truncation: the shipped FencewatchUnsafeAccept and FencewatchLogTruncation
    fire for that group by name (old code: for `other`, or not at all, as the promoted series
    started at 1 and increase() saw nothing)."""
    promtool = shutil.which("promtool")
    assert promtool, "promtool not found: install Debian's prometheus package (`make system-deps`)"
    sink = make_sink(max_groups=1, critical_hold_s=3600)
    scrapes = []
    sink.add_batch(events={**busy(), ("east", "quiet", "heartbeat", "heartbeats"): 1}, last_event_ts_ms=T0)
    scrapes.append(scrape(sink))  # 0m
    ts = T0 + 60_000
    sink.add_batch(events=busy(), verdicts=[unsafe_verdict("quiet", ts)],
                   alerts=[alert("UNSAFE_ACCEPT", "quiet", "critical", ts),
                           alert("LOG_TRUNCATION", "quiet", "critical", ts)], last_event_ts_ms=ts)
    for minute in range(1, 8):  # 1m .. 7m, the busy group ever busier
        scrapes.append(scrape(sink))
        sink.add_batch(events=busy(10**5), last_event_ts_ms=T0 + (minute + 1) * 60_000)
    names = ("fencewatch_unsafe_accepts_total", "fencewatch_truncations_total")
    series = _input_series(scrapes, names)
    assert any('group="quiet"' in s["series"] for s in series)

    def fired(alertname: str, summary: str, description: str, runbook: str) -> list[dict]:
        return [{"exp_labels": {"severity": "critical", "cluster": "east", "group": "quiet"},
                 "exp_annotations": {"summary": summary, "description": description,
                                     "runbook_url": f"docs/alerts.md#{runbook}"}}]

    test = {
        "rule_files": [str(RULES)],
        "evaluation_interval": "1m",
        "tests": [{
            "interval": "1m",
            "input_series": series,
            "alert_rule_test": [
                {"eval_time": "1m", "alertname": "FencewatchUnsafeAccept", "exp_alerts": []},
                {"eval_time": "3m", "alertname": "FencewatchUnsafeAccept", "exp_alerts": fired(
                    "FencewatchUnsafeAccept", "Unsafe commit accepted in east/quiet",
                    "A fencing policy accepted a commit while another member holds the partition at an epoch"
                    " <= the commit's (1 in 5m): the new owner's offsets may be overwritten.",
                    "fencewatchunsafeaccept")},
                {"eval_time": "3m", "alertname": "FencewatchLogTruncation", "exp_alerts": fired(
                    "FencewatchLogTruncation", "Log truncation below committed offsets in east/quiet",
                    "1 committed offsets point past their leader epoch's end offset (KIP-320): consumed records are gone.",
                    "fencewatchlogtruncation")},
            ],
        }],
    }
    path = tmp_path / "pin.test.yml"
    path.write_text(yaml.safe_dump(test, sort_keys=False))
    result = subprocess.run([promtool, "test", "rules", str(path)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr + "\n" + path.read_text()

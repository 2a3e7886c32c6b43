"""sinks/metrics.py: naming rules, docs/metrics.md in sync, the group-label limiter."""

from __future__ import annotations

import re
from pathlib import Path

from fencewatch.dashboards import generate
from fencewatch.sinks import metrics as m
from fencewatch.sinks.metrics import OTHER, GroupLimiter

ROOT = Path(__file__).resolve().parents[2]
ALLOWED_FREE_LABELS = {"cluster", "group"}  # bounded by configuration and the limiter


def test_names_follow_prometheus_conventions():
    names = [spec.name for spec in m.METRICS]
    assert len(names) == len(set(names))
    for spec in m.METRICS:
        assert re.fullmatch(r"fencewatch_[a-z][a-z0-9_]*", spec.name), spec.name
        assert spec.type in (m.COUNTER, m.GAUGE, m.HISTOGRAM)
        assert spec.name.endswith("_total") == (spec.type == m.COUNTER), spec.name
        # base units only
        assert not re.search(r"_(ms|milliseconds|minutes|hours|bytes_kb|percent)(_|$)", spec.name), spec.name
        if spec.type == m.HISTOGRAM:
            assert spec.name.endswith("_seconds") and list(spec.buckets) == sorted(spec.buckets)
        assert spec.help and not spec.help[0].islower() and spec.help.endswith("."), spec.name


def test_labels_are_cluster_group_or_closed_enums():
    for spec in m.METRICS:
        if spec.name == "fencewatch_build_info":
            continue  # constant per process
        for label in spec.labels:
            assert label in ALLOWED_FREE_LABELS or label in spec.enums, (spec.name, label)
        for label, values in spec.enums.items():
            assert label in spec.labels and len(values) == len(set(values)) and len(values) <= 16
        forbidden = {"member", "member_id", "offset", "partition", "topic", "instance_id", "transactional_id"}
        assert not forbidden & set(spec.labels), spec.name


def test_enums_match_the_rules_vocabulary():
    from fencewatch.state.model import AlertKind, CommitClass, Policy

    assert set(m.POLICIES) == {p.value for p in Policy}
    assert set(m.CLASSES) == {c.value for c in CommitClass}
    assert set(m.ALERT_KINDS) == {k.value for k in AlertKind} | {OTHER}
    assert set(m.TRUNCATION_REASONS) <= set(m.ALERT_KINDS) and set(m.LIFECYCLE_KINDS) <= set(m.ALERT_KINDS)
    assert set(m.FENCING_ERRORS) <= set(m.BROKER_ERRORS)
    assert m.closed("nope", m.RESULTS) == OTHER and m.closed("nope", m.EVENT_TYPES) == "unknown"
    assert m.error_name(113) == "STALE_MEMBER_EPOCH" and m.error_name(0) is None and m.error_name(999) == OTHER


def test_docs_metrics_md_lists_every_metric_as_defined():
    doc = (ROOT / "docs" / "metrics.md").read_text()
    assert doc == generate.metrics_doc(), "docs/metrics.md is stale: run python -m fencewatch.dashboards.generate"
    rows = re.findall(r"^\| `(fencewatch_[a-z0-9_]+)` \| (\w+) \| (.*?) \| (.*) \|$", doc, re.M)
    current = [s for s in m.METRICS if not s.alias_of]  # deprecated aliases have their own section
    assert [(name, kind) for name, kind, _, _ in rows] == [(s.name, s.type) for s in current]
    for (name, _, labels, help_text), spec in zip(rows, current):
        assert re.findall(r"`(\w+)`", labels) == list(spec.labels), name
        assert help_text.replace("\\|", "|") == spec.help


def test_spec_lookup_names_the_valid_metrics():
    assert m.spec("up").name == "fencewatch_up"
    try:
        m.spec("nope")
    except KeyError as exc:
        assert "fencewatch_up" in str(exc)
    else:
        raise AssertionError("no KeyError")


# ------------------------------------------------------------------ limiter


def k(group: str, cluster: str = "c") -> tuple[str, str]:
    return (cluster, group)


def test_limiter_labels_the_top_n_and_folds_the_rest():
    lim = GroupLimiter(max_groups=2)
    promoted, demoted = lim.observe({k("a"): 10, k("b"): 5, k("c"): 1})
    assert promoted == {k("a"), k("b")} and demoted == set()
    assert [lim.label(k(g)) for g in "abc"] == ["a", "b", OTHER]
    assert lim.label(("c", "")) == ""


def test_limiter_swaps_only_past_the_margin():
    lim = GroupLimiter(max_groups=1, decay=1.0, swap_margin=2.0)
    lim.observe({k("a"): 10})
    assert lim.observe({k("b"): 15}) == (set(), set())  # 15 < 2 x 10
    assert lim.observe({k("b"): 10}) == ({k("b")}, {k("a")})  # 25 > 2 x 10
    assert lim.label(k("a")) == OTHER


def test_limiter_keeps_idle_labelled_groups_until_displaced():
    lim = GroupLimiter(max_groups=2, decay=0.5)
    lim.observe({k("a"): 4, k("b"): 4})
    for _ in range(50):
        lim.observe({})
    assert lim.labelled == {k("a"), k("b")}


def test_limiter_urgent_groups_outrank_busy_ones_and_seen_groups_take_free_slots():
    lim = GroupLimiter(max_groups=2)
    lim.observe({k("busy"): 1000, k("idle"): 0})
    assert lim.labelled == {k("busy"), k("idle")}
    lim2 = GroupLimiter(max_groups=1)
    lim2.observe({k("busy"): 1000})
    promoted, demoted = lim2.observe({k("busy"): 1000}, urgent=[k("expiring")])
    assert promoted == {k("expiring")} and demoted == {k("busy")}
    # a seen-but-idle group never displaces anybody
    assert lim2.observe({k("quiet"): 0}, urgent=[k("expiring")]) == (set(), set())
    # once no longer urgent, the busy group wins its slot back
    assert lim2.observe({k("busy"): 1000}) == ({k("busy")}, {k("expiring")})


def test_limiter_forget_and_zero_budget():
    lim = GroupLimiter(max_groups=1)
    lim.observe({k("a"): 1})
    assert lim.forget(k("a")) is True and lim.forget(k("a")) is False
    assert lim.label(k("a")) == OTHER
    none = GroupLimiter(max_groups=0)
    none.observe({k("a"): 100})
    assert none.label(k("a")) == OTHER

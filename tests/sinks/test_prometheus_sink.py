"""MetricsSink (sinks/prometheus.py): what a batch turns into, as a scrape sees it."""

from __future__ import annotations

import shutil
import subprocess
import urllib.request

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families

from fencewatch.sinks.metrics import MetricsConfig
from fencewatch.sinks.prometheus import MetricsSink
from fencewatch.state.model import Verdict

BUILD = {"version": "0.0.test", "python_version": "3.11", "pyspark_version": "4.3.0"}


class Clock:
    def __init__(self, t: float = 1_800_000_000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def make_sink(**config) -> MetricsSink:
    return MetricsSink(MetricsConfig(**config), clock=Clock(), build_labels=BUILD)


def scrape(sink: MetricsSink) -> dict[tuple[str, frozenset], float]:
    out = {}
    for family in text_string_to_metric_families(sink.render()):
        for s in family.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def value(sink_or_scrape, name: str, **labels) -> float | None:
    data = scrape(sink_or_scrape) if isinstance(sink_or_scrape, MetricsSink) else sink_or_scrape
    return data.get((name, frozenset(labels.items())))


def series(data, name: str) -> dict[frozenset, float]:
    return {labels: v for (n, labels), v in data.items() if n == name}


def verdict(group="g1", kind="commit", event_id="e1", cls="accepted", strict="NONE", kip1251="NONE",
            member_revocation=None, assignment=None, cluster="east", **extra) -> dict:
    return {
        "event_id": event_id, "ts": 1_000, "cluster": cluster, "group_id": group, "member_id": "m1",
        "kind": kind, "client_epoch": 5, "broker_epoch": 5, "topic": "orders", "partition": 0,
        "assignment_epoch": 5, "revocation_epoch": 0, "strict": strict,
        "member_revocation": member_revocation or kip1251, "assignment_epoch_check": assignment or kip1251,
        "kip1251": kip1251, "class": cls, "unsafe": False, "owner_member_id": None,
        "broker_error": None, "model_agrees": None, **extra,
    }


def status(group="g1", cluster="east", **extra) -> dict:
    base = {
        "cluster": cluster, "group_id": group, "protocol": "consumer", "members": 3, "partitions_held": 6,
        "group_epoch": 7, "max_member_epoch": 7, "expiry_deadline_ms": None, "rebalances_total": 2,
        "state": "Stable",
    }
    return {**base, **extra}


def alert(kind="ZOMBIE_COMMIT", group="g1", severity="warning", cluster="east", **details) -> dict:
    return {"alert_id": f"{kind}-{group}", "ts": 1, "cluster": cluster, "group_id": group, "kind": kind,
            "severity": severity, "summary": kind, "details": details}


# ------------------------------------------------------------------ verdicts


def test_each_verdict_is_counted_once_per_policy_with_its_class():
    sink = make_sink()
    sink.add_batch(verdicts=[
        verdict(cls="avoidable", strict="STALE_MEMBER_EPOCH", kip1251="NONE", member_revocation="STALE_MEMBER_EPOCH"),
        verdict(event_id="e2", cls="zombie", strict="STALE_MEMBER_EPOCH", kip1251="STALE_MEMBER_EPOCH"),
        verdict(event_id="e3"),
    ])
    data = scrape(sink)
    judged = series(data, "fencewatch_commits_judged_total")
    common = {"cluster": "east", "group": "g1", "kind": "commit"}
    assert judged == {
        frozenset({**common, "policy": "strict", "result": "STALE_MEMBER_EPOCH", "class": "avoidable"}.items()): 1,
        frozenset({**common, "policy": "member_revocation", "result": "STALE_MEMBER_EPOCH", "class": "avoidable"}.items()): 1,
        frozenset({**common, "policy": "assignment_epoch", "result": "NONE", "class": "avoidable"}.items()): 1,
        frozenset({**common, "policy": "kip1251", "result": "NONE", "class": "avoidable"}.items()): 1,
        **{frozenset({**common, "policy": p, "result": "STALE_MEMBER_EPOCH", "class": "zombie"}.items()): 1
           for p in ("strict", "member_revocation", "assignment_epoch", "kip1251")},
        **{frozenset({**common, "policy": p, "result": "NONE", "class": "accepted"}.items()): 1
           for p in ("strict", "member_revocation", "assignment_epoch", "kip1251")},
    }
    assert value(data, "fencewatch_zombie_commits_total", cluster="east", group="g1", kind="commit") == 1
    assert value(data, "fencewatch_zombie_commits_total", cluster="east", group="g1", kind="txn_commit") == 0


def test_state_model_verdict_tuples_are_accepted_like_dicts():
    as_dict = verdict(cls="zombie", strict="STALE_MEMBER_EPOCH", kip1251="STALE_MEMBER_EPOCH", unsafe=True,
                      broker_error="STALE_MEMBER_EPOCH", model_agrees=False)
    fields = {k: v for k, v in as_dict.items() if k != "class"}
    as_tuple = Verdict(**fields, cls="zombie", warming_up=False)
    a, b = make_sink(), make_sink()
    a.add_batch(verdicts=[as_dict])
    b.add_batch(verdicts=[as_tuple])
    assert scrape(a) == scrape(b)
    assert value(a, "fencewatch_unsafe_accepts_total", cluster="east", group="g1", kind="commit") == 1
    assert value(a, "fencewatch_model_comparisons_total", cluster="east", group="g1", kind="commit", outcome="diverge") == 1


def test_broker_errors_and_aborts_count_requests_not_partitions():
    sink = make_sink()
    # one TxnOffsetCommit for two partitions, rejected by the broker; kip1251 accepts both
    both = [verdict(kind="txn_commit", event_id="t1", cls="avoidable", strict="ILLEGAL_GENERATION",
                    broker_error="ILLEGAL_GENERATION", partition=p) for p in (0, 1)]
    # another rejected for two partitions, kip1251 rejects one of them: aborted, not avoidable
    mixed = [
        verdict(kind="txn_commit", event_id="t2", cls="avoidable", strict="ILLEGAL_GENERATION",
                broker_error="ILLEGAL_GENERATION"),
        verdict(kind="txn_commit", event_id="t2", cls="zombie", strict="ILLEGAL_GENERATION",
                kip1251="ILLEGAL_GENERATION", broker_error="ILLEGAL_GENERATION", partition=1),
    ]
    # an OffsetCommit for three partitions answered STALE_MEMBER_EPOCH
    stale = [verdict(event_id="c1", cls="avoidable", strict="STALE_MEMBER_EPOCH", broker_error="STALE_MEMBER_EPOCH",
                     partition=p) for p in range(3)]
    sink.add_batch(verdicts=both + mixed + stale)
    data = scrape(sink)
    g = {"cluster": "east", "group": "g1"}
    assert value(data, "fencewatch_broker_errors_total", **g, api="TxnOffsetCommit", error="ILLEGAL_GENERATION") == 2
    assert value(data, "fencewatch_broker_errors_total", **g, api="OffsetCommit", error="STALE_MEMBER_EPOCH") == 1
    assert value(data, "fencewatch_aborted_transactions_total", **g) == 2
    assert value(data, "fencewatch_avoidable_aborts_total", **g) == 1


def test_without_a_broker_answer_the_broker_policy_decides_aborts():
    v = verdict(kind="txn_commit", event_id="t1", cls="avoidable", strict="ILLEGAL_GENERATION")
    strict, kip = make_sink(), make_sink(broker_policy="kip1251")
    strict.add_batch(verdicts=[v])
    kip.add_batch(verdicts=[v])
    g = {"cluster": "east", "group": "g1"}
    assert value(strict, "fencewatch_aborted_transactions_total", **g) == 1
    assert value(strict, "fencewatch_avoidable_aborts_total", **g) == 1
    assert value(kip, "fencewatch_aborted_transactions_total", **g) == 0
    # the broker said NONE: nothing aborted whatever the model thinks
    answered = make_sink()
    answered.add_batch(verdicts=[dict(v, broker_error="NONE")])
    assert value(answered, "fencewatch_aborted_transactions_total", **g) == 0


def test_heartbeat_errors_by_name_or_code():
    sink = make_sink()
    sink.add_batch(heartbeat_errors={("east", "g1", 110): 3, ("east", "g1", "UNKNOWN_MEMBER_ID"): 2, ("east", "g1", 0): 9})
    data = scrape(sink)
    hb = {"cluster": "east", "group": "g1", "api": "ConsumerGroupHeartbeat"}
    assert value(data, "fencewatch_broker_errors_total", **hb, error="FENCED_MEMBER_EPOCH") == 3
    assert value(data, "fencewatch_broker_errors_total", **hb, error="UNKNOWN_MEMBER_ID") == 2
    assert value(data, "fencewatch_broker_errors_total", **hb, error="NONE") is None


# ------------------------------------------------------------------ events, alerts, status


def test_events_by_type_and_source_with_closed_values():
    sink = make_sink()
    sink.add_batch(events=[
        {"cluster": "east", "group_id": "g1", "type": "offset_commit", "source": "offsets", "count": 5},
        {"cluster": None, "group_id": None, "type": "partition_epochs", "source": "offsets", "count": 2},
        {"cluster": "east", "group_id": "g1", "type": "brand_new_type", "source": "my-topic", "count": 1},
    ])
    data = scrape(sink)
    assert value(data, "fencewatch_events_total", cluster="east", group="g1", type="offset_commit", source="offsets") == 5
    assert value(data, "fencewatch_events_total", cluster="default", group="", type="partition_epochs", source="offsets") == 2
    assert value(data, "fencewatch_events_total", cluster="east", group="g1", type="unknown", source="other") == 1


def test_alerts_counted_by_kind_resolved_notices_not_counted_and_firing_tracked():
    sink = make_sink()
    sink.add_batch(alerts=[
        alert("FENCING_SPIKE", status="firing"),
        alert("LOG_TRUNCATION", severity="critical"),
        alert("OFFSET_OUT_OF_RANGE"),
        alert("TXN_ABORT_STORM", group="g2", status="firing"),
    ])
    data = scrape(sink)
    g = {"cluster": "east", "group": "g1"}
    assert value(data, "fencewatch_alerts_total", **g, kind="FENCING_SPIKE", severity="warning") == 1
    assert value(data, "fencewatch_truncations_total", **g, reason="LOG_TRUNCATION") == 1
    assert value(data, "fencewatch_truncations_total", **g, reason="OFFSET_OUT_OF_RANGE") == 1
    assert value(data, "fencewatch_alerts_firing", **g, kind="FENCING_SPIKE") == 1
    assert value(data, "fencewatch_alerts_firing", **g, kind="TXN_ABORT_STORM") == 0
    sink.add_batch(alerts=[alert("FENCING_SPIKE", severity="info", status="resolved")])
    data = scrape(sink)
    assert value(data, "fencewatch_alerts_firing", **g, kind="FENCING_SPIKE") == 0
    assert value(data, "fencewatch_alerts_total", **g, kind="FENCING_SPIKE", severity="warning") == 1
    assert value(data, "fencewatch_alerts_total", **g, kind="FENCING_SPIKE", severity="info") is None


def test_group_status_gauges_and_rebalance_counter():
    sink = make_sink()
    sink.add_batch(group_status=[status(expiry_deadline_ms=1_800_003_600_500, state="Empty", members=0)])
    sink.add_batch(group_status=[status(rebalances_total=5, state="Stable")])
    data = scrape(sink)
    g = {"cluster": "east", "group": "g1"}
    assert value(data, "fencewatch_group_members", **g, protocol="consumer") == 3
    assert value(data, "fencewatch_group_partitions_held", **g) == 6
    assert value(data, "fencewatch_group_epoch", **g) == 7
    assert value(data, "fencewatch_group_max_member_epoch", **g) == 7
    assert value(data, "fencewatch_group_state", **g, state="Stable") == 1
    assert value(data, "fencewatch_group_state", **g, state="Empty") is None
    assert value(data, "fencewatch_group_rebalances_total", **g) == 5
    # the second status has no deadline: nothing expires any more
    assert series(data, "fencewatch_group_offsets_expiry_deadline_timestamp_seconds") == {}
    assert value(data, "fencewatch_groups", cluster="east", state="Stable") == 1
    sink.add_batch(group_status=[status(expiry_deadline_ms=1_800_003_600_500)])
    assert value(sink, "fencewatch_group_offsets_expiry_deadline_timestamp_seconds", **g) == 1_800_003_600.5


def test_dead_or_deleted_groups_lose_their_series():
    sink = make_sink()
    sink.add_batch(
        verdicts=[verdict(group="g1"), verdict(group="g2", event_id="x")],
        group_status=[status("g1"), status("g2")],
    )
    sink.add_batch(group_status=[status("g1", state="Dead")], deleted_groups=[("east", "g2")])
    data = scrape(sink)
    groups = {dict(labels).get("group") for (_, labels) in data}
    assert "g1" not in groups and "g2" not in groups
    assert value(data, "fencewatch_groups", cluster="east", state="Stable") is None
    sink.add_batch(verdicts=[verdict(group="g3")])
    sink.remove_group("east", "g3")
    assert "g3" not in {dict(labels).get("group") for (_, labels) in scrape(sink)}


# ------------------------------------------------------------------ cardinality


def test_groups_beyond_max_groups_fold_into_other():
    sink = make_sink(max_groups=2)
    sink.add_batch(
        events={("east", g, "offset_commit", "offsets"): n for g, n in (("big", 100), ("mid", 50), ("s1", 3), ("s2", 2))},
        group_status=[status(g, members=m) for g, m in (("big", 10), ("mid", 5), ("s1", 1), ("s2", 2))],
    )
    data = scrape(sink)
    events = {dict(k)["group"]: v for k, v in series(data, "fencewatch_events_total").items()}
    assert events == {"big": 100, "mid": 50, "other": 5}
    assert value(data, "fencewatch_group_members", cluster="east", group="other", protocol="consumer") == 3
    assert value(data, "fencewatch_group_epoch", cluster="east", group="other") is None
    assert value(data, "fencewatch_exporter_groups", cluster="east", disposition="labelled") == 2
    assert value(data, "fencewatch_exporter_groups", cluster="east", disposition="other") == 2


def test_a_group_with_offsets_about_to_expire_outranks_busier_groups():
    sink = make_sink(max_groups=1)
    sink.add_batch(events={("east", "busy", "heartbeat", "heartbeats"): 1000}, last_event_ts_ms=1_800_000_000_000)
    sink.add_batch(
        events={("east", "busy", "heartbeat", "heartbeats"): 1000},
        group_status=[status("empty", state="Empty", members=0, expiry_deadline_ms=1_800_000_600_000)],
    )
    data = scrape(sink)
    assert value(data, "fencewatch_group_offsets_expiry_deadline_timestamp_seconds", cluster="east", group="empty") == 1_800_000_600
    assert {dict(k)["group"] for k in series(data, "fencewatch_events_total")} == {"other"}


def test_demoted_group_series_go_and_counters_never_decrease():
    sink = make_sink(max_groups=1, swap_margin=2.0, activity_decay=0.5)
    sink.add_batch(events={("east", "a", "offset_commit", "offsets"): 10})
    assert value(sink, "fencewatch_events_total", cluster="east", group="a", type="offset_commit", source="offsets") == 10
    # b is busier, but not 2x a's decayed score yet: no swap
    sink.add_batch(events={("east", "b", "offset_commit", "offsets"): 8})
    data = scrape(sink)
    assert value(data, "fencewatch_events_total", cluster="east", group="a", type="offset_commit", source="offsets") == 10
    assert value(data, "fencewatch_events_total", cluster="east", group="other", type="offset_commit", source="offsets") == 8
    # much busier: b takes the slot, a's series go, other keeps what it had; b comes out of
    # "other", so its series show 0 first and its 100 from the next scrape (increase() sees it)
    sink.add_batch(events={("east", "b", "offset_commit", "offsets"): 100})
    data = scrape(sink)
    assert value(data, "fencewatch_events_total", cluster="east", group="b", type="offset_commit", source="offsets") == 0
    assert value(data, "fencewatch_events_total", cluster="east", group="a", type="offset_commit", source="offsets") is None
    assert value(data, "fencewatch_events_total", cluster="east", group="other", type="offset_commit", source="offsets") == 8
    assert value(sink, "fencewatch_events_total", cluster="east", group="b", type="offset_commit", source="offsets") == 100


@settings(max_examples=40, deadline=None)
@given(st.lists(st.dictionaries(st.sampled_from("abcdef"), st.integers(0, 40), max_size=6), min_size=1, max_size=12))
def test_property_every_series_is_monotone_while_it_exists(batches):
    sink = make_sink(max_groups=2, activity_decay=0.5, swap_margin=1.5)
    previous: dict = {}
    total = 0
    for batch in batches:
        sink.add_batch(events={("east", g, "offset_commit", "offsets"): n for g, n in batch.items()})
        total += sum(batch.values())
        now = series(scrape(sink), "fencewatch_events_total")
        for labels, v in now.items():
            # a series scraped twice in a row never goes down (a demoted group's series
            # vanishes for at least one scrape, which Prometheus reads as a new series)
            assert v >= previous.get(labels, 0)
        other = [labels for labels in previous if dict(labels)["group"] == "other"]
        assert all(labels in now for labels in other)  # "other" never disappears
        assert sum(now.values()) <= total
        assert len({dict(k)["group"] for k in now} - {"other"}) <= 2
        previous = now


# ------------------------------------------------------------------ health, robustness


def test_batch_ids_make_retries_idempotent():
    sink = make_sink()
    assert sink.add_batch(batch_id=3, verdicts=[verdict()]) is True
    assert sink.add_batch(batch_id=3, verdicts=[verdict()]) is False
    assert sink.add_batch(batch_id=2, verdicts=[verdict()]) is False
    assert sink.add_batch(batch_id=4, verdicts=[verdict()]) is True
    data = scrape(sink)
    assert value(data, "fencewatch_batches_total") == 2
    assert value(data, "fencewatch_commits_judged_total", cluster="east", group="g1", kind="commit",
                 policy="strict", result="NONE", **{"class": "accepted"}) == 2


def test_malformed_records_are_counted_and_logged_not_fatal(caplog):
    sink = make_sink()
    sink.add_batch(
        verdicts=[{"cluster": "east"}, verdict(group=""), verdict()],
        alerts=[42, alert()],
        group_status=[{"cluster": "east"}, status(members="three")],
        events=[{"cluster": "east"}],
    )
    data = scrape(sink)
    assert value(data, "fencewatch_exporter_rejected_records_total", record="verdict") == 2
    assert value(data, "fencewatch_exporter_rejected_records_total", record="alert") == 1
    assert value(data, "fencewatch_exporter_rejected_records_total", record="status") == 2
    assert value(data, "fencewatch_exporter_rejected_records_total", record="count") == 1
    assert value(data, "fencewatch_alerts_total", cluster="east", group="g1", kind="ZOMBIE_COMMIT", severity="warning") == 1
    assert "malformed verdict record not counted" in caplog.text


def test_up_follows_health_and_staleness_and_monitor_gauges():
    clock = Clock()
    sink = MetricsSink(MetricsConfig(stale_after_s=60), clock=clock, build_labels=BUILD)
    assert value(sink, "fencewatch_up") == 1
    clock.t += 61
    assert value(sink, "fencewatch_up") == 0  # never completed a batch
    assert value(sink, "fencewatch_state_rows") is None  # no state reported yet: no made-up zero
    sink.add_batch(batch_duration_s=0.7, decision_latencies_s=[0.2, 3.0], input_lag_records=12,
                   state_rows=40, state_memory_bytes=5_000_000, last_event_ts_ms=1_799_999_999_000, dlq={"MISSING_FIELD:group_id": 2, "SOMETHING_NEW": 1})
    data = scrape(sink)
    assert value(data, "fencewatch_up") == 1
    assert value(data, "fencewatch_last_batch_timestamp_seconds") == clock.t
    assert value(data, "fencewatch_last_event_timestamp_seconds") == 1_799_999_999
    assert value(data, "fencewatch_input_lag_records") == 12
    assert value(data, "fencewatch_state_rows") == 40
    assert value(data, "fencewatch_state_memory_bytes") == 5_000_000
    sink.add_batch(batch_duration_s=0.7, state_rows=41)  # a report without memory keeps the last one
    assert value(sink, "fencewatch_state_rows") == 41 and value(sink, "fencewatch_state_memory_bytes") == 5_000_000
    assert value(data, "fencewatch_batch_duration_seconds_bucket", le="1.0") == 1
    assert value(data, "fencewatch_batch_duration_seconds_bucket", le="0.5") == 0
    assert value(data, "fencewatch_decision_latency_seconds_count") == 2
    assert value(data, "fencewatch_decision_latency_seconds_sum") == 3.2
    assert value(data, "fencewatch_dlq_records_total", reason="MISSING_FIELD") == 2
    assert value(data, "fencewatch_dlq_records_total", reason="other") == 1
    assert value(data, "fencewatch_build_info", **BUILD) == 1
    sink.set_healthy(False, "batch failed")
    assert value(sink, "fencewatch_up") == 0


def test_invalid_config_is_refused_with_every_problem():
    with pytest.raises(ValueError, match="max_groups=-1.*unknown policy 'lenient'; valid: strict"):
        MetricsSink(MetricsConfig(max_groups=-1, broker_policy="lenient"))


def test_http_endpoint_serves_the_snapshot():
    sink = make_sink()
    host, port = sink.start(port=0)
    try:
        sink.add_batch(verdicts=[verdict()])
        with urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=5) as response:
            body = response.read().decode()
        assert response.status == 200
        assert 'fencewatch_commits_judged_total{class="accepted",cluster="east"' in body
        assert "fencewatch_up 1.0" in body
    finally:
        sink.close()


def test_exposition_passes_promtool_lint():
    promtool = shutil.which("promtool")
    assert promtool, "promtool not found: install Debian's prometheus package (make system-deps)"
    sink = make_sink()
    sink.add_batch(verdicts=[verdict()], group_status=[status(expiry_deadline_ms=1)], batch_duration_s=0.1,
                   alerts=[alert("FENCING_SPIKE", status="firing")], input_lag_records=0, last_event_ts_ms=1)
    result = subprocess.run([promtool, "check", "metrics"], input=sink.render(), capture_output=True, text=True)
    assert result.returncode == 0 and not result.stdout.strip() and not result.stderr.strip(), result.stdout + result.stderr


def test_executor_summary_equals_per_verdict_counting():
    """Pre-aggregating CommitVerdicts where they are made gives the same counts as per-verdict dicts."""
    from collections import Counter

    from fencewatch.sinks.prometheus import summarize_commit_verdicts, summarize_verdicts
    from fencewatch.sinks.jsonl import verdict_dict
    from fencewatch.streaming.runtime.replay import judge_events

    events = [
        {"type": "member_assignment", "ts": 1, "group_id": "g", "member_id": "A", "member_epoch": 1,
         "assigned": [{"topic": "t", "partitions": [0, 1]}]},
        {"type": "member_assignment", "ts": 2, "group_id": "g", "member_id": "A", "member_epoch": 2,
         "assigned": [{"topic": "t", "partitions": [0, 1]}]},
        {"type": "txn_offset_commit", "ts": 3, "group_id": "g", "member_id": "A", "member_epoch": 1,
         "offsets": [{"topic": "t", "partition": 0, "offset": 1}, {"topic": "t", "partition": 1, "offset": 1}],
         "error_code": 22},
        {"type": "offset_commit", "ts": 4, "group_id": "g", "member_id": "B", "member_epoch": 2,
         "offsets": [{"topic": "t", "partition": 0, "offset": 1}], "error_code": 25},
        {"type": "offset_commit", "ts": 5, "group_id": "g", "member_id": "A", "member_epoch": 2,
         "offsets": [{"topic": "t", "partition": 1, "offset": 2}]},
    ]
    res = judge_events(events)
    for policy in ("strict", "kip1251"):
        shapes, requests, bad = summarize_verdicts([verdict_dict(v) for v in res.verdict_records], policy)
        shapes2, requests2 = summarize_commit_verdicts(res.commit_verdicts, policy)
        assert bad == [] and shapes == shapes2 and requests == requests2
        assert sum(shapes.values()) == 4 and sum(requests.values()) == 2


@pytest.mark.parametrize("profile_name", ["mixed", "zombie-storm", "eos-heavy", "rolling-restart"])
def test_executor_summary_equals_per_verdict_counting_on_simulated_traces(profile_name):
    """The same on whole simulated traces: uniform and mixed requests, several topics per
    request, transactional aborts; every profile that judges commits differently."""
    from dataclasses import replace

    from fencewatch.sim.world import SimConfig, simulate
    from fencewatch.sim.profiles import profile
    from fencewatch.sinks.jsonl import verdict_dict
    from fencewatch.sinks.prometheus import summarize_commit_verdicts, summarize_verdicts
    from fencewatch.state.model import UniformParts
    from fencewatch.streaming.runtime.replay import judge_events

    events = simulate(SimConfig(knobs=replace(profile(profile_name), groups=8), seed=3, duration_ms=None,
                                max_events=6_000))
    res = judge_events(events)
    kinds = {type(cv.parts) is UniformParts for cv in res.commit_verdicts if len(cv.parts) > 1}
    assert kinds == {True, False} or profile_name != "mixed"  # both kinds of request are exercised
    for policy in ("strict", "member_revocation", "assignment_epoch", "kip1251"):
        shapes, requests, bad = summarize_verdicts([verdict_dict(v) for v in res.verdict_records], policy)
        shapes2, requests2 = summarize_commit_verdicts(res.commit_verdicts, policy)
        assert bad == [] and shapes == shapes2 and requests == requests2
        assert sum(shapes.values()) == len(res.verdict_records) > 0


def test_a_renamed_metric_is_also_exported_under_its_deprecated_name_for_one_release():
    sink = make_sink()
    sink.add_batch(group_status=[status(expiry_deadline_ms=1_800_003_600_500, state="Empty", members=0)])
    data = scrape(sink)
    new, old = "fencewatch_group_offsets_expiry_deadline_timestamp_seconds", "fencewatch_group_offsets_expiry_deadline_seconds"
    assert series(data, new) and series(data, old) == series(data, new)
    sink.add_batch(group_status=[status(state="Stable")])  # nothing expires: both go together
    assert series(scrape(sink), old) == series(scrape(sink), new) == {}


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(st.sampled_from([0.0, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0]),  # on a bound
                          st.floats(min_value=-1.0, max_value=100.0, allow_nan=False)), max_size=60))
def test_a_batch_of_latencies_lands_in_the_buckets_one_observation_each_would(values):
    from fencewatch.sinks.prometheus import _Histogram

    bounds = (0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
    each, batch = _Histogram(bounds), _Histogram(bounds)
    for v in values:
        each.observe(v)
    batch.observe_all(values)
    assert batch.counts == each.counts and batch.n == each.n
    assert batch.total == pytest.approx(each.total)


@pytest.mark.parametrize("bad", ["soon", None])
def test_a_malformed_latency_is_rejected_alone(bad):
    """None too, which numpy would read as NaN (the batch's latencies are counted in numpy)."""
    sink = MetricsSink(MetricsConfig(port=0))
    sink.add_batch(decision_latencies_s=[0.2, bad, 3.0])
    data = scrape(sink)
    assert value(data, "fencewatch_decision_latency_seconds_count") == 2
    assert value(data, "fencewatch_decision_latency_seconds_sum") == 3.2
    assert value(data, "fencewatch_exporter_rejected_records_total", record="count") == 1


def test_the_writers_numpy_latencies_land_in_their_buckets():
    import numpy as np

    sink = MetricsSink(MetricsConfig(port=0))
    sink.add_batch(decision_latencies_s=np.array([0.2, 1.0, 1.0, 7.5]))
    data = scrape(sink)
    assert value(data, "fencewatch_decision_latency_seconds_count") == 4
    assert value(data, "fencewatch_decision_latency_seconds_sum") == pytest.approx(9.7)
    assert value(data, "fencewatch_decision_latency_seconds_bucket", le="1.0") == 3  # on the bound: counted
    assert value(data, "fencewatch_exporter_rejected_records_total", record="count") in (0, None)


def test_a_simple_group_is_exported_under_its_own_protocol_without_a_warning(caplog):
    """A group that only commits (assign() consumers, admin commits) is `simple` in the model
    (state.status): a protocol value of its own, not "not in the closed set" on every batch."""
    from fencewatch.state.config import RulesConfig
    from fencewatch.state.status import status as group_status
    from fencewatch.streaming.runtime.replay import judge_events

    res = judge_events([{"type": "offset_commit", "ts": 1, "group_id": "batch-job", "member_id": "",
                         "member_epoch": -1, "offsets": [{"topic": "t", "partition": 0, "offset": 9}]}])
    statuses = [group_status(g, RulesConfig()) for g in res.groups]
    assert [s["protocol"] for s in statuses] == ["simple"]
    sink = make_sink()
    caplog.set_level("WARNING", logger="fencewatch.sinks.prometheus")
    sink.add_batch(group_status=statuses)
    assert "not in the closed set" not in caplog.text
    assert value(sink, "fencewatch_group_members", cluster="default", group="batch-job", protocol="simple") == 0

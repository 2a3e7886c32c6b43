"""``fencewatch report --compare``: a 4.2 run's predicted avoidable fences against the fences a
4.3 broker did avoid in the same scenario (issue 35, item 5), on summaries made by hand."""
from __future__ import annotations

import json

from report_helpers import T0, I, N, S, fencewatch, verdict

from fencewatch.sinks.report.compare import compare
from fencewatch.sinks.report.assemble import summarize
from fencewatch.sinks.report.summary import ReportAggregator


def summary(records, policy: str) -> dict:
    agg = ReportAggregator(policy)
    agg.add_verdicts(records)
    return summarize(agg)


def before() -> dict:
    """The 4.2 run: e1 and e4 fenced only for a stale epoch, e2 stale, e3 accepted, e5 answered
    COORDINATOR_NOT_AVAILABLE (transient: not a fence)."""
    return summary([
        verdict("e1", T0, "g1", "m1", "commit", 0, (S, N, N, N), "avoidable", broker_error=S, agrees=True),
        verdict("e1", T0, "g1", "m1", "commit", 1, (S, N, N, N), "avoidable", broker_error=S, agrees=True),
        verdict("e2", T0 + 1, "g1", "m2", "commit", 0, (S, S, S, S), "stale", broker_error=S, agrees=True),
        verdict("e3", T0 + 2, "g1", "m1", "commit", 0, (N, N, N, N), "accepted", broker_error=N, agrees=True),
        verdict("e4", T0 + 3, "g2", "m3", "txn_commit", 0, (I, N, N, N), "avoidable", broker_error=I, agrees=True),
        verdict("e5", T0 + 4, "g2", "m3", "commit", 0, (N, N, N, N), "accepted",
                broker_error="COORDINATOR_NOT_AVAILABLE"),
    ], "strict")


def after(avoided_e4: bool = True) -> dict:
    """The 4.3 run of the same scenario, judged with --broker-policy kip1251: e1 now accepted; e4
    accepted too, unless ``avoided_e4`` is False (a race in real timing fenced it for real)."""
    e4 = (verdict("e4", T0 + 3, "g2", "m3", "txn_commit", 0, (I, N, N, N), "avoidable", broker_error=N, agrees=True)
          if avoided_e4 else
          verdict("e4", T0 + 3, "g2", "m3", "txn_commit", 0, (I, I, I, I), "stale", broker_error=I, agrees=True))
    return summary([
        verdict("e1", T0, "g1", "m1", "commit", 0, (S, N, N, N), "avoidable", broker_error=N, agrees=True),
        verdict("e2", T0 + 1, "g1", "m2", "commit", 0, (S, S, S, S), "stale", broker_error=S, agrees=True),
        verdict("e3", T0 + 2, "g1", "m1", "commit", 0, (N, N, N, N), "accepted", broker_error=N, agrees=True),
        e4,
    ], "kip1251")


def test_prediction_matches_what_the_43_broker_avoided():
    c = compare(before(), after())
    assert c["totals"] == {"broker_fences_before": 3, "model_strict": 3, "predicted_avoided": 2,
                           "predicted_remaining": 1, "aborted_before": 1, "requests_before": 5,
                           "broker_fences_after": 1, "aborted_after": 0, "requests_after": 4,
                           "observed_avoided": 2, "difference": 0}
    rows = {r["group_id"]: r for r in c["groups"]}
    assert (rows["g1"]["predicted_avoided"], rows["g1"]["observed_avoided"]) == (1, 1)
    assert (rows["g2"]["predicted_avoided"], rows["g2"]["observed_avoided"]) == (1, 1)
    assert c["problems"] == []


def test_a_fence_the_43_broker_still_gave_shows_as_a_difference():
    c = compare(before(), after(avoided_e4=False))
    assert (c["totals"]["predicted_avoided"], c["totals"]["observed_avoided"], c["totals"]["difference"]) == (2, 1, -1)
    assert next(r for r in c["groups"] if r["group_id"] == "g2")["difference"] == -1


def test_runs_without_broker_answers_are_named(tmp_path):
    plain = summary([verdict("e1", T0, "g1", "m1", "commit", 0, (S, N, N, N), "avoidable")], "strict")
    c = compare(plain, after())
    assert any("before run's verdicts carry no broker answers" in p for p in c["problems"])
    assert any("only in the after run" in p for p in c["problems"])


def test_the_command_prints_and_writes_the_comparison(tmp_path):
    (tmp_path / "b.json").write_text(json.dumps(before()))
    (tmp_path / "a.json").write_text(json.dumps(after()))
    done = fencewatch("report", "--compare", str(tmp_path / "b.json"), str(tmp_path / "a.json"),
                      "--json", str(tmp_path / "c.json"))
    last = done.stdout.strip().splitlines()
    row = next(x for x in last if x.startswith("all "))
    assert row.split() == ["all", "3", "3", "2", "1", "1", "2", "0"]
    assert json.loads((tmp_path / "c.json").read_text())["totals"]["observed_avoided"] == 2

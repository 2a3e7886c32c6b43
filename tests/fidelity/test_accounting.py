"""bench/fidelity_matrix.py's confusion matrix and accounting, and bench/fidelity.py's fixed list
of scripted cases, on hand-made verdicts and request-log lines (no broker, no Spark)."""
from __future__ import annotations

import json
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.fidelity import SCRIPTED_CASES, expected_cases, fixed_cases  # noqa: E402
from bench.fidelity_matrix import LoggedPartition, account, logged_partitions, traffic_of  # noqa: E402

LOAD, SCRIPTED = "fw-seed1-load-g0", "fw-seed1-kip1251-g"


def verdict(eid: str, partition: int, broker: str | None, strict: str, *, group: str = LOAD, agrees=...,
            warming: bool = False, kip1251: str | None = None) -> dict:
    """A verdict record (contract §8.1) with the fields the accounting reads. ``agrees`` defaults to
    what the job writes for a one-partition request."""
    if agrees is ...:
        agrees = None if broker is None or warming else broker == strict
    return {"event_id": eid, "group_id": group, "topic": "t", "partition": partition, "broker_error": broker,
            "strict": strict, "kip1251": kip1251 or strict, "model_agrees": agrees, "warming_up": warming}


def logged(eid: str, partition: int, answer: str | None, *, group: str = LOAD, decoded: bool = True):
    return LoggedPartition(eid, group, "t", partition, answer, decoded)


def judged(verdicts: list[dict], policy: str = "strict"):
    logs = [logged(v["event_id"], v["partition"], v["broker_error"], group=v["group_id"]) for v in verdicts]
    return account(logs, verdicts, [], policy)


def test_recall_and_precision_count_rejections_only():
    vs = [verdict(f"e{i}", 0, "NONE", "NONE") for i in range(10)]
    vs += [verdict("r1", 0, "STALE_MEMBER_EPOCH", "STALE_MEMBER_EPOCH"),  # caught
           verdict("r2", 0, "ILLEGAL_GENERATION", "NONE"),  # missed
           verdict("r3", 0, "ILLEGAL_GENERATION", "NONE"),  # missed
           verdict("r4", 0, "UNKNOWN_MEMBER_ID", "STALE_MEMBER_EPOCH"),  # caught, with another code
           verdict("f1", 0, "NONE", "STALE_MEMBER_EPOCH")]  # a false rejection
    m = judged(vs).traffic["organic"]
    assert (m.judged, m.broker, m.model, m.both) == (15, 4, 3, 2)
    assert m.recall == 2 / 4 and m.precision == 2 / 3
    assert m.agreement == 11 / 15 and m.accept_all == 11 / 15
    assert m.by_code["ILLEGAL_GENERATION"] == [2, 0, 0]
    assert m.by_code["UNKNOWN_MEMBER_ID"] == [1, 0, 1]  # rejected, not with the broker's code
    assert m.by_code["NONE"] == [11, 10, 1]
    assert m.model_codes["STALE_MEMBER_EPOCH"] == 3


def test_no_rejections_is_not_perfect_recall():
    m = judged([verdict("e", 0, "NONE", "NONE")]).all
    assert math.isnan(m.recall) and math.isnan(m.precision) and m.accept_all == 1.0


def test_a_request_is_rejected_on_its_first_bad_partition():
    """Kafka answers every partition of a request the same; the model's answer for a partition is its
    request's, not the partition's own policy field (issue 44, item 6's class bug)."""
    vs = [verdict("e", 0, "STALE_MEMBER_EPOCH", "NONE", agrees=True),
          verdict("e", 1, "STALE_MEMBER_EPOCH", "STALE_MEMBER_EPOCH", agrees=True)]
    a = judged(vs)
    m = a.traffic["organic"]
    assert (m.broker, m.model, m.both) == (2, 2, 2) and a.inconsistent == 0
    a = judged([dict(v, model_agrees=False) for v in vs])  # a verdict that says otherwise is caught
    assert a.inconsistent == 2 and not a.reconciled


def test_the_policy_of_the_version_is_read():
    vs = [verdict("e", 0, "NONE", "STALE_MEMBER_EPOCH", kip1251="NONE", agrees=True)]
    assert judged(vs, "kip1251").all.model == 0
    assert judged(vs, "strict").all.model == 1


def test_organic_and_scripted_traffic_are_told_apart_by_group():
    assert traffic_of("fw-seed1-load-g3") == "organic"
    assert traffic_of("fw-seed1-classic_generation-coop") == "scripted"
    assert traffic_of("fw-x-loader-g") == "scripted"
    vs = [verdict("a", 0, "STALE_MEMBER_EPOCH", "STALE_MEMBER_EPOCH", group=SCRIPTED),
          verdict("b", 0, "ILLEGAL_GENERATION", "NONE")]
    a = judged(vs)
    assert a.traffic["scripted"].recall == 1.0 and a.traffic["organic"].recall == 0.0
    assert (a.all.broker, a.all.both) == (2, 1)


def test_every_logged_partition_is_judged_or_excluded_for_a_reason():
    vs = [verdict("ok", 0, "NONE", "NONE"),
          verdict("noanswer", 0, None, "NONE"),
          verdict("rebalance", 0, "REBALANCE_IN_PROGRESS", "NONE", agrees=None),
          verdict("unknown", 0, "UNKNOWN", "NONE", agrees=None),
          verdict("warm", 0, "NONE", "NONE", warming=True),
          verdict("timeout", 0, "REQUEST_TIMED_OUT", "NONE", agrees=None)]
    logs = [logged(v["event_id"], 0, v["broker_error"]) for v in vs]
    logs += [logged("routed", 0, "NOT_COORDINATOR", decoded=False),
             logged("routed", 1, "COORDINATOR_LOAD_IN_PROGRESS", decoded=False),
             logged("dlq", 0, None, decoded=False),
             logged("lost", 0, "NONE")]  # decoded, but the job wrote no verdict of it
    a = account(logs, vs, ["dlq"], "strict")
    assert (a.logged, a.judged) == (10, 1)
    assert dict(+a.excluded) == {"no answer": 1, "REBALANCE_IN_PROGRESS": 1, "unknown code": 1, "warm-up": 1,
                                 "other": 1, "coordinator error": 2, "dead letter": 1, "missing": 1}
    assert a.details[("other", "REQUEST_TIMED_OUT")] == 1
    assert a.details[("coordinator error", "NOT_COORDINATOR")] == 1
    assert a.accounted == 9 and a.accounted_percent == 90.0
    assert a.reconciled


def test_a_live_start_excludes_the_lines_before_it_and_only_those():
    """A job started from ``latest``: lines before its launch were never its to read; lines between
    the launch and its first batch may or may not have been (``latest`` resolved in between); a
    line after the first batch without a verdict is missing, and one before the launch with a
    verdict is judged like any other."""
    L = "fencewatch.request-log/0/"
    vs = [verdict(L + "3", 0, "NONE", "NONE"), verdict(L + "12", 0, "NONE", "NONE")]
    logs = [logged(L + str(n), 0, "NONE") for n in (1, 3, 9, 12, 25)]
    a = account(logs, vs, [], "strict", start_lines=(5, 20))
    assert a.judged == 2
    assert dict(+a.excluded) == {"before the start": 1, "at the start": 1, "missing": 1}
    assert account(logs, vs, [], "strict").excluded["missing"] == 3  # a backlog run: every line was the job's


def test_verdicts_the_log_does_not_hold_or_holds_twice_are_counted():
    v = verdict("e", 0, "NONE", "NONE")
    a = account([logged("e", 0, "NONE")], [v, dict(v), verdict("elsewhere", 0, "NONE", "NONE")], [], "strict")
    assert (a.judged, a.duplicate_verdicts, a.unmatched_verdicts) == (1, 1, 1) and not a.reconciled


def _line(api: int, request_topics: list, response_topics: list, version: int = 9) -> str:
    body = {"requestHeader": {"requestApiKey": api, "requestApiVersion": version, "correlationId": 1,
                              "clientId": "c"},
            "request": {"groupId": "fw-seed1-load-g0", "generationIdOrMemberEpoch": 3, "memberId": "m",
                        "groupInstanceId": None, "topics": request_topics},
            "response": {"throttleTimeMs": 0, "topics": response_topics}}
    text = json.dumps(body, separators=(",", ":"))  # compact, as Kafka writes it
    return f"[2026-12-03 13:11:49,511] DEBUG Completed request:{text} (kafka.request.logger)\n"


def _parts(*indices):
    return [{"partitionIndex": p, "committedOffset": 5, "committedLeaderEpoch": -1, "committedMetadata": None}
            for p in indices]


def _answers(*codes):
    return [{"partitionIndex": p, "errorCode": c} for p, c in enumerate(codes)]


def test_the_request_log_partitions_with_their_answers():
    lines = [
        "[2026-12-03 13:11:49,500] INFO something else (kafka.server)\n",
        _line(8, [{"name": "t", "partitions": _parts(0, 1, 2)}], [{"name": "t", "partitions": _answers(0, 16, 113)}]),
        _line(8, [{"topicId": "AAAAAAAAAAAAAAAAAAAAAQ", "partitions": _parts(0)}],
              [{"topicId": "AAAAAAAAAAAAAAAAAAAAAQ", "partitions": _answers(14)}], version=10),
        _line(8, [{"name": "t", "partitions": _parts(0)}], [{"name": "t", "partitions": []}]),  # not answered
        _line(2, [], []),  # another API
    ]
    got = logged_partitions(lines, lambda i: f"L/0/{i}", {"AAAAAAAAAAAAAAAAAAAAAQ": "named"})
    assert sorted((p.event_id, p.topic, p.partition, p.answer, p.decoded) for p in got) == [
        ("L/0/1", "t", 0, "NONE", True),
        ("L/0/1", "t", 1, "NOT_COORDINATOR", False),
        ("L/0/1", "t", 2, "STALE_MEMBER_EPOCH", True),
        ("L/0/2", "AAAAAAAAAAAAAAAAAAAAAQ", 0, "COORDINATOR_LOAD_IN_PROGRESS", False),
        ("L/0/3", "t", 0, None, True)]


def test_the_scripted_cases_have_a_fixed_denominator():
    assert sum(expected_cases("all").values()) == sum(SCRIPTED_CASES.values())
    assert set(expected_cases("kip1251")) == {k for k in SCRIPTED_CASES if k[0] == "kip1251"}
    ok = {"scenario": "kip1319", "case": "txn_behind_on_owned", "ok": True}
    cases = fixed_cases([ok, ok], expected_cases("kip1319"))
    assert [c["ok"] for c in cases] == [True, False, False]  # one too many; txn_behind_on_newer missing
    assert cases[1].get("unexpected") and cases[2].get("missing") and cases[2]["case"] == "txn_behind_on_newer"


def test_the_fixed_cases_are_the_scenarios_own():
    """Each case of the list is recorded by its scenario's module (sim/live/*_cases.py)."""
    live = Path(__file__).resolve().parents[2] / "sim" / "live"
    sources = "".join(p.read_text() for p in live.glob("*_cases.py")) + (live / "context.py").read_text()
    for scenario, case in SCRIPTED_CASES:
        assert f'"{scenario}"' in sources and f'"{case}"' in sources, (scenario, case)


def _run(**kw):
    from bench.fidelity import Agreement, FidelityRun

    fields = dict(version="4.2.2", agreement=Agreement("4.2.2", "strict"), traffic="", seconds={}, lines=0,
                  verdicts=[], query_failures=[], failed_scenarios={},
                  expectations=fixed_cases([{"scenario": s, "case": c, "ok": True} for (s, c), n in
                                            expected_cases("kip1251").items() for _ in range(n)],
                                           expected_cases("kip1251")),
                  accounting=account([logged("e", 0, "NONE")], [verdict("e", 0, "NONE", "NONE")], [], "strict"))
    return FidelityRun(**{**fields, **kw})


def test_the_harness_fails_on_a_failed_scenario_a_missing_case_or_unaccounted_commits():
    assert _run().failures() == []
    assert _run(failed_scenarios={"kip1251": "RuntimeError: boom"}).failures() == [
        "scenario kip1251 failed: RuntimeError: boom"]
    short = fixed_cases([], expected_cases("kip1251"))
    assert len(_run(expectations=short).failures()) == 6  # every case of the scenario missing
    lost = account([logged("e", 0, "NONE"), logged("f", 0, "NONE")], [verdict("e", 0, "NONE", "NONE")], [], "strict")
    assert [f for f in _run(accounting=lost).failures() if "accounted for" in f]  # 1 of 2: under 99%

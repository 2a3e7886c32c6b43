"""The model against a real broker's answers, end to end (docs/fidelity.md): Apache Kafka 4.2 ->
its request log -> the shipped rsyslog -> a topic -> ``fencewatch run --source
request-log,consumer-offsets`` -> verdicts, with real clients and the hand-built KIP-1251 request.

A shorter run than ``bench/bench_fidelity.py``'s: it fails on any disagreement that no rule of
``bench.fidelity.EXPLANATIONS`` explains, and on a scripted case whose class is not the one
expected (among them the KIP-1251 case: a commit one epoch behind on a partition the member
still owns, which 4.2 rejects and fencewatch calls ``avoidable``)."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.fidelity import run_fidelity  # noqa: E402

pytestmark = [pytest.mark.spark, pytest.mark.broker, pytest.mark.slow]


def test_every_disagreement_with_kafka_4_2_is_explained(tmp_path):
    run = run_fidelity("4.2", tmp_path, commits=2_000, groups=3)
    a = run.agreement
    assert not run.query_failures, "the job's query failed:\n" + "\n".join(run.query_failures[:3])
    assert a.partitions >= 1_000, f"too few judged commits to mean anything: {a.partitions}\n{run.traffic}"
    assert not a.unexplained, "disagreements no rule explains:\n" + "\n".join(map(str, a.unexplained[:10]))
    wrong = [e for e in run.expectations if not e["ok"]]
    assert not wrong, f"scripted cases judged otherwise than expected: {wrong}\n{run.traffic}"
    kip1251 = [e for e in run.expectations if e["scenario"] == "kip1251" and e["case"] == "behind_on_owned"]
    assert kip1251 and kip1251[0]["broker"] == ["STALE_MEMBER_EPOCH"] and kip1251[0]["classes"] == ["avoidable"]

"""The model against a real broker's answers, end to end (docs/fidelity.md): Apache Kafka 4.2 ->
its request log -> the shipped rsyslog -> a topic -> ``fencewatch run --source
request-log,consumer-offsets`` -> verdicts, with real clients and the hand-built KIP-1251 request.

A shorter run than ``bench/bench_fidelity.py``'s, with three load groups, the last of them classic
(sim/live/load.py), on a three-node cluster (``__consumer_offsets`` at 50 partitions, RF 3, every
node's request log shipped) whose node coordinating the most load groups is restarted once the
scripted cases are over, while the load commits (``Topology(brokers=3, move=True)``; 171 s on
2026-12-04, against 117 s on one broker). It fails on a failed scenario, on a scripted case (of the fixed list,
``bench.fidelity.SCRIPTED_CASES``) judged otherwise than expected or missing (among them the
KIP-1251 case: a commit one epoch behind on a partition the member still owns, which 4.2 rejects
and fencewatch calls ``avoidable``), on any disagreement no rule of
``bench.fidelity.EXPLANATIONS`` explains, on fewer than 99% of the request log's commit
partitions accounted for, and on recall or precision on the broker's rejections (organic and
scripted together) below the bar.

The bar, from six runs of this test on 2026-12-03 (Kafka 4.2.2, ``strict``, this 2-core machine
shared with other jobs, load average 10-16; 73 to 215 s each, against 104 s for the run without
a classic group just before), rejected partitions caught / rejected by the broker:

====  ============  ==============  ==================  ==================  ===============
run   organic       scripted        all: recall         all: precision      disagreements
====  ============  ==============  ==================  ==================  ===============
1     6/7           98/98           104/105 (99.0%)     104/104             1 explained
2     3/3           16/16           19/19 (100%)        19/19               none
3     3/17          305/305         308/322 (95.7%)     308/310 (99.4%)     15 explained, 1 not
4     17/21         21/21           38/42 (90.5%)       38/38               4 explained
5     9/11          94/94           103/105 (98.1%)     103/107 (96.3%)     2 explained, 4 not
6     23/45         1,478/1,478     1,501/1,523 (98.6%) 1,501/1,502         22 explained, 1 not
====  ============  ==============  ==================  ==================  ===============

Every commit partition was accounted for in each (4,266 to 14,595; 2 coordinator errors and 0
to 2 REBALANCE_IN_PROGRESS excluded), all 22 scripted cases were as expected, no scenario failed.
Every organic miss was the classic load group's ILLEGAL_GENERATION (``classic-rebalance-race``:
the request log does not carry classic joins yet, issue 44 item 3); the KIP-848 groups'
rejections were all caught. Runs 3, 5 and 6 failed on disagreements no rule explains:

- runs 3 and 6: a KIP-848 commit (``reassign_inflight``; the load's ``g0``) that the broker
  accepted and ``strict`` rejected, the member's next-epoch record in ``__consumer_offsets``
  stamped 2 ms and 91 ms before the commit's request-log line, which is written when the
  response is sent (the ``same-millisecond`` rule of then was exact to the millisecond; its
  successor ``commit-handled-first`` takes the commit line's own timings, issue 44 item 4);
- run 5: the classic load group: four commits at generation 2 the broker accepted and the model,
  still at generation 1, rejected (``future_epoch``), and two at generation 3 the broker rejected
  (ILLEGAL_GENERATION) and the model, at generation 3 too, accepted.

Both are the explanation rules' and the classic decoding's to settle (issue 44 items 3 and 4);
this test reports them rather than passing over them.

So the bar: at least ``MIN_REJECTIONS`` broker rejections (the scripted cases alone make 16),
recall at least 85% (worst 90.5%: the classic group's misses vary with the churn, 0 to 22 a run)
and precision at least 90% (worst 96.3%). The wrong policy fails it by far: the same five runs'
verdicts judged as if 4.2 ran ``kip1251`` (or ``assignment_epoch``) give recall 14/105, 9/19,
9/322, 14/42 and 14/105 (runs 1 to 5).
"""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.fidelity import ACCOUNTED_BAR, Topology, run_fidelity, summary  # noqa: E402

pytestmark = [pytest.mark.spark, pytest.mark.broker, pytest.mark.slow]

RECALL_BAR = 0.85
PRECISION_BAR = 0.90
MIN_REJECTIONS = 12


def test_the_model_against_kafka_4_2(tmp_path):
    run = run_fidelity("4.2", tmp_path, commits=2_000, groups=3, topology=Topology(brokers=3, move=True))
    a, acc, m = run.agreement, run.accounting, run.accounting.all
    print(summary(run))
    assert not run.query_failures, "the job's query failed:\n" + "\n".join(run.query_failures[:3])
    assert not run.failed_scenarios, f"scenarios failed: {run.failed_scenarios}\n{run.traffic}"
    # the coordinator move: a node restarted while the load committed, its groups' commits
    # answered elsewhere after it (every node's request log read)
    assert run.moves and run.moves[0]["groups_led"] >= 1, run.moves
    assert [g for g in run.classic_groups if "-load-" in g], f"no classic load group: {sorted(run.classic_groups)}"
    assert a.partitions >= 1_000, f"too few judged commits to mean anything: {a.partitions}\n{run.traffic}"
    assert acc.reconciled, "\n".join(run.failures())
    assert acc.accounted_percent >= ACCOUNTED_BAR, summary(run)
    wrong = [e for e in run.expectations if not e["ok"]]
    assert not wrong, f"scripted cases judged otherwise than expected, or missing: {wrong}\n{run.traffic}"
    kip1251 = [e for e in run.expectations if e["scenario"] == "kip1251" and e["case"] == "behind_on_owned"]
    assert kip1251 and kip1251[0]["broker"] == ["STALE_MEMBER_EPOCH"] and kip1251[0]["classes"] == ["avoidable"]
    assert m.broker >= MIN_REJECTIONS, f"too few broker rejections to measure recall on: {summary(run)}"
    assert m.recall >= RECALL_BAR and m.precision >= PRECISION_BAR, summary(run)
    assert not a.unexplained, "disagreements no rule explains:\n" + "\n".join(map(str, a.unexplained[:10]))

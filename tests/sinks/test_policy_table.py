"""A commit policy is one row of ``state/fencing.py``'s ``POLICY_TABLE`` (issue 47): a fifth row,
added to a copy of the code and nothing else, reaches the verdict records (its answer field, in
the table's order), the metrics (its ``policy`` label), the report (its columns) and the
configuration (``broker_policy``).

The copy is the package as installed (``state``, ``streaming``, ``sinks``, ``sim``,
``dashboards``) with one edit: the row, inserted after the table by ``ast``. The replay, the
metrics and the report then run from that copy in a child process (``PYTHONPATH``), so this
process's modules, built from the four-row table, are not touched.
"""
from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("state", "streaming", "sinks", "sim", "dashboards")
FIELD = "loose_check"  # not the policy's name: the row's field is what verdicts carry

FIFTH_ROW = f'''

def loose(c: int, b: int, revocation_epoch: int, ae: int | None) -> bool:
    """The test's fifth policy: a partition the member holds, at any client epoch up to the broker's."""
    return ae is not None and c <= b


POLICY_TABLE = (*POLICY_TABLE, PolicyRule("loose", "{FIELD}", loose))
'''

# A member at epoch 2 that got orders-2 at epoch 2 and holds orders-0 since epoch 1 commits:
# at epoch 1 on orders-0 (KIP-1251 accepts, strict does not), at epoch 1 on orders-2 (loose and
# member_revocation accept, KIP-1251 does not; the broker answered STALE_MEMBER_EPOCH), ahead at
# epoch 3 (nobody accepts), at epoch 2 (everybody does), and at epoch 2 on orders-5, which it
# does not hold (strict accepts, loose and assignment_epoch do not).
TRACE = [
    {"type": "member_assignment", "ts": 1000, "group_id": "g1", "member_id": "A", "member_epoch": 1,
     "assigned": [{"topic": "orders", "partitions": [0, 1]}]},
    {"type": "member_assignment", "ts": 1010, "group_id": "g1", "member_id": "A", "member_epoch": 2,
     "assigned": [{"topic": "orders", "partitions": [0, 1, 2]}]},
    {"type": "offset_commit", "ts": 1020, "group_id": "g1", "member_id": "A", "member_epoch": 1,
     "offsets": [{"topic": "orders", "partition": 0, "offset": 5}]},
    {"type": "offset_commit", "ts": 1030, "group_id": "g1", "member_id": "A", "member_epoch": 1,
     "offsets": [{"topic": "orders", "partition": 2, "offset": 7}], "error_code": 113},
    {"type": "offset_commit", "ts": 1040, "group_id": "g1", "member_id": "A", "member_epoch": 3,
     "offsets": [{"topic": "orders", "partition": 0, "offset": 9}]},
    {"type": "offset_commit", "ts": 1050, "group_id": "g1", "member_id": "A", "member_epoch": 2,
     "offsets": [{"topic": "orders", "partition": 0, "offset": 11}]},
    {"type": "offset_commit", "ts": 1060, "group_id": "g1", "member_id": "A", "member_epoch": 2,
     "offsets": [{"topic": "orders", "partition": 5, "offset": 13}]},
]

METRICS = """
import sys
from fencewatch.sinks.metrics import MetricsConfig
from fencewatch.sinks.prometheus import MetricsSink
from fencewatch.state.status import summarize_commit_verdicts
from fencewatch.streaming.runtime.replay import replay_file

result = replay_file(sys.argv[1])
sink = MetricsSink(MetricsConfig())
sink.add_batch(batch_id=0, verdict_summaries=[summarize_commit_verdicts(result.commit_verdicts)])
print(sink.render())
"""


def _insert_row(fencing: Path) -> None:
    src = fencing.read_text()
    (table,) = [n for n in ast.parse(src).body if isinstance(n, (ast.Assign, ast.AnnAssign))
                and "POLICY_TABLE" in {t.id for t in (n.targets if isinstance(n, ast.Assign) else [n.target])
                                       if isinstance(t, ast.Name)}]
    lines = src.splitlines(keepends=True)
    fencing.write_text("".join(lines[:table.end_lineno]) + FIFTH_ROW + "".join(lines[table.end_lineno:]))


@pytest.fixture(scope="module")
def five_policies(tmp_path_factory) -> dict:
    """A copy of the code with a fifth policy row; the environment that runs it."""
    top = tmp_path_factory.mktemp("five-policies")
    for package in PACKAGES:
        shutil.copytree(ROOT / package, top / "fencewatch" / package,
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    _insert_row(top / "fencewatch" / "state" / "fencing.py")
    env = {**os.environ, "PYTHONPATH": str(top)}
    check = subprocess.run([sys.executable, "-c", "import fencewatch.state.fencing as f; print(f.__file__)"],
                           env=env, capture_output=True, text=True, check=True)
    assert check.stdout.strip() == str(top / "fencewatch" / "state" / "fencing.py")  # the copy runs, not this tree
    return env


def _run(env: dict, *argv: str) -> subprocess.CompletedProcess:
    res = subprocess.run([sys.executable, *argv], env=env, capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    return res


def _cli(env: dict, *argv: str) -> subprocess.CompletedProcess:
    return _run(env, "-c", "import sys; from fencewatch.streaming.cli import main; sys.exit(main())", *argv)


@pytest.fixture
def trace(tmp_path: Path) -> Path:
    p = tmp_path / "events.jsonl"
    p.write_text("".join(json.dumps(e) + "\n" for e in TRACE))
    return p


def _verdicts(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_a_fifth_policy_reaches_the_verdicts(five_policies, trace, tmp_path):
    out = tmp_path / "v.jsonl"
    _cli(five_policies, "replay", str(trace), "--out", str(out), "--quiet")
    verdicts = _verdicts(out)
    assert len(verdicts) == 5
    keys = list(verdicts[0])
    assert keys[keys.index("kip1251") + 1] == FIELD and keys[keys.index(FIELD) + 1] == "class"  # the table's order
    # its answers are its predicate's, in the answer the others give when they reject
    for v in verdicts:
        rejection = v["strict"] if v["strict"] != "NONE" else "STALE_MEMBER_EPOCH"
        accepts = v["assignment_epoch"] is not None and v["client_epoch"] <= v["broker_epoch"]
        assert v[FIELD] == ("NONE" if accepts else rejection), v
    # ... and it is a policy of its own: on some line it answers unlike each of the other four
    for other in ("strict", "member_revocation", "assignment_epoch_check", "kip1251"):
        assert any(v[FIELD] != v[other] for v in verdicts), other
    # the four keep their answers: the verdicts without the fifth field are today's
    four = tmp_path / "four.jsonl"
    subprocess.run([sys.executable, "-c", "import sys; from fencewatch.streaming.cli import main; sys.exit(main())",
                    "replay", str(trace), "--out", str(four), "--quiet"], check=True)
    assert [{k: x for k, x in v.items() if k != FIELD} for v in verdicts] == _verdicts(four)


def test_a_fifth_policy_can_be_the_brokers(five_policies, trace, tmp_path):
    out = tmp_path / "v.jsonl"
    _cli(five_policies, "replay", str(trace), "--out", str(out), "--quiet", "--broker-policy", "loose")
    (answered,) = [v for v in _verdicts(out) if v["broker_error"] is not None]
    # the broker said STALE_MEMBER_EPOCH where loose accepts: under loose the model disagrees
    assert answered[FIELD] == "NONE" and answered["broker_error"] == "STALE_MEMBER_EPOCH"
    assert answered["model_agrees"] is False


def test_a_fifth_policy_reaches_the_metrics(five_policies, trace, tmp_path):
    out = tmp_path / "v.jsonl"
    _cli(five_policies, "replay", str(trace), "--out", str(out), "--quiet")
    verdicts = _verdicts(out)
    text = _run(five_policies, "-c", METRICS, str(trace)).stdout
    judged: dict[tuple[str, str], float] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == "fencewatch_commits_judged_total":
                key = (s.labels["policy"], s.labels["result"])
                judged[key] = judged.get(key, 0) + s.value
    policies = {p for p, _ in judged}
    assert policies == {"strict", "member_revocation", "assignment_epoch", "kip1251", "loose"}
    for policy, field in (("strict", "strict"), ("kip1251", "kip1251"), ("loose", FIELD)):
        expected: dict[str, int] = {}
        for v in verdicts:
            expected[v[field]] = expected.get(v[field], 0) + 1
        assert {r: n for (p, r), n in judged.items() if p == policy and n} == expected, policy


def test_a_fifth_policy_reaches_the_report(five_policies, trace, tmp_path):
    verdicts_file = tmp_path / "v.jsonl"
    _cli(five_policies, "replay", str(trace), "--out", str(verdicts_file), "--quiet")
    doc_file = tmp_path / "report.json"
    _cli(five_policies, "report", str(verdicts_file), "--json", str(doc_file), "--out", str(tmp_path / "r.html"))
    doc = json.loads(doc_file.read_text())
    assert doc["policies"] == ["strict", "member_revocation", "assignment_epoch", "kip1251", "loose"]
    assert "loose" in doc["relaxed_policies"]
    verdicts = _verdicts(verdicts_file)
    totals = doc["totals"]
    rejected = sum(v[FIELD] != "NONE" for v in verdicts)
    assert totals["rejected_by_policy"]["loose"] == {"requests": rejected, "verdicts": rejected}
    # strict rejects three of the one-partition requests; loose accepts two of those
    saved = sum(v["strict"] != "NONE" and v[FIELD] == "NONE" for v in verdicts)
    assert saved == 2 and totals["avoidable"]["loose"] == {"requests": saved, "verdicts": saved}
    page = (tmp_path / "r.html").read_text()
    assert 'data-policy="loose"' in page and "judged under the five checks" in page

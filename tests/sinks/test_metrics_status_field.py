"""A group gauge is declared once, in ``sinks/metrics.py`` (a ``MetricSpec`` with its
``status_field``), and reaches ``/metrics`` with no other line (issue 47 item 4): the exporter's
``GroupStatus``, its parsing and the group series are made from the specs. Real groups, their real
status (``state.status.status``), the real exporter."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from fencewatch.sinks import metrics as m
from fencewatch.sinks.metrics_batch import STATUS_FIELDS, GroupStatus
from fencewatch.state.config import RulesConfig
from fencewatch.state.status import status

ROOT = Path(__file__).resolve().parents[2]
ANCHOR = "    # Deprecated names, exported one more release beside the new ones (docs/metrics.md).\n"
NEW_SPEC = ('    MetricSpec(PREFIX + "group_committed_partitions", GAUGE, "Partitions with a committed offset.", _G,\n'
            '               status_field="committed_partitions", fold="sum"),\n')

# Three groups, each with one member that commits every partition it holds; g2 is the busy one.
CHILD = r"""
import json
from fencewatch.sinks.metrics import MetricsConfig
from fencewatch.sinks.prometheus import MetricsSink
from fencewatch.state import group as grp
from fencewatch.state.config import RulesConfig
from fencewatch.state.events import CommitOffset, CommitOffsets, MemberAssignment, OffsetCommit
from fencewatch.state.model import MemberState, Protocol
from fencewatch.state.status import status

cfg = RulesConfig()
statuses = []
for group_id, n in (("g1", 3), ("g2", 2), ("g3", 4)):
    g, tps = grp.new_group("default", group_id), tuple(("t", p) for p in range(n))
    g = grp.process(g, MemberAssignment(ts=1000, cluster="default", group_id=group_id, event_id="a", seq=1,
                                        member_id="A", protocol=Protocol.CONSUMER, member_epoch=1, assigned=tps,
                                        pending_revocation=(), group_epoch=1, state=MemberState.STABLE),
                    cfg, grp.Outputs())
    g = grp.process(g, OffsetCommit(ts=2000, cluster="default", group_id=group_id, event_id="c", seq=2,
                                    transactional=False, member_id="A", member_epoch=1,
                                    offsets=CommitOffsets.of(CommitOffset(t, p, 10, -1) for t, p in tps)),
                    cfg, grp.Outputs())
    statuses.append(status(g, cfg))
sink = MetricsSink(MetricsConfig(max_groups=1), clock=lambda: 4_000_000_000.0,
                   build_labels={"version": "v", "python_version": "p", "pyspark_version": "s"})
sink.add_batch(batch_id=0, group_status=statuses, events={("default", "g2", "offset_commit", "offsets"): 5})
print(json.dumps({"statuses": statuses, "text": sink.render()}))
"""


def expose_with_one_more_spec(root: Path, tmp: Path) -> tuple[list[dict], str]:
    """``root``'s code with NEW_SPEC added to ``sinks/metrics.py`` and nothing else changed, run in
    a child process on three real groups' statuses: (the statuses, the exposition text)."""
    pkg = tmp / "pp" / "fencewatch"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    for name in ("state", "streaming", "sim", "dashboards"):
        (pkg / name).symlink_to(root / name)
    shutil.copytree(root / "sinks", pkg / "sinks", ignore=shutil.ignore_patterns("__pycache__"))
    source = (pkg / "sinks" / "metrics.py").read_text()
    assert source.count(ANCHOR) == 1
    (pkg / "sinks" / "metrics.py").write_text(source.replace(ANCHOR, NEW_SPEC + ANCHOR))
    res = subprocess.run([sys.executable, "-c", CHILD], env={"PYTHONPATH": str(tmp / "pp"), "PATH": "/usr/bin"},
                         cwd=tmp, capture_output=True, text=True)
    assert res.returncode == 0, res.stderr.strip().splitlines()[-1:]
    out = json.loads(res.stdout)
    return out["statuses"], out["text"]


def test_a_group_gauge_declared_in_one_spec_is_exposed(tmp_path):
    statuses, text = expose_with_one_more_spec(ROOT, tmp_path)
    committed = {s["group_id"]: s["committed_partitions"] for s in statuses}
    assert committed == {"g1": 3, "g2": 2, "g3": 4}  # the field state.status gives
    families = {f.name: f for f in text_string_to_metric_families(text)}
    family = families["fencewatch_group_committed_partitions"]
    assert family.type == "gauge" and family.documentation == "Partitions with a committed offset."
    # g2 (the busy one) has the one label; g1 and g3 are folded into "other", summed as the spec says
    assert {s.labels["group"]: s.value for s in family.samples} == {"g2": 2.0, "other": 7.0}
    assert all(s.labels["cluster"] == "default" for s in family.samples)
    # the other gauges still shown as before, beside it
    members = {s.labels["group"]: s.value for s in families["fencewatch_group_members"].samples}
    assert members == {"g2": 1.0, "other": 2.0}


def test_the_exporter_keeps_the_fields_its_specs_read():
    """``GroupStatus`` is made from ``STATUS_METRICS``: one field per status field or label they read,
    every one a key of the status ``state.status.status`` makes."""
    from fencewatch.state import group as grp

    read = {spec.status_field for spec in m.STATUS_METRICS} | {
        label for spec in m.STATUS_METRICS for label in spec.labels if label not in ("cluster", "group")}
    assert [f for f, _ in STATUS_FIELDS] == list(GroupStatus.__slots__) and set(GroupStatus.__slots__) == read
    assert read <= set(status(grp.new_group("default", "g"), RulesConfig()))
    for spec in m.STATUS_METRICS:
        assert spec.exporter == "job" and spec.type in (m.GAUGE, m.COUNTER) and spec.fold in (None, "sum", "min")
        if spec.type == m.COUNTER:  # a status's monotone total, counted by its growth: no label of its own
            assert spec.labels == ("cluster", "group") and spec.fold is None, spec.name
        for label in spec.labels:
            assert label in ("cluster", "group") or label in spec.enums, (spec.name, label)


def test_the_exporters_name_families_by_their_specs_constants():
    """``prometheus.py`` and ``group_series.py`` name a family through the constant declared with its
    spec (``m.EVENTS_TOTAL``), never as a string of their own (``"fencewatch_events_total"``,
    ``m.PREFIX + "events_total"``, ``m.spec("events_total")``): a renamed family cannot leave one
    behind."""
    import ast

    names = {spec.name for spec in m.METRICS}
    for module in ("prometheus.py", "group_series.py", "metrics_batch.py"):
        tree = ast.parse((ROOT / "sinks" / module).read_text())
        found = [f"{module}:{node.lineno}" for node in ast.walk(tree)
                 if isinstance(node, ast.Constant) and node.value in names
                 or isinstance(node, ast.BinOp) and isinstance(node.left, ast.Attribute) and node.left.attr == "PREFIX"
                 or isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "spec"
                 and any(isinstance(a, ast.Constant) for a in node.args)]
        assert found == []
    assert m.EVENTS_TOTAL == m.spec("events_total").name and m.BY_NAME[m.GROUP_MEMBERS].status_field == "members"

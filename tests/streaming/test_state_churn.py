"""State that follows the cluster (issue 36, contract §4.4), on real Spark and the embedded broker:
300 ephemeral groups come and go beside three long-lived ones (each way a group can end:
offsets deleted, offsets expired, deleted by the coordinator, or idle past
``group_retention``), and the job's keyed state comes back to what it held before them. The
benchmark-sized run (10,000 groups) is ``bench/bench_churn.py``; this is its short version."""
import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.bench_churn import run_churn  # noqa: E402
from fencewatch.streaming.runtime.checkpoint import state_figures  # noqa: E402
from fencewatch.streaming.cli import main  # noqa: E402

pytestmark = [pytest.mark.spark, pytest.mark.broker, pytest.mark.slow]


def test_ephemeral_groups_leave_the_state_as_it_was(spark, broker, topic_factory, tmp_path, capsys):
    topics = {"hb": topic_factory(2, "hb"), "off": topic_factory(2, "off")}
    fig = run_churn(spark, broker, topics, groups=300, checkpoint=str(tmp_path / "cp"), rate=100, timeout_s=300)
    base, during, end = fig["baseline"], fig["during"], fig["end"]
    # While they live, the state holds them: group keys and the topics' watches.
    assert during["rows"] > base["rows"] + 50 and during["remembered"] > 50
    assert during["stored"]["groups"] > base["stored"]["groups"] + 50
    # Then every one is forgotten: the rows are the baseline's (Spark's numRowsTotal and the
    # stored keys alike), and no stored state names an ephemeral group, not even a topic's watch.
    assert end["rows"] == base["rows"]
    assert (end["stored"]["groups"], end["stored"]["group_bucket_rows"], end["stored"]["topic_rows"]) == (
        base["stored"]["groups"], base["stored"]["group_bucket_rows"], base["stored"]["topic_rows"])
    assert end["remembered"] == 0
    # What is stored is back near the baseline too: what is left is the long-lived groups' own
    # state, which grows by their bounded logs of recent commits (state/folding.py), not by the
    # groups that came and went.
    grown = end["stored"]["bytes"] - base["stored"]["bytes"]
    assert grown < 0.1 * (during["stored"]["bytes"] - base["stored"]["bytes"]), fig
    # The operator's view of the same, on the stopped query's checkpoint: ``fencewatch checkpoint
    # show --state`` reads what the state data source reads, the long-lived groups' keys alone.
    assert main(["checkpoint", "show", "--checkpoint", str(tmp_path / "cp"), "--state"]) == 0
    shown = json.loads(capsys.readouterr().out)["state"]
    assert shown == state_figures(spark, str(tmp_path / "cp"))
    assert (shown["rows"], shown["groups"], shown["topic_rows"]) == (
        base["rows"], base["stored"]["groups"], base["stored"]["topic_rows"])

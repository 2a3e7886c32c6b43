"""The report's streams section: what KIP-1251's check saves streams groups (KIP-1071) under
exactly-once, or that the brokers (Kafka 4.2+) already run it, on a verdict set checked by hand."""
from __future__ import annotations

from report_helpers import T0, I, N, fencewatch, verdict

from fencewatch.sinks.report.assemble import summarize
from fencewatch.sinks.report.page import render
from fencewatch.sinks.report.summary import ReportAggregator

AVOID = (I, I, N, N)  # strict rejects, kip1251 accepts the whole request
ZOMBIE = (I, I, I, I)


def sample() -> list[dict]:
    """``app`` (streams): e1 two avoidable lines (one EOS abort avoided), e2 accepted, e3 a zombie;
    ``app2`` (streams): e4 avoidable; ``orders`` (consumer): e5 avoidable, not a streams group's;
    e6 an avoidable OffsetCommit of ``app`` (no transaction to save)."""
    v = verdict
    return [v("e1", T0, "app", "m1", "txn_commit", 0, AVOID, "avoidable", broker_error=I, agrees=True),
            v("e1", T0, "app", "m1", "txn_commit", 1, AVOID, "avoidable", broker_error=I, agrees=True),
            v("e2", T0 + 100, "app", "m1", "txn_commit", 0, (N, N, N, N), "accepted", broker_error=N, agrees=True),
            v("e3", T0 + 200, "app", "m2", "txn_commit", 2, ZOMBIE, "zombie", broker_error=I, agrees=True),
            v("e4", T0 + 300, "app2", "m9", "txn_commit", 0, AVOID, "avoidable", broker_error=I, agrees=True),
            v("e5", T0 + 400, "orders", "c1", "txn_commit", 0, AVOID, "avoidable", broker_error=I, agrees=True),
            v("e6", T0 + 500, "app", "m1", "commit", 3, AVOID, "avoidable", broker_error="STALE_MEMBER_EPOCH",
              agrees=True)]


def streams(policy: str, groups=("app", "app2")) -> dict:
    agg = ReportAggregator("strict", streams_broker_policy=policy)
    for g in groups:
        agg.mark_streams_group(None, g)
    agg.add_verdicts(sample())
    return summarize(agg)


def test_eos_aborts_avoided_per_streams_group_on_a_strict_broker():
    s = streams("strict")["streams"]
    assert s["broker_policy"] == "strict" and not s["already_relaxed"]
    rows = {g["group_id"]: g for g in s["groups"]}
    assert set(rows) == {"app", "app2"}  # orders is no streams group
    assert rows["app"]["txn_requests"] == 3 and rows["app"]["aborted_transactions"] == 2
    assert rows["app"]["eos_aborts_avoided"] == {"requests": 1, "verdicts": 2}  # e1; e6 is no transaction
    assert rows["app2"]["eos_aborts_avoided"] == {"requests": 1, "verdicts": 1}
    assert s["eos_aborts_avoided"] == {"requests": 2, "verdicts": 3}
    assert "2 transactional commits of 2 streams groups (3 verdicts) were rejected" in s["statement"]
    assert "upgrade avoids" in s["statement"]


def test_brokers_running_kip1251_on_streams_groups_leave_nothing_to_gain():
    s = streams("kip1251")["streams"]
    assert s["already_relaxed"] and s["eos_aborts_avoided"]["requests"] == 2
    assert "avoided already: nothing is left to gain for streams groups" in s["statement"]
    page = render(streams("kip1251"))
    assert 'id="streams-statement"' in page and "nothing is left to gain" in page


def test_no_streams_groups_says_how_to_name_them():
    s = streams("kip1251", groups=())["streams"]
    assert s["groups"] == [] and "No streams groups" in s["statement"]
    assert 'id="streams"' not in render(streams("kip1251", groups=()))


def test_the_command_finds_a_traces_streams_groups(tmp_path):
    """``--events`` of a streams simulation: the trace names its streams groups itself."""
    trace = tmp_path / "streams.jsonl"
    fencewatch("simulate", "--profile", "streams", "--groups", "2", "--duration", "4m", "--seed", "1", "--quiet",
               "--out", str(trace))
    done = fencewatch("report", "--events", str(trace), "--out", str(tmp_path / "r.html"))
    assert "streams groups: The brokers run kip1251 on streams groups" in done.stdout
    import json

    s = json.loads((tmp_path / "r.json").read_text())["streams"]
    assert s["groups_count"] == 2 and {g["group_id"] for g in s["groups"]} == {"group-00000", "group-00001"}

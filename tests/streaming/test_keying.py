"""The streaming query's keying: JSON records keyed in the JVM (``state_fn.keyed_records``)
give the state function the same outputs as the Python keying (``make_keyer``), which asks
``state.engine.route``; and the state function alone matches ``replay --engine local``.

Odd records are the point: each must end up as exactly one dead letter or one unknown
row whichever keying saw it, and the JVM's extra copies (a refused commit's topics) must
change nothing.
"""
import json
from dataclasses import replace

import pandas as pd
import pytest

from fencewatch.sim.engine import SimConfig, simulate
from fencewatch.sim.profiles import profile
from fencewatch.sinks.jsonl import commit_verdicts_json
from fencewatch.state.config import RulesConfig
from fencewatch.streaming.replay import decode_lines, judge
from fencewatch.streaming.schemas import DLQ_KEY, KEYED
from fencewatch.streaming.state_fn import keyed_records, make_keyer, make_stream_fn

ODD = [
    b"{broken json",
    b"[1, 2]",
    json.dumps({"type": "offset_commit", "ts": "later", "group_id": "g-odd"}).encode(),  # keyed, then refused
    json.dumps({"type": "heartbeat", "ts": 5, "group_id": 7, "member_id": "m", "member_epoch": 1}).encode(),
    json.dumps({"type": "brand_new_type", "ts": 1, "group_id": "g-odd"}).encode(),
    json.dumps({"type": "offset_commit", "ts": 6, "group_id": "g-odd", "offsets": "not a list"}).encode(),
    json.dumps({"type": "offset_committed", "ts": 7, "group_id": "g-odd", "partition": 0, "offset": 1}).encode(),
    json.dumps({"type": "partition_epochs", "ts": 8, "cluster": None, "partition": 0}).encode(),
    json.dumps({"type": "heartbeat", "ts": 9}).encode(),
    None,  # a tombstone
]


class FakeState:
    """Just enough of GroupState for one call per key."""

    exists, hasTimedOut, value = False, False, None

    @property
    def get(self):
        return self.value

    def update(self, v):
        self.value, self.exists = v, True

    def setTimeoutDuration(self, ms):
        pass


def trace_frame() -> pd.DataFrame:
    events = simulate(SimConfig(knobs=replace(profile("mixed"), groups=6), seed=11, duration_ms=None,
                                max_events=1500, labels=False))
    # a refused commit: its topics get no facts, however it was keyed
    refused = next(e for e in events if e["type"] == "offset_commit")
    events.append({**refused, "error_code": 22, "event_id": "refused"})
    values = [json.dumps(e).encode() for e in events] + ODD
    n = len(values)
    return pd.DataFrame({"value": values, "seq": range(n), "event_id": [str(i) for i in range(n)],
                         "coords": [f"line {i + 1}" for i in range(n)], "source": ["offsets"] * n,
                         "record_ts": [0] * n, "bad_reason": [None] * (n - 1) + ["UPSTREAM(detail=x)"]})


def run_state_fn(keyed: pd.DataFrame) -> pd.DataFrame:
    fn = make_stream_fn(RulesConfig(), emit_verdicts=True, wall_clock=lambda: 0.0)
    frames = []
    for key, rows in keyed.groupby("key", sort=True):
        frames += list(fn((key,), iter([rows.sort_values("seq")]), FakeState()))
    out = pd.concat(frames, ignore_index=True)
    return out.sort_values(["record", "seq", "json"], na_position="first").reset_index(drop=True)


@pytest.fixture(scope="module")
def frames():
    return trace_frame(), pd.concat(list(make_keyer()([trace_frame()])), ignore_index=True)


@pytest.mark.spark
def test_jvm_keys_give_the_same_outputs_as_python_keys(spark, frames):
    pdf, python_keyed = frames
    inputs = spark.createDataFrame(pdf, "value binary, seq long, event_id string, coords string, source string, "
                                        "record_ts long, bad_reason string")
    jvm_keyed = keyed_records(inputs).toPandas()
    assert list(jvm_keyed.columns) == KEYED.fieldNames()
    # the same primary key for every valid record (a bad one may reach its group's key in the
    # JVM, where the decoder rejects it); the JVM may add copies (the refused commit's topics)
    prim = lambda df: set(zip(df.loc[df.primary, "seq"], df.loc[df.primary, "key"]))  # noqa: E731
    valid = {(seq, key) for seq, key in prim(python_keyed) if key != DLQ_KEY}
    assert valid <= prim(jvm_keyed)
    assert len(prim(jvm_keyed)) == len(pdf)
    copies = lambda df: set(zip(df.loc[~df.primary, "seq"], df.loc[~df.primary, "key"]))  # noqa: E731
    assert copies(python_keyed) <= copies(jvm_keyed)
    assert copies(jvm_keyed) - copies(python_keyed)  # the refused commit's, which route() does not send
    pd.testing.assert_frame_equal(run_state_fn(jvm_keyed), run_state_fn(python_keyed))


def test_each_odd_record_is_one_dead_letter_or_unknown(frames):
    pdf, python_keyed = frames
    out = run_state_fn(python_keyed)
    odd = out.loc[out.record.isin(["dlq", "unknown"])]
    first_odd = len(pdf) - len(ODD)
    assert sorted(odd["seq"]) == list(range(first_odd, len(pdf)))
    assert (python_keyed.loc[python_keyed.seq >= first_odd, "key"] == DLQ_KEY).all()
    by_seq = dict(zip(odd["seq"], zip(odd["record"], odd["reason"])))
    assert by_seq[first_odd + 4] == ("unknown", "brand_new_type")
    assert by_seq[len(pdf) - 1] == ("dlq", "UPSTREAM(detail=x)")  # an upstream decoder's reason, verbatim
    assert by_seq[first_odd][1].startswith("INVALID_JSON")


def test_state_fn_verdicts_match_the_local_engine(frames):
    pdf, python_keyed = frames
    out = run_state_fn(python_keyed)
    lines = sorted(line for text in out.loc[out.record == "verdict", "json"] for line in text.split("\n"))
    commits, _, _ = judge(decode_lines([v for v in pdf["value"] if v is not None], [], {}), RulesConfig())
    assert lines == sorted(line for cv in commits for line in commit_verdicts_json(cv))

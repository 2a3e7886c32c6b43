"""Group buckets (``streaming.group_buckets``): groups share a Spark key, and nothing else.

Without Spark: the router puts each group's records in its bucket's row, one frame per group; the
state function gives, group for group, the outputs it gives with one key per group, under Spark's
own timeout rule (a key is called without input once the time it asked for is before the batch's);
and a checkpoint keeps the layout its first query started with.
"""
from __future__ import annotations

import json
import logging
import zlib
from collections import Counter, defaultdict
from dataclasses import replace

import pandas as pd
import pytest

from fencewatch.sim.profiles import profile
from fencewatch.sim.world import SimConfig, simulate
from fencewatch.state.config import RulesConfig
from fencewatch.streaming.ingest.events import MEMBERSHIP_TYPES
from fencewatch.streaming.runtime import checkpoint as cp
from fencewatch.streaming.runtime.columns import DLQ_KEY
from fencewatch.streaming.runtime.inputs import group_sources
from fencewatch.streaming.runtime.outputs import read_frame, read_status, unpack_lines
from fencewatch.streaming.runtime.routing import make_router, parse_key, read_bucket, read_key_frame
from fencewatch.streaming.runtime.state_codec import decode_bucket
from fencewatch.streaming.runtime.state_fn import make_stream_fn


def _frame(lines: list[bytes], source: str = "offsets") -> pd.DataFrame:
    n = len(lines)
    return pd.DataFrame({"value": lines, "seq": range(n), "event_id": [f"t/0/{i}" for i in range(n)],
                         "coords": [None] * n, "source": [source] * n, "record_ts": [0] * n})


def _commit(ts: int, group: str, topic: str = "orders") -> bytes:
    return json.dumps({"type": "offset_commit", "ts": ts, "group_id": group, "member_id": "m", "member_epoch": 1,
                       "offsets": [{"topic": topic, "partition": 0, "offset": ts}]}).encode()


def test_a_groups_records_go_to_its_bucket_in_a_frame_of_its_own():
    groups = [f"g{i}" for i in range(12)]
    lines = [_commit(1_000 + i, g) for i, g in enumerate(groups * 2)]
    routed = pd.concat(list(make_router(group_buckets=5)([_frame(lines)])))
    by_key = {k: rows for k, rows in routed.groupby("key")}
    buckets = {k for k in by_key if parse_key(k)[0] == "G"}
    assert not any(parse_key(k)[0] == "g" for k in by_key)
    assert {parse_key(k)[2] for k in buckets} == {f"#{zlib.crc32(g.encode()) % 5}" for g in groups}
    seen = Counter()
    for key in buckets:
        (payload,) = by_key[key]["payload"].tolist()
        for group_id, (records, commits, counts) in read_bucket(payload):
            assert parse_key(key).name == f"#{zlib.crc32(group_id.encode()) % 5}"
            assert [json.loads(h.payload.value)["group_id"] for h in records] == [group_id, group_id]  # input order
            assert counts == {"offset_commit": 2} and not commits
            seen[group_id] += len(records)
        assert by_key[key]["events"].tolist() == [2 * len(read_bucket(payload))]
    assert seen == Counter({g: 2 for g in groups})
    # topic buckets are not group buckets: the stored commits' facts still go to theirs
    topic_rows = [k for k in by_key if parse_key(k)[0] == "t"]
    assert topic_rows and sum(len(read_key_frame(p)[1]) for k in topic_rows for p in by_key[k]["payload"]) == 24


def test_without_buckets_each_group_has_its_own_key():
    routed = pd.concat(list(make_router(group_buckets=0)([_frame([_commit(1, "a"), _commit(2, "b")])])))
    assert {parse_key(k)[:1] + parse_key(k)[2:] for k in routed["key"] if parse_key(k)[0] != "t"} == {
        ("g", "a"), ("g", "b")}


class SparkTimeouts:
    """A key's handle with Spark's processing-time timeout: ``setTimeoutDuration(d)`` in a batch at
    time T makes the key due once a later batch's time is after T + d (``FlatMapGroupsWithStateExec``
    times out states whose timeout timestamp is before the batch's)."""

    def __init__(self):
        self.exists, self.get, self.hasTimedOut, self.timeout, self.now = False, None, False, None, 0

    def getCurrentProcessingTimeMs(self) -> int:
        return self.now

    def update(self, value):
        self.exists, self.get = True, value

    def remove(self):
        self.exists, self.get, self.timeout = False, None, None

    def setTimeoutDuration(self, ms):
        assert ms > 0
        self.timeout = self.now + ms


def run_stream(lines_by_source: dict[str, list[tuple[int, bytes]]], group_buckets: int, batch_ms: int,
               idle_batches: int, cfg: RulesConfig) -> tuple[dict, dict, set]:
    """The records in micro-batches of ``batch_ms`` of their own time (batch time = its end), then
    ``idle_batches`` without input, a minute apart. Returns each group's output rows (record, ts,
    data bytes), the keys' handles at the end and the groups a status row said forgotten."""
    router = make_router(group_buckets=group_buckets)
    fn = make_stream_fn(cfg, max_skew_ms=1_000, sources=group_sources("events"))
    merged = sorted((ts, src, i, value) for src, recs in lines_by_source.items() for i, (ts, value) in enumerate(recs))
    states: dict[str, SparkTimeouts] = {}
    outputs: dict[str, list] = defaultdict(list)
    forgotten: set = set()
    start, end = merged[0][0], merged[-1][0]
    times = list(range(start + batch_ms, end + batch_ms + 1, batch_ms))
    times += [times[-1] + 60_000 * (i + 1) for i in range(idle_batches)]
    pos = 0
    for n, now in enumerate(times):
        rows = []
        while pos < len(merged) and merged[pos][0] < now:
            ts, src, i, value = merged[pos]
            # caught-up marks that differ between a batch's rows (a source that cannot tell: None)
            mark = False if n % 5 == 2 else None if (src == "heartbeats" and n % 4 == 1) else True
            rows.append((value, i * 4 + (0 if src == "heartbeats" else 1), f"{src}/0/{i}", None, src, ts, mark))
            pos += 1
        keyed = {}
        if rows:
            frame = pd.DataFrame(rows, columns=["value", "seq", "event_id", "coords", "source", "record_ts",
                                                "caught_up"])
            for out in router([frame]):
                keyed.update(dict(list(out.groupby("key"))))
        for key in sorted(set(keyed) | set(states)):
            if key == DLQ_KEY:
                continue
            st = states.setdefault(key, SparkTimeouts())
            st.now = now
            if key not in keyed:  # Spark calls a key without input only when it is due
                if st.timeout is None or not st.timeout < now:
                    continue
                st.hasTimedOut = True
            else:
                st.hasTimedOut = False
            st.timeout = None  # a call clears the timeout; the function sets it again if it wants one
            for frame in fn((key,), iter([keyed[key]] if key in keyed else []), st):
                for row in read_frame(frame):
                    if row.record == "status":  # a call's groups: each group's part
                        for group, part in status_parts(row):
                            outputs[group].append(part)
                            if part[0] == "status" and part[1].get("forgotten"):
                                forgotten.add(group)
                        continue
                    group = row.group_id if row.record != "verdicts" else json.loads(
                        unpack_lines(row.raw).split(b"\n")[0])["group_id"]
                    outputs[group or f"<{row.cluster}>"].append((row.record, row.ts, frame_row_bytes(row)))
            if not st.exists:
                del states[key]
    return outputs, states, forgotten


def status_parts(row) -> list[tuple[str, tuple]]:
    """A ``status`` row's groups, each with its part of it: its status, and its verdicts' counts in
    the row's summary (keyed by group, so a call of many groups sums those of each)."""
    statuses, summary = read_status(row.raw)
    parts = [(s["group_id"], ("status", HashableDict(s))) for s in statuses]
    for kind, counts in zip(("shapes", "requests"), summary or ()):
        by_group = defaultdict(list)
        for key, n in counts.items():
            by_group[key.group_id].append(repr((key, n)))
        parts += [(g, (kind, tuple(sorted(items)))) for g, items in by_group.items()]
    return parts


class HashableDict(dict):
    def __hash__(self):
        return hash(repr(sorted(self.items(), key=repr)))


def frame_row_bytes(row) -> bytes:
    """A row's content, whichever key it came from."""
    raw = unpack_lines(row.raw) if row.record == "verdicts" else row.raw
    return repr((row.record, row.ts, row.seq, row.ord, row.cluster, row.group_id, row.json, raw, row.reason,
                 row.stamps)).encode()


def _trace(name: str, seed: int, **knobs) -> dict[str, list[tuple[int, bytes]]]:
    events = simulate(SimConfig(knobs=replace(profile(name), **knobs), seed=seed, duration_ms=None, max_events=4_000,
                                labels=False))
    out: dict[str, list] = {"heartbeats": [], "offsets": []}
    for e in events:
        out["heartbeats" if e["type"] in MEMBERSHIP_TYPES else "offsets"].append(
            (e["ts"], json.dumps({k: v for k, v in e.items() if v is not None}).encode()))
    return out


@pytest.mark.parametrize("name,seed,knobs,cfg", [
    ("mixed", 3, {"groups": 9}, RulesConfig()),
    ("expiry-hazard", 5, {"groups": 7}, RulesConfig(offsets_retention_ms=60_000,
                                                     offsets_retention_check_interval_ms=10_000)),
    ("ephemeral", 4, {"groups": 2, "ephemeral_per_hour": 3_000, "ephemeral_life_ms": 20_000, "retention_minutes": 2,
                      "retention_check_interval_ms": 20_000},
     RulesConfig(offsets_retention_ms=120_000, offsets_retention_check_interval_ms=20_000, group_retention_ms=300_000)),
], ids=["mixed", "expiry-hazard", "ephemeral"])
def test_buckets_give_each_group_what_its_own_key_gives(name, seed, knobs, cfg, monkeypatch):
    """Three buckets for many groups: a group's turn comes with its bucket's other groups' input or
    with the bucket's timeout; either way at the batches its own key would have been called, with
    its own state, hold and caught-up marks, so every output row is the same, group for group (a
    call's one status row, group by group). Forgotten groups leave their bucket, and an empty
    bucket leaves the state. Two of the traces cut a call's statuses into rows of two groups, and
    fold its verdicts' summary every three commits."""
    trace = _trace(name, seed, **knobs)
    alone, alone_states, forgotten = run_stream(trace, 0, 700, 12, cfg)
    if name != "mixed":
        monkeypatch.setattr("fencewatch.streaming.runtime.state_fn.STATUS_ROW_GROUPS", 2)
        monkeypatch.setattr("fencewatch.streaming.runtime.state_fn._SUMMARY_FOLD", 3)
    shared, shared_states, forgotten_shared = run_stream(trace, 3, 700, 12, cfg)
    assert sum(len(v) for v in alone.values()) > 100
    assert sorted(alone) == sorted(shared)
    for group in alone:
        assert Counter(alone[group]) == Counter(shared[group]), group
    left_alone = {parse_key(k)[2] for k in alone_states if k.startswith("g")}
    left_shared = {g for k, st in shared_states.items() if k.startswith("G") for g in decode_bucket(st.get[0])}
    assert left_alone == left_shared
    assert len([k for k in shared_states if k.startswith("G")]) <= 3
    assert all(decode_bucket(st.get[0]) for k, st in shared_states.items() if k.startswith("G"))  # none empty
    assert forgotten == forgotten_shared
    if name == "ephemeral":
        assert len(forgotten) > 10 and not forgotten & left_shared


def _call(fn, key: str, frames: list, st: SparkTimeouts, now: int) -> list:
    st.now, st.hasTimedOut = now, not frames
    return [row for frame in fn((key,), iter(frames), st) for row in read_frame(frame)]


def test_a_group_goes_by_the_marks_of_its_own_rows():
    """One bucket, two groups, one batch: b's commit comes in the offsets rows, marked caught up;
    a's heartbeat in the request log's rows, which cannot say (not caught up). b's commit is judged in this
    batch, as with its own key (whose only row is marked), whatever order the rows come in."""
    cfg = RulesConfig()
    lines = [(_commit(5_000, "b"), "offsets", True),
             (json.dumps({"type": "heartbeat", "ts": 5_001, "group_id": "a", "member_id": "m",
                          "member_epoch": 1}).encode(), "request_log", None)]
    # one input batch per source (a router call marks all its rows alike), offsets first
    frames = [pd.DataFrame([(v, i, f"t/0/{i}", None, src, 0, mark)],
                           columns=["value", "seq", "event_id", "coords", "source", "record_ts", "caught_up"])
              for i, (v, src, mark) in enumerate(lines)]
    fn = make_stream_fn(cfg, max_skew_ms=60_000, sources=("offsets", "request_log"))
    for buckets in (0, 1):
        routed = pd.concat(list(make_router(group_buckets=buckets)(frames)))
        assert routed["caught_up"].tolist()[-1] is False  # the router without Spark: not caught up
        judged = []
        for key, rows in routed.groupby("key", sort=False):
            if parse_key(key)[0] in "gG":
                judged += [r for r in _call(fn, key, [rows], SparkTimeouts(), 6_000) if r.record == "verdicts"]
        assert [json.loads(unpack_lines(r.raw).split(b"\n")[0])["group_id"] for r in judged] == ["b"], buckets


def test_a_group_is_due_once_its_wake_up_is_before_the_batch_time():
    """Spark's rule for a key's timeout, applied to each group of a bucket: due when the time it
    asked for is before the batch's, not at it."""
    from fencewatch.streaming.runtime.state_codec import encode_bucket

    cfg = RulesConfig()
    fn = make_stream_fn(cfg, max_skew_ms=1_000, sources=("offsets",))
    routed = pd.concat(list(make_router(group_buckets=1)([_frame([_commit(1_000, "x"), _commit(1_001, "y")])])))
    (bkey,) = [k for k in routed["key"] if k.startswith("G")]
    st = SparkTimeouts()
    _call(fn, bkey, [routed[routed["key"] == bkey]], st, 2_000)
    groups = decode_bucket(st.get[0])
    assert set(groups) == {"x", "y"}
    for wake, stepped in ((5_000, False), (4_999, True)):
        state = SparkTimeouts()
        state.update((encode_bucket({g: (e[0], e[1], wake if g == "x" else None) for g, e in groups.items()}), None))
        statuses = [s["group_id"] for r in _call(fn, bkey, [], state, 5_000) if r.record == "status"
                    for s in read_status(r.raw)[0]]
        assert statuses == (["x"] if stepped else []), wake


def _format_file(tmp_path):
    return json.loads((tmp_path / cp.STATE_FORMAT_FILE).read_text())


def test_a_new_checkpoint_records_its_group_buckets(tmp_path):
    assert cp.ensure_state_format(str(tmp_path), group_buckets=64) == 64
    assert _format_file(tmp_path)["group_buckets"] == 64
    assert cp.ensure_state_format(str(tmp_path), group_buckets=64) == 64


def test_a_checkpoint_keeps_its_buckets_whatever_the_setting_says(tmp_path, caplog):
    cp.ensure_state_format(str(tmp_path), group_buckets=64)
    (tmp_path / "offsets").mkdir()
    (tmp_path / "offsets" / "0").write_text("v1\n{}\n{}\n")
    with caplog.at_level(logging.WARNING):
        assert cp.ensure_state_format(str(tmp_path), group_buckets=256) == 64
    assert "started with 64, which it keeps" in caplog.text


def test_a_checkpoint_of_0_2_0_keeps_one_key_per_group(tmp_path):
    """0.2.0 wrote the format file without group buckets: its state has a key per group."""
    (tmp_path / "fencewatch-state").mkdir()
    (tmp_path / cp.STATE_FORMAT_FILE).write_text(json.dumps({"state_format": 1}))
    (tmp_path / "offsets").mkdir()
    (tmp_path / "offsets" / "0").write_text("v1\n{}\n{}\n")
    assert cp.ensure_state_format(str(tmp_path), group_buckets=256) == 0
    assert cp.ensure_state_format(str(tmp_path), group_buckets=256) == 0


def test_a_format_file_with_no_batch_yet_takes_the_setting(tmp_path):
    (tmp_path / "fencewatch-state").mkdir()
    (tmp_path / cp.STATE_FORMAT_FILE).write_text(json.dumps({"state_format": 1}))
    assert cp.ensure_state_format(str(tmp_path), group_buckets=32) == 32
    assert _format_file(tmp_path) == {"state_format": 1, "group_buckets": 32}

"""The Spark edge of the rules: pandas rows in, ``state`` calls, pandas rows out.

Two functions, no business logic of their own (that is ``state.engine.run_key``); what they read
comes from the router (``routing.make_router``, a ``mapInArrow``, or inside the Kafka source's
``read``: each record checked and routed to its keys as the record itself):

- ``stream_fn`` (``applyInPandasWithState``): per key, decode its records, hold the events
  back until every source topic has been read past them (see :class:`Hold`), apply them in
  (ts, seq) order, make the decisions due, and emit rendered records.
- ``batch_fn`` (``applyInPandas``, for ``replay --engine spark``): all of a key's
  events at once, clock = the trace's last ``ts``.

Outputs are rendered by ``sinks.jsonl``, the encoder the local engine uses, so
the two engines write identical bytes.
"""
from __future__ import annotations

import json
from collections import Counter
from itertools import repeat
from operator import attrgetter
from typing import TYPE_CHECKING, Callable, Iterable, Iterator

import numpy as np
import pandas as pd

from fencewatch.sinks.jsonl import alert_json, commit_verdicts_block, commit_verdicts_pieces, forget_layouts
from fencewatch.state.status import DEFAULT_CLUSTER, event_counts, step_status, summarize_commit_verdicts
from fencewatch.state import group as grp
from fencewatch.state.group_view import count_verdicts, group_view, snapshot_due, view_key
from fencewatch.state.config import RulesConfig
from fencewatch.state.engine import (Key, KeyKind, group_key, key_forgotten, key_wakeup, run_key, run_topics,
                                     timeout_ms)

from fencewatch.streaming.runtime.gc_pause import no_cyclic_gc
from fencewatch.streaming.runtime.hold import Hold
from fencewatch.streaming.runtime.outputs import OutRows, pack_lines, pack_stamps, pack_status
from fencewatch.streaming.runtime.request_log_input import EVENTS_PER_LINE, RECORDS_AFTER_LINES
from fencewatch.streaming.sources.topic_metadata import names_an_id, names_learner
from fencewatch.streaming.runtime.hold import Held, StoredCommit
from fencewatch.streaming.runtime.routing import (Rows, decode_released, held_items, parse_key, read_bucket, read_dead,
                                                 read_items, read_key_frame)
from fencewatch.streaming.runtime.columns import DLQ_KEY, OUTPUT
from fencewatch.streaming.runtime.state_codec import (decode_bucket, decode_hold, decode_state, encode_bucket, encode_hold,
                                                     encode_state)

if TYPE_CHECKING:
    from pyspark.sql.streaming.state import GroupState as SparkGroupState  # PySpark's per-key handle

_TS_SEQ = attrgetter("ts", "seq")
OUTPUT_COLUMNS = OUTPUT.fieldNames()
_Rows = Rows


def _run(pkey: Key, st, ready: list[Held], cfg: RulesConfig, out: grp.Outputs, clock: int | None):
    """Apply a key's released entries (``routing.decode_released``), in order: a group key's are
    typed events (``engine.run_key``); a topic bucket's, its topics' watches' stored commits
    (:class:`StoredCommit`) and its :class:`TopicEvent` entries (``engine.run_topics``)."""
    if pkey.kind is KeyKind.GROUP:
        return run_key(pkey, st, [held.payload for held in ready], cfg, out, clock=clock)
    return run_topics(pkey.cluster, st, ready, cfg, out, clock, commit_type=StoredCommit)


def _render(out: grp.Outputs, verdict_rows: Callable[[OutRows, list], None] | None,
            rows: OutRows | None = None) -> OutRows:
    """A call's outputs: its verdicts as ``verdict_rows`` lays them out (:func:`_verdicts_row` for
    the stream, :func:`_commit_rows` for replay; None: no verdicts topic), then its alerts, added
    to ``rows`` (default: new ones)."""
    rows = OutRows() if rows is None else rows
    if verdict_rows is not None:
        verdict_rows(rows, out.commits)
    for a in out.alerts:
        rows.add("alert", a.ts, cluster=a.cluster, group_id=a.group_id, json=alert_json(a), alert_id=a.alert_id)
    return rows


def _commit_rows(rows: OutRows, commits: list) -> None:
    """One row per commit request: its verdict lines joined by "\n" (``ord`` = how many)."""
    for cv in commits:
        if cv.parts:
            rows.add("verdict", cv.ts, cv.seq, len(cv.parts), cv.cluster, cv.group_id, commit_verdicts_block(cv))


VERDICT_ROW_LINES = 2_000
"""Verdict lines per ``verdicts`` row at most (a line is ~300-500 bytes)."""


def _verdicts_row(rows: OutRows, commits: list) -> None:
    """All verdict lines of one state function call in one row: the lines as UTF-8 bytes in
    judging order, each ending in a newline, compressed (``raw``, ``outputs.pack_lines``), how many
    (``ord``), the newest ts, and each line's commit ts packed as little-endian int64 (``stamps``:
    the decision-latency samples). Per-row costs (pandas, Arrow, the JVM, the collect, the
    driver's columns) then follow keys, not commit requests, and the lines stay the bytes the
    producer sends."""
    pieces, stamps, first = [], [], None

    def flush():
        rows.add("verdicts", max(stamps), first.seq, len(stamps), first.cluster, first.group_id,
                 raw=pack_lines(b"".join(pieces)), stamps=pack_stamps(stamps))

    for cv in commits:
        parts = cv.parts
        if parts:
            first = first or cv
            pieces += commit_verdicts_pieces(cv)
            stamps += [cv.ts] * len(parts)
            if len(stamps) >= VERDICT_ROW_LINES:  # a row stays ~1 MB, whatever the batch size
                flush()
                pieces, stamps, first = [], [], None
    if pieces:
        flush()


def _frame(cols: dict[str, list]) -> pd.DataFrame:
    """A call's output rows as one block of object columns: pandas' nullable integer dtypes become
    ChunkedArrays in pyarrow, which Spark's Arrow writer rejects. Built from a 2-D object array,
    not a dict: ``DataFrame(dict, dtype=object)`` makes and aligns a Series per column, several
    times the 2-D array's cost, paid by every key of every micro-batch (docs/decisions.md, "The
    streaming job")."""
    block = np.empty((len(cols["record"]), len(OUTPUT_COLUMNS)), dtype=object)
    for i, name in enumerate(OUTPUT_COLUMNS):
        block[:, i] = cols[name]
    return pd.DataFrame(block, columns=OUTPUT_COLUMNS, dtype=object, copy=False)  # dtype: no type inference


def _dead_letters(pdfs: Iterable[pd.DataFrame]) -> Iterator[pd.DataFrame]:
    """Dead letters and unknown types the router decided: passed through as output rows, and the
    unknown types counted per source as events of type ``unknown`` (a ``counts`` row, cluster
    ``default``, no group: contract §1, "counted and skipped")."""
    for pdf in pdfs:
        if pdf.empty:
            continue
        rows = OutRows()
        stamps = pdf["ts"].tolist() if "ts" in pdf else [None] * len(pdf)  # the stream's keyed rows have none
        sources = pdf["source"].tolist() if "source" in pdf else [None] * len(pdf)
        unknown: Counter = Counter()
        for ts, source, payload in zip(stamps, sources, pdf["payload"].tolist()):
            etype, seq, raw, reason, coords = read_dead(payload)
            rows.add(etype, ts, seq, json=coords, raw=raw, reason=reason)
            if etype == "unknown":
                unknown[("unknown", source or "other")] += 1
        if unknown:
            rows.add("counts", None, cluster=DEFAULT_CLUSTER, group_id="", json=json.dumps(event_counts(unknown)))
        yield _frame(rows.cols)


def _add_dead(rows: OutRows, dead: list) -> None:
    """Records the router accepted that no longer decode where they are judged (a guard, never
    expected): dead letters all the same, with the decoder's reason; their coordinates are the
    event ids the router gave them."""
    for value, reason, eid, seq in dead:
        rows.add("dlq", None, seq, json=eid, raw=bytes(value), reason=reason)


STATUS_ROW_GROUPS = 500
"""Group statuses per ``status`` row at most (a status is ~1 KB pickled)."""
_SUMMARY_FOLD = 4_096
"""Commit requests a call keeps before it folds them into its verdict summary (bounds memory)."""


class _Statuses:
    """A call's group statuses, shipped together in one ``status`` row (``raw``: the pickled list
    of the groups' gauges and counts, and the summary of all their verdicts for the metrics;
    ``outputs.read_status``). One row per call, not per group: a bucket holds many groups, and every
    output row costs again in pandas, Arrow, the JVM and the driver, in every micro-batch
    (docs/decisions.md, "A call's group statuses in one output row")."""

    __slots__ = ("cfg", "statuses", "commits", "shapes", "requests", "ts")

    def __init__(self, cfg: RulesConfig) -> None:
        self.cfg, self.statuses = cfg, []
        self.commits: dict = {}  # the broker's policy for the group's type -> its groups' commits
        self.shapes: Counter = Counter()
        self.requests: Counter = Counter()
        self.ts: int | None = None

    def add(self, rows: OutRows, st, counts: dict, out: grp.Outputs,
            forgotten: bool = False, summary: tuple[Counter, Counter] | None = None) -> None:
        """A group's status after its step (``status.step_status``: with the step's event counts and
        heartbeat errors ``out`` counted); ``forgotten``: its last, as its state goes (state
        ``Dead``: the metrics drop the group). ``summary``: its commits' verdict summary, when the
        step made it already (the group's snapshot counts them): added as it is, not made again."""
        self.statuses.append(step_status(st, self.cfg, counts, out.heartbeat_errors, forgotten=forgotten))
        if st.last_ts is not None and (self.ts is None or st.last_ts > self.ts):
            self.ts = st.last_ts
        if summary is not None:
            self.shapes.update(summary[0])
            self.requests.update(summary[1])
        elif out.commits:
            commits = self.commits.setdefault(self.cfg.policy_for(st.group_type), [])
            commits += out.commits
            if len(commits) >= _SUMMARY_FOLD:
                self._fold()
        if len(self.statuses) >= STATUS_ROW_GROUPS:
            self.flush(rows)

    def _fold(self) -> None:
        for policy, commits in self.commits.items():
            shapes, requests = summarize_commit_verdicts(commits, policy)
            self.shapes.update(shapes)
            self.requests.update(requests)
        self.commits = {}

    def flush(self, rows: OutRows) -> None:
        if self.commits:
            self._fold()
        if self.statuses:
            summary = (self.shapes, self.requests) if self.shapes or self.requests else None
            rows.add("status", self.ts, raw=pack_status(self.statuses, summary))
        self.statuses, self.ts = [], None
        self.shapes, self.requests = Counter(), Counter()


class _KeySteps:
    """What the state function does for a key (:func:`make_stream_fn`): a group key's or topic
    bucket's turn (:meth:`call`), a group bucket's groups' turns (:meth:`bucket_call`), and one
    key's step (:meth:`step`), with the job's settings."""

    def __init__(self, cfg: RulesConfig, max_skew_ms: int, emit_verdicts: bool,
                 wall_clock: Callable[[], float] | None, sources: tuple[str, ...], emit_groups: bool = False) -> None:
        self.cfg, self.max_skew_ms, self.emit_verdicts = cfg, max_skew_ms, emit_verdicts
        self.wall_clock, self.sources, self.emit_groups = wall_clock, sources, emit_groups

    def call(self, pkey: Key, pdfs: Iterator[pd.DataFrame], spark_state: SparkGroupState) -> pd.DataFrame | None:
        wall_clock = self.wall_clock
        now = spark_state.getCurrentProcessingTimeMs() if wall_clock is None else int(wall_clock() * 1000)
        if pkey.kind is KeyKind.GROUP_BUCKET:
            return self.bucket_call(pkey, pdfs, spark_state, now)
        reads, marks = [], []
        if not spark_state.hasTimedOut:
            for pdf in pdfs:
                if "caught_up" in pdf:
                    marks += pdf["caught_up"].tolist()
                reads += [(source, read_key_frame(blob)) for source, blob in zip(pdf["source"].tolist(),
                                                                                  pdf["payload"].tolist())]
        rows, statuses = OutRows(), _Statuses(self.cfg)
        # the key's rules state and hold (``STATE``), as state_codec stored them
        stored, wait = self.step(pkey, spark_state.get if spark_state.exists else None, reads, marks, now, rows,
                                 statuses)
        statuses.flush(rows)
        if stored is None:
            spark_state.remove()
        else:
            spark_state.update(stored)
            if wait is not None:
                spark_state.setTimeoutDuration(wait)
        return _frame(rows.cols) if len(rows) else None

    def bucket_call(self, pkey: Key, pdfs: Iterator[pd.DataFrame], spark_state: SparkGroupState,
                    now: int) -> pd.DataFrame | None:
        """A group bucket's turn: each group with rows, and each whose wake-up has passed (what its
        own key's timeout would have been), takes its :func:`step` with its own stored values; the
        others are carried as their bytes. The bucket wakes at its groups' earliest wake-up."""
        groups = decode_bucket(spark_state.get[0], pkey) if spark_state.exists else {}
        reads: dict[str, list] = {}
        marks: dict[str, list] = {}
        if not spark_state.hasTimedOut:
            for pdf in pdfs:
                marked = "caught_up" in pdf
                row_marks = pdf["caught_up"].tolist() if marked else repeat(None)
                for source, blob, mark in zip(pdf["source"].tolist(), pdf["payload"].tolist(), row_marks):
                    for group_id, frame in read_bucket(blob):
                        reads.setdefault(group_id, []).append((source, frame))
                        if marked:  # a group's marks: those of the rows it is in, as its own key's
                            marks.setdefault(group_id, []).append(mark)
        # Spark times a key out when its timeout is before the batch's time; the same here.
        due = [g for g, entry in groups.items() if g not in reads and entry[2] is not None and entry[2] < now]
        rows, statuses = OutRows(), _Statuses(self.cfg)
        for group_id in [*reads, *due]:
            entry = groups.get(group_id)
            stored, wait = self.step(group_key(pkey.cluster, group_id), None if entry is None else (entry[0], entry[1]),
                                     reads.get(group_id, ()), marks.get(group_id, ()), now, rows, statuses)
            if stored is None:
                groups.pop(group_id, None)
            else:
                groups[group_id] = [stored[0], stored[1], None if wait is None else now + wait]
        statuses.flush(rows)
        if not groups:
            spark_state.remove()
        else:
            spark_state.update((encode_bucket(groups), None))
            wakes = [entry[2] for entry in groups.values() if entry[2] is not None]
            if wakes:
                spark_state.setTimeoutDuration(max(1, min(wakes) - now))
        return _frame(rows.cols) if len(rows) else None

    def step(self, pkey: Key, stored: tuple | None, reads, marks, now: int, rows: OutRows,
             statuses: _Statuses):
        """One key's turn in a micro-batch: admit its routed frames ``reads`` [(source, (records, commits,
        counts))] to its hold, release what is due, judge it, render the outputs into ``rows``
        (a group's status into ``statuses``).
        ``marks``: the caught-up column of the rows read (none: a timeout). Returns the values to
        store (None: the key is forgotten) and the timeout it asks for (ms, None: none)."""
        cfg, max_skew_ms = self.cfg, self.max_skew_ms
        is_group = pkey.kind is KeyKind.GROUP
        st, hold = None, Hold()
        if stored is not None:
            blob, held = stored
            st = decode_state(pkey, blob) if blob is not None else None
            hold = decode_hold(held, pkey) if held is not None else Hold()
        counts: Counter = Counter()
        dead: list = []
        for source, frame in reads:
            hold.admit_read(source, held_items(frame, source, counts, now), now)
        # every row of this call from a micro-batch that read all sources to their ends
        caught_up = bool(marks) and all(m is True for m in marks)
        ready = decode_released(pkey, hold.release(now, max_skew_ms, all_sources=is_group, expected=self.sources,
                                                   caught_up=caught_up), dead)
        clock = hold.clock(now)
        out = grp.Outputs()
        before = view_key(st) if is_group and self.emit_groups else None
        st = _run(pkey, st, ready, cfg, out, clock if hold.last_ts else None)
        # Forgotten (contract §4.4; the rule is state/'s): the key's state goes, held events none.
        gone = key_forgotten(pkey.kind, st, clock, cfg, started=bool(hold.last_ts), holding=bool(hold.pending))
        _render(out, _verdicts_row if self.emit_verdicts else None, rows)
        summary = None
        if is_group and self.emit_groups and st is not None:
            summary = _group_row(rows, st, before, out, gone, cfg)
        _add_dead(rows, dead)
        forget_layouts()  # keyed by this call's objects: no later call can hit them (issue 15)
        if is_group:
            statuses.add(rows, st, counts, out, forgotten=gone, summary=summary)
        elif counts:  # partition-scoped events (partition_epochs): counted with group=""
            rows.add("counts", None, cluster=pkey.cluster, group_id="", json=json.dumps(event_counts(counts)))
        if gone:
            return None, None
        wait = timeout_ms(key_wakeup(pkey.kind, st, cfg), clock, hold.wait_ms(now, max_skew_ms))
        return (encode_state(pkey, st), encode_hold(hold)), wait


def _group_row(rows: OutRows, g, before: tuple | None, out: grp.Outputs, gone: bool,
               cfg: RulesConfig) -> tuple[Counter, Counter] | None:
    """The group's snapshot for the groups topic (``sinks.groups_topic``, compacted, keyed by
    cluster and group) when ``group_view.snapshot_due``; a tombstone (``json`` None) when the
    group is forgotten. Its verdict counts are the step's (docs/decisions.md, "The per-member
    group view"). Returns the step's verdict summary (``summarize_commit_verdicts``; None: no
    commit), which the group's status then takes as it is."""
    summary = summarize_commit_verdicts(out.commits, cfg.policy_for(g.group_type)) if out.commits else None
    if gone:
        rows.add("group", g.last_ts, cluster=g.cluster, group_id=g.group_id)
        return summary
    shapes = summary[0] if summary is not None else None
    if snapshot_due(before, g, shapes):
        view = group_view(g, count_verdicts(shapes) if shapes else None)
        rows.add("group", g.last_ts, cluster=g.cluster, group_id=g.group_id,
                 json=json.dumps(view, separators=(",", ":")))
    return summary


def make_stream_fn(cfg: RulesConfig, *, max_skew_ms: int = 2_000, emit_verdicts: bool = True,
                   wall_clock: Callable[[], float] | None = None, sources: tuple[str, ...] = (),
                   emit_groups: bool = False) -> Callable:
    """The ``applyInPandasWithState`` function (processing-time timeouts; see :class:`Hold`).

    ``emit_verdicts`` False (no verdicts topic) ships only alerts and per-group summaries.
    ``sources``: the router's source names that feed group keys (``job.group_sources``).
    ``emit_groups``: write each group's snapshot when it changes (``sinks.groups_topic``).
    The wall time the hold and a key's clock go by is the micro-batch's (Spark's processing time,
    logged with the batch's offsets; its timeouts count from it too), not the call's: a batch run
    again after a crash holds and releases what its first attempt did, whose outputs are in Kafka
    already (issue 33). ``wall_clock`` (seconds) stands in for it where no Spark runs (tests).
    """

    steps = _KeySteps(cfg, max_skew_ms, emit_verdicts, wall_clock, sources, emit_groups)

    def stream_fn(key: tuple, pdfs: Iterator[pd.DataFrame], spark_state: SparkGroupState) -> Iterator[pd.DataFrame]:
        (k,) = key  # Spark's grouping key: the one "key" column
        if k == DLQ_KEY:
            yield from _dead_letters(pdfs)
            return
        with no_cyclic_gc(settle=False):
            frame = steps.call(parse_key(k), pdfs, spark_state)
        if frame is not None:
            yield frame

    return stream_fn


def make_batch_fn(cfg: RulesConfig, clock: int | None) -> Callable:
    """The ``applyInPandas`` function for replay: a key's whole trace, decisions due at ``clock``."""

    def batch_fn(key: tuple, pdf: pd.DataFrame) -> pd.DataFrame:
        (k,) = key  # Spark's grouping key: the one "key" column
        if k == DLQ_KEY:
            frames = list(_dead_letters([pdf]))
            return frames[0] if frames else _frame({c: [] for c in OUTPUT_COLUMNS})
        pkey = parse_key(k)
        dead: list = []
        with no_cyclic_gc(settle=False):
            items = read_whole(pkey, [pdf], dead)
            out = grp.Outputs()
            _run(pkey, None, items, cfg, out, clock if pkey.kind is KeyKind.GROUP else None)
            rows = _render(out, _commit_rows)
            _add_dead(rows, dead)
            return _frame(rows.cols)

    return batch_fn


def read_whole(pkey: Key, pdfs: Iterable[pd.DataFrame], dead: list) -> list:
    """A key's routed rows all at once, in (ts, seq) order, decoded: replay's input to
    :func:`_run` (no hold: nothing can arrive later). Records that no longer decode go to ``dead``."""
    items = [it for pdf in pdfs for source, blob in zip(pdf["source"].tolist(), pdf["payload"].tolist())
             for it in read_items(pkey, source, blob, Counter())]
    items.sort(key=_TS_SEQ)
    return decode_released(pkey, items, dead)


def make_bridge_mapper(topic_ids: dict[str, str] | None = None, cluster: str | None = None,
                       metadata: dict[str, str] | None = None) -> Callable:
    """``mapInPandas`` over ``__consumer_offsets`` records: each record -> its contract §1 events (the
    bridge's stateless ``decode_record``) as router input rows; undecodable records carry
    ``bad_reason`` (unknown record types and versions are skipped, as Kafka does). ``metadata``:
    an admin client's settings; a record naming a topic id the names lack (a topic created after
    the job started) then makes the worker learn every topic's id from cluster metadata, at most
    every ``topic_metadata.TOPIC_REFRESH_S``, and is decoded again (it has no memory to undo)."""
    from fencewatch.streaming.ingest.consumer_offsets.mapping import TopicNames, decode_record
    from fencewatch.streaming.ingest.consumer_offsets.records import RecordDecodeError

    names = TopicNames(topic_ids or {})
    learn = names_learner(names, metadata)

    def learned_names(events: list[dict]) -> bool:
        return metadata is not None and names_an_id(events) and learn()

    def bridge_batches(batches: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
        for pdf in batches:
            out = _Rows(("value", "seq", "event_id", "coords", "source", "record_ts", "bad_reason"))
            for key, value, topic, partition, offset, ts in zip(pdf["key"], pdf["value"], pdf["topic"],
                                                                pdf["partition"], pdf["offset"], pdf["record_ts"]):
                eid, coords = f"{topic}/{partition}/{offset}", f"{topic}[{partition}]@{offset}"
                try:
                    k, v = None if key is None else bytes(key), None if value is None else bytes(value)
                    events = decode_record(k, v, int(ts), eid, names, cluster=cluster)
                    if learned_names(events):
                        events = decode_record(k, v, int(ts), eid, names, cluster=cluster)
                    rows = [(json.dumps(e).encode(), None) for e in events]
                except RecordDecodeError as exc:
                    if exc.code in RecordDecodeError.SKIPPABLE:
                        continue
                    rows = [(None if value is None else bytes(value), f"{exc.code}(detail={exc.detail[:200]})")]
                for i, (payload, bad) in enumerate(rows):
                    # seq: one partition per group, so offset order (up to 64 events per record),
                    # after a request-log event of the same ts
                    out.add(payload, RECORDS_AFTER_LINES + int(offset) * EVENTS_PER_LINE + i, eid, coords,
                            "consumer_offsets", int(ts), bad)
            if out.cols["seq"]:  # no empty frame: its columns lose their types (see request_log_input)
                yield pd.DataFrame(out.cols)

    return bridge_batches

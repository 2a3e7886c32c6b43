"""The Spark edge of the rules: pandas rows in, ``state`` calls, pandas rows out.

Three functions, no business logic of their own (that is ``state.engine.run_key``):

- ``route_batches`` (``mapInPandas``): decode each record (JSON or Avro) into a
  typed event, route it to its keys (``state.engine.route``) and emit one row
  per (key, event) with the event pickled; bad records become dead-letter rows
  under ``DLQ_KEY`` with their reason, unknown types are counted the same way.
- ``stream_fn`` (``applyInPandasWithState``): per key, hold events back until every
  source topic has been read past them (see :class:`Hold`), apply them in (ts, seq)
  order, make the decisions due, and emit rendered records.
- ``batch_fn`` (``applyInPandas``, for ``replay --engine spark``): all of a key's
  events at once, clock = the trace's last ``ts``.

Outputs are rendered by ``sinks.jsonl``, the encoder the local engine uses, so
the two engines write identical bytes.
"""
from __future__ import annotations

import json
import logging
import pickle
import time
from dataclasses import dataclass, field
from typing import Callable, Iterable, Iterator

import pandas as pd

from collections import Counter

from fencewatch.sinks.jsonl import alert_json, commit_verdicts_json
from fencewatch.sinks.prometheus import summarize_commit_verdicts
from fencewatch.state import group as grp
from fencewatch.state.config import RulesConfig
from fencewatch.state.engine import route, run_key

from .decoding import (DEFAULT_CLUSTER, KNOWN_TYPES, DecodeError, UnknownType, decode_avro_record,
                       decode_json_line, event_type)
from .schemas import DLQ_KEY, KEYED, OUTPUT, ROUTED

log = logging.getLogger(__name__)

_SEP = "\x1f"
_PICKLE = pickle.HIGHEST_PROTOCOL
OUTPUT_COLUMNS = OUTPUT.fieldNames()
ROUTED_COLUMNS = ROUTED.fieldNames()
_KEYED_IN = ("value", "primary", "seq", "event_id", "coords", "source", "record_ts", "bad_reason")


def key_string(key: tuple) -> str:
    return _SEP.join(str(k) for k in key)


def parse_key(text: str) -> tuple:
    kind, cluster, name = text.split(_SEP, 2)
    return (kind, cluster, name)


def make_decoder(input_format: str = "json", schema_ids: Iterable[int] = (1,)) -> Callable:
    """``decode(value, seq, event_id, coords)`` -> typed event | DecodeError | UnknownType."""
    ids = frozenset(schema_ids)

    def decode(value, seq, eid, coords):
        if input_format == "avro":
            return decode_avro_record(bytes(value), seq=seq, default_event_id=eid, coords=coords, schema_ids=ids)
        return decode_json_line(value, seq=seq, default_event_id=eid, coords=coords)

    return decode


def decode_record(decode: Callable, value, seq: int, eid: str, coords: str, bad: str | None):
    """One input row -> typed event | UnknownType | str (the dead-letter reason: ``bad``, set by an
    upstream decoder, or the :class:`DecodeError`'s)."""
    if bad is not None:
        return bad
    if value is None:
        return "MISSING_VALUE"
    res = decode(value, seq, eid, coords)
    return res.reason if type(res) is DecodeError else res


def make_router(input_format: str = "json", schema_ids: Iterable[int] = (1,)) -> Callable:
    """The ``mapInPandas`` function of ``replay --engine spark``: columns value, seq, event_id, coords,
    source, record_ts, bad_reason -> ROUTED rows, each event decoded once and pickled (``bad_reason``
    set: an upstream decoder already rejected the record)."""
    decode = make_decoder(input_format, schema_ids)

    def route_batches(batches: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
        for pdf in batches:
            cols: dict[str, list] = {c: [] for c in ROUTED_COLUMNS}

            def add(key, ts, seq, etype, source, payload, reason, coords):
                cols["key"].append(key)
                cols["ts"].append(ts)
                cols["seq"].append(seq)
                cols["etype"].append(etype)
                cols["source"].append(source)
                cols["payload"].append(payload)
                cols["reason"].append(reason)
                cols["coords"].append(coords)

            bad_reasons = pdf["bad_reason"] if "bad_reason" in pdf else [None] * len(pdf)
            for value, seq, eid, coords, source, record_ts, bad in zip(
                    pdf["value"], pdf["seq"], pdf["event_id"], pdf["coords"], pdf["source"], pdf["record_ts"],
                    bad_reasons):
                if bad is not None:
                    add(DLQ_KEY, int(record_ts), int(seq), "dlq", source, None if value is None else bytes(value),
                        bad, coords)
                    continue
                if value is None:
                    add(DLQ_KEY, int(record_ts), int(seq), "dlq", source, None, "MISSING_VALUE", coords)
                    continue
                res = decode(value, int(seq), eid, coords)
                if isinstance(res, DecodeError):
                    raw = value if isinstance(value, (bytes, bytearray)) else str(value).encode()
                    add(DLQ_KEY, int(record_ts), int(seq), "dlq", source, bytes(raw), res.reason, coords)
                elif isinstance(res, UnknownType):
                    add(DLQ_KEY, int(record_ts), int(seq), "unknown", source, None, res.type, coords)
                else:
                    etype = event_type(res)
                    first = True
                    for key, kev in route(res):
                        add(key_string(key), res.ts, res.seq, etype if first else "commit_fact", source,
                            pickle.dumps(kev, _PICKLE), None, None)
                        first = False
            yield pd.DataFrame(cols, columns=ROUTED_COLUMNS)

    return route_batches


def keyed_records(inputs):
    """The streaming query's keying, in the JVM (JSON input): the input columns (value, seq,
    event_id, coords, source, record_ts, bad_reason) -> KEYED rows, without a Python pass.

    Only the key fields are read (``type``, ``cluster``, ``group_id``, ``topic``, the topics
    of ``offsets``); the keys are a superset of ``state.engine.route``'s (a commit goes to
    its topics whatever its error code), and the state function, which decodes the record,
    keeps only what ``route`` sends to its key. A record whose key fields are missing or of
    another shape goes to DLQ_KEY, where the decoder says why.
    """
    from pyspark.sql import functions as F

    rest = [c for c in KEYED.fieldNames() if c not in ("key", "primary")]
    # Parsed once, in its own projection (used by several expressions below).
    parsed = inputs.select(F.from_json(F.col("value").cast("string"),
                                       "type string, cluster string, group_id string, topic string, "
                                       "offsets array<struct<topic: string>>").alias("f"), *rest)
    fields = F.col("f")
    typ = fields["type"]
    cluster = F.coalesce(fields["cluster"], F.lit(DEFAULT_CLUSTER))
    gid, topic = fields["group_id"], fields["topic"]
    ok = F.col("bad_reason").isNull() & F.col("value").isNotNull()

    def key(kind, name):
        return F.concat_ws(_SEP, F.lit(kind), cluster, name)

    group_key = F.when(ok & typ.isin(*sorted(KNOWN_TYPES - {"partition_epochs"})) & gid.isNotNull(),
                       key("g", gid))
    epochs_key = F.when(ok & (typ == "partition_epochs") & topic.isNotNull(), key("t", topic))
    primary = F.struct(F.coalesce(group_key, epochs_key, F.lit(DLQ_KEY)).alias("key"), F.lit(True).alias("primary"))
    commit_topics = F.array_distinct(F.transform(
        F.filter(F.coalesce(fields["offsets"], F.array()), lambda o: o["topic"].isNotNull()),
        lambda o: key("t", o["topic"])))
    copies = (F.when(group_key.isNull(), F.array())
              .when(typ.isin("offset_commit", "txn_offset_commit"), commit_topics)
              .when(typ.isin("offset_committed", "offset_deleted") & topic.isNotNull(), F.array(key("t", topic)))
              .otherwise(F.array()))
    targets = F.concat(F.array(primary),
                       F.transform(copies, lambda k: F.struct(k.alias("key"), F.lit(False).alias("primary"))))
    return (parsed.select(F.explode(targets).alias("target"), *rest)
            .select(F.col("target.key").alias("key"), F.col("target.primary").alias("primary"), *rest))


def make_keyer(input_format: str = "json", schema_ids: Iterable[int] = (1,)) -> Callable:
    """The Python keying for inputs the JVM cannot read (Avro): ``mapInPandas`` to KEYED rows by
    decoding each record and asking ``state.engine.route`` for its keys (the state function
    decodes it again)."""
    decode = make_decoder(input_format, schema_ids)
    columns = KEYED.fieldNames()

    def key_batches(batches: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
        for pdf in batches:
            rows = []
            bad_reasons = pdf["bad_reason"] if "bad_reason" in pdf else [None] * len(pdf)
            for value, seq, eid, coords, source, record_ts, bad in zip(
                    pdf["value"], pdf["seq"], pdf["event_id"], pdf["coords"], pdf["source"], pdf["record_ts"],
                    bad_reasons):
                res = decode_record(decode, value, int(seq), eid, coords, bad)
                raw = None if value is None else bytes(value)
                keys = [DLQ_KEY] if type(res) in (str, UnknownType) else [key_string(k) for k, _ in route(res)]
                for i, k in enumerate(keys):
                    rows.append((k, i == 0, raw, int(seq), eid, coords, source, int(record_ts), bad))
            yield pd.DataFrame(rows, columns=columns)

    return key_batches


def _render(out: grp.Outputs, *, verdicts: bool = True) -> dict[str, list]:
    cols: dict[str, list] = {c: [] for c in OUTPUT_COLUMNS}

    def add(record, ts, seq, ord_, cl, gid, text, alert_id=None, raw=None, reason=None):
        cols["record"].append(record)
        cols["ts"].append(ts)
        cols["seq"].append(seq)
        cols["ord"].append(ord_)
        cols["cluster"].append(cl)
        cols["group_id"].append(gid)
        cols["json"].append(text)
        cols["alert_id"].append(alert_id)
        cols["raw"].append(raw)
        cols["reason"].append(reason)

    if verdicts:
        # One row per commit request: its verdict lines joined by "\n" (``ord`` = how many).
        # A commit names ~4 partitions: 4x fewer rows through pandas, Arrow and the collect.
        for cv in out.commits:
            lines = commit_verdicts_json(cv)
            if lines:
                add("verdict", cv.ts, cv.seq, len(lines), cv.cluster, cv.group_id, "\n".join(lines))
    for a in out.alerts:
        add("alert", a.ts, None, None, a.cluster, a.group_id, alert_json(a), a.alert_id)
    return cols


def _frame(cols: dict[str, list]) -> pd.DataFrame:
    # Object columns: pandas' nullable integer dtypes become ChunkedArrays in pyarrow,
    # which Spark's Arrow writer rejects; one constructor call is also the cheapest.
    return pd.DataFrame(cols, columns=OUTPUT_COLUMNS, dtype=object)


def _dead_letters(pdfs: Iterable[pd.DataFrame]) -> Iterator[pd.DataFrame]:
    for pdf in pdfs:
        if pdf.empty:
            continue
        n = len(pdf)
        yield _frame({"record": ["dlq" if e == "dlq" else "unknown" for e in pdf["etype"]], "ts": list(pdf["ts"]),
                      "seq": list(pdf["seq"]), "ord": [None] * n, "cluster": [None] * n, "group_id": [None] * n,
                      "json": list(pdf["coords"]), "alert_id": [None] * n, "raw": list(pdf["payload"]),
                      "reason": list(pdf["reason"])})


def _status_row(st, cfg: RulesConfig, counts: dict, hb_before: tuple[int, int], out: grp.Outputs) -> dict[str, list]:
    """One status record per group key per batch: the group's gauges, this batch's counts, and
    its verdicts pre-aggregated for the metrics (``raw``: pickled shape and request counts)."""
    status = grp.status(st, cfg)
    status["events"] = {f"{t}/{s}": n for (t, s), n in sorted(counts.items())}
    status["heartbeat_errors"] = {
        "FENCED_MEMBER_EPOCH": st.counters.heartbeat_fenced - hb_before[0],
        "UNKNOWN_MEMBER_ID": st.counters.heartbeat_unknown_member - hb_before[1]}
    summary = summarize_commit_verdicts(out.commits, cfg.broker_policy.value) if out.commits else None
    return {"record": ["status"], "ts": [st.last_ts], "seq": [None], "ord": [None], "cluster": [st.cluster],
            "group_id": [st.group_id], "json": [json.dumps(status, sort_keys=True)], "alert_id": [None],
            "raw": [pickle.dumps(summary, _PICKLE) if summary else None], "reason": [None]}


@dataclass
class Hold:
    """What a key remembers between micro-batches besides its rules state.

    ``pending`` are events not applied yet: (ts, seq, payload, arrival wall ms).
    ``seen`` is the newest ts read from each source topic for this key. A group's
    events come from one partition of each topic and those are in coordinator order,
    so every event at or before ``min(seen)`` has arrived: applying up to there keeps
    (ts, input order) exactly, however unevenly the topics are read (a restart
    catching up a backlog reads one topic ahead of the other). A source that goes
    quiet would hold events forever, so an event also goes after ``max_skew`` of
    wall time. ``last_ts``/``last_wall`` map wall time to event time for decisions
    made without input (expiry), so an idle group's clock keeps moving.
    """

    pending: list = field(default_factory=list)
    seen: dict = field(default_factory=dict)
    last_ts: int = 0
    last_wall: int = 0


def _dead(cols: dict[str, list], reason_or_unknown, value, seq, coords, record_ts) -> None:
    """A dead-letter row (a str reason), or an unknown type's "unknown" row."""
    unknown = type(reason_or_unknown) is UnknownType
    for c, v in (("record", "unknown" if unknown else "dlq"), ("ts", None if record_ts is None else int(record_ts)),
                 ("seq", int(seq)), ("ord", None), ("cluster", None), ("group_id", None), ("json", coords),
                 ("alert_id", None), ("raw", None if unknown or value is None else bytes(value)),
                 ("reason", reason_or_unknown.type if unknown else reason_or_unknown)):
        cols[c].append(v)


def make_stream_fn(cfg: RulesConfig, *, max_skew_ms: int = 2_000, emit_verdicts: bool = True,
                   wall_clock: Callable[[], float] = time.time, input_format: str = "json",
                   schema_ids: Iterable[int] = (1,)) -> Callable:
    """The ``applyInPandasWithState`` function over KEYED rows (processing-time timeouts; see :class:`Hold`).

    Each row is decoded here, once; a key keeps what ``state.engine.route`` sends to it.
    ``emit_verdicts`` False (no verdicts topic) ships only alerts and per-group summaries.
    """
    decode = make_decoder(input_format, schema_ids)

    def stream_fn(key: tuple, pdfs: Iterator[pd.DataFrame], state) -> Iterator[pd.DataFrame]:
        k = key[0]
        dead: dict[str, list] = {c: [] for c in OUTPUT_COLUMNS}
        if k == DLQ_KEY:
            for pdf in pdfs:
                for value, seq, eid, coords, rts, bad in zip(pdf["value"], pdf["seq"], pdf["event_id"],
                                                             pdf["coords"], pdf["record_ts"], pdf["bad_reason"]):
                    res = decode_record(decode, value, int(seq), eid, coords, bad)
                    if type(res) not in (str, UnknownType):  # the JVM's key fields and the decoder disagree
                        log.warning("%s: a valid %s event without a key, sent to the dead letters", coords,
                                    event_type(res))
                        res = "UNROUTABLE(type=%s)" % event_type(res)
                    _dead(dead, res, value, seq, coords, rts)
            if dead["record"]:
                yield _frame(dead)
            return
        pkey = parse_key(k)
        is_group = pkey[0] == "g"
        now = int(wall_clock() * 1000)
        st, hold = None, Hold()
        if state.exists:
            blob, held = state.get
            st = pickle.loads(blob) if blob is not None else None
            hold = pickle.loads(held) if held is not None else Hold()
        counts: Counter = Counter()
        if not state.hasTimedOut:
            pending, seen = hold.pending, hold.seen
            for pdf in pdfs:
                for value, primary, seq, eid, coords, src, rts, bad in zip(*(pdf[c].tolist() for c in _KEYED_IN)):
                    seq = int(seq)
                    res = decode_record(decode, value, seq, eid, coords, bad)
                    if type(res) in (str, UnknownType):
                        if primary:  # the copies to topic keys stay quiet: one dead letter per record
                            _dead(dead, res, value, seq, coords, rts)
                        continue
                    kev = next((kev for rkey, kev in route(res) if rkey == pkey), None)
                    if kev is None:
                        if primary:
                            _dead(dead, "UNROUTABLE(type=%s)" % event_type(res), value, seq, coords, rts)
                        continue  # e.g. a commit the broker refused: no facts for its topics
                    ts = res.ts
                    pending.append((ts, res.seq, kev, now))
                    if ts > seen.get(src, -1):
                        seen[src] = ts
                    if primary:
                        counts[(event_type(res), src)] += 1
        if st is None and not hold.pending:
            # Nothing valid for a key without state (dead letters only): no state is created.
            if dead["record"]:
                yield _frame(dead)
            return
        newest = max(hold.seen.values(), default=0)
        if newest > hold.last_ts:
            hold.last_ts, hold.last_wall = newest, now
        safe = min(hold.seen.values(), default=0) if is_group else newest
        hold.pending.sort(key=lambda item: (item[0], item[1]))
        cut = 0
        for item in hold.pending:
            if item[0] <= safe or item[3] <= now - max_skew_ms:
                cut += 1
            else:
                break
        ready, hold.pending = hold.pending[:cut], hold.pending[cut:]
        # The event-time clock: wall time since the newest event, never past a held event.
        clock = hold.last_ts + max(0, now - hold.last_wall)
        if hold.pending:
            clock = min(clock, hold.pending[0][0] - 1)
        out = grp.Outputs()
        hb_before = (st.counters.heartbeat_fenced, st.counters.heartbeat_unknown_member) if (
            is_group and st is not None) else (0, 0)
        # (A checkpoint of an older version holds pickled events.)
        st = run_key(pkey, st, (pickle.loads(e) if type(e) is bytes else e for _, _, e, _ in ready), cfg, out,
                     clock=clock if is_group and hold.last_ts else None)
        cols = _render(out, verdicts=emit_verdicts)
        for c in cols:
            cols[c].extend(dead[c])
        if is_group:
            st.judged.clear()  # a cache, rebuilt on demand: keep the stored state small
            status = _status_row(st, cfg, counts, hb_before, out)
            for c in cols:
                cols[c].extend(status[c])
        state.update((pickle.dumps(st, _PICKLE), pickle.dumps(hold, _PICKLE)))
        waits = []
        if hold.pending:
            waits.append(hold.pending[0][3] + max_skew_ms - now)
        if is_group:
            due = grp.next_wakeup(st, cfg)
            if due is not None:
                waits.append(due - clock)
        if waits:
            state.setTimeoutDuration(max(1, min(waits)))
        if cols["record"]:
            yield _frame(cols)

    return stream_fn


def make_batch_fn(cfg: RulesConfig, clock: int | None) -> Callable:
    """The ``applyInPandas`` function for replay: a key's whole trace, decisions due at ``clock``."""

    def batch_fn(key: tuple, pdf: pd.DataFrame) -> pd.DataFrame:
        k = key[0]
        if k == DLQ_KEY:
            frames = list(_dead_letters([pdf]))
            return frames[0] if frames else _frame({c: [] for c in OUTPUT_COLUMNS})
        pkey = parse_key(k)
        pdf = pdf.sort_values(["ts", "seq"], kind="stable")
        out = grp.Outputs()
        run_key(pkey, None, (pickle.loads(p) for p in pdf["payload"]), cfg, out,
                clock=clock if pkey[0] == "g" else None)
        return _frame(_render(out))

    return batch_fn


def make_bridge_mapper(topic_ids: dict[str, str] | None = None, cluster: str | None = None) -> Callable:
    """``mapInPandas`` over ``__consumer_offsets`` records: each record -> its SPEC events (the
    bridge's stateless ``decode_record``) as router input rows; undecodable records carry
    ``bad_reason`` (unknown record types and versions are skipped, as Kafka does)."""
    from .bridge.mapping import TopicNames, decode_record
    from .bridge.records import RecordDecodeError

    names = TopicNames(topic_ids or {})

    def bridge_batches(batches: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
        for pdf in batches:
            cols: dict[str, list] = {c: [] for c in ("value", "seq", "event_id", "coords", "source", "record_ts",
                                                    "bad_reason")}
            for key, value, topic, partition, offset, ts in zip(pdf["key"], pdf["value"], pdf["topic"],
                                                                pdf["partition"], pdf["offset"], pdf["record_ts"]):
                eid, coords = f"{topic}/{partition}/{offset}", f"{topic}[{partition}]@{offset}"
                try:
                    events = decode_record(None if key is None else bytes(key),
                                           None if value is None else bytes(value), int(ts), eid, names,
                                           cluster=cluster)
                    rows = [(json.dumps(e).encode(), None) for e in events]
                except RecordDecodeError as exc:
                    if exc.code in RecordDecodeError.SKIPPABLE:
                        continue
                    rows = [(None if value is None else bytes(value), f"{exc.code}(detail={exc.detail[:200]})")]
                for i, (payload, bad) in enumerate(rows):
                    cols["value"].append(payload)
                    cols["seq"].append(int(offset) * 64 + i)  # one partition per group: offset order
                    cols["event_id"].append(eid)
                    cols["coords"].append(coords)
                    cols["source"].append("consumer_offsets")
                    cols["record_ts"].append(int(ts))
                    cols["bad_reason"].append(bad)
            yield pd.DataFrame(cols)

    return bridge_batches

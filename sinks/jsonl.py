"""JSON-lines encodings of verdicts and alerts (contract §8), one place for both engines.

Byte-for-byte stable: fixed field order, compact separators, ASCII escapes, so
``replay --engine local`` and ``--engine spark`` can be compared with ``cmp``.
Verdicts are formatted with a template rather than ``json.dumps(dict)``: replay
writes one per committed partition, the bulk of its output (its rate:
docs/benchmarks.md).
"""
from __future__ import annotations

import json
from functools import lru_cache
from operator import attrgetter, itemgetter
from typing import Mapping

from fencewatch.state.memo import Memo
from fencewatch.state.model import (OUTPUT_NAMES, REQUEST_HEAD_FIELDS, REQUEST_TAIL_FIELDS, VERDICT_OUTPUT_FIELDS,
                                    Alert, CommitVerdicts, PartitionJudgement, UniformParts, Verdict)
from fencewatch.state.records import ALERT_FIELDS

_dumps = json.dumps


@lru_cache(maxsize=1 << 16)
def _js(s: str | None) -> str:
    return "null" if s is None else _dumps(s)


def _ji(v: int | None) -> str:
    return "null" if v is None else str(v)


def _jb(v: bool | None) -> str:
    return "null" if v is None else ("true" if v else "false")


def _raw(s: str) -> str:
    return s


# How a verdict field renders, by its declared type (``state.model``): (placeholder, converter).
# The templates below are assembled from the declaration at import, in its field order; a field
# of a type not here fails at import, naming it.
_FORMAT_BY_TYPE = {
    "int": ("%d", int), "int | None": ("%s", _ji), "str": ("%s", _js), "str | None": ("%s", _js),
    "Name": ('"%s"', _raw), "bool": ("%s", _jb), "bool | None": ("%s", _jb),
}
_TYPES = {name: getattr(t, "__forward_arg__", t)  # the annotation as written
          for name, t in {**PartitionJudgement.__annotations__, **CommitVerdicts.__annotations__}.items()}


def _format(name: str) -> tuple[str, object]:
    try:
        return _FORMAT_BY_TYPE[_TYPES[name]]
    except KeyError:
        raise TypeError(f"sinks.jsonl: no JSON format for verdict field {name!r} of type {_TYPES.get(name)!r} "
                        f"(state.model)") from None


def _template(names) -> str:
    """``"name":placeholder`` for each field, comma-separated, in declaration order."""
    return ",".join('"%s":%s' % (OUTPUT_NAMES.get(n, n), _format(n)[0]) for n in names)


def _converters(names) -> tuple:
    return tuple(_format(n)[1] for n in names)


_VERDICT = "{" + _template(Verdict._fields) + "}"
_VERDICT_CONVERTERS = _converters(Verdict._fields)
VERDICT_FIELDS = VERDICT_OUTPUT_FIELDS  # the keys of a verdict line, in order


def verdict_json(v: Verdict) -> str:
    return _VERDICT % tuple(conv(x) for conv, x in zip(_VERDICT_CONVERTERS, v))


# A request's lines are rendered as bytes: replay writes them to a binary file as they are
# (no text layer, no encode of ~460 bytes a line), and the Spark edge decodes one block per row.

# How a request's partitions render, keyed by the id of its judgements tuple: groups reuse
# one tuple for every commit of a member with the same partitions at an epoch
# (``state.judging.RequestJudgement``, cached per request shape), so most requests hit and cost one join.
_LAYOUTS = Memo(1 << 15)  # bounds memory: requests x partitions x ~300 bytes


# The part of a fragment after topic and partition, by value: partitions of a group share it.
_RESTS = Memo(1 << 16)
_PARTITION = itemgetter(1)


# A judgement renders as topic, partition (written per partition), then the rest (shared).
assert PartitionJudgement._fields[:2] == ("topic", "partition")
_REST_FIELDS = PartitionJudgement._fields[2:]
_REST = _template(_REST_FIELDS) + ","
_REST_CONVERTERS = _converters(_REST_FIELDS)


def _rest(p: PartitionJudgement) -> bytes:
    key = p[2:]
    rest = _RESTS.get(key)
    if rest is None:
        rest = _RESTS.put(key, (_REST % tuple(conv(x) for conv, x in zip(_REST_CONVERTERS, key))).encode())
    return rest


def _fragment(p: PartitionJudgement) -> bytes:
    return b'"topic":%s,"partition":%d,%s' % (_jsb(p.topic), p.partition, _rest(p))


# Partition numbers as text, looked up rather than formatted (a dict: anything else, a
# negative number say, misses and is formatted).
_NUMBERS = {i: b"%d" % i for i in range(1 << 12)}


def _numbers(parts: tuple[PartitionJudgement, ...]) -> tuple[bytes, ...]:
    numbers = tuple(map(_PARTITION, parts))
    try:
        return tuple(map(_NUMBERS.__getitem__, numbers))
    except KeyError:
        return tuple(map(b"%d".__mod__, numbers))


def _uniform(parts: tuple[PartitionJudgement, ...]) -> bool:
    """Whether the partitions differ in their number only: column by column (each compares its
    items with the first, by identity first, as the judge shares them), not row by row."""
    columns = list(zip(*parts))
    del columns[1]  # the partition numbers
    n = len(parts)
    return all(c.count(c[0]) == n for c in columns)


def forget_layouts() -> None:
    """Empty the layout memo. It is keyed by ``id(parts)`` and keeps ``parts`` alive, so an entry
    can only ever hit again for that very tuple: a caller whose tuples do not outlive its call
    (the streaming state function decodes a group's state anew in every call) calls this once
    it has rendered, or the table keeps every request's partitions until it is full. In the job,
    that table was the Python workers' whole memory growth (issue 15; docs/reliability.md,
    "Soak")."""
    _LAYOUTS.clear()


def _layout(parts: tuple[PartitionJudgement, ...]) -> tuple:
    """(parts, topic prefix, partition numbers, "," + the shared rest) when every partition
    has the same topic and judgement (the usual request: rendered with one join, nothing per
    partition), else (parts, None, fragments, None)."""
    hit = _LAYOUTS.get(id(parts))
    if hit is not None and hit[0] is parts:
        return hit
    # Holding ``parts`` keeps its id from being reused.
    first = parts[0]
    if type(parts) is UniformParts or _uniform(parts):
        layout = (parts, b'"topic":%s,"partition":' % _jsb(first.topic), _numbers(parts), b"," + _rest(first))
    else:
        layout = (parts, None, tuple(map(_fragment, parts)), None)
    return _LAYOUTS.put(id(parts), layout)


@lru_cache(maxsize=1 << 16)
def _jsb(s: str | None) -> bytes:
    return _js(s).encode()


def _jsb_once(s: str) -> bytes:
    """A string seen once (an event id): quoted directly when nothing in it needs escaping."""
    if s.isascii() and s.isprintable() and '"' not in s and "\\" not in s:
        return b'"%s"' % s.encode()
    return _dumps(s).encode()


# The request fields after event id and ts (with the separator of the next line), and the
# tail: they repeat commit after commit of a member, so both come from one lookup.
_REQUEST_TEXTS = Memo(1 << 16)


# A line: event id and ts (written per request), the middle of the head (shared), the
# partition's fields, the tail (shared).
assert REQUEST_HEAD_FIELDS[:2] == ("event_id", "ts")
_MIDDLE = _template(REQUEST_HEAD_FIELDS[2:]) + ","
_MIDDLE_CONVERTERS = _converters(REQUEST_HEAD_FIELDS[2:])
_TAIL = _template(REQUEST_TAIL_FIELDS) + "}\n"
_TAIL_CONVERTERS = _converters(REQUEST_TAIL_FIELDS)


def _request_texts(cv: CommitVerdicts) -> tuple[bytes, bytes]:
    middle = _MIDDLE % tuple(conv(x) for conv, x in zip(_MIDDLE_CONVERTERS, cv[2:len(REQUEST_HEAD_FIELDS)]))
    tail = _TAIL % tuple(conv(x) for conv, x in zip(_TAIL_CONVERTERS, cv[len(REQUEST_HEAD_FIELDS):_TAIL_END]))
    return middle.encode(), tail.encode()


_TAIL_END = len(REQUEST_HEAD_FIELDS) + len(REQUEST_TAIL_FIELDS)


def commit_verdicts_pieces(cv: CommitVerdicts) -> tuple[bytes, bytes, bytes]:
    """(head, middle, tail): joined, the verdict lines of one commit request, each ending in a
    newline; the same bytes as ``verdict_json`` of each expanded verdict. A writer hands the
    three to its one join rather than copying each ~4 KB request twice more to glue them."""
    if not cv.parts:
        return _NO_PIECES
    key = cv[2:_TAIL_END]  # the request's fields after event id and ts: head and tail
    texts = _REQUEST_TEXTS.get(key)
    if texts is None:
        texts = _REQUEST_TEXTS.put(key, _request_texts(cv))
    middle, tail = texts
    _, prefix, items, rest = _layout(cv.parts)
    if prefix is None:  # a fragment per partition
        head = b'{"event_id":%s,"ts":%d,%s' % (_jsb_once(cv.event_id), cv.ts, middle)
        return head, (tail + head).join(items), tail
    # head + topic prefix, then partition numbers separated by the rest of a line and the
    # start of the next, then the rest of the last line
    head = b'{"event_id":%s,"ts":%d,%s%s' % (_jsb_once(cv.event_id), cv.ts, middle, prefix)
    end = rest + tail
    return head, (end + head).join(items), end


_NO_PIECES = (b"", b"", b"")


def commit_verdicts_bytes(cv: CommitVerdicts) -> bytes:
    """The verdict lines of one commit request, each ending in a newline."""
    return b"".join(commit_verdicts_pieces(cv))


def commit_verdicts_json(cv: CommitVerdicts) -> list[str]:
    """The verdict lines of one commit request; identical to ``verdict_json`` of each expanded verdict."""
    return commit_verdicts_bytes(cv).decode().split("\n")[:-1]


def commit_verdicts_block(cv: CommitVerdicts) -> str:
    """The same lines joined by newlines, without the last one (a Spark row per request)."""
    return commit_verdicts_bytes(cv)[:-1].decode()


def verdict_dict(v: Verdict) -> dict:
    return dict(zip(VERDICT_FIELDS, v))


_ALERT_VALUES = attrgetter(*ALERT_FIELDS)


def alert_dict(a: Alert) -> dict:
    """The alert's fields in declaration order (``state.model.Alert``); ``details`` sorted by key."""
    record = dict(zip(ALERT_FIELDS, _ALERT_VALUES(a)))
    record["details"] = dict(sorted(a.details.items()))
    return record


def alert_json(a: Alert) -> str:
    return _dumps(alert_dict(a), separators=(",", ":"))


def alert_sort_key(a: Alert | Mapping) -> tuple[int, str]:
    if isinstance(a, Alert):
        return (a.ts, a.alert_id)
    return (a["ts"], a["alert_id"])

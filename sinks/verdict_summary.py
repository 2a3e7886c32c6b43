"""Verdict records counted by shape and by commit request, for the exporter.

What lives here: :func:`summarize_verdicts`, which turns verdict records that come one per
(commit, partition) -- dicts from a topic or a file, or ``state.model.Verdict`` tuples -- into
the counts ``state.status.summarize_commit_verdicts`` makes on the executors, so the exporter
counts both the same way; and :func:`attr_getter`, a record's fields read by name.
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Callable, Iterable, Mapping

from fencewatch.state.model import POLICY_ANSWER_FIELD, Policy
from fencewatch.state.status import DEFAULT_CLUSTER, VerdictShape, first_rejection, request_facts


def attr_getter(obj: Any) -> Callable[[str], Any]:
    """``get(name)`` over an object's attributes (None when absent), as ``dict.get`` over a mapping."""
    return lambda name: getattr(obj, name, None)


_SHAPE_FIELDS = VerdictShape._fields  # read from a record by these names; ``cls`` is ``class`` in dicts
_CLUSTER_AT, _CLASS_AT, _UNSAFE_AT = (_SHAPE_FIELDS.index(f) for f in ("cluster", "cls", "unsafe"))


def summarize_verdicts(verdicts: Iterable[Any], broker_policy: str = "strict") -> tuple[Counter, Counter, list]:
    """Verdict records -> (VerdictShape counts, RequestFacts counts, malformed records): what
    ``state.status.summarize_commit_verdicts`` makes of ``CommitVerdicts``, for records that come
    one per partition (dicts from a topic or a file, or ``state.model.Verdict`` tuples). Request
    facts are one per commit request (by event id) that carries a broker answer or is
    transactional; the rules deciding them are ``state.status.request_facts``'."""
    answer_field = POLICY_ANSWER_FIELD[Policy(broker_policy)]
    bad: list = []
    shapes: Counter = Counter()
    requests: dict[tuple, list] = {}  # (cluster, group, kind, event id) -> [broker error, answers, kip accepts]
    for i, v in enumerate(verdicts):
        if isinstance(v, tuple) and hasattr(v, "_fields"):  # state.model.Verdict: `class` is `cls`
            get = attr_getter(v)
            cls = getattr(v, "cls", None)
        elif isinstance(v, Mapping):
            get = v.get
            cls = get("class") or get("cls")
        else:
            bad.append((v, TypeError(f"not a verdict record: {type(v).__name__}")))
            continue
        values = [get(f) for f in _SHAPE_FIELDS]
        values[_CLUSTER_AT] = values[_CLUSTER_AT] or DEFAULT_CLUSTER
        values[_CLASS_AT] = cls
        values[_UNSAFE_AT] = bool(values[_UNSAFE_AT])
        shape = VerdictShape._make(values)
        shapes[shape] += 1
        broker_error = get("broker_error")
        if broker_error is None and shape.kind != "txn_commit":
            continue
        if broker_error == 0 and isinstance(broker_error, int):
            broker_error = "NONE"  # a code rather than a name: no error
        event_id = get("event_id")
        request_key = (shape.cluster, shape.group_id, shape.kind, event_id if event_id is not None else ("#", i))
        request = requests.get(request_key)
        if request is None:
            requests[request_key] = [broker_error, [getattr(shape, answer_field)], shape.kip1251 == "NONE"]
        else:
            if request[0] is None:
                request[0] = broker_error
            request[1].append(getattr(shape, answer_field))
            request[2] = request[2] and shape.kip1251 == "NONE"
    counts: Counter = Counter()
    for (cluster, group, kind, _), (broker_error, answers, kip_accepts) in requests.items():
        counts[request_facts(cluster, group, kind, broker_error, first_rejection(answers), kip_accepts)] += 1
    return shapes, counts, bad

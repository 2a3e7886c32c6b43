"""What a group looks like from outside: its status snapshot and the summary of its verdicts
that metrics count (contract §8.3). Pure: no Prometheus here (the exporter, ``sinks/``,
turns these into series), so the Spark state function imports nothing of it.

Owns: :func:`status` (a group's gauges and counters), :func:`step_status` (the status a step
ships, with what the step counted: its events and its heartbeats' errors) and its reader
:func:`step_counts`, :class:`VerdictShape` and :class:`RequestFacts` (the keys metrics count
verdicts by) and :func:`summarize_commit_verdicts`.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import fields
from functools import cache
from itertools import chain
from operator import attrgetter
from typing import Iterable

from fencewatch.state.judging import commit_stored
from fencewatch.state.membership import derived_state
from fencewatch.state.model import (POLICY_ANSWER_FIELD, POLICY_ANSWERS, CommitVerdicts, Policy, UniformParts,
                                    verdict_part)
from fencewatch.state.offsets import OffsetStore, committed_offsets, deadlines
from fencewatch.state.records import DEFAULT_CLUSTER  # also the cluster label of a verdict without one


def status(g: OffsetStore, cfg, *, forgotten: bool = False) -> dict:
    """A snapshot for metrics and summaries (no member ids: cardinality is the caller's concern).
    ``forgotten``: the group's last, as its state is removed (contract §4.4): state ``Dead``,
    Kafka's name for a group that is gone, so the metrics drop its series (§8.3)."""
    dl = deadlines(g, cfg.offsets_retention_ms)
    counters = g.counters
    return {
        "cluster": g.cluster, "group_id": g.group_id, "protocol": g.group_type or "simple",
        "state": "Dead" if forgotten else derived_state(g), "members": len(g.members),
        "partitions_held": len(g.owners) + sum(1 for tp in g.pending_owners if tp not in g.owners),
        "group_epoch": g.group_epoch,
        "max_member_epoch": max((m.member_epoch for m in g.members.values()), default=None),
        "expiry_deadline_ms": dl.shipped, "kip211_deadline_ms": dl.kip211, "pre21_deadline_ms": dl.pre21,
        "committed_partitions": len(committed_offsets(g)),
        **{total: getattr(counters, name) for name, total in _counter_names(type(counters))},
        **({"forgotten": True} if forgotten else {}),
    }


# --------------------------------------------------------------------------- what a step counted

HEARTBEAT_ERRORS = ("FENCED_MEMBER_EPOCH", "UNKNOWN_MEMBER_ID")
"""The errors a heartbeat is counted by (``Counters.heartbeat_fenced``,
``Counters.heartbeat_unknown_member``), by Kafka's names: what ``broker_errors_total`` labels
them with (api ``ConsumerGroupHeartbeat``)."""


def heartbeat_errors(answered: list[int]) -> dict[str, int]:
    """The heartbeats one step answered with an error, by Kafka's error name, from the step's
    ``group.Outputs.heartbeat_errors`` (in :data:`HEARTBEAT_ERRORS`' order). A step's share, not
    the totals: the exporter adds each step's to ``broker_errors_total``, a counter that outlives
    the group's state. Counted as the step went, not as the group's counters' growth: a group
    forgotten within the step (``drop_at``) starts again from zero, and the growth would be
    negative."""
    return dict(zip(HEARTBEAT_ERRORS, answered))


def event_counts(counts) -> dict[str, int]:
    """A step's events, {(type, source): n}, as a status or counts row carries them:
    ``{"type/source": n}``, sorted. Text keys, so the counts cross JSON as they are; neither part
    holds a "/" (a type is a contract §1 name or ``unknown``, a source a role name), so
    :func:`read_event_counts` splits at the first."""
    return {f"{t}/{s}": n for (t, s), n in sorted(counts.items())}


def read_event_counts(counts: dict[str, int]):
    """(type, source, n) for each of :func:`event_counts`' entries, in its order."""
    for key, n in counts.items():
        etype, _, source = key.partition("/")
        yield etype, source, n


def step_status(g: OffsetStore, cfg, counts, answered: list[int], *, forgotten: bool = False) -> dict:
    """What a group's step ships for the metrics: its :func:`status` after the step, with the
    step's events (``events``, :func:`event_counts` of ``counts``) and its heartbeats answered
    with an error (``heartbeat_errors``, :func:`heartbeat_errors` of the step's ``answered``)."""
    snapshot = status(g, cfg, forgotten=forgotten)
    snapshot["events"] = event_counts(counts)
    snapshot["heartbeat_errors"] = heartbeat_errors(answered)
    return snapshot


def step_counts(snapshot: dict) -> tuple[dict[str, int], dict[str, int]]:
    """A :func:`step_status` taken apart: (its events, its heartbeat errors that grew), removed
    from ``snapshot``, which is then the group's status alone. A snapshot without a rebalance count
    gets 0 (:func:`status` always counts them; the exporter's rebalances then start from 0, not
    unset). Errors that did not grow are left out: no zero increment makes a series."""
    events = snapshot.pop("events", {})
    errors = {err: n for err, n in snapshot.pop("heartbeat_errors", {}).items() if n}
    snapshot.setdefault("rebalances_total", 0)
    return events, errors


@cache
def _counter_names(counters_type: type) -> tuple[tuple[str, str], ...]:
    """Each counter's field and metric name (the state function makes a status for every group
    in every micro-batch)."""
    return tuple((f.name, f"{f.name}_total") for f in fields(counters_type))


# --------------------------------------------------------------------------- verdicts, summarised

_PART_FIELDS = (*POLICY_ANSWERS, "cls", "unsafe")  # what a partition's judgement adds to a shape
VerdictShape = verdict_part(
    "VerdictShape", ("cluster", "group_id", "kind", *_PART_FIELDS, "model_agrees"), module=__name__,
    doc="""What metrics count a verdict record by: all its labels (``cls`` is ``class``). Records
    read back from a topic or a file may lack fields: any of them may be None but ``unsafe``.""")


RequestFacts = verdict_part(
    "RequestFacts", ("cluster", "group_id", "kind", "broker_error"), module=__name__,
    extra=(("aborted", bool),  # a transactional request the broker did not store
           ("avoidable", bool)),  # ... that kip1251 accepts
    doc="""What metrics count a commit request by (one per request with a broker answer, or
    transactional): the broker's answer, and whether the transaction aborted (the broker
    did not store it: :func:`judging.commit_stored`) although KIP-1251 would have accepted it.""")


def request_facts(cluster: str, group_id, kind, broker_error: str | None, predicted: str,
                  kip1251_accepts: bool) -> RequestFacts:
    """``predicted``: the broker policy's answer for the whole request (its first rejection)."""
    aborted = kind == "txn_commit" and not commit_stored(broker_error, predicted)
    return RequestFacts(cluster, group_id, kind, broker_error, aborted, aborted and kip1251_accepts)


def first_rejection(answers: Iterable[str]) -> str:
    """A request's answer from its partitions': Kafka fails it on the first bad partition."""
    return next(filter(_NONE.__ne__, answers), _NONE)


def summarize_commit_verdicts(commits: Iterable[CommitVerdicts], broker_policy: str | Policy = "strict"
                              ) -> tuple[Counter, Counter]:
    """(VerdictShape -> count, RequestFacts -> count) for a batch's commit requests, without
    expanding them into per-partition records (executors ship these few counts, not verdicts).
    ``broker_policy``: the broker's policy for the groups' type, ``RulesConfig.policy_for``
    (contract §3.4: ``streams_broker_policy`` for a streams group), which says what the broker
    stored of a request it did not answer; callers summarise groups of different types apart.

    Counted first by plain tuples, a request's :class:`UniformParts` once for all its partitions
    (and its answer from its one judgement), and made into shapes and facts once per distinct
    key: the state function runs this for every group in every micro-batch, over every commit
    it judged."""
    answer = attrgetter(POLICY_ANSWER_FIELD[Policy(broker_policy)])
    raw: Counter = Counter()
    raw_requests: Counter = Counter()
    mixed: dict = {}  # head -> the parts lists of its requests with a judgement per partition
    for cv in commits:
        parts = cv.parts
        kind = cv.kind
        head = (cv.cluster or DEFAULT_CLUSTER, cv.group_id, kind, cv.model_agrees)
        counted = cv.broker_error is not None or kind == "txn_commit"
        if type(parts) is UniformParts and parts:  # one judgement for all its partitions
            first = parts[0]
            raw[head, _PART_SHAPE(first)] += len(parts)
            if counted:
                raw_requests[head[0], cv.group_id, kind, cv.broker_error, answer(first),
                             first.kip1251 == _NONE] += 1
            continue
        lists = mixed.get(head)
        if lists is None:
            mixed[head] = [parts]
        else:
            lists.append(parts)
        if counted:
            raw_requests[head[0], cv.group_id, kind, cv.broker_error,
                         first_rejection(map(answer, parts)),
                         not any(map(_NONE.__ne__, map(_KIP1251, parts)))] += 1
    # Per-partition shapes counted by Counter's C loop, a head's requests at once: ~4 partitions a
    # commit in the ``mixed`` profile, a Python-level step each before (docs/decisions.md, "The streaming job").
    for head, lists in mixed.items():
        for shape, n in Counter(map(_PART_SHAPE, chain.from_iterable(lists))).items():
            raw[head, shape] += n
    shapes: Counter = Counter()
    for ((cluster, group_id, kind, agrees), (*part, unsafe)), n in raw.items():
        shapes[VerdictShape(cluster, group_id, kind, *part, bool(unsafe), agrees)] += n
    requests: Counter = Counter()
    for key, n in raw_requests.items():
        requests[request_facts(*key)] += n
    return shapes, requests


_PART_SHAPE = attrgetter(*_PART_FIELDS)
"""A partition judgement's part of its :class:`VerdictShape`."""
_KIP1251 = attrgetter(POLICY_ANSWER_FIELD[Policy.KIP1251])
_NONE = "NONE"

"""What one micro-batch brings to the exporter, and the plain structures it is counted into.

What lives here: :class:`MetricsBatch` (the driver's input, plain Python only), :class:`StepCounts`
(what the state function's status and counts rows bring it, gathered as the driver reads them:
the driver names none of their fields), the parsed :class:`GroupStatus` of one group (its fields
made from the specs that read a status), the exporter's own :class:`Histogram` (cumulative buckets
counted per batch), and :class:`Aggregate`, one batch counted outside the exporter's lock.
No prometheus_client import: `sinks/prometheus.py` turns these into metric families.
"""

from __future__ import annotations

import bisect
from collections import Counter
from dataclasses import dataclass, make_dataclass
from typing import Any, Iterable, Mapping

import numpy as np

from fencewatch.sinks.metrics import STATUS_METRICS, GroupKey, MetricSpec
from fencewatch.state.status import read_event_counts, step_counts


@dataclass(frozen=True, slots=True)
class MetricsBatch:
    """One micro-batch as the driver sees it; every field is optional.

    - verdicts: contract §8 verdict records (dicts, or `state.model.Verdict` tuples)
    - alerts: contract §8 alert records (dicts or `Alert` dataclasses)
    - group_status: dicts with cluster, group_id, protocol, members,
      partitions_held, group_epoch, max_member_epoch, expiry_deadline_ms
      (None: nothing expires), rebalances_total (monotone), state
      (`Dead` deletes the group's series)
    - events: {(cluster, group_id, type, source): count} or dicts with those keys + count
    - heartbeat_errors: {(cluster, group_id, error name or code): count} or dicts
    - dlq: {reason code: count}
    - deleted_groups: (cluster, group_id) pairs whose series must go
    """

    batch_id: int | None = None
    verdicts: Iterable[Any] = ()
    # pre-aggregated verdicts: (shapes, requests) pairs from summarize_verdicts (executor side)
    verdict_summaries: Iterable[tuple[Counter, Counter]] = ()
    alerts: Iterable[Any] = ()
    group_status: Iterable[Mapping[str, Any]] = ()
    events: Mapping[tuple, int] | Iterable[Mapping[str, Any]] = ()
    heartbeat_errors: Mapping[tuple, int] | Iterable[Mapping[str, Any]] = ()
    dlq: Mapping[str, int] | None = None
    batch_duration_s: float | None = None
    decision_latencies_s: Iterable[float] = ()
    input_lag_records: int | None = None
    state_rows: int | None = None
    state_memory_bytes: int | None = None
    last_event_ts_ms: int | None = None
    deleted_groups: Iterable[tuple[str, str]] = ()


class StepCounts:
    """What a micro-batch's groups' steps bring the exporter, gathered chunk by chunk as the driver
    reads the state function's rows, and handed over as :class:`MetricsBatch` fields
    (:meth:`fields`): each status row's group statuses (``state.status.step_status``: a group's
    status, its step's events and heartbeats answered with an error) and verdict summary, and each
    counts row's events (partition-scoped ones and unknown types, with group ""). The metrics they
    feed (``events_total``, ``broker_errors_total``'s heartbeats, the group gauges and
    ``group_rebalances_total``, ``commits_judged_total`` and the rest of the verdicts') are counted
    in the order the rows came, so the exporter's series are made in that order."""

    __slots__ = ("statuses", "summaries", "events", "heartbeat_errors")

    def __init__(self) -> None:
        self.statuses: list[dict] = []
        self.summaries: list[tuple[Counter, Counter]] = []
        self.events: Counter = Counter()  # (cluster, group_id, type, source) -> events
        self.heartbeat_errors: Counter = Counter()  # (cluster, group_id, error) -> heartbeats

    def add_status_row(self, statuses: list[dict], summary: tuple[Counter, Counter] | None) -> None:
        """One status row (``streaming.runtime.outputs.read_status``): its groups' step statuses,
        taken apart (``state.status.step_counts``), and the summary of their verdicts."""
        if summary is not None:
            self.summaries.append(summary)
        for status in statuses:
            events, errors = step_counts(status)
            cluster, group_id = status["cluster"], status["group_id"]
            self._count_events(cluster, group_id, events)
            for error, n in errors.items():
                self.heartbeat_errors[(cluster, group_id, error)] += n
        self.statuses += statuses

    def add_counts_row(self, cluster: str, counts: dict[str, int]) -> None:
        """One counts row's events (``state.status.event_counts``), counted with group ""."""
        self._count_events(cluster, "", counts)

    def _count_events(self, cluster: str, group_id: str, counts: dict[str, int]) -> None:
        events = self.events
        for etype, source, n in read_event_counts(counts):
            events[(cluster, group_id, etype, source)] += n

    def events_read(self) -> int:
        """Every input event the batch's rows counted (the job's totals)."""
        return sum(self.events.values())

    def fields(self) -> dict[str, Any]:
        """The :class:`MetricsBatch` fields these give."""
        return {"verdict_summaries": self.summaries, "group_status": self.statuses,
                "events": dict(self.events), "heartbeat_errors": dict(self.heartbeat_errors)}


def _status_fields(specs: Iterable[MetricSpec]) -> tuple[tuple[str, tuple[str, ...] | None], ...]:
    """(field, its closed values, or None for a number) of each status field the specs read: their
    ``status_field`` and the labels a status gives them (those but ``cluster`` and ``group``, each
    the status's field of that name, a closed enum), in the specs' order."""
    out: dict[str, tuple[str, ...] | None] = {}
    for spec in specs:
        for label in spec.labels:
            if label not in ("cluster", "group"):
                out.setdefault(label, spec.enums[label])
        out.setdefault(spec.status_field, None)
    return tuple(out.items())


STATUS_FIELDS = _status_fields(STATUS_METRICS)
"""What the exporter keeps of a group's status: the fields ``sinks.metrics.STATUS_METRICS`` read."""

GroupStatus = make_dataclass("GroupStatus", [(f, str if values else int | None) for f, values in STATUS_FIELDS],
                             frozen=True, slots=True)
GroupStatus.__module__ = __name__  # pickles and reprs as a class of this module
GroupStatus.__doc__ = """A group's status as the exporter keeps it: one field per entry of :data:`STATUS_FIELDS`,
made from the specs so that a group gauge declared in ``sinks/metrics.py`` with its ``status_field``
is parsed and kept with no line here (issue 47 item 4). Labels (``protocol``, ``state``) are
closed to their enum, numbers are ints or None."""


class Histogram:
    __slots__ = ("bounds", "_bounds", "counts", "total", "n")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self._bounds = np.asarray(bounds, dtype=np.float64)
        self.counts = [0] * (len(bounds) + 1)
        self.total = 0.0
        self.n = 0

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.bounds, value)] += 1
        self.total += value
        self.n += 1

    def observe_all(self, values) -> None:
        """:meth:`observe` for each value (a sequence or a numpy array of floats), counted per
        bucket in numpy: a batch brings a latency sample per verdict line (~4 per event, ~10^6 in
        a backlog's micro-batch), and sorting them in Python held the driver ~0.2 s a batch with
        the executors idle (docs/decisions.md, issue 34)."""
        arr = np.asarray(values, dtype=np.float64)
        if arr.size == 0:
            return
        # side="left": a value on a bound counts in that bound's bucket (``le``), as bisect_left.
        per_bucket = np.bincount(np.searchsorted(self._bounds, arr, side="left"), minlength=len(self.counts))
        for i, n in enumerate(per_bucket.tolist()):
            self.counts[i] += n
        self.total += float(arr.sum())
        self.n += int(arr.size)

    def buckets(self) -> list[tuple[str, float]]:
        out, acc = [], 0
        for bound, count in zip(self.bounds, self.counts):
            acc += count
            out.append((_float_label(bound), acc))
        out.append(("+Inf", self.n))
        return out


def _float_label(value: float) -> str:
    return repr(float(value))


class Aggregate:
    """One batch counted into plain Counters, outside the lock."""

    def __init__(self) -> None:
        self.grouped: dict[str, Counter] = {}  # metric -> Counter[(cluster, group_id, *tail)]
        self.ungrouped: dict[str, Counter] = {}  # metric -> Counter[labels]
        self.activity: Counter = Counter()  # (cluster, group_id) -> events + verdicts
        self.firing: list[tuple[GroupKey, str, bool]] = []
        # group -> event time (ms) of its newest critical alert in the batch (None: the alert had
        # no usable ts; the batch's newest event time stands in): pins the group's own label
        self.critical: dict[GroupKey, int | None] = {}
        self.statuses: list[tuple[GroupKey, GroupStatus]] = []
        self.latencies: list[float] = []

    def critical_finding(self, key: GroupKey, ts_ms: int | None) -> None:
        """A critical alert of `key` at `ts_ms`; the newest one per group counts."""
        before = self.critical.get(key, ts_ms)
        self.critical[key] = None if before is None or ts_ms is None else max(before, ts_ms)

    def inc(self, metric: str, key: tuple, n: float = 1) -> None:
        counter = self.grouped.get(metric)
        if counter is None:
            counter = self.grouped[metric] = Counter()
        counter[key] += n

    def inc_ungrouped(self, metric: str, labels: tuple, n: float = 1) -> None:
        counter = self.ungrouped.get(metric)
        if counter is None:
            counter = self.ungrouped[metric] = Counter()
        counter[labels] += n


# Record fields as the exporter reads them.


def ts_or_none(value: Any) -> int | None:
    """An alert's `ts` (epoch ms), None when absent or not a number (the pin then uses the
    batch's event time: a bad ts must not drop a critical finding)."""
    try:
        return None if value is None or isinstance(value, bool) else int(value)
    except (TypeError, ValueError, OverflowError):
        return None


def int_or_none(value: Any) -> int | None:
    """A status field: None stays None, anything else an int."""
    if value is None:
        return None
    return int(value)

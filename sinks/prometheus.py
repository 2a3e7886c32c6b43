"""Prometheus exporter of the streaming job's driver.

What lives here: :class:`MetricsSink`. The driver hands it one micro-batch at
a time as plain Python data (verdict and alert records, group status records,
counts; no Spark or pandas types) through :meth:`MetricsSink.add`; a scrape
serves a snapshot of what was added so far from a custom collector, so a
scrape never waits for a batch to be processed and never sees half of one.

Every metric's name, help, labels and enum values come from
:mod:`fencewatch.sinks.metrics`; unknown enum values are exported as the
enum's overflow value and logged once. Groups beyond `max_groups` are folded
into `group="other"` at increment time (see :class:`GroupLimiter`), so every
counter stays monotone; series of demoted and deleted groups are dropped. A group
with a critical alert keeps its own label for `critical_hold_s` (event time).

A group promoted *out of* `other` gets its series at 0 and its increments are held
until a scrape has exposed those zeros: a counter's first sample is no increase, so
without the hold `increase()` would miss the very increment that promoted the group
(an unsafe accept, a truncation) and its alert would not fire on the group's name.

Batches are idempotent on `batch_id` (Spark's `foreachBatch` is at-least-once):
a batch id at or below the last one added is skipped.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from typing import Any, Callable, Iterable, Mapping

import numpy as np
from prometheus_client import CollectorRegistry, generate_latest

from fencewatch.sinks import metrics as m
from fencewatch.sinks.exposition import adder, empty_families, serve
from fencewatch.sinks.group_series import firing_series, group_model_series, protocol_totals
from fencewatch.sinks.group_views import GroupViews, group_pages
from fencewatch.sinks.health import Health
from fencewatch.sinks.build_info import running_versions  # noqa: F401  (callers import it from here)
from fencewatch.sinks.metrics import OTHER, GroupKey, GroupLimiter, MetricsConfig
from fencewatch.sinks.metrics_batch import (STATUS_FIELDS, Aggregate, GroupStatus, Histogram, MetricsBatch, int_or_none,
                                            ts_or_none)
from fencewatch.sinks.verdict_summary import attr_getter, summarize_verdicts  # noqa: F401  (callers import it)
from fencewatch.state.model import OUTPUT_NAMES, POLICY_ANSWER_FIELD, Policy
from fencewatch.state.status import (DEFAULT_CLUSTER, RequestFacts, VerdictShape,
                                     summarize_commit_verdicts)  # noqa: F401  (callers import it from here)

log = logging.getLogger(__name__)

# (policy label, verdict field of its answer), from the verdict's declaration.
_POLICY_FIELDS = tuple((p.value, POLICY_ANSWER_FIELD[p]) for p in Policy)
_API_BY_KIND = {"commit": "OffsetCommit", "txn_commit": "TxnOffsetCommit"}
_DEFAULT_CLUSTER = DEFAULT_CLUSTER
_Histogram = Histogram  # its former name here (tests/sinks)

# Per-group counters created at zero when a group gets its series, so rate(),
# increase() and alert rules see 0 instead of nothing for groups that never
# had a zombie, a truncation or a fencing error.
_ZERO_SERIES: tuple[tuple[str, tuple[str, ...]], ...] = (
    *((m.ZOMBIE_COMMITS_TOTAL, (k,)) for k in m.COMMIT_KINDS),
    *((m.UNSAFE_ACCEPTS_TOTAL, (k,)) for k in m.COMMIT_KINDS),
    *((m.MODEL_COMPARISONS_TOTAL, (k, o)) for k in m.COMMIT_KINDS for o in m.COMPARISON_OUTCOMES),
    (m.ABORTED_TRANSACTIONS_TOTAL, ()),
    (m.AVOIDABLE_ABORTS_TOTAL, ()),
    *((m.TRUNCATIONS_TOTAL, (r,)) for r in m.TRUNCATION_REASONS),
    (m.BROKER_ERRORS_TOTAL, ("OffsetCommit", "STALE_MEMBER_EPOCH")),
    (m.BROKER_ERRORS_TOTAL, ("TxnOffsetCommit", "ILLEGAL_GENERATION")),
    *((spec.name, ()) for spec in m.STATUS_METRICS if spec.type == m.COUNTER),
)

# (family, status field) of the counters a status gives as a monotone total (``group_rebalances_total``):
# counted by its growth from the group's previous status.
_STATUS_TOTALS = tuple((spec.name, spec.status_field) for spec in m.STATUS_METRICS if spec.type == m.COUNTER)
# MetricsBatch field -> the gauge it sets, as last reported
_STATE_GAUGES = (("state_rows", m.STATE_ROWS), ("state_memory_bytes", m.STATE_MEMORY_BYTES))



class _Collector:
    """The registry's view of the sink; collect() runs at scrape time."""

    def __init__(self, sink: "MetricsSink") -> None:
        self._sink = sink

    def collect(self):
        return self._sink._collect()


class MetricsSink:
    """Counts micro-batches into a snapshot that Prometheus scrapes.

    Driver usage::

        sink = MetricsSink(MetricsConfig(port=9464))
        sink.start()                       # serves http://127.0.0.1:9464/metrics
        sink.add_batch(batch_id=7, verdicts=..., alerts=..., group_status=...,
                       events={("default", "g1", "offset_commit", "offsets"): 120},
                       batch_duration_s=0.8, input_lag_records=0, last_event_ts_ms=...)
        sink.close()
    """

    def __init__(
        self,
        config: MetricsConfig | None = None,
        *,
        clock: Callable[[], float] = time.time,
        build_labels: Mapping[str, str] | None = None,
    ) -> None:
        self.config = config or MetricsConfig()
        problems = self.config.validate()
        if problems:
            raise ValueError("invalid metrics config: " + "; ".join(problems))
        self._clock = clock
        self._build = dict(build_labels) if build_labels is not None else running_versions()
        self._write_lock = threading.Lock()  # serialises add(); scrapes take only _lock
        self._lock = threading.Lock()
        self._limiter = GroupLimiter(self.config.max_groups, self.config.activity_decay, self.config.swap_margin)
        # (cluster, group label) -> metric -> label tail -> value
        self._grouped: dict[GroupKey, dict[str, dict[tuple, float]]] = {}
        self._ungrouped: dict[str, dict[tuple, float]] = {
            m.DLQ_RECORDS_TOTAL: {(r,): 0.0 for r in m.DLQ_REASONS},
            m.BATCHES_TOTAL: {(): 0.0},
            m.EXPORTER_REJECTED_RECORDS_TOTAL: {
                (r,): 0.0 for r in m.spec(m.EXPORTER_REJECTED_RECORDS_TOTAL).enums["record"]
            },
        }
        self._status: dict[GroupKey, GroupStatus] = {}
        self._firing: dict[GroupKey, dict[str, bool]] = {}
        # group -> event time (ms) until which its critical finding pins its own label
        self._pinned_until: dict[GroupKey, float] = {}
        self._event_ms: float | None = None  # newest event time seen: batches' and critical alerts'
        # groups promoted out of "other" whose series no scrape has exposed yet, and their
        # increments held until one has (the series show 0 first)
        self._unexposed: set[GroupKey] = set()
        self._held: dict[GroupKey, dict[str, dict[tuple, float]]] = {}
        self._histograms = {
            name: Histogram(m.spec(name).buckets)
            for name in (m.BATCH_DURATION_SECONDS, m.DECISION_LATENCY_SECONDS)
        }
        self._input_lag: float | None = None
        self._state: dict[str, float] = {}  # family (state_rows, state_memory_bytes) -> value, as last reported
        self._last_event_s: float | None = None
        self._last_batch_s: float | None = None
        self._started_s = clock()
        self._healthy = True
        self._last_batch_id: int | None = None
        self._warned: set[tuple[str, str]] = set()
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(_Collector(self))
        self.health = Health(self.config.health, clock=clock)
        self._server = None
        self.group_views = GroupViews()  # the /groups page (sinks.groups_topic's snapshots, as written)

    # ------------------------------------------------------------------ serving

    def start(self, host: str | None = None, port: int | None = None) -> tuple[str, int]:
        """Serve /metrics, /healthz and /readyz on host:port (config defaults; port 0 picks a free one)."""
        host = self.config.host if host is None else host
        port = self.config.port if port is None else port
        self._server = serve(self.registry, {"/healthz": self.health.liveness, "/readyz": self.health.readiness},
                             host, port, pages=group_pages(self.group_views, self._clock))
        bound = self._server.server_port
        log.info("serving Prometheus metrics at http://%s:%d/metrics (probes /healthz, /readyz; /groups)", host, bound)
        return host, bound

    def close(self) -> None:
        """Stop serving (idempotent)."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
            log.info("metrics endpoint stopped")

    def render(self) -> str:
        """The exposition text a scrape would get now."""
        return generate_latest(self.registry).decode()

    def set_healthy(self, healthy: bool, reason: str = "") -> None:
        """The driver's own verdict on itself (e.g. False after a failed batch); drives fencewatch_up."""
        with self._lock:
            if healthy != self._healthy:
                log.log(logging.INFO if healthy else logging.WARNING, "monitor health -> %s %s", healthy, reason)
            self._healthy = healthy

    def set_query_state(self, active: bool, failure: str | None = None) -> None:
        """The main loop's report on the query, every turn: running, or ended (its failure if it
        failed). Drives /healthz; /readyz also needs the batches :meth:`add` counts."""
        self.health.running(active, failure)

    def note_group_views(self, records) -> None:
        """Group snapshots the job wrote (cluster, group id, JSON or None): the /groups page's."""
        self.group_views.apply(records)

    # ------------------------------------------------------------------ input

    def add_batch(self, **fields: Any) -> bool:
        """Keyword form of :meth:`add`: ``add_batch(verdicts=..., alerts=..., ...)``."""
        return self.add(MetricsBatch(**fields))

    def add(self, batch: MetricsBatch) -> bool:
        """Count one micro-batch; False when `batch_id` was already added (a foreachBatch retry)."""
        with self._write_lock:
            self.health.progressed(batch.input_lag_records)  # a retried batch is progress too
            if batch.batch_id is not None and self._last_batch_id is not None and batch.batch_id <= self._last_batch_id:
                log.info("metrics: batch %d already counted, skipped", batch.batch_id)
                return False
            agg = self._aggregate(batch)
            with self._lock:
                self._apply(batch, agg)
            return True

    def remove_group(self, cluster: str, group_id: str) -> None:
        """Drop a deleted group's series now (same as a `Dead` status or `deleted_groups`)."""
        with self._write_lock, self._lock:
            self._delete((cluster or _DEFAULT_CLUSTER, group_id))

    def protocol_totals(self, protocol: str) -> dict:
        """Verdicts and alerts of the groups of ``protocol`` (``group_series.protocol_totals``)."""
        with self._lock:
            return protocol_totals(protocol, self._status, self._limiter.label, (self._grouped, self._held))

    # ------------------------------------------------------- aggregation (no lock)

    def _aggregate(self, batch: MetricsBatch) -> Aggregate:
        agg = Aggregate()
        self._count_events(agg, batch.events)
        self._count_verdicts(agg, batch.verdicts)
        for shapes, requests in batch.verdict_summaries:
            self._apply_verdict_summary(agg, Counter(shapes), Counter(requests))
        self._count_heartbeat_errors(agg, batch.heartbeat_errors)
        self._count_alerts(agg, batch.alerts)
        for record in batch.group_status:
            try:
                key, parsed = self._parse_status(record)
            except (KeyError, TypeError, ValueError, AttributeError) as exc:
                self._reject(agg, "status", record, exc)
                continue
            agg.statuses.append((key, parsed))
            agg.activity[key] += 0  # seen: may take a free label slot
        for reason, n in (batch.dlq or {}).items():
            code = str(reason).split(":", 1)[0].split("(", 1)[0].strip()
            agg.inc_ungrouped(m.DLQ_RECORDS_TOTAL, (self._closed("reason", code, m.DLQ_REASONS),), n)
        try:  # the writer's numpy array, or any sequence of numbers
            agg.latencies = np.asarray(batch.decision_latencies_s, dtype=np.float64).ravel()
            if np.isnan(agg.latencies).any():
                raise ValueError("NaN")  # numpy reads None as NaN: float() tells them apart
        except (TypeError, ValueError):  # one at a time, to reject only what is not a number
            agg.latencies = []
            for x in batch.decision_latencies_s:
                try:
                    agg.latencies.append(float(x))
                except (TypeError, ValueError) as exc:
                    self._reject(agg, "count", x, exc)
        return agg

    def _count_events(self, agg: Aggregate, events) -> None:
        metric = m.EVENTS_TOTAL
        for (cluster, group, type_, source), n in self._counted(agg, events, ("cluster", "group_id", "type", "source")):
            cluster = cluster or _DEFAULT_CLUSTER
            group = group or ""
            type_ = self._closed("type", type_, m.EVENT_TYPES)
            source = self._closed("source", source, m.SOURCES)
            agg.inc(metric, (cluster, group, type_, source), n)
            if group:
                agg.activity[(cluster, group)] += n

    def _count_heartbeat_errors(self, agg: Aggregate, errors) -> None:
        metric = m.BROKER_ERRORS_TOTAL
        for (cluster, group, error), n in self._counted(agg, errors, ("cluster", "group_id", "error")):
            name = m.error_name(error)
            if name is None:
                continue
            cluster = cluster or _DEFAULT_CLUSTER
            agg.inc(metric, (cluster, group or "", "ConsumerGroupHeartbeat", name), n)
            if group:
                agg.activity[(cluster, group)] += n

    def _count_verdicts(self, agg: Aggregate, verdicts: Iterable[Any]) -> None:
        shapes, requests, bad = summarize_verdicts(verdicts, self.config.broker_policy)
        for record, exc in bad:
            self._reject(agg, "verdict", record, exc)
        self._apply_verdict_summary(agg, shapes, requests)

    def _apply_verdict_summary(self, agg: Aggregate, shapes: Counter, requests: Counter) -> None:
        """Counters from verdict shapes and per-request facts (see :func:`summarize_verdicts`)."""
        invalid: set[tuple] = set()
        judged = m.COMMITS_JUDGED_TOTAL
        for shape, n in shapes.items():
            shape = VerdictShape._make(shape)
            cluster, group, kind, cls = shape.cluster, shape.group_id, shape.kind, shape.cls
            results = [getattr(shape, field) for _, field in _POLICY_FIELDS]
            problem = (
                "verdict without group_id" if not group
                else f"verdict kind {kind!r}; valid: {', '.join(m.COMMIT_KINDS)}" if kind not in m.COMMIT_KINDS
                else "verdict without a result for every policy" if any(r is None for r in results)
                else None
            )
            if problem:
                invalid.add((cluster, group, kind))
                self._reject(agg, "verdict", {OUTPUT_NAMES.get(f, f): v for f, v in shape._asdict().items()},
                             ValueError(problem), n)
                continue
            cls = self._closed("class", cls, m.CLASSES)
            agg.activity[(cluster, group)] += n
            for (policy, _), result in zip(_POLICY_FIELDS, results):
                agg.inc(judged, (cluster, group, kind, policy, self._closed("result", result, m.RESULTS), cls), n)
            if cls == "zombie":
                agg.inc(m.ZOMBIE_COMMITS_TOTAL, (cluster, group, kind), n)
            if shape.unsafe:
                agg.inc(m.UNSAFE_ACCEPTS_TOTAL, (cluster, group, kind), n)
            if shape.model_agrees is not None:
                outcome = "agree" if shape.model_agrees else "diverge"
                agg.inc(m.MODEL_COMPARISONS_TOTAL, (cluster, group, kind, outcome), n)
        for facts, n in requests.items():
            facts = RequestFacts._make(facts)
            cluster, group, kind = facts.cluster, facts.group_id, facts.kind
            if (cluster, group, kind) in invalid or not group or kind not in m.COMMIT_KINDS:
                continue
            error = m.error_name(facts.broker_error)
            if error is not None:
                agg.inc(m.BROKER_ERRORS_TOTAL, (cluster, group, _API_BY_KIND[kind], error), n)
            # aborted / avoidable: decided in state (``judging.commit_stored``), counted here
            if facts.aborted:
                agg.inc(m.ABORTED_TRANSACTIONS_TOTAL, (cluster, group), n)
            if facts.avoidable:
                agg.inc(m.AVOIDABLE_ABORTS_TOTAL, (cluster, group), n)

    def _count_alerts(self, agg: Aggregate, alerts: Iterable[Any]) -> None:
        for a in alerts:
            try:
                get = a.get if isinstance(a, Mapping) else attr_getter(a)
                cluster = get("cluster") or _DEFAULT_CLUSTER
                group = get("group_id") or ""
                if get("kind") is None or get("severity") is None:
                    raise ValueError("alert without kind or severity")
                kind = self._closed("alert kind", get("kind"), m.ALERT_KINDS)
                severity = self._closed("severity", get("severity"), m.SEVERITIES)
                details = get("details") or {}
                status = details.get("status") if isinstance(details, Mapping) else None
            except (KeyError, AttributeError, TypeError, ValueError) as exc:
                self._reject(agg, "alert", a, exc)
                continue
            key = (cluster, group)
            if group:
                agg.activity[key] += 1
            if kind in m.LIFECYCLE_KINDS and status in ("firing", "resolved") and group:
                agg.firing.append((key, kind, status == "firing"))
            if status == "resolved":
                continue
            if (severity == m.PINNING_SEVERITY or kind in m.PINNING_KINDS) and group:
                agg.critical_finding(key, ts_or_none(get("ts")))
            agg.inc(m.ALERTS_TOTAL, (cluster, group, kind, severity))
            if kind in m.TRUNCATION_REASONS:
                agg.inc(m.TRUNCATIONS_TOTAL, (cluster, group, kind))

    def _parse_status(self, record: Mapping[str, Any]) -> tuple[GroupKey, GroupStatus]:
        group = record["group_id"]
        if not group:
            raise ValueError("status without group_id")
        cluster = record.get("cluster") or _DEFAULT_CLUSTER
        closed, get = self._closed, record.get
        # the fields the specs read (STATUS_FIELDS): a label closed to its enum, else a number
        status = GroupStatus(*[closed(f, get(f), values) if values else int_or_none(get(f))
                               for f, values in STATUS_FIELDS])
        return (cluster, group), status

    def _counted(self, agg: Aggregate, records, fields: tuple[str, ...]) -> list[tuple[tuple, float]]:
        """(key tuple, count) pairs from a {tuple: n} mapping or from dicts with `fields` + `count`."""
        out = []
        items = records.items() if isinstance(records, Mapping) else ((r, None) for r in records)
        for key, n in items:
            try:
                if n is None:  # a dict record
                    key, n = tuple(key[f] for f in fields), key.get("count", 1)
                if not isinstance(key, tuple) or len(key) != len(fields):
                    raise ValueError(f"key is not a {len(fields)}-tuple {fields}")
                out.append((key, float(n)))
            except (KeyError, TypeError, ValueError, AttributeError) as exc:
                self._reject(agg, "count", key, exc)
        return out

    def _closed(self, label: str, value: Any, allowed: tuple[str, ...]) -> str:
        if value in allowed:
            return value
        fallback = allowed[-1]
        marker = (label, str(value))
        if marker not in self._warned and len(self._warned) < 1000:
            self._warned.add(marker)
            log.warning("metrics: %s %r is not in the closed set; exported as %r", label, value, fallback)
        return fallback

    def _reject(self, agg: Aggregate, record_type: str, record: Any, exc: Exception, n: int = 1) -> None:
        agg.inc_ungrouped(m.EXPORTER_REJECTED_RECORDS_TOTAL, (record_type,), n)
        log.warning(
            "metrics: malformed %s record%s not counted (%s: %s): %.200r",
            record_type, f" x{n}" if n > 1 else "", type(exc).__name__, exc, record,
        )

    # ------------------------------------------------------------ apply (locked)

    def _apply(self, batch: MetricsBatch, agg: Aggregate) -> None:
        now = self._clock()
        grown: Counter = Counter()  # (family, group) -> growth of a status total (_STATUS_TOTALS)
        deleted: set[GroupKey] = {(c or _DEFAULT_CLUSTER, g) for c, g in batch.deleted_groups}
        for key, status in agg.statuses:
            previous = self._status.get(key)
            for metric, field in _STATUS_TOTALS:
                total = getattr(status, field)
                if total is None:
                    continue
                before = getattr(previous, field) if previous is not None else None
                # first sight, or the model's count restarted: all of it is new
                delta = total if before is None or total < before else total - before
                if delta:
                    grown[(metric, key)] += delta
            self._status[key] = status
            if status.state == "Dead":
                deleted.add(key)
        for key, kind, firing in agg.firing:
            self._firing.setdefault(key, {})[kind] = firing
        if batch.last_event_ts_ms is not None:
            self._last_event_s = max(self._last_event_s or 0.0, batch.last_event_ts_ms / 1000.0)
        pinned = self._pin(batch, agg)

        urgent = self._urgent()
        from_other = {k for k in (*agg.activity, *urgent, *pinned) if self._limiter.folded(k)}
        promoted, demoted = self._limiter.observe(agg.activity, urgent, pinned)
        for key in demoted:
            self._grouped.pop(key, None)
            self._unexposed.discard(key)
            self._held.pop(key, None)
        for key in promoted:
            self._store(key)
            if key in from_other:
                self._unexposed.add(key)

        for metric, counter in agg.grouped.items():
            for (cluster, group, *tail), n in counter.items():
                self._count((cluster, self._limiter.label((cluster, group))), metric, tuple(tail), n)
        for (metric, key), n in grown.items():
            self._count((key[0], self._limiter.label(key)), metric, (), n)
        for metric, counter in agg.ungrouped.items():
            series = self._ungrouped.setdefault(metric, {})
            for labels, n in counter.items():
                series[labels] = series.get(labels, 0.0) + n
        for key in deleted:
            self._delete(key)

        if batch.batch_duration_s is not None:
            self._histograms[m.BATCH_DURATION_SECONDS].observe(batch.batch_duration_s)
        self._histograms[m.DECISION_LATENCY_SECONDS].observe_all(agg.latencies)
        if batch.input_lag_records is not None:
            self._input_lag = float(batch.input_lag_records)
        for field, metric in _STATE_GAUGES:
            if getattr(batch, field) is not None:
                self._state[metric] = float(getattr(batch, field))
        self._ungrouped[m.BATCHES_TOTAL][()] += 1
        self._last_batch_s = now
        if batch.batch_id is not None:
            self._last_batch_id = batch.batch_id

    def _pin(self, batch: MetricsBatch, agg: Aggregate) -> list[GroupKey]:
        """Record this batch's critical findings and drop the pins that lapsed; the groups pinned now.

        A finding lasts until the newest event time (the batches' `last_event_ts_ms` and the
        critical alerts' own `ts`) is `critical_hold_s` past the group's last critical alert:
        event time, as the offsets-expiry horizon, so a replay or a stalled input pins as live.
        """
        times = [t for t in agg.critical.values() if t is not None]
        if batch.last_event_ts_ms is not None:
            times.append(batch.last_event_ts_ms)
        if times:
            self._event_ms = max(self._event_ms or 0.0, *times)
        hold_ms = self.config.critical_hold_s * 1000
        for key, ts in agg.critical.items():
            at = ts if ts is not None else self._event_ms if self._event_ms is not None else self._clock() * 1000
            self._pinned_until[key] = max(self._pinned_until.get(key, at + hold_ms), at + hold_ms)
        if self._event_ms is not None:
            for key in [k for k, until in self._pinned_until.items() if until < self._event_ms]:
                del self._pinned_until[key]
                log.info("metrics: [cluster=%s group=%s] critical finding over; label no longer pinned", *key)
        return list(self._pinned_until)

    def _count(self, gkey: GroupKey, metric: str, labels: tuple, n: float) -> None:
        """Add `n` to a series of (cluster, group label) `gkey`; held while its series are unexposed."""
        series = self._store(gkey).setdefault(metric, {})
        if gkey in self._unexposed:
            series.setdefault(labels, 0.0)  # the series appears at 0 first
            held = self._held.setdefault(gkey, {}).setdefault(metric, {})
            held[labels] = held.get(labels, 0.0) + n
        else:
            series[labels] = series.get(labels, 0.0) + n

    def _urgent(self) -> list[GroupKey]:
        """Groups whose offsets expire soon or with a lifecycle alert firing."""
        urgent = [key for key, kinds in self._firing.items() if any(kinds.values())]
        if self._last_event_s is not None:
            horizon_ms = (self._last_event_s + self.config.expiry_warning_s) * 1000
            urgent += [
                key
                for key, s in self._status.items()
                if s.expiry_deadline_ms is not None and s.expiry_deadline_ms <= horizon_ms
            ]
        return urgent

    def _store(self, gkey: GroupKey) -> dict[str, dict[tuple, float]]:
        store = self._grouped.get(gkey)
        if store is None:
            store = self._grouped[gkey] = {}
            if gkey[1]:  # not for partition-scoped (group "") series
                for metric, tail in _ZERO_SERIES:
                    store.setdefault(metric, {})[tail] = 0.0
        return store

    def _delete(self, key: GroupKey) -> None:
        if self._limiter.forget(key):
            self._grouped.pop(key, None)
        self._status.pop(key, None)
        self._firing.pop(key, None)
        self._pinned_until.pop(key, None)
        self._unexposed.discard(key)
        self._held.pop(key, None)
        log.info("metrics: [cluster=%s group=%s] deleted; its series are removed", *key)

    # ---------------------------------------------------------------- scrape

    def _collect(self):
        with self._lock:
            families = list(self._families())
            self._release_held()
            return families

    def _release_held(self) -> None:
        """After a scrape exposed the zeros of groups promoted out of "other": their held
        increments count from the next scrape on, an increase() sees them."""
        for gkey in self._unexposed:
            store = self._grouped.get(gkey, {})
            for metric, held in self._held.pop(gkey, {}).items():
                series = store.setdefault(metric, {})
                for labels, n in held.items():
                    series[labels] = series.get(labels, 0.0) + n
        self._unexposed.clear()

    def _families(self):
        families = empty_families(m.JOB_METRICS)
        add = adder(families)
        for (cluster, label), store in self._grouped.items():
            for metric, series in store.items():
                for tail, value in series.items():
                    add(metric, (cluster, label, *tail), value)
        for metric, series in self._ungrouped.items():
            for labels, value in series.items():
                add(metric, labels, value)
        group_model_series(self._status, self._limiter.label, add)
        firing_series(self._grouped, self._firing, self._limiter.label, add)
        self._exporter_series(add)
        for name, hist in self._histograms.items():
            families[name].add_metric([], hist.buckets(), hist.total)
        self._monitor_series(add)
        return families.values()

    def _exporter_series(self, add: Callable[[str, tuple, float], None]) -> None:
        labelled = Counter(cluster for cluster, _ in self._limiter.labelled)
        known = set(self._status) | set(self._limiter._scores) | set(self._limiter.labelled)
        total = Counter(cluster for cluster, _ in known)
        for cluster in total:
            add(m.EXPORTER_GROUPS, (cluster, "labelled"), labelled[cluster])
            add(m.EXPORTER_GROUPS, (cluster, OTHER), total[cluster] - labelled[cluster])

    def _monitor_series(self, add: Callable[[str, tuple, float], None]) -> None:
        """The monitor's own gauges: lag, state size, freshness, fencewatch_up, build_info."""
        if self._input_lag is not None:
            add(m.INPUT_LAG_RECORDS, (), self._input_lag)
        for metric, value in self._state.items():
            add(metric, (), value)
        if self._last_event_s is not None:
            add(m.LAST_EVENT_TIMESTAMP_SECONDS, (), self._last_event_s)
        if self._last_batch_s is not None:
            add(m.LAST_BATCH_TIMESTAMP_SECONDS, (), self._last_batch_s)
        fresh = self._clock() - (self._last_batch_s if self._last_batch_s is not None else self._started_s)
        add(m.UP, (), 1.0 if self._healthy and fresh <= self.config.stale_after_s else 0.0)
        add(
            m.BUILD_INFO,
            (self._build["version"], self._build["python_version"], self._build["pyspark_version"]),
            1.0,
        )

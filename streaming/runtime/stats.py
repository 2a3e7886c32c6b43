"""The job's running totals (:class:`JobStats`) and how a person reads them: the progress line
``run`` and ``demo`` log every few seconds, and the demo's closing table."""
from __future__ import annotations

import threading
import time
from collections import Counter
from dataclasses import dataclass, field

import numpy as np

_RNG = np.random.default_rng(0)  # the latency sample's draws: reproducible


@dataclass
class JobStats:
    """Running totals for the live progress line and the final summary."""

    started: float = field(default_factory=time.monotonic)
    batches: int = 0
    events: int = 0
    verdicts: int = 0
    by_class: Counter = field(default_factory=Counter)
    alerts_by_kind: Counter = field(default_factory=Counter)
    dead_letters: int = 0
    latencies_ms: list = field(default_factory=list)  # decision latency samples: add_latencies
    latency_seen: int = 0  # decisions whose latency was offered to the sample
    # The same split at the query's start: decisions on events produced before the first
    # micro-batch with decisions ended waited for the start-up (Spark's, the Python workers'),
    # not for the job; the steady figures are the others' (add_decisions).
    steady_from_ms: int | None = None  # wall ms the first micro-batch with decisions ended
    # Decisions on events produced before the job started (a backlog, a replayed trace): their
    # "latency" is the data's age, not the job's doing, so they count apart and enter neither
    # figure (a 2023 trace once read "start-up p99 60,617,749 s").
    started_wall_ms: int = field(default_factory=lambda: int(time.time() * 1000))
    backlog_seen: int = 0
    backlog_oldest_ms: int | None = None
    startup_ms: list = field(default_factory=list)
    startup_seen: int = 0
    steady_ms: list = field(default_factory=list)
    steady_seen: int = 0
    batch_seconds: list = field(default_factory=list)
    event_ids: Counter = field(default_factory=Counter)  # only when tracking exactly-once (tests)
    track_ids: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock)

    MAX_LATENCY_SAMPLES = 200_000

    def add_latencies(self, values_ms) -> None:
        """Keep a uniform sample of every decision's latency, at most :data:`MAX_LATENCY_SAMPLES`
        (reservoir sampling, Vitter's algorithm R, vectorised per batch), so the percentiles cover
        the whole run. (It kept the first 200,000 before: at 10,000 events/s, the first ~10 s.)
        Call with ``lock`` held."""
        self.latency_seen = _reservoir_add(self.latencies_ms, self.latency_seen, values_ms, self.MAX_LATENCY_SAMPLES)

    def add_decisions(self, values_ms, stamps_ms, batch_end_ms: int) -> None:
        """A micro-batch's decision latencies with their events' ``ts``: every one into the whole
        run's sample (:meth:`add_latencies`), and into the start-up or the steady sample. Start-up:
        the event was produced before the first micro-batch with decisions ended (that batch's
        decisions included), so it waited for the query to start. An event produced before the job
        started is neither: it is counted as backlog. Call with ``lock`` held."""
        values = np.asarray(values_ms, dtype=np.float64).ravel()
        self.add_latencies(values)
        if not len(values):
            return
        stamps = np.asarray(stamps_ms).ravel()
        backlog = stamps < self.started_wall_ms
        if backlog.any():
            self.backlog_seen += int(backlog.sum())
            oldest = int(stamps[backlog].min())
            self.backlog_oldest_ms = oldest if self.backlog_oldest_ms is None else min(oldest, self.backlog_oldest_ms)
            values, stamps = values[~backlog], stamps[~backlog]
            if not len(values):
                return
        cap = self.MAX_LATENCY_SAMPLES
        if self.steady_from_ms is None:
            self.steady_from_ms = batch_end_ms
            self.startup_seen = _reservoir_add(self.startup_ms, self.startup_seen, values, cap)
            return
        early = stamps < self.steady_from_ms
        if early.any():
            self.startup_seen = _reservoir_add(self.startup_ms, self.startup_seen, values[early], cap)
        self.steady_seen = _reservoir_add(self.steady_ms, self.steady_seen, values[~early], cap)

    def percentile(self, values: list, q: float) -> float | None:
        if not values:
            return None
        s = sorted(values)
        return s[min(len(s) - 1, int(q * (len(s) - 1) + 0.5))]


def _reservoir_add(kept: list, seen: int, values_ms, cap: int) -> int:
    """Algorithm R over one batch of values; returns how many values the sample was offered."""
    values = np.asarray(values_ms, dtype=np.float64).ravel()
    room = max(0, cap - len(kept))
    kept += values[:room].tolist()
    seen += min(room, len(values))
    rest = values[room:]
    if not len(rest):
        return seen
    ranks = seen + np.arange(1, len(rest) + 1)  # each value's rank among all offered
    slots = (_RNG.random(len(rest)) * ranks).astype(np.int64)  # uniform in [0, rank)
    for i in np.flatnonzero(slots < cap).tolist():  # in order: a later value may replace an earlier one
        kept[slots[i]] = float(rest[i])
    return seen + len(rest)


def _latency(s: JobStats) -> str:
    """Steady p50/p99, and the start-up p99 apart (the first batches wait for the query's start)."""
    if s.steady_from_ms is None:  # stats fed through add_latencies only (benchmarks)
        p50, p99 = s.percentile(s.latencies_ms, 0.5), s.percentile(s.latencies_ms, 0.99)
        return f"latency p50 {p50 / 1000:.2f}s p99 {p99 / 1000:.2f}s" if p50 is not None else "latency -"
    p50, p99 = s.percentile(s.steady_ms, 0.5), s.percentile(s.steady_ms, 0.99)
    up = s.percentile(s.startup_ms, 0.99)
    steady = f"latency p50 {p50 / 1000:.2f}s p99 {p99 / 1000:.2f}s" if p50 is not None else "latency -"
    backlog = f" (backlog {s.backlog_seen:,})" if s.backlog_seen else ""
    return steady + (f" (start-up p99 {up / 1000:.2f}s)" if up is not None else "") + backlog


def progress_line(s: JobStats) -> str:
    up = time.monotonic() - s.started
    lat = _latency(s)
    classes = ", ".join(f"{k} {v}" for k, v in sorted(s.by_class.items())) or "-"
    return (f"[{up:5.0f}s] batches {s.batches}, events {s.events} ({s.events / max(up, 1e-9):,.0f}/s), "
            f"verdicts {s.verdicts} ({classes}), alerts {sum(s.alerts_by_kind.values())}, DLQ {s.dead_letters}, {lat}")


def latency_rows(s: JobStats) -> list[tuple[str, str]]:
    """Start-up decisions on a line of their own, then the steady p50 and p99 (the rest)."""
    def fmt(values, q):
        v = s.percentile(values, q)
        return "-" if v is None else f"{v / 1000:.2f} s"

    if s.steady_from_ms is None and s.latencies_ms:  # fed through add_latencies only
        return [(f"decision latency p{int(q * 100)}", fmt(s.latencies_ms, q)) for q in (0.5, 0.99)]
    rows = [("decision latency, start-up", "-" if not s.startup_seen else
             f"p50 {fmt(s.startup_ms, 0.5)}, p99 {fmt(s.startup_ms, 0.99)} ({s.startup_seen:,} decisions on "
             "events produced before the first micro-batch ended)")]
    rows += [(f"decision latency p{int(q * 100)}, steady", fmt(s.steady_ms, q)) for q in (0.5, 0.99)]
    if s.backlog_seen:
        age_s = (s.started_wall_ms - s.backlog_oldest_ms) / 1000
        rows.append(("decisions on a backlog", f"{s.backlog_seen:,} (events produced before the job started, the "
                     f"oldest {_age(age_s)} before: their age is the backlog's, in neither latency)"))
    return rows


def _age(seconds: float) -> str:
    for unit, size in (("days", 86_400), ("h", 3_600), ("min", 60)):
        if seconds >= size:
            return f"{seconds / size:,.1f} {unit}"
    return f"{seconds:.1f} s"


def summary_table(s: JobStats, extra: dict | None = None) -> str:
    up = time.monotonic() - s.started
    rows = [("events judged", f"{s.events:,}"), ("throughput", f"{s.events / max(up, 1e-9):,.0f} events/s"),
            ("micro-batches", f"{s.batches:,}"), ("verdicts", f"{s.verdicts:,}")]
    rows += [(f"  class {k}", f"{v:,}") for k, v in sorted(s.by_class.items())]
    rows += [("alerts", f"{sum(s.alerts_by_kind.values()):,}")]
    rows += [(f"  {k}", f"{v:,}") for k, v in sorted(s.alerts_by_kind.items())]
    rows += [("dead letters", f"{s.dead_letters:,}")]
    rows += latency_rows(s)
    v = s.percentile(s.batch_seconds, 0.5)
    rows.append(("sink time per batch p50", "-" if v is None else f"{v:.2f} s"))
    rows += list((extra or {}).items())
    width = max(len(k) for k, _ in rows)
    line = "-" * (width + 20)
    return "\n".join([line] + [f"{k:<{width}}  {v}" for k, v in rows] + [line])

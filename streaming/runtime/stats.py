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
        kept, cap = self.latencies_ms, self.MAX_LATENCY_SAMPLES
        values = np.asarray(values_ms, dtype=np.float64).ravel()
        room = max(0, cap - len(kept))
        kept += values[:room].tolist()
        self.latency_seen += min(room, len(values))
        rest = values[room:]
        if not len(rest):
            return
        seen = self.latency_seen + np.arange(1, len(rest) + 1)  # each value's rank among all offered
        slots = (_RNG.random(len(rest)) * seen).astype(np.int64)  # uniform in [0, rank)
        for i in np.flatnonzero(slots < cap).tolist():  # in order: a later value may replace an earlier one
            kept[slots[i]] = float(rest[i])
        self.latency_seen += len(rest)

    def percentile(self, values: list, q: float) -> float | None:
        if not values:
            return None
        s = sorted(values)
        return s[min(len(s) - 1, int(q * (len(s) - 1) + 0.5))]


def progress_line(s: JobStats) -> str:
    up = time.monotonic() - s.started
    p50, p99 = s.percentile(s.latencies_ms, 0.5), s.percentile(s.latencies_ms, 0.99)
    lat = f"latency p50 {p50 / 1000:.2f}s p99 {p99 / 1000:.2f}s" if p50 is not None else "latency -"
    classes = ", ".join(f"{k} {v}" for k, v in sorted(s.by_class.items())) or "-"
    return (f"[{up:5.0f}s] batches {s.batches}, events {s.events} ({s.events / max(up, 1e-9):,.0f}/s), "
            f"verdicts {s.verdicts} ({classes}), alerts {sum(s.alerts_by_kind.values())}, DLQ {s.dead_letters}, {lat}")


def summary_table(s: JobStats, extra: dict | None = None) -> str:
    up = time.monotonic() - s.started
    rows = [("events judged", f"{s.events:,}"), ("throughput", f"{s.events / max(up, 1e-9):,.0f} events/s"),
            ("micro-batches", f"{s.batches:,}"), ("verdicts", f"{s.verdicts:,}")]
    rows += [(f"  class {k}", f"{v:,}") for k, v in sorted(s.by_class.items())]
    rows += [("alerts", f"{sum(s.alerts_by_kind.values()):,}")]
    rows += [(f"  {k}", f"{v:,}") for k, v in sorted(s.alerts_by_kind.items())]
    rows += [("dead letters", f"{s.dead_letters:,}")]
    for q in (0.5, 0.99):
        v = s.percentile(s.latencies_ms, q)
        rows.append((f"decision latency p{int(q * 100)}", "-" if v is None else f"{v / 1000:.2f} s"))
    v = s.percentile(s.batch_seconds, 0.5)
    rows.append(("sink time per batch p50", "-" if v is None else f"{v:.2f} s"))
    rows += list((extra or {}).items())
    width = max(len(k) for k, _ in rows)
    line = "-" * (width + 20)
    return "\n".join([line] + [f"{k:<{width}}  {v}" for k, v in rows] + [line])

"""The job's running totals (:class:`JobStats`) and how a person reads them: the progress line
``run`` and ``demo`` log every few seconds, and the demo's closing table."""
from __future__ import annotations

import threading
import time
from collections import Counter
from dataclasses import dataclass, field


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
    latencies_ms: list = field(default_factory=list)  # decision latency samples (bounded)
    batch_seconds: list = field(default_factory=list)
    event_ids: Counter = field(default_factory=Counter)  # only when tracking exactly-once (tests)
    track_ids: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock)

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

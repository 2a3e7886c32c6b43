"""Liveness and readiness of a fencewatch process, from what its main loop and its work report.

What lives here: :class:`HealthConfig` (the probes' bounds), :class:`Health` (the facts and the
two answers) and :class:`Answer`. Liveness (``/healthz``) says the work is running: the query
(or the bridge's loop) is active, not terminated or failed, and the main loop reported within
``loop_timeout_s``; a process that cannot get that far within ``startup_grace_s`` is not live
either. Readiness (``/readyz``) says the work makes progress: a unit of it (a micro-batch, a
bridge's poll round) completed within ``ready_triggers`` trigger intervals, and the input lag
is at most ``max_lag_records``. A stalled query is live and not ready; a failed one is neither.

Pure: time comes from the injected clock, so the rules are tested without waiting; the
exporter's HTTP thread asks, the main loop and the batch writer tell (thread-safe).
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable


@dataclass(frozen=True, slots=True)
class HealthConfig:
    """The probes' bounds (``sinks.health_*`` in the config tree; the trigger from the query)."""

    # the interval one unit of work should take at most when idle: the job's trigger interval,
    # the bridge's poll timeout
    trigger_s: float = 1.0
    # readiness: a micro-batch completed within this many trigger intervals
    ready_triggers: int = 60
    # readiness: records in the input not yet read (None: not checked)
    max_lag_records: int | None = 1_000_000
    # liveness: time from start-up to a running query whose main loop reports
    startup_grace_s: float = 300.0
    # liveness: the main loop reported within this (it reports every half second or so)
    loop_timeout_s: float = 120.0

    @property
    def ready_window_s(self) -> float:
        return self.ready_triggers * self.trigger_s

    def validate(self) -> list[str]:
        """Every invalid field with its valid values (empty: valid)."""
        problems = []
        if self.trigger_s <= 0:
            problems.append(f"health trigger_s={self.trigger_s}; valid: > 0")
        if self.ready_triggers < 1:
            problems.append(f"health ready_triggers={self.ready_triggers}; valid: >= 1")
        if self.max_lag_records is not None and self.max_lag_records < 0:
            problems.append(f"health max_lag_records={self.max_lag_records}; valid: >= 0, or none")
        if self.startup_grace_s <= 0 or self.loop_timeout_s <= 0:
            problems.append("health startup_grace_s and loop_timeout_s: valid: > 0")
        return problems


@dataclass(frozen=True, slots=True)
class Answer:
    """One probe's answer: ``ok`` (HTTP 200, else 503), a one-word status and why."""

    ok: bool
    status: str
    reason: str
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def http_status(self) -> int:
        return 200 if self.ok else 503

    def body(self) -> bytes:
        return json.dumps({"status": self.status, "reason": self.reason, **self.details},
                          separators=(",", ":")).encode() + b"\n"


class Health:
    """The facts the probes read, as last reported; the answers at the moment they are asked.

    - :meth:`running` from the main loop, every turn: whether the work is active, or its failure;
    - :meth:`progressed` when a unit of work completed, with the input lag it saw.
    """

    def __init__(self, config: HealthConfig | None = None, *, clock: Callable[[], float] = time.time,
                 what: str = "query", unit: str = "micro-batch") -> None:
        self.config = config or HealthConfig()
        problems = self.config.validate()
        if problems:
            raise ValueError("invalid health config: " + "; ".join(problems))
        self._clock = clock
        self._what, self._unit = what, unit
        self._lock = threading.Lock()
        self._created_s = clock()
        self._loop_s: float | None = None
        self._active = False
        self._failure: str | None = None
        self._progress_s: float | None = None
        self._lag: int | None = None

    def running(self, active: bool, failure: str | None = None) -> None:
        """The main loop's report: the work is ``active``, or it ended (with ``failure`` if it failed)."""
        with self._lock:
            self._loop_s = self._clock()
            self._active = bool(active)
            self._failure = None if active else failure

    def progressed(self, lag_records: int | None = None) -> None:
        """A unit of work completed now; ``lag_records``: the input not yet read (None: unknown)."""
        with self._lock:
            self._progress_s = self._clock()
            if lag_records is not None:
                self._lag = int(lag_records)

    def liveness(self) -> Answer:
        with self._lock:
            return self._liveness(self._clock())

    def readiness(self) -> Answer:
        with self._lock:
            now = self._clock()
            live = self._liveness(now)
            if not live.ok or live.status == "starting":
                return Answer(False, live.status, live.reason, live.details)
            return self._readiness(now)

    def _liveness(self, now: float) -> Answer:
        c, what = self.config, self._what
        if self._loop_s is None:
            waited = now - self._created_s
            if waited <= c.startup_grace_s:
                return Answer(True, "starting", f"starting: the {what} is not running yet ({waited:.0f} s)",
                              {"since_start_s": round(waited, 1)})
            return Answer(False, "not_started", f"the {what} did not start within {c.startup_grace_s:.0f} s",
                          {"since_start_s": round(waited, 1)})
        silent = now - self._loop_s
        details = {"loop_reported_s_ago": round(silent, 1)}
        if self._failure is not None:
            return Answer(False, "failed", f"the {what} failed: {self._failure}", details)
        if silent > c.loop_timeout_s:
            return Answer(False, "hung", f"the main loop last reported {silent:.0f} s ago "
                                         f"(> {c.loop_timeout_s:.0f} s)", details)
        if not self._active:
            return Answer(False, "stopped", f"the {what} is not running", details)
        return Answer(True, "ok", f"the {what} is running", details)

    def _readiness(self, now: float) -> Answer:
        c, unit = self.config, self._unit
        lag = {"input_lag_records": self._lag}
        if self._progress_s is None:
            return Answer(False, "starting", f"no {unit} has completed yet", lag)
        age = now - self._progress_s
        details = {"last_progress_s_ago": round(age, 1), **lag}
        if age > c.ready_window_s:
            return Answer(False, "stalled", f"the last {unit} completed {age:.0f} s ago (> {c.ready_triggers} "
                                            f"triggers of {c.trigger_s:g} s)", details)
        if c.max_lag_records is not None and self._lag is not None and self._lag > c.max_lag_records:
            return Answer(False, "lagging", f"{self._lag} input records not read yet (> {c.max_lag_records})",
                          details)
        return Answer(True, "ready", f"the last {unit} completed {age:.1f} s ago", details)

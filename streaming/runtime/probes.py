"""The probes' bounds from the one Config: ``sinks.health_*`` and the work's own interval.

What lives here: :func:`health_config`, shared by the job (its trigger interval) and the bridge
(its poll timeout), so ``/healthz`` and ``/readyz`` mean the same in both (docs/health.md); and
:func:`failure_summary`, the one line a probe (or a log line) says about a failed query.
"""
from __future__ import annotations

from fencewatch.sinks.health import HealthConfig
from fencewatch.streaming.config import settings as cfgmod


def health_config(cfg: cfgmod.Config, trigger_s: float | None = None) -> HealthConfig:
    """``trigger_s``: the interval one unit of work takes when idle (default: the job's trigger)."""
    if trigger_s is None:
        trigger_s = cfgmod.parse_duration_ms(cfg.streaming.trigger_interval, "streaming.trigger_interval") / 1000
    k = cfg.sinks
    return HealthConfig(trigger_s=trigger_s, ready_triggers=k.health_ready_triggers,
                        max_lag_records=k.health_max_lag_records, startup_grace_s=k.health_startup_grace_ms / 1000)


def failure_summary(exc: BaseException, limit: int = 500) -> str:
    """A query's failure in one line. A ``foreachBatch`` or Python source failure comes back
    through py4j as "An exception was raised by the Python Proxy. Return Message: Traceback
    ...": its first line says nothing, so the Python exception's own line is taken."""
    lines = str(getattr(exc, "desc", None) or exc).strip().splitlines() or [type(exc).__name__]
    for i, line in enumerate(lines):
        if line.rstrip().endswith("Traceback (most recent call last):"):
            said = next((x for x in lines[i + 1:] if x.strip() and not x[:1].isspace()), None)
            if said is not None:
                return said.strip()[:limit]
    return lines[0].strip()[:limit]

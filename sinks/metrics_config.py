"""The job's exporter settings (the ``sinks.metrics`` branch of the config tree).

Apart from ``sinks/metrics.py`` (which re-exports :class:`MetricsConfig`: callers import it from
there) so that module holds the metric declarations alone, room for the next one within the
layout's 600 lines. No prometheus_client import.
"""
from __future__ import annotations

from dataclasses import dataclass

from fencewatch.sinks.health import HealthConfig
from fencewatch.state.model import Policy

_POLICIES = tuple(p.value for p in Policy)  # as sinks.metrics.POLICIES, without importing it (it imports this)


@dataclass(frozen=True, slots=True)
class MetricsConfig:
    """Exporter settings (the `sinks.metrics` branch of the config tree)."""

    host: str = "127.0.0.1"
    port: int = 9464
    # groups with their own `group` label across all clusters; the rest are `other`
    # (the job sets it from sinks.metrics_top_groups, whose default is the same)
    max_groups: int = 50
    # per-batch decay of a group's activity score (events + verdicts per batch)
    activity_decay: float = 0.8
    # a folded group displaces the weakest labelled one only when its score is
    # this many times higher: hysteresis, so two groups do not trade places every batch
    swap_margin: float = 2.0
    # groups whose offsets expire within this many seconds of the newest event,
    # or with a lifecycle alert firing, outrank busier groups for a label
    expiry_warning_s: float = 3600.0
    # a group with a critical alert (PINNING_SEVERITY) keeps its own label until the newest
    # event is this many seconds past its last critical alert, outranking every other group:
    # longer than the shipped rules' increase() windows (5-15 min), so they fire on its name
    critical_hold_s: float = 3600.0
    # fencewatch_up drops to 0 when no batch completed for this long
    stale_after_s: float = 300.0
    # policy the brokers run: decides "aborted" when a commit carries no broker answer
    broker_policy: str = "strict"
    # the probes /healthz and /readyz served beside /metrics (sinks/health.py)
    health: HealthConfig = HealthConfig()

    def validate(self) -> list[str]:
        """Every invalid field with its valid values (empty: valid)."""
        problems = []
        if not 0 <= self.port <= 65535:
            problems.append(f"port={self.port}; valid: 0..65535")
        if self.max_groups < 0:
            problems.append(f"max_groups={self.max_groups}; valid: >= 0")
        if not 0.0 <= self.activity_decay < 1.0:
            problems.append(f"activity_decay={self.activity_decay}; valid: [0, 1)")
        if self.swap_margin < 1.0:
            problems.append(f"swap_margin={self.swap_margin}; valid: >= 1")
        if self.critical_hold_s < 0:
            problems.append(f"critical_hold_s={self.critical_hold_s}; valid: >= 0")
        if self.stale_after_s <= 0:
            problems.append(f"stale_after_s={self.stale_after_s}; valid: > 0")
        if self.broker_policy not in _POLICIES:
            problems.append(f"unknown policy {self.broker_policy!r}; valid: {', '.join(_POLICIES)}")
        return problems + self.health.validate()

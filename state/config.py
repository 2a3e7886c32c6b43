"""Settings of the rules (the ``state`` section of the configuration tree)."""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from .model import Policy
from .spike import SpikeConfig


@dataclass(frozen=True, slots=True)
class RulesConfig:
    # offsets.retention.minutes (Kafka default 7 days), in ms.
    offsets_retention_ms: int = 10080 * 60_000
    # offsets.retention.check.interval.ms (Kafka default 10 min).
    offsets_retention_check_interval_ms: int = 600_000
    # OFFSETS_EXPIRING fires this long before a deadline.
    expiry_warning_ms: int = 3_600_000
    # After a group is first seen, commits from members not seen yet are not judged unknown.
    warmup_ms: int = 0
    # The policy of the broker version that produced ``error_code`` (for model_agrees).
    broker_policy: Policy = Policy.STRICT
    # Per group and kind, per-commit alerts within this window are folded into a count.
    alert_cooldown_ms: int = 60_000
    # A group (or a topic's commit of a group) nothing has mentioned for this long is forgotten
    # (contract §4.4); 0: never. Twice offsets.retention.minutes' default (docs/decisions.md).
    group_retention_ms: int = 14 * 24 * 3_600_000
    # A transactional offset is pending until committed, or at most transaction.max.timeout.ms.
    txn_timeout_ms: int = 900_000
    # FENCING_SPIKE / TXN_ABORT_STORM (state.spike): window, floors, multiple of the baseline.
    spike_window_ms: int = 60_000
    fencing_spike_floor: int = 20
    txn_abort_floor: int = 5
    spike_multiple: float = 3.0

    @property
    def spike(self) -> SpikeConfig:
        return _spike_config(self.spike_window_ms, self.fencing_spike_floor, self.txn_abort_floor,
                             self.spike_multiple)

    def validate(self) -> list[str]:
        problems = []
        for name in ("offsets_retention_ms", "offsets_retention_check_interval_ms"):
            if getattr(self, name) <= 0:
                problems.append(f"{name} must be > 0, got {getattr(self, name)}")
        for name in ("expiry_warning_ms", "warmup_ms", "alert_cooldown_ms", "txn_timeout_ms", "group_retention_ms"):
            if getattr(self, name) < 0:
                problems.append(f"{name} must be >= 0, got {getattr(self, name)}")
        problems.extend(self.spike.validate())
        if not isinstance(self.broker_policy, Policy):
            valid = ", ".join(p.value for p in Policy)
            problems.append(f"unknown policy {self.broker_policy!r}; valid: {valid}")
        return problems


@lru_cache(maxsize=64)
def _spike_config(window_ms: int, fencing_floor: int, txn_floor: int, multiple: float) -> SpikeConfig:
    return SpikeConfig(window_ms=window_ms, fencing_floor=fencing_floor, txn_abort_floor=txn_floor,
                       multiple=multiple)

"""Settings of the rules (the ``state`` section of the configuration tree), and how every
duration fencewatch reads is written (:func:`parse_duration_ms`: ``250ms``, ``45s``, ``10m``)."""
from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

from fencewatch.state.model import Policy
from fencewatch.state.spike import SpikeConfig


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
    # The policy of the broker version that produced ``error_code`` (for model_agrees): the one
    # its consumer groups' commits are judged by (strict up to Kafka 4.2, kip1251 from 4.3).
    broker_policy: Policy = Policy.STRICT
    # The same for streams groups (KIP-1071): kip1251 from Kafka 4.2 (fencing.KIP1251_SINCE).
    streams_broker_policy: Policy = Policy.KIP1251
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

    def policy_for(self, group_type: str | None) -> Policy:
        """The broker's policy for a group of ``group_type``: ``streams_broker_policy`` for a
        streams group, else ``broker_policy`` (a classic member keeps the exact generation check
        under either: ``fencing.evaluate``)."""
        return self.streams_broker_policy if group_type == "streams" else self.broker_policy

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
        for name in ("broker_policy", "streams_broker_policy"):
            if not isinstance(getattr(self, name), Policy):
                valid = ", ".join(p.value for p in Policy)
                problems.append(f"unknown policy {getattr(self, name)!r}; valid: {valid}")
        return problems


@lru_cache(maxsize=64)
def _spike_config(window_ms: int, fencing_floor: int, txn_floor: int, multiple: float) -> SpikeConfig:
    return SpikeConfig(window_ms=window_ms, fencing_floor=fencing_floor, txn_abort_floor=txn_floor,
                       multiple=multiple)


_DURATION = re.compile(r"\s*(\d+(?:\.\d+)?)\s*(ms|s|m|min|h|d)?\s*")
_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "min": 60_000, "h": 3_600_000, "d": 86_400_000}


def parse_duration_ms(value: object, name: str = "duration", *, bare: str = "s") -> int:
    """``250ms``, ``45s``, ``1.5m``, ``10min``, ``1h``, ``7d`` -> milliseconds; ValueError naming
    ``name`` otherwise. The one duration parser: flags, the config file and environment, the
    simulator, the bridge and the benchmarks all read durations here.

    A bare number means seconds (``--duration 90`` is 90 s in every command, as ``timeout 90``
    is); only a setting whose name ends in ``_ms`` reads a bare number as milliseconds
    (``bare="ms"``), because its name says so.
    """
    if isinstance(value, bool):
        raise ValueError(f"{name}: expected a duration, got {value!r}")
    m = _DURATION.fullmatch(str(value))
    if not m:
        raise ValueError(f"{name}: cannot read {value!r} as a duration (examples: 250ms, 45s, 10m, 1h)")
    return int(float(m.group(1)) * _UNIT_MS[m.group(2) or bare])

"""Per-group spike detection for FENCING_SPIKE and TXN_ABORT_STORM.

What lives here: a sans-I/O detector over tumbling event-time windows. Time is
the coordinator's `ts` (epoch ms) handed in by the caller; nothing here reads a
clock, logs or does I/O, and the state is a few numbers so it can live inside
the per-group Spark state (`applyInPandasWithState`) and be pickled every batch.

Why a window + baseline rather than a plain threshold: a busy group under
normal churn sees some STALE_MEMBER_EPOCH / ILLEGAL_GENERATION answers every
minute, a quiet one none. A window *fires* only when its count exceeds both an
absolute floor (so tiny groups do not page anybody for two errors) and a
multiple of the group's own baseline (an EWMA of its previous non-firing
windows). It *resolves* with hysteresis: only after `clear_windows`
consecutive windows at or below `clear_ratio` x the firing level, so a storm
that hovers around the threshold does not flap. The baseline is frozen while
an episode fires, so a long storm does not teach the detector that the storm
is normal.

Windows are aligned to multiples of `window_ms` since the epoch, so a replay
of the same trace closes the same windows and emits the same alerts (ids are
derived from the episode's first window). An event older than the open window
(cross-topic skew) is counted into the open window: a closed window is never
reopened.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from fencewatch.state.alerts import Alert, make_alert

FENCING_SPIKE = "FENCING_SPIKE"
TXN_ABORT_STORM = "TXN_ABORT_STORM"

FIRING = "firing"
RESOLVED = "resolved"


@dataclass(frozen=True, slots=True)
class SpikeConfig:
    """Thresholds of both detectors; counts are per window."""

    window_ms: int = 60_000
    # FENCING_SPIKE: STALE_MEMBER_EPOCH + ILLEGAL_GENERATION answers per window
    # must be strictly above this floor ...
    fencing_floor: int = 20
    # TXN_ABORT_STORM: rejected (= aborted) transactional commits per window.
    txn_abort_floor: int = 5
    # ... and strictly above `multiple` x the baseline.
    multiple: float = 3.0
    # EWMA weight of each closed, non-firing window in the baseline.
    baseline_weight: float = 0.25
    # Hysteresis: an episode resolves after `clear_windows` consecutive windows
    # whose count is <= clear_ratio x the level that fired it.
    clear_ratio: float = 0.5
    clear_windows: int = 3

    def validate(self) -> list[str]:
        """Every invalid field with its valid range (empty: valid), like `RulesConfig.validate`."""
        problems = []
        if self.window_ms <= 0:
            problems.append(f"window_ms={self.window_ms}; valid: > 0")
        if self.fencing_floor < 0:
            problems.append(f"fencing_floor={self.fencing_floor}; valid: >= 0")
        if self.txn_abort_floor < 0:
            problems.append(f"txn_abort_floor={self.txn_abort_floor}; valid: >= 0")
        if self.multiple < 1.0:
            problems.append(f"multiple={self.multiple}; valid: >= 1.0")
        if not 0.0 < self.baseline_weight <= 1.0:
            problems.append(f"baseline_weight={self.baseline_weight}; valid: (0, 1]")
        if not 0.0 <= self.clear_ratio <= 1.0:
            problems.append(f"clear_ratio={self.clear_ratio}; valid: [0, 1]")
        if self.clear_windows < 1:
            problems.append(f"clear_windows={self.clear_windows}; valid: >= 1")
        return problems


@dataclass(frozen=True, slots=True)
class SignalState:
    """One detector's memory: baseline and the current episode, if any."""

    baseline: float = 0.0
    firing: bool = False
    # Level (max(floor, multiple x baseline)) at the window that fired.
    fired_level: float = 0.0
    # Start of the window that fired; -1 when not firing. Names the episode.
    episode_start_ms: int = -1
    quiet_windows: int = 0
    peak: int = 0


@dataclass(frozen=True, slots=True)
class SpikeState:
    """Open window counts plus both detectors. `window_start_ms` -1: nothing seen yet."""

    window_start_ms: int = -1
    fencing_errors: int = 0
    txn_aborts: int = 0
    fencing: SignalState = SignalState()
    txn: SignalState = SignalState()


INITIAL = SpikeState()


def observe(
    state: SpikeState,
    ts_ms: int,
    fencing_errors: int,
    txn_aborts: int,
    cfg: SpikeConfig,
    *,
    cluster: str,
    group_id: str,
) -> tuple[SpikeState, list[Alert]]:
    """Count one event's (or one batch slice's) errors at `ts_ms`.

    Closes every window that ended at or before `ts_ms` first, so alerts come
    out in time order. Negative counts are treated as zero.
    """
    fencing_errors = max(0, int(fencing_errors))
    txn_aborts = max(0, int(txn_aborts))
    start = ts_ms - ts_ms % cfg.window_ms
    alerts: list[Alert] = []
    if state.window_start_ms < 0:
        # first event of the group: open its first window
        state = replace(state, window_start_ms=start)
    elif start > state.window_start_ms:
        state, alerts = advance(state, ts_ms, cfg, cluster=cluster, group_id=group_id)
    if fencing_errors == 0 and txn_aborts == 0:
        return state, alerts
    state = replace(
        state,
        fencing_errors=state.fencing_errors + fencing_errors,
        txn_aborts=state.txn_aborts + txn_aborts,
    )
    return state, alerts


def windows_closed(state: SpikeState, now_ms: int, window_ms: int) -> bool:
    """Whether the open window has ended by `now_ms` (only then can :func:`advance` change anything)."""
    return state.window_start_ms >= 0 and now_ms - state.window_start_ms >= window_ms


def advance(
    state: SpikeState, now_ms: int, cfg: SpikeConfig, *, cluster: str, group_id: str
) -> tuple[SpikeState, list[Alert]]:
    """Close every window that ended at or before `now_ms` (event time).

    Used on new input and from state timeouts, so a storm that simply stops
    still resolves. Returns the same state object when nothing closed.
    """
    if not windows_closed(state, now_ms, cfg.window_ms):
        return state, []
    closed = (now_ms - state.window_start_ms) // cfg.window_ms
    alerts: list[Alert] = []
    fencing, txn = state.fencing, state.txn
    window_start = state.window_start_ms
    counts = (state.fencing_errors, state.txn_aborts)
    # The open window carries counts; the windows after it are empty. Empty
    # windows matter one by one only while an episode is firing (each one is
    # quiet), so walk at most clear_windows + 1 of them and decay the baseline
    # of the rest in closed form.
    walked = min(closed, cfg.clear_windows + 1)
    for i in range(walked):
        fencing, alert = _close_window(
            fencing, counts[0], window_start, cfg, cfg.fencing_floor, FENCING_SPIKE, cluster, group_id
        )
        if alert is not None:
            alerts.append(alert)
        txn, alert = _close_window(
            txn, counts[1], window_start, cfg, cfg.txn_abort_floor, TXN_ABORT_STORM, cluster, group_id
        )
        if alert is not None:
            alerts.append(alert)
        window_start += cfg.window_ms
        counts = (0, 0)
    rest = closed - walked
    if rest > 0:
        decay = (1.0 - cfg.baseline_weight) ** rest
        fencing = _decay(fencing, decay)
        txn = _decay(txn, decay)
        window_start += rest * cfg.window_ms
    return (
        SpikeState(
            window_start_ms=window_start,
            fencing_errors=0,
            txn_aborts=0,
            fencing=fencing,
            txn=txn,
        ),
        alerts,
    )


def _decay(sig: SignalState, factor: float) -> SignalState:
    # empty windows pull the baseline toward zero; a firing baseline is frozen
    if sig.firing or sig.baseline == 0.0:
        return sig
    return replace(sig, baseline=sig.baseline * factor)


def _learn(baseline: float, count: int, cfg: SpikeConfig) -> float:
    return baseline + cfg.baseline_weight * (count - baseline)


def _close_window(
    sig: SignalState,
    count: int,
    window_start: int,
    cfg: SpikeConfig,
    floor: int,
    kind: str,
    cluster: str,
    group_id: str,
) -> tuple[SignalState, Alert | None]:
    window_end = window_start + cfg.window_ms
    if not sig.firing:
        level = max(float(floor), cfg.multiple * sig.baseline)
        # quiet window: learn it into the baseline
        if count <= level:
            if count == 0 and sig.baseline == 0.0:
                return sig, None
            return replace(sig, baseline=_learn(sig.baseline, count, cfg)), None
        # spike: above the floor and above multiple x baseline; freeze the baseline
        fired = replace(
            sig,
            firing=True,
            fired_level=level,
            episode_start_ms=window_start,
            quiet_windows=0,
            peak=count,
        )
        return fired, _alert(kind, FIRING, fired, count, window_start, window_end, cfg, floor, cluster, group_id)
    clear_level = cfg.clear_ratio * sig.fired_level
    peak = max(sig.peak, count)
    # still storming: any window above the clear level restarts the quiet count
    if count > clear_level:
        if sig.quiet_windows == 0 and peak == sig.peak:
            return sig, None
        return replace(sig, quiet_windows=0, peak=peak), None
    quiet = sig.quiet_windows + 1
    if quiet < cfg.clear_windows:
        return replace(sig, quiet_windows=quiet, peak=peak), None
    # calm for clear_windows windows in a row: the episode is over
    alert = _alert(
        kind, RESOLVED, replace(sig, peak=peak), count, window_start, window_end, cfg, floor, cluster, group_id
    )
    resolved = SignalState(baseline=_learn(sig.baseline, count, cfg))
    return resolved, alert


_WHAT = {
    FENCING_SPIKE: "STALE_MEMBER_EPOCH/ILLEGAL_GENERATION errors",
    TXN_ABORT_STORM: "aborted transactional commits",
}


def _alert(
    kind: str,
    status: str,
    sig: SignalState,
    count: int,
    window_start: int,
    window_end: int,
    cfg: SpikeConfig,
    floor: int,
    cluster: str,
    group_id: str,
) -> Alert:
    seconds = cfg.window_ms / 1000
    if status == FIRING:
        summary = (
            f"{kind}: {count} {_WHAT[kind]} in {seconds:g}s "
            f"(baseline {sig.baseline:.1f}, threshold {sig.fired_level:.1f})"
        )
        severity = "warning"
    else:
        summary = (
            f"{kind} resolved: {count} {_WHAT[kind]} in {seconds:g}s, at or below "
            f"{cfg.clear_ratio * sig.fired_level:.1f} for {cfg.clear_windows} windows (peak {sig.peak})"
        )
        severity = "info"
    details = {
        "status": status,
        "count": str(count),
        "baseline": f"{sig.baseline:.3f}",
        "threshold": f"{sig.fired_level:.3f}",
        "floor": str(floor),
        "multiple": f"{cfg.multiple:g}",
        "window_ms": str(cfg.window_ms),
        "window_start_ms": str(window_start),
        "window_end_ms": str(window_end),
        "episode_start_ms": str(sig.episode_start_ms),
        "peak": str(sig.peak),
    }
    return make_alert(
        ts=window_end,
        cluster=cluster,
        group_id=group_id,
        kind=kind,
        severity=severity,
        summary=summary,
        details=details,
        occurrence=f"{status}@{sig.episode_start_ms}",
    )

"""FENCING_SPIKE / TXN_ABORT_STORM detector (state/spike.py): firing, hysteresis, replay determinism."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fencewatch.state import spike
from fencewatch.state.spike import INITIAL, SpikeConfig, SpikeState, advance, observe

W = 60_000
CFG = SpikeConfig(window_ms=W, fencing_floor=10, txn_abort_floor=3, multiple=3.0, clear_ratio=0.5, clear_windows=2)
T0 = 1_700_000_040_000 - 1_700_000_040_000 % W  # a window boundary


def feed(windows, cfg=CFG, state=INITIAL, txn=False):
    """Feed one observation per window (count at the window's start); close the last one."""
    alerts = []
    for i, n in enumerate(windows):
        fencing, aborts = (0, n) if txn else (n, 0)
        state, out = observe(state, T0 + i * cfg.window_ms, fencing, aborts, cfg, cluster="c", group_id="g")
        alerts += out
    state, out = advance(state, T0 + len(windows) * cfg.window_ms, cfg, cluster="c", group_id="g")
    return state, alerts + out


def statuses(alerts):
    return [(a.kind, a.details["status"], a.ts) for a in alerts]


def test_quiet_group_below_floor_never_fires():
    state, alerts = feed([0, 3, 10, 2, 0, 10])
    assert alerts == []
    assert not state.fencing.firing


def test_spike_above_floor_and_baseline_fires_at_window_close():
    state, alerts = feed([2, 2, 2, 40])
    assert statuses(alerts) == [("FENCING_SPIKE", "firing", T0 + 4 * W)]
    a = alerts[0]
    assert (a.cluster, a.group_id, a.severity) == ("c", "g", "warning")
    assert a.details["count"] == "40"
    assert a.details["window_start_ms"] == str(T0 + 3 * W)
    assert float(a.details["threshold"]) == 10.0  # floor beats 3 x baseline (~1.4)
    assert state.fencing.firing and state.fencing.episode_start_ms == T0 + 3 * W


def test_busy_group_needs_a_multiple_of_its_baseline():
    steady = [8] * 10 + [25]  # baseline ~7.6 -> level ~22.7: 25 fires
    _, alerts = feed(steady)
    assert statuses(alerts) == [("FENCING_SPIKE", "firing", T0 + 11 * W)]
    _, alerts = feed([8] * 10 + [20])  # 20 > floor 10 but not > 3 x ~8
    assert alerts == []


def test_hovering_around_threshold_does_not_flap():
    # fires at 40 (level 10); clear level = 5; 6..12 keeps it firing, 5 and below is quiet
    _, alerts = feed([0, 40, 8, 12, 6, 11, 4, 9, 3, 2])
    assert statuses(alerts) == [
        ("FENCING_SPIKE", "firing", T0 + 2 * W),
        ("FENCING_SPIKE", "resolved", T0 + 10 * W),
    ]
    resolved = alerts[1]
    assert resolved.severity == "info"
    assert resolved.details["peak"] == "40"
    assert resolved.details["episode_start_ms"] == str(T0 + 1 * W)


def test_one_quiet_window_is_not_enough_to_resolve():
    state, alerts = feed([40, 1, 30])
    assert statuses(alerts) == [("FENCING_SPIKE", "firing", T0 + W)]
    assert state.fencing.firing and state.fencing.quiet_windows == 0


def test_baseline_is_frozen_while_firing():
    state, _ = feed([4, 4, 40, 40, 40, 40])
    before, _ = feed([4, 4])
    assert state.fencing.baseline == before.fencing.baseline


def test_storm_that_stops_resolves_through_advance_without_input():
    state, alerts = feed([50])
    assert statuses(alerts) == [("FENCING_SPIKE", "firing", T0 + W)]
    state2, out = advance(state, T0 + 1 * W + W - 1, CFG, cluster="c", group_id="g")
    assert out == [] and state2 is state  # the open window has not ended yet
    state3, out = advance(state, T0 + 100 * W, CFG, cluster="c", group_id="g")
    # first quiet window ends at T0+2W, second (clear_windows=2) at T0+3W
    assert statuses(out) == [("FENCING_SPIKE", "resolved", T0 + 3 * W)]
    assert state3.window_start_ms == T0 + 100 * W
    assert not state3.fencing.firing


def test_long_silence_decays_baseline_in_constant_time():
    state, _ = feed([9] * 20)
    far = T0 + 10**9 * W
    state2, out = advance(state, far, CFG, cluster="c", group_id="g")
    assert out == []
    assert state2.window_start_ms == far
    assert state2.fencing.baseline < 1e-6 < state.fencing.baseline
    # after the silence a small burst above the floor fires again
    state3, out = observe(state2, far + 5, 11, 0, CFG, cluster="c", group_id="g")
    assert out == []
    _, out = advance(state3, far + W, CFG, cluster="c", group_id="g")
    assert statuses(out) == [("FENCING_SPIKE", "firing", far + W)]


def test_txn_abort_storm_is_independent_of_fencing():
    state, alerts = feed([0, 0, 4, 0, 0], txn=True)
    assert statuses(alerts) == [
        ("TXN_ABORT_STORM", "firing", T0 + 3 * W),
        ("TXN_ABORT_STORM", "resolved", T0 + 5 * W),
    ]
    assert not state.fencing.firing and state.fencing.baseline == 0.0
    assert "aborted transactional commits" in alerts[0].summary


def test_counts_within_a_window_add_up_and_late_events_join_the_open_window():
    state = INITIAL
    for offset in (0, 10_000, 59_999):
        state, out = observe(state, T0 + offset, 4, 0, CFG, cluster="c", group_id="g")
        assert out == []
    # an event 1 s older than the open window (cross-topic skew) is still counted
    state, out = observe(state, T0 - 1_000, 0, 0, CFG, cluster="c", group_id="g")
    state, out = observe(state, T0 - 1_000, 1, 0, CFG, cluster="c", group_id="g")
    assert state.fencing_errors == 13
    _, out = advance(state, T0 + W, CFG, cluster="c", group_id="g")
    assert [a.details["count"] for a in out] == ["13"]


def test_alert_ids_are_deterministic_and_differ_per_status_and_episode():
    _, first = feed([0, 40, 0, 0, 0, 40, 0, 0])
    _, again = feed([0, 40, 0, 0, 0, 40, 0, 0])
    assert [a.alert_id for a in first] == [a.alert_id for a in again]
    assert [a.details["status"] for a in first] == ["firing", "resolved", "firing", "resolved"]
    assert len({a.alert_id for a in first}) == 4
    state, _ = observe(INITIAL, T0, 40, 0, CFG, cluster="c", group_id="h")
    _, out = advance(state, T0 + W, CFG, cluster="c", group_id="h")
    assert out[0].alert_id not in {a.alert_id for a in first}


def test_negative_counts_count_as_zero():
    state, _ = observe(INITIAL, T0, -5, -1, CFG, cluster="c", group_id="g")
    assert (state.fencing_errors, state.txn_aborts) == (0, 0)


def test_state_is_frozen():
    state, _ = feed([0, 40, 3])
    with pytest.raises(dataclasses.FrozenInstanceError):
        state.fencing_errors = 1  # type: ignore[misc]
    assert isinstance(state, SpikeState)


def test_config_validation_lists_every_problem():
    problems = SpikeConfig(window_ms=0, multiple=0.5, clear_windows=0).validate()
    assert problems == ["window_ms=0; valid: > 0", "multiple=0.5; valid: >= 1.0", "clear_windows=0; valid: >= 1"]
    assert SpikeConfig().validate() == []


def test_spike_module_imports_only_stdlib_and_state():
    tree = ast.parse(Path(spike.__file__).read_text())
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            imported.add(("." * node.level) + (node.module or ""))
    assert imported <= {"__future__", "dataclasses", "fencewatch.state.alerts"}, imported


counts = st.lists(st.integers(min_value=0, max_value=60), min_size=1, max_size=40)


@settings(max_examples=200, deadline=None)
@given(windows=counts, split=st.integers(min_value=1, max_value=4))
def test_property_lifecycle_alternates_and_splitting_a_window_changes_nothing(windows, split):
    _, whole = feed(windows)
    # the same counts delivered as `split` events spread over each window
    state, parts = INITIAL, []
    for i, n in enumerate(windows):
        shares = [n // split] * split
        shares[0] += n - sum(shares)
        for j, share in enumerate(shares):
            state, out = observe(state, T0 + i * W + j * (W // split), share, 0, CFG, cluster="c", group_id="g")
            parts += out
    state, out = advance(state, T0 + len(windows) * W, CFG, cluster="c", group_id="g")
    parts += out
    assert [a.alert_id for a in parts] == [a.alert_id for a in whole]
    # firing and resolved alternate, starting with firing; time never goes back
    assert [a.details["status"] for a in whole] == ["firing", "resolved"] * (len(whole) // 2) + (
        ["firing"] if len(whole) % 2 else []
    )
    assert [a.ts for a in whole] == sorted(a.ts for a in whole)
    # a window fires only above the floor
    for a in whole:
        if a.details["status"] == "firing":
            assert int(a.details["count"]) > CFG.fencing_floor

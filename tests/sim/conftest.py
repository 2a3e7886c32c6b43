"""Shared simulator runs for tests/sim: each (profile, knobs, seed, span) is simulated once per session."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import pytest

from fencewatch.sim.world import SimConfig, simulate
from fencewatch.sim.profiles import profile

_CACHE: dict[tuple, list[dict]] = {}


def run_profile(name: str, *, seed: int = 7, duration_ms: int = 1_800_000, labels: bool = True,
                assignment_epochs: bool = False, **knobs) -> list[dict]:
    """Events of one simulation (cached; callers must not modify them)."""
    key = (name, seed, duration_ms, labels, assignment_epochs, tuple(sorted(knobs.items())))
    if key not in _CACHE:
        config = SimConfig(
            knobs=dataclasses.replace(profile(name), **knobs),
            seed=seed,
            duration_ms=duration_ms,
            labels=labels,
            assignment_epochs=assignment_epochs,
        )
        _CACHE[key] = simulate(config)
    return _CACHE[key]


@pytest.fixture(scope="session")
def sim_events() -> Callable[..., list[dict]]:
    return run_profile

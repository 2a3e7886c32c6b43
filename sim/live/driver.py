"""The function API: run scenarios (and the load) against a cluster, get expectations and counts.

:func:`run` plays the named scenarios at once, each in its own thread with its own topics
and groups (names ``fw-<run id>-<scenario>-...``), optionally beside the load
(:mod:`.load`), and returns a :class:`RunResult`. A scenario that fails is reported in the
result; the others go on.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable

from .clients import Clients
from .context import Context, Worker
from .expect import Expectation

__all__ = ["LOADS", "SCENARIOS", "RunResult", "run", "scenario_names"]

log = logging.getLogger(__name__)


def _registry() -> dict[str, Callable[[Context], None]]:
    from . import classic_cases, consumer_cases, handbuilt_cases, txn_cases

    return {
        "coordinator_routing": handbuilt_cases.coordinator_routing,  # first: it needs a fresh cluster
        "join_leave": consumer_cases.join_leave,
        "zombie": consumer_cases.zombie,
        "reassign_inflight": consumer_cases.reassign_inflight,
        "static_rejoin": consumer_cases.static_rejoin,
        "txn_fence": txn_cases.txn_fence,
        "txn_stale_metadata": txn_cases.txn_stale_metadata,
        "classic_generation": classic_cases.classic_generation,
        "kip1251": handbuilt_cases.kip1251,
        "kip1319": handbuilt_cases.kip1319,
    }


SCENARIOS = tuple(_registry())
#: The loads :func:`run` can play beside the scenarios.
LOADS = ("steady", "fences")
FIRST = "coordinator_routing"


def scenario_names(spec: str | list[str]) -> list[str]:
    """``all``, one name, or a comma-separated list -> the names; ValueError lists the valid ones."""
    names = spec.split(",") if isinstance(spec, str) else list(spec)
    if names == ["all"]:
        return list(SCENARIOS)
    unknown = [n for n in names if n not in SCENARIOS]
    if unknown:
        raise ValueError(f"unknown scenario {', '.join(unknown)}; valid: all, {', '.join(SCENARIOS)}")
    return names


@dataclass
class RunResult:
    run_id: str
    expectations: list[Expectation]
    counts: Counter
    topics: dict[str, str]  # topic id -> name
    failed: dict[str, str] = field(default_factory=dict)  # scenario -> error
    seconds: dict[str, float] = field(default_factory=dict)
    load_commits: int = 0

    def summary(self) -> str:
        lines = [f"run {self.run_id}: {len(self.expectations)} expectations, "
                 f"{self.counts.get('commits', 0)} commits answered to the clients"
                 + (f" ({self.load_commits} by the load)" if self.load_commits else "")]
        for name, secs in self.seconds.items():
            lines.append(f"  {name:<20} {'FAILED: ' + self.failed[name] if name in self.failed else 'ok'}"
                         f" ({secs:.1f} s)")
        interesting = {k: v for k, v in sorted(self.counts.items()) if k != "commits"}
        if interesting:
            lines.append("  counts: " + ", ".join(f"{k}={v}" for k, v in interesting.items()))
        return "\n".join(lines)


def run(bootstrap: str, scenarios: str | list[str] = "all", *, groups: int = 0, commits: int = 0,
        members: int = 3, rate: float = 400.0, seed: int = 0, short: bool = False,
        client_config: dict[str, Any] | None = None,
        run_id: str | None = None, load: str = "steady",
        after_scenarios: Callable[[Any], None] | None = None) -> RunResult:
    """Play ``scenarios`` (names, or ``all``; ``[]`` for the load alone) against ``bootstrap``;
    with ``groups`` and ``commits`` > 0, the load runs beside them until it made ``commits``
    commits and every scenario ended. ``load``: ``steady`` (:mod:`.load`, ``groups`` x
    ``members``) or ``fences`` (:mod:`.fence_load`, its own plan of groups: members stalled past
    their session, replaced, scaled; ``groups`` > 0 only switches it on). ``after_scenarios(load)``:
    called on a thread of its own once every scenario has ended, while the load goes on, which
    then runs until it returns too (a coordinator move that must not cut the scripted cases
    short, but must meet the load's commits)."""
    if load not in LOADS:
        raise ValueError(f"unknown load {load!r}; valid: {', '.join(LOADS)}")
    names = scenario_names(scenarios) if scenarios else []
    ctx = Context(Clients(bootstrap, client_config), run_id or uuid.uuid4().hex[:8], seed=seed, short=short)
    result = RunResult(ctx.run_id, ctx.expectations, ctx.counts, ctx.topics)
    registry = _registry()
    if FIRST in names:  # alone, before any client makes the cluster create its group coordinator
        _play(ctx, FIRST, registry[FIRST], result)
    threads = []
    for name in names:
        if name == FIRST:
            continue
        t = threading.Thread(target=_play, name=f"scenario-{name}", daemon=True,
                             args=(ctx, name, registry[name], result))
        threads.append(t)
    runner: Any = None
    if groups > 0 and commits > 0 and load == "fences":
        from .fence_load import FenceLoad

        runner = FenceLoad(ctx, commits=commits)
        what = f", the fence-heavy load for {commits} commits"
    elif groups > 0 and commits > 0:
        from .load import Load

        runner = Load(ctx, groups=groups, members=members, commits=commits, rate=rate)
        what = f", load {groups} groups x {members} members for {commits} commits"
    log.info("run %s: scenarios %s%s against %s", ctx.run_id, ", ".join(names) or "none",
             what if runner else "", bootstrap)
    for t in threads:
        t.start()
    hook: list[threading.Thread] = []

    def others_done() -> bool:
        if any(t.is_alive() for t in threads):
            return False
        if after_scenarios is not None and not hook:
            hook.append(threading.Thread(target=_after, name="after-scenarios", daemon=True,
                                         args=(after_scenarios, runner, result)))
            hook[0].start()
        return not any(h.is_alive() for h in hook)

    if runner is not None:
        runner.run_until_done(others_done)
        result.load_commits = runner.committed
    elif after_scenarios is not None:
        for t in threads:
            t.join()
        _after(after_scenarios, None, result)
    for t in threads:
        t.join()
    # A scenario that failed midway leaves its members running: stop them now, or their consumers
    # outlive the run (and the broker) and retry the bootstrap for the rest of the process.
    ctx.stop.set()
    for w in [t for t in threading.enumerate() if isinstance(t, Worker) and t.ctx is ctx]:
        w.join(30)
    log.info("%s", result.summary())
    return result


def _after(fn: Callable[[Any], None], load: Any, result: RunResult) -> None:
    """The caller's step after the scenarios; its failure is reported like a scenario's."""
    try:
        fn(load)
    except Exception as exc:
        log.exception("[after scenarios] failed")
        result.failed["after_scenarios"] = f"{type(exc).__name__}: {exc}"


def _play(ctx: Context, name: str, fn: Callable[[Context], None], result: RunResult) -> None:
    t0 = time.monotonic()
    log.info("[%s] start", name)
    try:
        fn(ctx)
    except Exception as exc:
        log.exception("[%s] failed", name)
        result.failed[name] = f"{type(exc).__name__}: {exc}"
    finally:
        result.seconds[name] = time.monotonic() - t0
        log.info("[%s] done in %.1f s", name, result.seconds[name])

"""The group's judgement caches (per partition, per request shape) follow membership changes.

A member's cached answer for a partition depends on the other members holding it too;
when another member's assignment changes, answers that named (or should now name) it are
dropped, the request-level ones with them.
"""
from fencewatch.state.config import RulesConfig
from fencewatch.state.engine import LocalEngine

from .helpers import assignment, commit, left, tp


def verdicts_of(engine, ev):
    before = len(engine.out.commits)
    engine.feed(ev)
    return engine.out.commits[before:][0].parts


def test_cached_request_sees_a_new_holder():
    eng = LocalEngine(RulesConfig(alert_cooldown_ms=0))
    eng.feed(assignment("A", 1, tp("t", 0, 1), ts=1))
    first = verdicts_of(eng, commit("A", 1, tp("t", 0, 1), ts=2))
    assert [p.owner_member_id for p in first] == [None, None] and not any(p.unsafe for p in first)
    assert verdicts_of(eng, commit("A", 1, tp("t", 0, 1), ts=3)) is first  # served from the cache
    eng.feed(assignment("B", 1, tp("t", 1), ts=4))  # a second owner of t-1 (a model break)
    again = verdicts_of(eng, commit("A", 1, tp("t", 0, 1), ts=5))
    assert [p.owner_member_id for p in again] == [None, "B"] and [p.unsafe for p in again] == [False, True]


def test_cached_request_forgets_a_holder_that_left():
    eng = LocalEngine(RulesConfig(alert_cooldown_ms=0))
    eng.feed(assignment("A", 1, tp("t", 0), ts=1))
    eng.feed(assignment("B", 2, tp("t", 0), ts=2))
    (p,) = verdicts_of(eng, commit("A", 1, tp("t", 0), ts=3))
    assert p.owner_member_id == "B"
    eng.feed(left("B", ts=4))
    (p,) = verdicts_of(eng, commit("A", 1, tp("t", 0), ts=5))
    assert p.owner_member_id is None and not p.unsafe

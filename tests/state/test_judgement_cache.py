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


def test_a_partition_another_member_still_revokes_is_held_by_another_member():
    """Observed out of order (B's assignment before A's revocation completes), t-0 is in B's
    ``assigned`` and in A's ``partitions_pending_revocation``: B's commit of it names A, and the
    request-wide fast check agrees with the partition-by-partition definition."""
    from fencewatch.state import judging

    eng = LocalEngine(RulesConfig(alert_cooldown_ms=0))
    eng.feed(assignment("A", 2, tp("t", 1), pending=tp("t", 0), ts=1))
    eng.feed(assignment("B", 2, tp("t", 0), ts=2))
    (g,) = eng.groups()
    assert judging.other_holders(g, ("t", 0), "B") == ("A", None)
    assert not judging.held_by_member_alone(g, g.members["B"], tp("t", 0))
    (p,) = verdicts_of(eng, commit("B", 2, tp("t", 0), ts=3))
    assert p.owner_member_id == "A"


def test_the_first_member_still_revoking_a_partition_is_named():
    """Two members still revoking t-0 (a model break): the verdict names the first one the
    group recorded, whatever comes after (the owner field must not depend on more than that)."""
    eng = LocalEngine(RulesConfig(alert_cooldown_ms=0))
    eng.feed(assignment("A", 2, tp("t", 1), pending=tp("t", 0), ts=1))
    eng.feed(assignment("C", 2, tp("t", 2), pending=tp("t", 0), ts=2))
    eng.feed(assignment("B", 2, tp("t", 3), ts=3))
    (p,) = verdicts_of(eng, commit("B", 2, tp("t", 0), ts=4))
    assert p.owner_member_id == "A"

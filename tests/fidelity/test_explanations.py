"""bench/fidelity.py's explanations: each names its cause only where the run's own logs show it."""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.fidelity import Membership, explain  # noqa: E402

T = 1_000_000


def verdict(broker: str, strict: str, **kw) -> dict:
    return {"group_id": "g", "member_id": "m", "client_epoch": 3, "ts": T, "broker_error": broker,
            "strict": strict, "kip1251": strict, **kw}


def membership(*epochs: tuple[int, int], classic: bool = False) -> Membership:
    m = Membership()
    for t, e in epochs:
        m.add({"type": "classic_sync", "group_id": "g", "ts": t, "generation": e} if classic else
              {"type": "member_assignment", "group_id": "g", "member_id": "m", "ts": t, "member_epoch": e})
    return m


def test_a_heartbeat_logged_after_the_commit_it_preceded():
    v = verdict("STALE_MEMBER_EPOCH", "NONE")
    assert explain(v, membership((T - 5_000, 3), (T + 400, 5)), "strict") == "member-epoch-race"
    assert explain(v, membership((T - 5_000, 3)), "strict") is None  # no later epoch: unexplained
    assert explain(v, membership((T - 5_000, 3), (T + 60_000, 5)), "strict") is None  # too late to be the cause


def test_the_new_epoch_and_the_commit_in_the_same_millisecond():
    v = verdict("NONE", "STALE_MEMBER_EPOCH")
    assert explain(v, membership((T - 5_000, 3), (T, 5)), "strict") == "same-millisecond"
    assert explain(v, membership((T - 5_000, 3), (T - 1, 5)), "strict") is None  # an earlier one: the model's error
    assert explain(verdict("NONE", "NONE"), membership((T, 5)), "strict") is None  # no disagreement to explain


def test_a_classic_rebalance_in_flight():
    v = verdict("ILLEGAL_GENERATION", "NONE")
    assert explain(v, membership((T - 5_000, 3), (T + 2_000, 4), classic=True), "strict") == "classic-rebalance-race"
    assert explain(v, membership((T - 5_000, 3), classic=True), "strict") is None


def test_a_classic_group_emptied_by_its_last_members_leaving():
    v = verdict("ILLEGAL_GENERATION", "NONE")
    m = membership((T - 9_000, 3), classic=True)
    assert explain(v, m, "strict") is None
    m.add({"type": "group_state", "group_id": "g", "ts": T + 9, "state": "Empty"})
    assert explain(v, m, "strict") == "classic-rebalance-race"


def test_a_member_leaving_in_the_commits_millisecond():
    v = verdict("NONE", "UNKNOWN_MEMBER_ID")
    m = membership((T - 5_000, 3))
    m.add({"type": "member_left", "group_id": "g", "member_id": "m", "ts": T + 1})
    assert explain(v, m, "strict") is None  # a millisecond later: not this cause
    m.add({"type": "member_left", "group_id": "g", "member_id": "m", "ts": T})
    assert explain(v, m, "strict") == "same-millisecond"

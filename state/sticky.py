"""Owned-partition claims in classic rebalances (contract §7, KIP-341 / KIP-792).

Resolved as Kafka's ``AbstractStickyAssignor`` does: of two members claiming one
partition, the higher claimed generation keeps it; at equal generations neither
does (the partition is reassigned).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from fencewatch.state.model import TopicPartition


@dataclass(frozen=True, slots=True)
class ClaimConflict:
    tp: TopicPartition
    winner: str | None  # None: equal generations, neither keeps it
    winner_generation: int
    losers: tuple[tuple[str, int], ...]  # (member id, claimed generation)


def add_claims(claims: Mapping[TopicPartition, tuple[tuple[str, int], ...]], member_id: str,
               generation: int, owned: tuple[TopicPartition, ...]
               ) -> tuple[dict[TopicPartition, tuple[tuple[str, int], ...]], list[ClaimConflict]]:
    """Add one JoinGroup's owned partitions to this round's claims; report new conflicts."""
    new_claims = dict(claims)
    conflicts: list[ClaimConflict] = []
    for tp in owned:
        previous = tuple(c for c in new_claims.get(tp, ()) if c[0] != member_id)
        entry = previous + ((member_id, generation),)
        new_claims[tp] = entry
        if previous:
            conflicts.append(resolve(tp, entry))
    return new_claims, conflicts


def resolve(tp: TopicPartition, claimants: tuple[tuple[str, int], ...]) -> ClaimConflict:
    top = max(g for _, g in claimants)
    at_top = [m for m, g in claimants if g == top]
    if len(at_top) == 1:
        winner = at_top[0]
        losers = tuple((m, g) for m, g in claimants if m != winner)
        return ClaimConflict(tp, winner, top, losers)
    return ClaimConflict(tp, None, top, tuple(claimants))

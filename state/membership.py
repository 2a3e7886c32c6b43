"""A group's membership: who is in it and who holds which partition (contract §2).

Owns: swapping members in and out of a group while keeping its owner indexes
(partition -> members holding it in ``assigned`` / pending revocation), its subscribed
topics and its judgement cache in step (:func:`replace_member`); a static member's
takeover; what a KIP-848 assignment or a classic generation gives twice; the group
state Kafka derives from membership. A member's own transitions are
:mod:`.assignment`'s; the group aggregate calls these on each membership event.
"""
from __future__ import annotations

from typing import Iterable, Mapping, Protocol

from fencewatch.state.assignment import Member
from fencewatch.state.judgement_cache import JudgementCache
from fencewatch.state.model import TopicPartition


class Roster(Protocol):
    """The fields of a group that membership keeps in step (``group.Group``)."""

    group_type: str | None
    state: str
    state_ts: int | None
    members: dict[str, Member]
    owners: dict[TopicPartition, tuple[str, ...]]
    pending_owners: dict[TopicPartition, tuple[str, ...]]
    subscribed: frozenset[str] | None
    judged: JudgementCache
    departed: tuple[str, ...] | None


# --------------------------------------------------------------------------- owner indexes

def _index_remove(index: dict, member: Member, tps) -> None:
    mid = member.member_id
    for tp in tps:
        holders = index.get(tp)
        if holders is None:
            continue
        if len(holders) == 1 and holders[0] == mid:
            del index[tp]  # the usual case: its only holder leaves it
            continue
        rest = tuple(h for h in holders if h != mid)
        if rest:
            index[tp] = rest
        else:
            del index[tp]


def _index_add(index: dict, member_id: str, tps) -> None:
    if not tps:
        return
    if index.keys().isdisjoint(tps):  # the usual case: nobody else holds them
        index.update(dict.fromkeys(tps, (member_id,)))
        return
    for tp in tps:
        holders = index.get(tp, ())
        if member_id not in holders:
            index[tp] = holders + (member_id,)


def replace_member(g: Roster, old: Member | None, new: Member | None, also_remove: Member | None = None) -> None:
    """Swap a member in the group; the owner indexes, subscriptions and cache follow."""
    g.judged.forget((old, new, also_remove))
    for gone in (old, also_remove):
        if gone is None:
            continue
        _index_remove(g.owners, gone, gone.assigned_partitions)
        _index_remove(g.pending_owners, gone, gone.partitions_pending_revocation)
        g.members.pop(gone.member_id, None)
        if g.departed is not None and (new is None or new.member_id != gone.member_id):
            g.departed += (gone.member_id,)
    if new is not None:
        g.members[new.member_id] = new
        _index_add(g.owners, new.member_id, new.assigned_partitions)
        _index_add(g.pending_owners, new.member_id, new.partitions_pending_revocation)
    # The union of subscriptions, without a pass over every member when it cannot shrink.
    if also_remove is None and new is not None and g.subscribed is not None and len(g.members) > 1:
        if old is None or member_topics(old) <= member_topics(new):
            topics = member_topics(new)
            if not g.subscribed.issuperset(topics):
                g.subscribed = g.subscribed | topics
            return
    g.subscribed = subscribed_topics(g)


def watch_departures(g: Roster, first_seen_ts: int | None, ts: int, warmup_ms: int) -> None:
    """contract §3.5: during a group's warm-up the members the model removes are recorded
    (``replace_member``): known gone, their commits are judged, not excused as members it may not
    have seen join. Outside the warm-up nothing is recorded, so state does not grow with churn."""
    if first_seen_ts is None:
        g.departed = () if warmup_ms > 0 else None
    elif ts >= first_seen_ts + warmup_ms:
        g.departed = None


def remove_all(g: Roster) -> None:
    for m in list(g.members.values()):
        replace_member(g, m, None)


# --------------------------------------------------------------------------- subscriptions and state

def member_topics(m: Member) -> frozenset[str] | set[str]:
    return m.subscribed_topics if m.subscribed_topics is not None else m.held_topics()


def subscribed_topics(g: Roster) -> frozenset[str] | None:
    """Union of the members' subscriptions (or held topics when a member has none)."""
    if not g.members:
        return None if g.group_type == "classic" else frozenset()
    topics: set[str] = set()
    for m in g.members.values():
        topics |= member_topics(m)
    return frozenset(topics)


def derived_state(g: Roster) -> str:
    """KIP-848 groups: Empty without members; classic groups keep the reported state."""
    if g.group_type in ("consumer", "streams"):
        if not g.members:
            return "Empty"
        return g.state if g.state not in ("Empty", "Dead") else "Stable"
    return g.state


def set_state(g: Roster, ts: int, state: str) -> None:
    if state != g.state:
        g.state = state
        g.state_ts = ts


# --------------------------------------------------------------------------- membership decisions

def static_takeover(g: Roster, member_id: str, instance_id: str | None) -> Member | None:
    """The member a static member rejoining under a new member id takes over, if any."""
    if instance_id is None or member_id in g.members:
        return None
    for m in g.members.values():
        if m.instance_id == instance_id and m.member_id != member_id:
            return m
    return None


def new_clashes(owners: Mapping[TopicPartition, tuple[str, ...]], new: Member,
                before: Mapping[TopicPartition, int]) -> dict[TopicPartition, list[str]]:
    """Partitions newly assigned to ``new`` that other members still hold in ``assigned``: a
    partition has one owner per epoch, so this is a model break. ``owners`` holds ``new`` too."""
    if max(map(len, map(owners.__getitem__, new.assigned_partitions)), default=1) <= 1:
        return {}
    return {tp: [h for h in owners[tp] if h != new.member_id] for tp in new.assigned_partitions
            if len(owners[tp]) > 1 and tp not in before}


def given_twice(assignments: Iterable[tuple[str, tuple[TopicPartition, ...]]]) -> dict[TopicPartition, list[str]]:
    """Partitions a classic generation gives to more than one member."""
    given: dict[TopicPartition, list[str]] = {}
    for mid, tps in assignments:
        for tp in tps:
            given.setdefault(tp, []).append(mid)
    return {tp: mids for tp, mids in given.items() if len(mids) > 1}

"""A tiny, legal KIP-848 coordinator for property tests (not the product's simulator).

It follows the protocol's rules closely enough for KAFKA-19779's correctness
argument to hold: a partition is given to a member only once no other member
holds it (assigned or pending revocation), revocation keeps the member's epoch
until it completes, and the member then moves to the target epoch.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, field

from fencewatch.state.events import MemberAssignment, MemberLeft
from fencewatch.state.model import MemberState, Protocol


@dataclass
class SimMember:
    member_id: str
    epoch: int
    assigned: set = field(default_factory=set)
    pending: set = field(default_factory=set)
    unreleased: bool = False
    history: list = field(default_factory=list)  # (epoch, frozenset held) after every change


class Coordinator:
    def __init__(self, partitions, group="g"):
        self.partitions = list(partitions)
        self.group = group
        self.group_epoch = 0
        self.members: dict[str, SimMember] = {}
        self.target: dict[str, set] = {}
        self.ts = 1000
        self.seq = itertools.count()
        self.ids = itertools.count()

    # -- helpers
    def _tick(self):
        self.ts += 7
        return self.ts

    def _retarget(self):
        self.group_epoch += 1
        ids = sorted(self.members)
        self.target = {m: set() for m in ids}
        for i, p in enumerate(self.partitions):
            if ids:
                self.target[ids[i % len(ids)]].add(p)

    def _held_by_others(self, member_id):
        held = set()
        for m in self.members.values():
            if m.member_id != member_id:
                held |= m.assigned | m.pending
        return held

    def _emit(self, m: SimMember, state: MemberState):
        m.history.append((m.epoch, frozenset(m.assigned | m.pending)))
        n = next(self.seq)
        return MemberAssignment(ts=self._tick(), cluster="default", group_id=self.group, event_id=f"e{n}", seq=n,
                                member_id=m.member_id, protocol=Protocol.CONSUMER, member_epoch=m.epoch,
                                assigned=tuple(sorted(m.assigned)), pending_revocation=tuple(sorted(m.pending)),
                                state=state, group_epoch=self.group_epoch)

    # -- protocol steps, each returns the events the coordinator writes
    def join(self):
        mid = f"m{next(self.ids)}"
        self.members[mid] = SimMember(mid, 0)
        self._retarget()
        return self.reconcile(mid)

    def leave(self, mid):
        del self.members[mid]
        n = next(self.seq)
        ev = MemberLeft(self._tick(), "default", self.group, f"e{n}", n, mid, "leave")
        self._retarget()
        return [ev]

    def reconcile(self, mid):
        m = self.members[mid]
        target = self.target.get(mid, set())
        if m.pending:
            # The member acknowledged the revocation: it moves to the target epoch.
            m.pending = set()
            m.epoch = self.group_epoch
            free = target - self._held_by_others(mid)
            m.assigned = (m.assigned & target) | free
            m.unreleased = bool(target - m.assigned)
            return [self._emit(m, MemberState.UNRELEASED_PARTITIONS if m.unreleased else MemberState.STABLE)]
        to_revoke = m.assigned - target
        if to_revoke:
            m.assigned -= to_revoke
            m.pending = to_revoke
            return [self._emit(m, MemberState.UNREVOKED_PARTITIONS)]
        free = (target - m.assigned) - self._held_by_others(mid)
        if m.epoch == self.group_epoch and not free:
            return []
        m.epoch = self.group_epoch
        m.assigned |= free
        m.unreleased = bool(target - m.assigned)
        return [self._emit(m, MemberState.UNRELEASED_PARTITIONS if m.unreleased else MemberState.STABLE)]

"""The simulated classic group coordinator with a sticky assignor (KIP-341 user data).

What lives here: :class:`ClassicGroup`, the broker-side state of one classic
(JoinGroup/SyncGroup) consumer group plus the leader's sticky assignor. Each
member reports in its subscription user data the partitions it owned and the
generation it owned them in (``StickyAssignor`` user data v1, KIP-341; v0
clients send no generation, written here as -1). The leader resolves
conflicting claims as Kafka's sticky assignors do: the higher claimed
generation keeps the partition; at equal generations nobody keeps it.

The hazard the simulator produces with it is the one KIP-341 describes: a
member pauses past its session timeout, the group rebalances without it, and
it rejoins claiming its old partitions at its old generation.

Offset commits are answered as Kafka's ``ClassicGroup.validateOffsetCommit``.
Pure: no I/O, no clock, no randomness.
"""

from __future__ import annotations

from collections.abc import Sequence

from fencewatch.sim.coordinator import (
    ACCEPTED,
    ILLEGAL_GENERATION,
    NONE,
    REBALANCE_IN_PROGRESS,
    UNKNOWN_MEMBER,
    UNKNOWN_MEMBER_ID,
    CommittedOffsets,
    stale_commit_truth,
)

__all__ = ["ClassicGroup", "ClassicMember", "RebalanceResult"]


class ClassicMember:
    """A classic member: what it claims in its user data and what the last SyncGroup gave it."""

    __slots__ = ("member_id", "claimed", "claim_generation", "assignment", "held_since")

    def __init__(self, member_id: str, claimed: tuple[int, ...], claim_generation: int) -> None:
        self.member_id = member_id
        self.claimed = claimed
        self.claim_generation = claim_generation
        self.assignment: tuple[int, ...] = ()
        # Partition -> first generation of the member's continuous ownership.
        self.held_since: dict[int, int] = {}


class RebalanceResult:
    """What one rebalance decided, for emission and labels."""

    __slots__ = ("generation", "joins", "assignments", "stale_claims", "duplicate_claims")

    def __init__(self) -> None:
        self.generation = 0
        # (member_id, claimed generation, claimed partitions) in JoinGroup order.
        self.joins: list[tuple[str, int, tuple[int, ...]]] = []
        self.assignments: dict[str, tuple[int, ...]] = {}
        # member_id -> partitions it claimed at an older generation than another member.
        self.stale_claims: dict[str, list[int]] = {}
        # member_id -> partitions claimed by several members at the same (highest) generation.
        self.duplicate_claims: dict[str, list[int]] = {}


class ClassicGroup:
    """One classic consumer group (``ClassicGroup`` in Kafka's group coordinator)."""

    __slots__ = (
        "group_id",
        "partition_count",
        "generation",
        "state",
        "members",
        "user_data_v0",
        "offsets",
        "version",
        "protocol_type",
    )

    def __init__(self, group_id: str, partition_count: int, *, user_data_v0: bool = False) -> None:
        self.group_id = group_id
        self.partition_count = partition_count
        self.generation = 0
        self.state = "Empty"
        self.members: dict[str, ClassicMember] = {}
        self.user_data_v0 = user_data_v0
        self.offsets = CommittedOffsets()
        self.version = 0  # bumped by every rebalance (see ConsumerGroup.version)
        # None for a group only ever committed to by admin/simple clients (no JoinGroup yet).
        self.protocol_type: str | None = None

    def owner_of(self, partition: int) -> str | None:
        for m in self.members.values():
            if partition in m.held_since:
                return m.member_id
        return None

    def rebalance(self, joining: Sequence[tuple[str, tuple[int, ...], int]] = (), leaving: Sequence[str] = ()) -> RebalanceResult:
        """Run one JoinGroup/SyncGroup round: members leave, join, claim; the leader assigns."""
        self.version += 1
        for member_id in leaving:
            self.members.pop(member_id, None)
        for member_id, claimed, claim_generation in joining:
            self.members[member_id] = ClassicMember(member_id, claimed, claim_generation)
            self.protocol_type = "consumer"
        result = RebalanceResult()
        if not self.members:
            self.generation += 1
            self.state = "Empty"
            result.generation = self.generation
            return result
        # KIP-341 resolution: the highest claimed generation keeps a partition; ties keep nobody.
        best: dict[int, tuple[int, list[str]]] = {}
        for m in self.members.values():
            result.joins.append((m.member_id, m.claim_generation, m.claimed))
            for p in m.claimed:
                if p >= self.partition_count:
                    continue
                current = best.get(p)
                if current is None or m.claim_generation > current[0]:
                    best[p] = (m.claim_generation, [m.member_id])
                elif m.claim_generation == current[0]:
                    current[1].append(m.member_id)
        kept: dict[str, list[int]] = {m: [] for m in self.members}
        for m in self.members.values():
            for p in m.claimed:
                claim = best.get(p)
                if claim is None:
                    continue
                generation, winners = claim
                if len(winners) > 1:
                    result.duplicate_claims.setdefault(m.member_id, []).append(p)
                elif winners[0] != m.member_id:
                    result.stale_claims.setdefault(m.member_id, []).append(p)
                else:
                    kept[m.member_id].append(p)
        # Sticky distribution: keep resolved claims up to the balanced quota, hand out the rest.
        ids = list(self.members)
        base, extra = divmod(self.partition_count, len(ids))
        order = sorted(range(len(ids)), key=lambda i: (-len(kept[ids[i]]), i))
        quota = {ids[i]: base + (1 if rank < extra else 0) for rank, i in enumerate(order)}
        taken: set[int] = set()
        assignment: dict[str, list[int]] = {}
        for member_id in ids:
            mine = sorted(kept[member_id])[: quota[member_id]]
            assignment[member_id] = mine
            taken.update(mine)
        free = iter(p for p in range(self.partition_count) if p not in taken)
        for member_id in ids:
            for _ in range(quota[member_id] - len(assignment[member_id])):
                assignment[member_id].append(next(free))
        self.generation += 1
        self.state = "Stable"
        result.generation = self.generation
        for member_id in ids:
            m = self.members[member_id]
            parts = tuple(sorted(assignment[member_id]))
            m.held_since = {p: m.held_since.get(p, self.generation) for p in parts}
            m.assignment = parts
            m.claimed = parts
            m.claim_generation = -1 if self.user_data_v0 else self.generation
            result.assignments[member_id] = parts
        return result

    def validate_offset_commit(self, member_id: str, generation: int) -> int:
        """The error code of Kafka's ``ClassicGroup.validateOffsetCommit``."""
        if generation < 0 and member_id == "" and not self.members:
            return NONE
        if member_id not in self.members:
            return UNKNOWN_MEMBER_ID
        if generation != self.generation:
            return ILLEGAL_GENERATION
        if self.state == "CompletingRebalance":
            return REBALANCE_IN_PROGRESS
        return NONE

    def commit_truth(
        self, member_id: str, generation: int, partitions: Sequence[int]
    ) -> tuple[str, bool, list[str | None], list[str]]:
        """Ground truth of a classic commit, as :meth:`ConsumerGroup.commit_truth`.

        The assignment epoch of a classic member's partition is taken as the
        first generation of its continuous ownership (what a monitor can
        derive from consecutive ``classic_sync`` events).
        """
        owners = [self.owner_of(p) for p in partitions]
        current_owner = all(o == member_id for o in owners)
        n = len(partitions)
        if generation < 0 and member_id == "":
            return "admin", current_owner, owners, [ACCEPTED if not self.members else UNKNOWN_MEMBER] * n
        member = self.members.get(member_id)
        if member is None:
            return "fenced_zombie", current_owner, owners, [UNKNOWN_MEMBER] * n
        if generation == self.generation:
            return "owner", current_owner, owners, [ACCEPTED] * n
        # Never avoidable: every policy keeps the classic protocol's exact generation check
        # (KAFKA-19779 and KIP-1251 relax the consumer protocol only; contract §3.2).
        scenario, expect = stale_commit_truth(partitions, owners, member_id, lambda p: False)
        return scenario, current_owner, owners, expect

    @property
    def committed(self) -> dict[int, tuple[int, int, int]]:
        return self.offsets.snapshot()

    def expire_offsets(self, now: int, retention_ms: int, empty_since_ms: int) -> list[int]:
        """Classic expiry (KIP-211): an Empty group's offsets expire ``retention`` after it became
        empty; a simple group's (no protocol: admin commits only) ``retention`` after each commit."""
        if self.members:
            return []
        if self.protocol_type is None:
            expired = [p for p, (_, _, ts) in self.committed.items() if now - ts >= retention_ms]
        elif empty_since_ms < 0 or now - empty_since_ms < retention_ms:
            return []
        else:
            expired = list(self.committed)
        self.offsets.drop(expired)
        return expired

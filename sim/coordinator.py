"""The simulated KIP-848 group coordinator: one consumer group's broker-side state.

What lives here: :class:`ConsumerGroup`, which does for one group what Kafka's
``GroupMetadataManager.consumerGroupHeartbeat`` and
``ConsumerGroup.validateOffsetCommit`` do -- group epoch bumps on join, leave
and fence, a target assignment per group epoch, member epochs reconciled with
the rules of Kafka's ``CurrentAssignmentBuilder`` (STABLE,
UNREVOKED_PARTITIONS, UNRELEASED_PARTITIONS), per-partition assignment epochs
as Kafka 4.3 (KIP-1251) keeps them, static members (KIP-345, epoch -2 on a
static leave), and the offset commit answer of Kafka up to 4.2 (strict:
client epoch must equal the member epoch).

It also knows the ground truth a monitor can only infer: which member holds a
partition right now. :meth:`ConsumerGroup.commit_truth` turns that into the
class contract §3 should give each committed partition.

Partitions are ints (indexes into the group's :class:`~fencewatch.sim.topology.GroupTopology`).
Members are mutable slotted objects rather than frozen dataclasses because
the simulator updates them on every heartbeat of a long run; nothing outside
the simulator sees them (events are built from them at emission time).

No I/O, no clock, no randomness: the caller passes ``now`` and decides what
clients do.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence

from fencewatch.sim.assignor import sticky_assign

__all__ = [
    "FENCED_MEMBER_EPOCH",
    "GROUP_ID_NOT_FOUND",
    "HB_BUMPED",
    "HB_CHANGED",
    "HB_JOINED",
    "HB_LEFT",
    "HB_UNREVOKED",
    "ILLEGAL_GENERATION",
    "LEAVE_GROUP_MEMBER_EPOCH",
    "LEAVE_GROUP_STATIC_MEMBER_EPOCH",
    "NONE",
    "REBALANCE_IN_PROGRESS",
    "STABLE",
    "STALE_MEMBER_EPOCH",
    "UNKNOWN_MEMBER_ID",
    "UNRELEASED_INSTANCE_ID",
    "UNRELEASED_PARTITIONS",
    "UNREVOKED_PARTITIONS",
    "CommittedOffsets",
    "ConsumerGroup",
    "ConsumerGroupMember",
]

# Kafka error codes (org.apache.kafka.common.protocol.Errors).
NONE = 0
ILLEGAL_GENERATION = 22
UNKNOWN_MEMBER_ID = 25
REBALANCE_IN_PROGRESS = 27
GROUP_ID_NOT_FOUND = 69
FENCED_MEMBER_EPOCH = 110
UNRELEASED_INSTANCE_ID = 111
STALE_MEMBER_EPOCH = 113

# ConsumerGroupHeartbeat special epochs.
LEAVE_GROUP_MEMBER_EPOCH = -1
LEAVE_GROUP_STATIC_MEMBER_EPOCH = -2

# MemberState names as Kafka writes them.
STABLE = "STABLE"
UNREVOKED_PARTITIONS = "UNREVOKED_PARTITIONS"
UNRELEASED_PARTITIONS = "UNRELEASED_PARTITIONS"

# Flags returned by ConsumerGroup.heartbeat (a bit set, to keep the hot path allocation-free).
HB_CHANGED = 1  # the member's epoch, state or partitions changed: a member_assignment record
HB_JOINED = 2  # a new member (or a static member replacing its departed instance)
HB_BUMPED = 4  # the group epoch was bumped
HB_UNREVOKED = 8  # the member entered UNREVOKED_PARTITIONS in this heartbeat
HB_LEFT = 16  # the member left (epoch -1 / -2) or was fenced

# contract §3 classes the simulator predicts.
ACCEPTED = "accepted"
AVOIDABLE = "avoidable"
ZOMBIE = "zombie"
STALE = "stale"
UNKNOWN_MEMBER = "unknown_member"
FUTURE_EPOCH = "future_epoch"


class CommittedOffsets:
    """A group's committed offsets: partition -> ``(offset, leader_epoch, commit_ts)``.

    Written on every accepted commit but read only by rare queries (expiry,
    truncation labels), so a commit just replaces its committer's pending
    entry and :meth:`snapshot` merges pending entries in, newest commit
    winning per partition.
    """

    __slots__ = ("_flushed", "_pending")

    def __init__(self) -> None:
        self._flushed: dict[int, tuple[int, int, int]] = {}
        self._pending: dict[str, tuple[Sequence[int], Sequence[int], Sequence[int], int]] = {}

    def record(self, committer: str, partitions: Sequence[int], offsets: Sequence[int], leader_epochs: Sequence[int], now: int) -> None:
        previous = self._pending.get(committer)
        if previous is not None and previous[0] is not partitions:
            self._merge(previous)
        self._pending[committer] = (partitions, offsets, leader_epochs, now)

    def _merge(self, entry) -> None:
        partitions, offsets, leader_epochs, now = entry
        flushed = self._flushed
        for p, o, e in zip(partitions, offsets, leader_epochs):
            current = flushed.get(p)
            if current is None or current[2] <= now:
                flushed[p] = (o, e, now)

    def snapshot(self) -> dict[int, tuple[int, int, int]]:
        """The committed offsets now (the returned dict is live; do not modify it)."""
        if self._pending:
            for entry in sorted(self._pending.values(), key=lambda x: x[3]):
                self._merge(entry)
            self._pending.clear()
        return self._flushed

    def drop(self, partitions: Iterable[int]) -> None:
        self.snapshot()
        for p in partitions:
            self._flushed.pop(p, None)


class ConsumerGroupMember:
    """Broker-side state of one member (``ConsumerGroupMember`` in Kafka).

    ``assigned`` and ``pending_revocation`` map partition -> assignment epoch
    (the epoch at which the member got the partition; Kafka 4.3 stores it as
    ``AssignmentEpochs`` in ``ConsumerGroupCurrentMemberAssignmentValue``).
    """

    __slots__ = (
        "member_id",
        "instance_id",
        "member_epoch",
        "previous_member_epoch",
        "state",
        "assigned",
        "pending_revocation",
        "last_heartbeat_ms",
        "unrevoked_since_ms",
    )

    def __init__(self, member_id: str, instance_id: str | None, now: int) -> None:
        self.member_id = member_id
        self.instance_id = instance_id
        self.member_epoch = 0
        self.previous_member_epoch = -1
        self.state = STABLE
        self.assigned: dict[int, int] = {}
        self.pending_revocation: dict[int, int] = {}
        self.last_heartbeat_ms = now
        self.unrevoked_since_ms = -1

    def holds(self, partition: int) -> bool:
        return partition in self.assigned or partition in self.pending_revocation

    def assignment_epoch(self, partition: int) -> int | None:
        epoch = self.assigned.get(partition)
        if epoch is None:
            epoch = self.pending_revocation.get(partition)
        return epoch

    def __repr__(self) -> str:
        return (
            f"ConsumerGroupMember({self.member_id!r}, epoch={self.member_epoch}, state={self.state}, "
            f"assigned={self.assigned}, pending={self.pending_revocation})"
        )


class ConsumerGroup:
    """One KIP-848 consumer group on the simulated coordinator."""

    __slots__ = (
        "group_id",
        "partition_count",
        "group_epoch",
        "target_assignment_epoch",
        "target",
        "members",
        "owner",
        "static_members",
        "state",
        "offsets",
        "empty_since_ms",
        "version",
        "relaxed",
    )

    def __init__(self, group_id: str, partition_count: int) -> None:
        self.group_id = group_id
        self.partition_count = partition_count
        self.group_epoch = 0
        self.target_assignment_epoch = 0
        self.target: dict[str, set[int]] = {}
        # Insertion order is join order: the assignor's tie-break.
        self.members: dict[str, ConsumerGroupMember] = {}
        # Partition -> the member holding it (assigned or pending revocation):
        # Kafka's "current partition epoch" map, used to find unreleased partitions.
        self.owner: dict[int, str] = {}
        self.static_members: dict[str, str] = {}
        self.state = "Empty"
        self.offsets = CommittedOffsets()
        self.empty_since_ms = -1
        # Bumped on every change of membership or assignment: lets callers cache derived truths.
        self.version = 0
        # A streams group on Kafka 4.2+: commits judged with KIP-1251's check (validate_offset_commit).
        self.relaxed = False

    # ------------------------------------------------------------------ heartbeat

    def heartbeat(
        self,
        member_id: str,
        member_epoch: int,
        owned: Collection[int] | None,
        now: int,
        instance_id: str | None = None,
    ) -> tuple[int, int, int]:
        """Handle one ConsumerGroupHeartbeat; return ``(error_code, response_epoch, flags)``.

        ``owned`` is what the client reports in ``TopicPartitions`` (what it has
        not revoked yet); ``None`` means unknown, treated as "still owns
        everything" like Kafka's ``ownsRevokedPartitions``.
        """
        member = self.members.get(member_id)
        if member_epoch == LEAVE_GROUP_MEMBER_EPOCH or member_epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            if member is None:
                return UNKNOWN_MEMBER_ID, member_epoch, 0
            return NONE, member_epoch, self._leave(member, member_epoch) | HB_LEFT
        if member_epoch == 0:
            return self._join(member_id, member, owned, now, instance_id)
        if member is None or member.member_epoch < 0:
            # Removed (left, fenced, timed out) or a departed static instance: the client must rejoin.
            return UNKNOWN_MEMBER_ID, member_epoch, 0
        if member_epoch != member.member_epoch:
            # Kafka's throwIfMemberEpochIsInvalid: the previous epoch is tolerated when the
            # response was lost and the client owns nothing outside its current assignment.
            tolerated = (
                member_epoch == member.previous_member_epoch
                and owned is not None
                and all(p in member.assigned for p in owned)
            )
            if not tolerated:
                flags = self.remove_member(member)
                return FENCED_MEMBER_EPOCH, member_epoch, flags | HB_LEFT
        member.last_heartbeat_ms = now
        flags = self._reconcile(member, owned, now)
        return NONE, member.member_epoch, flags

    def _join(
        self,
        member_id: str,
        existing: ConsumerGroupMember | None,
        owned: Collection[int] | None,
        now: int,
        instance_id: str | None,
    ) -> tuple[int, int, int]:
        flags = HB_JOINED | HB_CHANGED
        self.version += 1
        if existing is not None:
            # A known member (re)joining with epoch 0 starts over: fence the old incarnation first.
            flags |= self.remove_member(existing) | HB_LEFT
        if instance_id is not None:
            previous_id = self.static_members.get(instance_id)
            if previous_id is not None:
                previous = self.members[previous_id]
                if previous.member_epoch != LEAVE_GROUP_STATIC_MEMBER_EPOCH:
                    # Another live member uses this instance id (Kafka: UNRELEASED_INSTANCE_ID).
                    return UNRELEASED_INSTANCE_ID, 0, 0
                return NONE, self._replace_static(previous, member_id, owned, now), flags
        member = ConsumerGroupMember(member_id, instance_id, now)
        self.members[member_id] = member
        if instance_id is not None:
            self.static_members[instance_id] = member_id
        self.empty_since_ms = -1
        self._bump_and_assign()
        flags |= HB_BUMPED | self._reconcile(member, owned, now)
        return NONE, member.member_epoch, flags

    def _replace_static(
        self, previous: ConsumerGroupMember, member_id: str, owned: Collection[int] | None, now: int
    ) -> int:
        """A static member rejoins under a new member id and takes over its departed instance.

        No group epoch bump (that is the point of static membership); the
        partitions keep the assignment epochs the static leave reset to 0.
        """
        member = ConsumerGroupMember(member_id, previous.instance_id, now)
        member.assigned = previous.assigned
        member.pending_revocation = previous.pending_revocation
        del self.members[previous.member_id]
        self.members[member_id] = member
        self.static_members[previous.instance_id] = member_id  # type: ignore[index]
        self.target[member_id] = self.target.pop(previous.member_id, set())
        for p in member.assigned:
            self.owner[p] = member_id
        for p in member.pending_revocation:
            self.owner[p] = member_id
        self._reconcile(member, owned, now)
        return member.member_epoch

    def _leave(self, member: ConsumerGroupMember, member_epoch: int) -> int:
        self.version += 1
        if member_epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH and member.instance_id is not None:
            # Static leave: the member stays with its partitions (epochs reset to 0) so the
            # same instance can take them back without a rebalance.
            member.previous_member_epoch = member.member_epoch
            member.member_epoch = LEAVE_GROUP_STATIC_MEMBER_EPOCH
            member.assigned = dict.fromkeys(member.assigned, 0)
            member.pending_revocation = dict.fromkeys(member.pending_revocation, 0)
            return HB_CHANGED
        return self.remove_member(member)

    def remove_member(self, member: ConsumerGroupMember) -> int:
        """Remove a member (leave, fence, session or rebalance timeout) and rebalance."""
        self.version += 1
        del self.members[member.member_id]
        if member.instance_id is not None and self.static_members.get(member.instance_id) == member.member_id:
            del self.static_members[member.instance_id]
        for p in member.assigned:
            if self.owner.get(p) == member.member_id:
                del self.owner[p]
        for p in member.pending_revocation:
            if self.owner.get(p) == member.member_id:
                del self.owner[p]
        self.target.pop(member.member_id, None)
        self._bump_and_assign()
        return HB_BUMPED | HB_CHANGED

    def _bump_and_assign(self) -> None:
        self.group_epoch += 1
        self.target = sticky_assign(list(self.members), range(self.partition_count), self.target)
        self.target_assignment_epoch = self.group_epoch

    # ------------------------------------------------------------ reconciliation

    def _reconcile(self, member: ConsumerGroupMember, owned: Collection[int] | None, now: int) -> int:
        """Kafka's ``CurrentAssignmentBuilder.build`` for one heartbeat."""
        state = member.state
        if state == STABLE:
            if member.member_epoch == self.target_assignment_epoch:
                return 0
            return self._next_assignment(member, member.member_epoch, owned, now)
        if state == UNREVOKED_PARTITIONS:
            # Wait until the client stops reporting the partitions pending revocation.
            if owned is None or any(p in member.pending_revocation for p in owned):
                return 0
            return self._next_assignment(
                member, min(member.member_epoch + 1, self.target_assignment_epoch), owned, now
            )
        # UNRELEASED_PARTITIONS: take the partitions that have been released meanwhile.
        return self._next_assignment(member, member.member_epoch, owned, now)

    def _next_assignment(
        self, member: ConsumerGroupMember, member_epoch: int, owned: Collection[int] | None, now: int
    ) -> int:
        """Kafka's ``computeNextAssignment``, keeping assignment epochs as Kafka 4.3 does."""
        target = self.target.get(member.member_id, ())
        current = member.assigned
        # New Assigned Partitions = Previous Assigned Partitions ∩ Target (epochs kept)
        kept = {p: e for p, e in current.items() if p in target}
        # Partitions Pending Revocation = Previous Assigned Partitions - New Assigned Partitions
        revoke = {p: e for p, e in current.items() if p not in kept}
        # Partitions Pending Assignment = Target - New Assigned - Unreleased Partitions
        owner = self.owner
        me = member.member_id
        to_assign = []
        unreleased = False
        for p in target:
            if p in kept:
                continue
            holder = owner.get(p)
            if holder is not None and holder != me:
                unreleased = True
            else:
                to_assign.append(p)

        before_epoch, before_state, before_pending = member.member_epoch, member.state, member.pending_revocation
        if revoke and (owned is None or any(p in revoke for p in owned)):
            # Revocations first: stay at the current epoch until the client acknowledges.
            new_state = UNREVOKED_PARTITIONS
            new_epoch = member_epoch
            new_assigned = kept
            new_pending = revoke
        else:
            new_epoch = self.target_assignment_epoch
            new_assigned = kept
            for p in to_assign:
                new_assigned[p] = new_epoch
            new_pending = {}
            new_state = UNRELEASED_PARTITIONS if unreleased else STABLE

        self._set_partitions(member, new_assigned, new_pending)
        if new_epoch != member.member_epoch:
            member.previous_member_epoch = member.member_epoch
            member.member_epoch = new_epoch
        flags = 0
        if new_state == UNREVOKED_PARTITIONS and member.state != UNREVOKED_PARTITIONS:
            member.unrevoked_since_ms = now
            flags |= HB_UNREVOKED
        member.state = new_state
        if (
            member.member_epoch != before_epoch
            or new_state != before_state
            or new_assigned.keys() != current.keys()
            or new_pending.keys() != before_pending.keys()
        ):
            flags |= HB_CHANGED
            self.version += 1
        return flags

    def _set_partitions(
        self, member: ConsumerGroupMember, assigned: dict[int, int], pending: dict[int, int]
    ) -> None:
        owner = self.owner
        me = member.member_id
        for p in member.assigned:
            if p not in assigned and p not in pending and owner.get(p) == me:
                del owner[p]
        for p in member.pending_revocation:
            if p not in assigned and p not in pending and owner.get(p) == me:
                del owner[p]
        for p in assigned:
            owner[p] = me
        for p in pending:
            owner[p] = me
        member.assigned = assigned
        member.pending_revocation = pending

    # ------------------------------------------------------------------ queries

    def refresh_state(self, now: int) -> str | None:
        """Recompute the group state (Empty / Reconciling / Stable); return it if it changed."""
        if not self.members:
            state = "Empty"
        else:
            target_epoch = self.target_assignment_epoch
            state = "Stable"
            for m in self.members.values():
                if m.member_epoch >= 0 and (m.state != STABLE or m.member_epoch != target_epoch):
                    state = "Reconciling"
                    break
        if state == self.state:
            return None
        self.state = state
        if state == "Empty" and self.empty_since_ms < 0:
            self.empty_since_ms = now
        return state

    def live_member_count(self) -> int:
        return sum(1 for m in self.members.values() if m.member_epoch >= 0)

    # ------------------------------------------------------------------ commits

    def validate_offset_commit(self, member_id: str, member_epoch: int, transactional: bool,
                               partitions: Sequence[int] = ()) -> int:
        """The error code Kafka up to 4.2 answers (``ConsumerGroup.validateOffsetCommit``, strict).

        A streams group with ``relaxed`` (Kafka 4.2+, ``StreamsGroup.validateOffsetCommit`` with
        ``createAssignmentEpochValidator``) also accepts an older epoch when the member holds every
        committed task (assigned or pending revocation) since an epoch <= the one it sent (KIP-1251).
        """
        if member_epoch < 0 and not self.members:
            # Into an empty group, whatever the member id: an admin client, a consumer without
            # group management, or a member's last commit after it left.
            return NONE
        if member_epoch < 0 and member_id == "":
            return UNKNOWN_MEMBER_ID
        member = self.members.get(member_id)
        if member is None:
            return UNKNOWN_MEMBER_ID
        if member_epoch != member.member_epoch:
            if self.relaxed and 0 <= member_epoch < member.member_epoch and partitions:
                held = member.assignment_epoch
                if all((e := held(p)) is not None and e <= member_epoch for p in partitions):
                    return NONE
            return ILLEGAL_GENERATION if transactional else STALE_MEMBER_EPOCH
        return NONE

    def commit_truth(
        self, member_id: str, member_epoch: int, partitions: Sequence[int]
    ) -> tuple[str, bool, list[str | None], list[str]]:
        """Ground truth of a commit: ``(scenario, current_owner, owners, expected classes)``.

        ``owners`` lists who really holds each partition now (assigned or
        pending revocation); the expected class is contract §3 evaluated on the
        coordinator's true state, which a monitor has to reconstruct from events.
        """
        owner = self.owner
        owners = [owner.get(p) for p in partitions]
        current_owner = all(o == member_id for o in owners)
        n = len(partitions)
        if member_epoch < 0 and (member_id == "" or not self.members):
            cls = ACCEPTED if not self.members else UNKNOWN_MEMBER
            return "admin", current_owner, owners, [cls] * n
        member = self.members.get(member_id)
        if member is None:
            return "fenced_zombie", current_owner, owners, [UNKNOWN_MEMBER] * n
        # A departed static member (epoch -2) is still a member: any epoch it sends is "future".
        broker_epoch = member.member_epoch
        if member_epoch == broker_epoch:
            return "owner", current_owner, owners, [ACCEPTED] * n
        if member_epoch > broker_epoch:
            return "future_epoch", current_owner, owners, [FUTURE_EPOCH] * n
        def held_at_sent_epoch(p: int) -> bool:
            epoch = member.assignment_epoch(p)
            return epoch is not None and epoch <= member_epoch

        scenario, expect = stale_commit_truth(partitions, owners, member_id, held_at_sent_epoch)
        return scenario, current_owner, owners, expect

    @property
    def committed(self) -> dict[int, tuple[int, int, int]]:
        """Partition -> (offset, leader_epoch, commit_ts) of the last accepted commit."""
        return self.offsets.snapshot()

    def expire_offsets(self, now: int, retention_ms: int) -> list[int]:
        """KIP-848 expiry: an empty group subscribes to nothing; offsets expire ``retention`` after commit."""
        if self.members:
            return []
        expired = [p for p, (_, _, ts) in self.committed.items() if now - ts >= retention_ms]
        self.offsets.drop(expired)
        return expired

    def check_invariants(self) -> None:
        """Raise AssertionError if the coordinator broke one of KIP-848's invariants."""
        seen: dict[int, str] = {}
        for m in self.members.values():
            for p, epoch in list(m.assigned.items()) + list(m.pending_revocation.items()):
                assert p not in seen, f"{self.group_id}: partition {p} held by {seen[p]} and {m.member_id}"
                seen[p] = m.member_id
                assert m.member_epoch < 0 or epoch <= m.member_epoch, (
                    f"{self.group_id}: {m.member_id} assignment epoch {epoch} > member epoch {m.member_epoch}"
                )
            assert m.member_epoch <= self.target_assignment_epoch <= self.group_epoch
        assert seen == self.owner, f"{self.group_id}: owner index {self.owner} != members {seen}"


def stale_commit_truth(partitions: Sequence[int], owners: Sequence[str | None], member_id: str,
                       held_at_sent_epoch) -> tuple[str, list[str]]:
    """Ground truth of a commit sent at a stale epoch, shared by KIP-848 and classic groups:
    per partition avoidable (still held since that epoch), zombie (another member holds it) or
    stale; and the request's scenario."""
    held_by_other = [holder is not None and holder != member_id for holder in owners]
    saved = [held_at_sent_epoch(p) for p in partitions]
    # Kafka fails a request on its first bad partition: a partition KIP-1251 would accept is
    # avoidable only when it accepts all of them (contract §3.3, "the class follows the request").
    expect = [AVOIDABLE if all(saved) else ZOMBIE if other else STALE for other in held_by_other]
    if ZOMBIE in expect:
        scenario = "zombie"
    elif all(c == AVOIDABLE for c in expect):
        scenario = "heartbeat_race"
    else:
        scenario = "stale"
    return scenario, expect

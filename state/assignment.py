"""The assignment model (contract §2): a member's partitions and their assignment epochs.

Mirrors Kafka's ``CurrentAssignmentBuilder`` as observed from the coordinator's
records: we do not recompute the target assignment, we follow the member's
current assignment record by record and derive what Kafka 4.3 stores as
``AssignmentEpochs`` (KIP-1251) when older brokers do not write them.
"""
from __future__ import annotations

from operator import itemgetter
from typing import Mapping, NamedTuple

from fencewatch.state.events import MemberAssignment
from fencewatch.state.model import MemberState, Protocol, TopicPartition

_TOPIC = itemgetter(0)
_new_tuple = tuple.__new__
STATIC_LEAVE_EPOCH = -2  # LEAVE_GROUP_STATIC_MEMBER_EPOCH
LEAVE_EPOCH = -1  # LEAVE_GROUP_MEMBER_EPOCH


class Member(NamedTuple):
    """A member as the coordinator holds it. Immutable (a NamedTuple: one is built per
    membership event, and a frozen dataclass of this many fields cost more to build than the
    rules spend on it; docs/decisions.md, "The rules engine"); its partition maps are never
    changed in place either: a new member replaces it."""

    member_id: str
    protocol: Protocol
    member_epoch: int
    previous_member_epoch: int = -1
    state: MemberState = MemberState.STABLE
    assigned_partitions: Mapping[TopicPartition, int] = {}
    partitions_pending_revocation: Mapping[TopicPartition, int] = {}
    # KAFKA-19779 first design: the epoch of the member's last completed revocation.
    revocation_epoch: int = 0
    instance_id: str | None = None
    subscribed_topics: frozenset[str] | None = None

    def assignment_epoch(self, tp: TopicPartition) -> int | None:
        """The epoch at which the member got ``tp`` (assigned or pending revocation); None if not held."""
        ae = self.assigned_partitions.get(tp)
        if ae is None:
            ae = self.partitions_pending_revocation.get(tp)
        return ae

    def held_topics(self) -> set[str]:
        return {*map(_TOPIC, self.assigned_partitions), *map(_TOPIC, self.partitions_pending_revocation)}


def _epochs_of(tps: tuple[TopicPartition, ...], epochs: tuple[int, ...] | None) -> dict | None:
    if epochs is None or len(epochs) != len(tps):
        return None
    return dict(zip(tps, epochs))


def apply_member_assignment(member: Member | None, event: MemberAssignment) -> Member:
    """Next state of ``member`` after its current-assignment record ``event``.

    ``member`` is the member's previous state (None for a new member; for a
    static member rejoining under a new member id, the state it left behind).
    """
    new_epoch = event.member_epoch
    added_epoch = event.target_assignment_epoch if event.target_assignment_epoch is not None else new_epoch
    prev_assigned = member.assigned_partitions if member is not None else {}
    prev_pending = member.partitions_pending_revocation if member is not None else {}

    explicit_assigned = _epochs_of(event.assigned, event.assigned_epochs)
    explicit_pending = _epochs_of(event.pending_revocation, event.pending_epochs)

    # Assigned: a partition kept from the previous assigned set keeps its epoch;
    # a newly added one (including one back from pending revocation) gets the
    # target assignment epoch. KIP-1251 brokers tell us the epochs: they win.
    if explicit_assigned is not None:
        assigned = explicit_assigned
    else:
        assigned = ({tp: prev_assigned.get(tp, added_epoch) for tp in event.assigned} if prev_assigned
                    else dict.fromkeys(event.assigned, added_epoch))

    # Pending revocation: partitions move here from assigned and keep their epoch.
    if explicit_pending is not None:
        pending = explicit_pending
    else:
        pending = {}
        for tp in event.pending_revocation:
            ae = prev_assigned.get(tp)
            if ae is None:
                ae = prev_pending.get(tp, added_epoch)
            pending[tp] = ae

    # Revocation completed: the member moved to a higher epoch and none of the
    # partitions it was revoking is still pending, so its last revocation happened at
    # its previous epoch. A revoked partition may come straight back in the same
    # transition (Kafka's computeNextAssignment re-adds it when the new target has
    # it); it then counts as newly added (above), so the revocation still completed.
    revocation_epoch = member.revocation_epoch if member is not None else 0
    if (member is not None and prev_pending and new_epoch > member.member_epoch
            and not any(tp in pending for tp in prev_pending)):
        revocation_epoch = member.member_epoch

    subscribed = frozenset(event.subscribed_topics) if event.subscribed_topics is not None else (
        member.subscribed_topics if member is not None else None)
    previous_epoch = (event.previous_member_epoch if event.previous_member_epoch is not None
                      else (member.member_epoch if member is not None else -1))
    instance_id = event.instance_id if event.instance_id is not None else (
        member.instance_id if member is not None else None)

    if (member is not None and member.member_id == event.member_id
            and member.member_epoch == new_epoch and member.state == event.state
            and member.assigned_partitions == assigned and member.partitions_pending_revocation == pending
            and member.revocation_epoch == revocation_epoch and member.subscribed_topics == subscribed
            and member.instance_id == instance_id and member.protocol == event.protocol):
        return member
    # Positional, without the NamedTuple's Python-level __new__ (once per membership event).
    return _new_tuple(Member, (event.member_id, event.protocol, new_epoch, previous_epoch, event.state, assigned,
                               pending, revocation_epoch, instance_id, subscribed))


def resolve_unchanged_assignment(member: Member | None, event: MemberAssignment) -> MemberAssignment | None:
    """A request-log ``member_assignment`` made whole from ``member`` as modelled.

    ``assigned`` None ("unchanged"): the heartbeat answer omits an unchanged assignment
    (Kafka's ``GroupMetadataManager`` sends it only on a change), so a new epoch without
    one means "the partitions you hold, at this epoch", with nothing pending (the epoch
    cannot move before a revocation completes). None when there is nothing to apply: the
    member is unknown (it joined before we looked) or already at that epoch.

    ``pending_revocation`` None ("derive it": the request did not repeat the owned
    partitions): as Kafka's ``CurrentAssignmentBuilder``, an assignment that shrinks at the
    same epoch leaves the removed partitions pending revocation (UNREVOKED_PARTITIONS);
    at a new epoch the member held none of them, so nothing is pending.
    """
    if event.assigned is None:
        if member is None or member.member_epoch == event.member_epoch:
            return None
        return event._replace(
            assigned=tuple(sorted(member.assigned_partitions)), assigned_epochs=None, pending_revocation=(),
            pending_epochs=None, previous_member_epoch=member.member_epoch,
            subscribed_topics=(event.subscribed_topics if event.subscribed_topics is not None else
                               None if member.subscribed_topics is None else tuple(sorted(member.subscribed_topics))),
            instance_id=event.instance_id if event.instance_id is not None else member.instance_id)
    pending: tuple = ()
    if member is not None and member.member_epoch == event.member_epoch:
        kept = set(event.assigned)
        pending = tuple(sorted(tp for tp in (*member.assigned_partitions, *member.partitions_pending_revocation)
                               if tp not in kept))
    return event._replace(pending_revocation=pending, pending_epochs=None)


def apply_static_leave(member: Member) -> Member:
    """A static member leaving (epoch -2) keeps its partitions, every epoch reset to 0 (Kafka)."""
    return member._replace(
        previous_member_epoch=member.member_epoch,
        member_epoch=STATIC_LEAVE_EPOCH,
        assigned_partitions={tp: 0 for tp in member.assigned_partitions},
        partitions_pending_revocation={tp: 0 for tp in member.partitions_pending_revocation},
    )


def apply_classic_join(member: Member | None, member_id: str, generation: int, instance_id: str | None) -> Member:
    """A classic member as a completed join phase leaves it (Kafka's ``ClassicGroup.initNextGeneration``):
    in the new generation, still holding the last generation's partitions until the leader's
    SyncGroup gives the new assignment. A member new to the model joins holding nothing."""
    if member is None:
        return Member(member_id=member_id, protocol=Protocol.CLASSIC, member_epoch=generation, instance_id=instance_id)
    if member.member_epoch == generation and member.member_id == member_id and (
            instance_id is None or instance_id == member.instance_id):
        return member
    return member._replace(member_id=member_id, protocol=Protocol.CLASSIC, member_epoch=generation,
                           previous_member_epoch=member.member_epoch,
                           instance_id=instance_id if instance_id is not None else member.instance_id)


def apply_classic_generation(member: Member | None, member_id: str, generation: int,
                             assigned: tuple[TopicPartition, ...], protocol: Protocol) -> Member:
    """A classic member's assignment for a new generation: kept partitions keep their epoch."""
    prev = member.assigned_partitions if member is not None else {}
    return Member(
        member_id=member_id,
        protocol=protocol,
        member_epoch=generation,
        previous_member_epoch=member.member_epoch if member is not None else -1,
        state=MemberState.STABLE,
        assigned_partitions={tp: prev.get(tp, generation) for tp in assigned},
        partitions_pending_revocation={},
        revocation_epoch=member.revocation_epoch if member is not None else 0,
        instance_id=member.instance_id if member is not None else None,
        subscribed_topics=member.subscribed_topics if member is not None else None,
    )

"""A streams group's topology and its members' tasks (KIP-1071): the one place where tasks become
partitions (contract §1.1).

Owns: :class:`Topology` (what a group keeps of its last ``streams_topology``), :func:`task_partitions`
(the rule: which partitions a set of active tasks owns, at which assignment epochs) and
:func:`resolve` (a task-level ``member_assignment`` -> the partition-level one the assignment model
applies). The group aggregate (:mod:`.group`) keeps each streams member's last task-level
assignment and re-resolves it when the topology changes, or first resolves it when the topology
arrives after it.

Why the rules hold the topology, not the decoders: a streams member's current assignment names
tasks ``(subtopology, p)``, and they are partitions only through the group's topology, an earlier
record of another key. A decoder with no memory (the Spark job's ``decode_record``) cannot join
the two; the group's state already sees both, in order, wherever it runs (docs/decisions.md).

Sources (Kafka 4.2-4.4, group-coordinator): ``StreamsGroup.validateOffsetCommit`` and
``createAssignmentEpochValidator`` (a committed partition is looked up through the topology's
``sourceTopicMap``, source and repartition source topics, among the member's active tasks,
assigned or pending revocation, with their assignment epochs); standby and warm-up tasks own no
partition for commits and are not in the events. ``TasksTupleWithEpochs.fromCurrentAssignmentRecord``:
a task without an epoch (a record written before 4.2) reads the member epoch.
"""
from __future__ import annotations

from dataclasses import dataclass
from itertools import repeat
from typing import Iterable

from fencewatch.state.events import MemberAssignment, StreamsTask, Subtopology
from fencewatch.state.model import TopicPartition


@dataclass(frozen=True, slots=True)
class Topology:
    """A streams group's topology as the rules keep it (``StreamsGroupTopologyValue``)."""

    epoch: int
    subtopologies: tuple[Subtopology, ...]

    def input_topics(self) -> dict[str, tuple[str, ...]]:
        """Subtopology id -> the topics its tasks read by name (source, then repartition source
        topics; topics a source regex matches are the broker's to resolve and not named here)."""
        return {s.subtopology_id: (*s.source_topics, *s.repartition_source_topics) for s in self.subtopologies}

    def topics(self) -> tuple[str, ...]:
        """Every topic the group's tasks read, sorted: what its commits are checked against
        (Kafka's ``isSubscribedToTopic``) and what never expires while it is subscribed."""
        return tuple(sorted({t for ts in self.input_topics().values() for t in ts}))


def task_partitions(topology: Topology, tasks: Iterable[StreamsTask], member_epoch: int
                    ) -> tuple[tuple[TopicPartition, ...], tuple[int, ...]]:
    """(partitions, their assignment epochs), sorted, that active ``tasks`` own: task ``(s, p)``
    assigned at epoch ``e`` owns partition ``p`` of every input topic of subtopology ``s`` at ``e``
    (``member_epoch`` when the task has no epoch). A task of a subtopology the topology does not
    have owns nothing known (left out)."""
    inputs = topology.input_topics()
    held: dict[TopicPartition, int] = {}
    for t in tasks:
        topics = inputs.get(t.subtopology_id)
        if not topics:
            continue
        epochs = t.assignment_epochs if t.assignment_epochs is not None else repeat(member_epoch)
        for p, e in zip(t.partitions, epochs):
            for topic in topics:
                held[(topic, p)] = e
    tps = tuple(sorted(held))
    return tps, tuple(held[tp] for tp in tps)


def _merged(listed: tuple[TopicPartition, ...] | None, listed_epochs: tuple[int, ...] | None,
            tps: tuple[TopicPartition, ...], epochs: tuple[int, ...], member_epoch: int
            ) -> tuple[tuple[TopicPartition, ...], tuple[int, ...]]:
    """The tasks' partitions besides those the event lists itself (a listed one without an epoch
    reads the member epoch, as a task without one; a task's epoch wins for a partition in both)."""
    if not listed:
        return tps, epochs
    held = dict(zip(listed, listed_epochs if listed_epochs is not None and len(listed_epochs) == len(listed)
                    else repeat(member_epoch)))
    held.update(zip(tps, epochs))
    out = tuple(sorted(held))
    return out, tuple(held[tp] for tp in out)


def resolve(ev: MemberAssignment, topology: Topology) -> MemberAssignment:
    """A streams member's task-level assignment made partitions through ``topology``: ``assigned`` /
    ``pending_revocation`` are its active tasks' (and those pending revocation) partitions, each
    with its assignment epoch, besides any the event lists; ``subscribed_topics``, unless the event
    says them, every topic of the topology."""
    c = ev.member_epoch
    a_tps, a_epochs = _merged(ev.assigned, ev.assigned_epochs, *task_partitions(topology, ev.active_tasks or (), c), c)
    p_tps, p_epochs = _merged(ev.pending_revocation, ev.pending_epochs,
                              *task_partitions(topology, ev.active_tasks_pending_revocation or (), c), c)
    subscribed = ev.subscribed_topics if ev.subscribed_topics is not None else topology.topics()
    return ev._replace(assigned=a_tps, assigned_epochs=a_epochs, pending_revocation=p_tps, pending_epochs=p_epochs,
                       subscribed_topics=subscribed)

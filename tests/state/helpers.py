"""Builders for tests, after Kafka's ``AssignmentTestUtil.mkTopicAssignment``."""
from __future__ import annotations

import itertools

from fencewatch.state.events import (ClassicGeneration, ClassicJoin, ClassicSync, CommitOffset, CommitOffsets, GroupStateChange, MemberAssignment,
                                     MemberLeft, OffsetCommit, OffsetCommitted, PartitionEpochs)
from fencewatch.state.model import MemberState, Protocol

_seq = itertools.count()


def tp(topic: str, *partitions: int) -> tuple[tuple[str, int], ...]:
    return tuple((topic, p) for p in partitions)


def epochs(topic: str, **by_partition: int) -> dict:
    return {(topic, int(k[1:])): v for k, v in by_partition.items()}


def assignment(member_id, epoch, assigned=(), pending=(), *, ts=1000, group="g", state=MemberState.STABLE,
               protocol=Protocol.CONSUMER, assigned_epochs=None, pending_epochs=None, instance_id=None,
               target_epoch=None, group_epoch=None, subscribed=None, cluster="default"):
    n = next(_seq)
    return MemberAssignment(ts=ts, cluster=cluster, group_id=group, event_id=f"ma{n}", seq=n, member_id=member_id,
                            protocol=protocol, member_epoch=epoch, assigned=tuple(assigned),
                            pending_revocation=tuple(pending), assigned_epochs=assigned_epochs,
                            pending_epochs=pending_epochs, state=state, instance_id=instance_id,
                            target_assignment_epoch=target_epoch, group_epoch=group_epoch,
                            subscribed_topics=subscribed)


def commit(member_id, epoch, tps, *, ts=2000, group="g", txn=False, error_code=None, offset=10,
           leader_epoch=-1, event_id=None, cluster="default", transactional_id=None, api_version=None):
    n = next(_seq)
    return OffsetCommit(ts=ts, cluster=cluster, group_id=group, event_id=event_id or f"c{n}", seq=n,
                        transactional=txn, member_id=member_id, member_epoch=epoch,
                        offsets=CommitOffsets.of(CommitOffset(t, p, offset, leader_epoch) for t, p in tps),
                        error_code=error_code, transactional_id=transactional_id, api_version=api_version)


def left(member_id, reason="leave", *, ts=1500, group="g"):
    n = next(_seq)
    return MemberLeft(ts, "default", group, f"l{n}", n, member_id, reason)


def committed(topic, partition, offset, *, ts, group="g", leader_epoch=-1, commit_ts=None, expire_ts=None):
    n = next(_seq)
    return OffsetCommitted(ts, "default", group, f"oc{n}", n, topic, partition, offset, leader_epoch,
                           commit_ts, expire_ts)


def group_state(state, *, ts, group="g", protocol=None):
    n = next(_seq)
    return GroupStateChange(ts, "default", group, f"gs{n}", n, state, protocol)


def join(member_id, generation, owned, *, ts=1000, group="g"):
    n = next(_seq)
    return ClassicJoin(ts, "default", group, f"j{n}", n, member_id, generation, tuple(owned), "consumer")


def generation(member_id, generation, members=None, *, ts=1050, group="g", instance_id=None):
    """A JoinGroup response: the join phase gave ``member_id`` ``generation`` (``members``: the leader's list)."""
    n = next(_seq)
    return ClassicGeneration(ts, "default", group, f"g{n}", n, member_id, generation, "range", instance_id,
                             None if members is None else tuple(members))


def sync(generation, assignments: dict, *, ts=1100, group="g"):
    n = next(_seq)
    return ClassicSync(ts, "default", group, f"s{n}", n, generation,
                       tuple((m, tuple(t)) for m, t in sorted(assignments.items())))


def partition_epochs(topic, partition, *, ts, log_start=0, log_end, cache):
    n = next(_seq)
    return PartitionEpochs(ts, "default", f"pe{n}", n, topic, partition, log_start, log_end, tuple(cache))

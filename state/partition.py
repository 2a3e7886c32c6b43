"""Per-partition truncation watch (SPEC 5): a partition's log facts and the groups' commits to it.

Keyed by (cluster, topic), not by group, so a ``partition_epochs`` fact reaches
exactly the groups that committed to that partition, without broadcasting every
partition to every group; one key per topic (not per partition) keeps a commit
of many partitions to one routed row. Commit facts come from
``offset_committed`` records and from commit requests the broker stored
(``error_code`` 0, or no ``error_code``: see docs/decisions.md).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, NamedTuple

from .alerts import make_alert
from .events import PartitionEpochs
from .group import Outputs
from .model import AlertKind, Severity
from .truncation import TruncationFinding, check_committed


class CommitFact(NamedTuple):
    """One stored committed offset of one group for this partition (routed from a group event)."""

    ts: int
    cluster: str
    group_id: str
    event_id: str
    seq: int
    topic: str
    partition: int
    offset: int
    leader_epoch: int
    deleted: bool = False


@dataclass(slots=True)
class PartitionState:
    """Mutable like ``GroupState``: updated in place once per committed partition."""

    cluster: str
    topic: str
    partition: int
    log_start_offset: int | None = None
    log_end_offset: int | None = None
    epochs: tuple[tuple[int, int], ...] = ()
    committed: Mapping[str, tuple[int, int]] = field(default_factory=dict)  # group -> (offset, leader epoch)
    reported: Mapping[str, tuple[str, int, int]] = field(default_factory=dict)  # group -> last finding


def new_partition(cluster: str, topic: str, partition: int) -> PartitionState:
    return PartitionState(cluster=cluster, topic=topic, partition=partition)


def _check(p: PartitionState, group_id: str, ts: int, out: Outputs) -> PartitionState:
    if p.log_end_offset is None or group_id not in p.committed:
        return p
    offset, leader_epoch = p.committed[group_id]
    finding = check_committed(offset, leader_epoch, p.log_start_offset or 0, p.log_end_offset, p.epochs)
    if finding is None:
        p.reported.pop(group_id, None)
        return p
    key = (finding.kind, finding.committed_offset, finding.divergent_offset)
    if p.reported.get(group_id) == key:
        return p  # already reported this divergence
    out.alerts.append(_alert(p, group_id, ts, finding))
    p.reported[group_id] = key
    return p


def _alert(p: PartitionState, group_id: str, ts: int, f: TruncationFinding):
    tp = f"{p.topic}-{p.partition}"
    if f.kind == "LOG_TRUNCATION":
        summary = (f"log of {tp} diverged below the committed offset {f.committed_offset} (leader epoch "
                   f"{f.leader_epoch}): {f.lost_records} consumed record(s) are gone; the consumer seeks to "
                   f"{f.divergent_offset} (LogTruncationException with auto.offset.reset=none)")
        kind, sev = AlertKind.LOG_TRUNCATION, Severity.CRITICAL
    else:
        summary = (f"committed offset {f.committed_offset} of {tp} is below the log start offset "
                   f"{f.divergent_offset}: the consumer applies auto.offset.reset ({f.lost_records} record(s) "
                   f"deleted unread)")
        kind, sev = AlertKind.OFFSET_OUT_OF_RANGE, Severity.WARNING
    return make_alert(ts=ts, cluster=p.cluster, group_id=group_id, kind=kind, severity=sev, summary=summary,
                      details={"topic": p.topic, "partition": p.partition,
                               "committed_offset": f.committed_offset, "leader_epoch": f.leader_epoch,
                               "divergent_offset": f.divergent_offset, "records": f.lost_records,
                               "log_start_offset": p.log_start_offset, "log_end_offset": p.log_end_offset},
                      occurrence=f"{p.topic}/{p.partition}/{f.committed_offset}/{f.leader_epoch}/{f.divergent_offset}")


def apply_partition_epochs(p: PartitionState, ev: PartitionEpochs, out: Outputs) -> PartitionState:
    p.log_start_offset, p.log_end_offset, p.epochs = ev.log_start_offset, ev.log_end_offset, tuple(sorted(ev.epochs))
    for group_id in sorted(p.committed):
        p = _check(p, group_id, ev.ts, out)
    return p


def note_commit(p: PartitionState, group_id: str, offset: int, leader_epoch: int, ts: int,
                out: Outputs) -> PartitionState:
    """A group's stored commit to this partition: remember it, and check it if the log is known."""
    p.committed[group_id] = (offset, leader_epoch)
    if p.log_end_offset is None:
        return p  # nothing known about the log yet: checked when its facts arrive
    return _check(p, group_id, ts, out)


def apply_commit_fact(p: PartitionState, fact: CommitFact, out: Outputs) -> PartitionState:
    if fact.deleted:
        p.committed.pop(fact.group_id, None)
        p.reported.pop(fact.group_id, None)
        return p
    return note_commit(p, fact.group_id, fact.offset, fact.leader_epoch, fact.ts, out)


@dataclass(slots=True)
class TopicWatch:
    """The truncation watch of every partition of one topic (the keyed state)."""

    cluster: str
    topic: str
    partitions: dict[int, PartitionState] = field(default_factory=dict)

    def partition(self, partition: int) -> PartitionState:
        ps = self.partitions.get(partition)
        if ps is None:
            ps = self.partitions[partition] = new_partition(self.cluster, self.topic, partition)
        return ps


def new_topic_watch(cluster: str, topic: str) -> TopicWatch:
    return TopicWatch(cluster=cluster, topic=topic)


def process_topic(tw: TopicWatch, event, out: Outputs) -> TopicWatch:
    """A ``partition_epochs`` fact, or the commit facts of one event for this topic (a tuple)."""
    if isinstance(event, PartitionEpochs):
        apply_partition_epochs(tw.partition(event.partition), event, out)
    else:
        for fact in event:
            apply_commit_fact(tw.partition(fact.partition), fact, out)
    return tw

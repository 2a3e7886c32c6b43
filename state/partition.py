"""Per-partition truncation watch (contract §5): a partition's log facts and the groups' commits to it.

Keyed by (cluster, topic), not by group, so a ``partition_epochs`` fact reaches
exactly the groups that committed to that partition, without broadcasting every
partition to every group; one key per topic (not per partition) keeps a commit
of many partitions to one routed row. Commit facts come from
``offset_committed`` records and from commit requests the broker stored
(``error_code`` 0, or no ``error_code``: see docs/decisions.md). The watch cannot see a
group's end, so it forgets on its own clock what nothing refreshed for ``group_retention_ms``
(:func:`forget_idle`, contract §4.4).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from operator import itemgetter
from typing import NamedTuple

from fencewatch.state.alerts import make_alert
from fencewatch.state.events import PartitionEpochs
from fencewatch.state import folding
from fencewatch.state.group import Outputs
from fencewatch.state.model import AlertKind, Severity
from fencewatch.state.truncation import TruncationFinding, check_committed


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
    """What is known of one partition's log, and the divergences already reported for it."""

    cluster: str
    topic: str
    partition: int
    log_start_offset: int | None = None
    log_end_offset: int | None = None
    epochs: tuple[tuple[int, int], ...] = ()
    reported: dict[str, tuple[str, int, int]] = field(default_factory=dict)  # group -> last finding


def new_partition(cluster: str, topic: str, partition: int) -> PartitionState:
    return PartitionState(cluster=cluster, topic=topic, partition=partition)


@dataclass(slots=True)
class TopicWatch:
    """The truncation watch of every partition of one topic (the keyed state).

    Mutable like ``Group``: updated in place on every stored commit. Committed
    offsets are kept per group (group -> partition -> (offset, leader epoch)) so a
    commit request of many partitions is stored with one C-level ``update``; while no
    partition of the topic has log facts, nothing reads them, so requests wait in
    ``unfolded`` (see :func:`fold`).
    """

    cluster: str
    topic: str
    partitions: dict[int, PartitionState] = field(default_factory=dict)  # partitions whose log is known
    committed: dict[str, dict[int, tuple[int, int]]] = field(default_factory=dict)
    # Stored commit requests not yet in ``committed``: (group, partitions, offsets, leader epochs), oldest first.
    unfolded: list[tuple[str, tuple[int, ...], tuple[int, ...], tuple[int, ...]]] = field(default_factory=list)
    # Forgetting (:func:`forget_idle`): when each group last committed to the topic, when each
    # partition's log facts last came, and a lower bound of all of those (None: nothing to forget).
    group_ts: dict[str, int] = field(default_factory=dict)
    facts_ts: dict[int, int] = field(default_factory=dict)
    idle_from: int | None = None


    def partition(self, partition: int) -> PartitionState:
        ps = self.partitions.get(partition)
        if ps is None:
            ps = self.partitions[partition] = new_partition(self.cluster, self.topic, partition)
        return ps


# A logged request's shape: its group and its partitions tuple, by identity.
_GROUP, _PARTITIONS = itemgetter(0), itemgetter(1)


def fold(tw: TopicWatch) -> TopicWatch:
    """Bring ``committed`` up to date with the unfolded requests. Members commit the same
    partitions again and again: only the newest request of each (group, partitions) counts."""
    log = tw.unfolded
    if not log:
        return tw
    tw.unfolded = []
    committed = tw.committed
    shapes = zip(map(_GROUP, log), map(id, map(_PARTITIONS, log)))
    for group_id, partitions, offsets, leader_epochs in folding.newest_per_shape(log, shapes):
        by_partition = committed.get(group_id)
        if by_partition is None:
            by_partition = committed[group_id] = {}
        by_partition.update(zip(partitions, zip(offsets, leader_epochs)))
    return tw


def _check(tw: TopicWatch, p: PartitionState, group_id: str, ts: int, out: Outputs) -> None:
    if p.log_end_offset is None:
        return
    committed = tw.committed.get(group_id, {}).get(p.partition)
    if committed is None:
        return
    offset, leader_epoch = committed
    finding = check_committed(offset, leader_epoch, p.log_start_offset or 0, p.log_end_offset, p.epochs)
    if finding is None:
        p.reported.pop(group_id, None)
        return
    key = (finding.kind, finding.committed_offset, finding.divergent_offset)
    if p.reported.get(group_id) == key:
        return  # already reported this divergence
    out.alerts.append(_alert(p, group_id, ts, finding))
    p.reported[group_id] = key


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


def apply_partition_epochs(tw: TopicWatch, ev: PartitionEpochs, out: Outputs) -> TopicWatch:
    """New facts about a partition's log: check every group's stored commit to it."""
    fold(tw)
    p = tw.partition(ev.partition)
    p.log_start_offset, p.log_end_offset, p.epochs = ev.log_start_offset, ev.log_end_offset, tuple(sorted(ev.epochs))
    tw.facts_ts[ev.partition] = ev.ts
    if tw.idle_from is None:
        tw.idle_from = ev.ts
    for group_id in sorted(tw.committed):
        if ev.partition in tw.committed[group_id]:
            _check(tw, p, group_id, ev.ts, out)
    return tw


def note_commits(tw: TopicWatch, group_id: str, partitions: tuple, offsets: tuple, leader_epochs: tuple,
                 ts: int, out: Outputs, retention_ms: int = 0) -> TopicWatch:
    """A group's stored commit to partitions of this topic: remember it, and check the
    partitions whose log is known (the others are checked when their facts arrive).
    ``retention_ms``: first forget what was idle that long before it (:func:`forget_before`)."""
    if retention_ms:
        forget_before(tw, ts, retention_ms)
    tw.group_ts[group_id] = ts
    if tw.idle_from is None:
        tw.idle_from = ts
    if not tw.partitions:  # no log facts yet: nothing to check, and nothing reads it before they come
        tw.unfolded.append((group_id, partitions, offsets, leader_epochs))
        if len(tw.unfolded) > folding.UNFOLDED_LIMIT:
            fold(tw)
        return tw
    fold(tw)
    by_partition = tw.committed.get(group_id)
    if by_partition is None:
        by_partition = tw.committed[group_id] = {}
    by_partition.update(zip(partitions, zip(offsets, leader_epochs)))
    for partition in partitions:
        p = tw.partitions.get(partition)
        if p is not None:
            _check(tw, p, group_id, ts, out)
    return tw


def apply_commit_fact(tw: TopicWatch, fact: CommitFact, out: Outputs) -> TopicWatch:
    if fact.deleted:
        fold(tw)
        by_partition = tw.committed.get(fact.group_id)
        if by_partition is not None:
            by_partition.pop(fact.partition, None)
            if not by_partition:  # nothing of the group's is left to check here
                del tw.committed[fact.group_id]
                tw.group_ts.pop(fact.group_id, None)
        p = tw.partitions.get(fact.partition)
        if p is not None:
            p.reported.pop(fact.group_id, None)
        return tw
    return note_commits(tw, fact.group_id, (fact.partition,), (fact.offset,), (fact.leader_epoch,), fact.ts, out)


def new_topic_watch(cluster: str, topic: str) -> TopicWatch:
    return TopicWatch(cluster=cluster, topic=topic)


def process_topic(tw: TopicWatch, event, out: Outputs, retention_ms: int) -> TopicWatch:
    """A ``partition_epochs`` fact, or the commit facts of one event for this topic (a tuple),
    after forgetting what was idle past ``retention_ms`` before it (0: nothing ever is)."""
    if isinstance(event, PartitionEpochs) or event:
        forget_before(tw, event.ts if isinstance(event, PartitionEpochs) else event[0].ts, retention_ms)
    if isinstance(event, PartitionEpochs):
        return apply_partition_epochs(tw, event, out)
    first = event[0] if event else None
    if len(event) > 1 and all(not f.deleted and f.group_id == first.group_id and f.ts == first.ts for f in event):
        # One stored commit request (``engine.route``): stored and checked as one batch.
        return note_commits(tw, first.group_id, tuple(f.partition for f in event), tuple(f.offset for f in event),
                            tuple(f.leader_epoch for f in event), first.ts, out)
    for fact in event:
        tw = apply_commit_fact(tw, fact, out)
    return tw


# --------------------------------------------------------------------------- forgetting (contract §4.4)

def forget_before(tw: TopicWatch, ts: int, retention_ms: int) -> TopicWatch:
    """Before an item at ``ts``: forget what was idle past ``retention_ms`` by ``ts - 1``. The
    common case is one comparison; so an engine that removes a watch earlier (on a timeout) and
    one that never does meet the item with the same watch."""
    if retention_ms > 0 and tw.idle_from is not None and ts - 1 - retention_ms >= tw.idle_from:
        forget_idle(tw, ts - 1, retention_ms)
    return tw


def forget_idle(tw: TopicWatch, now: int, retention_ms: int) -> TopicWatch:
    """Forget, as of ``now``, a group whose newest commit to the topic is ``retention_ms`` old
    (its offsets and the findings reported for it), and a partition whose log facts are (the
    facts poller refreshes live ones). Idle groups are gone from the groups' side by then
    (``group.drop_at``): this side cannot see that, so it keeps its own clock."""
    horizon = now - retention_ms
    if retention_ms <= 0 or tw.idle_from is None or tw.idle_from > horizon:
        return tw
    fold(tw)
    for group_id in [g for g in tw.committed if g not in tw.group_ts]:
        tw.group_ts[group_id] = now  # stored before commits had a time: counted from here
    for group_id in [g for g, ts in tw.group_ts.items() if ts <= horizon]:
        del tw.group_ts[group_id]
        tw.committed.pop(group_id, None)
        for p in tw.partitions.values():
            p.reported.pop(group_id, None)
    for partition in tw.partitions:
        tw.facts_ts.setdefault(partition, now)  # as above
    for partition in [p for p, ts in tw.facts_ts.items() if ts <= horizon]:
        del tw.facts_ts[partition]
        tw.partitions.pop(partition, None)
    stamps = [*tw.group_ts.values(), *tw.facts_ts.values()]
    tw.idle_from = min(stamps) if stamps else None
    return tw


def is_unreferenced(tw: TopicWatch) -> bool:
    """Nothing left to watch: no group's commit, no partition's log facts (the state can go)."""
    return not tw.committed and not tw.unfolded and not tw.partitions


def topic_wakeup(tw: TopicWatch, retention_ms: int) -> int | None:
    """The event time at which :func:`forget_idle` next has something to forget."""
    return None if retention_ms <= 0 or tw.idle_from is None else tw.idle_from + retention_ms

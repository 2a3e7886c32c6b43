"""Routing events to keyed state, shared by the local engine and the Spark state function; and
what a stream's key decides in its turn (its topic watches' step, whether it goes, when it wakes).

Two key spaces, told apart by the key's :class:`KeyKind`: a group key ``Key(GROUP, cluster,
group_id)`` for everything about a group, and a topic key ``Key(TOPIC, cluster, topic)`` for
truncation (its partitions' log facts plus each group's stored commit to them). An event goes to its group
key and, for stored commits, to the topic keys it touches (one routed item per
topic, carrying that topic's commit facts).
Within a key, events are applied in (ts, seq) order; keys are independent, so
any engine that keeps that order per key produces the same outputs.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from itertools import repeat
from enum import StrEnum
from operator import attrgetter
from typing import Iterable, Iterator, NamedTuple

from fencewatch.state import group as grp
from fencewatch.state import partition as part
from fencewatch.state.config import RulesConfig
from fencewatch.state.events import (ClassicJoin, ClassicSync, CommitOffsets, GroupStateChange, Heartbeat,
                     MemberAssignment, MemberLeft, OffsetCommit, OffsetCommitted, OffsetDeleted, PartitionEpochs)

class KeyKind(StrEnum):
    """What a key's state is: a group's aggregate, a topic's truncation watch, or (the stream's
    only, ``streaming.runtime.routing``) a bucket of groups keyed together. A ``str`` enum whose
    values are the one letter each kind always had: a key's string in the stream starts with it,
    and keys compare, sort and hash as the plain tuples did, so outputs keep their order."""

    GROUP = "g"
    TOPIC = "t"  # in the stream, a bucket of a cluster's topics (``routing.topic_bucket``)
    GROUP_BUCKET = "G"


class Key(NamedTuple):
    """A key of the state: its kind, its cluster, and the group id or topic it is about (a
    bucket's key: the bucket's name, ``#n``)."""

    kind: KeyKind
    cluster: str
    name: str


GroupKey = TopicKey = Key


def group_key(cluster: str, group_id: str) -> Key:
    return Key(KeyKind.GROUP, cluster, group_id)


def topic_key(cluster: str, topic: str) -> Key:
    return Key(KeyKind.TOPIC, cluster, topic)


STORED_ANSWERS = frozenset({None, 0})
"""The broker's answers (``error_code``) with which it stored a commit request's offsets: 0, or no
answer given (assumed stored: the input may lack the broker's answer; docs/decisions.md). Only
stored offsets reach their topics' truncation watches (contract §5: a rejected commit moved no
consumer). A set, tested inline where a commit is routed (no call per commit on the hot paths);
the one definition of the rule."""


def stored_topics(ev: OffsetCommit) -> list[tuple[str, tuple, tuple, tuple]]:
    """The topics a commit request's stored offsets go to besides its group (:func:`route`), each
    with its (partitions, offsets, leader epochs); none when the broker did not store them
    (:data:`STORED_ANSWERS`)."""
    if ev.error_code in STORED_ANSWERS and ev.offsets.tps:
        return offsets_by_topic(ev.offsets)
    return []


def commit_topics(error_code: int | None, rows: Iterable[tuple]) -> list[tuple[str, tuple, tuple, tuple]]:
    """:func:`stored_topics` for a commit whose event is not built (the router's fast path reads a
    commit line's fields without it): ``rows`` its (topic, partition, offset, leader epoch) per
    partition, in the request's order. Topics in order of first appearance, as
    :func:`columns_by_topic`; a request's partitions of a topic are usually listed together, and
    then each topic's columns are slices, with no step per partition."""
    if error_code not in STORED_ANSWERS:
        return []
    try:
        topics, partitions, offsets, epochs = zip(*rows)
    except ValueError:  # no rows
        return []
    first = topics[0]
    n = len(topics)
    if topics.count(first) == n:
        return [(first, partitions, offsets, epochs)]
    starts = [0] + [i for i in range(1, n) if topics[i] != topics[i - 1]]
    if len(starts) == len(set(topics)):
        ends = starts[1:] + [n]
        return [(topics[a], partitions[a:b], offsets[a:b], epochs[a:b]) for a, b in zip(starts, ends)]
    return columns_by_topic(zip(topics, partitions, offsets, epochs))


def offsets_by_topic(offsets: CommitOffsets) -> list[tuple[str, tuple, tuple, tuple]]:
    """(topic, partitions, offsets, leader epochs) per topic of a commit's offsets, topics in order
    of first appearance; a request is usually one topic. Public because the stream's router puts
    a decoded commit's facts in its topics' buckets with it (``streaming.runtime.routing``), the
    same columns the local engine notes here: one split, so both engines see the same facts."""
    if offsets.topic is not None:
        return [(offsets.topic, offsets.partitions, offsets.offsets, offsets.leader_epochs)]
    return columns_by_topic((topic, partition, offset, epoch) for (topic, partition), offset, epoch
                            in zip(offsets.tps, offsets.offsets, offsets.leader_epochs))


def columns_by_topic(rows: Iterable[tuple]) -> list[tuple[str, tuple, tuple, tuple]]:
    """(topic, partition, offset, leader epoch) rows -> (topic, partitions, offsets, leader
    epochs) per topic, topics in order of first appearance (also the router's, for a commit line)."""
    cols: dict[str, tuple[list, list, list]] = {}
    for topic, partition, offset, epoch in rows:
        c = cols.get(topic)
        if c is None:
            c = cols[topic] = ([], [], [])
        c[0].append(partition)
        c[1].append(offset)
        c[2].append(epoch)
    return [(t, tuple(p), tuple(o), tuple(e)) for t, (p, o, e) in cols.items()]


def _facts_by_topic(ev) -> Iterator[tuple[Key, tuple]]:
    for topic, partitions, offsets, epochs in stored_topics(ev):
        yield topic_key(ev.cluster, topic), tuple(
            part.CommitFact(ev.ts, ev.cluster, ev.group_id, ev.event_id, ev.seq, topic, p, o, e)
            for p, o, e in zip(partitions, offsets, epochs))


def route(ev) -> Iterator[tuple[Key, object]]:
    """(key, event) pairs for one input event."""
    if isinstance(ev, PartitionEpochs):
        yield topic_key(ev.cluster, ev.topic), ev
        return
    yield group_key(ev.cluster, ev.group_id), ev
    if isinstance(ev, OffsetCommit):
        yield from _facts_by_topic(ev)  # the offsets the broker stored (:func:`stored_topics`)
    elif isinstance(ev, OffsetCommitted):
        yield topic_key(ev.cluster, ev.topic), (part.CommitFact(
            ev.ts, ev.cluster, ev.group_id, ev.event_id, ev.seq, ev.topic, ev.partition, ev.offset, ev.leader_epoch),)
    elif isinstance(ev, OffsetDeleted):
        yield topic_key(ev.cluster, ev.topic), (part.CommitFact(
            ev.ts, ev.cluster, ev.group_id, ev.event_id, ev.seq, ev.topic, ev.partition, -1, -1, deleted=True),)


def new_state(key: Key):
    if key.kind is KeyKind.GROUP:
        return grp.new_group(key.cluster, key.name)
    return part.new_topic_watch(key.cluster, key.name)


def apply(state, ev, cfg: RulesConfig, out: grp.Outputs):
    """One keyed event; returns the key's next state."""
    if isinstance(state, grp.Group):
        return grp.process(state, ev, cfg, out)
    return part.process_topic(state, ev, out, cfg.group_retention_ms)


def run_key(key: Key, state, events: Iterable, cfg: RulesConfig, out: grp.Outputs, clock: int | None = None):
    """Apply a key's events (already in (ts, seq) order), then decisions due at ``clock``.

    Returns the next state; :func:`is_gone` then says whether it can be removed. Forgetting is
    a rule of event time applied before every event (``group.process``,
    ``partition.forget_before``), so removing a state early changes no output: results never
    depend on batch boundaries.
    """
    if state is None:
        state = new_state(key)
    for ev in events:
        state = apply(state, ev, cfg, out)
    if clock is not None:
        if isinstance(state, grp.Group):
            state = grp.advance(state, clock, cfg, out)
        else:
            state = part.forget_idle(state, clock, cfg.group_retention_ms)
    return state


def is_gone(state, clock: int, cfg: RulesConfig) -> bool:
    """Whether a key's state, its decisions made up to ``clock`` (:func:`run_key`), can be
    removed (contract §4.4): a group forgotten by then, a topic watch nothing refers to."""
    if isinstance(state, grp.Group):
        return grp.drop_due(state, clock, cfg)
    return part.is_unreferenced(part.forget_idle(state, clock, cfg.group_retention_ms))


def wakeup(state, cfg: RulesConfig) -> int | None:
    """The event time at which a key's state next has something to do without input: a
    decision, being forgotten (the Spark state timeout)."""
    if isinstance(state, grp.Group):
        return grp.next_wakeup(state, cfg)
    return part.topic_wakeup(state, cfg.group_retention_ms)


# --------------------------------------------------------------------------- a stream's keys (contract §4.4)
# The stream keys a cluster's topics in buckets, each holding its topics' watches by topic, and
# runs a key when it has input or when its wake-up has passed: what each of those turns decides.


def run_topics(cluster: str, watches: dict | None, entries: Iterable, cfg: RulesConfig, out: grp.Outputs,
               clock: int | None = None, *, commit_type: type) -> dict:
    """Apply a bucket of a cluster's topics' truncation watches (topic -> watch) to its entries, in
    (ts, seq) order; then, at ``clock``, remove each watch nothing refers to any more
    (:func:`is_gone`). Returns the watches left.

    Each entry has a ``ts`` and a ``payload`` with a ``topic``. A payload of ``commit_type`` (the
    stream's stored commit: ``group_id``, ``partitions``, ``offsets``, ``leader_epochs``) is what
    one stored commit wrote to the topic, noted as :class:`LocalEngine` notes it, without a
    ``CommitFact`` per partition; any other carries the ``event`` :func:`route` gave the topic's key
    (a ``partition_epochs``, an ``offset_committed``'s or ``offset_deleted``'s commit facts)."""
    watches = {} if watches is None else watches
    retention_ms = cfg.group_retention_ms
    for entry in entries:
        item = entry.payload
        topic = item.topic
        tw = watches.get(topic)
        if tw is None:
            tw = part.new_topic_watch(cluster, topic)
        if type(item) is commit_type:
            tw = part.note_commits(tw, item.group_id, item.partitions, item.offsets, item.leader_epochs, entry.ts,
                                   out, retention_ms)
        else:
            tw = apply(tw, item.event, cfg, out)
        watches[topic] = tw
    if clock is not None:
        for topic in [t for t, tw in watches.items() if is_gone(tw, clock, cfg)]:
            del watches[topic]
    return watches


def key_wakeup(kind: KeyKind, state, cfg: RulesConfig) -> int | None:
    """The event time a key's state next has something to do without input (:func:`wakeup`): a
    group's; a bucket of topic watches' (:func:`run_topics`), its watches' earliest."""
    if kind is KeyKind.GROUP:
        return wakeup(state, cfg)
    return min((w for w in map(wakeup, state.values(), repeat(cfg)) if w is not None), default=None)


def key_forgotten(kind: KeyKind, state, clock: int, cfg: RulesConfig, *, started: bool, holding: bool) -> bool:
    """Whether a key's state goes after its turn, decisions made up to ``clock`` (contract §4.4):
    never before the key has read an event (``started``: its clock starts there) nor while it still
    holds one (``holding``: a held event must meet the state it was routed to); then a group key
    once its group is forgotten (:func:`is_gone`), a topic bucket once no watch is left
    (:func:`run_topics` removed those gone)."""
    if not started or holding:
        return False
    return is_gone(state, clock, cfg) if kind is KeyKind.GROUP else not state


def timeout_ms(wake_at: int | None, clock: int, hold_wait_ms: int | None) -> int | None:
    """The wall ms after which a key runs again without input (the Spark state timeout): the
    earlier of its held events' wait (``hold_wait_ms``, None: none held) and its state's wake-up
    (:func:`key_wakeup`, event time), which an idle key's clock reaches as wall time passes (its
    clock moves with wall time from its newest event); at least 1 ms. None: nothing to wait for."""
    if wake_at is None:
        return None if hold_wait_ms is None else max(1, hold_wait_ms)
    due = wake_at - clock
    return max(1, due if hold_wait_ms is None else min(hold_wait_ms, due))


# Events that touch their group's key only (``route`` yields nothing else for them).
_GROUP_ONLY = frozenset({MemberAssignment, MemberLeft, Heartbeat, ClassicJoin, ClassicSync, GroupStateChange})

sort_key = attrgetter("ts", "seq")
"""(ts, seq): the order events of a key are applied in."""


@dataclass
class LocalEngine:
    """All keyed state in one process: ``replay --engine local``.

    Feed events in (ts, seq) order with :meth:`feed` or :meth:`feed_all`; :meth:`finish` makes the
    decisions due at the clock (the last event's ts) and returns the outputs.
    """

    cfg: RulesConfig = field(default_factory=RulesConfig)
    states: dict = field(default_factory=dict)
    out: grp.Outputs = field(default_factory=grp.Outputs)
    max_ts: int | None = None

    def feed(self, ev) -> None:
        self.feed_all((ev,))

    def feed_all(self, events: Iterable) -> None:
        """Events in (ts, seq) order: one loop for all, the hot path of ``replay``."""
        states = self.states
        out = self.out
        cfg = self.cfg
        last_ts = None
        for ev in events:
            last_ts = ev.ts
            kind = type(ev)
            if kind is OffsetCommit or kind in _GROUP_ONLY:
                # The keys and order of ``route``, without a CommitFact per partition.
                key = Key(KeyKind.GROUP, ev.cluster, ev.group_id)
                st = states.get(key)
                if st is None:
                    st = new_state(key)
                states[key] = grp.process(st, ev, cfg, out)
                if kind is OffsetCommit and ev.error_code in STORED_ANSWERS and ev.offsets.tps:
                    offsets = ev.offsets
                    if offsets.topic is not None:  # one topic: the usual request
                        self._note_commits(ev, offsets.topic, offsets.partitions, offsets.offsets,
                                           offsets.leader_epochs)
                    else:
                        for columns in offsets_by_topic(offsets):
                            self._note_commits(ev, *columns)
                continue
            for key, kev in route(ev):
                st = states.get(key)
                if st is None:
                    st = new_state(key)
                states[key] = apply(st, kev, cfg, out)
        if last_ts is not None and (self.max_ts is None or last_ts > self.max_ts):
            self.max_ts = last_ts

    def _note_commits(self, ev: OffsetCommit, topic: str, partitions, offsets, epochs) -> None:
        tkey = Key(KeyKind.TOPIC, ev.cluster, topic)
        tw = self.states.get(tkey)
        if tw is None:
            tw = self.states[tkey] = part.new_topic_watch(ev.cluster, topic)
        part.note_commits(tw, ev.group_id, partitions, offsets, epochs, ev.ts, self.out, self.cfg.group_retention_ms)

    def finish(self, clock: int | None = None) -> grp.Outputs:
        """The decisions due at ``clock`` (default: the last event's ts), and the states gone by then."""
        clock = self.max_ts if clock is None else clock
        if clock is not None:
            self.settle(clock)
        return self.out

    def settle(self, clock: int) -> None:
        """What the stream does on a state timeout, for every key: the decisions due at ``clock``,
        then the removal of the states gone by then (groups in key order, as ``finish`` always
        made their decisions). ``clock`` must not pass an event still to be fed."""
        for key in sorted(k for k in self.states if k.kind is KeyKind.GROUP):
            self.states[key] = grp.advance(self.states[key], clock, self.cfg, self.out)
        for key in [k for k, st in self.states.items() if is_gone(st, clock, self.cfg)]:
            del self.states[key]

    def groups(self) -> list[grp.Group]:
        return [s for k, s in sorted(self.states.items()) if k.kind is KeyKind.GROUP]

"""A group's committed offsets and their expiry, as Kafka's ``OffsetMetadataManager`` keeps
them (contract §4); the condition itself is :mod:`.expiry`'s (``OffsetExpirationConditionImpl``).

Owns: the store of committed offsets (stored requests kept unfolded until something reads
them, :func:`committed_offsets`), pending transactional offsets, the tracked earliest
shipped deadline (:class:`ExpiryTrack`) kept valid cheaply as commits and membership
change, and the expiry decisions in deadline order (:func:`expire_due`: OFFSETS_EXPIRING,
OFFSETS_EXPIRED, transactions timing out).
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from itertools import repeat
from operator import itemgetter
from typing import Iterable, Protocol

from fencewatch.state import alerts
from fencewatch.state import expiry as exp
from fencewatch.state import folding
from fencewatch.state.membership import Roster, derived_state
from fencewatch.state.model import Alert, AlertKind, TopicPartition

_TOPIC = itemgetter(0)
_TPS = itemgetter(0)  # a logged request's (topic, partition) keys: its shape, by identity
_new_tuple = tuple.__new__


@dataclass(frozen=True, slots=True)
class ExpiryTrack:
    """Earliest shipped expiry deadline; ``stale`` means it is only a lower bound."""

    deadline: int | None = None
    set_ts: int = 0
    warned: int | None = None  # the deadline OFFSETS_EXPIRING was emitted for
    stale: bool = False


class OffsetStore(Roster, Protocol):
    """The fields of a group this module keeps (``group.Group``)."""

    cluster: str
    group_id: str
    offsets: dict[TopicPartition, exp.CommittedOffset]
    unfolded: list[tuple[tuple[TopicPartition, ...], exp.CommittedOffset]]
    committed_topics: set[str]
    pending_txn: dict[TopicPartition, int]
    expiry: ExpiryTrack
    alert_last: dict[str, int]
    alert_suppressed: dict[str, int]


# --------------------------------------------------------------------------- the store

def committed_offsets(g: OffsetStore) -> dict[TopicPartition, exp.CommittedOffset]:
    """The group's committed offsets, every stored request folded in. A commit only appends its
    request: most groups subscribe to what they commit, so nothing reads the offsets until a
    membership change, an expiry or a deletion, and by then a member has committed the same
    partitions several times over (only the newest request of each counts)."""
    if g.unfolded:
        offsets = g.offsets
        log = g.unfolded
        for tps, committed in folding.newest_per_shape(log, map(id, map(_TPS, log))):
            offsets.update(zip(tps, repeat(committed)))
        g.unfolded = []
    return g.offsets


def store_request(g: OffsetStore, tps: tuple[TopicPartition, ...], ts: int, topic: str | None) -> None:
    """A commit request the broker stored at ``ts``; ``topic``: its one topic, when known.
    Expiry needs when each partition was committed, not the offset (truncation keeps that)."""
    g.unfolded.append((tps, _new_tuple(exp.CommittedOffset, (ts, None))))
    if len(g.unfolded) > folding.UNFOLDED_LIMIT:
        committed_offsets(g)
    if topic is None:
        g.committed_topics.update(map(_TOPIC, tps))
    else:
        g.committed_topics.add(topic)


def store_record(g: OffsetStore, tp: TopicPartition, committed: exp.CommittedOffset) -> bool:
    """An offset as ``__consumer_offsets`` stored it; True if it completed a pending transaction."""
    was_pending = g.pending_txn.pop(tp, None) is not None
    committed_offsets(g)[tp] = committed
    g.committed_topics.add(tp[0])
    return was_pending


def remove(g: OffsetStore, gone: Iterable[TopicPartition]) -> None:
    offsets = committed_offsets(g)
    for tp in gone:
        offsets.pop(tp, None)
    g.committed_topics = set(map(_TOPIC, offsets))


# --------------------------------------------------------------------------- deadlines

def expiry_view(g: OffsetStore) -> exp.ExpiryView:
    return exp.ExpiryView(group_type=g.group_type or "simple", state=derived_state(g), state_ts=g.state_ts,
                          subscribed_topics=g.subscribed, pending_transactional=frozenset(g.pending_txn))


def deadlines(g: OffsetStore, retention_ms: int) -> exp.Deadlines:
    return exp.group_deadlines(expiry_view(g), committed_offsets(g), retention_ms)


def subscribed_to_all(g: OffsetStore, topics) -> bool:
    """``expiry.subscribed_to_all`` without building the group's view."""
    if g.members:  # never an empty KIP-848 group: the subscription decides, whatever the state
        return g.subscribed is not None and g.subscribed.issuperset(topics)
    return exp.subscribed_to_all(g.group_type or "simple", derived_state(g), g.subscribed, topics)


def recompute_expiry(g: OffsetStore, ts: int, retention_ms: int) -> None:
    """Track the earliest shipped deadline afresh (after membership or the offsets changed)."""
    # When the group subscribes to every committed topic nothing can expire: skip the pass
    # over every committed offset on each membership change.
    d = None if subscribed_to_all(g, g.committed_topics) else deadlines(g, retention_ms).shipped
    track = g.expiry
    if d == track.deadline and not track.stale:
        return
    set_ts = track.set_ts if d == track.deadline else ts
    g.expiry = ExpiryTrack(deadline=d, set_ts=set_ts, warned=track.warned if track.warned == d else None)


def note_commit(g: OffsetStore, ts: int, retention_ms: int, touched, topic: str | None = None) -> None:
    """A commit pushes its partitions' deadlines later, so the tracked earliest deadline stays a
    valid lower bound (marked stale) unless a touched partition now expires earlier than it.
    ``topic``: the one topic of ``touched``, when the caller knows it."""
    track = g.expiry
    if subscribed_to_all(g, (topic,) if topic is not None else map(_TOPIC, touched)):
        # Hot path: committing subscribed topics creates no deadline.
        if track.deadline is not None and not track.stale:
            g.expiry = ExpiryTrack(track.deadline, track.set_ts, track.warned, True)
        return
    view = expiry_view(g)
    offsets = committed_offsets(g)
    candidate = None
    for tp in touched:
        d = exp.shipped_deadline(view, tp, offsets[tp], retention_ms)
        if d is not None and (candidate is None or d < candidate):
            candidate = d
    if candidate is not None and (track.deadline is None or candidate < track.deadline):
        g.expiry = ExpiryTrack(deadline=candidate, set_ts=ts, warned=None, stale=True)
    elif track.deadline is not None and not track.stale:
        g.expiry = ExpiryTrack(track.deadline, track.set_ts, track.warned, True)


# --------------------------------------------------------------------------- decisions

def expiry_wakeup(g: OffsetStore, warning_ms: int, txn_timeout_ms: int) -> int | None:
    """When an expiry decision (warning, expiry, a pending transaction timing out) is next due."""
    times = []
    d = g.expiry.deadline
    if d is not None:
        times.append(d if g.expiry.warned == d else d - warning_ms)
    if g.pending_txn:
        times.append(min(g.pending_txn.values()) + txn_timeout_ms)
    return min(times) if times else None


def expire_due(g: OffsetStore, now: int, cfg, out: list[Alert]) -> int:
    """Make the expiry decisions due at or before ``now``, in deadline order, each stamped with
    its deadline (so they do not depend on when the clock passes it). Returns the number of
    offsets expired. ``cfg``: the ``RulesConfig``."""
    expired = 0
    for _ in range(10_000):  # each round removes offsets or settles the track; bounded for safety
        wake = expiry_wakeup(g, cfg.expiry_warning_ms, cfg.txn_timeout_ms)
        if wake is None or wake > now:
            break
        # Transactional offsets pending past the transaction timeout no longer block expiry.
        if g.pending_txn and min(g.pending_txn.values()) + cfg.txn_timeout_ms <= wake:
            g.pending_txn = {k: v for k, v in g.pending_txn.items() if v + cfg.txn_timeout_ms > wake}
            recompute_expiry(g, wake, cfg.offsets_retention_ms)
        elif g.expiry.stale:
            recompute_expiry(g, g.expiry.set_ts, cfg.offsets_retention_ms)
        else:
            expired += _decide_deadline(g, cfg, out)
    return expired


def _decide_deadline(g: OffsetStore, cfg, out: list[Alert]) -> int:
    """At the tracked deadline: warn first, then expire what the cleanup would remove."""
    d = g.expiry.deadline
    dl = deadlines(g, cfg.offsets_retention_ms)
    if g.expiry.warned != d:
        warn_ts = max(d - cfg.expiry_warning_ms, g.expiry.set_ts)
        alerts.emit(g, out, cfg.alert_cooldown_ms, warn_ts, AlertKind.OFFSETS_EXPIRING, alerts.offsets_expiring,
                    d, dl.shipped_partitions, warn_ts, _expiry_details(g, dl, cfg))
        g.expiry = replace(g.expiry, warned=d)
        return 0
    gone = exp.expired_at(expiry_view(g), committed_offsets(g), d, cfg.offsets_retention_ms)
    if gone:
        alerts.emit(g, out, cfg.alert_cooldown_ms, d, AlertKind.OFFSETS_EXPIRED, alerts.offsets_expired,
                    d, gone, bool(g.members), _expiry_details(g, dl, cfg))
        remove(g, gone)
    g.expiry = ExpiryTrack(deadline=None, set_ts=d, stale=True)
    recompute_expiry(g, d, cfg.offsets_retention_ms)
    return len(gone)


def _expiry_details(g: OffsetStore, dl: exp.Deadlines, cfg) -> dict:
    return {"deadline_ms": dl.shipped, "partitions": dl.shipped_partitions, "group_type": g.group_type or "simple",
            "group_state": derived_state(g), "members": len(g.members),
            "cleanup_by_ms": (dl.shipped + cfg.offsets_retention_check_interval_ms) if dl.shipped is not None else None,
            "kip211_deadline_ms": dl.kip211, "pre21_deadline_ms": dl.pre21,
            "retention_ms": cfg.offsets_retention_ms}

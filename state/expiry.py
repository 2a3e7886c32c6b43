"""When committed offsets expire (contract §4): Kafka as shipped, the KIP-211 text, pre-2.1.

Kafka as shipped (``OffsetExpirationConditionImpl`` + ``cleanupExpiredOffsets``):
an offset expires when its topic is not subscribed by the group, no
transactional offset is pending for it, and ``now - base >= retention``
(or ``now >= expire_ts`` when the v1 record carries one). ``base`` depends on
the group type; see :func:`shipped_base`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Mapping, NamedTuple

from fencewatch.state.model import TopicPartition


class CommittedOffset(NamedTuple):
    """What retention needs of a committed offset: when it was committed, and the expire
    timestamp of a v1 record. The offset itself is the truncation watch's business, so
    one value serves every partition of a commit request."""

    commit_ts: int
    expire_ts: int | None = None


@dataclass(frozen=True, slots=True)
class ExpiryView:
    """What the expiry rule needs to know about a group."""

    group_type: str  # consumer | streams | classic | simple
    state: str  # Kafka group state name: Empty, Stable, PreparingRebalance, ...
    state_ts: int | None  # when the group entered ``state`` (classic Empty base)
    subscribed_topics: frozenset[str] | None  # None: unknown
    pending_transactional: frozenset[TopicPartition] = frozenset()


def shipped_base(view: ExpiryView, off: CommittedOffset) -> int | None:
    """The timestamp retention counts from, or None if the group's offsets cannot expire now."""
    if view.group_type == "simple":
        # Classic group without protocol (admin / assign() consumers): commit time.
        return off.commit_ts
    if view.group_type == "classic":
        if view.state == "Empty":
            # ClassicGroup: the time the group became empty (currentStateTimestamp).
            return view.state_ts if view.state_ts is not None else off.commit_ts
        if view.state == "Stable" and view.subscribed_topics is not None:
            return off.commit_ts
        return None
    # KIP-848 consumer and streams groups: always the commit time.
    return off.commit_ts


def subscribed_to_all(group_type: str, state: str, subscribed_topics: frozenset[str] | None,
                      topics: Iterable[str]) -> bool:
    """Whether the group subscribes to every one of ``topics``: their offsets then never expire
    (``shipped_deadline`` is None). Takes the view's fields, so hot paths need not build one."""
    if group_type in ("consumer", "streams") and state == "Empty":
        return False  # an empty KIP-848 group subscribes to nothing
    return subscribed_topics is not None and subscribed_topics.issuperset(topics)


def _subscribed(view: ExpiryView, topic: str) -> bool:
    return subscribed_to_all(view.group_type, view.state, view.subscribed_topics, (topic,))


def shipped_deadline(view: ExpiryView, tp: TopicPartition, off: CommittedOffset, retention_ms: int) -> int | None:
    """When Kafka (as shipped) would first consider this offset expired; None: not while things stay as they are."""
    if _subscribed(view, tp[0]) or tp in view.pending_transactional:
        return None
    if off.expire_ts is not None:
        return off.expire_ts
    base = shipped_base(view, off)
    return None if base is None else base + retention_ms


def kip211_deadline(view: ExpiryView, off: CommittedOffset, retention_ms: int) -> int | None:
    """The KIP-211 text: retention starts when the group becomes empty (standalone: commit time)."""
    if off.expire_ts is not None:
        return off.expire_ts
    if view.group_type == "simple":
        return off.commit_ts + retention_ms
    if view.state == "Empty":
        return (view.state_ts if view.state_ts is not None else off.commit_ts) + retention_ms
    return None


def pre21_deadline(off: CommittedOffset, retention_ms: int) -> int:
    """Before Kafka 2.1 (KAFKA-4682): commit time + retention whatever the group's state."""
    return off.expire_ts if off.expire_ts is not None else off.commit_ts + retention_ms


@dataclass(frozen=True, slots=True)
class Deadlines:
    shipped: int | None
    kip211: int | None
    pre21: int | None
    shipped_partitions: int  # partitions that expire at ``shipped``


def _min(values: Iterable[int | None]) -> int | None:
    present = [v for v in values if v is not None]
    return min(present) if present else None


def group_deadlines(view: ExpiryView, offsets: Mapping[TopicPartition, CommittedOffset],
                    retention_ms: int) -> Deadlines:
    """Each rule's first deadline over a group's offsets. A group's status asks for this in every
    micro-batch, so the work per partition is kept small: the KIP-211 and pre-2.1 rules read only
    the committed value, which a commit request's partitions share (one pass over the distinct
    values), and a subscribed topic's partitions have no shipped deadline (skipped by topic)."""
    values = set(offsets.values())
    topics = {tp[0] for tp in offsets}
    subscribed = {t for t in topics if _subscribed(view, t)}
    shipped = [] if len(subscribed) == len(topics) else [
        d for tp, off in offsets.items() if tp[0] not in subscribed
        if (d := shipped_deadline(view, tp, off, retention_ms)) is not None]
    first = min(shipped, default=None)
    return Deadlines(
        shipped=first,
        kip211=_min(kip211_deadline(view, off, retention_ms) for off in values),
        pre21=_min(pre21_deadline(off, retention_ms) for off in values),
        shipped_partitions=shipped.count(first) if shipped else 0,
    )


def expired_at(view: ExpiryView, offsets: Mapping[TopicPartition, CommittedOffset], now: int,
               retention_ms: int) -> list[TopicPartition]:
    """Partitions a cleanup run at ``now`` removes (``OffsetMetadataManager.cleanupExpiredOffsets``)."""
    out = []
    for tp, off in offsets.items():
        d = shipped_deadline(view, tp, off, retention_ms)
        if d is not None and now >= d:
            out.append(tp)
    return sorted(out)

"""The consumer protocol embedded in classic groups' ``GroupMetadataValue``.

What lives here: bytes of a member's ``subscription`` / ``assignment`` ->
frozen dataclasses, and the generation and owned partitions a member claims
(what the group leader's assignor reads before a rebalance). No I/O.

Sources (Kafka 4.3, clients module): ``ConsumerProtocolSubscription.json`` and
``ConsumerProtocolAssignment.json`` (version-prefixed, never flexible; a newer
version is read with the newest known layout, as
``ConsumerProtocol.checkSubscriptionVersion`` does), the KIP-341 user data of
``StickyAssignor`` (V0 ``previous_assignment``; V1 adds ``generation``; read V1
first, then V0, else "nothing owned, generation -1") and the one-field user
data of ``CooperativeStickyAssignor`` (``generation``, used when the
subscription is older than v2).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from fencewatch.streaming.ingest.consumer_offsets.records import RecordDecodeError, decode_message
from fencewatch.streaming.ingest.consumer_offsets.record_types import CONSUMER_PROTOCOL_ASSIGNMENT, CONSUMER_PROTOCOL_SUBSCRIPTION

__all__ = [
    "Subscription",
    "Assignment",
    "StickyUserData",
    "parse_subscription",
    "parse_assignment",
    "parse_sticky_user_data",
    "parse_cooperative_sticky_user_data",
    "claimed_generation_and_owned",
    "DEFAULT_GENERATION",
]

DEFAULT_GENERATION = -1  # AbstractStickyAssignor.DEFAULT_GENERATION
_HIGHEST_PROTOCOL_VERSION = 3

TopicPartitions = tuple[tuple[str, tuple[int, ...]], ...]


@dataclass(frozen=True, slots=True)
class Subscription:
    version: int
    topics: tuple[str, ...]
    user_data: bytes | None
    owned_partitions: TopicPartitions
    generation_id: int  # -1 when absent (versions < 2)
    rack_id: str | None


@dataclass(frozen=True, slots=True)
class Assignment:
    version: int
    assigned_partitions: TopicPartitions
    user_data: bytes | None


@dataclass(frozen=True, slots=True)
class StickyUserData:
    """KIP-341: what a ``sticky`` member owned and, from V1, in which generation."""

    previous_assignment: TopicPartitions
    generation: int | None  # None for V0 user data


def _version(data: bytes, what: str) -> int:
    if len(data) < 2:
        raise RecordDecodeError("MALFORMED_PROTOCOL", f"{what} shorter than its int16 version")
    (version,) = struct.unpack_from(">h", data, 0)
    if version < 0:
        raise RecordDecodeError("MALFORMED_PROTOCOL", f"{what} has negative version {version}")
    return min(version, _HIGHEST_PROTOCOL_VERSION)


def _tps(items: list[dict] | None) -> TopicPartitions:
    return tuple((tp["topic"], tuple(tp["partitions"])) for tp in items or ())


def parse_subscription(data: bytes) -> Subscription:
    version = _version(data, "subscription")
    try:
        d = decode_message(CONSUMER_PROTOCOL_SUBSCRIPTION, version, data, 2)
    except RecordDecodeError as exc:
        raise RecordDecodeError("MALFORMED_PROTOCOL", f"subscription: {exc.detail}") from None
    rack = d.get("rackId")
    return Subscription(
        version=version,
        topics=tuple(d["topics"]),
        user_data=d["userData"],
        owned_partitions=_tps(d.get("ownedPartitions")),
        generation_id=d.get("generationId", -1),
        rack_id=rack or None,
    )


def parse_assignment(data: bytes) -> Assignment:
    version = _version(data, "assignment")
    try:
        d = decode_message(CONSUMER_PROTOCOL_ASSIGNMENT, version, data, 2)
    except RecordDecodeError as exc:
        raise RecordDecodeError("MALFORMED_PROTOCOL", f"assignment: {exc.detail}") from None
    return Assignment(version, _tps(d["assignedPartitions"]), d["userData"])


def _read_previous_assignment(data: bytes) -> tuple[TopicPartitions, int]:
    """STICKY_ASSIGNOR_USER_DATA_V0 layout: [topic string(int16), partitions [int32]]."""
    p = 0
    (count,) = struct.unpack_from(">i", data, p)
    p += 4
    if count < 0 or count > len(data):
        raise ValueError("bad topic count")
    out = []
    for _ in range(count):
        (n,) = struct.unpack_from(">h", data, p)
        p += 2
        if n < 0 or p + n > len(data):
            raise ValueError("bad topic")
        topic = data[p:p + n].decode()
        p += n
        (c,) = struct.unpack_from(">i", data, p)
        p += 4
        if c < 0 or p + 4 * c > len(data):
            raise ValueError("bad partitions")
        out.append((topic, tuple(struct.unpack_from(">%di" % c, data, p))))
        p += 4 * c
    return tuple(out), p


def parse_sticky_user_data(data: bytes | None) -> StickyUserData:
    """``StickyAssignor.deserializeTopicPartitionAssignment``: V1, else V0, else
    nothing owned with the default generation."""
    if not data:
        return StickyUserData((), None)
    try:
        owned, p = _read_previous_assignment(data)
    except (ValueError, struct.error, UnicodeDecodeError):
        return StickyUserData((), DEFAULT_GENERATION)
    if p + 4 <= len(data):
        (generation,) = struct.unpack_from(">i", data, p)
        return StickyUserData(owned, generation)
    return StickyUserData(owned, None)


def parse_cooperative_sticky_user_data(data: bytes | None) -> int | None:
    """``CooperativeStickyAssignor.memberData``: int32 generation, or the
    default generation when unreadable; None without user data."""
    if data is None:
        return None
    if len(data) < 4:
        return DEFAULT_GENERATION
    return struct.unpack_from(">i", data, 0)[0]


def claimed_generation_and_owned(assignor: str | None, sub: Subscription) -> tuple[int, TopicPartitions]:
    """The generation and owned partitions a member claims when it joins, as
    the group leader's assignor sees them (``AbstractStickyAssignor.memberData``
    and its overrides). -1 when the member claims no generation."""
    if assignor == "sticky":
        # Eager: ownership and generation always come from the user data.
        ud = parse_sticky_user_data(sub.user_data)
        return (ud.generation if ud.generation is not None else DEFAULT_GENERATION), ud.previous_assignment
    if sub.generation_id >= 0:
        return sub.generation_id, sub.owned_partitions
    if assignor == "cooperative-sticky":
        gen = parse_cooperative_sticky_user_data(sub.user_data)
        return (gen if gen is not None else DEFAULT_GENERATION), sub.owned_partitions
    return DEFAULT_GENERATION, sub.owned_partitions

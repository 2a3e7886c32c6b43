"""The events the request-log decoder writes, and their JSON.

What lives here: ``Event`` and its subclasses, ``Offset``, checked at import against the
declaration (``state.records``), and the encoders the commands call (``event_json``,
``events_json_lines``, ``events_json_many``).

Structs in the contract's key order, so that one mapping gives both forms: ``event_json``
encodes one straight to JSON bytes (no dict: building dicts, then ``json.dumps`` on them, was
most of a line's time) and ``map_line`` gives dicts (``msgspec.to_builtins``). UNSET: the key
is absent; None is written as null. Created positionally on the hot paths (every field given).
"""

from __future__ import annotations

import json
from typing import Any, ClassVar, Sequence

import msgspec
from msgspec import UNSET, UnsetType

from fencewatch.state.records import PARTITION_OFFSET, EventType, check_names, check_written


class Offset(msgspec.Struct, gc=False):
    """One entry of a commit's ``offsets``; ``metadata`` only when not empty."""
    topic: str
    partition: int
    offset: int
    leader_epoch: int
    metadata: str | UnsetType = UNSET


class Event(msgspec.Struct, tag_field="type", gc=False):
    """The fields every event starts with; ``type`` (the tag) is written first. ``kind``: the
    tag, for callers that route by it."""
    kind: ClassVar[str]
    ts: int
    cluster: str | UnsetType
    group_id: str
    event_id: str
    member_id: str


class Heartbeat(Event, tag=EventType.HEARTBEAT.value):
    kind: ClassVar[str] = EventType.HEARTBEAT.value
    request_epoch: int
    response_epoch: int
    error_code: int


class OffsetCommit(Event, tag=EventType.OFFSET_COMMIT.value):
    kind: ClassVar[str] = EventType.OFFSET_COMMIT.value
    member_epoch: int
    instance_id: str | UnsetType
    offsets: list[Offset]
    error_code: int | UnsetType  # UNSET: partitions the response does not list
    api_version: int | UnsetType  # the request's requestApiVersion (contract §10.1 h)


class TxnOffsetCommit(OffsetCommit, tag=EventType.TXN_OFFSET_COMMIT.value):
    kind: ClassVar[str] = EventType.TXN_OFFSET_COMMIT.value
    transactional_id: str
    producer_id: int
    producer_epoch: int


class MemberLeft(Event, tag=EventType.MEMBER_LEFT.value):
    kind: ClassVar[str] = EventType.MEMBER_LEFT.value
    reason: str
    instance_id: str | UnsetType


class MemberAssignment(Event, tag=EventType.MEMBER_ASSIGNMENT.value):
    kind: ClassVar[str] = EventType.MEMBER_ASSIGNMENT.value
    protocol: str
    member_epoch: int
    previous_member_epoch: int | UnsetType
    assigned: list[dict[str, Any]] | None  # None (carry=False): unchanged
    pending_revocation: list[dict[str, Any]] | None  # None (carry=False): derive it
    subscribed_topics: list[str] | UnsetType
    instance_id: str | UnsetType


class ClassicGeneration(Event, tag=EventType.CLASSIC_GENERATION.value):
    """A JoinGroup answered without error: the generation its join phase gave the member."""
    kind: ClassVar[str] = EventType.CLASSIC_GENERATION.value
    generation: int
    protocol: str | UnsetType
    instance_id: str | UnsetType
    members: list[str] | UnsetType  # the leader's response only


class ClassicSync(msgspec.Struct, tag_field="type", tag=EventType.CLASSIC_SYNC.value, gc=False):
    """The leader's SyncGroup answered without error: the generation's assignment. Not an ``Event``:
    it names no one member."""
    kind: ClassVar[str] = EventType.CLASSIC_SYNC.value
    ts: int
    cluster: str | UnsetType
    group_id: str
    event_id: str
    generation: int
    assignments: dict[str, list[dict[str, Any]]]


class GroupState(msgspec.Struct, tag_field="type", tag=EventType.GROUP_STATE.value, gc=False):
    """A group's state a line shows (a classic group rebalancing again). Not an ``Event``: it names
    no one member."""
    kind: ClassVar[str] = EventType.GROUP_STATE.value
    ts: int
    cluster: str | UnsetType
    group_id: str
    event_id: str
    state: str
    protocol: str


def _check_structs() -> None:
    """Each struct writes declared fields of its type (``state.records``), every required one among them."""
    for struct in (Heartbeat, OffsetCommit, TxnOffsetCommit, MemberLeft, MemberAssignment, ClassicGeneration,
                   ClassicSync, GroupState):
        check_written(f"{__name__}.{struct.__name__}", struct.__struct_config__.tag,
                      ("type", *struct.__struct_fields__))
    check_names(f"{__name__}.Offset", Offset.__struct_fields__, PARTITION_OFFSET.names, record=PARTITION_OFFSET.name)


_check_structs()


def unset(value: Any) -> Any:
    """None -> UNSET: an optional key the line did not give is left out."""
    return UNSET if value is None else value


_ENCODE = msgspec.json.Encoder().encode
_DUMPS = json.JSONEncoder(separators=(",", ":")).encode


def event_json(event: Event) -> bytes:
    """One event as JSON bytes, byte for byte ``json.dumps(dict, separators=(",", ":"))`` of
    its dict (what the bridge wrote before): msgspec writes the same text for ASCII without
    DEL; other text (non-ASCII, DEL: ``json.dumps`` escapes them) takes the dict's way."""
    data = _ENCODE(event)
    if data.isascii() and 127 not in data:  # (an int: a bytes needle is slower here)
        return data
    return _DUMPS(msgspec.to_builtins(event)).encode()


_ENCODE_LINES = msgspec.json.Encoder().encode_lines


def events_json_lines(events: Sequence[Event]) -> bytes:
    """Events as JSON lines, each followed by ``\\n``: ``event_json`` of each, encoded in one
    call (msgspec escapes every control character, so the only newlines are the separators)."""
    data = _ENCODE_LINES(events)
    if data.isascii() and 127 not in data:
        return data
    return b"".join([event_json(e) + b"\n" for e in events])


def events_json_many(events: Sequence[Event]) -> list[bytes]:
    """``[event_json(e) for e in events]``, encoded in one call (``events_json_lines``)."""
    if not events:
        return []
    data = events_json_lines(events).split(b"\n")
    data.pop()
    return data

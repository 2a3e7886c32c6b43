"""Broker request-log lines -> SPEC events (contract §10), with the little state it takes.

What lives here: ``RequestLogBridge``, which turns one line of a broker's
``kafka-request.log`` (logger ``kafka.request.logger`` at DEBUG) into the
SPEC events it means. No I/O, no clock: ``ts`` is the line's own time stamp
(or, for a message-only line, the ``ts`` the caller passes, e.g. the Kafka
record's timestamp).

A line (Kafka's ``RequestChannel.updateRequestMetrics``, 2.8+)::

    [2026-11-20 09:00:00,123] DEBUG Completed request:{JSON} (kafka.request.logger)

or its message alone (``Completed request:{JSON}``), or the bare JSON object.
The JSON is ``RequestConvertToJson.requestDescMetrics``: ``requestHeader``,
``request`` and ``response`` bodies with the camelCase field names of Kafka's
message specs (``clients/src/main/resources/common/message/*.json``); a field
is written only in the versions that have it.

============================  ===============================================
OffsetCommit (8), v2-v10      ``offset_commit``, one per distinct response
                              error code (first appearance order), partitions
                              in request order; v10 names topics by id
TxnOffsetCommit (28), v0-v6   ``txn_offset_commit``, the same way
ConsumerGroupHeartbeat (68)   ``heartbeat``; when answered 0 also
  v0-v1                       ``member_left`` (request epoch -1 / -2) or
                              ``member_assignment`` (an assignment in the
                              response, or a new epoch)
============================  ===============================================

Why state: the coordinator omits an unchanged assignment (``assignment:
null``) and an unchanged owned set / subscription / instance id in the
request, so a new epoch without an assignment means "the one you had". The
bridge remembers, per (group, member), the last epoch, assignment, owned
partitions, subscription and instance id (``carry=True``, the default). A
member it never saw an assignment for gets no ``member_assignment`` until one
arrives (counted ``problem.ASSIGNMENT_NOT_SEEN``). The memory is what the
coordinator itself holds: a member is forgotten on its leave, and on
UNKNOWN_MEMBER_ID / FENCED_MEMBER_EPOCH (the coordinator has dropped it).

``carry=False`` (the Spark job's stateless mapper) writes what one line says
and no more: a successful heartbeat without an assignment gives a
``member_assignment`` with ``"assigned": null`` ("unchanged"), and one whose
request does not repeat the owned partitions ``"pending_revocation": null``
("derive it"); the per-group state resolves both against the member it
already models (``state.assignment.resolve_unchanged_assignment``,
``docs/request-log.md``).

Nothing here raises on bad input: a broken line gives ``[]``, is counted in
``counts`` (``broken.<CODE>``) and its ``(event_id, code, detail)`` is kept in
``problems`` (the newest ``MAX_PROBLEMS``; callers drain it).

Speed (``bench/bench_request_log.py``, ``docs/decisions.md``): a line in Kafka's default
layout, at a second already read once, is cut by position (no regex) and parsed without its
header (the API key sits at a fixed place); a commit's per-partition answers stay
``msgspec.Raw`` and are parsed once per distinct text (``_answers``); the usual one-topic
commit is written as one dict; ``events_many`` (what the commands call) decodes a batch of lines
in one loop, ASCII bytes lines without decoding them to text. ``tests/bridge/test_request_log_golden.py``
holds the outputs to those of the decoder before these paths, byte for byte, and
``tests/bridge/test_request_log_many.py`` ``events_many`` to ``events`` line by line.
"""

from __future__ import annotations

import calendar
import json
import logging
import re
from operator import attrgetter
from collections import Counter, deque
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone, tzinfo
from typing import Annotated, Any, Callable, ClassVar, Mapping, Sequence

import msgspec
from msgspec import UNSET, UnsetType

from fencewatch.state.records import PARTITION_OFFSET, EventType, check_names, check_written
from fencewatch.streaming.ingest.consumer_offsets.mapping import TopicNames
from fencewatch.streaming.ingest.consumer_offsets.records import parse_topic_id, uuid_to_standard_string

__all__ = ["RequestLogBridge", "Event", "event_json", "events_json_lines", "events_json_many", "OFFSET_COMMIT",
           "TXN_OFFSET_COMMIT", "CONSUMER_GROUP_HEARTBEAT", "COORDINATOR_ERRORS", "DEFAULT_LINES_TOPIC", "BATCH_LINES"]

log = logging.getLogger(__name__)

OFFSET_COMMIT, TXN_OFFSET_COMMIT, CONSUMER_GROUP_HEARTBEAT = 8, 28, 68
# Answers that say "not me": the exchange never reached a group (dropped, counted).
COORDINATOR_ERRORS = {14: "COORDINATOR_LOAD_IN_PROGRESS", 15: "COORDINATOR_NOT_AVAILABLE", 16: "NOT_COORDINATOR"}
UNKNOWN_MEMBER_ID, FENCED_MEMBER_EPOCH = 25, 110
LEAVE_GROUP_MEMBER_EPOCH, LEAVE_GROUP_STATIC_MEMBER_EPOCH = -1, -2
DEFAULT_LINES_TOPIC = "fencewatch.request-log"
MAX_PROBLEMS = 10_000
# Lines per ``events_many`` call in the commands: a batch's lines and events stay in the core's
# caches (interleaved A/B, 100,000 bench lines as bytes -> JSON records, medians of 3, lines/CPU-s:
# 10 per call 198k, 25 208k, 50 211k, 100 210k, 200 205k, 1,000 ~200k); far below MAX_PROBLEMS,
# so a batch's problems are never dropped.
BATCH_LINES = 50

_MARKER = "Completed request:"
# The usual line, up to the API key: ``[2026-11-20 09:00:00,123] DEBUG Completed request:{"isForwarded":
# false,"requestHeader":{"requestApiKey":8,`` (RequestConvertToJson writes the keys in this order).
_USUAL = re.compile(r'\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),(\d{3})\] [A-Z]+ Completed request:'
                    r'(\{)"isForwarded":(?:true|false),"requestHeader":\{"requestApiKey":(\d{1,5}),')
_USUAL_END = "} (kafka.request.logger)"
# The same line read at fixed positions, without the regex: log4j's default ``%d`` is 23
# characters, so ``]`` is at 24, the JSON at 50 and the API key's digits at 104..106 (three
# characters cover ``8,"``, ``28,`` and ``68,``); a line of any other shape takes the regex's way.
_FAST_HEAD = '] DEBUG Completed request:{"isForwarded":false,"requestHeader":{"requestApiKey":'
_FAST_BODY = 24 + len("] DEBUG Completed request:")
_FAST_API = 24 + len(_FAST_HEAD) + 3
_FAST_APIS = {_FAST_HEAD + '8,"': OFFSET_COMMIT, _FAST_HEAD + "28,": TXN_OFFSET_COMMIT,
              _FAST_HEAD + "68,": CONSUMER_GROUP_HEARTBEAT}
_FAST_END = len(_USUAL_END) - 1
_MILLIS = {f"{i:03d}": i for i in range(1000)}
# The same look-ups for ASCII bytes lines (``events_many``): bytes keys next to the text ones
# (a bytes key never equals a str one); ``_fast_seconds`` holds both forms of each second.
_FAST_APIS.update({k.encode(): v for k, v in _FAST_APIS.items()})
_MILLIS.update({k.encode(): v for k, v in _MILLIS.items()})
_USUAL_END_BYTES = _USUAL_END.encode()
_LOGGER = "(kafka.request.logger)"
_API_KEY = '"requestApiKey"'
_INT64 = 1 << 63

# -- the wire shapes, as Kafka's JsonConverter writes them (absent = not in this version) --------

_Long = Annotated[int, msgspec.Meta(ge=-_INT64, le=_INT64 - 1)]
_Int = Annotated[int, msgspec.Meta(ge=-(1 << 31), le=(1 << 31) - 1)]


class _Header(msgspec.Struct, rename="camel", gc=False):
    request_api_key: _Int
    request_api_version: _Int = -1


class _CommitPartition(msgspec.Struct, rename="camel", gc=False):
    partition_index: _Int
    committed_offset: _Long
    committed_leader_epoch: _Int = -1  # v6+ (TxnOffsetCommit v2+)
    committed_metadata: str | None = None


class _CommitTopic(msgspec.Struct, rename="camel", gc=False):
    partitions: list[_CommitPartition]
    name: str | None = None  # up to v9 (TxnOffsetCommit v5)
    topic_id: str | None = None  # v10 (TxnOffsetCommit v6)


class _CommitRequest(msgspec.Struct, rename="camel", gc=False):
    group_id: str
    topics: list[_CommitTopic]
    generation_id_or_member_epoch: _Int | None = None  # since 3.6 (TxnOffsetCommit: 4.4)
    generation_id: _Int | None = None  # the same field before
    member_id: str | None = None
    group_instance_id: str | None = None  # v7+ (TxnOffsetCommit v3+)
    transactional_id: str | None = None  # TxnOffsetCommit only
    producer_id: _Long | None = None
    producer_epoch: _Int | None = None


class _ResponsePartition(msgspec.Struct, rename="camel", gc=False):
    partition_index: _Int
    error_code: _Int


class _ResponseTopic(msgspec.Struct, rename="camel", gc=False):
    # The answers' text, parsed by RequestLogBridge._answers once per distinct text: it holds no
    # offsets, so a member's commits are answered with the same text while its partitions hold.
    partitions: msgspec.Raw
    name: str | None = None
    topic_id: str | None = None


class _CommitResponse(msgspec.Struct, rename="camel", gc=False):
    topics: list[_ResponseTopic] = []


class _CommitLine(msgspec.Struct, rename="camel", gc=False):
    request_header: _Header
    request: _CommitRequest
    response: _CommitResponse | None = None


class _TopicPartitions(msgspec.Struct, rename="camel", gc=False):
    topic_id: str
    partitions: list[_Int]


class _HeartbeatRequest(msgspec.Struct, rename="camel", gc=False):
    group_id: str
    member_epoch: _Int
    member_id: str | None = None
    instance_id: str | None = None
    subscribed_topic_names: list[str] | None = None
    subscribed_topic_regex: str | None = None  # v1
    topic_partitions: list[_TopicPartitions] | None = None


class _Assignment(msgspec.Struct, rename="camel", gc=False):
    topic_partitions: list[_TopicPartitions]


class _HeartbeatResponse(msgspec.Struct, rename="camel", gc=False):
    error_code: _Int
    member_epoch: _Int = -1
    member_id: str | None = None
    assignment: _Assignment | None = None


class _HeartbeatLine(msgspec.Struct, rename="camel", gc=False):
    request_header: _Header
    request: _HeartbeatRequest
    response: _HeartbeatResponse


class _CommitBody(msgspec.Struct, rename="camel", gc=False):
    """``_CommitLine`` without the header, for lines whose API key was read by position."""
    request: _CommitRequest
    response: _CommitResponse | None = None


class _HeartbeatBody(msgspec.Struct, rename="camel", gc=False):
    request: _HeartbeatRequest
    response: _HeartbeatResponse


_DECODERS = {
    OFFSET_COMMIT: msgspec.json.Decoder(_CommitLine).decode,
    TXN_OFFSET_COMMIT: msgspec.json.Decoder(_CommitLine).decode,
    CONSUMER_GROUP_HEARTBEAT: msgspec.json.Decoder(_HeartbeatLine).decode,
}
_DECODE_ANSWERS = msgspec.json.Decoder(list[_ResponsePartition]).decode
MAX_ANSWERS = 20_000  # distinct response texts remembered (a few per member)
# The header skipped unparsed (~5% of a heartbeat's parse): the key was read at its fixed place.
_BODY_DECODERS = {
    OFFSET_COMMIT: msgspec.json.Decoder(_CommitBody).decode,
    TXN_OFFSET_COMMIT: msgspec.json.Decoder(_CommitBody).decode,
    CONSUMER_GROUP_HEARTBEAT: msgspec.json.Decoder(_HeartbeatBody).decode,
}


# -- the events written ------------------------------------------------------------------------
# Structs in the SPEC key order, so that one mapping gives both forms: ``event_json`` encodes
# one straight to JSON bytes (no dict: building dicts, then ``json.dumps`` on them, was most of
# a line's time) and ``map_line`` gives dicts (``msgspec.to_builtins``). UNSET: the key is
# absent; None is written as null. Created positionally on the hot paths (every field given).


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


def _check_structs() -> None:
    """Each struct writes declared fields of its type (``state.records``), every required one among them."""
    for struct in (Heartbeat, OffsetCommit, TxnOffsetCommit, MemberLeft, MemberAssignment):
        check_written(f"{__name__}.{struct.__name__}", struct.__struct_config__.tag,
                      ("type", *struct.__struct_fields__))
    check_names(f"{__name__}.Offset", Offset.__struct_fields__, PARTITION_OFFSET.names, record=PARTITION_OFFSET.name)


_check_structs()


_ENCODE = msgspec.json.Encoder().encode
_DUMPS = json.JSONEncoder(separators=(",", ":")).encode


def event_json(event: Event) -> bytes:
    """One event as JSON bytes, byte for byte ``json.dumps(dict, separators=(",", ":"))`` of
    its dict (what the bridge wrote before): msgspec writes the same text for ASCII without
    DEL; other text (non-ASCII, DEL: ``json.dumps`` escapes them) takes the dict's way."""
    data = _ENCODE(event)
    if data.isascii() and 127 not in data:  # (an int: a bytes needle is 5x slower here)
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


def _unset(value: Any) -> Any:
    return UNSET if value is None else value


class _Broken(Exception):
    """A line that cannot be used: ``code`` (stable) and ``detail``."""

    def __init__(self, code: str, detail: str) -> None:
        super().__init__(code, detail)
        self.code, self.detail = code, detail


@dataclass(slots=True)
class _Member:
    """What the coordinator last told (or was told by) one member."""

    epoch: int
    assigned: list[dict[str, Any]] | None = None  # resolved [{topic, partitions}], None: never seen
    owned: list[dict[str, Any]] | None = None  # the request's topicPartitions, last sent
    subscribed: list[str] | None = None
    instance_id: str | None = None


class RequestLogBridge:
    """Request-log lines -> SPEC events as dicts (the shape ``fencewatch bridge`` writes).

    ``topic_ids``: topic id -> name (Kafka's base64 form or UUID strings as keys;
    a ``TopicNames`` is shared as is, so a live caller can teach it names).
    ``tz``: the zone of time stamps without an offset (default UTC).
    """

    def __init__(self, topic_ids: Mapping[str, str] | TopicNames | None = None, *, tz: tzinfo | None = None,
                 cluster: str | None = None, carry: bool = True) -> None:
        self.topic_names = topic_ids if isinstance(topic_ids, TopicNames) else TopicNames(topic_ids)
        self.tz = tz or timezone.utc
        self.cluster = cluster
        self.carry = carry
        self.members: dict[tuple[str, str], _Member] = {}
        self._counts: Counter = Counter()
        self._lines = self._events = self._heartbeats = self._commits = 0  # folded into counts
        self.problems: deque[tuple[str, str, str]] = deque(maxlen=MAX_PROBLEMS)
        self.unresolved_ids = 0  # topic ids met that no name is known for (live callers refresh metadata)
        # (API name, error name) -> answers that never reached a group (contract §10.1 a)
        self.routing: Counter = Counter()
        self._seconds: dict[str, int] = {}
        self._answer_memo: dict[bytes, tuple[tuple[int, ...], tuple[int, ...], int | None]] = {}
        self._fast_seconds: dict[str | bytes, int] = {}  # "[2026-11-20 09:00:00," -> epoch ms, of lines the regex read
        self._ids: dict[str, str] = {}
        # TopicNames' own dict, so that "names learned since?" is a len() in C per resolved id
        # (TopicNames.__len__, a Python call, was ~5% of a v10 commit's time)
        self._name_table = self.topic_names._names
        self._ids_known = len(self._name_table)

    # -- entry point ------------------------------------------------------------------------

    def map_line(self, line: str | bytes, event_id: str, *, ts: int | None = None) -> list[dict[str, Any]]:
        """``events`` as dicts (for callers that want them; the commands write ``event_json``)."""
        return msgspec.to_builtins(self.events(line, event_id, ts=ts))

    def map_line_json(self, line: str | bytes, event_id: str, *, ts: int | None = None) -> list[bytes]:
        """``events`` as JSON bytes, one per event (``event_json``)."""
        return [event_json(e) for e in self.events(line, event_id, ts=ts)]

    def events(self, line: str | bytes, event_id: str, *, ts: int | None = None) -> list[Event]:
        """The SPEC events of one line, in order; ``[]`` for a line of another API or logger
        (counted ``skipped.*``) or a broken one (counted ``broken.*``, kept in ``problems``).
        ``ts`` is used when the line has no time stamp of its own."""
        self._lines += 1
        try:
            if type(line) is not str:
                try:
                    line = bytes(line).decode("utf-8")
                except (UnicodeDecodeError, TypeError) as exc:
                    raise _Broken("BAD_ENCODING", str(exc)) from None
                if line.endswith("\n"):  # a file's line (the offline bridge): without its end, the
                    line = line.rstrip("\r\n")  # position-based way below takes it, not the regex's
            if ((api := _FAST_APIS.get(line[24:_FAST_API])) is not None
                    and (base := self._fast_seconds.get(line[:21])) is not None
                    and (ms := _MILLIS.get(line[21:24])) is not None and line.endswith(_USUAL_END)):
                # Kafka's default layout, at a second the regex's way has already read (``[`` and
                # the ``,`` are in the key): time stamp, API key and JSON by position.
                line_ts = base + ms
                body = line[_FAST_BODY:-_FAST_END]
                decode = _BODY_DECODERS[api]
                header = False
            else:
                if (line.startswith(_FAST_HEAD, 24) and line[:21] in self._fast_seconds and line[21:24] in _MILLIS
                        and line.endswith(_USUAL_END)):
                    # Another API in the default layout (a broker without the log4j2 filter logs
                    # every Fetch): skipped on its key's digits, as the regex would read them.
                    j = line.find(",", _FAST_API - 3, _FAST_API + 3)
                    key = line[_FAST_API - 3:j]
                    if j > 0 and key.isdigit() and key.isascii() and int(key) not in _DECODERS:
                        self._counts["skipped.OTHER_API"] += 1
                        return []
                where = self._locate(line, ts)
                if where is None:
                    return []
                api, body, line_ts = where
                decode = _DECODERS.get(api)
                if decode is None:
                    self._counts["skipped.OTHER_API"] += 1
                    return []
                header = True
            try:
                parsed = decode(body)
            except msgspec.ValidationError as exc:
                raise _Broken("BAD_FIELD", str(exc)) from None
            except msgspec.DecodeError as exc:
                raise _Broken("BAD_JSON", str(exc)) from None
            except UnicodeEncodeError as exc:  # a lone surrogate (text decoded with surrogateescape)
                raise _Broken("BAD_ENCODING", str(exc)) from None
            if header and parsed.request_header.request_api_key != api:  # the text search met a nested key first
                raise _Broken("BAD_FIELD", "requestApiKey is not the header's first key")
            if api == CONSUMER_GROUP_HEARTBEAT:
                self._heartbeats += 1
                events = self._heartbeat(parsed, line_ts, event_id)
            else:
                events = self._commit(parsed, api == TXN_OFFSET_COMMIT, line_ts, event_id)
        except _Broken as exc:
            self._broken(event_id, exc)
            return []
        except Exception as exc:  # a bug, never the input's fault: keep going, loudly
            self._internal(event_id, exc)
            return []
        self._events += len(events)
        return events

    def events_many(self, lines: Sequence[str | bytes], event_ids: Sequence[str],
                    tss: Sequence[int | None] | None = None, *,
                    on_unresolved: Callable[[], None] | None = None) -> list[list[Event]]:
        """``events`` of many lines at once (``event_ids[i]``, ``tss[i]``: line i's id and
        record time stamp): one list per line, in order, with the same events, counts and
        problems as ``events`` line by line. What the commands call: the lines of Kafka's
        default layout are decoded in this one loop (no call per line, the steady heartbeat
        written here; bytes lines that are ASCII are parsed without decoding them to text),
        every other line goes through ``events``. ``on_unresolved`` is called after a line
        that met a topic id without a name (``unresolved_ids`` grew), before the next line,
        as the live bridge did between lines (it refreshes the names)."""
        out: list[list[Event]] = []
        append = out.append
        events_of = self.events
        fast_apis, fast_seconds, millis, end = _FAST_APIS, self._fast_seconds, _MILLIS, _USUAL_END
        end_bytes, end_newline = _USUAL_END_BYTES, _USUAL_END_BYTES + b"\n"
        decode_heartbeat, decode_commit = _BODY_DECODERS[CONSUMER_GROUP_HEARTBEAT], _BODY_DECODERS[OFFSET_COMMIT]
        members = self.members
        steady = self.carry  # carry=False: every successful heartbeat says its membership
        cluster = UNSET if self.cluster is None else self.cluster
        heartbeat, assignment, on_heartbeat, on_commit = Heartbeat, MemberAssignment, self._heartbeat, self._commit
        n_lines = n_heartbeats = n_events = 0
        unresolved = self.unresolved_ids
        try:
            for i, line in enumerate(lines):
                if on_unresolved is not None and self.unresolved_ids != unresolved:
                    unresolved = self.unresolved_ids
                    on_unresolved()
                if type(line) is bytes and line.isascii():
                    # The commands' lines are bytes: ASCII ones (valid UTF-8, so what ``events``
                    # would decode them to) are read by position and parsed as they are.
                    if ((api := fast_apis.get(line[24:_FAST_API])) is None
                            or (base := fast_seconds.get(line[:21])) is None
                            or (ms := millis.get(line[21:24])) is None):
                        append(events_of(line, event_ids[i], ts=None if tss is None else tss[i]))
                        continue
                    if line.endswith(end_bytes):
                        body = line[_FAST_BODY:-_FAST_END]
                    elif line.endswith(end_newline):  # a file's line
                        body = line[_FAST_BODY:-_FAST_END - 1]
                    else:
                        append(events_of(line, event_ids[i], ts=None if tss is None else tss[i]))
                        continue
                elif type(line) is str:
                    if ((api := fast_apis.get(line[24:_FAST_API])) is None
                            or (base := fast_seconds.get(line[:21])) is None
                            or (ms := millis.get(line[21:24])) is None or not line.endswith(end)):
                        append(events_of(line, event_ids[i], ts=None if tss is None else tss[i]))
                        continue
                    body = line[_FAST_BODY:-_FAST_END]
                else:  # other bytes, bytearray, memoryview: ``events`` decodes them or says why not
                    append(events_of(line, event_ids[i], ts=None if tss is None else tss[i]))
                    continue
                eid = event_ids[i]
                try:
                    parsed = (decode_heartbeat if api == CONSUMER_GROUP_HEARTBEAT else decode_commit)(body)
                except (msgspec.DecodeError, UnicodeEncodeError):  # the line's way says why
                    append(events_of(line, eid, ts=None if tss is None else tss[i]))
                    continue
                n_lines += 1
                if api == CONSUMER_GROUP_HEARTBEAT:
                    n_heartbeats += 1
                    req, resp = parsed.request, parsed.response
                    if (resp.error_code == 0 and resp.assignment is None and req.topic_partitions is None
                            and req.subscribed_topic_names is None and req.instance_id is None):
                        # a heartbeat that says nothing new (most of them)
                        group_id, member_id = req.group_id, req.member_id or resp.member_id or ""
                        epoch = resp.member_epoch
                        if steady:
                            m = members.get((group_id, member_id))
                            if m is not None and m.epoch == epoch:  # the member as the bridge knows it
                                append([heartbeat(base + ms, cluster, group_id, eid, member_id, req.member_epoch,
                                                  epoch, 0)])
                                n_events += 1
                                continue
                        elif req.member_epoch >= 0:  # (carry=False) not a leave: "assignment unchanged"
                            append([heartbeat(base + ms, cluster, group_id, eid, member_id, req.member_epoch, epoch, 0),
                                    assignment(base + ms, cluster, group_id, eid, member_id, "consumer", epoch, UNSET,
                                               None, [], UNSET, UNSET)])
                            n_events += 2
                            continue
                try:
                    if api == CONSUMER_GROUP_HEARTBEAT:
                        events = on_heartbeat(parsed, base + ms, eid)
                    else:
                        events = on_commit(parsed, api == TXN_OFFSET_COMMIT, base + ms, eid)
                except _Broken as exc:
                    self._broken(eid, exc)
                    events = []
                except Exception as exc:  # a bug, never the input's fault: keep going, loudly
                    self._internal(eid, exc)
                    events = []
                n_events += len(events)
                append(events)
        finally:
            self._lines += n_lines
            self._heartbeats += n_heartbeats
            self._events += n_events
        if on_unresolved is not None and self.unresolved_ids != unresolved:
            on_unresolved()
        return out

    def _broken(self, event_id: str, exc: _Broken) -> None:
        self._counts[f"broken.{exc.code}"] += 1
        self.problems.append((event_id, exc.code, exc.detail[:300]))

    def _dropped(self, api: str, code: int) -> None:
        """contract §10.1 a: a coordinator-routing answer never reached the group; no event, counted
        ``dropped.<NAME>`` and in ``routing`` per API and error."""
        name = COORDINATOR_ERRORS[code]
        self._counts[f"dropped.{name}"] += 1
        self.routing[(api, name)] += 1

    def _internal(self, event_id: str, exc: Exception) -> None:
        log.exception("request-log line %s", event_id)
        self._counts["broken.INTERNAL"] += 1
        self.problems.append((event_id, "INTERNAL", f"{type(exc).__name__}: {exc}"[:300]))

    @property
    def counts(self) -> Counter:
        """Lines, events, lines per API, and every ``skipped.*`` / ``broken.*`` / ``dropped.*`` /
        ``problem.*`` count. The per-line counts are plain integers on the hot path, folded in
        here (a ``Counter`` update per line cost 3-4% of a line's time)."""
        c = self._counts
        for key, attr in _FAST_COUNTS:
            n = getattr(self, attr)
            if n:
                c[key] += n
                setattr(self, attr, 0)
        return c

    def summary(self) -> str:
        """One line of counts, for stderr / logs."""
        c = self.counts
        rest = {k: v for k, v in sorted(c.items()) if k not in ("lines", "events")}
        return f"{c['lines']} lines, {c['events']} events" + (f", {rest}" if rest else "")

    # -- the line around the JSON ----------------------------------------------------------

    def _locate(self, line: str, ts: int | None) -> tuple[int | None, str, int] | None:
        """(API key, JSON text, time stamp in epoch ms) of any accepted line form, or None for
        a line that is not a completed request (counted)."""
        m = _USUAL.match(line)
        end = line.rfind(_USUAL_END) if m is not None else -1
        if end > 0 and not line[end + len(_USUAL_END):].strip():
            # The default layout: one C-level match reads the time stamp and the API key, and
            # the JSON is cut out by position.
            second = m.group(1)
            base = self._seconds.get(second)
            if base is None:
                base = self._second_ms(second + ",000", second)
            if len(self._fast_seconds) > 100_000:
                self._fast_seconds.clear()
            self._fast_seconds[line[:21]] = base
            self._fast_seconds[line[:21].encode()] = base  # (events_many's bytes lines)
            return int(m.group(4)), line[m.start(3):end + 1], base + int(m.group(2))
        body, line_ts = self._split(line)
        if body is None:
            return None
        if line_ts is None:
            if ts is None:
                raise _Broken("MISSING_TIMESTAMP", "a message-only line and no record timestamp")
            line_ts = ts
        return _api_key(body), body, line_ts

    def _split(self, line: str) -> tuple[str | None, int | None]:
        """(the JSON text, the line's time stamp in epoch ms or None); (None, None) for a line
        that is not a completed request (counted)."""
        i = line.find(_MARKER)
        if i < 0:
            stripped = line.strip()
            if stripped.startswith("{"):
                return stripped, None  # the bare JSON object
            self._counts["skipped.EMPTY" if not stripped else "skipped.OTHER_LOGGER"] += 1
            return None, None
        start = i + len(_MARKER)
        end = line.rfind("}")
        if end < start:
            raise _Broken("BAD_JSON", "no JSON object after 'Completed request:'")
        tail = line[end + 1:].strip()
        if tail and tail != _LOGGER:
            if tail.startswith("(") and tail.endswith(")") and " " not in tail:
                self._counts["skipped.OTHER_LOGGER"] += 1  # another logger's "Completed request:"
                return None, None
            raise _Broken("BAD_JSON", f"text after the JSON object: {tail[:40]!r}")
        ts = None
        j = line.rfind("[", 0, i)  # the last bracket before the message: a shipper may prefix its own
        if j >= 0:
            k = line.find("]", j, i)
            if k < 0:
                raise _Broken("BAD_TIMESTAMP", "'[' without ']' before the message")
            ts = self._timestamp(line[j + 1:k])
        return line[start:end + 1], ts

    def _timestamp(self, text: str) -> int:
        """``2026-11-20 09:00:00,123`` (log4j's default ``%d``) in ``tz``, or ISO 8601 with
        ``T`` and an offset (``...,123+01:00`` / ``Z``), which wins over ``tz``. The epoch
        milliseconds of each second are computed once (lines come many per second)."""
        key = text[:19] if len(text) == 23 else text[:19] + "|" + text[23:]
        base = self._seconds.get(key)
        if base is None:
            base = self._second_ms(text, key)
        ms = text[20:23]
        if text[19:20] not in (",", ".") or not ms.isdigit() or not ms.isascii():
            raise _Broken("BAD_TIMESTAMP", f"not a log4j time stamp: {text[:40]!r}")
        return base + int(ms)

    def _second_ms(self, text: str, key: str) -> int:
        if len(text) < 23 or text[4] != "-" or text[7] != "-" or text[10] not in " T" or text[13] != ":" \
                or text[16] != ":":
            raise _Broken("BAD_TIMESTAMP", f"not a log4j time stamp: {text[:40]!r}")
        digits = text[:4] + text[5:7] + text[8:10] + text[11:13] + text[14:16] + text[17:19]
        try:
            if not (digits.isdigit() and digits.isascii()):
                raise ValueError("not digits")
            dt = datetime(int(text[:4]), int(text[5:7]), int(text[8:10]), int(text[11:13]), int(text[14:16]),
                          int(text[17:19]))
            offset = text[23:]
            dt = dt.replace(tzinfo=_parse_offset(offset) if offset else self.tz)
            base = calendar.timegm(dt.utctimetuple()) * 1000
        except (ValueError, OverflowError) as exc:
            raise _Broken("BAD_TIMESTAMP", f"{text[:40]!r}: {exc}") from None
        if len(self._seconds) > 100_000:
            self._seconds.clear()
        self._seconds[key] = base
        return base

    # -- OffsetCommit / TxnOffsetCommit ------------------------------------------------------

    def _commit(self, line: _CommitLine, transactional: bool, ts: int, eid: str) -> list[Event]:
        req = line.request
        resp = line.response
        resp_topics = resp.topics if resp is not None else []
        # The answers first: the line counts as decoded once all of it is read, as when the
        # response was parsed with the rest.
        if len(resp_topics) == 1:
            answers = [self._answers(0, resp_topics[0].partitions)]
        else:
            answers = [self._answers(i, r.partitions) for i, r in enumerate(resp_topics)]
        if transactional:
            self._counts["TXN_OFFSET_COMMIT"] += 1
        else:
            self._commits += 1
        topics = req.topics
        by_code = None
        if len(topics) == 1 and len(answers) == 1:
            # The usual request: one topic, answered in the same order with one code for all of
            # its partitions; the same result as _offsets_by_code's loop, in fewer steps.
            t, r = topics[0], resp_topics[0]
            parts = t.partitions
            indices, _, code = answers[0]
            if (code is not None and parts and r.name == t.name and r.topic_id == t.topic_id
                    and tuple(map(_PARTITION_INDEX, parts)) == indices):
                if code in COORDINATOR_ERRORS:  # contract §10.1 a: never reached the group
                    self._dropped("TxnOffsetCommit" if transactional else "OffsetCommit", code)
                    return []
                topic = t.name
                if topic is None:
                    if t.topic_id is None:
                        raise _Broken("MISSING_FIELD", "request.topics[0]: neither name nor topicId")
                    topic = self._resolve(t.topic_id)
                rows = [_Offset(topic, p.partition_index, p.committed_offset, p.committed_leader_epoch)
                        for p in parts]
                if any(map(_METADATA, parts)):
                    _add_metadata(rows, parts)
                if self.cluster is None and req.group_instance_id is None and not transactional:
                    epoch = req.generation_id_or_member_epoch
                    if epoch is None:
                        epoch = req.generation_id if req.generation_id is not None else -1
                    return [OffsetCommit(ts, UNSET, req.group_id, eid, req.member_id or "", epoch, UNSET, rows,
                                         code)]
                by_code = {code: rows}
        if by_code is None:
            by_code = self._offsets_by_code(topics, resp_topics, answers)
        if not by_code:
            self._counts["skipped.EMPTY_COMMIT"] += 1
            return []
        for code in [c for c in by_code if c in COORDINATOR_ERRORS]:  # contract §10.1 a: no event
            del by_code[code]
            self._dropped("TxnOffsetCommit" if transactional else "OffsetCommit", code)
        if not by_code:
            return []
        epoch = req.generation_id_or_member_epoch
        if epoch is None:
            epoch = req.generation_id if req.generation_id is not None else -1
        member_id = req.member_id or ""
        cluster, instance_id = _unset(self.cluster), _unset(req.group_instance_id)
        out: list[Event] = []
        for code, offsets in by_code.items():
            if transactional:
                out.append(TxnOffsetCommit(
                    ts, cluster, req.group_id, eid, member_id, epoch, instance_id, offsets, _unset(code),
                    req.transactional_id if req.transactional_id is not None else "",
                    req.producer_id if req.producer_id is not None else -1,
                    req.producer_epoch if req.producer_epoch is not None else -1))
            else:
                out.append(OffsetCommit(ts, cluster, req.group_id, eid, member_id, epoch, instance_id, offsets,
                                        _unset(code)))
        if None in by_code:
            self._counts["problem.NO_RESPONSE_PARTITION"] += 1
        return out

    def _offsets_by_code(self, topics: list[_CommitTopic], resp_topics: list[_ResponseTopic],
                         answers: list[tuple[tuple[int, ...], tuple[int, ...], int | None]]
                         ) -> dict[int | None, list[dict[str, Any]]]:
        """A commit's offsets grouped by the response's error code (first appearance order),
        partitions in request order; None: a partition the response does not list."""
        n_resp = len(resp_topics)
        lookup: dict[tuple[str | None, int], int] | None = None
        by_code: dict[int | None, list[dict[str, Any]]] = {}
        for i, t in enumerate(topics):
            name, topic_id, parts = t.name, t.topic_id, t.partitions
            if not parts:
                continue
            if name is not None:
                topic = name
            elif topic_id is not None:
                topic = self._resolve(topic_id)
            else:
                raise _Broken("MISSING_FIELD", f"request.topics[{i}]: neither name nor topicId")
            r = resp_topics[i] if i < n_resp else None
            if (r is not None and r.name == name and r.topic_id == topic_id
                    and answers[i][0] == tuple(map(_PARTITION_INDEX, parts))):
                codes_of: list[int | None] = list(answers[i][1])  # by position, as answered
            else:
                if lookup is None:
                    lookup = {(a.name if a.name is not None else a.topic_id, p): c
                              for a, (indices, codes, _) in zip(resp_topics, answers) for p, c in zip(indices, codes)}
                key = name if name is not None else topic_id
                codes_of = [lookup.get((key, p.partition_index)) for p in parts]
            rows = self._rows(topic, parts)
            first = codes_of[0] if codes_of else None
            if codes_of.count(first) == len(codes_of):  # one answer for the whole topic: the usual case
                group = by_code.get(first)
                if group is None:
                    by_code[first] = rows
                else:
                    group.extend(rows)
            else:
                for o, c in zip(rows, codes_of):
                    by_code.setdefault(c, []).append(o)
        return by_code

    def _answers(self, i: int, raw: msgspec.Raw) -> tuple[tuple[int, ...], tuple[int, ...], int | None]:
        """(partition indices, error codes, the one code of all or None) of response topic ``i``."""
        key = bytes(raw)
        answers = self._answer_memo.get(key)
        if answers is None:
            try:
                parts = _DECODE_ANSWERS(key)
            except msgspec.ValidationError as exc:  # msgspec's path, from the document's root as before
                raise _Broken("BAD_FIELD", str(exc).replace("`$", f"`$.response.topics[{i}].partitions", 1)) from None
            except msgspec.DecodeError as exc:  # not reached: the line's parse checked the syntax
                raise _Broken("BAD_JSON", str(exc)) from None
            codes = tuple(map(_ERROR_CODE, parts))
            one = codes[0] if codes and codes.count(codes[0]) == len(codes) else None
            answers = (tuple(map(_PARTITION_INDEX, parts)), codes, one)
            if len(self._answer_memo) >= MAX_ANSWERS:
                self._answer_memo.clear()
            self._answer_memo[key] = answers
        return answers

    @staticmethod
    def _rows(topic: str, parts: list[_CommitPartition]) -> list[Offset]:
        """SPEC ``offsets`` entries; ``metadata`` only when not empty."""
        rows = [_Offset(topic, p.partition_index, p.committed_offset, p.committed_leader_epoch) for p in parts]
        if any(map(_METADATA, parts)):
            _add_metadata(rows, parts)
        return rows

    # -- ConsumerGroupHeartbeat --------------------------------------------------------------

    def _heartbeat(self, line: _HeartbeatLine, ts: int, eid: str) -> list[Event]:
        req, resp = line.request, line.response
        code = resp.error_code
        if code and code in COORDINATOR_ERRORS:
            self._dropped("ConsumerGroupHeartbeat", code)
            return []
        group_id = req.group_id
        member_id = req.member_id or resp.member_id or ""
        cluster = self.cluster
        hb = Heartbeat(ts, UNSET if cluster is None else cluster, group_id, eid, member_id, req.member_epoch,
                       resp.member_epoch, code)
        key = (group_id, member_id)
        if (code == 0 and resp.assignment is None and req.topic_partitions is None and self.carry
                and req.subscribed_topic_names is None and req.instance_id is None):
            m = self.members.get(key)
            if m is not None and m.epoch == resp.member_epoch:
                return [hb]  # the steady heartbeat, most of them: nothing changed
        return self._membership(req, resp, hb, key, ts, eid)

    def _membership(self, req: _HeartbeatRequest, resp: _HeartbeatResponse, hb: Heartbeat,
                    key: tuple[str, str], ts: int, eid: str) -> list[Event]:
        """``[hb]`` and the membership event a heartbeat implies, if any (contract §10)."""
        out: list[Event] = [hb]
        cluster = _unset(self.cluster)
        code = resp.error_code
        if code != 0:
            if code in (UNKNOWN_MEMBER_ID, FENCED_MEMBER_EPOCH) and self.carry:
                self.members.pop(key, None)  # the coordinator no longer has this member
            return out
        if req.member_epoch in (LEAVE_GROUP_MEMBER_EPOCH, LEAVE_GROUP_STATIC_MEMBER_EPOCH):
            reason = "static_leave" if req.member_epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH else "leave"
            m = self.members.pop(key, None)
            instance_id = req.instance_id if req.instance_id is not None else (m.instance_id if m else None)
            out.append(MemberLeft(ts, cluster, key[0], eid, key[1], reason, _unset(instance_id)))
            return out
        new_epoch = resp.member_epoch
        assigned = self._tps(resp.assignment.topic_partitions) if resp.assignment is not None else None
        owned = self._tps(req.topic_partitions) if req.topic_partitions is not None else None
        subscribed = sorted(set(req.subscribed_topic_names)) if req.subscribed_topic_names is not None else None
        if not self.carry:
            out.append(MemberAssignment(
                ts, cluster, key[0], eid, key[1], "consumer", new_epoch, UNSET, assigned,
                # null: derived by the group state from the member it models (the owned set not sent)
                [] if assigned is None else _minus(owned, assigned) if owned is not None else None,
                _unset(subscribed), _unset(req.instance_id)))
            return out
        m = self.members.get(key)
        if m is None:
            m = self.members[key] = _Member(epoch=req.member_epoch)
            previous = None
        else:
            previous = m.epoch
        if owned is not None:
            m.owned = owned
        if subscribed is not None:
            m.subscribed = subscribed
        if req.instance_id is not None:
            m.instance_id = req.instance_id
        changed = assigned is not None or previous != new_epoch
        m.epoch = new_epoch
        if assigned is not None:
            m.assigned = assigned
        if not changed:
            return out
        if m.assigned is None:
            self._counts["problem.ASSIGNMENT_NOT_SEEN"] += 1  # joined before we looked; wait for the next one
            return out
        out.append(MemberAssignment(ts, cluster, key[0], eid, key[1], "consumer", new_epoch, _unset(previous),
                                    m.assigned, _minus(m.owned, m.assigned) if m.owned else [],
                                    _unset(m.subscribed), _unset(m.instance_id)))
        return out

    # -- topic ids -------------------------------------------------------------------------

    def _resolve(self, topic_id: str) -> str:
        """Kafka's base64url id -> the topic's name, or its standard UUID string if unknown."""
        if self._ids_known != len(self._name_table):  # names learned since: forget the misses
            self._ids.clear()
            self._ids_known = len(self._name_table)
        name = self._ids.get(topic_id)
        if name is None:
            try:
                raw = parse_topic_id(topic_id)
            except (ValueError, TypeError) as exc:
                raise _Broken("BAD_TOPIC_ID", f"{topic_id[:40]!r}: {exc}") from None
            name = self.topic_names.get(raw)
            if name is None:
                self.unresolved_ids += 1
                name = uuid_to_standard_string(raw)
            if len(self._ids) > 100_000:
                self._ids.clear()
            self._ids[topic_id] = name
        return name

    def _tps(self, items: list[_TopicPartitions]) -> list[dict[str, Any]]:
        merged: dict[str, set[int]] = {}
        for tp in items:
            merged.setdefault(self._resolve(tp.topic_id), set()).update(tp.partitions)
        return [{"topic": t, "partitions": sorted(merged[t])} for t in sorted(merged)]


_FAST_COUNTS = (("lines", "_lines"), ("events", "_events"), ("CONSUMER_GROUP_HEARTBEAT", "_heartbeats"),
                ("OFFSET_COMMIT", "_commits"))  # counts kept as attributes on the hot path
_PARTITION_INDEX = attrgetter("partition_index")
_ERROR_CODE = attrgetter("error_code")
_METADATA = attrgetter("committed_metadata")
_Offset = Offset


def _add_metadata(rows: list[Offset], parts: list[_CommitPartition]) -> None:
    for o, p in zip(rows, parts):
        if p.committed_metadata:
            o.metadata = p.committed_metadata


def _minus(owned: list[dict[str, Any]], assigned: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Partitions of ``owned`` not in ``assigned`` (both sorted lists of {topic, partitions})."""
    keep = {tp["topic"]: set(tp["partitions"]) for tp in assigned}
    out = []
    for tp in owned:
        rest = [p for p in tp["partitions"] if p not in keep.get(tp["topic"], ())]
        if rest:
            out.append({"topic": tp["topic"], "partitions": rest})
    return out


def _api_key(body: str) -> int | None:
    """``requestHeader.requestApiKey`` read from the text, so that lines of other APIs are
    skipped without parsing their JSON (the decoder re-checks it for the APIs kept)."""
    i = body.find(_API_KEY)
    if i < 0:
        raise _Broken("MISSING_FIELD", "requestHeader.requestApiKey")
    i += len(_API_KEY)
    j = body.find(",", i, i + 16)  # Jackson writes the key and the version after it
    text = body[i:j] if j >= 0 else body[i:i + 16]
    try:
        return int(text.lstrip(" \t:").rstrip("} \t"))
    except ValueError:
        raise _Broken("BAD_FIELD", f"requestApiKey {text!r}") from None


def _parse_offset(text: str) -> tzinfo:
    if text in ("Z", "z"):
        return timezone.utc
    sign = {"+": 1, "-": -1}.get(text[:1])
    digits = text[1:].replace(":", "")
    if sign is None or not digits.isdigit() or len(digits) not in (2, 4):
        raise ValueError(f"bad zone offset {text!r}")
    minutes = int(digits[:2]) * 60 + (int(digits[2:]) if len(digits) == 4 else 0)
    return timezone(sign * timedelta(minutes=minutes))

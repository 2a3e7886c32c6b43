"""StreamsGroupHeartbeat (API 88, KIP-1071) request-log lines as typed values.

What lives here: one request-log line of a streams group's heartbeat -> a frozen
:class:`StreamsHeartbeat` (:func:`parse_streams_heartbeat`), or a :class:`Broken` naming why not.
``RequestLogBridge`` decodes the lines with :data:`decode_streams_heartbeat` and maps them
(``members.Heartbeats._streams_heartbeat``): a ``heartbeat`` event each, and the leaves and
fences it implies; a streams member's assignment comes from ``__consumer_offsets``, whose
records carry the topology its tasks are read through.

Shapes (``RequestConvertToJson``, camelCase of ``StreamsGroupHeartbeatRequest.json`` /
``...Response.json``, v0 in 4.2 and 4.3, v1 in 4.4): the request's ``memberEpoch`` (0 to join,
-1 to leave, -2 a static member's leave), ``processId`` (the application instance; one member
per stream thread), ``topology`` (sent when joining or when it changed, else null) and the
tasks the member owns (``activeTasks``/``standbyTasks``/``warmupTasks``, null when unchanged
since the last heartbeat); the response's ``memberId`` (the id given to a joining member),
``memberEpoch``, ``errorCode`` and the tasks the member is to own (null when unchanged). Tasks
are ``(subtopology id, partitions)`` pairs as in the ``__consumer_offsets`` records.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

import msgspec

from fencewatch.streaming.ingest.request_log.problems import Broken

__all__ = ["STREAMS_GROUP_HEARTBEAT", "StreamsHeartbeat", "parse_streams_heartbeat", "decode_streams_heartbeat",
           "decode_streams_heartbeat_body"]

STREAMS_GROUP_HEARTBEAT = 88
_MARKER = "Completed request:"
_Int = Annotated[int, msgspec.Meta(ge=-(1 << 31), le=(1 << 31) - 1)]

Tasks = tuple[tuple[str, tuple[int, ...]], ...]


class _TaskIds(msgspec.Struct, rename="camel", gc=False):
    subtopology_id: str
    partitions: list[_Int]


class _Topology(msgspec.Struct, rename="camel", gc=False):
    epoch: _Int


class _Header(msgspec.Struct, rename="camel", gc=False):
    request_api_key: _Int
    request_api_version: _Int = -1
    client_id: str | None = None


class _Request(msgspec.Struct, rename="camel", gc=False):
    group_id: str
    member_epoch: _Int
    member_id: str | None = None
    instance_id: str | None = None
    process_id: str | None = None
    topology: _Topology | None = None
    active_tasks: list[_TaskIds] | None = None
    standby_tasks: list[_TaskIds] | None = None
    warmup_tasks: list[_TaskIds] | None = None


class _Response(msgspec.Struct, rename="camel", gc=False):
    error_code: _Int
    member_epoch: _Int = -1
    member_id: str | None = None
    active_tasks: list[_TaskIds] | None = None
    standby_tasks: list[_TaskIds] | None = None
    warmup_tasks: list[_TaskIds] | None = None


class _Line(msgspec.Struct, rename="camel", gc=False):
    request_header: _Header
    request: _Request
    response: _Response


class _HeaderOnly(msgspec.Struct, rename="camel", gc=False):
    request_header: _Header


class _Body(msgspec.Struct, rename="camel", gc=False):
    """``_Line`` without the header, for lines whose API key was read by position."""
    request: _Request
    response: _Response


_DECODE = msgspec.json.Decoder(_Line).decode
_DECODE_HEADER = msgspec.json.Decoder(_HeaderOnly).decode
#: A line's JSON -> its Structs (``request_header``, ``request``, ``response``): what
#: ``RequestLogBridge`` decodes API 88 lines with (msgspec's errors, as for the other APIs).
decode_streams_heartbeat = _DECODE
#: The same without the header (``request``, ``response``): the bridge's fast path, which read
#: the API key at its fixed place (``frame.FAST_APIS``), as for ConsumerGroupHeartbeat.
decode_streams_heartbeat_body = msgspec.json.Decoder(_Body).decode


@dataclass(frozen=True, slots=True)
class StreamsHeartbeat:
    """One StreamsGroupHeartbeat and its answer. ``member_id``: the request's, or the answer's
    for a joining member (the request names none). Task fields are None where the line says
    null (unchanged)."""

    group_id: str
    member_id: str | None
    request_epoch: int
    response_epoch: int
    error_code: int
    api_version: int
    client_id: str | None
    instance_id: str | None
    process_id: str | None
    topology_epoch: int | None  # the topology the request declared, if it declared one
    owned_active_tasks: Tasks | None
    owned_standby_tasks: Tasks | None
    owned_warmup_tasks: Tasks | None
    active_tasks: Tasks | None
    standby_tasks: Tasks | None
    warmup_tasks: Tasks | None


def _tasks(items: list[_TaskIds] | None) -> Tasks | None:
    return None if items is None else tuple((t.subtopology_id, tuple(t.partitions)) for t in items)


def _json(line: str | bytes) -> str | bytes:
    """The JSON object of a line in Kafka's layout, of its message alone, or bare."""
    text = line.decode("utf-8", errors="replace") if isinstance(line, bytes) else line
    start = text.find(_MARKER)
    body = text[start + len(_MARKER):] if start >= 0 else text
    body = body.rstrip()
    if body.endswith(")") and not body.endswith("})"):  # "... (kafka.request.logger)"
        body = body[:body.rfind(" (")]
    return body


def parse_streams_heartbeat(line: str | bytes) -> StreamsHeartbeat | Broken:
    """The heartbeat of one line; ``Broken`` (``OTHER_API``, ``BAD_JSON``, ``BAD_FIELD`` with
    msgspec's path) when it is none."""
    body = _json(line)
    try:
        key = _DECODE_HEADER(body).request_header.request_api_key
        if key != STREAMS_GROUP_HEARTBEAT:
            return Broken("OTHER_API", f"API {key} is not StreamsGroupHeartbeat ({STREAMS_GROUP_HEARTBEAT})")
        o = _DECODE(body)
    except msgspec.ValidationError as exc:
        return Broken("BAD_FIELD", str(exc))
    except msgspec.DecodeError as exc:
        return Broken("BAD_JSON", str(exc))
    head, req, resp = o.request_header, o.request, o.response
    return StreamsHeartbeat(
        group_id=req.group_id, member_id=req.member_id or resp.member_id, request_epoch=req.member_epoch,
        response_epoch=resp.member_epoch, error_code=resp.error_code, api_version=head.request_api_version,
        client_id=head.client_id, instance_id=req.instance_id, process_id=req.process_id,
        topology_epoch=None if req.topology is None else req.topology.epoch,
        owned_active_tasks=_tasks(req.active_tasks), owned_standby_tasks=_tasks(req.standby_tasks),
        owned_warmup_tasks=_tasks(req.warmup_tasks), active_tasks=_tasks(resp.active_tasks),
        standby_tasks=_tasks(resp.standby_tasks), warmup_tasks=_tasks(resp.warmup_tasks))

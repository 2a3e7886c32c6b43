"""``RequestLogBridge``: request-log lines in, contract events out; the entry points and the fast path.

What lives here: the bridge (its parts: ``Frame``, the line around the JSON; ``Commits``;
``Heartbeats`` and the member tracker; ``TopicIds``; ``Counting``, the counts and problems),
``events`` (one line) and ``events_many`` (a batch, what the commands call). A line of Kafka's
default layout, at a second already read once, is cut by position and parsed without its
header; ``events_many`` decodes such lines in one loop, ASCII bytes lines without decoding them
to text, and writes the steady heartbeat there; every other line goes through ``events``.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

import msgspec
from msgspec import UNSET

from fencewatch.streaming.ingest.consumer_offsets.mapping import TopicNames
from fencewatch.streaming.ingest.request_log.classic import ClassicMembers
from fencewatch.streaming.ingest.request_log.commits import Commits
from fencewatch.streaming.ingest.request_log.frame import (FAST_API, FAST_APIS, FAST_BODY, FAST_END, FAST_HEAD, MILLIS,
                                                           USUAL_END, USUAL_END_BYTES, Frame)
from fencewatch.streaming.ingest.request_log.members import Heartbeats, Member
from fencewatch.streaming.ingest.request_log.output import Event, Heartbeat, MemberAssignment, event_json
from fencewatch.streaming.ingest.request_log.problems import Broken, Counting
from fencewatch.streaming.ingest.request_log.streams_heartbeat import (STREAMS_GROUP_HEARTBEAT,
                                                                       decode_streams_heartbeat,
                                                                       decode_streams_heartbeat_body)
from fencewatch.streaming.ingest.request_log.topic_ids import TopicIds
from fencewatch.streaming.ingest.request_log.wire import (BODY_DECODERS, CONSUMER_GROUP_HEARTBEAT, DECODERS,
                                                          JOIN_GROUP, LEAVE_GROUP, SYNC_GROUP, TXN_OFFSET_COMMIT)

DEFAULT_LINES_TOPIC = "fencewatch.request-log"
# Lines per ``events_many`` call in the commands: a batch's lines and events stay in the core's
# caches (measured per batch size in docs/request-log.md, Speed); far below MAX_PROBLEMS, so a
# batch's problems are never dropped.
BATCH_LINES = 50
# Every API a line is decoded for: wire's, and StreamsGroupHeartbeat (its Structs live beside
# its parser, ``streams_heartbeat``, which ``wire`` cannot import without a cycle).
_DECODERS = {**DECODERS, STREAMS_GROUP_HEARTBEAT: decode_streams_heartbeat}
#: The API keys the bridge decodes, ascending: what the shipped request-log filters must keep
#: (deploy/request-log/, the Strimzi logging; held to this by tests/deploy/test_request_log_filters.py)
#: and what ``fencewatch doctor`` tells an operator to keep.
DECODED_APIS: tuple[int, ...] = tuple(sorted(_DECODERS))
# The body decoders of the APIs the fast path reads (``frame.FAST_APIS``), the header skipped.
_BODY_DECODERS = {**BODY_DECODERS, STREAMS_GROUP_HEARTBEAT: decode_streams_heartbeat_body}


# The classic protocol's lines (few: one per member per rebalance) take the general way only.
_CLASSIC = {JOIN_GROUP: ClassicMembers._join_group, SYNC_GROUP: ClassicMembers._sync_group,
            LEAVE_GROUP: ClassicMembers._leave_group}


class RequestLogBridge(Frame, Commits, Heartbeats, ClassicMembers, TopicIds, Counting):
    """Request-log lines -> contract events (``Event`` Structs; ``map_line``: dicts).

    ``topic_ids``: topic id -> name (Kafka's base64 form or UUID strings as keys;
    a ``TopicNames`` is shared as is, so a live caller can teach it names).
    ``tz``: the zone of time stamps without an offset (default UTC).
    ``carry``: keep the member tracker (``members``); False: the stateless mode.
    """

    def __init__(self, topic_ids: Mapping[str, str] | TopicNames | None = None, *, tz=None,
                 cluster: str | None = None, carry: bool = True) -> None:
        self._init_topic_ids(topic_ids)
        self._init_frame(tz)
        self.cluster = cluster
        self.carry = carry
        self.members: dict[tuple[str, str], Member] = {}
        self._init_counting()
        self._init_commits()

    def map_line(self, line: str | bytes, event_id: str, *, ts: int | None = None) -> list[dict[str, Any]]:
        """``events`` as dicts (for callers that want them; the commands write ``event_json``)."""
        return msgspec.to_builtins(self.events(line, event_id, ts=ts))

    def map_line_json(self, line: str | bytes, event_id: str, *, ts: int | None = None) -> list[bytes]:
        """``events`` as JSON bytes, one per event (``event_json``)."""
        return [event_json(e) for e in self.events(line, event_id, ts=ts)]

    def events(self, line: str | bytes, event_id: str, *, ts: int | None = None) -> list[Event]:
        """The contract events of one line, in order; ``[]`` for a line of another API or logger
        (counted ``skipped.*``) or a broken one (counted ``broken.*``, kept in ``problems``).
        ``ts`` is used when the line has no time stamp of its own."""
        self._lines += 1
        try:
            if type(line) is not str:
                try:
                    line = bytes(line).decode("utf-8")
                except (UnicodeDecodeError, TypeError) as exc:
                    raise Broken("BAD_ENCODING", str(exc)) from None
                if line.endswith("\n"):  # a file's line (the offline bridge): without its end, the
                    line = line.rstrip("\r\n")  # position-based way below takes it, not the regex's
            if ((api := FAST_APIS.get(line[24:FAST_API])) is not None
                    and (base := self._fast_seconds.get(line[:21])) is not None
                    and (ms := MILLIS.get(line[21:24])) is not None and line.endswith(USUAL_END)):
                # Kafka's default layout, at a second the regex's way has already read (``[`` and
                # the ``,`` are in the key): time stamp, API key and JSON by position.
                line_ts = base + ms
                body = line[FAST_BODY:-FAST_END]
                decode = _BODY_DECODERS[api]
                header = False
            else:
                if (line.startswith(FAST_HEAD, 24) and line[:21] in self._fast_seconds and line[21:24] in MILLIS
                        and line.endswith(USUAL_END)):
                    # Another API in the default layout (a broker without the log4j2 filter logs
                    # every Fetch): skipped on its key's digits, as the regex would read them.
                    j = line.find(",", FAST_API - 3, FAST_API + 3)
                    key = line[FAST_API - 3:j]
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
                raise Broken("BAD_FIELD", str(exc)) from None
            except msgspec.DecodeError as exc:
                raise Broken("BAD_JSON", str(exc)) from None
            except UnicodeEncodeError as exc:  # a lone surrogate (text decoded with surrogateescape)
                raise Broken("BAD_ENCODING", str(exc)) from None
            if header and parsed.request_header.request_api_key != api:  # the text search met a nested key first
                raise Broken("BAD_FIELD", "requestApiKey is not the header's first key")
            if api == CONSUMER_GROUP_HEARTBEAT:
                self._heartbeats += 1
                events = self._heartbeat(parsed, line_ts, event_id)
            elif api in _CLASSIC:
                events = _CLASSIC[api](self, parsed, line_ts, event_id)
            elif api == STREAMS_GROUP_HEARTBEAT:
                self._counts["STREAMS_GROUP_HEARTBEAT"] += 1
                events = self._streams_heartbeat(parsed, line_ts, event_id)
            else:
                events = self._commit(parsed, api == TXN_OFFSET_COMMIT, line_ts, event_id)
        except Broken as exc:
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
        """``events`` of many lines at once (``event_ids[i]``, ``tss[i]``: line i's id and record
        time stamp): one list per line, with the same events, counts and problems as ``events``
        line by line. ``on_unresolved`` is called after a line that met a topic id without a name
        (``unresolved_ids`` grew), before the next line, as the live bridge did between lines."""
        out: list[list[Event]] = []
        append = out.append
        events_of = self.events
        fast_apis, fast_seconds, millis, end = FAST_APIS, self._fast_seconds, MILLIS, USUAL_END
        end_bytes, end_newline = USUAL_END_BYTES, USUAL_END_BYTES + b"\n"
        decode_heartbeat, decoders = BODY_DECODERS[CONSUMER_GROUP_HEARTBEAT], _BODY_DECODERS
        members = self.members
        steady = self.carry  # carry=False: every successful heartbeat says its membership
        cluster = UNSET if self.cluster is None else self.cluster
        heartbeat, assignment, parsed_events = Heartbeat, MemberAssignment, self._parsed_events
        n_lines = n_heartbeats = n_events = 0
        unresolved = self.unresolved_ids
        try:
            for i, line in enumerate(lines):
                if on_unresolved is not None and self.unresolved_ids != unresolved:
                    unresolved = self.unresolved_ids
                    on_unresolved()
                body = None
                if type(line) is bytes and line.isascii():
                    # The commands' lines are bytes: ASCII ones (valid UTF-8, so what ``events``
                    # would decode them to) are read by position and parsed as they are.
                    if ((api := fast_apis.get(line[24:FAST_API])) is not None
                            and (base := fast_seconds.get(line[:21])) is not None
                            and (ms := millis.get(line[21:24])) is not None):
                        if line.endswith(end_bytes):
                            body = line[FAST_BODY:-FAST_END]
                        elif line.endswith(end_newline):  # a file's line
                            body = line[FAST_BODY:-FAST_END - 1]
                elif (type(line) is str and (api := fast_apis.get(line[24:FAST_API])) is not None
                      and (base := fast_seconds.get(line[:21])) is not None
                      and (ms := millis.get(line[21:24])) is not None and line.endswith(end)):
                    body = line[FAST_BODY:-FAST_END]
                eid = event_ids[i]
                if body is not None:
                    try:
                        parsed = (decode_heartbeat if api == CONSUMER_GROUP_HEARTBEAT else decoders[api])(body)
                    except (msgspec.DecodeError, UnicodeEncodeError):  # the line's way says why
                        body = None
                if body is None:  # any other line (other layouts, bytearray, ...): ``events`` takes it
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
                events = parsed_events(api, parsed, base + ms, eid)
                n_events += len(events)
                append(events)
        finally:
            self._lines += n_lines
            self._heartbeats += n_heartbeats
            self._events += n_events
        if on_unresolved is not None and self.unresolved_ids != unresolved:
            on_unresolved()
        return out

    def _parsed_events(self, api: int, parsed: Any, ts: int, eid: str) -> list[Event]:
        """The events of a line ``events_many`` parsed and did not write itself."""
        try:
            if api == CONSUMER_GROUP_HEARTBEAT:
                return self._heartbeat(parsed, ts, eid)
            if api == STREAMS_GROUP_HEARTBEAT:
                self._counts["STREAMS_GROUP_HEARTBEAT"] += 1
                return self._streams_heartbeat(parsed, ts, eid)
            return self._commit(parsed, api == TXN_OFFSET_COMMIT, ts, eid)
        except Broken as exc:
            self._broken(eid, exc)
        except Exception as exc:  # a bug, never the input's fault: keep going, loudly
            self._internal(eid, exc)
        return []

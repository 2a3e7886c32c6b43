"""Broker request-log lines -> contract events (contract §10), with the little state it takes.

``RequestLogBridge`` turns one line of a broker's ``kafka-request.log`` (logger
``kafka.request.logger`` at DEBUG) into the contract events it means. No I/O, no clock: ``ts``
is the line's own time stamp (or, for a message-only line, the ``ts`` the caller passes, e.g.
the Kafka record's timestamp). The JSON is ``RequestConvertToJson.requestDescMetrics``:
``requestHeader``, ``request`` and ``response`` bodies with the camelCase field names of
Kafka's message specs; a field is written only in the versions that have it.

============================  ===============================================
OffsetCommit (8), v2-v10      ``offset_commit``, one per distinct response
                              error code (first appearance order), partitions
                              in request order; v10 names topics by id;
                              ``api_version`` the request's version
TxnOffsetCommit (28), v0-v6   ``txn_offset_commit``, the same way
ConsumerGroupHeartbeat (68)   ``heartbeat``; when answered 0 also
  v0-v1                       ``member_left`` (request epoch -1 / -2) or
                              ``member_assignment`` (an assignment in the
                              response, or a new epoch); when answered
                              UNKNOWN_MEMBER_ID, ``member_left`` ``fenced``
                              (contract §10.1 g)
JoinGroup (11), v0-v9         ``classic_generation`` when answered 0: the
                              generation the join phase gave; the leader's
                              response lists the members
SyncGroup (14), v0-v5         ``classic_sync`` from the leader's request
                              answered 0 (assignments decoded)
LeaveGroup (13), v0-v5        ``member_left`` ``leave`` per member answered 0
StreamsGroupHeartbeat (88)    ``heartbeat``; answered 0 with request epoch
  v0-v1                       -1 / -2 also ``member_left``; answered
                              UNKNOWN_MEMBER_ID ``member_left`` ``fenced``; no
                              assignment (tasks need the topology:
                              ``__consumer_offsets``, contract §10.1 j)
============================  ===============================================

Nothing here raises on bad input: a broken line gives ``[]``, is counted in ``counts``
(``broken.<CODE>``) and its ``(event_id, code, detail)`` is kept in ``problems``.

The package, by seam (each module says what it holds):

==================  ============================================================================
``bridge.py``       ``RequestLogBridge``: ``events`` (one line), ``events_many`` (a batch, the fast path)
``frame.py``        the line around the JSON: its forms, time stamps, API key; the fast path's positions
``wire.py``         the JSON bodies as Kafka writes them (msgspec Structs), API keys, error codes
``output.py``       the events written (Structs in the contract's key order) and their JSON
``commits.py``      OffsetCommit / TxnOffsetCommit -> commit events
``members.py``      Consumer/StreamsGroupHeartbeat -> ``heartbeat`` and membership events; the member tracker
``streams_heartbeat.py``  StreamsGroupHeartbeat lines as typed values (their Structs)
``classic.py``      JoinGroup / SyncGroup / LeaveGroup -> a classic group's events
``topic_ids.py``    topic ids -> names
``problems.py``     counts, coordinator-routing answers, problems
==================  ============================================================================

Speed (``bench/bench_request_log.py``, ``docs/request-log.md``): ``tests/bridge/
test_request_log_golden.py`` holds the outputs to those of the decoder before the fast paths,
byte for byte, and ``tests/bridge/test_request_log_many.py`` ``events_many`` to ``events`` line
by line.
"""

from __future__ import annotations

from fencewatch.streaming.ingest.request_log.bridge import BATCH_LINES, DECODED_APIS, DEFAULT_LINES_TOPIC, RequestLogBridge
from fencewatch.streaming.ingest.request_log.commits import MAX_ANSWERS
from fencewatch.streaming.ingest.request_log.output import (ClassicGeneration, ClassicSync, Event, Heartbeat,
                                                            MemberAssignment, MemberLeft, Offset, OffsetCommit,
                                                            TxnOffsetCommit, event_json, events_json_lines,
                                                            events_json_many)
from fencewatch.streaming.ingest.request_log.problems import MAX_PROBLEMS
from fencewatch.streaming.ingest.request_log.wire import (CONSUMER_GROUP_HEARTBEAT, COORDINATOR_ERRORS, JOIN_GROUP,
                                                          LEAVE_GROUP, OFFSET_COMMIT, SYNC_GROUP, TXN_OFFSET_COMMIT)

__all__ = ["RequestLogBridge", "Event", "event_json", "events_json_lines", "events_json_many", "OFFSET_COMMIT",
           "TXN_OFFSET_COMMIT", "CONSUMER_GROUP_HEARTBEAT", "JOIN_GROUP", "LEAVE_GROUP", "SYNC_GROUP",
           "COORDINATOR_ERRORS", "DECODED_APIS", "ClassicGeneration", "ClassicSync", "DEFAULT_LINES_TOPIC", "BATCH_LINES",
           "Heartbeat", "MemberAssignment", "MemberLeft", "Offset", "OffsetCommit", "TxnOffsetCommit", "MAX_ANSWERS",
           "MAX_PROBLEMS"]

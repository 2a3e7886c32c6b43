"""JoinGroup (11), SyncGroup (14) and LeaveGroup (13) lines -> a classic group's membership events.

What lives here: ``ClassicMembers``, the bridge's part that maps the classic protocol's lines
(contract §10, ``docs/request-log.md``). Each line is written when its response is sent, and
the mapping is stateless (the same with ``carry`` on or off):

- JoinGroup answered 0 -> ``classic_generation``: the join phase completed and gave the member
  ``generationId`` (Kafka's ``ClassicGroup.initNextGeneration``; every member's response is sent
  then, so the line's time is when the group went CompletingRebalance). The leader's response
  lists the generation's members (``members``); a follower's does not. Any other answer
  (MEMBER_ID_REQUIRED, the first JoinGroup of a dynamic member; UNKNOWN_MEMBER_ID; ...)
  changes no generation and gives no event.
- SyncGroup answered REBALANCE_IN_PROGRESS (27) -> ``group_state`` PreparingRebalance
  (``protocol`` ``classic``): a new join phase began before this generation's SyncGroup
  completed (``prepareRebalance`` answers the pending SyncGroups so, and any sent later). The
  JoinGroup that begins a join phase is itself written only when the phase completes, so this
  is the line that shows it began. (A JoinGroup answered MEMBER_ID_REQUIRED, 79, announces a
  joiner too, but its next JoinGroup, which begins the phase, comes a round trip later: in the
  4.2.2 classic load run it was 57 ms early for a commit the broker answered 27, so it gives no
  event.)
- SyncGroup answered 0 whose request holds assignments (the leader's) -> ``classic_sync``:
  each member's ConsumerProtocol Assignment decoded to partitions; the group is then Stable.
  A follower's SyncGroup gives no event (the leader's names its assignment too); one of a
  group whose protocol type is not ``consumer`` (Connect, say) neither: its assignment bytes
  are not the consumer protocol's.
- LeaveGroup -> one ``member_left`` ``leave`` per member answered 0 (v3+ a batch, each with
  its own code; before v3 the request's one member under the top-level code). A static member
  leaving this way is removed, as Kafka's classic group removes it (``reason`` ``leave``).

Coordinator-routing answers give no event (contract §10.1 a). A malformed body is a broken
line (``Broken``: ``BAD_FIELD`` naming the member and what could not be read).
"""

from __future__ import annotations

from collections import Counter

from msgspec import UNSET

from fencewatch.streaming.ingest.consumer_offsets.protocol import parse_assignment
from fencewatch.streaming.ingest.consumer_offsets.records import RecordDecodeError
from fencewatch.streaming.ingest.request_log.output import (ClassicGeneration, ClassicSync, Event, GroupState,
                                                            MemberLeft, unset)
from fencewatch.streaming.ingest.request_log.problems import Broken
from fencewatch.streaming.ingest.request_log.wire import (COORDINATOR_ERRORS, JoinGroupLine, LeaveGroupLine,
                                                          SyncGroupLine)

CONSUMER_PROTOCOL_TYPE = "consumer"
REBALANCE_IN_PROGRESS = 27
PREPARING_REBALANCE = "PreparingRebalance"


class ClassicMembers:
    """Maps JoinGroup, SyncGroup and LeaveGroup lines for a ``RequestLogBridge`` (with its
    ``_dropped`` from ``Counting``)."""

    cluster: str | None
    _counts: Counter

    def _answered(self, api: str, count: str, code: int) -> int | None:
        """Counts the line and gives its answer, or None for a coordinator-routing answer
        (contract §10.1 a: the client retries elsewhere, so it changes no membership)."""
        self._counts[count] += 1
        if code in COORDINATOR_ERRORS:
            self._dropped(api, code)
            return None
        return code

    def _join_group(self, line: JoinGroupLine, ts: int, eid: str) -> list[Event]:
        req, resp = line.request, line.response
        code = self._answered("JoinGroup", "JOIN_GROUP", resp.error_code)
        if code is None:
            return []
        if req.protocol_type is not None and req.protocol_type != CONSUMER_PROTOCOL_TYPE:
            self._counts["skipped.NOT_CONSUMER_PROTOCOL"] += 1
            return []
        if code != 0:
            self._counts["skipped.JOIN_GROUP_ANSWERED"] += 1
            return []
        member_id = resp.member_id or req.member_id
        if not member_id:
            raise Broken("MISSING_FIELD", "response.memberId: a JoinGroup answered 0 names no member")
        members = [m.member_id for m in resp.members] if resp.members else UNSET
        return [ClassicGeneration(ts, unset(self.cluster), req.group_id, eid, member_id, resp.generation_id,
                                  unset(resp.protocol_name or None), unset(req.group_instance_id or None), members)]

    def _sync_group(self, line: SyncGroupLine, ts: int, eid: str) -> list[Event]:
        req, resp = line.request, line.response
        code = self._answered("SyncGroup", "SYNC_GROUP", resp.error_code)
        if code is None:
            return []
        if code == REBALANCE_IN_PROGRESS and req.protocol_type in (None, CONSUMER_PROTOCOL_TYPE):
            return [GroupState(ts, unset(self.cluster), req.group_id, eid, PREPARING_REBALANCE, "classic")]
        if code != 0 or not req.assignments:
            # another answer (ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID), or a follower's request: no
            # assignment to record
            self._counts["skipped.SYNC_GROUP_ANSWERED" if code else "skipped.SYNC_GROUP_FOLLOWER"] += 1
            return []
        if req.protocol_type is not None and req.protocol_type != CONSUMER_PROTOCOL_TYPE:
            self._counts["skipped.NOT_CONSUMER_PROTOCOL"] += 1
            return []
        assignments = {a.member_id: assigned_partitions(a.member_id, a.assignment) for a in req.assignments}
        return [ClassicSync(ts, unset(self.cluster), req.group_id, eid, req.generation_id, assignments)]

    def _leave_group(self, line: LeaveGroupLine, ts: int, eid: str) -> list[Event]:
        req, resp = line.request, line.response
        code = self._answered("LeaveGroup", "LEAVE_GROUP", resp.error_code)
        if code is None:
            return []
        if code != 0:
            self._counts["skipped.LEAVE_GROUP_ANSWERED"] += 1
            return []
        cluster = unset(self.cluster)
        if resp.members is not None:  # v3+: each member answered on its own
            return [MemberLeft(ts, cluster, req.group_id, eid, m.member_id, "leave", unset(m.group_instance_id))
                    for m in resp.members if m.error_code == 0 and m.member_id]
        if not req.member_id:
            raise Broken("MISSING_FIELD", "request.memberId: a LeaveGroup before v3 names no member")
        return [MemberLeft(ts, cluster, req.group_id, eid, req.member_id, "leave", UNSET)]


def assigned_partitions(member_id: str, data: bytes) -> list[dict]:
    """A ConsumerProtocol Assignment's partitions as contract lists (sorted; empty bytes: none)."""
    merged: dict[str, set[int]] = {}
    if data:
        try:
            parsed = parse_assignment(data)
        except RecordDecodeError as exc:
            raise Broken("BAD_FIELD", f"request.assignments[{member_id!r}].assignment: {exc}") from None
        for topic, parts in parsed.assigned_partitions:
            merged.setdefault(topic, set()).update(parts)
    return [{"topic": t, "partitions": sorted(merged[t])} for t in sorted(merged)]

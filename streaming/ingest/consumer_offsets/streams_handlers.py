"""How a streams group's records (KIP-1071, types 17 and 19-23) change what the bridge holds,
and the events they give (contract §1.1; the table is in :mod:`.mapping`'s docstring).

What lives here: :class:`StreamsRecordHandlers`, the streams half of ``mapping.Bridge``'s
handlers (:data:`STREAMS_HANDLERS`), over the same per-group state as the consumer groups'
(``handlers._Group``). No I/O, no clock.

A streams member's assignment names *tasks* ``(subtopology, p)``, not partitions, and the
partitions are the rules' to work out (``state.streams``: through the group's topology, which
the rules keep). So a topology (type 23) is a ``streams_topology`` event and a current assignment
(type 22) a ``member_assignment`` of protocol ``streams`` carrying the member's active tasks
(and those pending revocation) with their assignment epochs as the record has them; standby and
warm-up tasks own no partition for commits and are left out. Each record maps alone, so the
stateless ``decode_record`` of the Spark job gives the same events (less what history adds:
instance ids, group epochs, derived group states). The bridge keeps whether a group has a
topology only for its derived state (NotReady without one, as Kafka's ``StreamsGroup``).
"""

from __future__ import annotations

from typing import Any

from fencewatch.state.records import EventType
from fencewatch.streaming.ingest.consumer_offsets.handlers import (_GROUP_STATE, _MEMBER_ASSIGNMENT, _MEMBER_LEFT,
                                                                   LEAVE_GROUP_STATIC_MEMBER_EPOCH, MEMBER_STATES,
                                                                   RecordHandlers, _Group, _Member)
from fencewatch.streaming.ingest.consumer_offsets.records import RecordDecodeError
from fencewatch.streaming.ingest.consumer_offsets.streams import (StreamsCurrentAssignment, StreamsTopology, Tasks,
                                                                  streams_value)

__all__ = ["STREAMS_HANDLERS", "StreamsRecordHandlers", "STREAMS_MEMBER_STATE"]

#: ``streams.MemberState`` (int8) -> the consumer groups' state number the bridge keeps per member
#: (``handlers.MEMBER_STATES``: 0 STABLE, 1 UNREVOKED_PARTITIONS, 2 UNRELEASED_PARTITIONS): the
#: same three meanings (Kafka's ``streams.CurrentAssignmentBuilder`` mirrors the consumer one),
#: named as the contract's ``state`` names them; UNKNOWN (127) and anything newer stays unknown.
STREAMS_MEMBER_STATE = {1: 0, 2: 1, 3: 2}
_UNKNOWN_STATE = 127
_PROTOCOL = "streams"
_STREAMS_TOPOLOGY = EventType.STREAMS_TOPOLOGY.value


class StreamsRecordHandlers(RecordHandlers):
    """The streams record types' handlers, beside the consumer groups' (:class:`RecordHandlers`)."""

    def _streams_group(self, group_id: str) -> _Group:
        g = self._group(group_id)
        g.protocol = _PROTOCOL
        return g

    def _streams_value(self, record_type: int, k: dict, v: dict) -> Any:
        try:
            return streams_value(record_type, k, v)
        except RecordDecodeError as exc:
            self.stats.errors[exc.code] += 1
            raise

    def _assignment_event(self, g: _Group, m: _Member, a: StreamsCurrentAssignment, ts: int,
                          eid: str) -> dict[str, Any]:
        """The member's active tasks as the record has them; the rules make them partitions."""
        e = self._event(_MEMBER_ASSIGNMENT, ts, a.group_id, eid, member_id=a.member_id, protocol=_PROTOCOL,
                        member_epoch=a.member_epoch, previous_member_epoch=a.previous_member_epoch,
                        state=MEMBER_STATES.get(m.state, "UNKNOWN"), assigned=[],
                        active_tasks=_tasks(a.active_tasks),
                        active_tasks_pending_revocation=_tasks(a.active_tasks_pending_revocation))
        if m.instance_id is not None:
            e["instance_id"] = m.instance_id
        if g.group_epoch is not None:
            e["group_epoch"] = g.group_epoch
        if g.target_epoch is not None:
            e["target_assignment_epoch"] = g.target_epoch
        return e

    # -- one handler per record type -----------------------------------------

    def _streams_group_metadata(self, k: dict, version: int | None, v: dict | None, ts: int,
                                eid: str) -> list[dict]:
        """Type 17: the group epoch; a tombstone deletes the group (``group_state`` Dead)."""
        group_id = k["groupId"]
        g = self.groups.get(group_id)
        out = self._before(group_id, g)
        if v is None:
            if g is not None:
                del self.groups[group_id]
            out.append(self._event(_GROUP_STATE, ts, group_id, eid, state="Dead", protocol=_PROTOCOL))
            return out
        g = self._streams_group(group_id)
        g.group_epoch = v["epoch"]
        out.extend(self._derive_state(group_id, g, ts, eid))
        return out

    def _streams_member_metadata(self, k: dict, version: int | None, v: dict | None, ts: int,
                                 eid: str) -> list[dict]:
        """Type 19: the member's instance id (joined into its next ``member_assignment``)."""
        group_id, member_id = k["groupId"], k["memberId"]
        g = self.groups.get(group_id)
        if v is None:
            out = self._before(group_id, g, removing_member=member_id)
            if g is not None:
                if g.members.pop(member_id, None) is not None:
                    out.extend(self._derive_state(group_id, g, ts, eid))
            return out
        out = self._before(group_id, g, replacing_instance=v["instanceId"])
        g = self._streams_group(group_id)
        m = g.members.get(member_id)
        if m is None:
            m = g.members[member_id] = _Member()
        m.instance_id = v["instanceId"]
        out.extend(self._derive_state(group_id, g, ts, eid))
        return out

    def _streams_current_assignment(self, k: dict, version: int | None, v: dict | None, ts: int,
                                    eid: str) -> list[dict]:
        """Type 22: ``member_assignment`` of the active tasks; member epoch -2: ``member_left``
        ``static_leave``; a tombstone: as a consumer group member's (``member_left`` ``leave``, or
        held back for a static takeover)."""
        group_id, member_id = k["groupId"], k["memberId"]
        if v is None:
            return self._current_assignment(k, version, None, ts, eid)
        a: StreamsCurrentAssignment = self._streams_value(22, k, v)
        g = self.groups.get(group_id)
        out = self._before(group_id, g)
        g = self._streams_group(group_id)
        m = g.members.get(member_id)
        if m is None:
            m = g.members[member_id] = _Member()
        m.member_epoch = a.member_epoch
        m.state = STREAMS_MEMBER_STATE.get(v["state"], _UNKNOWN_STATE)
        if a.member_epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            extra = {"instance_id": m.instance_id} if m.instance_id is not None else {}
            out.append(self._event(_MEMBER_LEFT, ts, group_id, eid, member_id=member_id, reason="static_leave",
                                   **extra))
        else:
            out.append(self._assignment_event(g, m, a, ts, eid))
        out.extend(self._derive_state(group_id, g, ts, eid))
        return out

    def _streams_topology(self, k: dict, version: int | None, v: dict | None, ts: int, eid: str) -> list[dict]:
        """Type 23: ``streams_topology``, the topics each subtopology's tasks read (the rules make
        the members' tasks partitions through it); a tombstone (the group's deletion, with its
        metadata's ``group_state`` Dead) gives nothing."""
        group_id = k["groupId"]
        g = self.groups.get(group_id)
        out = self._before(group_id, g)
        if v is None:
            if g is not None:
                g.topology = None
            return out
        topology: StreamsTopology = self._streams_value(23, k, v)
        g = self._streams_group(group_id)
        g.topology = topology
        out.append(self._event(_STREAMS_TOPOLOGY, ts, group_id, eid, topology_epoch=topology.epoch, subtopologies=[
            {"subtopology_id": s.subtopology_id, "source_topics": list(s.source_topics),
             "repartition_source_topics": [t.name for t in s.repartition_source_topics]}
            for s in topology.subtopologies]))
        out.extend(self._derive_state(group_id, g, ts, eid))
        return out

    def _streams_target_member(self, k: dict, version: int | None, v: dict | None, ts: int,
                               eid: str) -> list[dict]:
        """Type 21: nothing (the current assignment is what commits are checked against)."""
        return self._target_member(k, version, v, ts, eid)

    def _streams_target_metadata(self, k: dict, version: int | None, v: dict | None, ts: int,
                                 eid: str) -> list[dict]:
        """Type 20: the target assignment epoch (same fields as the consumer groups' type 6)."""
        if v is not None:
            self._streams_group(k["groupId"])
        return self._target_metadata(k, version, v, ts, eid)


def _tasks(tasks: Tasks) -> list[dict[str, Any]]:
    """Tasks as the contract writes them (``records.STREAMS_TASKS``), in the record's order."""
    out = []
    for t in tasks:
        e: dict[str, Any] = {"subtopology_id": t.subtopology_id, "partitions": list(t.partitions)}
        if t.assignment_epochs is not None:
            e["assignment_epochs"] = list(t.assignment_epochs)
        out.append(e)
    return out


STREAMS_HANDLERS = {
    17: StreamsRecordHandlers._streams_group_metadata,
    19: StreamsRecordHandlers._streams_member_metadata,
    20: StreamsRecordHandlers._streams_target_metadata,
    21: StreamsRecordHandlers._streams_target_member,
    22: StreamsRecordHandlers._streams_current_assignment,
    23: StreamsRecordHandlers._streams_topology,
}

"""ConsumerGroupHeartbeat (68) lines -> ``heartbeat``, and the membership change a heartbeat implies.

What lives here: ``Heartbeats``, the bridge's part that maps a parsed heartbeat (contract §10,
``docs/request-log.md``), and ``Member``, what it remembers of one member.

Why memory: the coordinator omits an unchanged assignment (``assignment: null``) and an
unchanged owned set / subscription / instance id in the request, so a new epoch without an
assignment means "the one you had". With ``carry=True`` (the default) the bridge remembers, per
(group, member), the last epoch, assignment, owned partitions, subscription and instance id. A
member it never saw an assignment for gets no ``member_assignment`` until one arrives (counted
``problem.ASSIGNMENT_NOT_SEEN``). The memory is what the coordinator itself holds: a member is
forgotten on its leave, and when a heartbeat is answered UNKNOWN_MEMBER_ID (the coordinator has
no such member, e.g. after a session timeout, which no request shows): that heartbeat then also
gives a ``member_left`` ``fenced``, once (contract §10.1 g). FENCED_MEMBER_EPOCH keeps the
member: the coordinator still holds it, and the client rejoins at epoch 0 under the same id.

``carry=False`` (the Spark job's stateless mapper) writes what one line says and no more: a
successful heartbeat without an assignment gives a ``member_assignment`` with ``"assigned":
null`` ("unchanged"), and one whose request does not repeat the owned partitions
``"pending_revocation": null`` ("derive it"); the per-group state resolves both against the
member it already models (``state.assignment.resolve_unchanged_assignment``). It cannot know
whether it saw a member before, so every heartbeat answered UNKNOWN_MEMBER_ID gives a
``member_left`` ``fenced``; the group state ignores one for a member it does not hold.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

from msgspec import UNSET

from fencewatch.streaming.ingest.request_log.output import Event, Heartbeat, MemberAssignment, MemberLeft, unset
from fencewatch.streaming.ingest.request_log.wire import (COORDINATOR_ERRORS, LEAVE_GROUP_MEMBER_EPOCH,
                                                          LEAVE_GROUP_STATIC_MEMBER_EPOCH, UNKNOWN_MEMBER_ID,
                                                          HeartbeatLine, HeartbeatRequest, HeartbeatResponse,
                                                          TopicPartitions)


@dataclass(slots=True)
class Member:
    """What the coordinator last told (or was told by) one member."""

    epoch: int
    assigned: list[dict[str, Any]] | None = None  # resolved [{topic, partitions}], None: never seen
    owned: list[dict[str, Any]] | None = None  # the request's topicPartitions, last sent
    subscribed: list[str] | None = None
    instance_id: str | None = None


class Heartbeats:
    """Maps ConsumerGroupHeartbeat lines and tracks members for a ``RequestLogBridge`` (with its
    ``_resolve`` from ``TopicIds`` and ``_dropped`` from ``Counting``)."""

    cluster: str | None
    carry: bool
    members: dict[tuple[str, str], Member]
    _counts: Counter

    def _heartbeat(self, line: HeartbeatLine, ts: int, eid: str) -> list[Event]:
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

    def _membership(self, req: HeartbeatRequest, resp: HeartbeatResponse, hb: Heartbeat,
                    key: tuple[str, str], ts: int, eid: str) -> list[Event]:
        """``[hb]`` and the membership event a heartbeat implies, if any (contract §10)."""
        out: list[Event] = [hb]
        cluster = unset(self.cluster)
        code = resp.error_code
        if code != 0:
            if code == UNKNOWN_MEMBER_ID:  # the coordinator has no such member (contract §10.1 g)
                if not self.carry:  # what the line says; the group state ignores a member it does not hold
                    out.append(MemberLeft(ts, cluster, key[0], eid, key[1], "fenced", unset(req.instance_id)))
                elif (m := self.members.pop(key, None)) is not None:  # once, for a member the bridge knew
                    instance_id = req.instance_id if req.instance_id is not None else m.instance_id
                    out.append(MemberLeft(ts, cluster, key[0], eid, key[1], "fenced", unset(instance_id)))
            # FENCED_MEMBER_EPOCH (110) and other answers: the coordinator still holds the member as it was
            return out
        if req.member_epoch in (LEAVE_GROUP_MEMBER_EPOCH, LEAVE_GROUP_STATIC_MEMBER_EPOCH):
            reason = "static_leave" if req.member_epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH else "leave"
            m = self.members.pop(key, None)
            instance_id = req.instance_id if req.instance_id is not None else (m.instance_id if m else None)
            out.append(MemberLeft(ts, cluster, key[0], eid, key[1], reason, unset(instance_id)))
            return out
        new_epoch = resp.member_epoch
        assigned = self._tps(resp.assignment.topic_partitions) if resp.assignment is not None else None
        owned = self._tps(req.topic_partitions) if req.topic_partitions is not None else None
        subscribed = sorted(set(req.subscribed_topic_names)) if req.subscribed_topic_names is not None else None
        if not self.carry:
            out.append(MemberAssignment(
                ts, cluster, key[0], eid, key[1], "consumer", new_epoch, UNSET, assigned,
                # null: derived by the group state from the member it models (the owned set not sent)
                [] if assigned is None else minus(owned, assigned) if owned is not None else None,
                unset(subscribed), unset(req.instance_id)))
            return out
        m = self.members.get(key)
        if m is None:
            m = self.members[key] = Member(epoch=req.member_epoch)
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
        out.append(MemberAssignment(ts, cluster, key[0], eid, key[1], "consumer", new_epoch, unset(previous),
                                    m.assigned, minus(m.owned, m.assigned) if m.owned else [],
                                    unset(m.subscribed), unset(m.instance_id)))
        return out

    def _streams_heartbeat(self, line: Any, ts: int, eid: str) -> list[Event]:
        """A StreamsGroupHeartbeat (API 88, ``streams_heartbeat``) -> ``heartbeat``, so the fencing
        counts see streams members; answered 0 with request epoch -1 / -2 also ``member_left``
        (``leave`` / ``static_leave``), answered UNKNOWN_MEMBER_ID ``member_left`` ``fenced``
        (once for a member seen, as for ConsumerGroupHeartbeat, contract §10.1 g). No
        ``member_assignment``: the answer names tasks, and which partitions they are takes the
        topology, which ``__consumer_offsets`` carries (``consumer_offsets.streams_handlers``)."""
        req, resp = line.request, line.response
        code = resp.error_code
        if code and code in COORDINATOR_ERRORS:
            self._dropped("StreamsGroupHeartbeat", code)
            return []
        group_id = req.group_id
        member_id = req.member_id or resp.member_id or ""
        cluster = unset(self.cluster)
        out: list[Event] = [Heartbeat(ts, cluster, group_id, eid, member_id, req.member_epoch, resp.member_epoch,
                                      code)]
        key = (group_id, member_id)
        if code == UNKNOWN_MEMBER_ID:
            m = self.members.pop(key, None)
            if not self.carry or m is not None:
                instance_id = req.instance_id if req.instance_id is not None else (m.instance_id if m else None)
                out.append(MemberLeft(ts, cluster, group_id, eid, member_id, "fenced", unset(instance_id)))
        elif code == 0 and req.member_epoch in (LEAVE_GROUP_MEMBER_EPOCH, LEAVE_GROUP_STATIC_MEMBER_EPOCH):
            m = self.members.pop(key, None)
            reason = "static_leave" if req.member_epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH else "leave"
            instance_id = req.instance_id if req.instance_id is not None else (m.instance_id if m else None)
            out.append(MemberLeft(ts, cluster, group_id, eid, member_id, reason, unset(instance_id)))
        elif code == 0 and self.carry:
            m = self.members.get(key)
            if m is None:
                self.members[key] = Member(epoch=resp.member_epoch, instance_id=req.instance_id)
            else:
                m.epoch = resp.member_epoch
                if req.instance_id is not None:
                    m.instance_id = req.instance_id
        return out

    def _tps(self, items: list[TopicPartitions]) -> list[dict[str, Any]]:
        merged: dict[str, set[int]] = {}
        for tp in items:
            merged.setdefault(self._resolve(tp.topic_id), set()).update(tp.partitions)
        return [{"topic": t, "partitions": sorted(merged[t])} for t in sorted(merged)]


def minus(owned: list[dict[str, Any]], assigned: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Partitions of ``owned`` not in ``assigned`` (both sorted lists of {topic, partitions})."""
    keep = {tp["topic"]: set(tp["partitions"]) for tp in assigned}
    out = []
    for tp in owned:
        rest = [p for p in tp["partitions"] if p not in keep.get(tp["topic"], ())]
        if rest:
            out.append({"topic": tp["topic"], "partitions": rest})
    return out

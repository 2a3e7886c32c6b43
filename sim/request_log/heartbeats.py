"""ConsumerGroupHeartbeat (68) lines from ``heartbeat`` events and the assignment their exchange produced.

What lives here: :class:`HeartbeatLines`. The ``member_assignment`` of the
same exchange goes into the line's response (``memberEpoch``,
``assignment`` -- ``null`` when the assigned partitions did not change, as
the broker does); a leave is a request with epoch -1 / -2. What the stream
does not determine is derived from the member's past, never drawn: the
partitions a request reports owning (:meth:`HeartbeatLines.owned`). Pure: no
I/O, no clock.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import Any

from fencewatch.sim.request_log.members import Member, Members
from fencewatch.sim.request_log.versions import VersionMix
from fencewatch.sim.request_log.wire import CONSUMER_GROUP_HEARTBEAT, Framing, dumps

# Messages of Kafka's exceptions for the heartbeat errors the simulator answers (Errors.java, 4.3).
_ERROR_MESSAGES = {
    22: "Specified group generation id is not valid.",
    25: "The coordinator is not aware of this member.",
    110: "The member epoch is fenced by the group coordinator. The member must abandon all its partitions and rejoin.",
    111: "The instance ID is still used by another member in the consumer group. That member must leave first.",
    113: "The member epoch is stale. The member must retry after receiving its updated member epoch via the ConsumerGroupHeartbeat API.",
}


def _pairs(entries: Iterable[dict] | None) -> tuple:
    """A contract §1 partition list ``[{"topic", "partitions"}]`` -> sorted ``((topic, partition), ...)``."""
    if not entries:
        return ()
    return tuple(sorted((e["topic"], p) for e in entries for p in e["partitions"]))


class HeartbeatLines:
    """Heartbeat events (with their exchange's assignment) in, lines out."""

    def __init__(self, mix: VersionMix, framing: Framing, members: Members, counts: Counter, *,
                 rebalance_timeout_ms: int, heartbeat_interval_ms: int) -> None:
        self._mix = mix
        self._framing = framing
        self._members = members
        self._counts = counts
        self.rebalance_timeout_ms = rebalance_timeout_ms
        self.heartbeat_interval_ms = heartbeat_interval_ms

    def _topic_partitions(self, pairs: Iterable[tuple[str, int]]) -> list[dict]:
        out: list[dict] = []
        current: dict | None = None
        for topic, partition in pairs:
            if current is None or current["_topic"] != topic:
                current = {"_topic": topic, "topicId": self._framing.topic_id(topic), "partitions": []}
                out.append(current)
            current["partitions"].append(partition)
        for entry in out:
            del entry["_topic"]
        return out

    @staticmethod
    def owned(member: Member, joining: bool, assignment: dict | None) -> tuple:
        """The partitions the request reports owning (``topicPartitions``), derived from the member's past.

        A joining client owns nothing. Otherwise a client owns what it was last
        given; when this exchange moves the member, it still owns the
        partitions the coordinator now waits for it to revoke, plus those it
        keeps, and has already released the ones the coordinator dropped.
        """
        if joining:
            return ()
        if assignment is None:
            return tuple(sorted(set(member.assigned) | set(member.pending)))
        assigned = set(_pairs(assignment.get("assigned")))
        pending = set(_pairs(assignment.get("pending_revocation")))
        previous = set(member.assigned) | set(member.pending)
        return tuple(sorted(pending | (previous & assigned)))

    def line(self, hb: dict, assignment: dict | None = None) -> tuple[str, str]:
        group_id = hb["group_id"]
        member_id = hb["member_id"]
        profile = self._mix.profile(group_id, True)
        version = profile.heartbeat
        member = self._members.member(group_id, member_id)
        request_epoch = hb["request_epoch"]
        joining = request_epoch == 0
        leaving = request_epoch < 0
        if assignment is not None:
            if assignment.get("instance_id") is not None:
                member.instance_id = assignment["instance_id"]
            if assignment.get("subscribed_topics") is not None:
                member.subscribed = list(assignment["subscribed_topics"])
        request = self._request(hb, member, version, joining, leaving, assignment)
        response = self._response(hb, member, joining, leaving, assignment)
        line = self._framing.wrap(hb["ts"], CONSUMER_GROUP_HEARTBEAT, version, member.client_id, member.client_id,
                                  profile, dumps(request), dumps(response), remote=assignment is not None or leaving)
        return group_id, line

    def _request(self, hb: dict, member: Member, version: int, joining: bool, leaving: bool,
                 assignment: dict | None) -> dict[str, Any]:
        """The request body; records what ``topicPartitions`` it sent."""
        owned = self.owned(member, joining, assignment)
        send_owned = joining or assignment is not None or owned != member.owned_sent
        if leaving:
            send_owned = False
        request: dict[str, Any] = {
            "groupId": hb["group_id"],
            # v0: the coordinator names a joining member; from v1 the client generates its id.
            "memberId": "" if version == 0 and joining and hb["error_code"] == 0 and not member.joined else hb["member_id"],
            "memberEpoch": hb["request_epoch"],
            "instanceId": member.instance_id,
            "rackId": None,
            "rebalanceTimeoutMs": self.rebalance_timeout_ms if joining else -1,
            "subscribedTopicNames": (member.subscribed or []) if joining else None,
        }
        if version >= 1:
            request["subscribedTopicRegex"] = None
        request["serverAssignor"] = None
        request["topicPartitions"] = self._topic_partitions(owned) if send_owned else None
        if send_owned:
            member.owned_sent = owned
        return request

    def _response(self, hb: dict, member: Member, joining: bool, leaving: bool,
                  assignment: dict | None) -> dict[str, Any]:
        """The response body; the member's record then holds what the broker now knows."""
        error = hb["error_code"]
        if error != 0:
            return {
                "throttleTimeMs": 0,
                "errorCode": error,
                "errorMessage": _ERROR_MESSAGES.get(error),
                "memberId": None,
                "memberEpoch": 0,
                "heartbeatIntervalMs": 0,
                "assignment": None,
            }
        response: dict[str, Any] = {
            "throttleTimeMs": 0,
            "errorCode": 0,
            "errorMessage": None,
            "memberId": hb["member_id"],
            "memberEpoch": hb["response_epoch"],
            "heartbeatIntervalMs": 0 if leaving else self.heartbeat_interval_ms,
            "assignment": None,
        }
        if assignment is not None:
            assigned = _pairs(assignment.get("assigned"))
            # GroupMetadataManager: the assignment goes out on a join, a full request, or a change.
            if joining or assigned != member.assigned:
                response["assignment"] = {"topicPartitions": self._topic_partitions(assigned)}
            elif assignment.get("member_epoch") == member.epoch:
                self._counts["member_assignment:not_visible"] += 1  # same epoch, same partitions
            member.epoch = assignment.get("member_epoch", hb["response_epoch"])
            member.assigned = assigned
            member.pending = _pairs(assignment.get("pending_revocation"))
            member.joined = True
        elif leaving:
            self._members.forget(hb["group_id"], hb["member_id"])
        else:
            member.epoch = hb["response_epoch"]
        return response

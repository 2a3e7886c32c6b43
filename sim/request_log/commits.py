"""OffsetCommit (8) and TxnOffsetCommit (28) lines from ``offset_commit`` / ``txn_offset_commit`` events.

What lives here: :class:`CommitLines`, which writes one line per commit
event, every partition answered with the event's ``error_code`` (the
simulated coordinator fails whole requests, as Kafka's validator does). The
bodies are what the generated ``*DataJsonConverter`` classes render at the
group's version: camelCase names of the message specs, a field only in the
versions that have it, ``null`` for unset nullable fields, topic ids from
OffsetCommit v10. Pure: no I/O, no clock.
"""

from __future__ import annotations

from fencewatch.state.records import EventType
from fencewatch.sim.request_log.members import Members
from fencewatch.sim.request_log.versions import GroupProfile, VersionMix
from fencewatch.sim.request_log.wire import OFFSET_COMMIT, TXN_OFFSET_COMMIT, Framing, dumps

_EMPTY = '""'
_OFFSET_SLOT = "\x00"


def _request_partition(offset: dict, leader_epoch: bool, value: str | None = None) -> str:
    """One partition of a commit request, in the spec's field order (``value``: the offset's text)."""
    metadata = offset.get("metadata", "")
    epoch = f'"committedLeaderEpoch":{offset.get("leader_epoch", -1)},' if leader_epoch else ""
    return (
        f'{{"partitionIndex":{offset["partition"]},"committedOffset":{offset["offset"] if value is None else value},{epoch}'
        f'"committedMetadata":{_EMPTY if metadata == "" else dumps(metadata)}}}'
    )


class CommitLines:
    """Commit events in, lines out; bodies built once per request shape."""

    def __init__(self, mix: VersionMix, framing: Framing, members: Members, classic: set[str]) -> None:
        self._mix = mix
        self._framing = framing
        self._members = members
        self._classic = classic  # groups seen to be classic (shared with the encoder, which learns them)
        self._shapes: dict[tuple, tuple] = {}

    def line(self, event: dict) -> tuple[str, str]:
        """A commit's line. A client commits the same partitions at the same epoch many times: the
        bodies are built once per shape as a %-template of the offsets (as the JSON emitter does)."""
        group_id = event["group_id"]
        txn = event["type"] == EventType.TXN_OFFSET_COMMIT
        member_id = event.get("member_id") or ""
        consumer = group_id not in self._classic and (member_id == "" or (group_id, member_id) in self._members)
        profile = self._mix.profile(group_id, consumer)
        offsets = event.get("offsets") or ()
        error = event.get("error_code") or 0
        shape = (group_id, member_id, event.get("member_epoch", -1), event.get("instance_id"), error, txn,
                 event.get("transactional_id"), event.get("producer_id"), event.get("producer_epoch"),
                 tuple([(o["topic"], o["partition"], o.get("leader_epoch", -1), o.get("metadata", "")) for o in offsets]))
        cached = self._shapes.get(shape)
        if cached is None:
            if len(self._shapes) >= 50_000:
                self._shapes.clear()
            cached = self._shapes[shape] = self._template(event, group_id, member_id, txn, profile, error)
        api, version, client_id, template, order, response = cached
        request = template % tuple([offsets[i]["offset"] for i in order])
        line = self._framing.wrap(event["ts"], api, version, client_id, client_id, profile, request, response,
                                  remote=error == 0)
        return group_id, line

    def _template(self, event: dict, group_id: str, member_id: str, txn: bool, profile: GroupProfile,
                  error: int) -> tuple[int, int, str, str, tuple[int, ...], str]:
        """``(api, version, client id, request %-template of the offsets, offset order, response)``."""
        by_topic: dict[str, list[int]] = {}
        offsets = event.get("offsets") or ()
        for i, o in enumerate(offsets):
            by_topic.setdefault(o["topic"], []).append(i)
        if txn:
            api, version = TXN_OFFSET_COMMIT, self._mix.txn_version(group_id, profile)
            key, leader_epochs = "name", version >= 2
            head = (
                f'{{"transactionalId":{dumps(event.get("transactional_id", ""))},"groupId":{dumps(group_id)},'
                f'"producerId":{event.get("producer_id", -1)},"producerEpoch":{event.get("producer_epoch", -1)},'
            )
            if version >= 3:
                head += (
                    f'"generationId":{event.get("member_epoch", -1)},"memberId":{dumps(member_id)},'
                    f'"groupInstanceId":{dumps(event.get("instance_id"))},'
                )
            response_head = '{"throttleTimeMs":0,'
            client_id = f"producer-{event.get('transactional_id', '')}"
        else:
            api, version = OFFSET_COMMIT, profile.offset_commit
            key, leader_epochs = ("topicId" if version >= 10 else "name"), version >= 6
            head = (
                f'{{"groupId":{dumps(group_id)},"{profile.release.epoch_field}":{event.get("member_epoch", -1)},'
                f'"memberId":{dumps(member_id)},'
            )
            if version >= 7:
                head += f'"groupInstanceId":{dumps(event.get("instance_id"))},'
            if version <= 4:
                head += '"retentionTimeMs":-1,'
            response_head = '{"throttleTimeMs":0,' if version >= 3 else "{"
            member = self._members.get((group_id, member_id))
            if member is not None:
                client_id = member.client_id
            else:
                client_id = "adminclient-1" if member_id == "" else self._members.member(group_id, member_id).client_id
        request, order, response = self._topics(offsets, by_topic, key, leader_epochs, error)
        template = head + request
        # JSON text never holds a raw NUL (json escapes it), so the slot marker cannot collide.
        template = template.replace("%", "%%").replace(_OFFSET_SLOT, "%d")
        return api, version, client_id, template, order, response_head + response

    def _topics(self, offsets, by_topic: dict[str, list[int]], key: str, leader_epochs: bool,
                error: int) -> tuple[str, tuple[int, ...], str]:
        """The ``"topics":[...]}`` ends of the request (offsets as slots) and the response, and the offsets' order."""
        request_topics = []
        response_topics = []
        order: list[int] = []
        for topic, indexes in by_topic.items():
            name = f'"{key}":' + (f'"{self._framing.topic_id(topic)}"' if key == "topicId" else dumps(topic))
            request_topics.append(
                f'{{{name},"partitions":['
                + ",".join(_request_partition(offsets[i], leader_epochs, _OFFSET_SLOT) for i in indexes)
                + "]}"
            )
            response_topics.append(
                f'{{{name},"partitions":['
                + ",".join(f'{{"partitionIndex":{offsets[i]["partition"]},"errorCode":{error}}}' for i in indexes)
                + "]}"
            )
            order.extend(indexes)
        request = '"topics":[' + ",".join(request_topics) + "]}"
        response = '"topics":[' + ",".join(response_topics) + "]}"
        return request, tuple(order), response

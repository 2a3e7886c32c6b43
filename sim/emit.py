"""Build contract §1 events from simulator state, as dicts or as JSON lines.

What lives here: :class:`DictEmitter` (one ``dict`` per event: the reference
form, used for Avro and for judging events in-process) and
:class:`JsonEmitter`, which writes the same events as compact JSON. The two
most frequent events (``heartbeat`` and the commits) have hand-built JSON
fast paths -- ``json.dumps`` of a dict would cap the simulator below the
rates the monitor is benchmarked at (docs/decisions.md, "Figures that were
in code comments"); every
other type goes through the dict builder and ``json.dumps``, so there is one
definition of each event. ``tests/sim/test_emit.py`` checks the fast paths
parse to exactly the dicts, and that every event's keys are the declared fields of its type
(``state.records``).

Every emitted event goes to ``write(kind, key, payload)``: ``kind`` is
:data:`HEARTBEATS` (membership) or :data:`OFFSETS` (commits and partition
facts), ``key`` the Kafka record key (the group id, or ``topic-partition``
for partition-scoped events), ``payload`` the dict or the JSON string.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

from fencewatch.sim.coordinator import ConsumerGroupMember
from fencewatch.sim.topology import SAFE_NAME, GroupTopology, PartitionLog
from fencewatch.state.records import EventType

__all__ = ["HEARTBEATS", "OFFSETS", "DictEmitter", "JsonEmitter", "Truth"]

HEARTBEATS = 0
OFFSETS = 1

# The ``type`` of each event as a plain string (the Avro encoder takes str, not the enum).
_MEMBER_ASSIGNMENT = EventType.MEMBER_ASSIGNMENT.value
_MEMBER_LEFT = EventType.MEMBER_LEFT.value
_HEARTBEAT = EventType.HEARTBEAT.value
_CLASSIC_JOIN = EventType.CLASSIC_JOIN.value
_CLASSIC_SYNC = EventType.CLASSIC_SYNC.value
_GROUP_STATE = EventType.GROUP_STATE.value
_OFFSET_COMMIT = EventType.OFFSET_COMMIT.value
_TXN_OFFSET_COMMIT = EventType.TXN_OFFSET_COMMIT.value
_OFFSET_COMMITTED = EventType.OFFSET_COMMITTED.value
_OFFSET_DELETED = EventType.OFFSET_DELETED.value
_PARTITION_EPOCHS = EventType.PARTITION_EPOCHS.value
_STREAMS_TOPOLOGY = EventType.STREAMS_TOPOLOGY.value

Write = Callable[[int, str, Any], None]

_dumps = json.JSONEncoder(separators=(",", ":"), check_circular=False).encode


class Truth:
    """The optional ground-truth label of an event (field ``truth``; docs/simulator.md).

    Immutable by convention; its JSON form is built once and cached, because
    the simulator reuses one label for every commit of a client until the
    coordinator's state or the client's view changes.
    """

    __slots__ = ("scenario", "cause", "current_owner", "owners", "expect", "details", "_json")

    def __init__(
        self,
        scenario: str,
        cause: str | None = None,
        current_owner: bool | None = None,
        owners: Sequence[str | None] | None = None,
        expect: Sequence[str] | None = None,
        details: dict[str, str] | None = None,
    ) -> None:
        self.scenario = scenario
        self.cause = cause
        self.current_owner = current_owner
        self.owners = None if owners is None else tuple(owners)
        self.expect = None if expect is None else tuple(expect)
        self.details = details
        self._json: str | None = None

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"scenario": self.scenario}
        if self.cause is not None:
            out["cause"] = self.cause
        if self.current_owner is not None:
            out["current_owner"] = self.current_owner
        if self.owners is not None:
            out["owners"] = list(self.owners)
        if self.expect is not None:
            out["expect"] = list(self.expect)
        if self.details is not None:
            out["details"] = dict(self.details)
        return out

    def as_json(self) -> str:
        text = self._json
        if text is None:
            # Names are SAFE_NAME strings (topology, member ids), so no escaping is needed.
            parts = [f'{{"scenario":"{self.scenario}"']
            if self.cause is not None:
                parts.append(f',"cause":"{self.cause}"')
            if self.current_owner is not None:
                parts.append(',"current_owner":true' if self.current_owner else ',"current_owner":false')
            if self.owners is not None:
                parts.append(',"owners":[' + ",".join("null" if o is None else f'"{o}"' for o in self.owners) + "]")
            if self.expect is not None:
                parts.append(',"expect":[' + ",".join(f'"{c}"' for c in self.expect) + "]")
            if self.details is not None:
                parts.append(',"details":' + _dumps(self.details))
            parts.append("}")
            text = self._json = "".join(parts)
        return text

    def __repr__(self) -> str:
        return f"Truth({self.as_dict()!r})"


def _tasks(epochs: dict[int, int], partitions_per_topic: int) -> list[dict]:
    """Task indexes -> contract §1.1 ``[{"subtopology_id", "partitions", "assignment_epochs"}]``."""
    out: list[dict] = []
    current = None
    for i in sorted(epochs):
        s = str(i // partitions_per_topic)
        if current is None or current["subtopology_id"] != s:
            current = {"subtopology_id": s, "partitions": [], "assignment_epochs": []}
            out.append(current)
        current["partitions"].append(i % partitions_per_topic)
        current["assignment_epochs"].append(epochs[i])
    return out


class DictEmitter:
    """Emit events as dicts; the definition of every event the simulator writes."""

    def __init__(
        self,
        write: Write,
        *,
        event_id_prefix: str = "sim-",
        cluster: str | None = None,
        labels: bool = True,
        assignment_epochs: bool = False,
    ) -> None:
        if cluster is not None and not SAFE_NAME.match(cluster):
            raise ValueError(f"cluster name {cluster!r} must match {SAFE_NAME.pattern}")
        if event_id_prefix and not SAFE_NAME.match(event_id_prefix):
            raise ValueError(f"event id prefix {event_id_prefix!r} must match {SAFE_NAME.pattern}")
        self.write = write
        self.prefix = event_id_prefix
        self.cluster = cluster
        self.labels = labels
        self.assignment_epochs = assignment_epochs
        self.count = 0
        self._cluster_json = "" if cluster is None else f'"cluster":"{cluster}",'

    # ---------------------------------------------------------------- helpers

    def _next_id(self) -> str:
        n = self.count
        self.count = n + 1
        return f"{self.prefix}{n}"

    def _base(self, event_type: str, ts: int, group_id: str | None) -> dict[str, Any]:
        event: dict[str, Any] = {"type": event_type, "ts": ts}
        if self.cluster is not None:
            event["cluster"] = self.cluster
        if group_id is not None:
            event["group_id"] = group_id
        event["event_id"] = self._next_id()
        return event

    def _out(self, kind: int, key: str, event: dict[str, Any]) -> None:
        self.write(kind, key, event)

    # ---------------------------------------------------------------- membership

    def heartbeat(self, ts: int, group_id: str, member_id: str, request_epoch: int, response_epoch: int, error_code: int) -> None:
        event = self._base(_HEARTBEAT, ts, group_id)
        event["member_id"] = member_id
        event["request_epoch"] = request_epoch
        event["response_epoch"] = response_epoch
        event["error_code"] = error_code
        self._out(HEARTBEATS, group_id, event)

    def member_assignment(
        self,
        ts: int,
        group_id: str,
        member: ConsumerGroupMember,
        topology: GroupTopology,
        group_epoch: int,
        target_assignment_epoch: int,
        protocol: str = "consumer",
    ) -> None:
        event = self._base(_MEMBER_ASSIGNMENT, ts, group_id)
        event["member_id"] = member.member_id
        event["protocol"] = protocol
        event["member_epoch"] = member.member_epoch
        event["previous_member_epoch"] = member.previous_member_epoch
        event["state"] = member.state
        epochs = self.assignment_epochs
        event["assigned"] = topology.topic_partitions(member.assigned, member.assigned if epochs else None)
        event["pending_revocation"] = topology.topic_partitions(
            member.pending_revocation, member.pending_revocation if epochs else None
        )
        event["subscribed_topics"] = list(topology.topics)
        if member.instance_id is not None:
            event["instance_id"] = member.instance_id
        event["group_epoch"] = group_epoch
        event["target_assignment_epoch"] = target_assignment_epoch
        self._out(HEARTBEATS, group_id, event)

    def streams_topology(self, ts: int, group_id: str, topology: GroupTopology) -> None:
        """A streams group's topology as the simulator builds it (``world/simulator.py``,
        ``_streams_group``): subtopology ``i`` reads source topic ``topics[i]``, the last one the
        repartition topic ``topics[-1]``; one epoch, the application never changes its topology."""
        event = self._base(_STREAMS_TOPOLOGY, ts, group_id)
        event["topology_epoch"] = 0
        *sources, repartition = topology.topics
        event["subtopologies"] = [{"subtopology_id": str(i), "source_topics": [t]} for i, t in enumerate(sources)] + [
            {"subtopology_id": str(len(sources)), "repartition_source_topics": [repartition]}]
        self._out(HEARTBEATS, group_id, event)

    def streams_member_assignment(
        self,
        ts: int,
        group_id: str,
        member: ConsumerGroupMember,
        topology: GroupTopology,
        group_epoch: int,
        target_assignment_epoch: int,
    ) -> None:
        """A streams member's current assignment (``StreamsGroupCurrentMemberAssignmentValue``,
        contract §1.1): its active tasks and those pending revocation, with their assignment epochs
        (Kafka 4.2+ records carry them), and no partitions: the monitor makes the tasks partitions
        through the group's ``streams_topology``. The coordinator's partition index ``i`` is task
        ``(i // partitions_per_topic, i % partitions_per_topic)``."""
        event = self._base(_MEMBER_ASSIGNMENT, ts, group_id)
        event["member_id"] = member.member_id
        event["protocol"] = "streams"
        event["member_epoch"] = member.member_epoch
        event["previous_member_epoch"] = member.previous_member_epoch
        event["state"] = member.state
        event["assigned"] = []
        event["pending_revocation"] = []
        event["active_tasks"] = _tasks(member.assigned, topology.partitions_per_topic)
        event["active_tasks_pending_revocation"] = _tasks(member.pending_revocation, topology.partitions_per_topic)
        event["group_epoch"] = group_epoch
        event["target_assignment_epoch"] = target_assignment_epoch
        self._out(HEARTBEATS, group_id, event)

    def member_left(
        self, ts: int, group_id: str, member_id: str, reason: str, member_epoch: int, instance_id: str | None, truth: Truth | None = None
    ) -> None:
        event = self._base(_MEMBER_LEFT, ts, group_id)
        event["member_id"] = member_id
        event["reason"] = reason
        event["member_epoch"] = member_epoch
        if instance_id is not None:
            event["instance_id"] = instance_id
        if truth is not None and self.labels:
            event["truth"] = truth.as_dict()
        self._out(HEARTBEATS, group_id, event)

    def group_state(self, ts: int, group_id: str, state: str, protocol: str, truth: Truth | None = None) -> None:
        event = self._base(_GROUP_STATE, ts, group_id)
        event["state"] = state
        event["protocol"] = protocol
        if truth is not None and self.labels:
            event["truth"] = truth.as_dict()
        self._out(HEARTBEATS, group_id, event)

    def classic_join(
        self,
        ts: int,
        group_id: str,
        member_id: str,
        generation: int,
        owned: Sequence[int],
        topology: GroupTopology,
        truth: Truth | None = None,
    ) -> None:
        event = self._base(_CLASSIC_JOIN, ts, group_id)
        event["member_id"] = member_id
        event["generation"] = generation
        event["owned"] = topology.topic_partitions(owned)
        event["protocol"] = "classic"
        if truth is not None and self.labels:
            event["truth"] = truth.as_dict()
        self._out(HEARTBEATS, group_id, event)

    def classic_sync(
        self, ts: int, group_id: str, generation: int, assignments: dict[str, Sequence[int]], topology: GroupTopology
    ) -> None:
        event = self._base(_CLASSIC_SYNC, ts, group_id)
        event["generation"] = generation
        event["assignments"] = {m: topology.topic_partitions(parts) for m, parts in assignments.items()}
        self._out(HEARTBEATS, group_id, event)

    # ---------------------------------------------------------------- commits
    #
    # Commits are the bulk of the traffic and, for one client, identical but for
    # ``ts``, ``event_id`` and the offsets until something changes. Callers
    # prepare a commit once (:meth:`prepare_commit`, cacheable) and emit it many
    # times (:meth:`emit_commit`); :meth:`offset_commit` does both.

    def commit_layout(self, logs: Sequence[PartitionLog], leader_epochs: Sequence[int]) -> Any:
        """Precompute what :meth:`prepare_commit` needs for these partitions (callers may cache it)."""
        return None

    def prepare_commit(
        self,
        group_id: str,
        member_id: str,
        member_epoch: int,
        instance_id: str | None,
        logs: Sequence[PartitionLog],
        leader_epochs: Sequence[int],
        error_code: int,
        txn: tuple[str, int, int] | None,
        truth: Truth | None,
        layout: Any = None,
    ) -> Any:
        """Everything of a commit event but ``ts``, ``event_id`` and the offsets."""
        event: dict[str, Any] = {"type": _TXN_OFFSET_COMMIT if txn is not None else _OFFSET_COMMIT, "ts": 0}
        if self.cluster is not None:
            event["cluster"] = self.cluster
        event["group_id"] = group_id
        event["event_id"] = ""
        event["member_id"] = member_id
        event["member_epoch"] = member_epoch
        if instance_id is not None:
            event["instance_id"] = instance_id
        event["offsets"] = None
        event["error_code"] = error_code
        if txn is not None:
            event["transactional_id"], event["producer_id"], event["producer_epoch"] = txn
        labelled = truth if truth is not None and self.labels else None
        partitions = [(log.topic, log.partition, e) for log, e in zip(logs, leader_epochs)]
        return group_id, event, partitions, labelled

    def emit_commit(self, prepared: Any, ts: int, offsets: Sequence[int]) -> None:
        group_id, template, partitions, truth = prepared
        event = dict(template)
        event["ts"] = ts
        event["event_id"] = self._next_id()
        event["offsets"] = [
            {"topic": topic, "partition": partition, "offset": o, "leader_epoch": e}
            for (topic, partition, e), o in zip(partitions, offsets)
        ]
        if truth is not None:
            event["truth"] = truth.as_dict()
        self._out(OFFSETS, group_id, event)

    def offset_commit(
        self,
        ts: int,
        group_id: str,
        member_id: str,
        member_epoch: int,
        instance_id: str | None,
        logs: Sequence[PartitionLog],
        offsets: Sequence[int],
        leader_epochs: Sequence[int],
        error_code: int,
        txn: tuple[str, int, int] | None,
        truth: Truth | None,
    ) -> None:
        prepared = self.prepare_commit(
            group_id, member_id, member_epoch, instance_id, logs, leader_epochs, error_code, txn, truth
        )
        self.emit_commit(prepared, ts, offsets)

    def offset_committed(
        self, ts: int, group_id: str, log: PartitionLog, offset: int, leader_epoch: int, commit_ts: int
    ) -> None:
        event = self._base(_OFFSET_COMMITTED, ts, group_id)
        event["topic"] = log.topic
        event["partition"] = log.partition
        event["offset"] = offset
        event["leader_epoch"] = leader_epoch
        event["commit_ts"] = commit_ts
        self._out(OFFSETS, group_id, event)

    def offset_deleted(self, ts: int, group_id: str, log: PartitionLog, truth: Truth | None = None) -> None:
        event = self._base(_OFFSET_DELETED, ts, group_id)
        event["topic"] = log.topic
        event["partition"] = log.partition
        if truth is not None and self.labels:
            event["truth"] = truth.as_dict()
        self._out(OFFSETS, group_id, event)

    def partition_epochs(self, ts: int, log: PartitionLog, log_end_offset: int, truth: Truth | None = None) -> None:
        event = self._base(_PARTITION_EPOCHS, ts, None)
        event["topic"] = log.topic
        event["partition"] = log.partition
        event["log_start_offset"] = log.log_start_offset
        event["log_end_offset"] = log_end_offset
        event["epochs"] = [{"epoch": e, "start_offset": s} for e, s in log.epochs]
        if truth is not None and self.labels:
            event["truth"] = truth.as_dict()
        self._out(OFFSETS, f"{log.topic}-{log.partition}", event)



class JsonEmitter(DictEmitter):
    """Emit events as compact JSON strings (one line each, no newline)."""

    def _out(self, kind: int, key: str, event: dict[str, Any]) -> None:
        self.write(kind, key, _dumps(event))

    def heartbeat(self, ts: int, group_id: str, member_id: str, request_epoch: int, response_epoch: int, error_code: int) -> None:
        n = self.count
        self.count = n + 1
        self.write(
            HEARTBEATS,
            group_id,
            f'{{"type":"{_HEARTBEAT}","ts":{ts},{self._cluster_json}"group_id":"{group_id}","event_id":"{self.prefix}{n}",'
            f'"member_id":"{member_id}","request_epoch":{request_epoch},"response_epoch":{response_epoch},'
            f'"error_code":{error_code}}}',
        )

    def commit_layout(self, logs: Sequence[PartitionLog], leader_epochs: Sequence[int]) -> str:
        """A %-template of the ``offsets`` array (names are SAFE_NAME: no ``%`` to escape)."""
        return ",".join(f'{log.json_prefix}%d,"leader_epoch":{e}}}' for log, e in zip(logs, leader_epochs))

    def prepare_commit(
        self,
        group_id: str,
        member_id: str,
        member_epoch: int,
        instance_id: str | None,
        logs: Sequence[PartitionLog],
        leader_epochs: Sequence[int],
        error_code: int,
        txn: tuple[str, int, int] | None,
        truth: Truth | None,
        layout: Any = None,
    ) -> tuple[str, str]:
        """The whole line as a %-template of ``(ts, event number, *offsets)``: one C-level format per event."""
        if layout is None:
            layout = self.commit_layout(logs, leader_epochs)
        instance = "" if instance_id is None else f'"instance_id":"{instance_id}",'
        tail = ""
        if txn is not None:
            tail = f',"transactional_id":"{txn[0]}","producer_id":{txn[1]},"producer_epoch":{txn[2]}'
        if truth is not None and self.labels:
            tail += ',"truth":' + truth.as_json().replace("%", "%%")
        kind = _TXN_OFFSET_COMMIT if txn is not None else _OFFSET_COMMIT
        return group_id, (
            f'{{"type":"{kind}","ts":%d,{self._cluster_json}"group_id":"{group_id}","event_id":"{self.prefix}%d",'
            f'"member_id":"{member_id}","member_epoch":{member_epoch},{instance}"offsets":[{layout}],'
            f'"error_code":{error_code}{tail}}}'
        )

    def emit_commit(self, prepared: tuple[str, str], ts: int, offsets: Sequence[int]) -> None:
        n = self.count
        self.count = n + 1
        self.write(OFFSETS, prepared[0], prepared[1] % (ts, n, *offsets))

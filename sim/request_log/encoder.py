"""Broker request-log lines from the simulator's contract events: the order and what becomes of each event.

What lives here: :class:`RequestLogEncoder`, which turns the contract §1
event stream of a simulation into the lines an Apache Kafka broker's
``kafka.request.logger`` writes at DEBUG (contract §10), in the order a
broker would have logged them, and :func:`simulated_topic_ids`. The lines
themselves are built per API (:mod:`.commits`, :mod:`.heartbeats`) inside
the common frame (:mod:`.wire`), at the versions of the group's version mix
(:mod:`.versions`).

Mapping (docs/simulator.md, "Request-log format"):

* ``offset_commit`` / ``txn_offset_commit`` -> one OffsetCommit (8) /
  TxnOffsetCommit (28) line;
* ``heartbeat`` -> one ConsumerGroupHeartbeat (68) line; the
  ``member_assignment`` the same exchange produced (the next event, same
  member, same ``ts``) goes into that line's response, and a leave's
  ``member_left`` is the line itself (request epoch -1 / -2);
* everything the request log cannot show, or this encoder does not write, is
  skipped and counted (:attr:`RequestLogEncoder.counts`): the coordinator's own
  transitions (session / rebalance timeouts, fencing removals), classic groups'
  JoinGroup/SyncGroup/LeaveGroup (the decoder reads them, but the simulator's
  classic events do not hold the requests and responses to write them from),
  ``group_state``, ``offset_committed`` / ``offset_deleted`` and
  ``partition_epochs`` (no request carries them).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any

from fencewatch.state.records import EventType
from fencewatch.sim.request_log.commits import CommitLines
from fencewatch.sim.request_log.heartbeats import HeartbeatLines
from fencewatch.sim.request_log.members import Members
from fencewatch.sim.request_log.versions import DEFAULT_BROKER_VERSIONS, VersionMix
from fencewatch.sim.request_log.wire import Framing, topic_id


class RequestLogEncoder:
    """Contract §1 events in, ``(group_id, line)`` pairs out, in the order a broker would have logged them.

    Feed every event of a run to :meth:`add` in emission order, then call
    :meth:`close`. A heartbeat is held until the next event, which may be the
    ``member_assignment`` or ``member_left`` its exchange produced.
    ``counts`` says, per event type, what became of it: ``encoded``,
    ``carried`` (folded into a heartbeat line) or ``skipped:<reason>``.
    """

    def __init__(
        self,
        *,
        broker_versions: Sequence[str] = DEFAULT_BROKER_VERSIONS,
        client_versions: str = "newest",
        rebalance_timeout_ms: int = 300_000,
        heartbeat_interval_ms: int = 5_000,
    ) -> None:
        self._mix = VersionMix(broker_versions, client_versions)
        self.counts: Counter = Counter()
        self._framing = Framing()
        self._members = Members()
        self._classic: set[str] = set()
        self._commits = CommitLines(self._mix, self._framing, self._members, self._classic)
        self._heartbeats = HeartbeatLines(self._mix, self._framing, self._members, self.counts,
                                          rebalance_timeout_ms=rebalance_timeout_ms,
                                          heartbeat_interval_ms=heartbeat_interval_ms)
        self._held: list[dict] | None = None  # [heartbeat, member_assignment?]

    @property
    def lines(self) -> int:
        """Lines written so far."""
        return self._framing.lines

    @property
    def versions(self) -> Counter:
        """Lines per API and version: ``"OFFSET_COMMIT v9" -> n``."""
        return self._framing.versions

    # ------------------------------------------------------------------ public

    def add(self, event: dict) -> list[tuple[str, str]]:
        """Lines completed by this event (the held heartbeat's, then the event's own)."""
        out: list[tuple[str, str]] = []
        kind = event.get("type")
        held = self._held
        if held is not None:
            hb = held[0]
            same = event.get("group_id") == hb["group_id"] and event.get("member_id") == hb["member_id"]
            if same and kind == EventType.MEMBER_ASSIGNMENT and len(held) == 1 and hb["error_code"] == 0:
                held.append(event)
                self.counts["member_assignment:carried"] += 1
                return out
            if same and kind == EventType.MEMBER_LEFT:
                reason = event.get("reason")
                if reason in ("leave", "static_leave") and hb["request_epoch"] < 0 and hb["error_code"] == 0:
                    self.counts[f"member_left:{reason}:carried"] += 1
                    return out
                if reason == "fenced":
                    # The coordinator's removal of the old incarnation: no line of its own.
                    self.counts["member_left:fenced:skipped"] += 1
                    self._members.forget(hb["group_id"], hb["member_id"])
                    return out
            out.append(self._heartbeats.line(*held))
            self._held = None
        if kind == EventType.HEARTBEAT:
            self._held = [event]
            self.counts["heartbeat:encoded"] += 1
        elif kind in (EventType.OFFSET_COMMIT, EventType.TXN_OFFSET_COMMIT):
            out.append(self._commits.line(event))
            self.counts[f"{kind}:encoded"] += 1
        else:
            self._skip(event)
        return out

    def close(self) -> list[tuple[str, str]]:
        """The held heartbeat's line, if any."""
        if self._held is None:
            return []
        line = self._heartbeats.line(*self._held)
        self._held = None
        return [line]

    def encode_all(self, events: Iterable[dict]) -> list[tuple[str, str]]:
        """Every line of ``events`` (tests, small runs)."""
        out: list[tuple[str, str]] = []
        for event in events:
            out.extend(self.add(event))
        out.extend(self.close())
        return out

    def topic_ids(self) -> dict[str, str]:
        """``{topic id: topic name}`` of every topic written so far: the bridge's ``--topic-ids`` file."""
        return self._framing.topic_ids()

    def skipped(self) -> dict[str, int]:
        """Skipped events per ``type:reason``."""
        return {k[: -len(":skipped")]: v for k, v in sorted(self.counts.items()) if k.endswith(":skipped")}

    def group_versions(self, group_id: str) -> dict[str, Any] | None:
        """The broker release and API versions a group's lines use (None before its first line)."""
        return self._mix.group_versions(group_id)

    def pin_group(self, group_id: str, broker: str, *, offset_commit: int | None = None,
                  txn_offset_commit: int | None = None, heartbeat: int | None = None) -> None:
        """Fix a group's coordinator release and client versions (golden tests, reproducing a capture).

        Versions default to the release's newest and must be ones it accepts.
        """
        self._mix.pin_group(group_id, broker, offset_commit=offset_commit, txn_offset_commit=txn_offset_commit,
                            heartbeat=heartbeat)

    # ------------------------------------------------------------------ what the log cannot carry

    def _skip(self, event: dict) -> None:
        kind = event.get("type")
        group_id = event.get("group_id")
        if kind in (EventType.CLASSIC_JOIN, EventType.CLASSIC_SYNC):
            self._classic.add(group_id)
            self.counts[f"{kind}:skipped"] += 1  # JoinGroup / SyncGroup (APIs 11, 14): not written by this encoder
        elif kind == EventType.GROUP_STATE:
            if event.get("protocol") == "classic":
                self._classic.add(group_id)
            self.counts["group_state:skipped"] += 1  # the coordinator's own state, in no request
        elif kind == EventType.MEMBER_LEFT:
            reason = event.get("reason")
            if group_id in self._classic:
                self.counts[f"member_left:classic_{reason}:skipped"] += 1  # LeaveGroup / classic session timeout
            else:
                self.counts[f"member_left:{reason}:skipped"] += 1  # coordinator-side removal: no request
                self._members.forget(group_id, event.get("member_id"))
        elif kind == EventType.MEMBER_ASSIGNMENT:
            self.counts["member_assignment:skipped"] += 1  # no heartbeat delivered it (never in the simulator)
        else:
            self.counts[f"{kind}:skipped"] += 1  # offset_committed, offset_deleted, partition_epochs, unknown


def simulated_topic_ids(config: Any) -> dict[str, str]:
    """``{topic id: name}`` of every topic a simulation (a ``SimConfig``) will use, before it runs.

    For a consumer of the lines that must know the ids up front (the demo's
    streaming job reads ``--topic-ids`` at start).
    """
    from fencewatch.sim.emit import DictEmitter
    from fencewatch.sim.world import Simulator

    sim = Simulator(config, DictEmitter(lambda kind, key, event: None))
    return {topic_id(name): name for name in sorted({log.topic for log in sim.logs.values()})}

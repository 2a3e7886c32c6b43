"""A KIP-848 member and a transaction played by hand, for cases no client reaches on purpose.

What lives here: :class:`HandBuiltMember` (ConsumerGroupHeartbeat v1 and OffsetCommit
v9 over its own connection, built by :mod:`.wire`) and :class:`HandBuiltTransaction`
(InitProducerId, TxnOffsetCommit v6, EndTxn). They are real requests to the real
coordinator, which judges them like any client's; only the epochs they carry are
chosen by the scenario instead of by a client's state machine.

Why: Kafka's clients commit with the member epoch they hold when the request is
built, so a commit one epoch behind on a partition the member still owns (the case
KIP-1251 accepts and Kafka 4.2 rejects) happens only in a race. librdkafka 2.16 does
not send TxnOffsetCommit v6 either (it sends v3), so Kafka 4.4's STALE_MEMBER_EPOCH
answer to a transactional commit (KIP-1319) needs a request built here.
PLAINTEXT listeners only.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from . import wire
from .wire import Connection, HeartbeatAnswer

__all__ = ["HandBuiltMember", "HandBuiltTransaction", "CommitAnswer", "api_versions", "coordinator_address"]

log = logging.getLogger(__name__)

COORDINATOR_ERRORS = (14, 15, 16)  # COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR


@dataclass(frozen=True, slots=True)
class CommitAnswer:
    """What one hand-built commit carried and how the broker answered it; ``client_id`` and
    ``correlation_id`` find its line in the broker's request log."""
    client_id: str
    correlation_id: int
    member_epoch: int
    answers: tuple[tuple[str, int, int], ...]  # (topic, partition, error code)

    @property
    def codes(self) -> set[int]:
        return {code for _, _, code in self.answers}


def api_versions(bootstrap: str, client_id: str = "fencewatch-sim-live") -> dict[int, tuple[int, int]]:
    with Connection.to(bootstrap.split(",")[0], client_id) as conn:
        _, r = conn.request(wire.API_VERSIONS, 3, wire.encode_api_versions())
        return wire.decode_api_versions(r)


def coordinator_address(bootstrap: str, key: str, key_type: int, client_id: str, timeout_s: float = 20.0) -> str:
    """host:port of the coordinator of a group (0) or transactional id (1); retried while the
    broker answers that it is not available yet (a fresh cluster creates its internal topics)."""
    deadline = time.monotonic() + timeout_s
    with Connection.to(bootstrap.split(",")[0], client_id) as conn:
        while True:
            _, r = conn.request(wire.FIND_COORDINATOR, 4, wire.encode_find_coordinator(key, key_type))
            code, host, port, _ = wire.decode_find_coordinator(r)
            if code == 0:
                return f"{host}:{port}"
            if time.monotonic() > deadline:
                raise wire.ProtocolError(f"FindCoordinator({key!r}) answered error {code}")
            time.sleep(0.2)


class HandBuiltMember:
    """One consumer-protocol member. It takes every assignment the coordinator sends at once
    (revoking by reporting the new set as owned in the next heartbeat), so its epochs move
    only when the coordinator's do."""

    def __init__(self, bootstrap: str, group_id: str, topics: list[str], client_id: str, *,
                 instance_id: str | None = None, rebalance_timeout_ms: int = 30_000) -> None:
        self.group_id, self.topics, self.client_id = group_id, topics, client_id
        self.instance_id, self.rebalance_timeout_ms = instance_id, rebalance_timeout_ms
        self.member_id = wire.new_member_id()
        self.epoch = 0
        self.assignment: dict[bytes, tuple[int, ...]] = {}
        self.conn = Connection.to(coordinator_address(bootstrap, group_id, 0, client_id), client_id)
        self._sent_owned: dict[bytes, tuple[int, ...]] | None = None

    def join(self, timeout_s: float = 20.0) -> HeartbeatAnswer:
        """The first heartbeat (epoch 0, every field), repeated while the coordinator answers
        that it is loading or elsewhere (a fresh cluster loads ``__consumer_offsets`` first)."""
        body = wire.encode_heartbeat(self.group_id, self.member_id, 0, instance_id=self.instance_id,
                                     rebalance_timeout_ms=self.rebalance_timeout_ms,
                                     subscribed_topic_names=list(self.topics), owned={})
        self._sent_owned = {}
        deadline = time.monotonic() + timeout_s
        while True:
            answer = self._send(body)
            if answer.error_code not in COORDINATOR_ERRORS or time.monotonic() > deadline:
                return answer
            time.sleep(0.2)

    def heartbeat(self) -> HeartbeatAnswer:
        """A heartbeat at the member's epoch; the owned set is sent only when it changed since
        the last one sent (as the Java client and librdkafka do)."""
        owned = None if self.assignment == self._sent_owned else dict(self.assignment)
        if owned is not None:
            self._sent_owned = owned
        return self._send(wire.encode_heartbeat(self.group_id, self.member_id, self.epoch, owned=owned))

    def heartbeat_until(self, done, timeout_s: float = 20.0, interval_s: float = 0.25) -> HeartbeatAnswer:
        """Heartbeat until ``done(self)`` holds (after acknowledging what the broker sent)."""
        deadline = time.monotonic() + timeout_s
        while True:
            answer = self.heartbeat()
            if answer.error_code:
                raise wire.ProtocolError(f"{self.client_id}: heartbeat answered error {answer.error_code}: "
                                         f"{answer.error_message}")
            if done(self) and self.assignment == self._sent_owned:
                return answer
            if time.monotonic() > deadline:
                raise TimeoutError(f"{self.client_id}: condition not reached at epoch {self.epoch}, "
                                   f"assignment {self.assignment}")
            time.sleep(interval_s)

    def leave(self) -> HeartbeatAnswer:
        epoch = -2 if self.instance_id is not None else -1
        return self._send(wire.encode_heartbeat(self.group_id, self.member_id, epoch, instance_id=self.instance_id))

    def commit(self, member_epoch: int, offsets: dict[str, list[wire.CommitEntry]]) -> CommitAnswer:
        """OffsetCommit v9 at ``member_epoch`` (whatever the member's own epoch is)."""
        body = wire.encode_offset_commit(self.group_id, member_epoch, self.member_id, offsets, self.instance_id)
        cid, r = self.conn.request(wire.OFFSET_COMMIT, 9, body)
        answer = CommitAnswer(self.client_id, cid, member_epoch, tuple(wire.decode_commit_answer(r)))
        log.info("[group=%s member=%s] hand-built OffsetCommit v9 at epoch %d (member at %d): %s",
                 self.group_id, self.member_id, member_epoch, self.epoch, answer.answers)
        return answer

    def _send(self, body: bytes) -> HeartbeatAnswer:
        _, r = self.conn.request(wire.CONSUMER_GROUP_HEARTBEAT, 1, body)
        answer = wire.decode_heartbeat(r)
        if answer.error_code == 0 and answer.member_epoch >= 0:
            self.epoch = answer.member_epoch
            if answer.assignment is not None:
                self.assignment = answer.assignment
        return answer

    def close(self) -> None:
        self.conn.close()


class HandBuiltTransaction:
    """A transactional producer's group-side half: InitProducerId, TxnOffsetCommit v6, EndTxn
    (transactions version 2, KIP-890: a TxnOffsetCommit v5+ adds the group to the
    transaction itself, no AddOffsetsToTxn)."""

    def __init__(self, bootstrap: str, transactional_id: str, client_id: str) -> None:
        self.transactional_id, self.client_id = transactional_id, client_id
        self.bootstrap = bootstrap
        self.txn_conn = Connection.to(coordinator_address(bootstrap, transactional_id, 1, client_id), client_id)
        self.producer_id = self.producer_epoch = -1
        self.group_conns: dict[str, Connection] = {}

    def init(self, timeout_s: float = 20.0) -> None:
        deadline = time.monotonic() + timeout_s
        while True:
            _, r = self.txn_conn.request(wire.INIT_PRODUCER_ID, 5, wire.encode_init_producer_id(self.transactional_id))
            code, self.producer_id, self.producer_epoch = wire.decode_init_producer_id(r)
            if code == 0:
                return
            if time.monotonic() > deadline:
                raise wire.ProtocolError(f"InitProducerId answered error {code}")
            time.sleep(0.2)

    def commit_offsets(self, group_id: str, member_id: str, member_epoch: int,
                       offsets: dict[str | bytes, list[wire.CommitEntry]], version: int = 6) -> CommitAnswer:
        """TxnOffsetCommit at ``member_epoch``: v6 names topics by id (16 bytes), v5 by name."""
        conn = self.group_conns.get(group_id)
        if conn is None:
            conn = self.group_conns[group_id] = Connection.to(
                coordinator_address(self.bootstrap, group_id, 0, self.client_id), self.client_id)
        body = wire.encode_txn_offset_commit(self.transactional_id, group_id, self.producer_id, self.producer_epoch,
                                             member_epoch, member_id, offsets)
        cid, r = conn.request(wire.TXN_OFFSET_COMMIT, version, body)
        answer = CommitAnswer(self.client_id, cid, member_epoch,
                              tuple(wire.decode_commit_answer(r, by_id=version >= 6)))
        log.info("[group=%s member=%s] hand-built TxnOffsetCommit v%d at epoch %d: %s",
                 group_id, member_id, version, member_epoch, answer.answers)
        return answer

    def end(self, committed: bool) -> int:
        _, r = self.txn_conn.request(wire.END_TXN, 5, wire.encode_end_txn(
            self.transactional_id, self.producer_id, self.producer_epoch, committed))
        return wire.decode_end_txn(r)

    def close(self) -> None:
        self.txn_conn.close()
        for conn in self.group_conns.values():
            conn.close()

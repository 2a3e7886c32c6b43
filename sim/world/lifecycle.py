"""A consumer process's life: start, clean close, crash, a VM pause and the wake after it.

What lives here: :class:`Lifecycle`, the driver of client processes: a start
(a member id, InitProducerId for an exactly-once slot, the first join), the
commit clock, a clean close (commit, then leave), a crash (the coordinator
notices after the session timeout), a freeze (heartbeats and commits stop)
and the wake (the application commits what it processed before the pause).
KIP-848 heartbeats are in :mod:`.heartbeats`, classic rounds in :mod:`.rebalances`.
"""

from __future__ import annotations

import base64

from fencewatch.sim.clients import ConsumerClient
from fencewatch.sim.coordinator import LEAVE_GROUP_MEMBER_EPOCH, LEAVE_GROUP_STATIC_MEMBER_EPOCH
from fencewatch.sim.world.schedule import COMMIT, GROUP, HB, LEAVE, SESSION, XCOMMIT, Schedule, SimGroup


class Lifecycle(Schedule):
    """Starting, stopping, pausing and waking consumer processes."""

    def _new_member_id(self, group: SimGroup) -> str:
        group.member_seq += 1
        if group.protocol == "classic":
            return f"consumer-{group.group_id}-{group.member_seq}-{self.rng.getrandbits(48):012x}"
        # KIP-848 clients generate their member id: a base64 UUID (22 chars of [A-Za-z0-9_-]).
        return base64.urlsafe_b64encode(self.rng.getrandbits(128).to_bytes(16, "big")).rstrip(b"=").decode()

    def _start_client(self, group: SimGroup, t: int, slot: int | None) -> ConsumerClient:
        """A consumer process starts and sends its first (join) heartbeat at ``t``."""
        k = self.knobs
        if slot is None:
            slot = next(i for i in range(len(group.slots) + 1) if group.slots.get(i) is None)
        transactional_id = None
        producer_id, producer_epoch = -1, 0
        if group.transactional:
            # InitProducerId for the slot's transactional id: same producer id, epoch bumped per restart.
            transactional_id = f"{group.group_id}-txn-{slot}"
            previous = group.producer_epochs.get(slot)
            producer_id, producer_epoch = (self._next_producer_id(), 0) if previous is None else (previous[0], previous[1] + 1)
            group.producer_epochs[slot] = (producer_id, producer_epoch)
        client = ConsumerClient(
            self._new_member_id(group),
            group,
            t,
            instance_id=f"{group.group_id}-instance-{slot}" if group.static else None,
            transactional_id=transactional_id,
            producer_id=producer_id,
            producer_epoch=producer_epoch,
            commit_interval_ms=k.eos_commit_interval_ms if group.transactional else k.auto_commit_interval_ms,
            slow_revocation=self.rng.random() < k.slow_revocation_rate,
            protocol=group.protocol,
        )
        if transactional_id is not None:
            client.commit_delay_ms = k.txn_commit_delay_ms
        group.slots[slot] = client
        group.clients[client.member_id] = client
        if group.protocol == "classic":
            self._classic_join(group, client, t)
        else:
            self._push(t + self._latency(), HB, client, client.hb_token, t)
        if group.commits:
            self._schedule_commit(client, t + client.commit_interval_ms)
        return client

    def _schedule_commit(self, client: ConsumerClient, t_send: int) -> None:
        """The client's next commit from its own clock, sent (group metadata taken) at ``t_send``.

        A transactional commit reaches the group coordinator only after the
        producer's AddOffsetsToTxn round trip (``txn_commit_delay_ms``): the
        member epoch it carries is older by that much.
        """
        self._push(t_send + self._latency() + client.commit_delay_ms, COMMIT, client, client.commit_token, t_send)

    def _next_producer_id(self) -> int:
        self._producer_ids += 1
        return self._producer_ids

    def _slot_of(self, client: ConsumerClient) -> int | None:
        for slot, c in client.group.slots.items():
            if c is client:
                return slot
        return None

    def _stop_client(self, client: ConsumerClient) -> None:
        client.alive = False
        client.stop_timers()
        group = client.group
        group.clients.pop(client.member_id, None)
        slot = self._slot_of(client)
        if slot is not None:
            group.slots[slot] = None

    def _shutdown(self, client: ConsumerClient, t: int) -> None:
        """A clean close: commit what is owned (commitSync), then leave the group."""
        latest = client.view_at(t)
        group = client.group
        latency = self._latency()
        if latest[3] and latest[2] and not client.revoking:
            self._push(t + latency, XCOMMIT, client, None, (t, latest[1], latest[2], "close", client.txn is not None, client.member_id))
        send_leave = t + 2 * latency
        static = client.instance_id is not None
        self._stop_client(client)
        if group.protocol == "classic":
            self._classic_leave(group, client.member_id, "leave", send_leave + self._latency())
            return
        if latest[3]:
            epoch = LEAVE_GROUP_STATIC_MEMBER_EPOCH if static else LEAVE_GROUP_MEMBER_EPOCH
            self._push(send_leave + self._latency(), LEAVE, client, None, epoch)

    def _crash(self, client: ConsumerClient, t: int) -> None:
        """The process dies: no commit, no leave; the coordinator notices after the session timeout."""
        group = client.group
        self._stop_client(client)
        self._count("crash")
        if group.protocol == "classic":
            self._push(t + self.knobs.session_timeout_ms, SESSION, group, client.member_id, None)
            return
        member = group.coord.members.get(client.member_id)
        if member is not None:
            self._push(member.last_heartbeat_ms + self.knobs.session_timeout_ms, SESSION, group, client.member_id, member.last_heartbeat_ms)

    def _freeze(self, client: ConsumerClient, t: int) -> None:
        """A VM or GC pause: the whole process stops (heartbeats and commits)."""
        k = self.knobs
        client.frozen = True
        client.stop_timers()
        duration = int(k.pause_ms * self.rng.uniform(0.6, 1.4))
        self._count("pause")
        group = client.group
        if group.protocol == "classic":
            self._push(t + k.session_timeout_ms, SESSION, group, client.member_id, None)
        else:
            member = group.coord.members.get(client.member_id)
            if member is not None:
                self._push(member.last_heartbeat_ms + k.session_timeout_ms, SESSION, group, client.member_id, member.last_heartbeat_ms)
        self._push(t + duration, GROUP, group, "wake", client)

    def _wake(self, client: ConsumerClient, t: int) -> None:
        """The process resumes: the application commits what it processed before the pause,
        with the epoch it knew then, while the heartbeat thread finds out what happened."""
        if not client.alive:
            return
        client.frozen = False
        group = client.group
        latest = client.view_at(t)
        if latest[3] and latest[2]:
            t_send = t + self.rng.randrange(0, 2 * int(self.knobs.latency_ms) + 2)
            self._push(
                t_send + self._latency(),
                XCOMMIT,
                client,
                None,
                (t_send, latest[1], latest[2], "after_pause", client.txn is not None, client.member_id),
            )
        if group.protocol == "classic":
            self._classic_wake(group, client, t)
            return
        self._push(t + self._latency(), HB, client, client.hb_token, t)
        self._schedule_commit(client, t + client.commit_interval_ms)

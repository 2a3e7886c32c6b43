"""KIP-848 members as the coordinator sees them: heartbeats, revocations, races, leaves, timeouts.

What lives here: :class:`Heartbeats`, the driver of consumer-protocol
members: a heartbeat judged when it arrives with what the client knew when
it sent it (:meth:`ConsumerClient.view_at`), the answer the client learns
after the coordinator's write, revocation callbacks (slow ones past the
rebalance timeout), commits in flight during an epoch bump (the races of
KAFKA-19779), delayed commits, leave heartbeats and the session and
rebalance timeouts that remove a member.
"""

from __future__ import annotations

from fencewatch.sim.clients import ConsumerClient
from fencewatch.sim.coordinator import (
    HB_CHANGED,
    HB_LEFT,
    HB_UNREVOKED,
    LEAVE_GROUP_STATIC_MEMBER_EPOCH,
    NONE,
    UNRELEASED_INSTANCE_ID,
    UNREVOKED_PARTITIONS,
    ConsumerGroup,
)
from fencewatch.sim.emit import HEARTBEATS
from fencewatch.sim.world.schedule import CB_DONE, HB, REBALANCE, SESSION, XCOMMIT, Schedule, SimGroup


class Heartbeats(Schedule):
    """ConsumerGroupHeartbeat exchanges and what follows from them."""

    def _on_heartbeat(self, t: int, client: ConsumerClient, token: int, t_send: int) -> None:
        if token != client.hb_token or not client.alive:
            return
        group = client.group
        coord: ConsumerGroup = group.coord
        view = client.view_at(t_send)
        request_epoch = view[1] if view[3] else 0
        owned = view[2]
        member_id = client.member_id
        before = coord.members.get(member_id)
        before_epoch = request_epoch if before is None else before.member_epoch
        error, response_epoch, flags = coord.heartbeat(member_id, request_epoch, owned, t, client.instance_id)
        emit = self.emit
        gid = group.group_id
        emit.heartbeat(self._stamp(group, t, HEARTBEATS), gid, member_id, request_epoch, response_epoch, error)
        member = coord.members.get(member_id)
        if flags:
            if flags & HB_LEFT:
                # Fenced: a wrong epoch, or a known member rejoining with epoch 0 (it starts over).
                emit.member_left(self._stamp(group, t, HEARTBEATS), gid, member_id, "fenced", before_epoch, client.instance_id)
            if flags & HB_CHANGED:
                if member is not None:
                    if group.protocol == "streams":
                        self._streams_assignment(group, t, member)
                    else:
                        emit.member_assignment(
                            self._stamp(group, t, HEARTBEATS), gid, member, group.topology, coord.group_epoch, coord.target_assignment_epoch
                        )
            if flags & HB_UNREVOKED:
                self._push(t + self.knobs.rebalance_timeout_ms, REBALANCE, group, member_id, member.unrevoked_since_ms)
            self._emit_state(group, t)
        # The response leaves once the coordinator's records are written (when anything changed).
        t_learn = t + self._latency() + (self.knobs.coordinator_write_ms if flags else 0)
        if error != NONE:
            self._on_heartbeat_error(client, error, t, t_learn)
            return
        latest = client.history[-1]
        if member.state == UNREVOKED_PARTITIONS:
            if response_epoch != latest[1]:
                client.learn(t_learn, response_epoch, latest[2], True)
            if not client.revoking:
                pending = member.pending_revocation
                revoked = tuple(p for p in latest[2] if p in pending)
                if revoked:
                    self._start_revocation(client, t_learn, revoked, response_epoch)
        else:
            assigned = member.assigned
            if response_epoch != latest[1] or len(assigned) != len(latest[2]) or any(p not in assigned for p in latest[2]):
                client.learn(t_learn, response_epoch, tuple(sorted(assigned)), True)
                if 0 < latest[1] < response_epoch and latest[3] and latest[2] and self.rng.random() < self.knobs.race_rate:
                    self._inject_race(client, t, t_learn, latest[1], latest[2])
        t_next = t_send + self.knobs.heartbeat_interval_ms
        if t_next < t_learn:
            t_next = t_learn
        self._push(t_next + self._latency(), HB, client, token, t_next)

    def _streams_assignment(self, group: SimGroup, t: int, member) -> None:
        """A streams member's assignment record; the group's topology first, at its first join
        (Kafka records the topology the first member's StreamsGroupHeartbeat carries)."""
        coord = group.coord
        if not group.topology_sent:
            group.topology_sent = True
            self.emit.streams_topology(self._stamp(group, t, HEARTBEATS), group.group_id, group.topology)
        self.emit.streams_member_assignment(
            self._stamp(group, t, HEARTBEATS), group.group_id, member, group.topology, coord.group_epoch, coord.target_assignment_epoch
        )

    def _on_heartbeat_error(self, client: ConsumerClient, error: int, t: int, t_learn: int) -> None:
        if error == UNRELEASED_INSTANCE_ID:
            # Another live process holds this group.instance.id: fatal for the Java consumer.
            self._count("unreleased_instance_id")
            self._stop_client(client)
            return
        # UNKNOWN_MEMBER_ID / FENCED_MEMBER_EPOCH: the client drops its partitions
        # (onPartitionsLost, no commit) and rejoins with epoch 0 under the same member id.
        self._count("fenced_rejoin")
        client.learn(t_learn, 0, (), False)
        client.revoking = False
        client.hb_token += 1
        rejoin = t_learn + 1
        self._push(rejoin + self._latency(), HB, client, client.hb_token, rejoin)

    def _start_revocation(self, client: ConsumerClient, t_learn: int, revoked: tuple[int, ...], epoch: int) -> None:
        """The client learns it must revoke partitions: onPartitionsRevoked runs (and commits)."""
        k, rng = self.knobs, self.rng
        client.revoking = True
        if client.slow_revocation:
            duration = int(k.rebalance_timeout_ms * rng.uniform(1.1, 1.6))
            self._count("slow_revocation")
        else:
            duration = 1 + rng.randrange(0, 20)
        self._push(t_learn + duration, CB_DONE, client, client.commit_token, (revoked, epoch))
        if k.delayed_commit_rate > 0 and rng.random() < k.delayed_commit_rate:
            # A commit request sent just before the revocation hangs in the network (or in a
            # broker's request queue) and reaches the coordinator after the partitions moved.
            t_send = t_learn - 1
            view = client.view_at(t_send)
            if view[3] and view[2]:
                arrive = t_learn + int(k.delayed_commit_ms * rng.uniform(0.5, 1.5)) + 2 * k.heartbeat_interval_ms
                self._count("delayed_commit")
                self._push(arrive, XCOMMIT, client, None, (t_send, view[1], view[2], "delayed_request", client.txn is not None, client.member_id))

    def _inject_race(self, client: ConsumerClient, t: int, t_learn: int, epoch: int, owned: tuple[int, ...]) -> None:
        """A commit sent before the bumped epoch reached the client, arriving after the bump."""
        latency = self._latency()
        low = max(t - latency + 1, t_learn - 50 * latency)
        t_send = self.rng.randrange(low, t_learn) if low < t_learn else t_learn - 1
        arrive = max(t_send + latency, t + 1)
        self._count("race")
        self._push(arrive, XCOMMIT, client, None, (t_send, epoch, owned, "in_flight_during_heartbeat", client.txn is not None, client.member_id))

    def _on_callback_done(self, t: int, client: ConsumerClient, token: int, arg) -> None:
        revoked, epoch = arg
        client.revoking = False
        if not client.alive or client.frozen:
            return
        # onPartitionsRevoked commits the revoked partitions (commitSync) before returning; a
        # Kafka Streams task under exactly-once commits its revoked tasks in its transaction.
        latency = self._latency()
        txn = client.group.protocol == "streams" and client.txn is not None
        self._push(t + latency, XCOMMIT, client, None, (t, epoch, revoked, "revocation_callback", txn, client.member_id))
        if not client.view_at(t)[3]:
            return  # fenced meanwhile (and the client knows): the rejoin is already under way
        # The revocation applies on top of the newest knowledge, including a response in flight.
        latest = client.history[-1]
        if not latest[3]:
            return
        owned = tuple(p for p in latest[2] if p not in revoked)
        ack = t + 2 * latency
        client.learn(ack, latest[1], owned, True)
        # Acknowledge the revocation at once (the consumer heartbeats after reconciling).
        client.hb_token += 1
        self._push(ack + self._latency(), HB, client, client.hb_token, ack)

    # ------------------------------------------------------------------ leaving, timeouts

    def _on_leave(self, t: int, client: ConsumerClient, _unused, epoch: int) -> None:
        group = client.group
        coord: ConsumerGroup = group.coord
        member = coord.members.get(client.member_id)
        error, response_epoch, flags = coord.heartbeat(client.member_id, epoch, None, t)
        self.emit.heartbeat(self._stamp(group, t, HEARTBEATS), group.group_id, client.member_id, epoch, response_epoch, error)
        if error != NONE:
            return
        reason = "static_leave" if epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH and client.instance_id else "leave"
        self.emit.member_left(self._stamp(group, t, HEARTBEATS), group.group_id, client.member_id, reason, epoch, client.instance_id)
        if reason == "static_leave" and member is not None:
            self._push(t + self.knobs.session_timeout_ms, SESSION, group, client.member_id, member.last_heartbeat_ms)
        self._emit_state(group, t)

    def _on_session_check(self, t: int, group: SimGroup, member_id: str, last_heartbeat_ms) -> None:
        if group.protocol == "classic":
            self._classic_expire(group, member_id, t)
            return
        coord: ConsumerGroup = group.coord
        member = coord.members.get(member_id)
        if member is None or member.last_heartbeat_ms != last_heartbeat_ms:
            return
        epoch = member.member_epoch
        coord.remove_member(member)
        self._count("session_timeout")
        self.emit.member_left(self._stamp(group, t, HEARTBEATS), group.group_id, member_id, "session_timeout", epoch, member.instance_id)
        self._emit_state(group, t)

    def _on_rebalance_check(self, t: int, group: SimGroup, member_id: str, since: int) -> None:
        coord: ConsumerGroup = group.coord
        member = coord.members.get(member_id)
        if member is None or member.state != UNREVOKED_PARTITIONS or member.unrevoked_since_ms != since or member.member_epoch < 0:
            return
        epoch = member.member_epoch
        coord.remove_member(member)
        self._count("rebalance_timeout")
        self.emit.member_left(self._stamp(group, t, HEARTBEATS), group.group_id, member_id, "rebalance_timeout", epoch, member.instance_id)
        self._emit_state(group, t)

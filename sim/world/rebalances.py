"""Classic groups: JoinGroup/SyncGroup rebalance rounds and KIP-341 stale sticky claims.

What lives here: :class:`Rebalances`, the driver of classic (eager,
generation-based) groups: a join or leave requests a rebalance, which
completes once the other members rejoin; a member removed while frozen
rejoins under a new member id claiming its old partitions with the old
generation, and :class:`~fencewatch.sim.classic.ClassicGroup` resolves the
claims as the sticky assignor does.
"""

from __future__ import annotations

from fencewatch.sim.classic import ClassicGroup
from fencewatch.sim.clients import ConsumerClient
from fencewatch.sim.emit import HEARTBEATS, Truth
from fencewatch.sim.world.schedule import CLASSIC_REBALANCE, Schedule, SimGroup


class Rebalances(Schedule):
    """Rebalance rounds of classic groups."""

    def _classic_join(self, group: SimGroup, client: ConsumerClient, t: int) -> None:
        client.learn(t, -1, (), False)
        self._classic_request_rebalance(group, t + self._latency())

    def _classic_leave(self, group: SimGroup, member_id: str, reason: str, t: int) -> None:
        group.rebalance_leaving[member_id] = reason
        self._classic_request_rebalance(group, t)

    def _classic_expire(self, group: SimGroup, member_id: str, t: int) -> None:
        client = group.clients.get(member_id)
        if member_id not in group.coord.members:
            return
        if client is not None and client.alive and not client.frozen:
            return
        self._count("session_timeout")
        self._classic_leave(group, member_id, "session_timeout", t)

    def _classic_wake(self, group: SimGroup, client: ConsumerClient, t: int) -> None:
        if client.member_id in group.coord.members:
            # Paused shorter than the session timeout: nothing happened.
            self._schedule_commit(client, t + client.commit_interval_ms)
            return
        # Removed while frozen: JoinGroup under a new member id, claiming the old partitions
        # with the old generation in its sticky user data (KIP-341).
        old = client.view_at(t)
        new_id = self._new_member_id(group)
        group.clients.pop(client.member_id, None)
        client.member_id = new_id
        group.clients[new_id] = client
        client.stop_timers()
        client.learn(t, -1, (), False)
        group.stale_claims[new_id] = (old[2], old[1])
        self._classic_request_rebalance(group, t + 2 * self._latency())
        self._schedule_commit(client, t + client.commit_interval_ms)

    def _classic_request_rebalance(self, group: SimGroup, t: int) -> None:
        if group.rebalance_pending:
            return
        group.rebalance_pending = True
        # JoinGroup waits for the other members to rejoin (their next heartbeat / poll).
        self._push(t + 1 + self.rng.randrange(0, 50), CLASSIC_REBALANCE, group)

    def _on_classic_rebalance(self, t: int, group: SimGroup, *_unused) -> None:
        coord: ClassicGroup = group.coord
        group.rebalance_pending = False
        leaving = group.rebalance_leaving
        group.rebalance_leaving = {}
        stale = group.stale_claims
        group.stale_claims = {}
        joining = []
        for client in group.clients.values():
            if client.alive and not client.frozen and client.member_id not in coord.members:
                claimed, generation = stale.get(client.member_id, ((), -1))
                if coord.user_data_v0:
                    generation = -1
                joining.append((client.member_id, tuple(claimed), generation))
        gone = [m for m in coord.members if m in leaving]
        if not joining and not gone:
            return
        emit, gid = self.emit, group.group_id
        emit.group_state(self._stamp(group, t, HEARTBEATS), gid, "PreparingRebalance", "classic")
        result = coord.rebalance(joining, gone)
        if gone:
            for member_id in gone:
                emit.member_left(self._stamp(group, t, HEARTBEATS), gid, member_id, leaving[member_id], -1, None)
        topology = group.topology
        for member_id, claimed_generation, claimed in result.joins:
            truth = None
            if member_id in result.stale_claims:
                truth = Truth("stale_claim", details={"partitions": ",".join(map(str, result.stale_claims[member_id]))})
                self._count("stale_claim")
            elif member_id in result.duplicate_claims:
                truth = Truth("duplicate_claim", details={"partitions": ",".join(map(str, result.duplicate_claims[member_id]))})
                self._count("duplicate_claim")
            emit.classic_join(self._stamp(group, t, HEARTBEATS), gid, member_id, claimed_generation, claimed, topology, truth)
        if not coord.members:
            group.empty_since = t
            self.empty_groups.add(group.index)
            emit.group_state(self._stamp(group, t, HEARTBEATS), gid, "Empty", "classic", self._expiry_truth(group, t))
            return
        self.empty_groups.discard(group.index)
        emit.group_state(self._stamp(group, t, HEARTBEATS), gid, "CompletingRebalance", "classic")
        emit.classic_sync(self._stamp(group, t, HEARTBEATS), gid, result.generation, result.assignments, topology)
        emit.group_state(self._stamp(group, t, HEARTBEATS), gid, "Stable", "classic")
        for member_id, parts in result.assignments.items():
            client = group.clients.get(member_id)
            if client is not None:
                client.learn(t + self._latency(), result.generation, parts, True)

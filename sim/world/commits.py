"""Offset commits reaching the coordinator: the answer, the ground truth, the event, the stored offsets.

What lives here: :class:`Commits`, the driver of OffsetCommit and
TxnOffsetCommit requests: the commits of a client's own clock (with the
fast path that reuses a prepared event while nothing changed, see
:class:`~fencewatch.sim.clients.CommitPlan`) and one-off commits (races,
delayed requests, revocation callbacks, closes, wakes), answered as a Kafka
<= 4.2 coordinator does and labelled with what a KIP-1251 one would do.
"""

from __future__ import annotations

import heapq

from fencewatch.sim.classic import ClassicGroup
from fencewatch.sim.clients import CommitPlan, ConsumerClient
from fencewatch.sim.coordinator import NONE
from fencewatch.sim.emit import OFFSETS, Truth
from fencewatch.sim.world.schedule import COMMIT, LATENCIES, Schedule


class Commits(Schedule):
    """Commit requests, from the client's clock or one-off, judged on arrival."""

    def _on_commit(self, t: int, client: ConsumerClient, token: int, t_send: int) -> None:
        if token != client.commit_token or not client.alive:
            return
        # The next commit of the client's own clock (auto.commit.interval.ms / commit.interval.ms).
        next_send = t_send + client.commit_interval_ms
        i = self._li
        self._li = i + 1
        self._seq += 1
        heapq.heappush(
            self.heap,
            (next_send + self._latencies[i & (LATENCIES - 1)] + client.commit_delay_ms, self._seq, COMMIT, client, token, next_send),
        )
        if client.revoking:
            return
        view = client.history[-1]
        if view[0] > t_send:
            view = client.view_at(t_send)
        partitions = view[2]
        if not view[3] or not partitions:
            return
        # Fast path: the plan was prepared for this very view (same partitions, epoch, member,
        # cause) and neither the coordinator nor the logs changed since: same answer, label and
        # prepared event. _commit is the general case; it clears ``plan.view`` when it re-keys.
        plan = client.plan
        group = client.group
        if (
            plan is not None
            and plan.view is view
            and plan.key_version == group.coord.version
            and plan.logs_version == self.logs_version
        ):
            at = t_send - group.lag_ms
            if at >= plan.newest_segment:
                offsets = [base + (at - start) * rate // 1000 for base, start, rate in plan.lines]
                last = group.last_ts
                if t <= last:
                    t = last if group.last_kind == OFFSETS else last + 1
                group.last_ts = t
                group.last_kind = OFFSETS
                self._emit_commit(plan.prepared, t, offsets)
                if plan.error == NONE:
                    store = group.coord.offsets
                    previous = store._pending.get(client.member_id)
                    if previous is not None and previous[0] is not partitions:
                        store._merge(previous)
                    store._pending[client.member_id] = (partitions, offsets, plan.epochs, t)
                    if self._committed_records:
                        for lg, o, e in zip(plan.logs, offsets, plan.epochs):
                            self.emit.offset_committed(self._stamp(group, t, OFFSETS), group.group_id, lg, o, e, t)
                return
        plan = self._commit(t, client, client.member_id, t_send, view[1], partitions, client.commit_cause, client.txn is not None)
        if plan is not None:
            plan.view = view

    def _on_extra_commit(self, t: int, client: ConsumerClient, _unused, spec) -> None:
        t_send, epoch, partitions, cause, transactional, member_id = spec
        if partitions and client.group.commits:
            self._commit(t, client, member_id, t_send, epoch, partitions, cause, transactional and client.txn is not None)

    def _plan(self, client: ConsumerClient, partitions: tuple[int, ...]) -> CommitPlan:
        logs = client.group.logs
        plan = client.plan = CommitPlan(partitions, self.logs_version, [logs[p] for p in partitions], self.emit.commit_layout)
        return plan

    def _commit(
        self,
        t: int,
        client: ConsumerClient,
        member_id: str,
        t_send: int,
        epoch: int,
        partitions: tuple[int, ...],
        cause: str,
        transactional: bool,
    ) -> CommitPlan | None:
        """A commit request reaches the coordinator: answer it, label it, emit it, store it.

        Returns the client's plan when it now holds this commit's prepared event (for the
        fast path of :meth:`_on_commit`), None when the commit needed a one-off event.
        """
        group = client.group
        coord = group.coord
        if group.protocol == "classic":
            transactional = False
        plan = client.plan
        if plan is None or plan.partitions is not partitions or plan.logs_version != self.logs_version:
            plan = self._plan(client, partitions)
        # Consumer positions trail each log end by the group's lag (see PartitionLog.position).
        at = t_send - group.lag_ms
        if at >= plan.newest_segment:
            offsets = [base + (at - start) * rate // 1000 for base, start, rate in plan.lines]
            if (
                plan.key_version == coord.version
                and plan.key_epoch == epoch
                and plan.key_cause is cause
                and plan.key_member == member_id
                and plan.key_transactional is transactional
            ):
                error = plan.error
                epochs = plan.epochs
                prepared = plan.prepared
            else:
                error, truth = self._answer(coord, member_id, epoch, partitions, cause, transactional)
                epochs = plan.epochs
                prepared = self.emit.prepare_commit(
                    group.group_id, member_id, epoch, client.instance_id, plan.logs, epochs, error,
                    client.txn if transactional else None, truth, plan.layout,
                )
                plan.key_version, plan.key_member, plan.key_epoch = coord.version, member_id, epoch
                plan.key_cause, plan.key_transactional = cause, transactional
                plan.error, plan.truth, plan.prepared = error, truth, prepared
                plan.view = None
            cached = plan
        else:
            # Sent before a leader election: positions (and epochs) of the older segments.
            positions = [lg.position(at) for lg in plan.logs]
            offsets = [o for o, _ in positions]
            epochs = [e for _, e in positions]
            error, truth = self._answer(coord, member_id, epoch, partitions, cause, transactional)
            prepared = self.emit.prepare_commit(
                group.group_id, member_id, epoch, client.instance_id, plan.logs, epochs, error,
                client.txn if transactional else None, truth,
            )
            cached = None
        # The group's output clock (see _stamp), inlined: this is the hottest path.
        last = group.last_ts
        if t <= last:
            t = last if group.last_kind == OFFSETS else last + 1
        group.last_ts = t
        group.last_kind = OFFSETS
        self._emit_commit(prepared, t, offsets)
        if error == NONE:
            # CommittedOffsets.record, inlined.
            store = coord.offsets
            previous = store._pending.get(member_id)
            if previous is not None and previous[0] is not partitions:
                store._merge(previous)
            store._pending[member_id] = (partitions, offsets, epochs, t)
            if self._committed_records:
                for lg, o, e in zip(plan.logs, offsets, epochs):
                    self.emit.offset_committed(self._stamp(group, t, OFFSETS), group.group_id, lg, o, e, t)
        return cached

    def _answer(self, coord, member_id: str, epoch: int, partitions, cause: str, transactional: bool):
        """The broker's error code (Kafka <= 4.2) and, when labelling, the ground truth."""
        if isinstance(coord, ClassicGroup):
            error = coord.validate_offset_commit(member_id, epoch)
        else:
            error = coord.validate_offset_commit(member_id, epoch, transactional, partitions)
        truth = None
        if self._labels:
            scenario, current_owner, owners, expect = coord.commit_truth(member_id, epoch, partitions)
            truth = Truth(scenario, cause, current_owner, owners, expect)
        return error, truth

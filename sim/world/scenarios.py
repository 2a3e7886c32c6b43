"""Group scenarios: churn, crashes, pauses, admin resets, rolling restarts, stops and returns.

What lives here: :class:`Scenarios`, when each group's scenarios happen
(Poisson processes and timers from the profile's knobs) and what each step
does with the group's processes (:mod:`.lifecycle`).
"""

from __future__ import annotations

from fencewatch.sim.coordinator import NONE
from fencewatch.sim.emit import OFFSETS, Truth
from fencewatch.sim.world.schedule import GROUP, Schedule, SimGroup


class Scenarios(Schedule):
    """A group's scheduled scenario steps."""

    def _schedule_group_scenarios(self, group: SimGroup) -> None:
        k, rng, t0 = self.knobs, self.rng, self.config.start_ts
        self._schedule_poisson(GROUP, group, "churn", k.churn_per_hour, t0)
        self._schedule_poisson(GROUP, group, "pause", k.pause_per_hour, t0)
        self._schedule_poisson(GROUP, group, "admin", k.admin_commit_per_hour, t0)
        if k.rolling_restart_every_ms > 0:
            self._push(t0 + rng.randrange(k.rolling_restart_every_ms // 2, k.rolling_restart_every_ms + 1), GROUP, group, "roll", 0)
        if rng.random() < k.empty_fraction:
            self._push(t0 + int(k.empty_after_ms * rng.uniform(0.5, 1.5)), GROUP, group, "stop", None)

    def _on_group_action(self, t: int, group: SimGroup, action: str, arg) -> None:
        k, rng = self.knobs, self.rng
        if action in ("churn", "pause", "admin"):
            self._schedule_poisson(GROUP, group, action, arg, t)
        if action == "churn":
            if group.stopped or group.restarting:
                return
            live = [c for c in group.clients.values() if c.alive and not c.frozen]
            size = len(live)
            if size <= max(1, group.target_size // 2) or (size < 2 * group.target_size and rng.random() < 0.5):
                self._count("scale_out")
                self._start_client(group, t, None)
            elif live:
                victim = live[rng.randrange(len(live))]
                if rng.random() < k.crash_fraction and not victim.instance_id:
                    self._crash(victim, t)
                    self._push(t + k.restart_downtime_ms, GROUP, group, "restart_slot", None)
                else:
                    self._count("scale_in")
                    self._shutdown(victim, t)
        elif action == "restart_slot":
            if not group.stopped:
                self._start_client(group, t, None)
        elif action == "pause":
            if group.stopped:
                return
            live = [c for c in group.clients.values() if c.alive and not c.frozen and not c.revoking]
            if live:
                self._freeze(live[rng.randrange(len(live))], t)
        elif action == "wake":
            self._wake(arg, t)
        elif action == "admin":
            self._admin_commit(group, t)
        elif action == "roll":
            self._roll(group, t, arg)
        elif action == "stop":
            self._stop_group(group, t)
        elif action == "end":
            self._end_ephemeral(group, t)
        elif action == "return":
            group.stopped = False
            self._count("group_return")
            for slot in range(group.target_size):
                self._start_client(group, t + rng.randrange(0, 3000), slot)

    def _admin_commit(self, group: SimGroup, t: int) -> None:
        """An operator resets offsets (member id "", epoch -1): accepted only when the group is empty."""
        coord = group.coord
        partitions = tuple(range(group.topology.partition_count))
        if group.protocol == "classic":
            error = coord.validate_offset_commit("", -1)
        else:
            error = coord.validate_offset_commit("", -1, False)
        plogs = [group.logs[p] for p in partitions]
        positions = [lg.position(t) for lg in plogs]
        offsets = [o for o, _ in positions]
        epochs = [-1 for _ in positions]
        truth = None
        if self.emit.labels:
            scenario, current_owner, owners, expect = coord.commit_truth("", -1, partitions)
            truth = Truth(scenario, "admin_reset", current_owner, owners, expect)
        self._count("admin_commit")
        self.emit.offset_commit(self._stamp(group, t, OFFSETS), group.group_id, "", -1, None, plogs, offsets, epochs, error, None, truth)
        if error == NONE:
            coord.offsets.record("", partitions, offsets, epochs, t)
            self.empty_groups.add(group.index)  # no members: the cleanup task watches these offsets
            if self.knobs.committed_records:
                for lg, o in zip(plogs, offsets):
                    self.emit.offset_committed(self._stamp(group, t, OFFSETS), group.group_id, lg, o, -1, t)

    def _roll(self, group: SimGroup, t: int, slot: int) -> None:
        """Rolling restart: one instance slot at a time, the next once the restarted one is back."""
        k = self.knobs
        if group.stopped:
            group.restarting = False
            return
        if slot >= group.target_size:
            group.restarting = False
            self._push(t + k.rolling_restart_every_ms, GROUP, group, "roll", 0)
            return
        group.restarting = True
        client = group.slots.get(slot)
        if client is not None and client.frozen:
            # The deployment skips an unresponsive instance (its process is frozen).
            self._push(t + 1, GROUP, group, "roll", slot + 1)
            return
        self._count("rolling_restart_step")
        if client is not None and client.alive:
            self._shutdown(client, t)
        downtime = int(k.restart_downtime_ms * self.rng.uniform(0.5, 1.5))
        if group.static:
            # A static member must be back within the session timeout to avoid a rebalance.
            downtime = min(downtime, k.session_timeout_ms // 2)
        self._start_client(group, t + downtime, slot)
        settle = downtime + 2 * k.heartbeat_interval_ms
        self._push(t + settle, GROUP, group, "roll", slot + 1)

    def _stop_group(self, group: SimGroup, t: int) -> None:
        """The application is stopped: every member closes; the group goes Empty with its offsets."""
        k, rng = self.knobs, self.rng
        group.stopped = True
        self._count("group_stop")
        for client in list(group.clients.values()):
            if client.alive and client.frozen:
                self._crash(client, t)  # a frozen process is killed, it cannot close
            elif client.alive:
                self._shutdown(client, t)
        if rng.random() < k.return_fraction:
            self._push(t + int(k.empty_for_ms * rng.uniform(0.5, 1.5)), GROUP, group, "return", None)

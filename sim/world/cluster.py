"""What happens across groups: the coordinator's offset expiration task and partition leadership.

What lives here: :class:`Cluster`: offsets expiring from empty groups
(KIP-211's retention, checked every offsets.retention.check.interval.ms),
empty groups deleted (Dead), leader elections (clean, or unclean ones that
truncate logs under committed offsets: KIP-320 divergence) and log
retention moving the log start past committed offsets.
"""

from __future__ import annotations

from fencewatch.sim.classic import ClassicGroup
from fencewatch.sim.coordinator import ConsumerGroup
from fencewatch.sim.emit import HEARTBEATS, OFFSETS, Truth
from fencewatch.sim.world.schedule import CLEANUP, CLUSTER, GROUP, Schedule, SimGroup
from fencewatch.sim.topology import PartitionLog


class Cluster(Schedule):
    """Coordinator-wide tasks and partition logs."""

    def _schedule_cluster_tasks(self, t0: int) -> None:
        """Elections and retention (Poisson processes), and the first run of the expiration task."""
        k = self.knobs
        self._schedule_poisson(CLUSTER, None, "unclean", k.unclean_elections_per_hour, t0)
        self._schedule_poisson(CLUSTER, None, "clean", k.clean_elections_per_hour, t0)
        self._schedule_poisson(CLUSTER, None, "retention", k.log_retention_per_hour, t0)
        self._schedule_poisson(CLUSTER, None, "ephemeral", k.ephemeral_per_hour, t0)
        self._push(t0 + k.retention_check_interval_ms, CLEANUP)

    # ------------------------------------------------------------------ offsets expiry

    def _on_cleanup(self, t: int, *_unused) -> None:
        """Kafka's offset expiration task (every offsets.retention.check.interval.ms)."""
        k = self.knobs
        retention = k.retention_minutes * 60_000
        self._push(t + k.retention_check_interval_ms, CLEANUP)
        for index in sorted(self.empty_groups):
            group = self.groups[index]
            if group.protocol == "classic":
                expired = group.coord.expire_offsets(t, retention, group.empty_since)
            else:
                expired = group.coord.expire_offsets(t, retention)
            if expired:
                self._count("offsets_expired")
                if k.committed_records:
                    truth = Truth("expired", "retention")
                    for p in sorted(expired):
                        self.emit.offset_deleted(self._stamp(group, t, OFFSETS), group.group_id, group.logs[p], truth)
            if not group.coord.members and not group.coord.committed:
                self._delete_group(group, t)

    def _delete_group(self, group: SimGroup, t: int) -> None:
        """An empty group without offsets is deleted by the cleanup task (a tombstone): it is Dead.

        The group id may come back: as a simple group through an admin commit
        (retention then counts from the commit), or as a new group when
        members join (epochs and generations start over).
        """
        old = group.coord
        if group.protocol == "classic":
            fresh = ClassicGroup(group.group_id, old.partition_count, user_data_v0=old.user_data_v0)
        else:
            fresh = ConsumerGroup(group.group_id, old.partition_count)
        fresh.version = old.version + 1  # commit plans compare versions: never reuse one
        group.coord = fresh
        group.empty_since = -1
        self.empty_groups.discard(group.index)
        self._count("group_deleted")
        self.emit.group_state(self._stamp(group, t, HEARTBEATS), group.group_id, "Dead", group.protocol,
                              Truth("group_deleted", "retention"))

    # ------------------------------------------------------------------ partition leadership

    def _on_cluster_action(self, t: int, _unused, action: str, per_hour: float) -> None:
        self._schedule_poisson(CLUSTER, None, action, per_hour, t)
        if action == "ephemeral":
            self._start_ephemeral(t)
            return
        if not self.logs:
            return
        rng, k = self.rng, self.knobs
        keys = sorted(self.logs)
        plog = self.logs[keys[rng.randrange(len(keys))]]
        if action == "retention":
            before = plog.log_start_offset
            end = plog.log_end_offset(t)
            plog.advance_log_start(t, int((end - before) * rng.uniform(0.3, 0.9)))
            below = self._groups_below(plog, plog.log_start_offset)
            truth = Truth("log_retention", details={"out_of_range_groups": ",".join(below)})
            self._count("log_retention")
            self.emit.partition_epochs(t, plog, end, truth)
            return
        unclean = action == "unclean"
        truncate_by = int(k.unclean_truncation_ms * plog.records_per_s / 1000 * rng.uniform(0.2, 1.0)) + 1 if unclean else 0
        old_end, new_end = plog.elect_leader(t, truncate_by)
        self.logs_version += 1
        diverged = self._groups_diverged(plog, new_end) if unclean else []
        details = {
            "previous_log_end_offset": str(old_end),
            "new_log_end_offset": str(new_end),
            "diverged_groups": ",".join(diverged),
        }
        self._count("unclean_election" if unclean else "clean_election")
        scenario = "unclean_election" if unclean else "clean_election"
        self.emit.partition_epochs(t, plog, new_end, Truth(scenario, details=details))

    # ------------------------------------------------------------------ short-lived groups

    def _start_ephemeral(self, t: int) -> None:
        """A group under a new id, one member reading the topics of a long-lived group: it lives
        ``ephemeral_life_ms`` (mean), commits or not, then closes (or crashes: the session
        timeout removes it). The cleanup task expires its offsets and deletes it (``Dead``)."""
        k, rng = self.knobs, self.rng
        like = self.groups[rng.randrange(k.groups)]
        n = sum(1 for g in self.groups if g.index >= k.groups)
        group = SimGroup(len(self.groups), f"console-consumer-{n:05d}", "consumer",
                         ConsumerGroup(f"console-consumer-{n:05d}", like.topology.partition_count), like.topology,
                         like.logs)
        group.lag_ms = int(k.consumer_lag_ms * rng.uniform(0.5, 1.5))
        group.target_size = 1
        group.commits = rng.random() < k.ephemeral_commit_fraction
        self.groups.append(group)
        self._count("ephemeral_group")
        self._start_client(group, t, 0)
        self._push(t + max(1, int(k.ephemeral_life_ms * rng.uniform(0.5, 1.5))), GROUP, group, "end", None)

    def _end_ephemeral(self, group: SimGroup, t: int) -> None:
        """The short-lived group's member closes, or crashes (``crash_fraction``); no return."""
        group.stopped = True
        for client in list(group.clients.values()):
            if not client.alive:
                continue
            if client.frozen or self.rng.random() < self.knobs.crash_fraction:
                self._crash(client, t)
            else:
                self._shutdown(client, t)

    def _group_partitions_on(self, plog: PartitionLog):
        for group in self.groups:
            for p, lg in enumerate(group.logs):
                if lg is plog:
                    yield group, p

    def _groups_diverged(self, plog: PartitionLog, new_end: int) -> list[str]:
        """Groups whose committed offset lies beyond the new leader's log end (KIP-320 divergence)."""
        previous_epoch = plog.epochs[-1][0] - 1
        out = []
        for group, p in self._group_partitions_on(plog):
            committed = group.coord.committed.get(p)
            if committed is not None and committed[0] > new_end and committed[1] >= 0 and committed[1] <= previous_epoch:
                out.append(group.group_id)
        return out

    def _groups_below(self, plog: PartitionLog, log_start: int) -> list[str]:
        out = []
        for group, p in self._group_partitions_on(plog):
            committed = group.coord.committed.get(p)
            if committed is not None and committed[0] < log_start:
                out.append(group.group_id)
        return out

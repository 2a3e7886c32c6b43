"""What every part of the simulation shares: the heap, the network's latency, the output clock.

What lives here: the heap's action codes, :class:`SimGroup` (the world-side
state of one group) and :class:`Schedule`, the base of
:class:`~fencewatch.sim.world.simulator.Simulator` whose state and helpers
every driver uses: ``_push`` (a heap entry), ``_latency`` (a request's time
on the network, from a table drawn once per run), Poisson processes, the
per-group output clock (``_stamp``), group-state events with their expiry
label, and the counts of scenario steps. The drivers are mixins of one
object and call each other's methods through ``self`` (a close commits, a
classic process's start joins a rebalance round).
"""

from __future__ import annotations

import heapq
import math
import random

from fencewatch.sim.clients import ConsumerClient
from fencewatch.sim.emit import HEARTBEATS, DictEmitter, Truth
from fencewatch.sim.profiles import validate
from fencewatch.sim.topology import GroupTopology, PartitionLog

# Heap actions.
HB = 0  # heartbeat arrives at the coordinator: (client, hb_token, t_send)
COMMIT = 1  # a commit from the client's own clock arrives: (client, commit_token, t_send)
XCOMMIT = 2  # a one-off commit arrives (race, delayed, close, callback, wake): (client, None, spec)
CB_DONE = 3  # a revocation callback finishes: (client, token, (revoked, epoch))
LEAVE = 4  # a leave heartbeat arrives: (client, None, epoch)
SESSION = 5  # session timeout check: (group, member_id, last_heartbeat_ms)
REBALANCE = 6  # rebalance timeout check: (group, member_id, unrevoked_since_ms)
GROUP = 7  # a group-level scenario step: (group, action, arg)
CLEANUP = 8  # the coordinator's offset expiration task
CLUSTER = 9  # partition leadership / retention: (None, action, None)
CLASSIC_REBALANCE = 10  # a classic group's pending rebalance completes: (group, None, None)

LATENCIES = 8192


class SimGroup:
    """World-side state of one group: its coordinator, clients, partitions and output clock."""

    __slots__ = (
        "index",
        "group_id",
        "protocol",
        "coord",
        "topology",
        "logs",
        "clients",
        "lag_ms",
        "transactional",
        "static",
        "last_ts",
        "last_kind",
        "member_seq",
        "target_size",
        "stopped",
        "slots",
        "restarting",
        "rebalance_pending",
        "rebalance_leaving",
        "stale_claims",
        "empty_since",
        "producer_epochs",
        "commits",
        "topology_sent",
    )

    def __init__(self, index: int, group_id: str, protocol: str, coord, topology: GroupTopology, logs: list[PartitionLog]) -> None:
        self.index = index
        self.group_id = group_id
        self.protocol = protocol
        self.coord = coord
        self.topology = topology
        self.logs = logs
        self.clients: dict[str, ConsumerClient] = {}
        self.lag_ms = 0
        self.transactional = False
        self.static = False
        self.last_ts = -1
        self.last_kind = HEARTBEATS
        self.member_seq = 0
        self.target_size = 0
        self.stopped = False
        # Instance slots 0..n-1: a slot's instance id and transactional id survive restarts.
        self.slots: dict[int, ConsumerClient | None] = {}
        self.restarting = False
        # Classic groups: members to drop at the next rebalance (member id -> reason), claims of
        # members rejoining after a fence (member id -> (partitions, generation)), Empty since.
        self.rebalance_pending = False
        self.rebalance_leaving: dict[str, str] = {}
        self.stale_claims: dict[str, tuple[tuple[int, ...], int]] = {}
        self.empty_since = -1
        # Exactly-once: slot -> (producer id, producer epoch) of its transactional id.
        self.producer_epochs: dict[int, tuple[int, int]] = {}
        self.commits = True  # False: its clients never commit (a console consumer without --group)
        self.topology_sent = False  # a streams group: its streams_topology was written (at its first join)


class Schedule:
    """The simulation's shared state: config, RNG, heap, clock, groups and partition logs."""

    def __init__(self, config, emitter: DictEmitter) -> None:
        self.config = config
        self.knobs = k = validate(config.knobs)
        self.emit = emitter
        self.rng = random.Random(config.seed)
        rng = self.rng
        mean = max(0.0, k.latency_ms - 1.0)
        self._latencies = [1 + (int(rng.expovariate(1.0 / mean)) if mean > 0 else 0) for _ in range(LATENCIES)]
        self._li = 0
        self.heap: list = []
        self._seq = 0
        self.now = config.start_ts
        self.end_ts = None if config.duration_ms is None else config.start_ts + config.duration_ms
        self.groups: list[SimGroup] = []
        self.logs: dict[tuple[int, int], PartitionLog] = {}
        self.empty_groups: set[int] = set()
        self.logs_version = 0  # bumped by every leader election (invalidates commit plans)
        self._labels = emitter.labels
        self._committed_records = self.knobs.committed_records
        self._emit_commit = emitter.emit_commit
        self._producer_ids = 1000
        self._stats: dict[str, int] = {}

    def _latency(self) -> int:
        i = self._li
        self._li = i + 1
        return self._latencies[i & (LATENCIES - 1)]

    def _push(self, t: int, action: int, a=None, b=None, c=None) -> None:
        self._seq += 1
        heapq.heappush(self.heap, (t, self._seq, action, a, b, c))

    def _schedule_poisson(self, action: int, a, b: str, per_hour: float, after: int) -> None:
        """The next event of a Poisson process of ``per_hour`` events per simulated hour."""
        rate = per_hour / 3_600_000.0
        if rate <= 0:
            return
        delay = self.rng.expovariate(rate)
        if not math.isfinite(delay) or delay > 1e15:  # a rate so small it never happens
            return
        self._push(after + 1 + int(delay), action, a, b, per_hour)

    # ------------------------------------------------------------------ output

    def _stamp(self, group: SimGroup, t: int, kind: int) -> int:
        """Per-group output clock: non-decreasing, strictly increasing across a topic switch."""
        last = group.last_ts
        if t <= last:
            t = last if kind == group.last_kind else last + 1
        group.last_ts = t
        group.last_kind = kind
        return t

    def _emit_state(self, group: SimGroup, t: int, truth=None) -> None:
        state = group.coord.refresh_state(t)
        if state is not None:
            if state == "Empty":
                self.empty_groups.add(group.index)
                if truth is None:
                    truth = self._expiry_truth(group, t)
            else:
                self.empty_groups.discard(group.index)
            protocol = "streams" if group.protocol == "streams" else "consumer"
            self.emit.group_state(self._stamp(group, t, HEARTBEATS), group.group_id, state, protocol, truth)

    def _expiry_truth(self, group: SimGroup, t: int) -> Truth | None:
        """Label of a group going Empty with committed offsets: when they will expire.

        KIP-848 groups count retention from each commit; classic groups from
        the moment they became Empty (contract §4). The actual deletion happens at
        the coordinator's next cleanup run after that deadline.
        """
        committed = group.coord.committed
        if not committed:
            return None
        retention = self.knobs.retention_minutes * 60_000
        if group.protocol == "classic":
            deadline = t + retention
        else:
            deadline = min(ts for _, _, ts in committed.values()) + retention
        return Truth(
            "expiry_hazard",
            details={"committed_partitions": str(len(committed)), "earliest_expiry_ts": str(deadline)},
        )

    def _count(self, name: str) -> None:
        self._stats[name] = self._stats.get(name, 0) + 1

    @property
    def stats(self) -> dict[str, int]:
        """Counts of scenario steps taken (for logs and docs; events are counted by the emitter)."""
        return dict(self._stats)

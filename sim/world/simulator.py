"""The simulation loop: clients, coordinators and partition logs on one event-time clock.

What lives here: :class:`Simulator`, a discrete-event simulation over a heap
of ``(time, seq, action, ...)`` entries, and :class:`SimConfig`. Time is
integer epoch milliseconds of the *simulated* cluster; nothing reads the wall
clock, so a run is a pure function of its config and seed (the writers in
:mod:`fencewatch.sim.writers` pace output to wall time if asked). Here are
the setup and the loop; the handlers of the heap's actions are the drivers'
(:mod:`.lifecycle`, :mod:`.heartbeats`, :mod:`.commits`, :mod:`.rebalances`,
:mod:`.scenarios`, :mod:`.cluster`).

Requests are modelled with their latency: a request *sent* at ``t`` carries
what the client knew at ``t`` (:meth:`ConsumerClient.view_at`) and is judged
by the coordinator when it *arrives*. A heap entry is scheduled at the arrival
time and remembers the send time, which is enough to produce the races of
KAFKA-19779 without simulating sockets:

* heartbeat race -- a commit in flight while a heartbeat bumps the member
  epoch arrives with the old epoch (strict: STALE_MEMBER_EPOCH /
  ILLEGAL_GENERATION; KIP-1251 would accept);
* exactly-once producers committing every 100 ms hit that window on their own;
* zombies -- a commit request delayed past the revocation of its partitions
  arrives after another member took them; a member frozen past its session
  timeout is fenced and its commits are rejected as UNKNOWN_MEMBER_ID;
* slow revocation callbacks past the rebalance timeout (fenced members);
* rolling restarts (dynamic and static members), crashes, scale out/in;
* groups that stop with old commits (offset expiry), admin offset resets;
* unclean leader elections that truncate logs under committed offsets;
* classic groups whose rejoining members claim stale sticky assignments.

Events of one group are emitted in the order the coordinator handled them,
with ``ts`` non-decreasing per group and strictly increasing whenever the
group's events switch between the heartbeats and offsets topics, so a reader
that merges the two topics by ``(ts, input order)`` sees coordinator order.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from fencewatch.sim.classic import ClassicGroup
from fencewatch.sim.coordinator import ConsumerGroup
from fencewatch.sim.emit import DictEmitter
from fencewatch.sim.world.cluster import Cluster
from fencewatch.sim.world.commits import Commits
from fencewatch.sim.world.heartbeats import Heartbeats
from fencewatch.sim.world.lifecycle import Lifecycle
from fencewatch.sim.world.rebalances import Rebalances
from fencewatch.sim.world.scenarios import Scenarios
from fencewatch.sim.world.schedule import SimGroup
from fencewatch.sim.profiles import Knobs
from fencewatch.sim.topology import GroupTopology, PartitionLog

__all__ = ["DEFAULT_START_TS", "Done", "SimConfig", "Simulator", "iter_events", "simulate"]

DEFAULT_START_TS = 1_735_689_600_000  # 2025-01-01T00:00:00Z: fixed, so runs are reproducible


@dataclass(frozen=True, slots=True)
class SimConfig:
    """One run: knobs (usually a profile), seed, time span and labelling."""

    knobs: Knobs = field(default_factory=Knobs)
    seed: int = 0
    start_ts: int = DEFAULT_START_TS
    duration_ms: int | None = 600_000  # simulated; None = until max_events (or forever)
    max_events: int | None = None
    labels: bool = True
    cluster: str | None = None
    assignment_epochs: bool = False  # include KIP-1251 assignment_epochs (a Kafka 4.3 coordinator's records)
    event_id_prefix: str | None = None  # default "sim<seed>-"

    @property
    def id_prefix(self) -> str:
        return self.event_id_prefix if self.event_id_prefix is not None else f"sim{self.seed}-"


class Done(Exception):
    """Raised by the event budget to end a run after exactly ``max_events`` events."""


class Simulator(Lifecycle, Heartbeats, Commits, Rebalances, Scenarios, Cluster):
    """Run a simulation, writing events through an emitter.

    The drivers are mixins of one object: they share the heap, the RNG and
    the clock, and a handler on the hot path reaches them without an extra
    attribute hop.
    """

    def __init__(self, config: SimConfig, emitter: DictEmitter) -> None:
        super().__init__(config, emitter)
        self._build()

    # ------------------------------------------------------------------ setup

    def _log_for(self, topic_index: int, partition: int) -> PartitionLog:
        key = (topic_index, partition)
        log_ = self.logs.get(key)
        if log_ is None:
            rng = self.rng
            rate = max(1, round(self.knobs.produce_rate * rng.uniform(0.5, 1.5))) if self.knobs.produce_rate > 0 else 0
            log_ = PartitionLog(f"topic-{topic_index}", partition, self.config.start_ts, rng.randrange(0, 1_000_000), rate)
            self.logs[key] = log_
        return log_

    def _build(self) -> None:
        k, rng, t0 = self.knobs, self.rng, self.config.start_ts
        for g in range(k.groups):
            first_topic = (g // k.groups_per_topic) * k.topics
            topic_indexes = [first_topic + j for j in range(k.topics)]
            topology = GroupTopology(tuple(f"topic-{i}" for i in topic_indexes), k.partitions_per_topic)
            logs = [self._log_for(i, p) for i in topic_indexes for p in range(k.partitions_per_topic)]
            group_id = f"group-{g:05d}"
            classic = rng.random() < k.classic_fraction
            if classic:
                coord = ClassicGroup(group_id, topology.partition_count, user_data_v0=rng.random() < k.classic_user_data_v0_fraction)
                group = SimGroup(g, group_id, "classic", coord, topology, logs)
            elif k.streams_fraction > 0 and rng.random() < k.streams_fraction:  # (no draw otherwise: profiles unchanged)
                group = self._streams_group(g, group_id, topic_indexes, logs)
            else:
                group = SimGroup(g, group_id, "consumer", ConsumerGroup(group_id, topology.partition_count), topology, logs)
                group.static = rng.random() < k.static_fraction
                group.transactional = rng.random() < k.eos_fraction
            group.lag_ms = int(k.consumer_lag_ms * rng.uniform(0.5, 1.5))
            group.target_size = k.members_per_group
            self.groups.append(group)
            for slot in range(k.members_per_group):
                self._start_client(group, t0 + rng.randrange(0, 3000), slot)
            self._schedule_group_scenarios(group)
        self._schedule_cluster_tasks(t0)

    def _streams_group(self, g: int, group_id: str, topic_indexes: list[int], logs: list[PartitionLog]) -> SimGroup:
        """A Kafka Streams application (KIP-1071) under exactly-once v2: subtopology ``i`` reads the
        group's source topic ``i``, a last one the application's repartition topic (which the first
        writes), every topic with the group's partition count. Task ``(s, p)`` is the coordinator's
        partition index ``s * partitions + p``: the assignor, the reconciliation and the ground
        truth run on tasks as they do on partitions, and a task's one input partition is what its
        commits carry (``GroupTopology`` maps the index to it)."""
        k, rng = self.knobs, self.rng
        repartition = f"{group_id}-KSTREAM-AGGREGATE-STATE-STORE-0000000003-repartition"
        for p in range(k.partitions_per_topic):
            rate = max(1, round(k.produce_rate * rng.uniform(0.5, 1.5))) if k.produce_rate > 0 else 0
            log_ = PartitionLog(repartition, p, self.config.start_ts, rng.randrange(0, 1_000_000), rate)
            self.logs[(-1 - g, p)] = log_  # below every source topic's key: sorted apart
            logs.append(log_)
        topics = tuple(f"topic-{i}" for i in topic_indexes) + (repartition,)
        topology = GroupTopology(topics, k.partitions_per_topic)
        coord = ConsumerGroup(group_id, topology.partition_count)
        coord.relaxed = k.streams_relaxed
        group = SimGroup(g, group_id, "streams", coord, topology, logs)
        group.transactional = True  # processing.guarantee=exactly_once_v2
        return group

    # ------------------------------------------------------------------ loop

    def run(self, pacer: Callable[[int, int], None] | None = None) -> int:
        """Run to the end of the configured duration or event budget; return events emitted.

        ``pacer(events_so_far, simulated_now)`` is called before each step when
        given; it may sleep to hold a rate (see :class:`~fencewatch.sim.writers.Pacer`).
        """
        heap = self.heap
        pop = heapq.heappop
        handlers = self._handlers()
        end = self.end_ts
        emit = self.emit
        try:
            while heap:
                entry = pop(heap)
                t = entry[0]
                if end is not None and t > end:
                    heapq.heappush(heap, entry)
                    break
                if pacer is not None:
                    pacer(emit.count, t)
                self.now = t
                handlers[entry[2]](t, entry[3], entry[4], entry[5])
        except Done:
            pass
        return emit.count

    def steps(self) -> Iterator[None]:
        """Run one heap entry per iteration (for callers that drain output as it comes)."""
        heap = self.heap
        handlers = self._handlers()
        end = self.end_ts
        try:
            while heap:
                entry = heapq.heappop(heap)
                t = entry[0]
                if end is not None and t > end:
                    heapq.heappush(heap, entry)
                    return
                self.now = t
                handlers[entry[2]](t, entry[3], entry[4], entry[5])
                yield None
        except Done:
            return

    def _handlers(self):
        return [
            self._on_heartbeat,
            self._on_commit,
            self._on_extra_commit,
            self._on_callback_done,
            self._on_leave,
            self._on_session_check,
            self._on_rebalance_check,
            self._on_group_action,
            self._on_cleanup,
            self._on_cluster_action,
            self._on_classic_rebalance,
        ]


def simulate(config: SimConfig) -> list[dict]:
    """Run a whole simulation in memory and return its events as dicts (tests, small runs)."""
    return list(iter_events(config))


def iter_events(config: SimConfig) -> Iterator[dict]:
    """Yield the events of a run as dicts, as they are produced."""
    buffer: list[dict] = []
    limit = config.max_events

    def write(kind: int, key: str, event: dict) -> None:
        if limit is not None and emitter.count > limit:
            raise Done
        buffer.append(event)

    emitter = DictEmitter(write, event_id_prefix=config.id_prefix, cluster=config.cluster, labels=config.labels, assignment_epochs=config.assignment_epochs)
    sim = Simulator(config, emitter)
    for _ in sim.steps():
        if buffer:
            yield from buffer
            buffer.clear()
    yield from buffer


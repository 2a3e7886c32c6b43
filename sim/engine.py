"""The simulation loop: clients, coordinators and partition logs on one event-time clock.

What lives here: :class:`Simulator`, a discrete-event simulation over a heap
of ``(time, seq, action, ...)`` entries, and :class:`SimConfig`. Time is
integer epoch milliseconds of the *simulated* cluster; nothing reads the wall
clock, so a run is a pure function of its config and seed (the writers in
:mod:`fencewatch.sim.writers` pace output to wall time if asked).

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

import base64
import heapq
import logging
import math
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from .classic import ClassicGroup
from .clients import CommitPlan, ConsumerClient
from .coordinator import (
    FENCED_MEMBER_EPOCH,
    HB_CHANGED,
    HB_LEFT,
    HB_UNREVOKED,
    LEAVE_GROUP_MEMBER_EPOCH,
    LEAVE_GROUP_STATIC_MEMBER_EPOCH,
    NONE,
    UNKNOWN_MEMBER_ID,
    UNRELEASED_INSTANCE_ID,
    UNREVOKED_PARTITIONS,
    ConsumerGroup,
)
from .emit import HEARTBEATS, OFFSETS, DictEmitter, Truth
from .profiles import Knobs, validate
from .topology import GroupTopology, PartitionLog

__all__ = ["DEFAULT_START_TS", "Done", "SimConfig", "SimGroup", "Simulator", "iter_events", "simulate"]

log = logging.getLogger(__name__)

DEFAULT_START_TS = 1_735_689_600_000  # 2025-01-01T00:00:00Z: fixed, so runs are reproducible

# Heap actions.
_HB = 0  # heartbeat arrives at the coordinator: (client, hb_token, t_send)
_COMMIT = 1  # a commit from the client's own clock arrives: (client, commit_token, t_send)
_XCOMMIT = 2  # a one-off commit arrives (race, delayed, close, callback, wake): (client, None, spec)
_CB_DONE = 3  # a revocation callback finishes: (client, token, (revoked, epoch))
_LEAVE = 4  # a leave heartbeat arrives: (client, None, epoch)
_SESSION = 5  # session timeout check: (group, member_id, last_heartbeat_ms)
_REBALANCE = 6  # rebalance timeout check: (group, member_id, unrevoked_since_ms)
_GROUP = 7  # a group-level scenario step: (group, action, arg)
_CLEANUP = 8  # the coordinator's offset expiration task
_CLUSTER = 9  # partition leadership / retention: (None, action, None)
_CLASSIC_REBALANCE = 10  # a classic group's pending rebalance completes: (group, None, None)

_LATENCIES = 8192


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


class SimGroup:
    """Engine-side state of one group: its coordinator, clients, partitions and output clock."""

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


class Done(Exception):
    """Raised by the event budget to end a run after exactly ``max_events`` events."""


class Simulator:
    """Run a simulation, writing events through an emitter."""

    def __init__(self, config: SimConfig, emitter: DictEmitter) -> None:
        self.config = config
        self.knobs = k = validate(config.knobs)
        self.emit = emitter
        self.rng = random.Random(config.seed)
        rng = self.rng
        mean = max(0.0, k.latency_ms - 1.0)
        self._latencies = [1 + (int(rng.expovariate(1.0 / mean)) if mean > 0 else 0) for _ in range(_LATENCIES)]
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
        self._build()

    # ------------------------------------------------------------------ setup

    def _latency(self) -> int:
        i = self._li
        self._li = i + 1
        return self._latencies[i & (_LATENCIES - 1)]

    def _push(self, t: int, action: int, a=None, b=None, c=None) -> None:
        self._seq += 1
        heapq.heappush(self.heap, (t, self._seq, action, a, b, c))

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
        self._schedule_poisson(_CLUSTER, None, "unclean", k.unclean_elections_per_hour, t0)
        self._schedule_poisson(_CLUSTER, None, "clean", k.clean_elections_per_hour, t0)
        self._schedule_poisson(_CLUSTER, None, "retention", k.log_retention_per_hour, t0)
        self._schedule_poisson(_CLUSTER, None, "ephemeral", k.ephemeral_per_hour, t0)
        self._push(t0 + k.retention_check_interval_ms, _CLEANUP)

    def _schedule_group_scenarios(self, group: SimGroup) -> None:
        k, rng, t0 = self.knobs, self.rng, self.config.start_ts
        self._schedule_poisson(_GROUP, group, "churn", k.churn_per_hour, t0)
        self._schedule_poisson(_GROUP, group, "pause", k.pause_per_hour, t0)
        self._schedule_poisson(_GROUP, group, "admin", k.admin_commit_per_hour, t0)
        if k.rolling_restart_every_ms > 0:
            self._push(t0 + rng.randrange(k.rolling_restart_every_ms // 2, k.rolling_restart_every_ms + 1), _GROUP, group, "roll", 0)
        if rng.random() < k.empty_fraction:
            self._push(t0 + int(k.empty_after_ms * rng.uniform(0.5, 1.5)), _GROUP, group, "stop", None)

    def _schedule_poisson(self, action: int, a, b: str, per_hour: float, after: int) -> None:
        """The next event of a Poisson process of ``per_hour`` events per simulated hour."""
        rate = per_hour / 3_600_000.0
        if rate <= 0:
            return
        delay = self.rng.expovariate(rate)
        if not math.isfinite(delay) or delay > 1e15:  # a rate so small it never happens
            return
        self._push(after + 1 + int(delay), action, a, b, per_hour)

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
            self._push(t + self._latency(), _HB, client, client.hb_token, t)
        if group.commits:
            self._schedule_commit(client, t + client.commit_interval_ms)
        return client

    def _schedule_commit(self, client: ConsumerClient, t_send: int) -> None:
        """The client's next commit from its own clock, sent (group metadata taken) at ``t_send``.

        A transactional commit reaches the group coordinator only after the
        producer's AddOffsetsToTxn round trip (``txn_commit_delay_ms``): the
        member epoch it carries is older by that much.
        """
        self._push(t_send + self._latency() + client.commit_delay_ms, _COMMIT, client, client.commit_token, t_send)

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
            self.emit.group_state(self._stamp(group, t, HEARTBEATS), group.group_id, state, "consumer", truth)

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

    # ------------------------------------------------------------------ KIP-848 heartbeats

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
                    emit.member_assignment(
                        self._stamp(group, t, HEARTBEATS), gid, member, group.topology, coord.group_epoch, coord.target_assignment_epoch
                    )
            if flags & HB_UNREVOKED:
                self._push(t + self.knobs.rebalance_timeout_ms, _REBALANCE, group, member_id, member.unrevoked_since_ms)
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
        self._push(t_next + self._latency(), _HB, client, token, t_next)

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
        self._push(rejoin + self._latency(), _HB, client, client.hb_token, rejoin)

    def _start_revocation(self, client: ConsumerClient, t_learn: int, revoked: tuple[int, ...], epoch: int) -> None:
        """The client learns it must revoke partitions: onPartitionsRevoked runs (and commits)."""
        k, rng = self.knobs, self.rng
        client.revoking = True
        if client.slow_revocation:
            duration = int(k.rebalance_timeout_ms * rng.uniform(1.1, 1.6))
            self._count("slow_revocation")
        else:
            duration = 1 + rng.randrange(0, 20)
        self._push(t_learn + duration, _CB_DONE, client, client.commit_token, (revoked, epoch))
        if k.delayed_commit_rate > 0 and rng.random() < k.delayed_commit_rate:
            # A commit request sent just before the revocation hangs in the network (or in a
            # broker's request queue) and reaches the coordinator after the partitions moved.
            t_send = t_learn - 1
            view = client.view_at(t_send)
            if view[3] and view[2]:
                arrive = t_learn + int(k.delayed_commit_ms * rng.uniform(0.5, 1.5)) + 2 * k.heartbeat_interval_ms
                self._count("delayed_commit")
                self._push(arrive, _XCOMMIT, client, None, (t_send, view[1], view[2], "delayed_request", client.txn is not None, client.member_id))

    def _inject_race(self, client: ConsumerClient, t: int, t_learn: int, epoch: int, owned: tuple[int, ...]) -> None:
        """A commit sent before the bumped epoch reached the client, arriving after the bump."""
        latency = self._latency()
        low = max(t - latency + 1, t_learn - 50 * latency)
        t_send = self.rng.randrange(low, t_learn) if low < t_learn else t_learn - 1
        arrive = max(t_send + latency, t + 1)
        self._count("race")
        self._push(arrive, _XCOMMIT, client, None, (t_send, epoch, owned, "in_flight_during_heartbeat", client.txn is not None, client.member_id))

    def _on_callback_done(self, t: int, client: ConsumerClient, token: int, arg) -> None:
        revoked, epoch = arg
        client.revoking = False
        if not client.alive or client.frozen:
            return
        # onPartitionsRevoked commits the revoked partitions (commitSync) before returning.
        latency = self._latency()
        self._push(t + latency, _XCOMMIT, client, None, (t, epoch, revoked, "revocation_callback", False, client.member_id))
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
        self._push(ack + self._latency(), _HB, client, client.hb_token, ack)

    # ------------------------------------------------------------------ commits

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
            (next_send + self._latencies[i & (_LATENCIES - 1)] + client.commit_delay_ms, self._seq, _COMMIT, client, token, next_send),
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
            error = coord.validate_offset_commit(member_id, epoch, transactional)
        truth = None
        if self._labels:
            scenario, current_owner, owners, expect = coord.commit_truth(member_id, epoch, partitions)
            truth = Truth(scenario, cause, current_owner, owners, expect)
        return error, truth

    # ------------------------------------------------------------------ leaving, timeouts

    def _shutdown(self, client: ConsumerClient, t: int) -> None:
        """A clean close: commit what is owned (commitSync), then leave the group."""
        latest = client.view_at(t)
        group = client.group
        latency = self._latency()
        if latest[3] and latest[2] and not client.revoking:
            self._push(t + latency, _XCOMMIT, client, None, (t, latest[1], latest[2], "close", client.txn is not None, client.member_id))
        send_leave = t + 2 * latency
        static = client.instance_id is not None
        self._stop_client(client)
        if group.protocol == "classic":
            self._classic_leave(group, client.member_id, "leave", send_leave + self._latency())
            return
        if latest[3]:
            epoch = LEAVE_GROUP_STATIC_MEMBER_EPOCH if static else LEAVE_GROUP_MEMBER_EPOCH
            self._push(send_leave + self._latency(), _LEAVE, client, None, epoch)

    def _crash(self, client: ConsumerClient, t: int) -> None:
        """The process dies: no commit, no leave; the coordinator notices after the session timeout."""
        group = client.group
        self._stop_client(client)
        self._count("crash")
        if group.protocol == "classic":
            self._push(t + self.knobs.session_timeout_ms, _SESSION, group, client.member_id, None)
            return
        member = group.coord.members.get(client.member_id)
        if member is not None:
            self._push(member.last_heartbeat_ms + self.knobs.session_timeout_ms, _SESSION, group, client.member_id, member.last_heartbeat_ms)

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
            self._push(t + self.knobs.session_timeout_ms, _SESSION, group, client.member_id, member.last_heartbeat_ms)
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

    # ------------------------------------------------------------------ group scenarios

    def _on_group_action(self, t: int, group: SimGroup, action: str, arg) -> None:
        k, rng = self.knobs, self.rng
        if action in ("churn", "pause", "admin"):
            self._schedule_poisson(_GROUP, group, action, arg, t)
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
                    self._push(t + k.restart_downtime_ms, _GROUP, group, "restart_slot", None)
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

    def _freeze(self, client: ConsumerClient, t: int) -> None:
        """A VM or GC pause: the whole process stops (heartbeats and commits)."""
        k = self.knobs
        client.frozen = True
        client.stop_timers()
        duration = int(k.pause_ms * self.rng.uniform(0.6, 1.4))
        self._count("pause")
        group = client.group
        if group.protocol == "classic":
            self._push(t + k.session_timeout_ms, _SESSION, group, client.member_id, None)
        else:
            member = group.coord.members.get(client.member_id)
            if member is not None:
                self._push(member.last_heartbeat_ms + k.session_timeout_ms, _SESSION, group, client.member_id, member.last_heartbeat_ms)
        self._push(t + duration, _GROUP, group, "wake", client)

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
                _XCOMMIT,
                client,
                None,
                (t_send, latest[1], latest[2], "after_pause", client.txn is not None, client.member_id),
            )
        if group.protocol == "classic":
            self._classic_wake(group, client, t)
            return
        self._push(t + self._latency(), _HB, client, client.hb_token, t)
        self._schedule_commit(client, t + client.commit_interval_ms)

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
            self._push(t + k.rolling_restart_every_ms, _GROUP, group, "roll", 0)
            return
        group.restarting = True
        client = group.slots.get(slot)
        if client is not None and client.frozen:
            # The deployment skips an unresponsive instance (its process is frozen).
            self._push(t + 1, _GROUP, group, "roll", slot + 1)
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
        self._push(t + settle, _GROUP, group, "roll", slot + 1)

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
            self._push(t + int(k.empty_for_ms * rng.uniform(0.5, 1.5)), _GROUP, group, "return", None)

    # ------------------------------------------------------------------ offsets expiry

    def _on_cleanup(self, t: int, *_unused) -> None:
        """Kafka's offset expiration task (every offsets.retention.check.interval.ms)."""
        k = self.knobs
        retention = k.retention_minutes * 60_000
        self._push(t + k.retention_check_interval_ms, _CLEANUP)
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
        self._schedule_poisson(_CLUSTER, None, action, per_hour, t)
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
        self._push(t + max(1, int(k.ephemeral_life_ms * rng.uniform(0.5, 1.5))), _GROUP, group, "end", None)

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

    # ------------------------------------------------------------------ classic groups

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
        self._push(t + 1 + self.rng.randrange(0, 50), _CLASSIC_REBALANCE, group)

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

"""Named traffic profiles and the knobs they set.

What lives here: :class:`Knobs` (every tunable of a simulation, with the
defaults of a healthy cluster running Kafka's default client and broker
configs) and :data:`PROFILES`, the named mixes of the issue: ``steady``,
``rolling-restart``, ``zombie-storm``, ``eos-heavy``, ``expiry-hazard``,
``unclean-election``, ``mixed``, ``ephemeral`` (groups that come and go, issue 36) and
``streams`` (Kafka Streams groups under exactly-once, KIP-1071, issue 45). A profile is just a ``Knobs`` value; the CLI
overrides any knob with ``--set name=value``. Rates are per simulated hour
(per group unless the name says cluster), durations in simulated ms.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from fencewatch.state.config import parse_duration_ms

__all__ = ["PROFILES", "Knobs", "knob_names", "parse_knob", "profile"]


@dataclass(frozen=True, slots=True)
class Knobs:
    """Everything a run can tune; see docs/simulator.md for what each models."""

    # size
    groups: int = 10
    members_per_group: int = 3
    topics: int = 2
    partitions_per_topic: int = 6
    groups_per_topic: int = 2  # topic sharing: how many groups consume each topic
    classic_fraction: float = 0.0  # share of groups using the classic protocol (sticky assignor)
    static_fraction: float = 0.0  # share of KIP-848 groups whose members have group.instance.id
    eos_fraction: float = 0.0  # share of KIP-848 groups committing through transactions (EOS)
    streams_fraction: float = 0.0  # share of KIP-848 groups that are Kafka Streams groups (KIP-1071, EOS v2)
    streams_relaxed: bool = True  # streams commits judged with KIP-1251's check (Kafka 4.2+); false: exact epoch (4.1)
    # client and broker configs (Kafka defaults)
    heartbeat_interval_ms: int = 5000  # group.consumer.heartbeat.interval.ms
    session_timeout_ms: int = 45000  # group.consumer.session.timeout.ms
    rebalance_timeout_ms: int = 300000  # max.poll.interval.ms
    auto_commit_interval_ms: int = 5000  # auto.commit.interval.ms
    eos_commit_interval_ms: int = 100  # Kafka Streams commit.interval.ms under exactly-once
    latency_ms: float = 5.0  # mean one-way client<->coordinator latency (1 ms + exponential)
    coordinator_write_ms: int = 5  # a heartbeat that changed state is answered after its records are written
    txn_commit_delay_ms: int = 20  # group metadata taken -> TxnOffsetCommit arrives (AddOffsetsToTxn round trip)
    consumer_lag_ms: int = 2000  # how far behind the log end consumers commit
    produce_rate: float = 50.0  # records/s appended to each partition
    # races and failures
    race_rate: float = 0.05  # P(a commit is in flight while a heartbeat bumps the member epoch), per bump
    delayed_commit_rate: float = 0.0  # P(a commit request is delayed past a revocation), per revocation
    delayed_commit_ms: int = 15000  # how long such a request hangs (mean; it arrives after the move)
    slow_revocation_rate: float = 0.0  # P(onPartitionsRevoked takes longer than the rebalance timeout)
    churn_per_hour: float = 1.0  # scale-out / scale-in / crash events per group
    crash_fraction: float = 0.2  # share of scale-ins that are crashes (no LeaveGroup: session timeout)
    restart_downtime_ms: int = 8000  # a restarted or crashed process comes back after this
    rolling_restart_every_ms: int = 0  # each group rolls all its members this often (0 = never)
    pause_per_hour: float = 0.0  # VM / GC freezes per group
    pause_ms: int = 60000  # mean freeze length (above session timeout: the member is fenced)
    # groups that go empty (offset expiry hazards)
    empty_fraction: float = 0.0  # share of groups that stop (all members leave) during the run
    empty_after_ms: int = 600000  # when they stop
    empty_for_ms: int = 7200000  # how long they stay empty (mean)
    return_fraction: float = 0.5  # share of stopped groups that come back
    admin_commit_per_hour: float = 0.0  # admin offset resets per group (kafka-consumer-groups --reset-offsets)
    retention_minutes: int = 10080  # offsets.retention.minutes
    retention_check_interval_ms: int = 600000  # offsets.retention.check.interval.ms
    committed_records: bool = False  # also emit offset_committed / offset_deleted (as __consumer_offsets shows)
    # short-lived groups (cluster-wide): console consumers, one-off jobs, tests
    ephemeral_per_hour: float = 0.0  # new groups per hour, each one member, under a new group id
    ephemeral_life_ms: int = 60000  # how long one lives (mean) before its member closes (or crashes)
    ephemeral_commit_fraction: float = 0.5  # share that commit (a console consumer without --group does not)
    # partition leadership (cluster-wide)
    unclean_elections_per_hour: float = 0.0
    clean_elections_per_hour: float = 0.0
    log_retention_per_hour: float = 0.0  # log start offset moves (retention deletes segments)
    unclean_truncation_ms: int = 30000  # records an unclean leader misses (as produce time)
    # classic groups
    classic_user_data_v0_fraction: float = 0.0  # classic groups of old clients (sticky user data v0: no generation)


PROFILES: dict[str, Knobs] = {
    # Healthy groups: auto-commit consumers, some exactly-once apps, occasional scaling.
    "steady": Knobs(eos_fraction=0.2, race_rate=0.05, churn_per_hour=1.0),
    # Deployments: every group rolls its members every 10 min; half use static membership.
    "rolling-restart": Knobs(
        rolling_restart_every_ms=600000,
        static_fraction=0.5,
        eos_fraction=0.3,
        race_rate=0.2,
        churn_per_hour=0.0,
        crash_fraction=0.0,
    ),
    # Freezes past the session timeout, slow revocations, delayed commits: zombies everywhere.
    "zombie-storm": Knobs(
        pause_per_hour=6.0,
        pause_ms=70000,
        slow_revocation_rate=0.15,
        rebalance_timeout_ms=60000,
        delayed_commit_rate=0.5,
        churn_per_hour=6.0,
        eos_fraction=0.2,
        race_rate=0.1,
        classic_fraction=0.2,
    ),
    # Exactly-once apps committing every 100 ms through a stream of rebalances: avoidable aborts.
    "eos-heavy": Knobs(eos_fraction=0.9, churn_per_hour=6.0, race_rate=0.0, crash_fraction=0.1),
    # Groups that stop with old commits, a short retention so the hazard unfolds in hours.
    "expiry-hazard": Knobs(
        empty_fraction=0.5,
        empty_after_ms=600000,
        empty_for_ms=5400000,
        return_fraction=0.5,
        admin_commit_per_hour=0.5,
        retention_minutes=60,
        committed_records=True,
        classic_fraction=0.2,
        log_retention_per_hour=20.0,
        churn_per_hour=0.5,
    ),
    # Groups that come and go under new ids (every kafka-console-consumer without --group makes
    # one): they join, some commit, they close or crash; their offsets expire, the group is deleted.
    "ephemeral": Knobs(
        groups=4,
        ephemeral_per_hour=600.0,
        ephemeral_life_ms=60000,
        ephemeral_commit_fraction=0.5,
        crash_fraction=0.2,
        retention_minutes=30,
        committed_records=True,
        churn_per_hour=0.5,
    ),
    # Kafka Streams applications (KIP-1071) under exactly-once v2: every group a streams group whose
    # tasks read a source topic each and a repartition topic, committing through transactions every
    # 100 ms while scaling, crashes and delayed requests move tasks under commits in flight. The
    # broker judges them as Kafka 4.2+ does (KIP-1251's check); --set streams_relaxed=false: as 4.1.
    "streams": Knobs(
        streams_fraction=1.0,
        members_per_group=4,
        rolling_restart_every_ms=600000,
        churn_per_hour=6.0,
        crash_fraction=0.2,
        race_rate=0.5,
        delayed_commit_rate=0.5,
        delayed_commit_ms=5000,
        pause_per_hour=2.0,
    ),
    # Unclean leader elections truncate logs under committed offsets (KIP-320).
    "unclean-election": Knobs(
        unclean_elections_per_hour=30.0,
        clean_elections_per_hour=30.0,
        churn_per_hour=0.5,
    ),
    # A bit of everything, including classic groups with stale sticky claims (KIP-341).
    "mixed": Knobs(
        classic_fraction=0.2,
        classic_user_data_v0_fraction=0.3,
        static_fraction=0.3,
        eos_fraction=0.3,
        race_rate=0.1,
        churn_per_hour=3.0,
        pause_per_hour=1.0,
        slow_revocation_rate=0.05,
        rebalance_timeout_ms=60000,
        delayed_commit_rate=0.2,
        rolling_restart_every_ms=1800000,
        empty_fraction=0.1,
        admin_commit_per_hour=0.2,
        unclean_elections_per_hour=6.0,
        clean_elections_per_hour=6.0,
    ),
}


def profile(name: str) -> Knobs:
    try:
        return PROFILES[name]
    except KeyError:
        raise ValueError(f"unknown profile {name!r}; valid: {', '.join(PROFILES)}") from None


def knob_names() -> list[str]:
    return [f.name for f in dataclasses.fields(Knobs)]


def parse_knob(knobs: Knobs, assignment: str) -> Knobs:
    """Apply one ``name=value`` override, typed by the knob's default."""
    name, sep, raw = assignment.partition("=")
    name = name.strip().replace("-", "_")
    if not sep:
        raise ValueError(f"knob override {assignment!r} must be name=value")
    fields = {f.name: f for f in dataclasses.fields(Knobs)}
    if name not in fields:
        raise ValueError(f"unknown knob {name!r}; valid: {', '.join(fields)}")
    current = getattr(knobs, name)
    raw = raw.strip()
    try:
        if isinstance(current, bool):
            if raw.lower() not in ("true", "false", "1", "0", "yes", "no"):
                raise ValueError(raw)
            value: object = raw.lower() in ("true", "1", "yes")
        elif isinstance(current, int) and name.endswith("_ms"):
            value = parse_duration_ms(raw, f"knob {name}", bare="ms")  # 45000, or 45s as in the config
        elif isinstance(current, int):
            try:
                value = int(raw)
            except ValueError:
                number = float(raw)  # 6e4, 60000.0
                if not number.is_integer():
                    raise
                value = int(number)
        else:
            value = float(raw)
    except ValueError:
        raise ValueError(f"knob {name}={raw!r}: expected {type(current).__name__}") from None
    return validate(dataclasses.replace(knobs, **{name: value}))


def validate(knobs: Knobs) -> Knobs:
    """Reject values that make no sense (negative sizes, fractions outside [0, 1])."""
    errors = []
    for f in dataclasses.fields(Knobs):
        value = getattr(knobs, f.name)
        if isinstance(value, bool):
            continue
        if value < 0:
            errors.append(f"{f.name} must be >= 0, got {value}")
        probability = f.name.endswith("_fraction") or (f.name.endswith("_rate") and f.name != "produce_rate")
        if probability and value > 1:
            errors.append(f"{f.name} is a probability, got {value}")
    for name in ("groups", "members_per_group", "topics", "partitions_per_topic", "groups_per_topic"):
        if getattr(knobs, name) < 1:
            errors.append(f"{name} must be >= 1")
    for name in ("heartbeat_interval_ms", "session_timeout_ms", "auto_commit_interval_ms", "eos_commit_interval_ms"):
        if getattr(knobs, name) < 1:
            errors.append(f"{name} must be >= 1 ms")
    if errors:
        raise ValueError("; ".join(errors))
    return knobs

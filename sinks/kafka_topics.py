"""The job's output topics: do they exist, may this principal write (and read back) them, and
creating them when asked. Asked before the first micro-batch, so that a missing topic stops the
job with one line that names it, instead of every record going to a dead-letter topic that is
missing too (issue 46).

Nothing is produced to find out: a test record in a topic consumers read is not ours to write.
Writability is the authorized operations Kafka computes for the asking principal in
DescribeTopics (KIP-430: every operation without an authorizer) and a leader for every
partition. What is not known (a broker that reports no operations) is not a problem.

Imports: confluent_kafka's admin client and the standard library.
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

log = logging.getLogger(__name__)

#: Delivery and describe errors that mean "this topic is not there" (deleted, never created).
MISSING_TOPIC_ERRORS = frozenset({"UNKNOWN_TOPIC_OR_PART", "_UNKNOWN_TOPIC", "UNKNOWN_TOPIC_ID"})
#: What the writer needs on each output topic (Kafka's ACL operation names): Write to produce,
#: Read to read a pending batch back after a crash (``sinks.kafka``).
NEEDED_OPERATIONS = ("WRITE", "READ")


@dataclass(frozen=True, slots=True)
class OutputTopic:
    """One topic the job writes: its role (``verdicts``, ``alerts``, ``dlq``...), name, and the
    settings it is created with (``cleanup.policy`` at least)."""

    role: str
    name: str
    config: Mapping[str, str] = field(default_factory=lambda: {"cleanup.policy": "delete"})


@dataclass(frozen=True, slots=True)
class TopicState:
    """A topic as DescribeTopics shows it to this principal: ``error`` (a Kafka error name:
    ``UNKNOWN_TOPIC_OR_PART``, ``TOPIC_AUTHORIZATION_FAILED``) or its partitions, those without a
    leader, and the authorized operations (None: not reported)."""

    error: str | None = None
    partitions: int = 0
    leaderless: tuple[int, ...] = ()
    operations: frozenset[str] | None = None


class OutputTopicError(RuntimeError):
    """An output topic the job cannot write: the message is the one line to show."""

    def __init__(self, topic: str, message: str):
        super().__init__(message)
        self.topic = topic


def missing_message(topic: str, bootstrap: str, *, partitions: int | None = None,
                    replication_factor: int | None = None, since: str = "does not exist",
                    creates_at_start: bool = False) -> str:
    """The one line for a topic that is not there: its name, where, and both ways out
    (``creates_at_start``: the job runs with ``sinks.create_topics``, so a start recreates it)."""
    p = partitions if partitions else "N"
    r = replication_factor if replication_factor else "R"
    create = (f"kafka-topics.sh --bootstrap-server {bootstrap} --create --topic {topic} --partitions {p} "
              f"--replication-factor {r}")
    if creates_at_start:
        return (f"output topic {topic} {since} on {bootstrap}: start the job again, --create-topics "
                f"(sinks.create_topics) recreates it, or create it ({create})")
    return f"output topic {topic} {since} on {bootstrap}: create it ({create}) or run with --create-topics (sinks.create_topics)"


def topic_problem(topic: OutputTopic, state: TopicState, bootstrap: str, *, principal: str = "this principal",
                  partitions: int | None = None, replication_factor: int | None = None) -> str | None:
    """What stops the job writing ``topic`` (one line, with the fix), or None."""
    if state.error in MISSING_TOPIC_ERRORS:
        return missing_message(topic.name, bootstrap, partitions=partitions, replication_factor=replication_factor)
    if state.error == "TOPIC_AUTHORIZATION_FAILED":
        return (f"output topic {topic.name} on {bootstrap}: {principal} may not even Describe it: grant "
                f"{'+'.join(w.title() for w in NEEDED_OPERATIONS)} (kafka-acls.sh --bootstrap-server {bootstrap} --add "
                f"--allow-principal {principal} --operation Write --operation Read --topic {topic.name})")
    if state.error is not None:
        return f"output topic {topic.name} on {bootstrap}: describing it failed ({state.error}): see the brokers' logs"
    if state.operations is not None:
        missing = [op for op in NEEDED_OPERATIONS if op not in state.operations]
        if missing:
            ops = " ".join(f"--operation {op.title()}" for op in missing)
            return (f"output topic {topic.name} on {bootstrap}: {principal} may not {'/'.join(m.title() for m in missing)} "
                    f"it ({topic.role}: Write to produce, Read to read a batch back after a crash): grant it "
                    f"(kafka-acls.sh --bootstrap-server {bootstrap} --add --allow-principal {principal} {ops} "
                    f"--topic {topic.name})")
    if state.leaderless:
        return (f"output topic {topic.name} on {bootstrap}: partition(s) {', '.join(map(str, state.leaderless))} of "
                f"{state.partitions} have no leader: bring their replicas' brokers back (kafka-topics.sh --describe "
                f"--topic {topic.name})")
    return None


def _admin(client: Mapping[str, Any]):
    from confluent_kafka.admin import AdminClient

    return AdminClient({"logger": logging.getLogger("fencewatch.kafka.admin"), **client})


def deleted_topics(client: Mapping[str, Any], names: Iterable[str], *, partitions: int | None = None,
                   replication_factor: int | None = None, creates_at_start: bool = False,
                   timeout_s: float = 10.0) -> dict[str, str]:
    """Of ``names`` (output topics the producer found missing while the job ran), those
    DescribeTopics confirms are gone, each with the start check's line (:func:`missing_message`)."""
    states = describe_topics(client, names, timeout_s=timeout_s)
    bootstrap = str(client.get("bootstrap.servers"))
    return {n: missing_message(n, bootstrap, partitions=partitions, replication_factor=replication_factor,
                               since="was deleted while the job ran", creates_at_start=creates_at_start)
            for n, st in states.items() if st.error in MISSING_TOPIC_ERRORS}


def describe_topics(client: Mapping[str, Any], names: Iterable[str], *, timeout_s: float = 10.0,
                    admin=None) -> dict[str, TopicState]:
    """:class:`TopicState` of each name (DescribeTopics with the authorized operations, KIP-430).
    A cluster that does not answer within ``timeout_s`` raises ``KafkaException``."""
    from confluent_kafka import KafkaException, TopicCollection

    names = sorted(set(names))
    if not names:
        return {}
    admin = admin or _admin(client)
    futures = admin.describe_topics(TopicCollection(names), include_authorized_operations=True,
                                    request_timeout=timeout_s)
    out: dict[str, TopicState] = {}
    for name, fut in futures.items():
        try:
            d = fut.result()
        except KafkaException as exc:
            out[name] = TopicState(error=exc.args[0].name())
            continue
        ops = d.authorized_operations
        out[name] = TopicState(partitions=len(d.partitions),
                               leaderless=tuple(p.id for p in d.partitions if p.leader is None or p.leader.id < 0),
                               operations=None if ops is None else frozenset(op.name for op in ops))
    return out


def create_topics(client: Mapping[str, Any], topics: Iterable[OutputTopic], *, partitions: int | None,
                  replication_factor: int | None, config: Mapping[str, str] | None = None,
                  timeout_s: float = 30.0, admin=None) -> list[str]:
    """Create ``topics``; None partitions or replication: the brokers' defaults (``num.partitions``,
    ``default.replication.factor``, KIP-464). ``config`` adds to each topic's own settings. A topic
    created meanwhile by someone else is fine. Returns the names created; a refusal is an
    :class:`OutputTopicError` naming the topic and Kafka's reason."""
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import NewTopic

    topics = list(topics)
    if not topics:
        return []
    admin = admin or _admin(client)
    new = [NewTopic(t.name, num_partitions=partitions or -1, replication_factor=replication_factor or -1,
                    config={**t.config, **(config or {})}) for t in topics]
    created = []
    for name, fut in admin.create_topics(new, operation_timeout=timeout_s, request_timeout=timeout_s).items():
        try:
            fut.result()
            created.append(name)
        except KafkaException as exc:
            err = exc.args[0]
            if err.code() == KafkaError.TOPIC_ALREADY_EXISTS:
                continue
            raise OutputTopicError(name, f"output topic {name} could not be created on "
                                         f"{client.get('bootstrap.servers')}: {err.name()}: {err.str()}") from None
    _wait_visible(admin, [t.name for t in topics], timeout_s)
    return created


def _wait_visible(admin, names: list[str], timeout_s: float) -> None:
    """Until metadata shows every partition of ``names`` with a leader (a producer started next finds them)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        md = admin.list_topics(timeout=max(0.1, min(5.0, deadline - time.monotonic())))
        if all(n in md.topics and md.topics[n].error is None and md.topics[n].partitions
               and all(p.leader >= 0 for p in md.topics[n].partitions.values()) for n in names):
            return
        time.sleep(0.1)

"""What a principal can see and do on a Kafka cluster, asked without changing anything there.

What lives here: :class:`ClusterProbe`, confluent-kafka's admin client and an assign-only
consumer under the job's client settings: connect (with librdkafka's own errors kept, so a
wrong password, a wrong mechanism and an unreachable broker can be told apart), the
authorized operations Kafka reports for the cluster and for named topics
(``include_authorized_operations``: the broker computes them for the principal asking, KIP-430),
a broker's configuration, the consumer groups by type, topic ids, and the newest records of
a topic. Nothing is written, no group is joined, no offset is committed. ``fencewatch doctor``
turns the answers into advice.

Imports: confluent_kafka and the standard library (sources sit at the start of the flow).
"""
from __future__ import annotations

import logging
import math
import time
from collections import Counter, deque
from dataclasses import dataclass, field
from typing import Any, Mapping

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicCollection, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource

#: librdkafka errors that no retry within a few seconds will cure: stop waiting for metadata.
_HOPELESS = ("_AUTHENTICATION", "_RESOLVE", "_SSL", "_INVALID_ARG", "_UNSUPPORTED_FEATURE")
#: The consumer group id of the probe's consumer: it assigns partitions, never joins or commits.
PROBE_GROUP = "fencewatch-doctor"


@dataclass
class ClusterView:
    """The cluster as metadata shows it to this principal."""

    cluster_id: str | None
    brokers: dict[int, str]  # broker id -> host:port as advertised
    topics: frozenset[str]  # the topics this principal may Describe


@dataclass
class Access:
    """Authorized operations (Kafka's names): the cluster's (None: the principal may not
    Describe the cluster, and Kafka then reports none), and per topic a set, or the error of
    describing it (``TOPIC_AUTHORIZATION_FAILED``: no Describe; ``UNKNOWN_TOPIC_OR_PART``: absent)."""

    cluster: frozenset[str] | None
    topics: dict[str, frozenset[str] | str]


@dataclass
class TopicTail:
    """The newest records of a topic: per partition (low, high, newest record's time stamp in
    epoch ms or None when empty), and up to ``max_records`` records as (partition, offset,
    time stamp, value), oldest first within a partition. ``error``: why reading stopped."""

    ends: dict[int, tuple[int, int, int | None]] = field(default_factory=dict)
    records: list[tuple[int, int, int | None, bytes | None]] = field(default_factory=list)
    error: str | None = None


class _Capture(logging.Handler):
    def __init__(self, sink: deque) -> None:
        super().__init__(logging.DEBUG)
        self.sink = sink

    def emit(self, record: logging.LogRecord) -> None:
        self.sink.append(record.getMessage())


class ClusterProbe:
    """One cluster, as the principal of ``client`` (librdkafka settings, bootstrap included)."""

    def __init__(self, client: Mapping[str, Any], *, timeout_s: float = 10.0):
        self.client = {k: v for k, v in client.items() if k not in ("error_cb", "logger")}
        self.timeout_s = timeout_s
        self.errors: list[tuple[str, str]] = []  # (librdkafka error name, text), as reported
        # librdkafka's log lines, kept: some failures are only said there (a listener that closes
        # the connection of a client speaking the wrong protocol). Shown only at DEBUG.
        self.log_lines: deque[str] = deque(maxlen=200)
        self._capture = _Capture(self.log_lines)
        self._log = logging.getLogger("fencewatch.kafka.doctor")
        self._log.setLevel(logging.INFO)
        self._log.propagate = logging.getLogger().isEnabledFor(logging.DEBUG)
        self._log.addHandler(self._capture)
        self._admin = AdminClient({**self.client, "logger": self._log, "error_cb": self._on_error})

    def close(self) -> None:
        self._log.removeHandler(self._capture)

    def _on_error(self, err: KafkaError) -> None:
        self.errors.append((err.name(), err.str()))

    def connect(self) -> ClusterView | None:
        """Cluster metadata within the timeout, or None (then :attr:`errors` says why)."""
        deadline = time.monotonic() + self.timeout_s
        while True:
            try:
                md = self._admin.list_topics(timeout=max(0.1, min(1.0, deadline - time.monotonic())))
            except KafkaException as exc:
                self._admin.poll(0)  # serves error_cb
                if time.monotonic() >= deadline or any(n in _HOPELESS for n, _ in self.errors):
                    if not self.errors:
                        self.errors.append((exc.args[0].name(), exc.args[0].str()))
                    return None
                continue
            self._admin.poll(0)
            return ClusterView(md.cluster_id, {b.id: f"{b.host}:{b.port}" for b in md.brokers.values()},
                               frozenset(md.topics))

    def access(self, topics: list[str]) -> Access:
        cluster: frozenset[str] | None = None
        try:
            described = self._admin.describe_cluster(include_authorized_operations=True,
                                                     request_timeout=self.timeout_s).result()
            if described.authorized_operations is not None:
                cluster = frozenset(op.name for op in described.authorized_operations)
        except KafkaException as exc:
            if exc.args[0].name() != "CLUSTER_AUTHORIZATION_FAILED":
                raise
        found: dict[str, frozenset[str] | str] = {}
        if topics:
            futures = self._admin.describe_topics(TopicCollection(list(topics)), include_authorized_operations=True,
                                                  request_timeout=self.timeout_s)
            for name, fut in futures.items():
                try:
                    ops = fut.result().authorized_operations or []
                    found[name] = frozenset(op.name for op in ops)
                except KafkaException as exc:
                    found[name] = exc.args[0].name()
        return Access(cluster, found)

    def broker_config(self, broker_id: int, names: tuple[str, ...]) -> dict[str, str | None] | str:
        """The named settings of one broker, or the error name (``CLUSTER_AUTHORIZATION_FAILED``:
        no DescribeConfigs on the cluster)."""
        try:
            futures = self._admin.describe_configs([ConfigResource("BROKER", str(broker_id))],
                                                   request_timeout=self.timeout_s)
            entries = next(iter(futures.values())).result()
        except KafkaException as exc:
            return exc.args[0].name()
        return {n: (entries[n].value if n in entries else None) for n in names}

    def groups_by_type(self) -> Counter:
        """Consumer groups this principal may Describe, counted by type (``CONSUMER`` is KIP-848's)."""
        listed = self._admin.list_consumer_groups(request_timeout=self.timeout_s).result()
        return Counter(getattr(g.type, "name", str(g.type)) for g in listed.valid)

    def may_describe_group(self, probe_group: str = PROBE_GROUP) -> bool:
        """Describe a group that need not exist: only a missing Describe ACL answers
        GROUP_AUTHORIZATION_FAILED (Kafka checks it before it looks the group up)."""
        fut = next(iter(self._admin.describe_consumer_groups([probe_group], request_timeout=self.timeout_s).values()))
        try:
            fut.result()
        except KafkaException as exc:
            return exc.args[0].name() != "GROUP_AUTHORIZATION_FAILED"
        return True

    def topic_ids(self, names: frozenset[str]) -> dict[str, str]:
        """Topic id (UUID text) -> name for the topics this principal may Describe."""
        out: dict[str, str] = {}
        if not names:
            return out
        futures = self._admin.describe_topics(TopicCollection(sorted(names)), request_timeout=self.timeout_s)
        for name, fut in futures.items():
            try:
                out[str(fut.result().topic_id)] = name
            except KafkaException:
                continue  # deleted meanwhile, or not describable: its id stays unresolved
        return out

    def tail(self, topic: str, max_records: int, group_id: str = PROBE_GROUP) -> TopicTail:
        """The newest ``max_records`` records of ``topic`` (spread over its partitions) and each
        partition's newest time stamp, read by an assign-only consumer with ``group_id`` (the
        group is never joined; an error about it does not stop the read)."""
        consumer = Consumer({**self.client, "logger": self._log, "group.id": group_id,
                             "enable.auto.commit": False, "enable.partition.eof": True,
                             "auto.offset.reset": "latest"})
        try:
            return self._tail(consumer, topic, max_records)
        except KafkaException as exc:
            return TopicTail(error=f"{exc.args[0].name()}: {exc.args[0].str()}")
        finally:
            consumer.close()

    def _tail(self, consumer: Consumer, topic: str, max_records: int) -> TopicTail:
        md = consumer.list_topics(topic, timeout=self.timeout_s).topics.get(topic)
        if md is None or md.error is not None:
            return TopicTail(error=md.error.name() if md is not None and md.error is not None else "UNKNOWN_TOPIC")
        out = TopicTail()
        per = max(1, math.ceil(max_records / max(1, len(md.partitions))))
        wanted = []
        for p in sorted(md.partitions):
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=self.timeout_s, cached=False)
            out.ends[p] = (low, high, None)
            if high > low:
                wanted.append(TopicPartition(topic, p, max(low, high - per)))
        if not wanted:
            return out
        consumer.assign(wanted)
        open_parts = {tp.partition for tp in wanted}
        deadline = time.monotonic() + self.timeout_s
        while open_parts and time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is None:
                continue
            if msg.error() is not None:
                if msg.error().code() == KafkaError._PARTITION_EOF:
                    open_parts.discard(msg.partition())
                    continue
                if msg.topic() is None and msg.error().code() == KafkaError.GROUP_AUTHORIZATION_FAILED:
                    continue  # the group's coordinator lookup: reported by the group's ACL check
                out.error = f"{msg.error().name()}: {msg.error().str()}"
                break
            kind, ts = msg.timestamp()
            stamp = ts if kind != 0 and ts >= 0 else None  # TIMESTAMP_NOT_AVAILABLE
            out.records.append((msg.partition(), msg.offset(), stamp, msg.value()))
            low, high, _ = out.ends[msg.partition()]
            out.ends[msg.partition()] = (low, high, stamp)
        if open_parts and out.error is None:
            out.error = f"partitions {sorted(open_parts)} not read to their end within {self.timeout_s:.0f} s"
        return out

"""Apache Kafka as an operator runs it, three KRaft nodes on loopback, for the tests, the demo and
the benchmarks: what a single node cannot show (a group coordinator moving between brokers when
one restarts, ``__consumer_offsets`` replicated with its default 50 partitions).

What lives here: :class:`KafkaCluster`, three :class:`~fencewatch.streaming.brokers.kafka.KafkaBroker`
nodes, each broker and controller in one JVM, the three controllers one quorum (a restart of any
one node leaves two voters: the quorum and the partition leaders move on, docs/decisions.md).
Each node keeps its own folder and request log (``kafka.request.logger`` at DEBUG), as each broker
of a real cluster does; ``bootstrap`` names all three. Settings are the single node's (KIP-848 and
KIP-1071 beside classic) with a real cluster's replication: ``__consumer_offsets`` of 50
partitions, replication factor 3, ``min.insync.replicas`` 2.

:meth:`KafkaCluster.coordinator_leader` says which node coordinates a group (Kafka's
``Utils.abs(groupId.hashCode()) % offsets.topic.num.partitions``, then that partition's leader);
:meth:`KafkaCluster.restart` restarts one node as a pod restart does and says how long each part
took. Nodes are stopped the ways a single broker is (``with`` exit, interpreter exit, SIGTERM, the
parent-death signal); a failed start stops every node it launched.

Imports: standard library, confluent_kafka, brokers/common.py and brokers/kafka.py. Nothing else of ours.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from fencewatch.streaming.brokers.common import (
    BrokerStartError,
    _quiet_client_logger,
    create_topics,
    delete_topics,
    free_port,
    port_taken,
)
from fencewatch.streaming.brokers.kafka import (
    DEFAULT_VERSION,
    KafkaBroker,
    _cluster_id,
    resolve_version,
)

log = logging.getLogger(__name__)

OFFSETS_TOPIC = "__consumer_offsets"
#: Kafka's default ``offsets.topic.num.partitions``: what an operator's cluster has.
OFFSETS_PARTITIONS = 50
#: Per node: three JVMs share a 2-core host with others, and a test-sized node needs little heap.
DEFAULT_HEAP = "512m"
#: Seconds for each node to answer and for ``__consumer_offsets`` to have every replica in sync:
#: three JVMs starting at once on a loaded 2-core host take several times a quiet one's.
DEFAULT_STARTUP_TIMEOUT_S = 180.0
_START_ATTEMPTS = 3
#: Seconds between SIGTERM and SIGKILL when the whole cluster stops (a node's restart keeps
#: KafkaBroker's 20 s: its controlled shutdown completes there, in 3-5 s).
STOP_GRACE_S = 5.0


def cluster_properties(nodes: int, offsets_partitions: int = OFFSETS_PARTITIONS) -> dict[str, str]:
    """A real cluster's replication over the single node's settings: every internal topic on
    every node (``nodes`` replicas, at most 3) with ``min.insync.replicas`` one fewer (2 of 3, as
    operators run it: a commit survives one node down); ``__consumer_offsets`` at Kafka's default
    50 partitions (the single node's one partition hides which broker coordinates a group)."""
    replicas = min(nodes, 3)
    min_isr = max(1, replicas - 1)
    return {
        "offsets.topic.replication.factor": str(replicas),
        "offsets.topic.num.partitions": str(offsets_partitions),
        "default.replication.factor": str(replicas),
        "min.insync.replicas": str(min_isr),
        "transaction.state.log.replication.factor": str(replicas),
        "transaction.state.log.min.isr": str(min_isr),
        "transaction.state.log.num.partitions": str(offsets_partitions),
        "share.coordinator.state.topic.replication.factor": str(replicas),
        "share.coordinator.state.topic.min.isr": str(min_isr),
    }


def java_string_hash(text: str) -> int:
    """Java's ``String.hashCode`` (over UTF-16 code units, 32-bit wrap-around)."""
    h = 0
    data = text.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + (data[i] << 8 | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def offsets_partition(group_id: str, partitions: int = OFFSETS_PARTITIONS) -> int:
    """The ``__consumer_offsets`` partition of ``group_id``: Kafka's
    ``Utils.abs(groupId.hashCode()) % numPartitions`` (``GroupCoordinatorService.partitionFor``),
    where ``Utils.abs(Integer.MIN_VALUE)`` is 0."""
    h = java_string_hash(group_id)
    return (0 if h == -(1 << 31) else abs(h)) % partitions


@dataclass(frozen=True, slots=True)
class RestartTiming:
    """How long one node's restart took, in seconds: the controlled shutdown (SIGTERM until the
    JVM exited), the start (launch until it answered metadata), and the start until every
    ``__consumer_offsets`` partition had all its replicas in sync again (None if not waited for)."""

    node_id: int
    stopped_in_s: float
    ready_in_s: float
    in_sync_in_s: float | None


class KafkaCluster:
    """Three Apache Kafka KRaft nodes (broker and controller each, one 3-voter quorum) on free
    loopback ports, owned by this process.

    ``version`` as :class:`KafkaBroker`'s (``"4.2"`` or exact); ``nodes`` how many (3; 1 or 2 work,
    with replication capped at the node count); ``properties`` server settings over
    :func:`cluster_properties` for every node; ``heap`` each JVM's ``-Xmx``.
    """

    NAME = "Apache Kafka cluster"

    def __init__(
        self,
        version: str = DEFAULT_VERSION,
        *,
        nodes: int = 3,
        properties: Mapping[str, str] | None = None,
        host: str = "127.0.0.1",
        heap: str = DEFAULT_HEAP,
        offsets_partitions: int = OFFSETS_PARTITIONS,
        startup_timeout_s: float = DEFAULT_STARTUP_TIMEOUT_S,
        jars_dir: str | os.PathLike[str] | None = None,
    ) -> None:
        if nodes < 1:
            raise ValueError(f"a cluster needs at least one node, got {nodes}")
        self._wanted = version
        self._count = nodes
        self._properties = cluster_properties(nodes, offsets_partitions) | dict(properties or {})
        self._host = host
        self._heap = heap
        self._offsets_partitions = offsets_partitions
        self._startup_timeout_s = startup_timeout_s
        self._jars_dir = jars_dir
        self._nodes: list[KafkaBroker] = []
        self._lock = threading.RLock()
        self.version: str | None = None
        #: Seconds from the first node's launch until every node answered and ``__consumer_offsets``
        #: had all its replicas in sync, at the last start.
        self.ready_in_s: float | None = None

    # -- what callers read -----------------------------------------------------------

    @property
    def nodes(self) -> list[KafkaBroker]:
        """The nodes, ``node_id`` 1, 2, 3 in order (running or not)."""
        return list(self._nodes)

    def node(self, node_id: int) -> KafkaBroker:
        for node in self._nodes:
            if node.node_id == node_id:
                return node
        raise KeyError(f"no node {node_id} in the cluster (nodes: {[n.node_id for n in self._nodes]})")

    @property
    def bootstrap(self) -> str:
        """Every node's ``host:port``, comma-separated, also while one restarts."""
        if not self._nodes:
            raise RuntimeError(f"{self.NAME} is not running")
        return ",".join(node.address for node in self._nodes)

    @property
    def request_log_paths(self) -> dict[int, Path]:
        """``node_id`` -> that node's ``kafka-request.log`` (the node id is what the shipped
        rsyslog configuration keys a node's lines by)."""
        return {node.node_id: node.request_log_path for node in self._nodes}

    @property
    def is_running(self) -> bool:
        """Every node runs."""
        return bool(self._nodes) and all(node.is_running for node in self._nodes)

    def client_config(self) -> dict[str, str]:
        return {"bootstrap.servers": self.bootstrap}

    def rss_bytes(self) -> dict[int, int]:
        """``node_id`` -> the resident memory of its JVM (``VmRSS``), for running nodes."""
        out = {}
        for node in self._nodes:
            if node.pid is None or not node.is_running:
                continue
            try:
                for line in Path(f"/proc/{node.pid}/status").read_text().splitlines():
                    if line.startswith("VmRSS:"):
                        out[node.node_id] = int(line.split()[1]) * 1024
            except OSError:
                continue
        return out

    def log_tail(self) -> str:
        return "\n".join(f"=== node {node.node_id}\n{node.log_tail()}" for node in self._nodes)

    # -- topics ----------------------------------------------------------------------

    def create_topics(self, names: Iterable[str], partitions: int = 1, *, exist_ok: bool = False,
                      replication_factor: int | None = None) -> None:
        """Topics replicated to every node (up to 3) unless ``replication_factor`` says otherwise."""
        create_topics(self.client_config(), names, partitions, exist_ok=exist_ok,
                      replication_factor=replication_factor or min(self._count, 3))

    def delete_topics(self, names: Iterable[str]) -> None:
        delete_topics(self.client_config(), names)

    def _admin(self) -> AdminClient:
        return AdminClient({**self.client_config(), "logger": _quiet_client_logger()})

    def offsets_topic(self, timeout_s: float = 10.0):
        """``__consumer_offsets``' metadata (confluent-kafka's ``TopicMetadata``), or None if absent."""
        metadata = self._admin().list_topics(OFFSETS_TOPIC, timeout=timeout_s)
        topic = metadata.topics.get(OFFSETS_TOPIC)
        return None if topic is None or topic.error is not None else topic

    def offsets_partition(self, group_id: str) -> int:
        """The ``__consumer_offsets`` partition that holds ``group_id`` (see :func:`offsets_partition`)."""
        return offsets_partition(group_id, self._offsets_partitions)

    def coordinator_leader(self, group_id: str, timeout_s: float = 30.0) -> KafkaBroker:
        """The node that coordinates ``group_id``: the leader of its ``__consumer_offsets``
        partition by the cluster's metadata. Waits up to ``timeout_s`` while the partition has no
        leader (a move in progress)."""
        partition = self.offsets_partition(group_id)
        deadline = time.monotonic() + timeout_s
        problem = "no metadata"
        while True:
            try:
                topic = self.offsets_topic(timeout_s=max(0.5, min(5.0, deadline - time.monotonic())))
                if topic is None:
                    problem = f"{OFFSETS_TOPIC} does not exist yet"
                else:
                    leader = topic.partitions[partition].leader
                    if leader >= 0:
                        return self.node(leader)
                    problem = f"{OFFSETS_TOPIC}[{partition}] has no leader"
            except KafkaException as exc:
                problem = str(exc)
            if time.monotonic() >= deadline:
                raise TimeoutError(f"no coordinator for group {group_id!r} within {timeout_s:.0f}s: {problem}")
            time.sleep(0.2)

    # -- lifecycle -------------------------------------------------------------------

    def start(self) -> KafkaCluster:
        """Launch every node, wait until each answers, all brokers are registered and
        ``__consumer_offsets`` (created here, as on a cluster in use) has a leader and every
        replica in sync on each partition. A port taken meanwhile: all again on new ports;
        any other failure: every node stopped, the error raised with the nodes' log tails."""
        with self._lock:
            if self.is_running:
                return self
            self.version, _ = resolve_version(self._wanted, Path(self._jars_dir) if self._jars_dir else None)
            for attempt in range(1, _START_ATTEMPTS + 1):
                began = time.monotonic()
                try:
                    self._nodes = self._new_nodes()
                    for node in self._nodes:
                        node.launch()
                    for node in self._nodes:
                        node.wait_ready()
                    self._wait_registered(began)
                    self._wait_offsets_topic(began)
                except BrokerStartError as exc:
                    self._stop_nodes()
                    if not port_taken(exc) or attempt == _START_ATTEMPTS:
                        raise
                    log.warning("a cluster port was taken, retrying on new ports (attempt %d)", attempt)
                    continue
                except BaseException:
                    self._stop_nodes()
                    raise
                self.ready_in_s = time.monotonic() - began
                log.info("Apache Kafka %s cluster of %d nodes up at %s in %.1fs", self.version, self._count,
                         self.bootstrap, self.ready_in_s)
                return self
            raise AssertionError("unreachable")

    def _new_nodes(self) -> list[KafkaBroker]:
        """Nodes 1..n on distinct free ports (client and controller), one cluster id and quorum."""
        ports: list[int] = []
        while len(ports) < 2 * self._count:
            port = free_port(self._host)
            if port not in ports:
                ports.append(port)
        client, controller = ports[: self._count], ports[self._count:]
        voters = ",".join(f"{i + 1}@{self._host}:{controller[i]}" for i in range(self._count))
        cluster_id = _cluster_id()
        assert self.version is not None
        return [KafkaBroker(self.version, node_id=i + 1, port=client[i], controller_port=controller[i],
                            quorum_voters=voters, cluster_id=cluster_id, properties=self._properties,
                            host=self._host, heap=self._heap, startup_timeout_s=self._startup_timeout_s,
                            jars_dir=self._jars_dir)
                for i in range(self._count)]

    def _deadline_error(self, began: float, what: str) -> BrokerStartError:
        return BrokerStartError(f"{self.NAME} {self.version}: {what} within {self._startup_timeout_s:.0f}s "
                                f"of its launch; the nodes' logs end with:\n{self.log_tail()}")

    def _check_alive(self) -> None:
        for node in self._nodes:
            if not node.is_running:
                raise BrokerStartError(f"{self.NAME} {self.version}: node {node.node_id} exited; "
                                       f"its logs end with:\n{node.log_tail()}")

    def _wait_registered(self, began: float) -> None:
        """Until the metadata lists every node as a broker (a fenced one is left out)."""
        admin = self._admin()
        while True:
            self._check_alive()
            try:
                if len(admin.list_topics(timeout=2.0).brokers) == self._count:
                    return
            except KafkaException:
                pass
            if time.monotonic() - began > self._startup_timeout_s:
                raise self._deadline_error(began, f"not all {self._count} brokers registered")
            time.sleep(0.1)

    def _wait_offsets_topic(self, began: float) -> None:
        """Ask for a coordinator (the first FindCoordinator creates ``__consumer_offsets``), then
        wait until each of its partitions has a leader and all replicas in sync."""
        admin = self._admin()
        # The answer does not matter: the FindCoordinator before it makes the broker create the
        # topic. DescribeGroups, not OffsetFetch: librdkafka's admin OffsetFetch answered with a
        # coordinator error crashed the interpreter (rd_kafka_cgrp_op on an admin client, a
        # segfault, confluent-kafka 2.x, 2026-12-04). Waited for, so no request is outstanding
        # when the client goes.
        for future in admin.describe_consumer_groups(["fencewatch-cluster-probe"], request_timeout=30).values():
            try:
                future.result(timeout=60)
            except Exception as exc:  # the topic is still being created: the wait below says
                log.debug("coordinator probe: %s", exc)
        replicas = min(self._count, 3)
        problem = "absent"
        while True:
            self._check_alive()
            problem = self._offsets_topic_problem(replicas) or ""
            if not problem:
                return
            if time.monotonic() - began > self._startup_timeout_s:
                raise self._deadline_error(began, f"{OFFSETS_TOPIC} not in sync ({problem})")
            time.sleep(0.2)

    def _offsets_topic_problem(self, replicas: int | None = None, node_id: int | None = None) -> str | None:
        """What keeps ``__consumer_offsets`` from being whole (partitions, leaders, in-sync
        replicas; with ``node_id``, that node in every ISR), or None."""
        replicas = replicas or min(self._count, 3)
        try:
            topic = self.offsets_topic(timeout_s=2.0)
        except KafkaException as exc:
            return f"metadata: {exc}"
        if topic is None:
            return "absent"
        if len(topic.partitions) != self._offsets_partitions:
            return f"{len(topic.partitions)} of {self._offsets_partitions} partitions"
        for number, partition in sorted(topic.partitions.items()):
            if partition.leader < 0:
                return f"partition {number} has no leader"
            if len(partition.isrs) < replicas:
                return f"partition {number} has {len(partition.isrs)} of {replicas} replicas in sync"
            if node_id is not None and node_id not in partition.isrs and node_id in partition.replicas:
                return f"node {node_id} not in sync on partition {number}"
        return None

    def restart(self, node: KafkaBroker | int, *, wait_in_sync: bool = True) -> RestartTiming:
        """Stop one node (SIGTERM: a controlled shutdown, its partition leaderships and the
        groups it coordinates move to the others) and start it on the same folder, ports and
        data, as a pod restart does; with ``wait_in_sync``, wait too until it is back in every
        ``__consumer_offsets`` ISR. Returns how long each part took."""
        with self._lock:
            target = self.node(node) if isinstance(node, int) else node
            if target not in self._nodes:
                raise KeyError(f"{target!r} is not a node of this cluster")
            stopped_in_s = target.restart()
            ready_in_s = target.ready_in_s or 0.0
            in_sync_in_s = None
            if wait_in_sync:
                began = time.monotonic()
                deadline = began + self._startup_timeout_s
                while (problem := self._offsets_topic_problem(node_id=target.node_id)) is not None:
                    if time.monotonic() >= deadline:
                        raise TimeoutError(f"node {target.node_id} restarted but not back in sync within "
                                           f"{self._startup_timeout_s:.0f}s: {problem}")
                    time.sleep(0.2)
                in_sync_in_s = ready_in_s + time.monotonic() - began
            timing = RestartTiming(target.node_id, stopped_in_s, ready_in_s, in_sync_in_s)
            log.info("node %d restarted: stopped in %.1fs, answered in %.1fs%s", target.node_id, stopped_in_s,
                     ready_in_s, "" if in_sync_in_s is None else f", in sync in {in_sync_in_s:.1f}s")
            return timing

    def stop(self) -> None:
        """Stop every node at once, SIGKILL after STOP_GRACE_S (a controlled shutdown of each in
        turn would end on a node without a quorum), and remove their folders. Safe to call twice."""
        with self._lock:
            self._stop_nodes()

    def _stop_nodes(self) -> None:
        nodes, self._nodes = self._nodes, []
        for node in nodes:
            # The last node's controlled shutdown waits on a quorum that is stopping too (it hung
            # the whole 20 s grace one stop in two); the data goes with the folder anyway.
            node.STOP_GRACE_S = STOP_GRACE_S
        stoppers = [threading.Thread(target=node.stop, name=f"stop-node-{node.node_id}") for node in nodes]
        for thread in stoppers:
            thread.start()
        for thread in stoppers:
            thread.join()
        # A node whose thread failed (it never does: stop() suppresses) is stopped here again.
        for node in nodes:
            if node.is_running:
                node.stop()

    def __enter__(self) -> KafkaCluster:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = f"running at {self.bootstrap}" if self.is_running else "stopped"
        return f"KafkaCluster({self.version or self._wanted}, {self._count} nodes, {state})"

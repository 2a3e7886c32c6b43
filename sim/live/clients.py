"""Real Kafka clients for the scenarios: confluent-kafka (librdkafka) consumers, producers and
the admin client, and a consumer in a child process that can be stopped like a long GC pause.

What lives here: client factories with the settings every scenario shares, the waits
scenarios need (an assignment reached, messages consumed), group configuration (KIP-848
group configs: a short session timeout per group), and :class:`StalledConsumer`.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import signal
import struct
import time
from typing import Any, Callable

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic, ResourceType

from .wire import uuid_to_kafka

__all__ = ["Clients", "StalledConsumer", "wait_for", "assigned", "error_name", "consume_some"]

log = logging.getLogger(__name__)


def error_name(exc: BaseException | None) -> str:
    """A librdkafka error as Kafka's error name (``NONE`` for success)."""
    if exc is None:
        return "NONE"
    err = exc.args[0] if isinstance(exc, KafkaException) and exc.args else exc
    name = getattr(err, "name", None)
    return name() if callable(name) else str(err)


def wait_for(check: Callable[[], bool], timeout_s: float, what: str, step: Callable[[], Any] | None = None) -> None:
    """Call ``step`` (e.g. a consumer's poll) until ``check()`` holds; TimeoutError names ``what``."""
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout_s:.0f} s waiting for {what}")
        if step is not None:
            step()
        else:
            time.sleep(0.05)


def assigned(consumer: Consumer) -> set[tuple[str, int]]:
    return {(tp.topic, tp.partition) for tp in consumer.assignment()}


def consume_some(consumer: Consumer, n: int, timeout_s: float) -> list:
    """Poll until ``n`` messages were read (or the time is up); the messages."""
    out: list = []
    deadline = time.monotonic() + timeout_s
    while len(out) < n and time.monotonic() < deadline:
        m = consumer.poll(0.1)
        if m is not None and not m.error():
            out.append(m)
    return out



def take_over(clients: "Clients", group: str, topic: str, partition: int, offset: int,
              protocol: str = "consumer", **conf: Any) -> tuple[Any, str]:
    """An heir joins ``group``, waits to hold both partitions of ``topic`` and commits ``offset``
    on ``partition`` synchronously: (the heir, the answer's error name, NONE when accepted)."""
    heir = clients.consumer(group, f"{group}-heir", protocol, **conf)
    heir.subscribe([topic])
    wait_for(lambda: len(assigned(heir)) == 2, 60, "the heir holding both partitions", lambda: heir.poll(0.1))
    try:
        heir.commit(offsets=[TopicPartition(topic, partition, offset)], asynchronous=False)
        return heir, "NONE"
    except KafkaException as exc:
        return heir, error_name(exc)

class Clients:
    """Client factories bound to one cluster; ``extra`` librdkafka settings go to every client
    (SASL/SSL pass-through)."""

    def __init__(self, bootstrap: str, extra: dict[str, Any] | None = None) -> None:
        self.bootstrap = bootstrap
        self.extra = dict(extra or {})
        self.admin = AdminClient(self._conf({}))

    def _conf(self, conf: dict[str, Any]) -> dict[str, Any]:
        return {"bootstrap.servers": self.bootstrap, **self.extra, **conf}

    def consumer(self, group_id: str, client_id: str, protocol: str = "consumer", **conf: Any) -> Consumer:
        """A consumer committing by hand. Classic members get a 6 s session (the broker's
        default minimum) and ``assignor`` picks eager (``range``) or ``cooperative-sticky``."""
        base: dict[str, Any] = {"group.id": group_id, "client.id": client_id, "group.protocol": protocol,
                                "enable.auto.commit": False, "auto.offset.reset": "earliest",
                                "enable.auto.offset.store": True}
        if protocol == "classic":
            base |= {"session.timeout.ms": 6000, "heartbeat.interval.ms": 1000,
                     "partition.assignment.strategy": conf.pop("assignor", "range")}
        return Consumer(self._conf(base | conf))

    def producer(self, client_id: str, **conf: Any) -> Producer:
        return Producer(self._conf({"client.id": client_id, "linger.ms": 5} | conf))

    def transactional_producer(self, transactional_id: str, client_id: str) -> Producer:
        p = self.producer(client_id, **{"transactional.id": transactional_id, "transaction.timeout.ms": 60000})
        p.init_transactions(30)
        return p

    def create_topic(self, name: str, partitions: int) -> str:
        """Create the topic and give its id once metadata has it. The id is the one read here: on a
        cluster a second describe may reach a node whose metadata is behind and find none (the
        bar run of 2026-12-04 lost four topics' ids so, and their commits counted as missing)."""
        futures = self.admin.create_topics([NewTopic(name, partitions, 1)], operation_timeout=30)
        futures[name].result()
        found: list[str] = []

        def known() -> bool:
            topic_id = self.topic_id(name)
            if topic_id is not None:
                found.append(topic_id)
            return bool(found)

        wait_for(known, 20, f"topic {name} in metadata")
        return found[0]

    def topic_id(self, name: str) -> str | None:
        """The topic's id in Kafka's text form (22 characters base64url), or None."""
        from confluent_kafka import TopicCollection

        try:
            desc = self.admin.describe_topics(TopicCollection([name]), request_timeout=10)[name].result()
        except KafkaException:
            return None
        if desc.topic_id is None:
            return None
        # str() of confluent-kafka's Uuid is standard base64 ('+', '/'); Kafka writes base64url
        raw = struct.pack(">qq", desc.topic_id.get_most_significant_bits(), desc.topic_id.get_least_significant_bits())
        return uuid_to_kafka(raw)

    def produce(self, topic: str, count: int, partitions: int, prefix: str = "m") -> None:
        p = self.producer(f"{topic}-loader")
        for i in range(count):
            p.produce(topic, f"{prefix}-{i}".encode(), partition=i % partitions)
            if i % 10_000 == 9_999:
                p.poll(0)
        p.flush(30)

    def set_group_config(self, group_id: str, settings: dict[str, str]) -> bool:
        """KIP-848 group configs (e.g. ``consumer.session.timeout.ms``); False when the broker
        refuses them (older broker, value beyond its limits): the group keeps the defaults."""
        entries = [ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in settings.items()]
        res = ConfigResource(ResourceType.GROUP, group_id, incremental_configs=entries)
        try:
            self.admin.incremental_alter_configs([res])[res].result(30)
        except KafkaException as exc:
            log.warning("[group=%s] group config %s refused: %s", group_id, settings, exc)
            return False
        return True


def _stalled_main(conn: Any, bootstrap: str, extra: dict[str, Any], group_id: str, client_id: str, protocol: str,
                  topic: str, assignor: str | None) -> None:
    """The child: join, consume, commit, report; stop itself (SIGSTOP) right before the next
    commit, so that when it is continued that commit goes out with what it knew before."""
    clients = Clients(bootstrap, extra)
    conf = {"assignor": assignor} if assignor else {}
    c = clients.consumer(group_id, client_id, protocol, **conf)
    c.subscribe([topic])
    try:
        msgs = consume_some(c, 5, 30)
        if not msgs:
            conn.send(("error", "nothing consumed"))
            return
        last = msgs[-1]
        c.commit(offsets=[TopicPartition(topic, last.partition(), last.offset() + 1)], asynchronous=False)
        conn.send(("stalling", c.memberid(), sorted(assigned(c)), last.partition(), last.offset() + 1))
        command = conn.recv()  # ("commit", partition, offset, metadata)
        os.kill(os.getpid(), signal.SIGSTOP)  # the pause; the parent continues us
        _, partition, offset, metadata = command
        try:
            c.commit(offsets=[TopicPartition(topic, partition, offset, metadata=metadata)], asynchronous=False)
            conn.send(("committed", "NONE"))
        except KafkaException as exc:
            conn.send(("committed", error_name(exc)))
    finally:
        c.close()


class StalledConsumer:
    """A consumer in a child process (spawned: librdkafka's threads are not fork-safe) that
    stops itself before a commit and is continued by the parent: a member whose heartbeats
    stop past the session timeout, as under a long GC pause, and which then commits."""

    def __init__(self, clients: Clients, group_id: str, client_id: str, protocol: str, topic: str,
                 assignor: str | None = None) -> None:
        ctx = multiprocessing.get_context("spawn")
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=_stalled_main, name=f"stalled-{client_id}", daemon=True,
                                args=(child, clients.bootstrap, clients.extra, group_id, client_id, protocol, topic,
                                      assignor))
        self.proc.start()
        self.member_id = ""
        self.partitions: list[tuple[str, int]] = []
        self.last_committed: tuple[int, int] = (-1, -1)

    def joined(self, timeout_s: float = 60) -> None:
        """Wait until the child has joined, consumed and committed once."""
        if not self.conn.poll(timeout_s):
            raise TimeoutError("the stalled consumer did not join")
        msg = self.conn.recv()
        if msg[0] != "stalling":
            raise RuntimeError(f"the stalled consumer failed: {msg}")
        _, self.member_id, parts, partition, offset = msg
        self.partitions = [tuple(p) for p in parts]
        self.last_committed = (partition, offset)

    def stall(self, partition: int, offset: int, metadata: str, timeout_s: float = 10) -> None:
        """Tell the child its next commit, then wait until it has stopped itself."""
        self.conn.send(("commit", partition, offset, metadata))
        wait_for(self._stopped, timeout_s, "the consumer to stop")

    def resume(self, timeout_s: float = 60) -> str:
        """Continue the child; the answer its commit got, as an error name."""
        os.kill(self.proc.pid, signal.SIGCONT)
        if not self.conn.poll(timeout_s):
            raise TimeoutError("the resumed consumer did not report its commit")
        return self.conn.recv()[1]

    def _stopped(self) -> bool:
        try:
            with open(f"/proc/{self.proc.pid}/stat", encoding="ascii") as f:
                return f.read().rsplit(")", 1)[1].split()[0] == "T"
        except OSError:
            return False

    def close(self) -> None:
        if self.proc.is_alive():
            try:
                os.kill(self.proc.pid, signal.SIGCONT)
            except ProcessLookupError:
                pass
            self.proc.join(30)
            if self.proc.is_alive():
                self.proc.kill()
                self.proc.join(5)
        self.conn.close()

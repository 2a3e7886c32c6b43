"""What every scenario gets: the clients, unique names, the expectation list, counters, and
:class:`Worker`, a consumer thread that consumes and commits by hand until told to leave.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import KafkaException

from .clients import Clients, assigned, error_name
from .expect import Expectation

__all__ = ["Context", "Worker", "client_saw", "OFFSET_COMMIT", "TXN_OFFSET_COMMIT", "HEARTBEAT", "ADD_OFFSETS_TO_TXN"]

log = logging.getLogger(__name__)

OFFSET_COMMIT, ADD_OFFSETS_TO_TXN, TXN_OFFSET_COMMIT, HEARTBEAT = 8, 25, 28, 68


@dataclass
class Context:
    """One run's shared state. ``short``: the quick variant for tests (fewer messages and
    commits, same cases)."""
    clients: Clients
    run_id: str
    seed: int = 0
    short: bool = False
    expectations: list[Expectation] = field(default_factory=list)
    counts: Counter = field(default_factory=Counter)
    topics: dict[str, str] = field(default_factory=dict)  # topic id -> name, of topics made here
    stop: threading.Event = field(default_factory=threading.Event)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def bootstrap(self) -> str:
        return self.clients.bootstrap

    def name(self, scenario: str, what: str) -> str:
        return f"fw-{self.run_id}-{scenario}-{what}"

    def rng(self, scenario: str) -> random.Random:
        return random.Random(f"{self.seed}/{scenario}")

    def topic(self, scenario: str, what: str, partitions: int, messages: int = 0) -> str:
        name = self.name(scenario, what)
        topic_id = self.clients.create_topic(name, partitions)
        with self._lock:
            self.topics[topic_id] = name
        if messages:
            self.clients.produce(name, messages, partitions)
        return name

    def expect(self, scenario: str, case: str, api: int, group_id: str | None, answers: dict[str, list[str]],
               **kw: Any) -> Expectation:
        e = Expectation(scenario, case, api, group_id, answers, **kw)
        with self._lock:
            self.expectations.append(e)
        log.info("[%s] expects %s: %s", scenario, case, answers)
        return e

    def count(self, key: str, n: int = 1) -> None:
        with self._lock:
            self.counts[key] += n

    def short_session(self, group_id: str, session_ms: int = 2000, heartbeat_ms: int = 500) -> None:
        """A consumer group with a short session (KIP-848 group config); the broker must allow
        it (``group.consumer.min.session.timeout.ms``)."""
        if not self.clients.set_group_config(group_id, {"consumer.session.timeout.ms": str(session_ms),
                                                        "consumer.heartbeat.interval.ms": str(heartbeat_ms)}):
            raise RuntimeError(f"the broker refused a {session_ms} ms session for {group_id}: lower "
                               "group.consumer.min.session.timeout.ms (and ...min.heartbeat.interval.ms)")


class Worker(threading.Thread):
    """One member: subscribes, consumes, commits every ``commit_every`` messages (with ``batch``:
    every ``commit_every`` batches of up to ``batch`` messages, so one commit covers many partitions;
    synchronously
    with probability ``sync_share``, else asynchronously, with at most ``max_in_flight`` asynchronous
    ones unanswered), until :meth:`leave`. Sync commits'
    answers are kept (``seen``: (partition, offset, error name)) for ``client_saw``
    expectations; every commit counts in the context (``commits``, ``commit_errors.*``)."""

    def __init__(self, ctx: Context, group_id: str, client_id: str, topics: list[str], *, protocol: str = "consumer",
                 commit_every: int = 3, sync_share: float = 0.3, rng: random.Random | None = None,
                 max_commits: int | None = None, pace_s: float = 0.0, record_seen: bool = True, batch: int = 0,
                 max_in_flight: int | None = None, **conf: Any) -> None:
        super().__init__(name=client_id, daemon=True)
        self.ctx, self.group_id, self.client_id, self.topics = ctx, group_id, client_id, topics
        self.protocol, self.commit_every, self.sync_share = protocol, commit_every, sync_share
        self.rng = rng or random.Random(client_id)
        self.max_commits, self.pace_s, self.conf, self.batch = max_commits, pace_s, conf, batch
        # librdkafka sends a coordinator's requests in order: a queue of unanswered commits holds
        # the member's heartbeats back, and on a loaded host its reassignment then never completes.
        self.max_in_flight, self._in_flight = max_in_flight, 0
        self.member_id = ""
        self.partitions: set[tuple[str, int]] = set()
        self.seen: list[tuple[str, int, int, str]] = []
        self.record_seen = record_seen
        self.commits = 0  # commits made
        self.answered = 0  # commits the broker answered (sync returns, async callbacks)
        self.error: BaseException | None = None
        self._leave = threading.Event()
        self.joined = threading.Event()

    def leave(self, timeout_s: float = 30.0) -> None:
        self._leave.set()
        self.join(timeout_s)

    def _on_commit(self, err: Any, partitions: Any) -> None:
        self._in_flight = max(0, self._in_flight - 1)
        if err is not None and err.name().startswith("_"):  # a local error: no request went out
            self.ctx.count(f"commit_local.{err.name()}")
            return
        self.answered += 1
        self.ctx.count("commits")
        if err is not None:
            self.ctx.count(f"commit_errors.{err.name()}")

    def run(self) -> None:
        try:
            self._run()
        except BaseException as exc:  # reported by the scenario that started us
            self.error = exc
            log.exception("[group=%s member=%s] worker failed", self.group_id, self.client_id)

    def _run(self) -> None:
        c = self.ctx.clients.consumer(self.group_id, self.client_id, self.protocol,
                                      on_commit=self._on_commit, **self.conf)
        c.subscribe(self.topics)
        n = 0
        try:
            while not self._leave.is_set() and not self.ctx.stop.is_set():
                if self.max_commits is not None and self.commits >= self.max_commits:
                    c.poll(0.1)
                    continue
                if self.batch:  # up to ``batch`` messages of many partitions, one commit for them all
                    got = [m for m in c.consume(self.batch, 0.1) if not m.error()]
                else:
                    m = c.poll(0.1)
                    got = [] if m is None or m.error() else [m]
                self.partitions = assigned(c)
                if self.partitions and not self.joined.is_set():
                    self.member_id = c.memberid() or ""
                    self.joined.set()
                if not got:
                    continue
                n += 1
                if n % self.commit_every == 0:
                    self._commit(c)
                    if self.pace_s:
                        time.sleep(self.pace_s)
            self.member_id = c.memberid() or self.member_id
        finally:
            c.close()

    def mark(self) -> int:
        """The number of sync-commit answers so far, to take the later ones with ``seen[mark:]``."""
        return len(self.seen)

    def _commit(self, c: Any) -> None:
        """Asynchronous: positions of every partition (librdkafka's ``commit()``); synchronous:
        the same offsets given explicitly, so the answer can be matched to its request line."""
        if self.rng.random() >= self.sync_share:
            if self.max_in_flight is not None and self._in_flight >= self.max_in_flight:
                return  # the next message tries again
            self.commits += 1
            try:
                c.commit(asynchronous=True)
                self._in_flight += 1
            except KafkaException as exc:  # a local refusal (nothing to commit): no request
                self.ctx.count(f"commit_local.{error_name(exc)}")
            return
        self.commits += 1
        offsets = [tp for tp in c.position(list(c.assignment())) if tp.offset >= 0]
        if not offsets:
            return
        try:
            c.commit(offsets=offsets, asynchronous=False)
            name = "NONE"
        except KafkaException as exc:
            name = error_name(exc)
        if self.record_seen:
            self.seen.append((offsets[0].topic, offsets[0].partition, offsets[0].offset, name))
        if not name.startswith("_"):
            self.answered += 1
            self.ctx.count("commits")
            self.ctx.count("sync_commits")
            if name != "NONE":
                self.ctx.count(f"commit_errors.{name}")


def client_saw(ctx: Context, scenario: str, worker: Worker, entries: list[tuple[str, int, int, str]],
               *, predicted: str | None = None, fencewatch_class: str | None = None, limit: int = 8) -> None:
    """Expectations from what librdkafka reported for sync commits: the broker's last line
    for that commit answered the same (``case`` ``client_saw``); with ``predicted``, the
    answer the scenario predicted instead (``stable_commit``)."""
    for topic, partition, offset, name in entries[:limit]:
        if name.startswith("_"):  # a local error: no request was sent
            continue
        answers = {"any": [predicted]} if predicted else {"any": [name]}
        ctx.expect(scenario, "stable_commit" if predicted else "client_saw", OFFSET_COMMIT, worker.group_id, answers,
                   match={"request": {"memberId": worker.member_id}, "partition": [topic, partition, offset]},
                   fencewatch_class=fencewatch_class, count="last",
                   note=f"{worker.client_id}: librdkafka reported {name}")

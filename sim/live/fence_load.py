"""The fence-heavy load (``--load fences``): organic traffic in which the broker rejects commits
by the thousand, as it does on a cluster whose consumers pause, scale and get replaced.

Where :mod:`.load` keeps its members healthy (a few rejections per run, from races alone), this
load makes the things that fence commits happen over and over, in the load's own groups
(``fw-<run>-load-g<n>``: organic traffic to the fidelity harness), each member holding 10 to 50
partitions so that one rejected commit is many rejected partitions:

- **stallers**: KIP-848 members (``group.protocol=consumer``, a 2 s session set per group) in
  child processes that stop themselves (SIGSTOP, a long GC pause) right before a commit; the
  parent continues them after the session timeout and the commit goes out at the old epoch
  (UNKNOWN_MEMBER_ID; STALE_MEMBER_EPOCH when it races the rejoin). They rejoin and stall again.
- **auto-commit** members (``enable.auto.commit``, ``auto.commit.interval.ms`` 200) in child
  processes stopped from outside at any moment: on resume the overdue auto commit races the
  overdue heartbeat.
- **static** members (``group.instance.id``): the instance is stopped past its session, a new
  instance with the same id starts while the old process is still alive (stopped); once the new
  one holds partitions the old one is continued, commits at its old epoch and exits. The new one
  is the next to be replaced.
- **scaling**: a KIP-848 group of two steady members to which bursts of members are added and
  removed within seconds while every member commits after each message or two (sync and async):
  commits in flight across epoch bumps.
- **classic** groups, eager (``range``) and ``cooperative-sticky``, with joiners coming and going
  and a member stopped past its (2 s) session that then commits at its old generation.

A producer keeps every topic supplied (messages round-robin over the partitions), so members
always have something to commit. :func:`plan` is the whole layout, without a broker.
"""

from __future__ import annotations

import hashlib
import logging
import multiprocessing
import os
import queue
import random
import shutil
import signal
import subprocess
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from .context import Context, Worker

__all__ = ["FenceLoad", "GroupPlan", "plan"]

log = logging.getLogger(__name__)

#: KIP-848 groups of this load get this session (``consumer.session.timeout.ms``; the broker's
#: ``group.consumer.min.session.timeout.ms`` must allow it) and heartbeat interval.
SESSION_MS, HEARTBEAT_MS = 2000, 500
#: Classic members' own session (``session.timeout.ms``; ``group.min.session.timeout.ms``).
CLASSIC_SESSION_MS = 2000
#: A stall lasts this long: past the session timeout, with room for a loaded host.
STALL_S = 4.0
#: A member's pause after each commit it makes by hand (the commits spread over the stalls;
#: the scaling group's members commit faster, to have commits in flight across its bursts).
PACE_S, SCALING_PACE_S = 0.4, 0.1
#: A member reads up to this many messages (of all its partitions) per commit.
BATCH = 500
#: A stopped static instance's replacement starts this long after it stopped (past its session).
REPLACE_AFTER_S = SESSION_MS / 1000 + 1.0
#: Produced per second over all topics (round-robin over each topic's partitions): little, so
#: that an async commit (the partitions that moved) is small and a sync or stalled one (every
#: partition's position) is large.
PRODUCE_RATE = 400


@dataclass(frozen=True)
class GroupPlan:
    """One group of the load: its role (``staller``, ``auto``, ``static``, ``scaling``,
    ``classic-eager``, ``classic-coop``), protocol, partitions, and its members: steady ones
    (threads), stalled or replaced ones (child processes), and how many join in a burst."""

    index: int
    role: str
    protocol: str
    partitions: int
    threads: int = 0
    children: int = 0
    burst: int = 0
    conf: dict[str, Any] = field(default_factory=dict)
    java: bool = False  # the children are Java KafkaConsumers (kafka-clients), not librdkafka

    @property
    def members(self) -> int:
        return self.threads + self.children

    def per_member(self) -> tuple[int, int]:
        """Fewest and most partitions a member holds: the group at rest, and with a burst in."""
        return self.partitions // (self.members + self.burst), -(-self.partitions // max(1, self.threads or self.members))


def plan() -> list[GroupPlan]:
    """The layout: every member holds 10 to 50 partitions (``per_member``)."""
    classic = {"session.timeout.ms": CLASSIC_SESSION_MS, "heartbeat.interval.ms": 500}
    return [
        GroupPlan(0, "staller", "consumer", 48, threads=1, children=2),
        GroupPlan(1, "staller", "consumer", 48, threads=1, children=2),
        GroupPlan(2, "auto", "consumer", 40, threads=1, children=1,
                  conf={"enable.auto.commit": True, "auto.commit.interval.ms": 200}),
        GroupPlan(3, "static", "consumer", 40, threads=1, children=1),
        GroupPlan(4, "scaling", "consumer", 80, threads=2, burst=2),
        GroupPlan(5, "classic-eager", "classic", 40, threads=1, children=1, burst=1,
                  conf={"assignor": "range", **classic}),
        GroupPlan(6, "classic-coop", "classic", 40, threads=1, children=1, burst=1,
                  conf={"assignor": "cooperative-sticky", **classic}),
        # Apache Kafka's own Java consumer (java/FenceConsumer.java), stopped from outside
        GroupPlan(7, "java", "consumer", 40, threads=1, children=2, java=True),
        GroupPlan(8, "java-classic", "classic", 40, threads=1, children=1, burst=1, java=True,
                  conf={"assignor": "cooperative-sticky", **classic}),
    ]


# --------------------------------------------------------------------------- the child members

@dataclass(frozen=True)
class ChildSpec:
    group_id: str
    client_id: str
    protocol: str
    topic: str
    conf: dict[str, Any]
    auto: bool  # auto-commit: stopped from outside; else it stops itself before a commit
    once: bool  # a replaced static instance: after its stalled commit it exits
    seed: str


def _child_main(spec: ChildSpec, bootstrap: str, extra: dict[str, Any], stall: Any, out: Any) -> None:
    """A member in its own process: consume, commit (by hand: after every batch read, one in four
    synchronously with every partition's position, the others librdkafka's own; or by auto commit); when ``stall`` is set, take the
    positions of every assigned partition, stop (SIGSTOP) and, once continued, commit them at
    the epoch it held. Answers go to ``out`` as Counter deltas."""
    from confluent_kafka import KafkaException

    from .clients import Clients, error_name

    rng = random.Random(spec.seed)
    counts: Counter = Counter()
    lock = threading.Lock()

    def on_commit(err: Any, partitions: Any) -> None:
        name = "NONE" if err is None else err.name()
        with lock:
            counts["local." + name if name.startswith("_") else name] += 1

    def flush() -> None:
        with lock:
            if counts:
                out.put((spec.client_id, dict(counts)))
                counts.clear()

    def commit(c: Any, offsets: list | None, sync: bool) -> None:
        try:
            if offsets is None:  # librdkafka's own: the stored positions of every partition
                c.commit(asynchronous=True)
            elif offsets:
                c.commit(offsets=offsets, asynchronous=not sync)
            else:
                return
            if sync:
                on_commit(None, offsets)
        except KafkaException as exc:
            name = error_name(exc)
            with lock:
                counts["local." + name if name.startswith("_") else name] += 1

    c = Clients(bootstrap, extra).consumer(spec.group_id, spec.client_id, spec.protocol, on_commit=on_commit,
                                           **dict(spec.conf))
    c.subscribe([spec.topic])
    last_flush, joined = time.monotonic(), False
    try:
        while True:
            got = [m for m in c.consume(BATCH, 0.1) if not m.error()]
            if not joined and c.assignment():
                joined = True
                out.put((spec.client_id, {"joined": 1}))
            if time.monotonic() - last_flush > 1.0:
                flush()
                last_flush = time.monotonic()
            if stall.is_set() and not spec.auto:
                offsets = [tp for tp in c.position(list(c.assignment())) if tp.offset >= 0]
                if offsets:
                    stall.clear()
                    flush()
                    os.kill(os.getpid(), signal.SIGSTOP)  # the pause: the parent continues us
                    commit(c, offsets, sync=spec.once or rng.random() < 0.5)
                    if spec.once:  # replaced: the new instance owns the id now
                        flush()
                        out.put((spec.client_id, {"exited": 1}))
                        out.close()
                        out.join_thread()  # put() hands over to a feeder thread: let it write
                        os._exit(0)
                    continue
            if not got or spec.auto:
                continue
            sync = rng.random() < 0.25
            commit(c, [tp for tp in c.position(list(c.assignment())) if tp.offset >= 0] if sync else None, sync)
            time.sleep(PACE_S)
    finally:
        flush()
        c.close()


class Child:
    """The parent's handle on a child member: start it, stall it, continue it, stop it."""

    def __init__(self, spec: ChildSpec, bootstrap: str, extra: dict[str, Any]) -> None:
        mp = multiprocessing.get_context("spawn")
        self.spec = spec
        self.stall_event = mp.Event()
        # its own queue: a child stopped while writing to a shared one would hold the others up
        self.out = mp.Queue()
        self.proc = mp.Process(target=_child_main, name=spec.client_id, daemon=True,
                               args=(spec, bootstrap, extra, self.stall_event, self.out))
        self.proc.start()
        self.joined = False
        self.exited = False
        self.stopped_at: float | None = None
        self.stalls = 0

    def stopped(self) -> bool:
        try:
            with open(f"/proc/{self.proc.pid}/stat", encoding="ascii") as f:
                return f.read().rsplit(")", 1)[1].split()[0] == "T"
        except OSError:
            return False

    def stall(self) -> None:
        """Ask a hand-committing child to stop before its next commit; stop an auto-commit one now."""
        self.stalls += 1
        if self.spec.auto:
            os.kill(self.proc.pid, signal.SIGSTOP)
        else:
            self.stall_event.set()

    def resume(self) -> None:
        self.stopped_at = None
        try:
            os.kill(self.proc.pid, signal.SIGCONT)
        except ProcessLookupError:
            pass

    def close(self) -> None:
        if self.proc.is_alive():
            self.resume()
            self.proc.terminate()  # SIGTERM: Python dies without closing the consumer; fine at the end
            self.proc.join(10)
            if self.proc.is_alive():
                self.proc.kill()
                self.proc.join(5)


# --------------------------------------------------------------------------- Java members

JAVA_SOURCE = Path(__file__).with_name("java") / "FenceConsumer.java"


def java_classpath() -> str | None:
    """The Java member's classpath: ``FenceConsumer`` compiled (once per source, with ``javac``)
    against the kafka-clients jar of the newest Kafka folder of the jars cache (``make jars``;
    ``FENCEWATCH_JARS_DIR`` moves it), and that folder's jars. None (and a warning) without a
    JDK or the jars: the Java groups are left out."""
    jars = Path(os.environ.get("FENCEWATCH_JARS_DIR", Path.home() / ".cache" / "fencewatch" / "jars"))

    def version(d: Path) -> tuple[int, ...]:
        return tuple(int(x) for x in d.name.split("-", 1)[1].split(".") if x.isdigit())

    folders = sorted((d for d in jars.glob("kafka-[0-9]*") if list(d.glob("kafka-clients-*.jar"))), key=version)
    if not folders or not shutil.which("javac") or not shutil.which("java"):
        log.warning("fence load: no JDK or no Kafka jars in %s: the Java members are left out", jars)
        return None
    clients = next(folders[-1].glob("kafka-clients-*.jar"))
    digest = hashlib.sha256(JAVA_SOURCE.read_bytes() + clients.name.encode()).hexdigest()[:16]
    classes = jars / f"fence-consumer-{digest}"
    if not (classes / "FenceConsumer.class").exists():
        part = Path(f"{classes}.part{os.getpid()}")
        shutil.rmtree(part, ignore_errors=True)
        part.mkdir(parents=True)
        subprocess.run(["javac", "-cp", str(clients), "-d", str(part), str(JAVA_SOURCE)], check=True,
                       capture_output=True, text=True)
        try:
            part.rename(classes)
        except OSError:  # another run compiled it meanwhile
            shutil.rmtree(part, ignore_errors=True)
    return f"{classes}{os.pathsep}{folders[-1]}/*"


class JavaChild:
    """A Java KafkaConsumer member in its own JVM, with :class:`Child`'s surface; stopped from
    outside (SIGSTOP at any moment), its answers read from its stdout."""

    def __init__(self, spec: "ChildSpec", bootstrap: str, classpath: str) -> None:
        self.spec = spec
        self.stall_event = threading.Event()  # never set: a JVM is stopped from outside
        self.out: queue.Queue = queue.Queue()
        assignor = {"range": "range", "cooperative-sticky": "cooperative"}.get(spec.conf.get("assignor", ""), "-")
        seed = int(hashlib.sha256(spec.seed.encode()).hexdigest()[:8], 16)
        self.proc = subprocess.Popen(
            ["java", "-Xmx128m", "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC", "-cp", classpath, "FenceConsumer",
             bootstrap, spec.group_id, spec.client_id, spec.topic, spec.protocol, assignor,
             spec.conf.get("group.instance.id", "-"), str(seed)],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, start_new_session=True)
        threading.Thread(target=self._read, name=f"read-{spec.client_id}", daemon=True).start()
        self.joined = False
        self.exited = False
        self.stopped_at: float | None = None
        self.stalls = 0

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            what, _, name = line.strip().partition(" ")
            if what == "joined":
                self.out.put((self.spec.client_id, {"joined": 1}))
            elif what == "commit" and name:
                self.out.put((self.spec.client_id, {("local." + name) if name.startswith("_") else name: 1}))

    def stopped(self) -> bool:
        try:
            with open(f"/proc/{self.proc.pid}/stat", encoding="ascii") as f:
                return f.read().rsplit(")", 1)[1].split()[0] == "T"
        except OSError:
            return False

    def stall(self) -> None:
        self.stalls += 1
        os.kill(self.proc.pid, signal.SIGSTOP)

    def resume(self) -> None:
        self.stopped_at = None
        try:
            os.kill(self.proc.pid, signal.SIGCONT)
        except ProcessLookupError:
            pass

    def close(self) -> None:
        if self.proc.poll() is None:
            self.resume()
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)


# --------------------------------------------------------------------------- the load

class FenceLoad:
    """Runs :func:`plan` against the context's cluster until ``commits`` commits were answered
    (threads and children together), ``stalls`` stalls were over (default: one per 50 commits;
    the stalls make the fences, the commits alone would end a run before the first) and the
    scenarios beside it ended."""

    def __init__(self, ctx: Context, *, commits: int, stalls: int | None = None, burst_s: float = 3.0,
                 stall_every_s: float = 4.0) -> None:
        self.ctx, self.commits = ctx, commits
        self.stalls = commits // 50 if stalls is None else stalls
        self.stalls_done = 0
        self.burst_s, self.stall_every_s = burst_s, stall_every_s
        self.rng = ctx.rng("fence-load")
        self.plan = plan()
        self.workers: dict[int, list[Worker]] = {}
        self.bursts: dict[int, list[Worker]] = {}
        self.retired: list[Worker] = []
        self.children: dict[int, list[Child]] = {}
        self.replacing: dict[str, Child] = {}  # old static instance's client id -> its replacement
        self.topics: dict[int, str] = {}
        self.groups: dict[int, str] = {}
        self.reaped: list[Child | JavaChild] = []
        self.classpath: str | None = None
        self.child_counts: Counter = Counter()
        self.joins = 0
        self._producing = threading.Event()

    # counts -----------------------------------------------------------------
    @property
    def committed(self) -> int:
        threads = sum(w.answered for ws in (*self.workers.values(), *self.bursts.values()) for w in ws)
        threads += sum(w.answered for w in self.retired)
        children = sum(v for k, v in self.child_counts.items() if not k.startswith(("local.", "joined", "exited")))
        return threads + children

    def _drain(self) -> None:
        for ch in self._all_children() + self.reaped:
            self._drain_child(ch)

    def _drain_child(self, ch: Child) -> None:
        while True:
            try:
                _, delta = ch.out.get_nowait()
            except (queue.Empty, OSError, ValueError):
                return
            for k, v in delta.items():
                if k == "joined":
                    ch.joined = True
                elif k == "exited":
                    ch.exited = True
                else:
                    self.child_counts[k] += v
                    if not k.startswith("local."):
                        self.ctx.count("commits", v)
                        if k != "NONE":
                            self.ctx.count(f"commit_errors.{k}", v)
                    else:
                        self.ctx.count(f"commit_local.{k[6:]}", v)

    def _all_children(self) -> list[Child]:
        return [c for cs in self.children.values() for c in cs] + list(self.replacing.values())

    # setup ------------------------------------------------------------------
    def _thread(self, gp: GroupPlan, tag: str) -> Worker:
        self.joins += 1
        group = self.groups[gp.index]
        conf = dict(gp.conf)
        scaling = gp.role == "scaling"
        w = Worker(self.ctx, group, f"{group}-{tag}{self.joins}", [self.topics[gp.index]], protocol=gp.protocol,
                   commit_every=10**9 if conf.get("enable.auto.commit") else 1, batch=BATCH, sync_share=0.25,
                   rng=self.rng, record_seen=False, pace_s=SCALING_PACE_S if scaling else PACE_S, **conf)
        w.start()
        return w

    def _child(self, gp: GroupPlan, instance: str | None = None) -> Child | JavaChild:
        self.joins += 1
        group = self.groups[gp.index]
        conf = dict(gp.conf)
        if instance:
            conf["group.instance.id"] = instance
        spec = ChildSpec(group, f"{group}-{'j' if gp.java else 'p'}{self.joins}", gp.protocol, self.topics[gp.index],
                         conf, auto=gp.java or bool(conf.get("enable.auto.commit")), once=instance is not None,
                         seed=f"{self.ctx.seed}/{group}/{self.joins}")
        if gp.java:
            assert self.classpath is not None
            return JavaChild(spec, self.ctx.bootstrap, self.classpath)
        return Child(spec, self.ctx.bootstrap, self.ctx.clients.extra)

    def setup(self) -> None:
        if any(gp.java for gp in self.plan):
            self.classpath = java_classpath()
            if self.classpath is None:
                self.plan = [gp for gp in self.plan if not gp.java]
        for gp in self.plan:
            group = self.ctx.name("load", f"g{gp.index}")
            self.groups[gp.index] = group
            self.topics[gp.index] = self.ctx.topic("load", f"in{gp.index}", gp.partitions, messages=gp.partitions * 20)
            if gp.protocol == "consumer":
                self.ctx.short_session(group, SESSION_MS, HEARTBEAT_MS)
        for gp in self.plan:
            self.workers[gp.index] = [self._thread(gp, "t") for _ in range(gp.threads)]
            self.bursts[gp.index] = []
            self.children[gp.index] = [self._child(gp, self.ctx.name("load", f"g{gp.index}-static")
                                                   if gp.role == "static" else None) for _ in range(gp.children)]
        log.info("fence load: %d groups (%s), %d threads, %d child members", len(self.plan),
                 ", ".join(f"g{gp.index} {gp.role} {gp.partitions}p" for gp in self.plan),
                 sum(gp.threads for gp in self.plan), sum(gp.children for gp in self.plan))

    def _produce(self) -> None:
        """Keep every topic supplied: PRODUCE_RATE messages per second, round-robin."""
        p = self.ctx.clients.producer(self.ctx.name("load", "fence-producer"))
        i = 0
        try:
            while self._producing.is_set() and not self.ctx.stop.is_set():
                t0 = time.monotonic()
                for _ in range(PRODUCE_RATE // 10):
                    gp = self.plan[i % len(self.plan)]
                    p.produce(self.topics[gp.index], b"f", partition=(i // len(self.plan)) % gp.partitions)
                    i += 1
                p.poll(0)
                time.sleep(max(0.0, 0.1 - (time.monotonic() - t0)))
        finally:
            p.flush(10)

    # the run ----------------------------------------------------------------
    def run_until_done(self, others_done: Callable[[], bool]) -> None:
        self.setup()
        self._producing.set()
        producer = threading.Thread(target=self._produce, name="fence-producer", daemon=True)
        producer.start()
        t0 = now = time.monotonic()
        next_burst, next_report = now + self.burst_s, now + 5.0
        next_stall = {id(ch): now + self.stall_every_s * (1 + self.rng.random()) for ch in self._all_children()}
        try:
            while not (self.committed >= self.commits and self.stalls_done >= self.stalls and others_done()):
                time.sleep(0.1)
                self._drain()
                now = time.monotonic()
                self._stalls(now, next_stall)
                if now >= next_burst:
                    self._burst()
                    next_burst = now + self.burst_s
                if now >= next_report:
                    log.info("fence load: %d of %d commits answered (%.0f/s), %d joins, %d of %d stalls, %d of %d "
                             "children joined; theirs: %s", self.committed, self.commits,
                             self.committed / (now - t0), self.joins, self.stalls_done, self.stalls,
                             sum(c.joined for c in self._all_children()), len(self._all_children()),
                             dict(self.child_counts))
                    next_report = now + 5.0
        finally:
            self._producing.clear()
            for ch in self._all_children() + self.reaped:
                ch.close()
            for ws in (*self.workers.values(), *self.bursts.values()):
                for w in ws:
                    w._leave.set()
            for ws in (*self.workers.values(), *self.bursts.values()):
                for w in ws:
                    w.join(30)
            producer.join(30)
            self._drain()
        log.info("fence load: %d commits answered in %.1f s, %d joins, %d stalls; children %s", self.committed,
                 time.monotonic() - t0, self.joins, sum(c.stalls for c in self._all_children()),
                 dict(self.child_counts))

    def _stalls(self, now: float, next_stall: dict[int, float]) -> None:
        """Stop each joined child every ``stall_every_s`` or so; continue it STALL_S after it
        stopped (a static instance: once its replacement holds partitions)."""
        for gp in self.plan:
            for i, ch in enumerate(self.children[gp.index]):
                if not ch.joined:
                    continue
                if ch.stopped_at is None and ch.stopped():
                    ch.stopped_at = now
                if gp.role == "static" and ch.stopped_at is not None and now - ch.stopped_at >= REPLACE_AFTER_S:
                    # the new instance, once the broker removed the stopped one (before, the broker
                    # answers UNRELEASED_INSTANCE_ID, fatal to librdkafka); again if that still happened
                    new = self.replacing.get(ch.spec.client_id)
                    if new is None or (not new.joined and not new.proc.is_alive()):
                        if new is not None:
                            self.reaped.append(new)
                        self.replacing[ch.spec.client_id] = self._child(gp, ch.spec.conf["group.instance.id"])
                if ch.stopped_at is not None and now - ch.stopped_at >= STALL_S:
                    new = self.replacing.get(ch.spec.client_id)
                    if new is not None and not (new.joined or now - ch.stopped_at > 6 * STALL_S):
                        continue
                    ch.resume()
                    self.stalls_done += 1
                    if new is not None:  # the old instance commits and exits; the new one is the member now
                        del self.replacing[ch.spec.client_id]
                        self.children[gp.index][i] = new
                        self._retire_child(ch)
                        next_stall[id(new)] = now + self.stall_every_s * (1 + self.rng.random())
                    else:
                        next_stall[id(ch)] = now + self.stall_every_s * (1 + self.rng.random())
                elif ch.stopped_at is None and now >= next_stall.get(id(ch), now) and not ch.stall_event.is_set():
                    ch.stall()
                    next_stall[id(ch)] = float("inf")

    def _retire_child(self, ch: Child) -> None:
        self.reaped.append(ch)  # still drained: its stalled commit's answer comes after this

        def reap() -> None:
            ch.proc.join(30)
            if ch.proc.is_alive():
                ch.close()
        threading.Thread(target=reap, name=f"reap-{ch.spec.client_id}", daemon=True).start()

    def _burst(self) -> None:
        """Scale: each group with a burst size alternately gains that many members and loses them."""
        for gp in self.plan:
            if not gp.burst:
                continue
            ws = self.bursts[gp.index]
            if ws:
                for w in ws:
                    w._leave.set()  # each closes (leaves) in its own thread, commits still in flight
                self.retired.extend(ws)
                self.bursts[gp.index] = []
            else:
                self.bursts[gp.index] = [self._thread(gp, "b") for _ in range(gp.burst)]

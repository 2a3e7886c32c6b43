"""A three-node Apache Kafka cluster as the project starts it (``KafkaCluster``): the replicated
``__consumer_offsets`` an operator's cluster has, and what a KIP-848 group's commits show in the
request logs when the broker coordinating the group restarts (the coordinator moves)."""

from __future__ import annotations

import json
import logging
import re
import struct
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, Producer, TopicPartition

from fencewatch.streaming.brokers.common import BrokerStartError
from fencewatch.streaming.brokers.cluster import (
    OFFSETS_PARTITIONS,
    OFFSETS_TOPIC,
    KafkaCluster,
    java_string_hash,
    offsets_partition,
)

log = logging.getLogger(__name__)

_REQUEST = re.compile(r"^\[[^\]]+\] DEBUG Completed request:(\{.*\}) \(kafka\.request\.logger\)$")
OFFSET_COMMIT = 8
NOT_COORDINATOR = 16
COORDINATOR_LOAD_IN_PROGRESS = 14
#: Commits a second while the coordinator restarts: enough to see the move, few enough for 2 cores.
COMMIT_EVERY_S = 0.2


def test_java_string_hash_and_the_offsets_partition_of_a_group():
    """Java's ``String.hashCode`` and Kafka's ``Utils.abs(hash) % 50``: known Java values, one
    whose hash is ``Integer.MIN_VALUE`` (``Utils.abs`` makes it 0, ``Math.abs`` would not)."""
    assert java_string_hash("") == 0
    assert java_string_hash("abc") == 96354
    assert java_string_hash("Aa") == java_string_hash("BB") == 2112
    assert java_string_hash("polygenelubricants") == -(2**31)
    assert offsets_partition("polygenelubricants") == 0
    assert java_string_hash("\U0001F600") == 0xD83D * 31 + 0xDE00  # two UTF-16 code units
    assert offsets_partition("abc") == 96354 % 50
    assert offsets_partition("g", 7) == ord("g") % 7


def test_embedded_broker_picks_a_cluster_for_more_than_one_node():
    """``embedded_broker(spec, nodes)``: an unstarted KafkaCluster of that version; Tansu is one broker."""
    from fencewatch.streaming.brokers import embedded_broker

    cluster = embedded_broker("4.3", nodes=3)
    assert isinstance(cluster, KafkaCluster) and not cluster.is_running and "4.3" in repr(cluster)
    with pytest.raises(ValueError, match="Tansu runs as one broker"):
        embedded_broker("tansu", nodes=3)


@pytest.mark.parametrize(("flags", "message"), [
    (["--brokers", "3", "--broker", "tansu"], "--brokers 3 needs Apache Kafka"),
    (["--brokers", "0"], "--brokers 0: at least 1"),
], ids=["tansu", "zero"])
def test_demo_brokers_bad_input_is_one_line(flags, message):
    done = subprocess.run([sys.executable, "-m", "fencewatch.streaming.cli", "demo", *flags, "--duration", "1s"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and message in done.stderr
    assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr


@dataclass
class Commit:
    """One synchronous commit as the client saw it (monotonic seconds)."""

    began: float
    ended: float
    offsets: dict[int, int]
    error: str | None


def _group_commits(path: Path, group: str, skip_bytes: int = 0) -> list[dict]:
    """The group's OffsetCommit requests in one node's request log (from ``skip_bytes`` on)."""
    out = []
    with path.open("rb") as fh:
        fh.seek(skip_bytes)
        for raw in fh.read().decode("utf-8", errors="replace").splitlines():
            match = _REQUEST.match(raw)
            if not match:
                continue
            entry = json.loads(match.group(1))
            if (entry["requestHeader"]["requestApiKey"] == OFFSET_COMMIT
                    and (entry.get("request") or {}).get("groupId") == group):
                out.append(entry)
    return out


def _errors(entry: dict) -> set[int]:
    """Every error code of one OffsetCommit answer (the request's own, each partition's)."""
    response = entry.get("response") or {}
    codes = {response.get("errorCode", 0)}
    codes |= {p["errorCode"] for t in response.get("topics", []) for p in t.get("partitions", [])}
    return codes


def _committer(consumer: Consumer, topic: str, stop: threading.Event, commits: list[Commit]) -> None:
    """Consume a few records and commit their positions synchronously, every COMMIT_EVERY_S."""
    positions: dict[int, int] = {}
    while not stop.is_set():
        for msg in consumer.consume(10, timeout=COMMIT_EVERY_S):
            if msg.error() is None:
                positions[msg.partition()] = msg.offset() + 1
        if not positions:
            continue
        offsets = dict(positions)
        began = time.monotonic()
        try:
            answer = consumer.commit(offsets=[TopicPartition(topic, p, o) for p, o in offsets.items()],
                                     asynchronous=False)
            failed = [str(tp.error) for tp in answer or [] if tp.error is not None]
            error = "; ".join(failed) or None
        except KafkaException as exc:
            error = str(exc.args[0] if exc.args else exc)
        commits.append(Commit(began, time.monotonic(), offsets, error))


def _offset_commit_records(cluster: KafkaCluster, group: str, topic: str) -> list[tuple[int, int, int]]:
    """``(timestamp ms, partition, offset)`` of the group's offset-commit records in its
    ``__consumer_offsets`` partition (key version 0/1: group, topic, partition; value: offset)."""
    partition = cluster.offsets_partition(group)
    consumer = Consumer({**cluster.client_config(), "group.id": f"reader-{uuid.uuid4().hex[:8]}",
                         "enable.auto.commit": False})
    try:
        end = consumer.get_watermark_offsets(TopicPartition(OFFSETS_TOPIC, partition), timeout=30)[1]
        consumer.assign([TopicPartition(OFFSETS_TOPIC, partition, OFFSET_BEGINNING)])
        out, position, deadline = [], 0, time.monotonic() + 60
        while position < end and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None or msg.error() is not None:
                continue
            position = msg.offset() + 1
            key, value = msg.key() or b"", msg.value()
            if len(key) < 2 or struct.unpack(">h", key[:2])[0] not in (0, 1) or not value:
                continue
            n = struct.unpack(">h", key[2:4])[0]
            record_group = key[4:4 + n].decode()
            m = struct.unpack(">h", key[4 + n:6 + n])[0]
            record_topic = key[6 + n:6 + n + m].decode()
            if record_group == group and record_topic == topic:
                record_partition = struct.unpack(">i", key[6 + n + m:10 + n + m])[0]
                out.append((msg.timestamp()[1], record_partition, struct.unpack(">q", value[2:10])[0]))
        assert position >= end, f"read {OFFSETS_TOPIC}[{partition}] to {position} of {end}"
        return out
    finally:
        consumer.close()


@pytest.mark.broker
@pytest.mark.slow
def test_a_coordinator_restart_moves_a_kip848_groups_commits():
    began = time.monotonic()
    with KafkaCluster("4.2") as cluster:
        started_in_s = time.monotonic() - began
        assert len(cluster.nodes) == 3 and len(cluster.bootstrap.split(",")) == 3
        offsets = cluster.offsets_topic()
        assert offsets is not None and len(offsets.partitions) == OFFSETS_PARTITIONS
        assert all(len(p.replicas) == 3 and len(p.isrs) == 3 for p in offsets.partitions.values())
        assert len({p.leader for p in offsets.partitions.values()}) == 3  # leadership spread over the nodes

        group, topic = f"g-{uuid.uuid4().hex[:12]}", f"t-{uuid.uuid4().hex[:12]}"
        cluster.create_topics([topic], partitions=3)
        producer = Producer({**cluster.client_config(), "linger.ms": 20})
        for i in range(3000):
            producer.produce(topic, key=b"k%d" % i, value=b"v")
        assert producer.flush(60) == 0
        consumer = Consumer({**cluster.client_config(), "group.id": group, "group.protocol": "consumer",
                             "enable.auto.commit": False, "auto.offset.reset": "earliest"})
        consumer.subscribe([topic])
        commits: list[Commit] = []
        stop = threading.Event()
        thread = threading.Thread(target=_committer, args=(consumer, topic, stop, commits), daemon=True)
        thread.start()
        try:
            _wait(lambda: sum(c.error is None for c in commits) >= 5, 60, "five commits before the restart")
            old = cluster.coordinator_leader(group)
            # The hash and the metadata name the node that really answers the group's commits.
            assert any(_errors(e) == {0} for e in _group_commits(old.request_log_path, group))
            others = [n for n in cluster.nodes if n is not old]
            assert not any(_group_commits(n.request_log_path, group) for n in others)
            marks = {n.node_id: n.request_log_path.stat().st_size for n in cluster.nodes}
            restart_began = time.monotonic()
            restart_wall_ms = int(time.time() * 1000)
            timing = cluster.restart(old)
            restarted = time.monotonic()
            _wait(lambda: sum(c.error is None and c.began > restarted for c in commits) >= 5, 60,
                  "five commits after the restart")
        finally:
            stop.set()
            thread.join(30)
            consumer.close()
        new = cluster.coordinator_leader(group)

        after = {n.node_id: _group_commits(n.request_log_path, group, marks[n.node_id]) for n in cluster.nodes}
        refused = [e for entries in after.values() for e in entries
                   if _errors(e) & {NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS}]
        moved = [e for node_id, entries in after.items() if node_id != old.node_id
                 for e in entries if _errors(e) == {0}]
        assert refused or moved, f"no sign of the coordinator moving off node {old.node_id}: {after}"
        assert any(_errors(e) == {0} for e in after[new.node_id]), f"no commit succeeded on node {new.node_id}"

        # The client's view: how long the group could not commit (the widest gap between two
        # successful commits around the restart).
        ok = [c.ended for c in commits if c.error is None]
        around = [b - a for a, b in zip(ok, ok[1:]) if b >= restart_began]
        outage_s = max(around) if around else float("nan")
        failed = [c.error for c in commits if c.error is not None]

        # The commits after the move are in __consumer_offsets, replicated: the last one the
        # client saw succeed, each partition, with a record written after the restart began.
        records = _offset_commit_records(cluster, group, topic)
        last = next(c for c in reversed(commits) if c.error is None)
        late = {(p, o) for ts, p, o in records if ts >= restart_wall_ms}
        assert set(last.offsets.items()) <= late, f"last commit {last.offsets} not among {sorted(late)[-6:]}"
        rss_mb = {k: v >> 20 for k, v in cluster.rss_bytes().items()}
    log.warning("cluster up in %.1fs (ready %.1fs); %s; coordinator %d -> %d; %d refused commits in the logs, "
                "%d failed on the client (%s); commits resumed after %.1fs; RSS MB %s; %.1fs in all",
                started_in_s, cluster.ready_in_s or 0, timing, old.node_id, new.node_id, len(refused), len(failed),
                sorted(set(failed))[:3], outage_s, rss_mb, time.monotonic() - began)


def _processes_mentioning(text: str) -> list[int]:
    """Pids whose command line holds ``text`` (a broker's folder is in its JVM's arguments)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if text.encode() in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


@pytest.mark.broker
@pytest.mark.slow
@pytest.mark.full_fault_table  # a fault trial (about 20 s): make faults, nightly
def test_a_cluster_that_cannot_form_a_quorum_leaves_no_node_behind(tmp_path, monkeypatch):
    """Voters that do not exist (ports 1-3): no node can answer; the start fails with the nodes'
    log tails, and every JVM it launched is gone with its folder."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    cluster = KafkaCluster("4.2", startup_timeout_s=10,
                           properties={"controller.quorum.voters": "1@127.0.0.1:1,2@127.0.0.1:2,3@127.0.0.1:3"})
    with pytest.raises(BrokerStartError, match="did not answer|exited|within"):
        cluster.start()
    assert not cluster.nodes and not cluster.is_running
    assert not list(tmp_path.glob("fencewatch-kafka-*")), "a node's folder was left behind"
    _wait(lambda: not _processes_mentioning(str(tmp_path)), 30, "JVM gone")


def _wait(condition, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"no {what} within {timeout_s:.0f}s"
        time.sleep(0.1)

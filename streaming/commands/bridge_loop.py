"""The bridge's live loops: a source topic -> contract §1 events on the input topics.

What lives here, for ``fencewatch bridge`` (``commands/bridge.py`` parses and wires):

- :func:`run_bridge`: ``__consumer_offsets`` (or a copy) read from the beginning of every
  partition (assigned, never committed: the compacted topic rebuilds the coordinator's state, and
  a restart republishes with the same ``<topic>/<partition>/<offset>`` event ids), events keyed by
  group to the heartbeats or the offsets topic; partition facts polled from the cluster.
- :func:`run_request_log_bridge`: a topic of broker request-log lines, read in a consumer group
  whose position is committed once the events produced before it are delivered.

Both report to the bridge's exporter (``sinks/bridge_metrics.py``): each turn of the loop tells
``/healthz`` it runs, each poll of the source is a unit of progress for ``/readyz`` with the
source's lag, and each round's counts go to the metrics.
"""
from __future__ import annotations

import contextlib
import json
import logging
import signal
import time
import uuid
from collections import Counter
from typing import Any, Callable, Iterator

from fencewatch.state.records import EventType
from fencewatch.streaming.ingest.consumer_offsets.mapping import Bridge, TopicNames, event_role
from fencewatch.streaming.ingest.consumer_offsets.records import RecordDecodeError
from fencewatch.streaming.ingest.request_log import BATCH_LINES, RequestLogBridge, event_json
from fencewatch.streaming.sources.topic_metadata import MetadataTopicNames, names_an_id

log = logging.getLogger(__name__)

DEFAULT_SOURCE_TOPIC = "__consumer_offsets"
DEFAULT_HEARTBEATS_TOPIC = "fencewatch.heartbeats"
DEFAULT_OFFSETS_TOPIC = "fencewatch.offsets"
POLL_TIMEOUT_S = 0.5
"""One poll of the source topic waits at most this long: the probes' trigger interval."""
LAG_EVERY_S = 1.0


def tune_gc() -> None:
    """Raise the cyclic GC's first threshold: decoding allocates many short-lived
    dicts and lists but creates no cycles, and CPython's default (700
    allocations) makes the collector a large share of the decoder's time."""
    import gc

    gen0, gen1, gen2 = gc.get_threshold()
    gc.set_threshold(max(gen0, 50_000), gen1, gen2)


def _with_logger(conf: dict[str, Any]) -> dict[str, Any]:
    """Every client's librdkafka lines through logging, never raw to stderr (the caller's logger
    wins: ``config.kafka_client_config`` gives one per role)."""
    return {"logger": logging.getLogger("fencewatch.kafka.bridge"), **conf}


@contextlib.contextmanager
def _sigterm_stops() -> Iterator[dict[str, bool]]:
    """A flag SIGTERM sets (from the main thread only); the previous handler restored after."""
    stop = {"now": False}
    previous = None
    try:
        previous = signal.signal(signal.SIGTERM, lambda *_: stop.__setitem__("now", True))
    except ValueError:  # not the main thread
        pass
    try:
        yield stop
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


class _Output:
    """The producer side: events to the heartbeats or the offsets topic keyed by group (a partition
    fact by its topic), delivery failures counted, each round's counts handed to the metrics."""

    def __init__(self, producer: Any, metrics: Any, heartbeats_topic: str, offsets_topic: str) -> None:
        self.producer, self.metrics = producer, metrics
        self.topics = {"heartbeats": heartbeats_topic, "offsets": offsets_topic}
        self.failures = 0
        self._events: Counter = Counter()

    def on_delivery(self, err: Any, msg: Any) -> None:
        if err is not None:
            self.failures += 1
            self.metrics.add(delivery_failures=1)
            log.error("delivery to %s failed: %s", msg.topic(), err)

    def produce(self, kind: str, key: bytes, value: bytes) -> None:
        self._events[kind] += 1
        topic = self.topics[event_role(kind)]
        while True:
            try:
                self.producer.produce(topic, value=value, key=key, on_delivery=self.on_delivery)
                return
            except BufferError:
                self.producer.poll(0.1)

    def publish(self, events: list[dict[str, Any]]) -> None:
        """``__consumer_offsets`` events (dicts), then the producer's callbacks served."""
        for e in events:
            key = e.get("group_id") or e.get("topic") or ""
            self.produce(e["type"], key.encode(), json.dumps(e, separators=(",", ":")).encode())
        self.producer.poll(0)

    def end_round(self, **counts: Any) -> None:
        """The round's counts (and the events produced since the last round) to the metrics."""
        events, self._events = self._events, Counter()
        self.metrics.add(events=events, produced=bool(events), **counts)


class _Lag:
    """The source's lag from what the consumer already knows (the high watermarks cached from its
    fetches, the positions the loop read to): no request to the broker. A partition whose high
    watermark is not known yet is left out; one not read yet counts from its start when the loop
    reads from the beginning (``from_start``), else it is left out too. None until one is known."""

    def __init__(self, consumer: Any, topic: str, positions: dict[int, int], *, from_start: bool) -> None:
        self.consumer, self.topic, self.positions, self.from_start = consumer, topic, positions, from_start
        self.partitions: list[int] = []
        self.next = 0.0

    def maybe(self) -> int | None:
        """The lag, at most once per ``LAG_EVERY_S`` (None between: unchanged for the probes)."""
        from confluent_kafka import TopicPartition

        if time.monotonic() < self.next:
            return None
        self.next = time.monotonic() + LAG_EVERY_S
        lag, known = 0, False
        for p in self.partitions:
            _, high = self.consumer.get_watermark_offsets(TopicPartition(self.topic, p), cached=True)
            position = self.positions.get(p, 0 if self.from_start else None)
            if high < 0 or position is None:
                continue
            known = True
            lag += max(0, high - position)
        return lag if known else None


class _Committed:
    """Partitions some group has committed offsets on: those the partition-facts poller asks about."""

    def __init__(self) -> None:
        self.groups: dict[tuple[str, int], set[str]] = {}

    def track(self, events: list[dict[str, Any]]) -> None:
        for e in events:
            if e["type"] == EventType.OFFSET_COMMITTED:
                self.groups.setdefault((e["topic"], e["partition"]), set()).add(e["group_id"])
            elif e["type"] == EventType.OFFSET_DELETED:
                groups = self.groups.get((e["topic"], e["partition"]))
                if groups is not None:
                    groups.discard(e["group_id"])
                    if not groups:
                        del self.groups[(e["topic"], e["partition"])]


def _source_partitions(consumer: Any, topic: str, what: str) -> list[int] | None:
    md = consumer.list_topics(topic, timeout=10).topics.get(topic)
    if md is None or md.error is not None or not md.partitions:
        log.error("%s %s not found (%s)", what, topic, md.error if md else "no metadata")
        return None
    return sorted(md.partitions)


def _end_offsets(consumer: Any, topic: str, partitions: list[int], *, skip_empty: bool) -> dict[int, int]:
    """``--stop-at-end``: the end offsets as of start-up."""
    from confluent_kafka import TopicPartition

    ends = {}
    for p in partitions:
        lo, hi = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
        if hi > lo or not skip_empty:
            ends[p] = hi
    return ends


def _feed_records(msgs: list, bridge: Bridge, topic_ids: MetadataTopicNames, committed: _Committed, out: _Output,
                  positions: dict[int, int]) -> tuple[int, Counter]:
    """One poll's ``__consumer_offsets`` records -> events published; (records read, undecodable by code)."""
    records, undecodable = 0, Counter()
    for msg in msgs:
        if not _advance(msg, positions):
            continue
        records += 1
        ts_type, ts = msg.timestamp()
        eid = f"{msg.topic()}/{msg.partition()}/{msg.offset()}"
        try:
            events = bridge.feed(msg.key(), msg.value(), ts if ts_type else None, eid)
        except RecordDecodeError as exc:
            (log.debug if exc.skippable else log.warning)("%s[%d]@%d: %s", msg.topic(), msg.partition(),
                                                          msg.offset(), exc)
            if not exc.skippable:  # Kafka skips unknown types and versions itself
                undecodable[exc.code] += 1
            continue
        if names_an_id(events) and time.monotonic() - topic_ids.last >= topic_ids.min_interval_s:
            topic_ids.refresh()  # a topic created since start-up; later records resolve
        committed.track(events)
        out.publish(events)
    return records, undecodable


def run_bridge(conf: dict[str, Any], *, topic_names: TopicNames | None = None,
               source_topic: str = DEFAULT_SOURCE_TOPIC, heartbeats_topic: str = DEFAULT_HEARTBEATS_TOPIC,
               offsets_topic: str = DEFAULT_OFFSETS_TOPIC, cluster: str | None = None,
               absent_assignment_epochs: str = "derive", stop_at_end: bool = False,
               partition_poll_interval: float = 60.0, probe_budget: int = 64,
               should_stop: Callable[[], bool] | None = None, metrics: Any = None) -> int:
    """Live ``__consumer_offsets`` -> events. 0 when every event was delivered, 1 otherwise or
    when the source topic is missing. ``metrics``: a ``BridgeMetrics`` (served by the caller)."""
    from confluent_kafka import Consumer, Producer
    from confluent_kafka.admin import AdminClient

    from fencewatch.sinks.bridge_metrics import BridgeMetrics
    from fencewatch.streaming.sources.partition_facts import PartitionFactsPoller

    tune_gc()
    conf = _with_logger(conf)
    metrics = metrics if metrics is not None else BridgeMetrics("consumer_offsets")
    names = topic_names if topic_names is not None else TopicNames()
    bridge = Bridge(names, cluster=cluster, absent_assignment_epochs=absent_assignment_epochs)
    admin = AdminClient(dict(conf))
    topic_ids = MetadataTopicNames(admin, names)
    learned = topic_ids.refresh()
    log.info("bridge: %s -> %s / %s; %d topic ids from cluster metadata", source_topic, heartbeats_topic,
             offsets_topic, learned)
    consumer = Consumer({**conf, "group.id": conf.get("group.id", f"fencewatch-bridge-{uuid.uuid4()}"),
                         "enable.auto.commit": False, "enable.auto.offset.store": False,
                         "isolation.level": "read_committed", "enable.partition.eof": True,
                         "auto.offset.reset": "earliest"})
    out = _Output(Producer({"linger.ms": 20, **conf}), metrics, heartbeats_topic, offsets_topic)
    poller = PartitionFactsPoller(admin, consumer_config=conf if probe_budget > 0 else None,
                                  probe_budget=probe_budget, cluster=cluster)
    facts = _FactsPoll(poller, out, partition_poll_interval)
    s = bridge.stats
    return _serve(consumer, out, metrics, should_stop,
                  lambda stopping: _offsets_loop(consumer, source_topic, bridge, topic_ids, facts, out, metrics,
                                                 stopping, stop_at_end),
                  lambda undelivered: "bridge: %d records, %d events, skipped %s, errors %s, problems %s, "
                  "undelivered %d" % (s.records, s.events, dict(s.skipped), dict(s.errors), dict(s.problems),
                                      undelivered))


def _serve(consumer, out: _Output, metrics, should_stop: Callable[[], bool] | None,
           loop: Callable[[Callable[[], bool]], bool], summary: Callable[[int], str]) -> int:
    """Run one bridge loop until SIGTERM, ``should_stop`` or its end; then flush, close, report
    and log ``summary(undelivered)``. 1 when the loop gave up or an event was not delivered."""
    failure = None
    with _sigterm_stops() as stop:
        try:
            if not loop(lambda: stop["now"] or bool(should_stop and should_stop())):
                return 1
        except Exception as exc:
            failure = f"{type(exc).__name__}: {exc}"
            raise
        finally:
            remaining = out.producer.flush(30)
            consumer.close()
            metrics.running(False, failure)
            log.info("%s", summary(remaining + out.failures))
    return 0 if out.failures == 0 else 1


class _FactsPoll:
    """Partition facts (log start/end, leader epochs) of committed partitions, every ``interval`` s."""

    def __init__(self, poller: Any, out: _Output, interval: float) -> None:
        self.poller, self.out, self.interval = poller, out, interval
        self.committed = _Committed()
        self.next = time.monotonic() + interval if interval > 0 else None

    def due(self) -> None:
        if self.next is not None and time.monotonic() >= self.next:
            self.now()
            self.next = time.monotonic() + self.interval

    def now(self) -> None:
        if self.interval > 0:
            self.out.publish(self.poller.poll(self.committed.groups, int(time.time() * 1000)))


def _offsets_loop(consumer: Any, source_topic: str, bridge: Bridge, topic_ids: MetadataTopicNames,
                  facts: _FactsPoll, out: _Output, metrics: Any, stopped: Callable[[], bool],
                  stop_at_end: bool) -> bool:
    """Poll until stopped (or, with ``stop_at_end``, the start-up end offsets are read); False when
    the source topic is missing."""
    from confluent_kafka import OFFSET_BEGINNING, TopicPartition

    partitions = _source_partitions(consumer, source_topic, "source topic")
    if partitions is None:
        return False
    consumer.assign([TopicPartition(source_topic, p, OFFSET_BEGINNING) for p in partitions])
    ends = _end_offsets(consumer, source_topic, partitions, skip_empty=True) if stop_at_end else {}
    positions: dict[int, int] = {}
    lag = _Lag(consumer, source_topic, positions, from_start=True)
    lag.partitions = partitions
    while not stopped():
        metrics.running(True)
        msgs = consumer.consume(num_messages=1000, timeout=POLL_TIMEOUT_S)
        records, undecodable = _feed_records(msgs, bridge, topic_ids, facts.committed, out, positions)
        if not msgs:
            out.publish(bridge.flush())  # idle: nothing more of any open batch is coming now
        facts.due()
        out.end_round(records=records, undecodable=undecodable)
        metrics.progressed(lag.maybe())
        if stop_at_end and all(positions.get(p, 0) >= end for p, end in ends.items()):
            out.publish(bridge.flush())
            facts.now()
            break
    out.publish(bridge.flush())
    out.end_round()
    return True


def run_request_log_bridge(conf: dict[str, Any], lines_topic: str, bridge: RequestLogBridge, *,
                           heartbeats_topic: str = DEFAULT_HEARTBEATS_TOPIC,
                           offsets_topic: str = DEFAULT_OFFSETS_TOPIC, stop_at_end: bool = False,
                           should_stop: Callable[[], bool] | None = None, commit_interval_s: float = 5.0,
                           metrics: Any = None) -> int:
    """Live: a topic of request-log lines -> contract §1 events on the input topics, keyed by group.

    A consumer group (``fencewatch-request-log-bridge`` unless ``-X group.id=``) keeps the
    position: offsets are committed only after the events produced so far are delivered
    (at least once; a restart resumes there). What a restart loses is the carried member
    state: members are learnt again from their next assignment (docs/request-log.md).
    ``event_id`` is ``<topic>/<partition>/<offset>`` of the line's record; a message-only
    line takes the record's timestamp."""
    from confluent_kafka import Consumer, Producer
    from confluent_kafka.admin import AdminClient

    from fencewatch.sinks.bridge_metrics import BridgeMetrics

    tune_gc()
    conf = _with_logger(conf)
    metrics = metrics if metrics is not None else BridgeMetrics("request_log")
    topic_ids = MetadataTopicNames(AdminClient(dict(conf)), bridge.topic_names)
    learned = topic_ids.refresh()
    log.info("bridge: request log %s -> %s / %s; %d topic ids from cluster metadata", lines_topic,
             heartbeats_topic, offsets_topic, learned)
    consumer = Consumer({"group.id": "fencewatch-request-log-bridge", "auto.offset.reset": "earliest", **conf,
                         "enable.auto.commit": False, "enable.partition.eof": True})
    out = _Output(Producer({"linger.ms": 20, "compression.type": "lz4", **conf}), metrics, heartbeats_topic,
                  offsets_topic)
    return _serve(consumer, out, metrics, should_stop,
                  lambda stopping: _lines_loop(consumer, lines_topic, bridge, topic_ids, out, metrics, stopping,
                                               stop_at_end, commit_interval_s),
                  lambda undelivered: f"bridge: request log: {bridge.summary()}; undelivered {undelivered}")


def _lines_loop(consumer: Any, lines_topic: str, bridge: RequestLogBridge, topic_ids: MetadataTopicNames,
                out: _Output, metrics: Any, stopped: Callable[[], bool], stop_at_end: bool,
                commit_interval_s: float) -> bool:
    """Poll until stopped (or the start-up end offsets are read); False when the topic is missing."""
    partitions = _source_partitions(consumer, lines_topic, "request-log topic")
    if partitions is None:
        return False
    ends = _end_offsets(consumer, lines_topic, partitions, skip_empty=False) if stop_at_end else {}
    consumer.subscribe([lines_topic])
    positions: dict[int, int] = {}
    lag = _Lag(consumer, lines_topic, positions, from_start=False)
    lag.partitions = partitions
    counts = _RoundCounts(bridge)
    next_commit = time.monotonic() + commit_interval_s
    while not stopped():
        metrics.running(True)
        lines, eids, tss = _read_lines(consumer.consume(num_messages=1000, timeout=POLL_TIMEOUT_S), positions)
        for k in range(0, len(lines), BATCH_LINES):
            # a topic created since start-up: the names are refreshed after the line that met
            # its id, so later lines resolve
            for line_events in bridge.events_many(lines[k:k + BATCH_LINES], eids[k:k + BATCH_LINES],
                                                  tss[k:k + BATCH_LINES], on_unresolved=topic_ids.maybe_refresh):
                for e in line_events:
                    out.produce(e.kind, e.group_id.encode(), event_json(e))
        while bridge.problems:
            eid, code, detail = bridge.problems.popleft()
            topic_name, partition, offset = eid.rsplit("/", 2)
            log.warning("%s[%s]@%s: %s: %s", topic_name, partition, offset, code, detail)
        out.producer.poll(0)
        out.end_round(records=len(lines), **counts.since_last())
        metrics.progressed(lag.maybe())
        if time.monotonic() >= next_commit:
            _commit_after_delivery(out.producer, consumer)
            next_commit = time.monotonic() + commit_interval_s
        if stop_at_end and all(positions.get(p, 0) >= end for p, end in ends.items()):
            break
    _commit_after_delivery(out.producer, consumer)
    out.end_round(**counts.since_last())
    return True


def _read_lines(msgs: list, positions: dict[int, int]) -> tuple[list, list[str], list]:
    """One poll's records -> (line values, event ids, record timestamps); end-of-partition skipped."""
    lines, eids, tss = [], [], []
    for msg in msgs:
        if not _advance(msg, positions):
            continue
        value = msg.value()
        if value is None:
            continue
        ts_type, ts = msg.timestamp()
        lines.append(value)
        eids.append(f"{msg.topic()}/{msg.partition()}/{msg.offset()}")
        tss.append(ts if ts_type else None)
    return lines, eids, tss


class _RoundCounts:
    """The request-log decoder's broken lines (by code) and routing answers (by API and error)
    since the last round, read from its running counts once per round."""

    def __init__(self, bridge: RequestLogBridge) -> None:
        self.bridge = bridge
        self.broken: Counter = Counter()
        self.routing: Counter = Counter()

    def since_last(self) -> dict[str, Counter]:
        broken = Counter({k[len("broken."):]: n for k, n in self.bridge.counts.items() if k.startswith("broken.")})
        routing = Counter(self.bridge.routing)
        delta = {"undecodable": broken - self.broken, "routing": routing - self.routing}
        self.broken, self.routing = broken, routing
        return delta


def _commit_after_delivery(producer: Any, consumer: Any) -> None:
    """Commit the consumer's position once everything produced from before it is delivered."""
    if producer.flush(30) == 0:
        try:
            consumer.commit(asynchronous=False)
        except Exception as exc:  # nothing consumed yet, or a rebalance: the next commit covers it
            log.debug("commit: %s", exc)


def _advance(msg, positions: dict[int, int]) -> bool:
    """The partition's position past ``msg``; whether it is a record (not an end-of-partition
    event or an error, which is logged)."""
    from confluent_kafka import KafkaError

    err = msg.error()
    if err is None:
        positions[msg.partition()] = msg.offset() + 1
        return True
    if err.code() == KafkaError._PARTITION_EOF:
        positions[msg.partition()] = msg.offset()  # read to the end, as of this fetch
    else:
        log.warning("consume %s: %s", msg.topic(), err)
    return False

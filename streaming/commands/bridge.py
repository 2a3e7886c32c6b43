"""``fencewatch bridge``: ``__consumer_offsets`` -> SPEC events.

Two modes:

- live (``--bootstrap-servers``): read the source topic (default
  ``__consumer_offsets``) from the beginning of every partition (the topic is
  compacted, so this rebuilds the coordinator's state; a restart rereads it and
  republishes events with the same ``event_id``\\s, ``topic/partition/offset``,
  for downstream deduplication), and produce events, keyed by group id, to the
  heartbeats topic (membership) or the offsets topic (commits and partition
  facts). Every client (consumer, producer, admin) gets the ``-X key=value``
  and ``--command-config`` settings, so SASL/SSL configs pass through.
- offline (``--from-file RECORDS``): JSON lines ``{"key": base64, "value":
  base64 or null, "timestamp": ms}`` -> SPEC events as JSON lines on stdout or
  ``--out``; a bad line is reported on stderr with its reason and skipped.

And the same two for the broker request log (contract §10, ``request_log.py``):
``--from-request-log FILE`` (offline, ``-`` = stdin) and, live,
``--request-log-topic T`` (a topic whose record values are request-log lines,
as a log shipper writes them) -> the heartbeats / offsets topics.
"""

from __future__ import annotations

import argparse
import base64
import binascii
import json
import logging
import signal
import struct
import sys
import time
import uuid
from itertools import islice
from typing import IO, Any, Callable, Iterable, Iterator

from fencewatch.state.records import EventType
from fencewatch.streaming.ingest.consumer_offsets.mapping import ABSENT_EPOCH_MODES, Bridge, TopicNames, event_role
from fencewatch.streaming.ingest.consumer_offsets.records import RecordDecodeError, decode, kafka_json
from fencewatch.streaming.ingest.request_log import BATCH_LINES, RequestLogBridge, event_json, events_json_lines

__all__ = ["register", "run_bridge", "run_from_file", "run_from_request_log", "run_request_log_bridge",
           "load_topic_ids", "parse_client_config", "parse_timezone"]

log = logging.getLogger(__name__)

DEFAULT_SOURCE_TOPIC = "__consumer_offsets"
DEFAULT_HEARTBEATS_TOPIC = "fencewatch.heartbeats"
DEFAULT_OFFSETS_TOPIC = "fencewatch.offsets"


def register(subparsers: Any) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "bridge",
        help="read a cluster's __consumer_offsets and republish SPEC events",
        description="Decode the group coordinator's records (__consumer_offsets) into fencewatch events: "
                    "live from a cluster to the input topics, or offline from a JSON-lines file.",
    )
    src = p.add_argument_group("source")
    src.add_argument("--from-file", metavar="RECORDS",
                     help='offline: JSON lines {"key": base64, "value": base64|null, "timestamp": ms}')
    src.add_argument("--from-request-log", metavar="FILE",
                     help="offline: broker request-log lines (kafka.request.logger at DEBUG; - = stdin)")
    src.add_argument("--bootstrap-servers", metavar="HOSTS", help="live: the cluster to read")
    src.add_argument("--request-log-topic", metavar="TOPIC",
                     help="live: read request-log lines from this topic (one line per record) instead of "
                          "__consumer_offsets")
    src.add_argument("--source-topic", default=DEFAULT_SOURCE_TOPIC,
                     help="topic holding coordinator records (default %(default)s)")
    src.add_argument("-X", "--client-config", action="append", default=[], metavar="KEY=VALUE",
                     help="librdkafka setting for every client (repeatable), e.g. security.protocol=SASL_SSL")
    src.add_argument("--command-config", metavar="FILE", help="properties file of client settings")
    src.add_argument("--stop-at-end", action="store_true",
                     help="live: exit once the source's end offsets as of start-up are reached")
    out = p.add_argument_group("output")
    out.add_argument("--out", metavar="FILE", help="offline: write events here instead of stdout")
    out.add_argument("--dump-records", action="store_true",
                     help="offline: print each record as Kafka's formatters do instead of events")
    out.add_argument("--heartbeats-topic", default=DEFAULT_HEARTBEATS_TOPIC, help="default %(default)s")
    out.add_argument("--offsets-topic", default=DEFAULT_OFFSETS_TOPIC, help="default %(default)s")
    m = p.add_argument_group("mapping")
    m.add_argument("--topic-ids", metavar="FILE", help="JSON object topic id -> name (offline resolution)")
    m.add_argument("--log-timezone", metavar="TZ",
                   help="request log: zone of time stamps without an offset (default UTC), e.g. Europe/Paris")
    m.add_argument("--cluster", help="value of the events' cluster field (default: omitted = \"default\")")
    m.add_argument("--absent-assignment-epochs", choices=ABSENT_EPOCH_MODES, default="derive",
                   help="records without KIP-1251 epochs: let the monitor derive them (default), or write "
                        "max(member epoch, 0) as a 4.3 broker loading them would")
    pf = p.add_argument_group("partition facts")
    pf.add_argument("--partition-poll-interval", type=float, default=60.0, metavar="SECONDS",
                    help="live: poll log start/end offsets of committed partitions this often (0 = off)")
    pf.add_argument("--probe-budget", type=int, default=64, metavar="N",
                    help="record reads per partition and poll to locate leader epochs (0 = no probing)")
    p.set_defaults(func=main)
    return p


def main(args: argparse.Namespace) -> int:
    try:
        topic_names = TopicNames(load_topic_ids(args.topic_ids) if args.topic_ids else None)
    except (OSError, ValueError) as exc:
        print(f"fencewatch bridge: --topic-ids {args.topic_ids}: {exc}", file=sys.stderr)
        return 2
    try:
        tz = parse_timezone(args.log_timezone)
    except ValueError as exc:
        print(f"fencewatch bridge: --log-timezone: {exc}", file=sys.stderr)
        return 2
    if args.from_request_log:
        try:
            out = open(args.out, "w", encoding="utf-8") if args.out else sys.stdout
            # Bytes: a line that is not UTF-8 is reported (BAD_ENCODING), not fatal.
            src = sys.stdin.buffer if args.from_request_log == "-" else open(args.from_request_log, "rb")
        except OSError as exc:
            print(f"fencewatch bridge: {exc}", file=sys.stderr)
            return 2
        try:
            return run_from_request_log(src, out, sys.stderr, RequestLogBridge(topic_names, tz=tz,
                                                                               cluster=args.cluster))
        finally:
            if args.from_request_log != "-":
                src.close()
            if args.out:
                out.close()
    if args.from_file:
        out = open(args.out, "w", encoding="utf-8") if args.out else sys.stdout
        try:
            with open(args.from_file, encoding="utf-8") as f:
                return run_from_file(f, out, sys.stderr, topic_names=topic_names, cluster=args.cluster,
                                     absent_assignment_epochs=args.absent_assignment_epochs,
                                     dump_records=args.dump_records)
        except OSError as exc:
            print(f"fencewatch bridge: {exc}", file=sys.stderr)
            return 2
        finally:
            if args.out:
                out.close()
    if not args.bootstrap_servers:
        print("fencewatch bridge: give --from-file RECORDS, --from-request-log FILE or --bootstrap-servers HOSTS", file=sys.stderr)
        return 2
    try:
        conf = parse_client_config(args.client_config, args.command_config)
    except (OSError, ValueError) as exc:
        print(f"fencewatch bridge: {exc}", file=sys.stderr)
        return 2
    conf = _translated_client_config(args.bootstrap_servers, conf)
    if args.request_log_topic:
        return run_request_log_bridge(conf, args.request_log_topic, RequestLogBridge(topic_names, tz=tz,
                                                                                     cluster=args.cluster),
                                      heartbeats_topic=args.heartbeats_topic, offsets_topic=args.offsets_topic,
                                      stop_at_end=args.stop_at_end)
    return run_bridge(conf, topic_names=topic_names, source_topic=args.source_topic,
                      heartbeats_topic=args.heartbeats_topic, offsets_topic=args.offsets_topic,
                      cluster=args.cluster, absent_assignment_epochs=args.absent_assignment_epochs,
                      stop_at_end=args.stop_at_end, partition_poll_interval=args.partition_poll_interval,
                      probe_budget=args.probe_budget)


# ---------------------------------------------------------------------------
# configuration helpers
# ---------------------------------------------------------------------------

def load_topic_ids(path: str) -> dict[str, str]:
    with open(path, encoding="utf-8") as f:
        data = json.load(f)
    if not isinstance(data, dict) or not all(isinstance(v, str) for v in data.values()):
        raise ValueError("expected a JSON object of topic id -> topic name")
    TopicNames(data)  # validates every id
    return data


def parse_timezone(name: str | None):
    """``--log-timezone``: an IANA zone name (or UTC); None when not given."""
    if not name:
        return None
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise ValueError(f"unknown time zone {name!r} ({exc})") from None


def _translated_client_config(bootstrap: str, conf: dict[str, str]) -> dict[str, Any]:
    """-X and --command-config merged over the environment's ``streaming.kafka`` and translated
    once, as for every fencewatch client (``config.kafka_client_config``): Java names such as a
    PLAIN/SCRAM ``sasl.jaas.config`` work, what cannot work is refused with a ConfigError."""
    from fencewatch.streaming.config import settings as cfgmod

    cfg = cfgmod.load_config(overrides={"streaming": {"bootstrap_servers": bootstrap, "kafka": conf}})
    return cfgmod.kafka_client_config(cfg, "consumer")


def parse_client_config(pairs: list[str], properties_file: str | None) -> dict[str, str]:
    conf: dict[str, str] = {}
    if properties_file:
        with open(properties_file, encoding="utf-8") as f:
            for n, line in enumerate(f, 1):
                line = line.strip()
                if not line or line.startswith(("#", "!")):
                    continue
                sep = min((i for i in (line.find("="), line.find(":")) if i > 0), default=-1)
                if sep < 0:
                    raise ValueError(f"{properties_file}:{n}: expected key=value")
                conf[line[:sep].strip()] = line[sep + 1:].strip()
    for pair in pairs:
        k, sep, v = pair.partition("=")
        if not sep or not k:
            raise ValueError(f"-X {pair!r}: expected key=value")
        conf[k.strip()] = v.strip()
    return conf


# ---------------------------------------------------------------------------
# offline
# ---------------------------------------------------------------------------

def _parse_line(line: str) -> tuple[bytes | None, bytes | None, int | None]:
    obj = json.loads(line)
    if not isinstance(obj, dict):
        raise ValueError("line is not a JSON object")
    key_b64 = obj.get("key")
    if key_b64 is None:
        raise ValueError("missing key")
    if not isinstance(key_b64, str):
        raise ValueError("key is not a base64 string")
    value_b64 = obj.get("value")
    if value_b64 is not None and not isinstance(value_b64, str):
        raise ValueError("value is not a base64 string or null")
    ts = obj.get("timestamp")
    if ts is not None and (not isinstance(ts, int) or isinstance(ts, bool)):
        raise ValueError("timestamp is not an integer")
    try:
        key = base64.b64decode(key_b64, validate=True)
        value = base64.b64decode(value_b64, validate=True) if value_b64 is not None else None
    except binascii.Error as exc:
        raise ValueError(f"bad base64: {exc}") from None
    return key, value, ts


def run_from_file(lines: IO[str], out: IO[str], err: IO[str], *, topic_names: TopicNames | None = None,
                  cluster: str | None = None, absent_assignment_epochs: str = "derive",
                  dump_records: bool = False) -> int:
    """Decode a JSON-lines file of raw records; events to ``out``, problems to ``err``."""
    bridge = Bridge(topic_names, cluster=cluster, absent_assignment_epochs=absent_assignment_epochs)
    bad = 0
    for n, line in enumerate(lines):
        if not line.strip():
            err.write(f"line {n}: empty line, skipped\n")
            bad += 1
            continue
        try:
            key, value, ts = _parse_line(line)
        except ValueError as exc:  # json.JSONDecodeError is a ValueError
            err.write(f"line {n}: BAD_LINE: {exc}\n")
            bad += 1
            continue
        try:
            if dump_records:
                out.write(json.dumps(kafka_json(decode(key, value)), separators=(",", ":")) + "\n")
                continue
            events = bridge.feed(key, value, ts, str(n))
        except RecordDecodeError as exc:
            err.write(f"line {n}: {exc.code}: {exc.detail}\n")
            bad += 1
            continue
        for e in events:
            out.write(json.dumps(e, separators=(",", ":")) + "\n")
    for e in bridge.flush():
        out.write(json.dumps(e, separators=(",", ":")) + "\n")
    s = bridge.stats
    err.write(f"bridge: {s.records} records, {s.events} events, {bad} skipped"
              + (f" {dict(s.skipped) | dict(s.errors)}" if s.skipped or s.errors else "")
              + (f", problems {dict(s.problems)}" if s.problems else "") + "\n")
    return 0


def run_from_request_log(lines: Iterable[str | bytes], out: IO[str], err: IO[str], bridge: RequestLogBridge) -> int:
    """Request-log lines -> SPEC events as JSON lines (every event of line n has event id
    ``"n"``); each broken line reported on ``err`` with its reason; a summary last. Exit 0.
    Lines are decoded ``BATCH_LINES`` at a time (``events_many``; output and reports come per
    batch, also from stdin) and their events written as one block of JSON lines
    (``events_json_lines``: the bytes ``json.dumps`` wrote of the dicts before, without
    building them)."""
    problems = bridge.problems
    events_many = bridge.events_many
    write = out.write
    it = iter(lines)
    n = 0
    while chunk := list(islice(it, BATCH_LINES)):
        events = [e for line_events in events_many(chunk, [str(k) for k in range(n, n + len(chunk))])
                  for e in line_events]
        n += len(chunk)
        if events:
            write(events_json_lines(events).decode("ascii"))  # events_json_lines writes ASCII
        while problems:
            eid, code, detail = problems.popleft()
            err.write(f"line {eid}: {code}: {detail}\n")
    err.write(f"bridge --from-request-log: {bridge.summary()}\n")
    return 0


# ---------------------------------------------------------------------------
# live
# ---------------------------------------------------------------------------

def _uuid_bytes(topic_id: Any) -> bytes | None:
    """confluent-kafka's Uuid -> 16 bytes."""
    if topic_id is None:
        return None
    raw = struct.pack(">qq", topic_id.get_most_significant_bits(), topic_id.get_least_significant_bits())
    return None if raw == bytes(16) else raw


class MetadataTopicNames:
    """Looks topic ids up in cluster metadata when the bridge meets an unknown one
    (at most once per ``min_interval_s``)."""

    def __init__(self, admin: Any, names: TopicNames, min_interval_s: float = 30.0, timeout_s: float = 10.0):
        self.admin, self.names = admin, names
        self.min_interval_s, self.timeout_s = min_interval_s, timeout_s
        self.last = float("-inf")

    def refresh(self) -> int:
        from confluent_kafka import TopicCollection

        self.last = time.monotonic()
        try:
            topics = list(self.admin.list_topics(timeout=self.timeout_s).topics)
            futures = self.admin.describe_topics(TopicCollection(topics), request_timeout=self.timeout_s)
        except Exception as exc:
            log.warning("topic metadata: %s", exc)
            return 0
        learned = 0
        for name, fut in futures.items():
            try:
                raw = _uuid_bytes(fut.result().topic_id)
            except Exception as exc:
                log.debug("describe_topics %s: %s", name, exc)
                continue
            if raw is not None and not self.names.known(raw):
                self.names.learn(raw, name)
                learned += 1
        return learned

    def maybe_refresh(self) -> None:
        if time.monotonic() - self.last >= self.min_interval_s:
            self.refresh()


def _unresolved_ids(events: list[dict[str, Any]]) -> bool:
    for e in events:
        for key in ("assigned", "pending_revocation"):
            for tp in e.get(key, ()):
                t = tp["topic"]
                if len(t) == 36 and t.count("-") == 4:
                    try:
                        uuid.UUID(t)
                        return True
                    except ValueError:
                        pass
    return False


def tune_gc() -> None:
    """Raise the cyclic GC's first threshold: decoding allocates many short-lived
    dicts and lists but creates no cycles, and CPython's default (700
    allocations) makes the collector a large share of the decoder's time."""
    import gc

    gen0, gen1, gen2 = gc.get_threshold()
    gc.set_threshold(max(gen0, 50_000), gen1, gen2)


def run_bridge(conf: dict[str, Any], *, topic_names: TopicNames | None = None,
               source_topic: str = DEFAULT_SOURCE_TOPIC, heartbeats_topic: str = DEFAULT_HEARTBEATS_TOPIC,
               offsets_topic: str = DEFAULT_OFFSETS_TOPIC, cluster: str | None = None,
               absent_assignment_epochs: str = "derive", stop_at_end: bool = False,
               partition_poll_interval: float = 60.0, probe_budget: int = 64,
               should_stop: Callable[[], bool] | None = None) -> int:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient

    from fencewatch.streaming.sources.partition_facts import PartitionFactsPoller

    tune_gc()
    names = topic_names if topic_names is not None else TopicNames()
    bridge = Bridge(names, cluster=cluster, absent_assignment_epochs=absent_assignment_epochs)
    admin = AdminClient(dict(conf))
    metadata = MetadataTopicNames(admin, names)
    learned = metadata.refresh()
    log.info("bridge: %s -> %s / %s; %d topic ids from cluster metadata", source_topic, heartbeats_topic,
             offsets_topic, learned)

    consumer = Consumer({**conf, "group.id": conf.get("group.id", f"fencewatch-bridge-{uuid.uuid4()}"),
                         "enable.auto.commit": False, "enable.auto.offset.store": False,
                         "isolation.level": "read_committed", "enable.partition.eof": True,
                         "auto.offset.reset": "earliest"})
    producer = Producer({"linger.ms": 20, **conf})
    poller = PartitionFactsPoller(admin, consumer_config=conf if probe_budget > 0 else None,
                                  probe_budget=probe_budget, cluster=cluster)
    stop = {"now": False}
    previous = signal.getsignal(signal.SIGTERM)
    try:
        signal.signal(signal.SIGTERM, lambda *_: stop.__setitem__("now", True))
    except ValueError:  # not the main thread
        previous = None
    delivery_errors = {"n": 0}

    def on_delivery(err: Any, msg: Any) -> None:
        if err is not None:
            delivery_errors["n"] += 1
            log.error("delivery to %s failed: %s", msg.topic(), err)

    def publish(events: list[dict[str, Any]]) -> None:
        for e in events:
            topic = offsets_topic if event_role(e["type"]) == "offsets" else heartbeats_topic
            key = e.get("group_id") or e.get("topic") or ""
            value = json.dumps(e, separators=(",", ":")).encode()
            while True:
                try:
                    producer.produce(topic, value=value, key=key.encode(), on_delivery=on_delivery)
                    break
                except BufferError:
                    producer.poll(0.1)
        producer.poll(0)

    committed: dict[tuple[str, int], set[str]] = {}

    def track(events: list[dict[str, Any]]) -> None:
        for e in events:
            if e["type"] == EventType.OFFSET_COMMITTED:
                committed.setdefault((e["topic"], e["partition"]), set()).add(e["group_id"])
            elif e["type"] == EventType.OFFSET_DELETED:
                groups = committed.get((e["topic"], e["partition"]))
                if groups is not None:
                    groups.discard(e["group_id"])
                    if not groups:
                        del committed[(e["topic"], e["partition"])]

    try:
        md = consumer.list_topics(source_topic, timeout=10)
        tmd = md.topics.get(source_topic)
        if tmd is None or tmd.error is not None or not tmd.partitions:
            log.error("source topic %s not found (%s)", source_topic, tmd.error if tmd else "no metadata")
            return 1
        partitions = sorted(tmd.partitions)
        consumer.assign([TopicPartition(source_topic, p, OFFSET_BEGINNING) for p in partitions])
        ends: dict[int, int] = {}
        if stop_at_end:
            for p in partitions:
                lo, hi = consumer.get_watermark_offsets(TopicPartition(source_topic, p), timeout=10)
                if hi > lo:
                    ends[p] = hi
        positions: dict[int, int] = {}
        next_poll = time.monotonic() + partition_poll_interval if partition_poll_interval > 0 else None
        while not stop["now"] and not (should_stop and should_stop()):
            msgs = consumer.consume(num_messages=1000, timeout=0.5)
            for msg in msgs:
                err = msg.error()
                if err is not None:
                    if err.code() != KafkaError._PARTITION_EOF:
                        log.warning("consume %s: %s", source_topic, err)
                    continue
                positions[msg.partition()] = msg.offset() + 1
                ts_type, ts = msg.timestamp()
                eid = f"{msg.topic()}/{msg.partition()}/{msg.offset()}"
                try:
                    events = bridge.feed(msg.key(), msg.value(), ts if ts_type else None, eid)
                except RecordDecodeError as exc:
                    (log.debug if exc.skippable else log.warning)("%s[%d]@%d: %s", msg.topic(), msg.partition(),
                                                                  msg.offset(), exc)
                    continue
                if _unresolved_ids(events) and time.monotonic() - metadata.last >= metadata.min_interval_s:
                    metadata.refresh()  # a topic created since start-up; later records resolve
                track(events)
                publish(events)
            if not msgs:
                publish(bridge.flush())  # idle: nothing more of any open batch is coming now
            if next_poll is not None and time.monotonic() >= next_poll:
                publish(poller.poll(committed, int(time.time() * 1000)))
                next_poll = time.monotonic() + partition_poll_interval
            if stop_at_end and all(positions.get(p, 0) >= end for p, end in ends.items()):
                publish(bridge.flush())
                if partition_poll_interval > 0:
                    publish(poller.poll(committed, int(time.time() * 1000)))
                break
        publish(bridge.flush())
    finally:
        remaining = producer.flush(30)
        consumer.close()
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
        s = bridge.stats
        log.info("bridge: %d records, %d events, skipped %s, errors %s, problems %s, undelivered %d",
                 s.records, s.events, dict(s.skipped), dict(s.errors), dict(s.problems),
                 remaining + delivery_errors["n"])
    return 0 if delivery_errors["n"] == 0 else 1


def run_request_log_bridge(conf: dict[str, Any], lines_topic: str, bridge: RequestLogBridge, *,
                           heartbeats_topic: str = DEFAULT_HEARTBEATS_TOPIC,
                           offsets_topic: str = DEFAULT_OFFSETS_TOPIC, stop_at_end: bool = False,
                           should_stop: Callable[[], bool] | None = None, commit_interval_s: float = 5.0) -> int:
    """Live: a topic of request-log lines -> SPEC events on the input topics, keyed by group.

    A consumer group (``fencewatch-request-log-bridge`` unless ``-X group.id=``) keeps the
    position: offsets are committed only after the events produced so far are delivered
    (at least once; a restart resumes there). What a restart loses is the carried member
    state: members are learnt again from their next assignment (docs/request-log.md).
    ``event_id`` is ``<topic>/<partition>/<offset>`` of the line's record; a message-only
    line takes the record's timestamp."""
    from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient

    tune_gc()
    metadata = MetadataTopicNames(AdminClient(dict(conf)), bridge.topic_names)
    learned = metadata.refresh()
    log.info("bridge: request log %s -> %s / %s; %d topic ids from cluster metadata", lines_topic,
             heartbeats_topic, offsets_topic, learned)
    consumer = Consumer({"group.id": "fencewatch-request-log-bridge", "auto.offset.reset": "earliest", **conf,
                         "enable.auto.commit": False, "enable.partition.eof": True})
    producer = Producer({"linger.ms": 20, "compression.type": "lz4", **conf})
    failures = {"n": 0}

    def on_delivery(err: Any, msg: Any) -> None:
        if err is not None:
            failures["n"] += 1
            log.error("delivery to %s failed: %s", msg.topic(), err)

    stop = {"now": False}
    previous = None
    try:
        previous = signal.signal(signal.SIGTERM, lambda *_: stop.__setitem__("now", True))
    except ValueError:  # not the main thread
        pass
    try:
        md = consumer.list_topics(lines_topic, timeout=10).topics.get(lines_topic)
        if md is None or md.error is not None or not md.partitions:
            log.error("request-log topic %s not found (%s)", lines_topic, md.error if md else "no metadata")
            return 1
        partitions = sorted(md.partitions)
        ends = {}
        if stop_at_end:
            for p in partitions:
                _, hi = consumer.get_watermark_offsets(TopicPartition(lines_topic, p), timeout=10)
                ends[p] = hi
        consumer.subscribe([lines_topic])
        positions: dict[int, int] = {}
        next_commit = time.monotonic() + commit_interval_s
        while not stop["now"] and not (should_stop and should_stop()):
            lines, eids, tss = [], [], []
            for msg in consumer.consume(num_messages=1000, timeout=0.5):
                err = msg.error()
                if err is not None:
                    if err.code() != KafkaError._PARTITION_EOF:
                        log.warning("consume %s: %s", lines_topic, err)
                    continue
                positions[msg.partition()] = msg.offset() + 1
                value = msg.value()
                if value is None:
                    continue
                ts_type, ts = msg.timestamp()
                lines.append(value)
                eids.append(f"{msg.topic()}/{msg.partition()}/{msg.offset()}")
                tss.append(ts if ts_type else None)
            for k in range(0, len(lines), BATCH_LINES):
                # a topic created since start-up: the names are refreshed after the line that met
                # its id, so later lines resolve
                for line_events in bridge.events_many(lines[k:k + BATCH_LINES], eids[k:k + BATCH_LINES],
                                                      tss[k:k + BATCH_LINES], on_unresolved=metadata.maybe_refresh):
                    for e in line_events:
                        topic = offsets_topic if event_role(e.kind) == "offsets" else heartbeats_topic
                        while True:
                            try:
                                producer.produce(topic, value=event_json(e), key=e.group_id.encode(),
                                                 on_delivery=on_delivery)
                                break
                            except BufferError:
                                producer.poll(0.1)
            while bridge.problems:
                eid, code, detail = bridge.problems.popleft()
                topic_name, partition, offset = eid.rsplit("/", 2)
                log.warning("%s[%s]@%s: %s: %s", topic_name, partition, offset, code, detail)
            producer.poll(0)
            if time.monotonic() >= next_commit:
                _commit_after_delivery(producer, consumer)
                next_commit = time.monotonic() + commit_interval_s
            if stop_at_end and all(positions.get(p, 0) >= end for p, end in ends.items()):
                break
        _commit_after_delivery(producer, consumer)
    finally:
        remaining = producer.flush(30)
        consumer.close()
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
        log.info("bridge: request log: %s; undelivered %d", bridge.summary(), remaining + failures["n"])
    return 0 if failures["n"] == 0 else 1


def _commit_after_delivery(producer: Any, consumer: Any) -> None:
    """Commit the consumer's position once everything produced from before it is delivered."""
    if producer.flush(30) == 0:
        try:
            consumer.commit(asynchronous=False)
        except Exception as exc:  # nothing consumed yet, or a rebalance: the next commit covers it
            log.debug("commit: %s", exc)

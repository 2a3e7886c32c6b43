"""``fencewatch bridge``: ``__consumer_offsets`` -> contract §1 events.

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
  base64 or null, "timestamp": ms}`` -> contract §1 events as JSON lines on stdout or
  ``--out``; a bad line is reported on stderr with its reason and skipped.

And the same two for the broker request log (contract §10, ``ingest/request_log/``):
``--from-request-log FILE`` (offline, ``-`` = stdin) and, live,
``--request-log-topic T`` (a topic whose record values are request-log lines,
as a log shipper writes them) -> the heartbeats / offsets topics.

This module parses and wires; the live loops are ``bridge_loop.py`` beside it. A live
bridge serves its own metrics and probes (``--metrics-port``, default 9465).
"""

from __future__ import annotations

import argparse
import base64
import binascii
import json
import logging
import os
import sys
from itertools import islice
from typing import IO, Any, Iterable, Mapping

from fencewatch.streaming.config.settings import duration_s_arg, parse_timezone, port_arg
from fencewatch.streaming.ingest.consumer_offsets.mapping import ABSENT_EPOCH_MODES, Bridge, TopicNames
from fencewatch.streaming.ingest.consumer_offsets.records import RecordDecodeError, decode, kafka_json
from fencewatch.streaming.ingest.consumer_offsets.topic_names import load_topic_ids
from fencewatch.streaming.ingest.request_log import BATCH_LINES, RequestLogBridge, events_json_lines
from fencewatch.streaming.commands.bridge_loop import (DEFAULT_HEARTBEATS_TOPIC, DEFAULT_OFFSETS_TOPIC,
                                                      DEFAULT_SOURCE_TOPIC, POLL_TIMEOUT_S, run_bridge,
                                                      run_request_log_bridge, tune_gc)

__all__ = ["register", "run_bridge", "run_from_file", "run_from_request_log", "run_request_log_bridge",
           "parse_client_config", "tune_gc"]

log = logging.getLogger(__name__)

DEFAULT_METRICS_PORT = 9465  # the job's 9464 plus one: both run on one host


def register(subparsers: Any) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "bridge",
        help="read a cluster's __consumer_offsets and republish them as fencewatch events (docs/contract.md §1)",
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
    src.add_argument("--metrics-port", type=port_arg, metavar="PORT",
                     help="live: serve /metrics, /healthz and /readyz here (default: sinks.metrics_port when set "
                          f"in the environment, else {DEFAULT_METRICS_PORT}; 0 = any free port) on sinks.metrics_host "
                          "(default 127.0.0.1)")
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
    m.add_argument("--cluster", help="value of the events' cluster field and of its series' cluster label "
                                     "(default: omitted = \"default\")")
    m.add_argument("--absent-assignment-epochs", choices=ABSENT_EPOCH_MODES, default="derive",
                   help="records without KIP-1251 epochs: let the monitor derive them (default), or write "
                        "max(member epoch, 0) as a 4.3 broker loading them would")
    pf = p.add_argument_group("partition facts")
    pf.add_argument("--partition-poll-interval", type=duration_s_arg, default=60.0, metavar="DURATION",
                    help="live: poll log start/end offsets of committed partitions this often (60 = 60s, 5m; "
                         "0 = off; default: 60s)")
    pf.add_argument("--probe-budget", type=int, default=64, metavar="N",
                    help="record reads per partition and poll to locate leader epochs (0 = no probing; default: %(default)s)")
    p.set_defaults(func=main)
    return p


def main(args: argparse.Namespace) -> int:
    if args.cluster is not None and not args.cluster.strip():
        print("fencewatch bridge: --cluster must not be empty (it is a label value); leave it out for \"default\"",
              file=sys.stderr)
        return 2
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
    cfg = _live_config(args.bootstrap_servers, conf)
    metrics = _bridge_metrics(cfg, args)
    try:
        metrics.start()
    except OSError as exc:  # the port is taken
        print(f"fencewatch bridge: cannot serve metrics on {metrics.host}:{metrics.port}: {exc}", file=sys.stderr)
        return 2
    try:
        return _run_live(args, _client_config(cfg), topic_names, tz, metrics)
    finally:
        metrics.close()


def _run_live(args: argparse.Namespace, conf: dict[str, Any], topic_names: TopicNames, tz: Any, metrics: Any) -> int:
    if args.request_log_topic:
        return run_request_log_bridge(conf, args.request_log_topic, RequestLogBridge(topic_names, tz=tz,
                                                                                     cluster=args.cluster),
                                      heartbeats_topic=args.heartbeats_topic, offsets_topic=args.offsets_topic,
                                      stop_at_end=args.stop_at_end, metrics=metrics)
    return run_bridge(conf, topic_names=topic_names, source_topic=args.source_topic,
                      heartbeats_topic=args.heartbeats_topic, offsets_topic=args.offsets_topic,
                      cluster=args.cluster, absent_assignment_epochs=args.absent_assignment_epochs,
                      stop_at_end=args.stop_at_end, partition_poll_interval=args.partition_poll_interval,
                      probe_budget=args.probe_budget, metrics=metrics)


def metrics_port(args: argparse.Namespace, cfg: Any, environ: Mapping[str, str] = os.environ) -> int:
    """``--metrics-port``, else ``sinks.metrics_port`` when the environment sets it (a pod's
    manifest does), else 9465: not the job's default, so both run on one host."""
    if args.metrics_port is not None:
        return args.metrics_port
    return cfg.sinks.metrics_port if environ.get("FENCEWATCH_SINKS__METRICS_PORT") else DEFAULT_METRICS_PORT


def _bridge_metrics(cfg: Any, args: argparse.Namespace) -> Any:
    """The bridge's exporter on :func:`metrics_port`; the probes' bounds from ``sinks.health_*``."""
    from fencewatch.sinks.bridge_metrics import BridgeMetrics
    from fencewatch.streaming.runtime.probes import health_config

    return BridgeMetrics("request_log" if args.request_log_topic else "consumer_offsets", host=cfg.sinks.metrics_host,
                         port=metrics_port(args, cfg), health=health_config(cfg, POLL_TIMEOUT_S), cluster=args.cluster)


# ---------------------------------------------------------------------------
# configuration helpers
# ---------------------------------------------------------------------------

def _live_config(bootstrap: str, conf: dict[str, str]) -> Any:
    """The one Config (environment, then these flags): -X and --command-config merged over the
    environment's ``streaming.kafka``; a ConfigError for what cannot work."""
    from fencewatch.streaming.config import settings as cfgmod

    return cfgmod.load_config(overrides={"streaming": {"bootstrap_servers": bootstrap, "kafka": conf}})


def _client_config(cfg: Any) -> dict[str, Any]:
    """Every client's settings, translated once as for every fencewatch client
    (``config.kafka_client_config``): Java names such as a PLAIN/SCRAM ``sasl.jaas.config`` work."""
    from fencewatch.streaming.config import settings as cfgmod

    return cfgmod.kafka_client_config(cfg, "consumer")


def _translated_client_config(bootstrap: str, conf: dict[str, str]) -> dict[str, Any]:
    """-X and --command-config merged over the environment's ``streaming.kafka``, translated."""
    return _client_config(_live_config(bootstrap, conf))


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
    """Request-log lines -> contract §1 events as JSON lines (every event of line n has event id
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

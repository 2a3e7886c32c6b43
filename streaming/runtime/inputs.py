"""The query's inputs: every configured source read and routed into rows of ``columns.ROUTED``
(``--source events``, ``consumer-offsets``, ``request-log``, or a list), with the per-batch record
limit and the tasks each micro-batch is read in. Which source routes inside its reader and which
through the ``mapInArrow`` router is decided once, by :func:`router_sources`; which Kafka reader
(Spark's connector or ``fencewatch-kafka``) once, by :func:`kafka_source`."""
from __future__ import annotations

import functools
import logging

from fencewatch.streaming.config import settings as cfgmod

log = logging.getLogger(__name__)


def build_inputs(spark, cfg: cfgmod.Config):
    """The router's output rows (``schemas.ROUTED``) of every configured source, unioned
    (``--source request-log,consumer-offsets``): sources read by ``fencewatch-kafka`` route inside
    the source (``routed_source``), the others through the ``mapInArrow`` router."""
    from fencewatch.streaming.runtime.columns import ROUTED
    from fencewatch.streaming.runtime.routing import make_router

    s = cfg.streaming
    options = {"startingOffsets": s.starting_offsets, "failOnDataLoss": str(s.fail_on_data_loss).lower(),
               **batch_limit_options(cfg, spark), **task_options(spark, cfg)}
    options.update(cfgmod.kafka_client_config(cfg, "source"))
    start = _seeded_start(spark, cfg)
    routed, raw = [], []
    sources, through_router = cfgmod.source_list(s.source), router_sources(spark, cfg)
    alone = len([n for n in sources if n in through_router]) == 1  # the router's only input
    for name in sources:
        if name not in through_router:
            routed.append(_routed_event_inputs(spark, cfg, start(options, s.heartbeats_topic, s.offsets_topic)))
        elif name == "events":
            raw.append(_event_inputs(spark, cfg, start(options, s.heartbeats_topic, s.offsets_topic), alone))
        elif name == "consumer-offsets":
            raw.append(_consumer_offsets_inputs(spark, cfg, options))
        elif name == "request-log":
            from fencewatch.streaming.runtime.request_log_input import request_log_inputs

            # With __consumer_offsets, membership comes from the coordinator's records (exact epochs).
            raw.append(request_log_inputs(spark, cfg, start(options, s.request_log_topic), _topic_ids(cfg),
                                          membership="consumer-offsets" not in sources,
                                          implementation=kafka_source(spark, cfg).source,
                                          metadata=cfgmod.kafka_client_config(cfg, "admin")))
        else:
            raise cfgmod.ConfigError(f"unknown streaming.source {name!r}")
    if raw:
        # ``caught_up`` (see hold.Hold): only the events source knows it; the others say "unknown"
        # (the router reads a missing column as one).
        if len(raw) > 1:
            raw = [f if "caught_up" in f.columns else f.withColumn("caught_up", _null_bool()) for f in raw]
        routed.append(_union(raw).mapInArrow(make_router(s.input_format, registry=_registry(cfg, "decoder"),
                                                         group_buckets=s.group_buckets, kafka_topics=_ranks(cfg)),
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


def _ranks(cfg: cfgmod.Config) -> tuple[tuple[str, str, int], ...]:
    """The events topics as (topic, source name, rank in seq = offset * 4 + rank)."""
    s = cfg.streaming
    return (s.heartbeats_topic, "heartbeats", 0), (s.offsets_topic, "offsets", 1)


def _event_inputs(spark, cfg: cfgmod.Config, options: dict, alone: bool = False):
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
    src = _few_partitions(spark, read_kafka_stream(spark, bootstrap=s.bootstrap_servers, topics=topics,
                                                   options={**options, "includeCaughtUp": "true"},
                                                   implementation=kafka_source(spark, cfg).source))
    topic = F.col("topic")
    record_ts = (F.unix_micros(F.col("timestamp")) / 1000).cast("long").alias("record_ts")
    if alone and kafka_source(spark, cfg).connector:
        # No string per record in the JVM: seq, event id and source are made by the router, from
        # the offset, partition and topic's rank (a subscription to the two topics reads no other).
        # Each string column cost the JVM its making and Arrow its transfer, and pandas a Python
        # object per record (docs/decisions.md, issue 34).
        return src.select(F.col("value"), F.col("offset"), F.col("partition"),
                          F.when(topic == s.heartbeats_topic, 0).otherwise(1).alias("rank"), record_ts)
    rank = F.when(topic == s.heartbeats_topic, 0).when(topic == s.offsets_topic, 1).otherwise(2)
    return src.select(
        F.col("value"),
        (F.col("offset") * 4 + rank).alias("seq"),
        F.concat_ws("/", topic, F.col("partition").cast("string"), F.col("offset").cast("string")).alias("event_id"),
        # None: the router makes a record's coordinates from its event id when it needs them (not
        # for the commits of the fast path, most records); a column of them cost the JVM a string
        # per record, and Arrow and pandas its transfer (docs/decisions.md, issue 34).
        F.lit(None).cast("string").alias("coords"),
        F.when(topic == s.heartbeats_topic, "heartbeats").when(topic == s.offsets_topic, "offsets")
        .otherwise("other").alias("source"),
        record_ts,
        F.lit(None).cast("string").alias("bad_reason"),
        F.col("caught_up") if "caught_up" in src.columns else _null_bool().alias("caught_up"),
    )


def router_sources(spark, cfg: cfgmod.Config) -> tuple[str, ...]:
    """The configured sources whose records go through the ``mapInArrow`` router: all but the
    events source when that source routes inside ``read``, which it does when it is ours (not
    Spark's connector) and no Schema Registry decoder is needed (the registry client lives in the
    router). The one place this is decided: :func:`build_inputs` and :func:`_collect_batching`
    both ask."""
    sources = cfgmod.source_list(cfg.streaming.source)
    in_source = not cfg.streaming.schema_registry and not kafka_source(spark, cfg).connector
    return tuple(name for name in sources if not (name == "events" and in_source))


def _routed_event_inputs(spark, cfg: cfgmod.Config, options: dict):
    """``--source events`` read by ``fencewatch-routed``: routed rows straight from the source."""
    from fencewatch.streaming.runtime.routed_source import RouterSpec, read_routed_stream

    s = cfg.streaming
    router = RouterSpec(((s.heartbeats_topic, "heartbeats", 0), (s.offsets_topic, "offsets", 1)),
                        s.input_format, group_buckets=s.group_buckets)
    return _few_partitions(spark, read_routed_stream(
        spark, bootstrap=s.bootstrap_servers, topics=[s.heartbeats_topic, s.offsets_topic], router=router,
        options={**options, "includeCaughtUp": "true"}))


# What one core judges through the whole query, rounded down: the first micro-batch's limit per
# core and trigger second (docs/decisions.md, "How much a micro-batch reads").
EVENTS_PER_CORE_SECOND = 5_000


def default_max_offsets(trigger_ms: int, cores: int) -> int:
    """The first micro-batch's limit when none is configured: about one trigger interval of work
    on a slow machine; the limit then follows the job's speed (:func:`batch_limit_options`)."""
    return max(1_000, int(EVENTS_PER_CORE_SECOND * max(1, cores) * max(trigger_ms, 100) / 1000))


def batch_limit_options(cfg: cfgmod.Config, spark) -> dict[str, str]:
    """The sources' per-batch record limit. ``max_offsets_per_trigger`` set: that, fixed. Else,
    on our source, adaptive (``sources.pacing``): while a backlog is read (a restart after
    downtime, a slow hour) each micro-batch reads what the last ones show takes about
    ``catch_up_batch_ms``, at most ``max_batch_records``; caught up, batches are as small as the
    input. Spark's own connector has no adaptive limit of its own: it gets the first batch's, and
    the job sets the next ones as the batches end (:func:`connector_pacer`)."""
    s = cfg.streaming
    if s.max_offsets_per_trigger:
        return {"maxOffsetsPerTrigger": str(s.max_offsets_per_trigger)}
    first = min(s.max_batch_records, default_max_offsets(
        cfgmod.parse_duration_ms(s.trigger_interval, "streaming.trigger_interval"),
        spark.sparkContext.defaultParallelism))
    if kafka_source(spark, cfg).connector:
        return {"maxOffsetsPerTrigger": str(first)}
    return {"maxOffsetsPerTrigger": str(s.max_batch_records), "targetBatchDurationMs": str(s.catch_up_batch_ms),
            "initialOffsetsPerTrigger": str(first)}


def task_options(spark, cfg: cfgmod.Config) -> dict[str, str]:
    """Our source reads a micro-batch in one task per core, each with about the same number of
    records (``sources.kafka.planning.balance``); Spark's connector is coalesced to the cores instead
    (:func:`_few_partitions`)."""
    return {} if kafka_source(spark, cfg).connector else {
        "tasksPerTrigger": str(max(1, spark.sparkContext.defaultParallelism))}


def _few_partitions(spark, src):
    """At most one input task per core. Spark's Kafka connector makes one partition per
    topic-partition (ours already makes one per core, ``tasksPerTrigger``: there this changes
    nothing), and every task pays fixed Python costs (a worker per Python stage, pyspark's per-task
    set-up), which on local[2] outweighed the work of small micro-batches (docs/decisions.md).
    ``coalesce`` only merges partitions into tasks: each is still read whole, by offset range."""
    return src.coalesce(max(1, spark.sparkContext.defaultParallelism))


_CHOICES: dict = {}


def kafka_source(spark, cfg: cfgmod.Config):
    """Which reader the job's Kafka sources use, and why (``sources.connector.choose``):
    ``streaming.kafka_source`` against what this session loads and what the checkpoint was written
    with. The one place it is decided; asked again, it answers the same."""
    from fencewatch.streaming.runtime.checkpoint import recorded_source
    from fencewatch.streaming.sources.connector import choose, connector_dir, provider_loadable

    s = cfg.streaming
    key = (id(spark), s.kafka_source, s.checkpoint_location, s.source, s.consumer_offsets_topic)
    if key not in _CHOICES:
        jars = spark.sparkContext.getConf().get("spark.jars", "") or ""
        internal = s.consumer_offsets_topic if ("consumer-offsets" in cfgmod.source_list(s.source)
                                                and s.consumer_offsets_topic.startswith("__")) else None
        _CHOICES[key] = choose(s.kafka_source, loadable=provider_loadable(spark), spark_version=spark.version,
                               jars_added=str(connector_dir(spark.version)) in jars,
                               recorded=recorded_source(spark, s.checkpoint_location), internal_topic=internal)
    return _CHOICES[key]


def connector_pacer(cfg: cfgmod.Config, spark):
    """The adaptive limit for Spark's connector (None: ``max_offsets_per_trigger`` fixes it), as
    the Python source builds it from :func:`batch_limit_options` (``sources.kafka.planning.pacer_for``)."""
    from fencewatch.streaming.sources.kafka.planning import DEFAULT_PACED_CAP, PACED_FLOOR
    from fencewatch.streaming.sources.pacing import BatchPacer

    s = cfg.streaming
    if s.max_offsets_per_trigger:
        return None
    first = int(batch_limit_options(cfg, spark)["maxOffsetsPerTrigger"])
    cap = s.max_batch_records or DEFAULT_PACED_CAP
    return BatchPacer(target_ms=s.catch_up_batch_ms, floor=min(PACED_FLOOR, cap), cap=cap, limit=first)


def _topic_ids(cfg: cfgmod.Config) -> dict[str, str]:
    """Topic id -> name from cluster metadata (KIP-848 records name topics by id)."""
    from confluent_kafka import TopicCollection
    from confluent_kafka.admin import AdminClient

    admin = AdminClient(cfgmod.kafka_client_config(cfg, "admin"))
    names = list(admin.list_topics(timeout=10).topics)
    out = {}
    if cfg.streaming.topic_ids_file:
        from fencewatch.streaming.ingest.consumer_offsets.topic_names import load_topic_ids

        out.update(load_topic_ids(cfg.streaming.topic_ids_file))
    for name, fut in admin.describe_topics(TopicCollection(names), request_timeout=10).items():
        try:
            out[str(fut.result().topic_id)] = name
        except Exception as exc:  # a topic deleted meanwhile: its id stays unresolved (written as a UUID)
            log.debug("describe %s: %s", name, exc)
    return out


def _consumer_offsets_inputs(spark, cfg: cfgmod.Config, options: dict):
    """``--source consumer-offsets``: the cluster's ``__consumer_offsets`` decoded by the bridge."""
    from pyspark.sql import functions as F

    from fencewatch.streaming.sources import read_kafka_stream
    from fencewatch.streaming.runtime.state_fn import make_bridge_mapper

    s = cfg.streaming
    options = {**options, "startingOffsets": "earliest"} if s.starting_offsets == "latest" else options
    src = _few_partitions(spark, read_kafka_stream(spark, bootstrap=s.bootstrap_servers,
                                                   topics=[s.consumer_offsets_topic], options=options,
                                                   implementation=kafka_source(spark, cfg).source))
    records = src.select("key", "value", "topic", "partition", "offset",
                         (F.unix_micros(F.col("timestamp")) / 1000).cast("long").alias("record_ts"))
    schema = ("value binary, seq long, event_id string, coords string, source string, record_ts long, "
              "bad_reason string")
    # the admin settings go with the mapper: a worker meeting a topic created after the start
    # learns its id from cluster metadata (the start's names are _topic_ids')
    return records.mapInPandas(make_bridge_mapper(_topic_ids(cfg), cluster=cfgmod.job_cluster(s),
                                                  metadata=cfgmod.kafka_client_config(cfg, "admin")), schema)


def group_sources(source: str) -> tuple[str, ...]:
    """The router's source names that feed group keys, for the cross-topic hold (``hold.Hold``)."""
    names = {"events": ("heartbeats", "offsets"), "consumer-offsets": ("consumer_offsets",),
             "request-log": ("request_log",)}
    return tuple(n for s in cfgmod.source_list(source) for n in names.get(s, ()))


def _registry(cfg: cfgmod.Config, role: str):
    """The Schema Registry decoder (input) or encoder (alerts) when one is configured, else None."""
    settings = cfg.streaming.schema_registry
    if not settings:
        return None
    from fencewatch.streaming.ingest.schema_registry import RegistryAlertEncoder, RegistryEventDecoder

    return RegistryEventDecoder(settings) if role == "decoder" else RegistryAlertEncoder(settings)

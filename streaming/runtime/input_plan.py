"""The query's input plan: what its inputs are, worked out once per query start.

:class:`InputPlan` is built from (spark, cfg) by :meth:`InputPlan.build`, the one place that asks
the session and the checkpoint (which Kafka reader, how many cores) and the cluster (topic ids);
the rest is pure over what those gave (:meth:`InputPlan.from_facts`). The query's inputs
(``inputs.build_inputs``), its output batching and the connector's pacer (``query.start_query``)
and the start-up line (``query.startup_line``) all read the same plan, so each decision is made
once and none of them can disagree with another: which reader, which sources go through the
``mapInArrow`` router, the per-batch limits, each events topic's rank in ``seq``.

Why a value and not functions asked again: the reader was resolved at nine call sites, kept cheap
by a module cache keyed on ``id(spark)`` (a session's id can be reused once it is gone); a plan is
made at each start and dropped with it.

Pure but for :meth:`InputPlan.build`; no pyspark at import (``routed_source`` imports
:data:`OTHER` on the executors), the Spark columns are built by :func:`rank_column` and
:func:`source_column` when asked.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Mapping, NamedTuple

from fencewatch.streaming.config import settings as cfgmod

if TYPE_CHECKING:
    from fencewatch.streaming.sources.connector import SourceChoice
    from fencewatch.streaming.sources.pacing import BatchPacer

log = logging.getLogger(__name__)


class TopicRank(NamedTuple):
    """An events topic, the router's name for its records and its rank: ``seq = offset * 4 + rank``,
    so records of the two topics at one offset keep one order (contract §1)."""

    topic: str
    source: str
    rank: int


#: (source, rank) of a record from a topic no :func:`topic_ranks` names. A guard: the events
#: source subscribes to the ranked topics only.
OTHER = ("other", 2)


def topic_ranks(s: cfgmod.StreamingConfig) -> tuple[TopicRank, ...]:
    """The events topics' ranks, declared once: the Spark rank column (:func:`rank_column`), the
    router's (``routing.make_router``'s ``kafka_topics``) and the routed source's
    (``routed_source.RouterSpec``) are all built from this."""
    return TopicRank(s.heartbeats_topic, "heartbeats", 0), TopicRank(s.offsets_topic, "offsets", 1)


def rank_column(ranks: tuple[TopicRank, ...], topic, *, only_these: bool = False):
    """The Spark column of a record's rank from its ``topic`` column. ``only_these``: the
    subscription reads no other topic, and the last rank is the ``otherwise`` (one comparison
    fewer per record than a guard for :data:`OTHER`)."""
    from pyspark.sql import functions as F

    head, last = (ranks[:-1], ranks[-1]) if only_these else (ranks, None)
    col = F.when(topic == head[0].topic, head[0].rank) if head else None
    for r in head[1:]:
        col = col.when(topic == r.topic, r.rank)
    fallback = last.rank if last is not None else OTHER[1]
    return F.lit(fallback) if col is None else col.otherwise(fallback)


def source_column(ranks: tuple[TopicRank, ...], topic):
    """The Spark column of a record's source name from its ``topic`` column (:data:`OTHER`'s
    for a topic not ranked)."""
    from pyspark.sql import functions as F

    col = F.when(topic == ranks[0].topic, ranks[0].source)
    for r in ranks[1:]:
        col = col.when(topic == r.topic, r.source)
    return col.otherwise(OTHER[0])


# What one core judges through the whole query, rounded down: the first micro-batch's limit per
# core and trigger second (docs/decisions.md, "How much a micro-batch reads").
EVENTS_PER_CORE_SECOND = 5_000

#: The sources whose records name topics by id (KIP-848 records, request-log lines v10+).
_NAMING_BY_ID = ("consumer-offsets", "request-log")


def default_max_offsets(trigger_ms: int, cores: int) -> int:
    """The first micro-batch's limit when none is configured: about one trigger interval of work
    on a slow machine; the limit then follows the job's speed (:func:`batch_limits`)."""
    return max(1_000, int(EVENTS_PER_CORE_SECOND * max(1, cores) * max(trigger_ms, 100) / 1000))


def batch_limits(s: cfgmod.StreamingConfig, connector: bool, cores: int) -> dict[str, str]:
    """The sources' per-batch record limit. ``max_offsets_per_trigger`` set: that, fixed. Else,
    on our source, adaptive (``sources.pacing``): while a backlog is read (a restart after
    downtime, a slow hour) each micro-batch reads what the last ones show takes about
    ``catch_up_batch_ms``, at most ``max_batch_records``; caught up, batches are as small as the
    input. Spark's own connector has no adaptive limit of its own: it gets the first batch's, and
    the job sets the next ones as the batches end (:func:`connector_pacer`)."""
    if s.max_offsets_per_trigger:
        return {"maxOffsetsPerTrigger": str(s.max_offsets_per_trigger)}
    first = min(s.max_batch_records, default_max_offsets(
        cfgmod.parse_duration_ms(s.trigger_interval, "streaming.trigger_interval"), cores))
    if connector:
        return {"maxOffsetsPerTrigger": str(first)}
    return {"maxOffsetsPerTrigger": str(s.max_batch_records), "targetBatchDurationMs": str(s.catch_up_batch_ms),
            "initialOffsetsPerTrigger": str(first)}


def router_sources(s: cfgmod.StreamingConfig, connector: bool) -> tuple[str, ...]:
    """The configured sources whose records go through the ``mapInArrow`` router: all but the
    events source when that source routes inside ``read``, which it does when it is ours (not
    Spark's connector) and no Schema Registry decoder is needed (the registry client lives in the
    router)."""
    in_source = not s.schema_registry and not connector
    return tuple(name for name in cfgmod.source_list(s.source) if not (name == "events" and in_source))


@dataclass(frozen=True, slots=True)
class InputPlan:
    """What the query's inputs are, decided once per query start (module docstring). The
    mappings are read, never changed."""

    sources: tuple[str, ...]  # streaming.source, in order
    reader: SourceChoice  # which Kafka reader, and why (sources.connector.choose)
    through_router: tuple[str, ...]  # the sources read into the mapInArrow router (router_sources)
    batch_limits: Mapping[str, str]  # the sources' per-batch limit options (batch_limits)
    tasks: Mapping[str, str]  # our source: one input task per core (tasksPerTrigger); the connector: none
    cores: int  # the session's default parallelism: input tasks are coalesced to it
    ranks: tuple[TopicRank, ...]  # the events topics' ranks (topic_ranks)
    topic_ids: Mapping[str, str] | None  # topic id -> name at this start; None: no source names topics by id

    @property
    def connector(self) -> bool:
        """Spark's own connector reads Kafka (else ``fencewatch-kafka``)."""
        return self.reader.connector

    @property
    def read_by(self) -> str:
        """The start-up line's "Kafka read by ...": the reader and why."""
        return self.reader.describe()

    @classmethod
    def from_facts(cls, cfg: cfgmod.Config, reader: SourceChoice, cores: int,
                   topic_ids: Mapping[str, str] | None = None) -> InputPlan:
        """The plan, given what :meth:`build` learns from the session, the checkpoint and the cluster."""
        s = cfg.streaming
        sources = cfgmod.source_list(s.source)
        cores = max(1, cores)
        return cls(sources=tuple(sources), reader=reader, through_router=router_sources(s, reader.connector),
                   batch_limits=batch_limits(s, reader.connector, cores),
                   tasks={} if reader.connector else {"tasksPerTrigger": str(cores)}, cores=cores,
                   ranks=topic_ranks(s), topic_ids=topic_ids if any(n in sources for n in _NAMING_BY_ID) else None)

    @classmethod
    def build(cls, spark, cfg: cfgmod.Config) -> InputPlan:
        """The plan for a query start: the reader (``streaming.kafka_source`` against what this
        session loads and what the checkpoint was written with; refuses a checkpoint written with
        the other reader), the session's cores and, when a source names topics by id, their names
        from cluster metadata."""
        reader = resolve_reader(spark, cfg)
        sources = cfgmod.source_list(cfg.streaming.source)
        ids = cluster_topic_ids(cfg) if any(n in sources for n in _NAMING_BY_ID) else None
        plan = cls.from_facts(cfg, reader, spark.sparkContext.defaultParallelism, ids)
        log.debug("input plan: Kafka read by %s; through the router: %s; limits %s", plan.read_by,
                  ", ".join(plan.through_router) or "none", dict(plan.batch_limits))
        return plan


def resolve_reader(spark, cfg: cfgmod.Config) -> SourceChoice:
    """Which reader the job's Kafka sources use, and why (``sources.connector.choose``). Asked by
    :meth:`InputPlan.build`, once per query start: the plan carries the answer."""
    from fencewatch.streaming.runtime.checkpoint import recorded_source
    from fencewatch.streaming.sources.connector import choose, connector_dir, provider_loadable

    s = cfg.streaming
    jars = spark.sparkContext.getConf().get("spark.jars", "") or ""
    internal = s.consumer_offsets_topic if ("consumer-offsets" in cfgmod.source_list(s.source)
                                            and s.consumer_offsets_topic.startswith("__")) else None
    return choose(s.kafka_source, loadable=provider_loadable(spark), spark_version=spark.version,
                  jars_added=str(connector_dir(spark.version)) in jars,
                  recorded=recorded_source(spark, s.checkpoint_location), internal_topic=internal)


def cluster_topic_ids(cfg: cfgmod.Config) -> dict[str, str]:
    """Topic id -> name from cluster metadata and ``streaming.topic_ids_file`` (KIP-848 records
    name topics by id). A worker meeting a topic created later learns its id itself
    (``topic_metadata.names_learner``)."""
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


def connector_pacer(cfg: cfgmod.Config, plan: InputPlan) -> BatchPacer | None:
    """The adaptive limit for Spark's connector (None: ``max_offsets_per_trigger`` fixes it), as
    the Python source builds it from the same limits (``sources.kafka.planning.pacer_for``),
    starting at the plan's first-batch limit."""
    from fencewatch.streaming.sources.kafka.planning import DEFAULT_PACED_CAP, PACED_FLOOR
    from fencewatch.streaming.sources.pacing import BatchPacer

    s = cfg.streaming
    if s.max_offsets_per_trigger:
        return None
    cap = s.max_batch_records or DEFAULT_PACED_CAP
    return BatchPacer(target_ms=s.catch_up_batch_ms, floor=min(PACED_FLOOR, cap), cap=cap,
                      limit=int(plan.batch_limits["maxOffsetsPerTrigger"]))

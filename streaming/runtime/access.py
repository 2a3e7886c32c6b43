"""What the job's Kafka principal must be allowed to do, for a Config: the one list that
``fencewatch doctor`` checks and docs/deploy.md's ACL table shows (a test keeps them equal).

Each :class:`Need` is a resource and the operations on it, in Kafka's ACL names (``READ``
implies ``DESCRIBE``, as in Kafka's authorizer). Why each exists:

- the input topics are read by assignment only: the sources keep their offsets in the Spark
  checkpoint and never join, commit to or fetch offsets of a group. Yet fencewatch's own
  source (used when Spark's connector is not on the classpath) and the outputs' read-back
  consumer are librdkafka consumers with a ``group.id``, and librdkafka looks that group's
  coordinator up (FindCoordinator), which Kafka answers GROUP_AUTHORIZATION_FAILED without
  Describe on the group; the source then fails the read (seen on Apache Kafka 4.2 with ACLs:
  ``tests/streaming/test_doctor.py``). Spark's connector (Java's consumer) looks up no
  coordinator for assigned partitions without commits;
- the outputs are written by an idempotent producer, which from Kafka 2.8 needs Write on a
  topic and no cluster IdempotentWrite; they are also *read*: after a crash between producing a
  micro-batch and logging it done, the writer reads the batch's records back from the output
  topics so that none is written twice (``sinks.kafka.KafkaOutputs``);
- request-log lines (heartbeats, OffsetCommit v10) and ``__consumer_offsets`` records name
  topics by id: names come from cluster metadata, i.e. Describe on the monitored topics,
  unless ``streaming.topic_ids_file`` gives them;
- no transactional id: the outputs are exactly-once through the sink log, not transactions.

The last two needs (``required=False``) serve only the doctor's own checks, which say what
they could not check without them: the brokers' ``group.coordinator.rebalance.protocols``
(DescribeConfigs on the cluster) and how many groups use the KIP-848 protocol (Describe on
groups; Describe on the cluster lists them all as well).
"""
from __future__ import annotations

from dataclasses import dataclass

from fencewatch.sinks.kafka import READBACK_GROUP
from fencewatch.streaming.config import settings as cfgmod

CLUSTER = "kafka-cluster"  # the one cluster resource's name in Kafka's ACLs
ALL = "*"


#: The Python source's group id prefix (``sources.kafka.GROUP_ID_PREFIX``; not imported: pyspark).
SOURCE_GROUP_PREFIX = "fencewatch-kafka-source"


@dataclass(frozen=True, slots=True)
class Need:
    resource: str  # topic | cluster | group
    name: str  # a topic's or group's name (or prefix), "*" (every topic or group), or CLUSTER
    operations: tuple[str, ...]  # Kafka's AclOperation names
    why: str
    required: bool = True  # False: only `fencewatch doctor`'s own checks use it
    prefixed: bool = False  # name is a prefix (kafka-acls.sh --resource-pattern-type prefixed)


def job_needs(cfg: cfgmod.Config) -> list[Need]:
    """The ACLs of the job's principal for ``cfg``: inputs per ``streaming.source``, outputs per
    ``sinks``, topic metadata where ids must be resolved, then the doctor's optional ones."""
    s, k = cfg.streaming, cfg.sinks
    sources = cfgmod.source_list(s.source)
    needs = []
    if "events" in sources:
        needs += [Need("topic", t, ("READ",), "input events, --source events")
                  for t in (s.heartbeats_topic, s.offsets_topic)]
    if "consumer-offsets" in sources:
        needs.append(Need("topic", s.consumer_offsets_topic, ("READ",),
                          "the group coordinator's records, --source consumer-offsets"))
    if "request-log" in sources:
        needs.append(Need("topic", s.request_log_topic, ("READ",), "the brokers' request-log lines, --source request-log"))
    if ({"consumer-offsets", "request-log"} & set(sources)) and not s.topic_ids_file:
        needs.append(Need("topic", ALL, ("DESCRIBE",),
                          "topic ids -> names of the monitored topics, unless streaming.topic_ids_file gives them"))
    for topic in (k.alerts_topic, k.dlq_topic, k.verdicts_topic, k.groups_topic):
        if topic:
            needs.append(Need("topic", topic, ("WRITE", "READ"),
                              "an output, read back after a crash so that no record is written twice"))
    group = s.kafka.get("group.id")
    needs.append(Need("group", group or SOURCE_GROUP_PREFIX, ("DESCRIBE",),
                      "the group id fencewatch's Kafka source consumers carry, assign only; Spark's connector needs none",
                      prefixed=not group))
    if any(t for t in (k.alerts_topic, k.dlq_topic, k.verdicts_topic, k.groups_topic)):
        needs.append(Need("group", READBACK_GROUP, ("DESCRIBE",), "the group id of the outputs' read-back consumer, assign only"))
    needs += [Need("cluster", CLUSTER, ("DESCRIBE", "DESCRIBE_CONFIGS"),
                   "for fencewatch doctor only: group.coordinator.rebalance.protocols, is KIP-848 on", required=False),
              Need("group", ALL, ("DESCRIBE",), "for fencewatch doctor only: how many groups use KIP-848", required=False)]
    return needs

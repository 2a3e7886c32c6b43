"""The output topics of a Config, checked (and, with ``sinks.create_topics``, created) before the
job's first micro-batch: ``fencewatch run`` calls :func:`ensure_output_topics` before Spark starts,
``fencewatch doctor`` prints the same problems as FAIL lines (docs/decisions.md, "Output topics
checked at start").

A cluster that does not answer is not a missing topic: the check says so and the job starts (its
first batch waits for the brokers as before); a topic that is not there, or that this principal
may not write, is said in one line with the fix.
"""
from __future__ import annotations

import functools
import logging

from fencewatch.sinks.kafka_topics import (MISSING_TOPIC_ERRORS, OutputTopic, OutputTopicError, TopicState,
                                           create_topics, deleted_topics, describe_topics, topic_problem)
from fencewatch.streaming.config import settings as cfgmod

log = logging.getLogger(__name__)

CHECK_TIMEOUT_S = 10.0  # DescribeTopics' own timeout: a cluster slower than this is "not answering"


def output_topics(cfg: cfgmod.Config) -> list[OutputTopic]:
    """Every topic the job writes (``sinks.kafka.KafkaOutputs``), in the order they are named."""
    k = cfg.sinks
    roles = (("verdicts", k.verdicts_topic), ("alerts", k.alerts_topic), ("dlq", k.dlq_topic),
             ("groups", k.groups_topic))
    out: dict[str, OutputTopic] = {}
    for role, name in roles:
        if name and name not in out:
            # the groups topic keeps each group's last snapshot: compacted, tombstones end a group
            out[name] = (OutputTopic(role, name, {"cleanup.policy": "compact"}) if role == "groups"
                         else OutputTopic(role, name))
    return list(out.values())


def unanswered(states: dict[str, TopicState]) -> str | None:
    """The client-side error (``_TRANSPORT``, ``_TIMED_OUT``...) when no broker answered, else None."""
    errors = {s.error for s in states.values() if s.error and s.error.startswith("_")} - MISSING_TOPIC_ERRORS
    return next(iter(sorted(errors)), None)


def topic_problems(cfg: cfgmod.Config, states: dict[str, TopicState]) -> list[tuple[OutputTopic, str]]:
    """(topic, one line) for each output topic the job could not write."""
    k, bootstrap, who = cfg.sinks, cfg.streaming.bootstrap_servers, cfgmod.principal(cfg)
    out = []
    for topic in output_topics(cfg):
        state = states.get(topic.name, TopicState(error="UNKNOWN_TOPIC_OR_PART"))
        problem = topic_problem(topic, state, bootstrap, principal=who, partitions=k.topic_partitions,
                                replication_factor=k.topic_replication_factor)
        if problem is not None:
            out.append((topic, problem))
    return out


def ensure_output_topics(cfg: cfgmod.Config, *, timeout_s: float = CHECK_TIMEOUT_S) -> None:
    """Check every output topic; create the missing ones with ``sinks.create_topics``. The first
    problem raises :class:`OutputTopicError` (its message: the one line to print)."""
    client = cfgmod.kafka_client_config(cfg, "admin")
    topics = output_topics(cfg)
    states = describe_topics(client, [t.name for t in topics], timeout_s=timeout_s)
    silent = unanswered(states)
    if silent is not None:
        log.warning("output topics not checked: %s did not answer within %.0f s (%s); the first micro-batch waits "
                    "for it", cfg.streaming.bootstrap_servers, timeout_s, silent)
        return
    k = cfg.sinks
    missing = [t for t in topics if states[t.name].error in MISSING_TOPIC_ERRORS]
    if missing and k.create_topics:
        created = create_topics(client, missing, partitions=k.topic_partitions,
                                replication_factor=k.topic_replication_factor, config=k.topic_config)
        for name in created:
            log.info("output topic %s created (%s partitions, replication factor %s; sinks.create_topics)", name,
                     k.topic_partitions or "the brokers' default", k.topic_replication_factor or "the brokers' default")
        states.update(describe_topics(client, [t.name for t in missing], timeout_s=timeout_s))
    problems = topic_problems(cfg, states)
    if problems:
        topic, line = problems[0]
        others = [t.name for t, _ in problems[1:]]
        raise OutputTopicError(topic.name, line + (f" (the same for {', '.join(others)})" if others else ""))
    log.info("output topics ready: %s", ", ".join(f"{t.name} ({states[t.name].partitions} partition(s))"
                                                  for t in topics))


def topics_gone(cfg: cfgmod.Config, *, timeout_s: float = CHECK_TIMEOUT_S):
    """``KafkaOutputs``' ``topics_gone``: of the names the producer found missing while the job
    ran, those DescribeTopics confirms are gone, each with the start check's line (docs/decisions.md,
    "An output topic deleted while the job runs"). The job does not recreate them, even with
    ``sinks.create_topics``: the line says a start does."""
    k = cfg.sinks
    return functools.partial(deleted_topics, cfgmod.kafka_client_config(cfg, "admin"),
                             partitions=k.topic_partitions, replication_factor=k.topic_replication_factor,
                             creates_at_start=k.create_topics, timeout_s=timeout_s)

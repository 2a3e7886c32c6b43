"""``run --source request-log``: broker request-log lines from a Kafka topic -> the router's input.

A log shipper writes each line of the brokers' ``kafka-request.log`` as one record's value
(contract §10); this module reads that topic and decodes the lines in a ``mapInPandas`` with the
bridge's ``RequestLogBridge`` in its stateless mode (``carry=False``): the member tracker
cannot live in a stateless mapper (micro-batches, restarts), so a heartbeat that leaves the
assignment unchanged becomes a ``member_assignment`` with ``"assigned": null`` and the
per-group state, which already models every member, resolves it
(``state.assignment.resolve_unchanged_assignment``; ``docs/request-log.md``).

Combined with ``consumer-offsets`` (``--source request-log,consumer-offsets``), membership
comes from the coordinator's own records (exact assignment epochs, session and rebalance
timeouts, leaves) and the request log gives commits (with the broker's answers) and
heartbeats only: the same transitions twice, once derived, would only add noise. Classic groups'
lines are kept either way: ``__consumer_offsets`` records a classic generation only when its
SyncGroup completes, and a LeaveGroup's ``member_left`` is the request itself, not derived, and
moves a group waiting for its SyncGroup back to PreparingRebalance (contract §1.1).
"""
from __future__ import annotations

import logging
from typing import Callable, Iterator, Mapping

import pandas as pd

from fencewatch.state.records import EventType
from fencewatch.streaming.sources.topic_metadata import names_learner

log = logging.getLogger(__name__)

SOURCE = "request_log"
MEMBERSHIP = frozenset({EventType.MEMBER_ASSIGNMENT, EventType.MEMBER_LEFT})
COLUMNS = ("value", "seq", "event_id", "coords", "source", "record_ts", "bad_reason")
SCHEMA = ("value binary, seq long, event_id string, coords string, source string, record_ts long, "
          "bad_reason string")
EVENTS_PER_LINE = 64  # seq = offset * 64 + i: a line's events stay in order, lines in offset order
#: Added to a ``__consumer_offsets`` record's seq (``state_fn.make_bridge_mapper``): at an equal ts
#: a group's request-log events come first, its records after (contract §1). A record is stamped
#: when the coordinator wrote it, a request-log line only once its response has gone: in the same
#: millisecond the commit was most often handled first. On the fence-heavy fidelity runs (Kafka
#: 4.2.2 and 4.4.0, 153,407 and 148,974 judged commit partitions) records first gave 340 and 278
#: disagreements, request-log lines first 0 and 13 (docs/decisions.md).
RECORDS_AFTER_LINES = 1 << 62
_LEAVE_GROUP_KEY = b'"requestHeader":{"requestApiKey":13,'  # (read where Kafka writes it, in the header)


def make_request_log_mapper(topic_ids: Mapping[str, str] | None = None, *, cluster: str | None = None,
                            tz=None, membership: bool = True, metadata: Mapping[str, str] | None = None) -> Callable:
    """The ``mapInPandas`` function: records (value, topic, partition, offset, record_ts) ->
    router input rows, one per contract §1 event; a broken line -> one row with ``bad_reason`` (the
    router sends it to the dead-letter topic); lines of other APIs or loggers -> nothing.
    ``membership`` False drops ``member_assignment`` / ``member_left``, but a LeaveGroup's.
    ``metadata``: an admin client's settings; a chunk of lines naming a topic id the names lack (a
    topic created after the job started) makes the worker learn every topic's id from cluster
    metadata, at most every ``topic_metadata.TOPIC_REFRESH_S``, and decode the chunk again (the decoder
    keeps no state across lines here: ``carry=False``)."""
    from fencewatch.streaming.ingest.consumer_offsets.mapping import TopicNames
    from fencewatch.streaming.ingest.request_log import BATCH_LINES, RequestLogBridge, event_json

    names = TopicNames(topic_ids or {})
    learned_names = names_learner(names, None if metadata is None else dict(metadata))

    def map_lines(batches: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
        bridge = RequestLogBridge(names, tz=tz, cluster=cluster, carry=False)
        problems = bridge.problems
        events_many = bridge.events_many
        for pdf in batches:
            cols: dict[str, list] = {c: [] for c in COLUMNS}
            value_c, seq_c, eid_c, coords_c, source_c, ts_c, bad_c = cols.values()

            def add(value, seq, eid, coords, ts, bad):
                value_c.append(value)
                seq_c.append(seq)
                eid_c.append(eid)
                coords_c.append(coords)
                source_c.append(SOURCE)
                ts_c.append(ts)
                bad_c.append(bad)

            records = list(zip(pdf["value"], pdf["topic"], pdf["partition"], pdf["offset"], pdf["record_ts"]))
            for start in range(0, len(records), BATCH_LINES):
                # the chunk's lines decoded in one call (``events_many``), then written in order
                chunk = []
                for value, topic, partition, offset, ts in records[start:start + BATCH_LINES]:
                    offset, ts = int(offset), int(ts)
                    chunk.append((None if value is None else bytes(value), offset, f"{topic}/{partition}/{offset}",
                                  f"{topic}[{partition}]@{offset}", ts))
                kept = [c for c in chunk if c[0] is not None]
                unresolved = bridge.unresolved_ids
                decoded = events_many([c[0] for c in kept], [c[2] for c in kept], [c[4] for c in kept])
                if bridge.unresolved_ids > unresolved and learned_names():
                    problems.clear()  # the chunk's own (drained after each chunk): made again below
                    decoded = events_many([c[0] for c in kept], [c[2] for c in kept], [c[4] for c in kept])
                per_line = iter(decoded)
                bad = {}
                while problems:  # at most one per line: a broken line stops there
                    eid, code, detail = problems.popleft()
                    bad[eid] = f"{code}(detail={detail[:200]})"
                for raw, offset, eid, coords, ts in chunk:
                    if raw is None:
                        add(None, offset * EVENTS_PER_LINE, eid, coords, ts, "MISSING_VALUE")
                        continue
                    events = next(per_line)
                    if bad and eid in bad:
                        add(raw, offset * EVENTS_PER_LINE, eid, coords, ts, bad[eid])
                        continue
                    for i, e in enumerate(events):
                        if membership or e.kind not in MEMBERSHIP or raw.find(_LEAVE_GROUP_KEY, 0, 200) >= 0:
                            # the router's JSON, straight from the decoder's Structs (no dict, no json.dumps)
                            add(event_json(e), offset * EVENTS_PER_LINE + i, eid, coords, ts, None)
            if value_c:  # an empty frame's columns are float64: pyspark 4.3 cannot convert them
                yield pd.DataFrame(cols, columns=list(COLUMNS))
        log.debug("request log: %s", bridge.summary())

    return map_lines


def request_log_inputs(spark, cfg, options: dict, topic_ids: Mapping[str, str] | None, *, membership: bool = True,
                       implementation: str = "auto", cores: int = 1, metadata: Mapping[str, str] | None = None):
    """The lines topic as router input (the columns every source gives, ``SCHEMA``), read by
    ``implementation`` in at most ``cores`` tasks (the query start's ``input_plan.InputPlan``
    gives both)."""
    from pyspark.sql import functions as F

    from fencewatch.streaming.config.settings import job_cluster, parse_timezone
    from fencewatch.streaming.sources import read_kafka_stream

    s = cfg.streaming
    src = read_kafka_stream(spark, bootstrap=s.bootstrap_servers, topics=[s.request_log_topic], options=options,
                            implementation=implementation)
    src = src.coalesce(max(1, cores))  # as inputs._few_partitions, and why
    records = src.select("value", "topic", "partition", "offset",
                         (F.unix_micros(F.col("timestamp")) / 1000).cast("long").alias("record_ts"))
    mapper = make_request_log_mapper(topic_ids, cluster=job_cluster(s), tz=parse_timezone(s.log_timezone),
                                     membership=membership, metadata=metadata)
    return records.mapInPandas(mapper, SCHEMA)

"""One simulation into a file, stdout or Kafka: what ``fencewatch simulate`` and ``demo``, the tests and the benchmarks run.

What lives here: :func:`run_simulation`, which connects a
:class:`~fencewatch.sim.world.Simulator` to a writer (JSON lines or Avro to
a file or stdout, broker request-log lines, or Kafka topics), optionally
paces it, and returns a summary. Everything it needs comes in as plain
arguments (producer settings already translated by the caller); the command
line is ``streaming/commands/simulate.py``. The simulator and the Kafka/Avro
libraries are imported when a run starts.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from typing import Any

__all__ = ["run_simulation"]


def streams_format_problem(knobs, fmt: str) -> str | None:
    """Why ``fmt`` cannot carry these knobs' streams groups (None: it can). A streams member's tasks
    and its group's topology are JSON-only events (contract §1.1: the Avro schema, id 1, is fixed),
    and the request-log encoder writes ConsumerGroupHeartbeat lines only, no StreamsGroupHeartbeat."""
    if fmt == "json" or knobs.streams_fraction <= 0:
        return None
    return (f"--format {fmt} cannot carry streams groups (streams_fraction={knobs.streams_fraction:g}): their tasks "
            "and topology are JSON events only; use --format json")


def run_simulation(
    config,
    *,
    fmt: str = "json",
    out: str | None = "-",
    bootstrap_servers: str | None = None,
    heartbeats_topic: str = "fencewatch.heartbeats",
    offsets_topic: str = "fencewatch.offsets",
    topic_partitions: int = 4,
    avro_wire: str = "confluent",
    schema_id: int = 1,
    producer_config: dict[str, str] | None = None,
    pace: tuple[str, float | None] = ("asap", None),
    request_log_topic: str = "fencewatch.request-log",
    topic_ids_out: str | None = None,
    broker_versions: str = "3.7,4.0,4.2",
    client_versions: str = "newest",
    stop: Callable[[], bool] | None = None,
) -> dict[str, Any]:
    """Run one simulation into a file/stdout or Kafka; return a summary (events, seconds, stats).

    ``fmt="request-log"`` writes broker request-log lines instead of
    contract §1 events (:mod:`fencewatch.sim.request_log`): to the file, or with
    ``bootstrap_servers`` to ``request_log_topic``; the summary then also has
    ``lines``, ``skipped`` and ``versions``. ``stop()`` true ends a paced run before its next
    step (the demo's shutdown), the writer still flushed and closed while the broker is up.
    """
    from fencewatch.sim.emit import HEARTBEATS
    from fencewatch.sim.world import Simulator

    problem = streams_format_problem(config.knobs, fmt)
    if problem:
        raise ValueError(problem)
    encoder = None
    if fmt == "request-log":
        from fencewatch.sim.request_log import RequestLogEncoder

        encoder = RequestLogEncoder(
            broker_versions=broker_versions,
            client_versions=client_versions,
            rebalance_timeout_ms=config.knobs.rebalance_timeout_ms,
            heartbeat_interval_ms=config.knobs.heartbeat_interval_ms,
        )
    stream = None
    if bootstrap_servers:
        writer = _kafka_writer(
            bootstrap_servers, fmt, heartbeats_topic=heartbeats_topic, offsets_topic=offsets_topic,
            request_log_topic=request_log_topic, topic_partitions=topic_partitions, avro_wire=avro_wire,
            schema_id=schema_id, producer_config=producer_config,
        )
    else:
        writer, stream = _file_writer(fmt, out, pace)
    emitter = _emitter(config, fmt, writer, encoder)
    sim = Simulator(config, emitter)
    pacer = _pacer(pace, config.start_ts, getattr(writer, "release", None))
    if stop is not None:
        pacer = _stoppable(pacer, stop)
    started = time.perf_counter()
    try:
        sim.run(pacer)
        if encoder is not None:
            for group_id, line in encoder.close():
                writer.write(HEARTBEATS, group_id, line)
    finally:
        try:
            writer.close()
        finally:
            if stream is not None and stream not in (sys.stdout, sys.stdout.buffer):
                stream.close()
    elapsed = time.perf_counter() - started
    return _summary(config, sim, emitter.count, elapsed, encoder, topic_ids_out)


def _kafka_writer(bootstrap_servers: str, fmt: str, *, heartbeats_topic: str, offsets_topic: str,
                  request_log_topic: str, topic_partitions: int, avro_wire: str, schema_id: int,
                  producer_config: dict[str, str] | None):
    from fencewatch.sim.writers import KafkaWriter

    if fmt == "request-log":
        # One topic; every line as a heartbeats-kind record, so a partition keeps the lines' order.
        return KafkaWriter(
            bootstrap_servers,
            heartbeats_topic=request_log_topic,
            offsets_topic=request_log_topic,
            create_partitions=topic_partitions,
            producer_config=producer_config,
        )
    return KafkaWriter(
        bootstrap_servers,
        heartbeats_topic=heartbeats_topic,
        offsets_topic=offsets_topic,
        value_format=fmt,
        avro_wire=avro_wire,
        schema_id=schema_id,
        create_partitions=topic_partitions,
        producer_config=producer_config,
    )


def _file_writer(fmt: str, out: str | None, pace: tuple[str, float | None]):
    """``(writer, stream)`` for a file or stdout (``out`` None or ``-``)."""
    from fencewatch.sim.writers import AvroFileWriter, JsonLinesWriter

    if fmt == "avro":
        stream = sys.stdout.buffer if out in (None, "-") else open(out, "wb")
        return AvroFileWriter(stream), stream
    stream = sys.stdout if out in (None, "-") else open(out, "w", encoding="utf-8", newline="\n")
    # Paced output is read live: hand lines over within ~10 ms of simulated output.
    buffer_lines = 8192 if pace[0] == "asap" else 1 if pace[0] == "realtime" else max(1, int(pace[1] / 100))
    return JsonLinesWriter(stream, buffer_lines=buffer_lines), stream


def _emitter(config, fmt: str, writer, encoder):
    """The emitter writing through ``writer``: via the request-log encoder if any, within the event budget."""
    from fencewatch.sim.emit import HEARTBEATS, DictEmitter, JsonEmitter
    from fencewatch.sim.world import Done

    write = writer.write
    if encoder is not None:
        write_line = writer.write
        encode = encoder.add

        def write(kind: int, key: str, event: Any) -> None:  # noqa: F811 - events in, log lines out
            for group_id, line in encode(event):
                write_line(HEARTBEATS, group_id, line)

    limit = config.max_events
    if limit is not None:
        inner = write

        def write(kind: int, key: str, payload: Any) -> None:  # noqa: F811 - the budgeted writer
            if emitter.count > limit:
                raise Done
            inner(kind, key, payload)

    # Avro and the request-log encoder need dicts; JSON (file or Kafka) takes the emitter's string fast path.
    emitter_class = DictEmitter if fmt in ("avro", "request-log") else JsonEmitter
    emitter = emitter_class(
        write,
        event_id_prefix=config.id_prefix,
        cluster=config.cluster,
        labels=config.labels,
        assignment_epochs=config.assignment_epochs,
    )
    return emitter


def _stoppable(pacer, stop: Callable[[], bool]):
    """The pacer, ending the run (:class:`Done`) once ``stop()`` is true."""
    from fencewatch.sim.world import Done

    def paced(events: int, sim_ts: int) -> None:
        if stop():
            raise Done
        if pacer is not None:
            pacer(events, sim_ts)

    return paced


def _pacer(pace: tuple[str, float | None], start_ts: int, on_wait=None):
    from fencewatch.sim.writers import Pacer

    if pace[0] == "events":
        return Pacer(rate=pace[1], on_wait=on_wait)
    if pace[0] == "realtime":
        return Pacer(realtime_speed=pace[1], start_ts=start_ts, on_wait=on_wait)
    return None


def _summary(config, sim, count: int, elapsed: float, encoder, topic_ids_out: str | None) -> dict[str, Any]:
    limit = config.max_events
    events = min(count, limit) if limit is not None else count
    summary = {
        "events": events,
        "seconds": elapsed,
        "events_per_s": events / elapsed if elapsed > 0 else float("inf"),
        "simulated_ms": sim.now - config.start_ts,
        "stats": sim.stats,
    }
    if encoder is not None:
        summary["lines"] = encoder.lines
        summary["skipped"] = encoder.skipped()
        summary["versions"] = dict(sorted(encoder.versions.items()))
        if topic_ids_out:
            with open(topic_ids_out, "w", encoding="utf-8") as fh:
                json.dump(encoder.topic_ids(), fh, indent=2, sort_keys=True)
                fh.write("\n")
    return summary

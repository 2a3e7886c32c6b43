"""Reading a topic to its end, as ``report`` and ``groups`` do: every record from the beginning of
each partition to the end offsets seen at start, with a progress line every few seconds."""
from __future__ import annotations

import logging
import time
import uuid
from typing import Callable

log = logging.getLogger(__name__)

PROGRESS_EVERY_S = 2.0


class Progress:
    """A progress line on stderr (logging) every few seconds while reading."""

    def __init__(self, what: str, total: int | None = None, command: str = "report") -> None:
        self.what, self.total, self.n, self.command = what, total, 0, command
        self.t0 = self.last = time.monotonic()

    def step(self, n: int = 1) -> None:
        self.n += n
        now = time.monotonic()
        if now - self.last >= PROGRESS_EVERY_S:
            self.last = now
            share = f" of {self.total:,} ({100 * self.n / self.total:.0f}%)" if self.total else ""
            log.info("%s: read %s records%s from %s (%.0f/s)", self.command, f"{self.n:,}", share, self.what,
                     self.n / max(now - self.t0, 1e-9))

    def done(self) -> None:
        log.info("%s: read %s records from %s in %.1fs", self.command, f"{self.n:,}", self.what,
                 time.monotonic() - self.t0)


def read_topic(client: dict, topic: str, handle: Callable[..., None], *, timeout_s: float = 30.0,
               keyed: bool = False, command: str = "report") -> int:
    """Every record of ``topic`` from the beginning of each partition to the end offset seen at
    start; ``handle(value)`` for each (``keyed``: ``handle(key, value)``, a tombstone's value None).
    Records written after the start are left for the next run."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

    from fencewatch.streaming.config import ConfigError

    consumer = Consumer({**client, "group.id": f"fencewatch-{command}-{uuid.uuid4().hex[:12]}",
                         "enable.auto.commit": False, "enable.partition.eof": True,
                         "auto.offset.reset": "earliest"})
    try:
        meta = consumer.list_topics(topic, timeout=timeout_s).topics.get(topic)
        if meta is None or meta.error is not None or not meta.partitions:
            raise ConfigError(f"topic {topic!r}: {meta.error if meta is not None and meta.error else 'not found'}")
        ends, starts, total = {}, [], 0
        for p in sorted(meta.partitions):
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=timeout_s)
            if high > low:
                ends[p] = high
                total += high - low
                starts.append(TopicPartition(topic, p, OFFSET_BEGINNING))
        log.info("%s: reading %s: %d partition(s), %s records up to the end offsets seen now", command,
                 topic, len(meta.partitions), f"{total:,}")
        progress = Progress(f"topic {topic}", total, command)
        if starts:
            consumer.assign(starts)
        open_parts = set(ends)
        idle_since = time.monotonic()
        while open_parts:
            msgs = consumer.consume(1000, timeout=1.0)
            if msgs:
                idle_since = time.monotonic()
            elif time.monotonic() - idle_since > timeout_s:
                log.warning("%s: %s: nothing arrived for %.0fs; partitions %s stop short of the end offsets "
                            "seen at start", command, topic, timeout_s, sorted(open_parts))
                break
            n = 0
            for m in msgs:
                p = m.partition()
                if m.error() is not None:
                    if m.error().code() == KafkaError._PARTITION_EOF:
                        open_parts.discard(p)
                        continue
                    raise RuntimeError(f"reading {topic}[{p}]: {m.error()}")
                if p not in open_parts or m.offset() >= ends[p]:
                    open_parts.discard(p)
                    continue
                if keyed:
                    handle(m.key(), m.value())
                else:
                    handle(m.value() or b"")
                n += 1
                if m.offset() + 1 >= ends[p]:
                    open_parts.discard(p)
            progress.step(n)
        progress.done()
        return progress.n
    finally:
        consumer.close()

"""Planning a micro-batch: which offsets it reads, and in how many tasks.

What lives here, all on the driver: :class:`Planner` (``startingOffsets`` resolved to offsets,
end offsets checked for data loss, ``[start, end)`` turned into input partitions), the input
partitions themselves (everything an executor's ``read`` needs travels in them), how ranges are
split (``minPartitions``, ``maxRecordsPerPartition``) and balanced into ``tasksPerTrigger``
tasks, and the adaptive limit's :class:`~fencewatch.streaming.sources.pacing.BatchPacer`.

Imports: the standard library, pyspark's ``InputPartition`` and this package.
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from pyspark.sql.datasource import InputPartition

from fencewatch.streaming.config.kafka import redact
from fencewatch.streaming.sources.kafka.client import ReadSpec
from fencewatch.streaming.sources.kafka.metadata import OffsetReader
from fencewatch.streaming.sources.kafka.options import (
    EARLIEST,
    SHORT_NAME,
    KafkaSourceError,
    OffsetsSpec,
    SourceOptions,
    TopicPartitionKey,
    data_loss,
    tp_name,
)
from fencewatch.streaming.sources.pacing import BatchPacer

log = logging.getLogger(__name__)


def split_ranges(ranges: Sequence[tuple[TopicPartitionKey, int, int]], *, min_partitions: int | None,
                 max_records: int | None) -> list[tuple[TopicPartitionKey, int, int]]:
    """Split ``(tp, from, until)`` ranges: at most ``max_records`` each, at least ``min_partitions`` in all."""
    sizes = [until - frm for _, frm, until in ranges]
    total = sum(sizes)
    out: list[tuple[TopicPartitionKey, int, int]] = []
    for (tp, frm, until), size in zip(ranges, sizes):
        parts = 1
        if max_records:
            parts = max(parts, math.ceil(size / max_records))
        if min_partitions and total and len(ranges) < min_partitions:
            parts = max(parts, math.ceil(min_partitions * size / total))
        parts = max(1, min(parts, size))
        step, extra = divmod(size, parts)
        start = frm
        for i in range(parts):
            stop = start + step + (1 if i < extra else 0)
            out.append((tp, start, stop))
            start = stop
    return out


@dataclass(frozen=True, slots=True)
class KafkaInputPartition(InputPartition):
    """Offsets ``[from_offset, until_offset)`` of one topic-partition."""

    topic: str
    partition: int
    from_offset: int
    until_offset: int
    spec: ReadSpec = field(repr=False)
    caught_up: bool = False  # the micro-batch reads every partition to the end found at planning

    def __repr__(self) -> str:
        return f"KafkaInputPartition({self.topic}[{self.partition}] {self.from_offset}..{self.until_offset})"


@dataclass(frozen=True, slots=True)
class KafkaInputSplit(InputPartition):
    """Ranges read by one task, one after the other (``tasksPerTrigger``: a micro-batch in as
    many tasks as the job has cores, each with about the same number of records)."""

    ranges: tuple[KafkaInputPartition, ...]

    def __repr__(self) -> str:
        return f"KafkaInputSplit({', '.join(map(repr, self.ranges))})"


def balance(parts: Sequence[KafkaInputPartition], n: int) -> list[KafkaInputSplit]:
    """``parts`` in ``n`` splits of about equal record counts (offset spans), cutting a range
    where a split is full. Why: one task per topic-partition range, coalesced to the cores, put
    a light topic's ranges in one task and a heavy one's in the other (the heartbeats topic holds
    a tenth of the events, the offsets topic the rest): half the cores sat idle through the
    source stage (docs/benchmarks.md, issue 14)."""
    total = sum(p.until_offset - p.from_offset for p in parts)
    if n <= 1 or total <= 0 or not parts:
        return [KafkaInputSplit(tuple(parts))] if parts else []
    share = math.ceil(total / n)
    splits: list[KafkaInputSplit] = []
    current: list[KafkaInputPartition] = []
    room = share
    for part in parts:
        frm = part.from_offset
        while frm < part.until_offset:
            take = min(part.until_offset - frm, room)
            current.append(KafkaInputPartition(part.topic, part.partition, frm, frm + take, part.spec, part.caught_up))
            frm += take
            room -= take
            if room == 0:
                splits.append(KafkaInputSplit(tuple(current)))
                current, room = [], share
    if current:
        splits.append(KafkaInputSplit(tuple(current)))
    return splits


PACED_FLOOR = 1_000
"""The adaptive limit's floor (records per micro-batch)."""


def pacer_for(options: SourceOptions) -> BatchPacer | None:
    """The adaptive per-batch limit when ``targetBatchDurationMs`` is set: it starts at
    ``initialOffsetsPerTrigger`` (else the floor) and stays at or under ``maxOffsetsPerTrigger``."""
    if options.target_batch_duration_ms is None:
        return None
    cap = options.max_offsets_per_trigger or DEFAULT_PACED_CAP
    return BatchPacer(target_ms=options.target_batch_duration_ms, floor=min(PACED_FLOOR, cap), cap=cap,
                      limit=options.initial_offsets_per_trigger or PACED_FLOOR)


DEFAULT_PACED_CAP = 500_000
"""The adaptive limit's cap when ``maxOffsetsPerTrigger`` is not given."""


class Planner:
    """Offset resolution and partition planning shared by the stream and batch readers."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self._reader: OffsetReader | None = None

    @property
    def reader(self) -> OffsetReader:
        if self._reader is None:
            self._reader = OffsetReader(self.options)
            log.info("%s: %s, client %s", SHORT_NAME, self.options.describe_subscription(),
                     redact(self.options.config()))
        return self._reader

    def close(self) -> None:
        self._reader = None

    def resolve(self, spec: OffsetsSpec, name: str,
                tps: set[TopicPartitionKey]) -> dict[TopicPartitionKey, int]:
        """Concrete offsets for ``earliest``/``latest``/JSON over the partitions ``tps``."""
        if spec == "earliest":
            return self.reader.list_offsets(tps, "earliest")
        if spec == "latest":
            return self.reader.list_offsets(tps, "latest")
        wanted = dict(spec)  # type: ignore[arg-type]
        unknown = sorted(set(wanted) - tps)
        if unknown:
            raise KafkaSourceError(f"{name} names partitions that do not exist or are not subscribed: "
                                   + ", ".join(tp_name(tp) for tp in unknown))
        missing = sorted(tps - set(wanted))
        if missing and not self.options.assign:
            raise KafkaSourceError(f"{name} JSON must give an offset for every subscribed partition; missing: "
                                   + ", ".join(tp_name(tp) for tp in missing))
        earliest = self.reader.list_offsets([tp for tp, o in wanted.items() if o == EARLIEST], "earliest")
        latest = self.reader.list_offsets([tp for tp, o in wanted.items() if o != EARLIEST], "latest")
        beyond = sorted(tp for tp, o in wanted.items() if o >= 0 and o > latest[tp])
        if beyond:
            # Reading would wait for offsets that do not exist (and look like loss later).
            raise KafkaSourceError(f"{name} lies beyond the end of " + ", ".join(
                f"{tp_name(tp)} (asked {wanted[tp]}, end offset {latest[tp]})" for tp in beyond))
        return {tp: (earliest[tp] if o == EARLIEST else latest[tp]) if o < 0 else o for tp, o in wanted.items()}

    def subscribed(self, tp: TopicPartitionKey) -> bool:
        """Whether the options (as given now, perhaps changed since the checkpoint) cover ``tp``."""
        opts = self.options
        if opts.subscribe:
            return tp[0] in opts.subscribe
        if opts.subscribe_pattern is not None:
            return re.fullmatch(opts.subscribe_pattern, tp[0]) is not None
        return tp in opts.assign

    def latest(self, start: Mapping[TopicPartitionKey, int]) -> dict[TopicPartitionKey, int]:
        """End offsets now, checked against ``start`` for partitions that vanished or went back."""
        opts = self.options
        tps, unknown_topics = self.reader.partitions()
        dropped = sorted(tp for tp in start if not self.subscribed(tp))
        if dropped:
            log.info("no longer subscribed, not read any more: %s", ", ".join(tp_name(tp) for tp in dropped))
        gone = sorted(tp for tp in start
                      if tp not in tps and tp[0] not in unknown_topics and self.subscribed(tp))
        if gone:
            data_loss(opts.fail_on_data_loss,
                       "partitions no longer exist (topic deleted?): " + ", ".join(tp_name(tp) for tp in gone))
        latest = self.reader.list_offsets(tps, "latest")
        # Partitions whose topic metadata failed this round keep their offsets: no progress, no loss.
        for tp, offset in start.items():
            if tp[0] in unknown_topics and self.subscribed(tp):
                latest[tp] = offset
        behind = [tp for tp in latest if tp in start and latest[tp] < start[tp]]
        if behind and opts.isolation_level == "read_committed":
            # The last stable offset trails the start while a transaction is open (and
            # Tansu answers 0 then); the log itself has not moved back.
            high = self.reader.list_offsets(behind, "latest", "read_uncommitted")
            for tp in behind:
                if high[tp] >= start[tp]:
                    latest[tp] = start[tp]
        for tp in sorted(tp for tp in latest if tp in start and latest[tp] < start[tp]):
            data_loss(opts.fail_on_data_loss,
                       f"end offset of {tp_name(tp)} went back from {start[tp]} to {latest[tp]} (topic re-created?)")
        return latest

    def tasks(self, parts: list[KafkaInputPartition]) -> Sequence[InputPartition]:
        """The planned ranges as Spark's input partitions: :func:`balance`d into
        ``tasksPerTrigger`` tasks when set, else one task per range."""
        n = self.options.tasks_per_trigger
        return balance(parts, n) if n else parts

    def plan(self, start: Mapping[TopicPartitionKey, int],
             end: Mapping[TopicPartitionKey, int], *, caught_up: bool = False) -> list[KafkaInputPartition]:
        """Input partitions for ``[start, end)``; new partitions start at their earliest offset."""
        opts = self.options
        candidates = [tp for tp in end if tp not in start or start[tp] != end[tp]]
        if not candidates:
            return []
        earliest = self.reader.list_offsets(candidates, "earliest")
        backwards = [tp for tp in candidates if tp in start and start[tp] > end[tp]]
        high = self.reader.list_offsets(backwards, "latest", "read_uncommitted") if backwards else {}
        ranges: list[tuple[TopicPartitionKey, int, int]] = []
        for tp in sorted(candidates):
            until = end[tp]
            frm = start.get(tp)
            if frm is None:
                frm = earliest[tp]
                log.info("new partition %s: reading from its earliest offset %d", tp_name(tp), frm)
            elif frm > until:
                if high.get(tp, -1) >= frm:
                    # The log still reaches frm, so this is not a reset: e.g. batch 0 re-planned
                    # after a restart with startingOffsets=latest resolved again. Nothing to read.
                    continue
                data_loss(opts.fail_on_data_loss,
                           f"offsets of {tp_name(tp)} went back from {frm} to {until} (topic re-created?)")
                frm = earliest[tp]
            if frm < earliest[tp] and frm < until:
                data_loss(opts.fail_on_data_loss,
                           f"{tp_name(tp)} offsets {frm}..{min(until, earliest[tp]) - 1} were deleted before "
                           f"they were read (log start offset is now {earliest[tp]})")
                frm = earliest[tp]
            if until > frm:
                ranges.append((tp, frm, until))
        spec = ReadSpec.of(opts)
        return [KafkaInputPartition(t, p, frm, until, spec, caught_up)
                for (t, p), frm, until in split_ranges(ranges, min_partitions=opts.min_partitions,
                                                       max_records=opts.max_records_per_partition)]



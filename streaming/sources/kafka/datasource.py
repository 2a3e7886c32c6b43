"""``fencewatch-kafka`` as Spark sees it: the data source and its stream and batch readers.

What lives here: :class:`KafkaDataSource` (schema, options checked when the DataFrame is
defined), :class:`KafkaStreamReader` (offsets as Spark's Kafka source keeps them, admission
control with ``maxOffsetsPerTrigger`` and the adaptive limit, ``Trigger.AvailableNow``, the
caught-up mark) and :class:`KafkaBatchReader` (``spark.read``). Planning is the planner's
(``planning``), reading the executors' (``consumer``).

Imports: pyspark and this package.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
)
from pyspark.sql.types import StructType

from fencewatch.streaming.sources.kafka.consumer import kafka_schema, read_split
from fencewatch.streaming.sources.kafka.offsets import caught_up_mark, offsets_from_json, offsets_to_json, rate_limit
from fencewatch.streaming.sources.kafka.options import (
    SHORT_NAME,
    KafkaSourceError,
    SourceOptions,
    TopicPartitionKey,
    parse_options,
    tp_name,
)
from fencewatch.streaming.sources.kafka.planning import KafkaInputPartition, KafkaInputSplit, Planner, pacer_for

try:  # Spark >= 4.2
    from pyspark.sql.streaming.datasource import (
        ReadAllAvailable,
        ReadMaxRows,
        SupportsTriggerAvailableNow,
    )
except ImportError:  # pragma: no cover - Spark 4.0/4.1: no admission control, no AvailableNow
    ReadAllAvailable = ReadMaxRows = None  # type: ignore[assignment,misc]

    class SupportsTriggerAvailableNow:  # type: ignore[no-redef]
        """Stand-in so the class statement below works on Spark 4.0/4.1."""


log = logging.getLogger(__name__)


class KafkaStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batch reader; offsets are ``{"topic": {"partition": offset}}`` as Spark's Kafka source."""

    def __init__(self, options: SourceOptions) -> None:
        self._options = options
        self._planner = Planner(options)
        self._target: dict[TopicPartitionKey, int] | None = None
        self._last_latest: dict[TopicPartitionKey, int] | None = None
        self._pacer = pacer_for(options)

    # The reader is pickled to the executors' read(); the admin client is not picklable.
    def __getstate__(self) -> dict[str, Any]:
        return {"_options": self._options}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["_options"])  # type: ignore[misc]

    def initialOffset(self) -> dict:
        tps, _ = self._planner.reader.partitions()
        offsets = self._planner.resolve(self._options.starting_offsets, "startingOffsets", tps)
        log.info("%s: starting offsets %s", SHORT_NAME, offsets_to_json(offsets))
        return offsets_to_json(offsets)

    def getDefaultReadLimit(self):
        if self._options.max_offsets_per_trigger is not None and ReadMaxRows is not None:
            return ReadMaxRows(self._options.max_offsets_per_trigger)
        return ReadAllAvailable() if ReadAllAvailable is not None else None

    def prepareForTriggerAvailableNow(self) -> None:
        """Fix the end of an AvailableNow run: the offsets that exist now."""
        tps, _ = self._planner.reader.partitions()
        self._target = self._planner.reader.list_offsets(tps, "latest")
        log.info("%s: Trigger.AvailableNow reads up to %s", SHORT_NAME, offsets_to_json(self._target))

    def latestOffset(self, start: dict | None = None, limit=None) -> dict:
        begin = offsets_from_json(start)
        if self._target is not None:
            # AvailableNow: never past the target; partitions in `start` keep their offsets.
            latest = {**begin, **{tp: max(o, begin.get(tp, o)) for tp, o in self._target.items()}}
        else:
            latest = self._planner.latest(begin)
        self._last_latest = available = latest
        # Partitions new since `start` (or reset after loss) begin at their earliest offset.
        fresh = [tp for tp in latest if tp not in begin or begin[tp] > latest[tp]]
        base = {tp: o for tp, o in begin.items() if tp in latest and o <= latest[tp]}
        if fresh:
            base.update(self._planner.reader.list_offsets(fresh, "earliest"))
        # Spark 4.0/4.1 call latestOffset() without arguments: no admission control there.
        max_rows = limit.max_rows if ReadMaxRows is not None and isinstance(limit, ReadMaxRows) else None
        if self._pacer is not None:
            backlog = sum(max(0, o - base.get(tp, o)) for tp, o in latest.items())
            paced = self._pacer.plan(time.monotonic(), backlog)
            max_rows = paced if max_rows is None else min(max_rows, paced)
        if max_rows is not None:
            latest = rate_limit(base, latest, max_rows)
        # Caught up: this batch ends where the logs ended at planning (an AvailableNow target is not
        # the logs' end). Marked in the offsets Spark logs, for a rerun of this batch to see it too.
        caught_up = (self._options.include_caught_up and self._target is None
                     and all(latest.get(tp, -1) >= o for tp, o in available.items()))
        return offsets_to_json(latest, caught_up=caught_up)

    def reportLatestOffset(self) -> dict | None:
        return None if self._last_latest is None else offsets_to_json(self._last_latest)

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        # The mark comes from the logged end, so a batch run again after a restart (planned by the
        # process that died) gets the mark it had: before, it had none, and its held events went a
        # batch later than in the first attempt, whose outputs were in Kafka already (issue 33).
        return self._planner.tasks(self._planner.plan(offsets_from_json(start), offsets_from_json(end),
                                                      caught_up=caught_up_mark(end)))

    def read(self, partition: InputPartition) -> Iterator[Any]:
        assert isinstance(partition, (KafkaInputPartition, KafkaInputSplit)), type(partition)
        return read_split(partition)

    def commit(self, end: dict) -> None:
        """Nothing to do: the checkpoint holds the offsets; Kafka groups are left alone."""

    def stop(self) -> None:
        self._planner.close()
        if isinstance(sys.exc_info()[1], (EOFError, ConnectionError)):
            _quiet_after_channel_closed()


def _quiet_after_channel_closed() -> None:
    """Spark's source runner calls ``stop`` when the JVM has closed its channel (the query is
    stopping): its handler then reports the EOF on the closed socket, fails, and prints two
    tracebacks for a normal stop (seen on a SIGTERM under load). Nothing can reach the JVM any
    more and the process is about to exit, so its stderr goes to /dev/null from here on."""
    log.debug("%s: the JVM closed the source runner's channel; exiting quietly", SHORT_NAME)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 2)
    os.close(devnull)


class KafkaBatchReader(DataSourceReader):
    """One-shot read of ``[startingOffsets, endingOffsets)`` (``spark.read``)."""

    def __init__(self, options: SourceOptions) -> None:
        self._options = options
        self._planner = Planner(options)

    def __getstate__(self) -> dict[str, Any]:
        return {"_options": self._options}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["_options"])  # type: ignore[misc]

    def partitions(self) -> Sequence[InputPartition]:
        tps, _ = self._planner.reader.partitions()
        start = self._planner.resolve(self._options.starting_offsets, "startingOffsets", tps)
        assert self._options.ending_offsets is not None
        end = self._planner.resolve(self._options.ending_offsets, "endingOffsets", tps)
        for tp in sorted(tp for tp in end if tp in start and end[tp] < start[tp]):
            raise KafkaSourceError(f"endingOffsets {end[tp]} of {tp_name(tp)} is before startingOffsets {start[tp]}")
        # Partitions only in `start` (assign with JSON) have nothing to read.
        planned = self._planner.tasks(self._planner.plan(start, {tp: end[tp] for tp in end if tp in start}))
        self._planner.close()
        return planned

    def read(self, partition: InputPartition) -> Iterator[Any]:
        assert isinstance(partition, (KafkaInputPartition, KafkaInputSplit)), type(partition)
        return read_split(partition)


class KafkaDataSource(DataSource):
    """``spark.readStream.format("fencewatch-kafka")``: Spark's Kafka source schema and options."""

    @classmethod
    def name(cls) -> str:
        return SHORT_NAME

    def __init__(self, options: Mapping[str, str]) -> None:
        super().__init__(options)  # type: ignore[arg-type]
        # Validate now so a bad option fails when the DataFrame is defined, not mid-query.
        # endingOffsets only makes sense for spark.read, so it decides which rules apply.
        streaming = not any(k.strip().lower() == "endingoffsets" for k in options)
        self._parsed = parse_options(options, streaming=streaming)

    def schema(self) -> StructType:
        return kafka_schema(self._parsed.include_headers, self._parsed.include_caught_up)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        if self._parsed.ending_offsets is not None:
            raise KafkaSourceError("option endingOffsets is only valid for batch queries (spark.read)")
        return KafkaStreamReader(self._parsed)

    def reader(self, schema: StructType) -> DataSourceReader:
        parsed = self._parsed if self._parsed.ending_offsets is not None else \
            parse_options(self.options, streaming=False)
        return KafkaBatchReader(parsed)


"""Topics, partition logs and leader epochs of the simulated cluster.

What lives here: :class:`PartitionLog` (one partition's log end offset over
time, its leader epoch cache, unclean and clean leader elections, log start
offset moves) and :class:`GroupTopology` (which topic-partitions a group
consumes, as ints). Consumer positions are a function of time -- a log
grows at a fixed rate per partition and a consumer trails it by a fixed lag --
so a commit's offset costs one multiplication instead of simulated fetches,
and offsets only go backwards where real ones do: after a truncation.

Names are generated from ``[A-Za-z0-9._-]`` only; the JSON emitter relies on
that to build lines without escaping.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["GroupTopology", "PartitionLog", "SAFE_NAME"]

SAFE_NAME = re.compile(r"^[A-Za-z0-9._-]+$")


class PartitionLog:
    """One topic-partition's log as the partition leader sees it.

    ``segments`` are ``(start_ts, base_offset, records_per_s, leader_epoch)``:
    a new one starts at every leader election; the log end at ``t`` is
    ``base + (t - start_ts) * records_per_s // 1000`` (integer arithmetic, so
    positions are exact and monotone). ``epochs`` is the leader epoch cache
    ``[(epoch, start_offset)]`` that OffsetsForLeaderEpoch answers from.
    Mutable for the same reason as the coordinator's members: it changes over
    a long run and is never shared outside the simulator.
    """

    __slots__ = ("topic", "partition", "segments", "epochs", "log_start_offset", "json_prefix", "current")

    def __init__(self, topic: str, partition: int, start_ts: int, base_offset: int, records_per_s: int) -> None:
        if not SAFE_NAME.match(topic):
            raise ValueError(f"topic name {topic!r} must match {SAFE_NAME.pattern}")
        if records_per_s < 0:
            raise ValueError(f"records_per_s must be >= 0, got {records_per_s}")
        self.topic = topic
        self.partition = partition
        self.current = (start_ts, base_offset, records_per_s, 0)
        self.segments: list[tuple[int, int, int, int]] = [self.current]
        self.epochs: list[tuple[int, int]] = [(0, 0)]
        self.log_start_offset = 0
        self.json_prefix = f'{{"topic":"{topic}","partition":{partition},"offset":'

    @property
    def leader_epoch(self) -> int:
        return self.current[3]

    @property
    def records_per_s(self) -> int:
        return self.current[2]

    def position(self, t: int) -> tuple[int, int]:
        """``(offset, leader_epoch)`` of the log end at time ``t`` (a consumer passes ``t - lag``)."""
        start_ts, base, rate, epoch = self.current
        if t >= start_ts:
            return base + (t - start_ts) * rate // 1000, epoch
        for start_ts, base, rate, epoch in reversed(self.segments):
            if t >= start_ts:
                return base + (t - start_ts) * rate // 1000, epoch
        start_ts, base, _, epoch = self.segments[0]
        return base, epoch

    def log_end_offset(self, t: int) -> int:
        return self.position(t)[0]

    def elect_leader(self, t: int, truncate_by: int) -> tuple[int, int]:
        """A leader election at ``t``; ``truncate_by > 0`` makes it unclean.

        An unclean leader (an out-of-sync replica) has a shorter log: the
        records in ``[new_end, old_end)`` are gone and the new epoch starts at
        ``new_end``. Returns ``(old_end, new_end)``.
        """
        old_end = self.log_end_offset(t)
        new_end = max(self.log_start_offset, old_end - max(0, truncate_by))
        new_epoch = self.current[3] + 1
        # The new leader's cache: epochs that started below its log end, then the new epoch.
        first = self.epochs[0]
        self.epochs = [(e, s) for e, s in self.epochs if s < new_end or (e, s) == first]
        self.epochs.append((new_epoch, new_end))
        self.current = (t, new_end, self.current[2], new_epoch)
        self.segments.append(self.current)
        if len(self.segments) > 8:
            del self.segments[1:-7]
        return old_end, new_end

    def advance_log_start(self, t: int, by: int) -> int:
        """Retention deletes old segments: the log start offset moves up (never past the end)."""
        self.log_start_offset = min(self.log_end_offset(t), self.log_start_offset + max(0, by))
        return self.log_start_offset


@dataclass(frozen=True, slots=True)
class GroupTopology:
    """The topic-partitions one group consumes; partition ``i`` is ``topics[i // ppt]``, ``i % ppt``."""

    topics: tuple[str, ...]
    partitions_per_topic: int

    @property
    def partition_count(self) -> int:
        return len(self.topics) * self.partitions_per_topic

    def topic_partition(self, index: int) -> tuple[str, int]:
        return self.topics[index // self.partitions_per_topic], index % self.partitions_per_topic

    def topic_partitions(self, indexes, epochs=None) -> list[dict]:
        """contract §1 list form ``[{"topic", "partitions", ["assignment_epochs"]}]`` of sorted indexes."""
        out: list[dict] = []
        ppt = self.partitions_per_topic
        current = None
        for i in sorted(indexes):
            topic_index = i // ppt
            if current is None or current[0] != topic_index:
                entry: dict = {"topic": self.topics[topic_index], "partitions": []}
                if epochs is not None:
                    entry["assignment_epochs"] = []
                out.append(entry)
                current = (topic_index, entry)
            current[1]["partitions"].append(i % ppt)
            if epochs is not None:
                current[1]["assignment_epochs"].append(epochs[i])
        return out

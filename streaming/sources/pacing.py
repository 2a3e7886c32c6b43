"""How many records a micro-batch reads: admission control that follows the job's own speed.

A fixed ``maxOffsetsPerTrigger`` is right on one machine and wrong on the next: too small and a
backlog (a restart after downtime, a slow hour) is read a trickle at a time, each micro-batch
paying the query's fixed cost (~0.3-0.6 s here) for little work; too large and a batch runs for
minutes, holding memory and the outputs back. :class:`BatchPacer` sizes each batch from how long
the batches before it took, the way Spark Streaming's backpressure did for DStreams:

- a batch that read its whole limit (the job is behind) and ended sooner than ``target_ms``
  lets the next read more, in proportion, at most four times as much; one that took longer makes
  it read less, in proportion: batch times settle near the target whatever the machine, the
  cluster or the input;
- a batch that read less than its limit (the job is caught up) tells nothing about the job's
  speed: the limit stays, and batches stay as small as the input;
- the limit never leaves [``floor``, ``cap``]: ``cap`` bounds a batch's memory, ``floor`` keeps a
  slow start from reading a trickle.

Pure: no Kafka, no Spark. The stream reader calls :meth:`plan` when Spark plans a batch: the
time since the last planning is the last batch's (Spark plans the next batch when one ends, or
at the next trigger; it commits a batch to the source only after planning the next, so the
source's ``commit`` cannot time it). With Spark's own connector the job times each batch from
its planning to the end of its ``foreachBatch`` and calls :meth:`observe`
(``sources.connector``). docs/kafka-source.md.
"""
from __future__ import annotations

from dataclasses import dataclass

MAX_GROWTH = 4.0
"""A batch reads at most this many times what the batch before it read. Growing in proportion to
``target_ms / elapsed`` cannot overshoot while a batch costs a fixed time plus a time per record
(the fixed part makes short batches look slow); the bound is against one batch fast by luck. At
2, a restart's backlog was read in batches of 1.6, 2.1, 3.3, 5.2, 6.6 s before reaching the 8 s
target; at 4 the third batch is near it (docs/decisions.md, issue 14)."""
MIN_SHRINK = 0.25
"""... and at least this share of it."""


@dataclass
class BatchPacer:
    """The per-batch record limit of one stream (see the module)."""

    target_ms: int
    floor: int
    cap: int
    limit: int
    _planned: tuple[float, int, int] | None = None  # (wall s at planning, records planned, limit then)

    def __post_init__(self) -> None:
        self.limit = min(self.cap, max(self.floor, self.limit))

    def plan(self, now: float, backlog: int) -> int:
        """The limit for the batch planned now, which has ``backlog`` records to read in all;
        the batch planned before it has ended (its time adjusts the limit first)."""
        if self._planned is not None:
            started, records, limit = self._planned
            self.observe((now - started) * 1000, records, limit)
        self._planned = (now, min(backlog, self.limit), self.limit)
        return self.limit

    def observe(self, elapsed_ms: float, records: int, limit: int) -> int:
        """A batch planned with ``limit`` read ``records`` in ``elapsed_ms``: the limit from now on.
        (:meth:`plan` calls it for the Python source; Spark's connector, whose batches the job
        sees only in ``foreachBatch``, calls it directly: ``sources.connector``.)"""
        # Caught up (the batch read less than its limit): its time says nothing of a full one.
        if records >= limit > 0:
            factor = min(MAX_GROWTH, max(MIN_SHRINK, self.target_ms / max(1.0, elapsed_ms)))
            self.limit = min(self.cap, max(self.floor, int(limit * factor)))
        return self.limit

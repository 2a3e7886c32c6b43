"""How many records a micro-batch reads: admission control that follows the job's own speed.

A fixed ``maxOffsetsPerTrigger`` is right on one machine and wrong on the next: too small and a
backlog (a restart after downtime, a slow hour) is read a trickle at a time, each micro-batch
paying the query's fixed cost (~0.3-0.6 s here) for little work; too large and a batch runs for
minutes, holding memory and the outputs back. :class:`BatchPacer` sizes each batch from how long
the batches before it took, the way Spark Streaming's backpressure did for DStreams:

- a batch that read its whole limit (the job is behind) and ended sooner than ``target_ms``
  lets the next read more, at most twice as much; one that took longer makes it read less, in
  proportion: batch times settle near the target whatever the machine, the cluster or the input;
- a batch that read less than its limit (the job is caught up) tells nothing about the job's
  speed: the limit stays, and batches stay as small as the input;
- the limit never leaves [``floor``, ``cap``]: ``cap`` bounds a batch's memory, ``floor`` keeps a
  slow start from reading a trickle.

Pure: no Kafka, no Spark; the stream reader calls :meth:`plan` when it plans a batch and
:meth:`done` when Spark commits it (docs/kafka-source.md).
"""
from __future__ import annotations

from dataclasses import dataclass

MAX_GROWTH = 2.0
"""A batch reads at most this many times what the batch before it read."""
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
        """The limit for the batch planned now, which has ``backlog`` records to read in all."""
        self._planned = (now, min(backlog, self.limit), self.limit)
        return self.limit

    def done(self, now: float) -> None:
        """The batch planned last has been processed (Spark committed it): adjust the limit."""
        if self._planned is None:
            return
        started, records, limit = self._planned
        self._planned = None
        if records < limit or records <= 0:
            return  # caught up: the batch's time says nothing about what a full one would take
        elapsed_ms = max(1.0, (now - started) * 1000)
        factor = min(MAX_GROWTH, max(MIN_SHRINK, self.target_ms / elapsed_ms))
        self.limit = min(self.cap, max(self.floor, int(limit * factor)))

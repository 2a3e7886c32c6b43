"""Ordering a key's events across source topics, and the key's event-time clock (pure).

A group's events come from one partition of each source topic (heartbeats, offsets),
each in coordinator order, but Spark reads the topics unevenly: a restart catching up
a backlog reads one topic ahead of the other. :class:`Hold` keeps a key's events back
until no source can still deliver an older one, so they are applied in (ts, seq) order
exactly as ``replay --engine local`` applies them, and it maps wall time to event time
for decisions made without input (offset expiry), so an idle group's clock keeps moving.

No Spark, no pandas: ``state_fn.stream_fn`` calls it once per key per micro-batch.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from operator import itemgetter
from typing import Iterable

_TS_SEQ = itemgetter(0, 1)


@dataclass
class Hold:
    """What a key remembers between micro-batches besides its rules state.

    ``pending`` are events not applied yet: (ts, seq, payload, arrival wall ms).
    ``seen`` is the newest ts read from each source topic for this key: every event at
    or before ``min(seen)`` has arrived, so applying up to there keeps (ts, input order)
    however unevenly the topics are read. A source that goes quiet would hold events
    forever, so an event also goes after ``max_skew`` of wall time. ``last_ts`` /
    ``last_wall`` tie the newest event time to the wall time it was read at.
    """

    pending: list = field(default_factory=list)
    seen: dict = field(default_factory=dict)
    last_ts: int = 0
    last_wall: int = 0

    def admit(self, items: Iterable[tuple], now: int) -> None:
        """Events read this micro-batch: (ts, seq, source, payload) each."""
        seen, pending = self.seen, self.pending
        for ts, seq, source, payload in items:
            pending.append((ts, seq, payload, now))
            if ts > seen.get(source, -1):
                seen[source] = ts
        newest = max(seen.values(), default=0)
        if newest > self.last_ts:
            self.last_ts, self.last_wall = newest, now

    def safe_ts(self, *, all_sources: bool) -> int:
        """Events at or before this ts have all arrived (``all_sources``: the key is fed by
        every source topic, a group; a topic key reads one source, in order)."""
        if not self.seen:
            return 0
        return min(self.seen.values()) if all_sources else max(self.seen.values())

    def release(self, now: int, max_skew_ms: int, *, all_sources: bool, caught_up: bool = False) -> list:
        """Remove and return, in (ts, seq) order, the events that may be applied now: those
        at or before :meth:`safe_ts`, and those that waited ``max_skew_ms`` (with every
        event before them); all of them when ``caught_up``: the micro-batch that brought this
        call's events read every source topic to the end it had when the batch was planned, so
        no source can still deliver an older event (only one still in flight to the broker at
        that instant, a produce latency; before, ``max_skew_ms`` of wall time was that bound)."""
        pending = self.pending
        if not pending:
            return []
        pending.sort(key=_TS_SEQ)
        if caught_up:
            self.pending = []
            return pending
        safe, expired = self.safe_ts(all_sources=all_sources), now - max_skew_ms
        cut = 0
        for item in pending:
            if item[0] <= safe or item[3] <= expired:
                cut += 1
            else:
                break
        ready, self.pending = pending[:cut], pending[cut:]
        return ready

    def clock(self, now: int) -> int:
        """The key's event time: the newest event's ts plus the wall time since it was read,
        never at or past a held event (decisions must not overtake input still held)."""
        clock = self.last_ts + max(0, now - self.last_wall)
        if self.pending:
            clock = min(clock, self.pending[0][0] - 1)
        return clock

    def wait_ms(self, now: int, max_skew_ms: int) -> int | None:
        """Wall ms until the oldest held event goes regardless of the other source; None if none is held."""
        if not self.pending:
            return None
        return self.pending[0][3] + max_skew_ms - now

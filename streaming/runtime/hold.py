"""Ordering a key's events across source topics, and the key's event-time clock (pure).

A group's events come from one partition of each source topic (heartbeats, offsets),
each in coordinator order, but Spark reads the topics unevenly: a restart catching up
a backlog reads one topic ahead of the other. :class:`Hold` keeps a key's events back
until no source can still deliver an older one, so they are applied in (ts, seq) order
exactly as ``replay --engine local`` applies them, and it maps wall time to event time
for decisions made without input (offset expiry), so an idle group's clock keeps moving.

No Spark, no pandas: ``state_fn.stream_fn`` calls it once per key per micro-batch, and stores it
between micro-batches through ``state_codec`` (its field annotations are its stored form).

What a key holds is named here, once, for the router, the hold, the codec and the state function:
a :class:`Held` entry (ts, seq, payload, arrival) whose payload is a :class:`Record` (a routed
record still to decode) or a :class:`StoredCommit` (what one stored commit wrote to a topic of a
topic bucket); once released and decoded, an event, or for a topic bucket a :class:`TopicEvent`
or the :class:`StoredCommit` as it was. The payload's type is its tag: nothing reads a payload by
its length or by field number. msgspec Structs (``array_like``) rather than NamedTuples or tagged
tuples: msgspec decodes the router's frames straight into them in C, which cost the state
function what the untyped frames did, where building NamedTuples from them cost ~2.5x as much
per item (docs/decisions.md, "Named records"); and each encodes to the array its plain tuple
did, so the stored hold's bytes (state format 1) are unchanged.
"""
from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass, field
from itertools import islice
from operator import attrgetter
from typing import Any, Collection, Generic, Iterable, TypeVar

import msgspec

_TS_SEQ = attrgetter("ts", "seq")
_NOTHING = (float("-inf"), -1)
_ALL = float("inf")

LIVE_LAG_MS = 30_000
"""An event read within this much wall time of its ``ts`` was read live (not from a backlog)."""

MAX_HOLD_MS = 60_000
MAX_HOLD_BATCHES = 100
"""A backlog event goes whatever the other sources did once it has waited this long and the key
has read input in this many micro-batches since (bounds a busy key's hold; both, so that slow or
retried micro-batches, e.g. after an executor loss, do not release it early)."""

QUIET_CALLS = 2
"""Calls in a row without input (state timeouts) after which a backlog key counts as quiet."""

P = TypeVar("P")


class Record(msgspec.Struct, array_like=True, frozen=True, gc=False):
    """A routed record, held undecoded (``routing.decode_released`` decodes it when released):
    its JSON and its event id."""

    value: bytes
    event_id: str | None


class StoredCommit(msgspec.Struct, array_like=True, frozen=True, gc=False):
    """What one stored commit wrote to one topic, held by the topic's bucket (the router reads it
    from the commit; ``partition.note_commits`` applies it): no event is built for it."""

    topic: str
    group_id: str
    partitions: tuple
    offsets: tuple
    leader_epochs: tuple


class TopicEvent(msgspec.Struct, array_like=True, frozen=True, gc=False):
    """A released record of a topic bucket, decoded: the topic of the bucket it is about and what
    that topic's watch applies (``state.engine.route``'s item for the topic's key)."""

    topic: str
    event: Any


class Held(msgspec.Struct, Generic[P], array_like=True, gc=False):
    """One entry of a key's hold: the event's ts and seq (the order it is applied in), its payload,
    and the wall time (ms) it arrived at. Routed frames leave ``arrived`` 0; the state function
    sets it as it admits them (the entries are its own, fresh from the frame)."""

    ts: int
    seq: int
    payload: P
    arrived: int = 0


def stored_payload(stored: list | tuple) -> Record | StoredCommit:
    """A held payload as the stored hold gives it back (format 1: an untyped array; see
    ``state_codec``): a :class:`Record` is ``[JSON, event id]``, a :class:`StoredCommit` ``[topic,
    group id, partitions, offsets, leader epochs]``. Read by the first field's type, the one
    place that tells the two stored forms apart: a record's JSON is bytes, a topic is text."""
    if type(stored[0]) is bytes:
        value, event_id = stored
        return Record(value, event_id)
    topic, group_id, partitions, offsets, epochs = stored
    return StoredCommit(topic, group_id, tuple(partitions), tuple(offsets), tuple(epochs))


@dataclass
class Hold:
    """What a key remembers between micro-batches besides its rules state.

    ``pending`` are events not applied yet: (ts, seq, payload, arrival wall ms).
    ``seen`` is the newest (ts, seq) read from each source topic for this key: a source
    delivers a key's events in that order, so every event at or before ``min(seen)`` has
    arrived, and applying up to there keeps (ts, input order) however unevenly the topics
    are read (ties included: an equal ts from another source may still come with a lower seq).

    A source with nothing for this key would hold its events forever, so they also go on
    wall time, in a way that cannot overtake a topic still being read from a backlog (a
    restart, ``checkpoint bound``: one topic read minutes of event time ahead of the other):

    - an event read live (within :data:`LIVE_LAG_MS` of its ts) goes after ``max_skew`` of
      wall time: the cross-topic skew the monitor tolerates (contract §1);
    - any event goes once the key has read nothing from any source for ``max_skew`` and
      :data:`QUIET_CALLS` calls (the backlog has passed it), or after :data:`MAX_HOLD_MS` and
      :data:`MAX_HOLD_BATCHES` micro-batches with input, in any case.

    ``last_ts`` / ``last_wall`` tie the newest event time to the wall time it was read at;
    ``last_input`` is the wall time the key last read an event, ``idle_calls`` the calls since;
    ``input_walls`` the wall times of the calls with input since the oldest held event arrived.
    """

    # Held entries. Annotated as the arrays they are stored as (ts, seq, payload, arrival): the
    # stored form of format 1, which schema.json records; ``state_codec.decode_hold`` makes them
    # Held again (:func:`stored_payload`).
    pending: list[tuple[int, int, tuple, int]] = field(default_factory=list)
    seen: dict[str, tuple[int, int]] = field(default_factory=dict)  # source -> newest (ts, seq) read
    last_ts: int = 0
    last_wall: int = 0
    last_input: int = 0
    idle_calls: int = 0
    input_walls: list[int] = field(default_factory=list)

    def admit(self, items: Iterable[tuple], now: int) -> None:
        """Events read this micro-batch: (ts, seq, source, payload) each."""
        by_source: dict = {}
        for ts, seq, source, payload in items:
            entries = by_source.get(source)
            if entries is None:
                entries = by_source[source] = []
            entries.append(Held(ts, seq, payload, now))
        for source, entries in by_source.items():
            self.admit_read(source, entries, now)

    def admit_read(self, source: str, entries: list, now: int) -> None:
        """Events read from one source this micro-batch, as :class:`Held` entries arrived ``now``
        (what the router's frames decode to: no second object per event for here)."""
        if not entries:
            return
        self.pending += entries
        newest = max(map(_TS_SEQ, entries))
        prev = self.seen.get(source)
        if prev is None or newest > prev:
            self.seen[source] = newest
        self.last_input = now
        walls = self.input_walls
        if not walls or walls[-1] != now:  # once per call, however many sources it read
            walls.append(now)
        newest_ts = max(s[0] for s in self.seen.values())
        if newest_ts > self.last_ts:
            self.last_ts, self.last_wall = newest_ts, now

    def _safe(self, all_sources: bool, expected: Collection[str]) -> tuple:
        """(ts, seq) at or before which every event has arrived."""
        if not self.seen:
            return _NOTHING
        pairs = list(self.seen.values())
        if not all_sources:
            return (max(pairs)[0], _ALL)  # one source, read in order: its ts is complete
        if any(src not in self.seen for src in expected):
            return _NOTHING  # a source has delivered nothing for this key yet: it may still
        return min(pairs)

    def release(self, now: int, max_skew_ms: int, *, all_sources: bool, expected: Collection[str] = (),
                caught_up: bool = False) -> list:
        """Remove and return, in (ts, seq) order, the events that may be applied now: those
        at or before every source's newest, and those whose wait is over (see the class),
        with every event before them. ``expected``: the source topics that feed a group key
        (one that has delivered nothing for it yet may still deliver an older event).
        ``caught_up``: the micro-batch that brought this call's events read every source topic
        to the end it had when the batch was planned, so no source can still deliver an older
        event (only one still in flight to the broker at that instant, a produce latency): all
        pending events go."""
        self.idle_calls = 0 if self.last_input == now else self.idle_calls + 1
        pending = self.pending
        if not pending:
            self.input_walls = []
            return []
        pending.sort(key=_TS_SEQ)
        if caught_up:
            self.pending, self.input_walls = [], []
            return pending
        safe = self._safe(all_sources, expected)
        expired = now - max_skew_ms
        quiet = self.last_input <= expired and self.idle_calls >= QUIET_CALLS
        walls = self.input_walls
        # Arrived before this wall time and waited MAX_HOLD_BATCHES calls with input since.
        forced = min(now - MAX_HOLD_MS, walls[-MAX_HOLD_BATCHES] - 1 if len(walls) >= MAX_HOLD_BATCHES else -1)
        if quiet:
            cut = len(pending)
        else:
            # Sorted: every event at or before ``safe`` is a prefix (found by bisection, not a
            # step per held event); the wait rules go on from there, event by event.
            cut = bisect_right(pending, safe, key=_TS_SEQ)
            for held in islice(pending, cut, None):
                arrived = held.arrived
                if arrived <= forced or (arrived <= expired and arrived - held.ts <= LIVE_LAG_MS):
                    cut += 1
                else:
                    break
        if cut == 0:
            return []
        ready, self.pending = pending[:cut], pending[cut:]
        if self.pending and walls:
            oldest = min(held.arrived for held in self.pending)
            self.input_walls = [w for w in walls if w >= oldest]
        elif not self.pending:
            self.input_walls = []
        return ready

    def clock(self, now: int) -> int:
        """The key's event time: the newest event's ts plus the wall time since it was read,
        never at or past a held event (decisions must not overtake input still held)."""
        clock = self.last_ts + max(0, now - self.last_wall)
        if self.pending:
            clock = min(clock, self.pending[0].ts - 1)
        return clock

    def wait_ms(self, now: int, max_skew_ms: int) -> int | None:
        """Wall ms until held events may go without more input; None if none is held."""
        if not self.pending:
            return None
        first = self.pending[0]
        # Quiet needs max_skew without input and QUIET_CALLS calls: at least one more call.
        due = max(self.last_input + max_skew_ms, now + 1)
        if first.arrived - first.ts <= LIVE_LAG_MS:
            due = min(due, first.arrived + max_skew_ms)
        return due - now

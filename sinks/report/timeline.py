"""Time buckets for the report's series: a minute each, wider when the range read is long.

Counts are kept in ``Counter``s keyed by tuples holding a bucket number (``ts // width``). A
week of minutes for every group would outgrow memory, so when the range spans more than
:data:`MAX_BUCKETS` buckets the width moves up :data:`WIDTHS_MIN` and every key is re-bucketed
(a few times per run at most): memory stays bounded by groups x ``MAX_BUCKETS``, whatever the
number of records, and the summary states the width it used.
"""
from __future__ import annotations

from collections import Counter

MINUTE_MS = 60_000
MAX_BUCKETS = 1_440  # a day of minutes
# Each width divides the next, so a bucket moves whole into a wider one; past a day, doubling.
WIDTHS_MIN = (1, 5, 15, 30, 60, 120, 360, 720, 1_440)


def width_for(first: int, last: int) -> int:
    """The narrowest bucket width (ms) that puts ``first`` .. ``last`` in ``MAX_BUCKETS`` buckets."""
    widths = [m * MINUTE_MS for m in WIDTHS_MIN]
    while True:
        for width in widths:
            if last // width - first // width < MAX_BUCKETS:
                return width
        widths = [widths[-1] * 2]


class Timeline:
    """Bucket numbers for time stamps, and the counters keyed by them.

    ``counters`` maps a name to a ``Counter`` whose keys hold the bucket number at position
    ``pos`` (registered with :meth:`counter`); :meth:`bucket` widens the buckets when a time
    stamp stretches the range past ``MAX_BUCKETS``."""

    def __init__(self) -> None:
        self.width = MINUTE_MS
        self.first: int | None = None
        self.last: int | None = None
        self._counters: list[tuple[Counter, int]] = []

    def counter(self, pos: int) -> Counter:
        c: Counter = Counter()
        self._counters.append((c, pos))
        return c

    def bucket(self, ts: int) -> int:
        first, last = self.first, self.last
        if first is None:
            self.first = self.last = ts
        elif ts < first or ts > last:
            self.first, self.last = min(first, ts), max(last, ts)
            # bucket numbers, not raw spans: the range in buckets is what must stay bounded
            if self.last // self.width - self.first // self.width >= MAX_BUCKETS:
                self._widen(width_for(self.first, self.last))
        return ts // self.width

    def _widen(self, width: int) -> None:
        old, self.width = self.width, width
        for counter, pos in self._counters:
            moved: Counter = Counter()
            for key, n in counter.items():
                key = (*key[:pos], key[pos] * old // width, *key[pos + 1:])  # old divides width
                moved[key] += n
            counter.clear()
            counter.update(moved)

    def span(self) -> range:
        """Every bucket number from the first record's to the last one's."""
        if self.first is None:
            return range(0)
        return range(self.first // self.width, self.last // self.width + 1)

"""What the decoder counts and what it reports: lines, events, skipped, broken and dropped ones.

What lives here: ``Broken`` (a line that cannot be used: a stable code and a detail), and
``Counting``, the bridge's part that keeps ``counts`` (a ``Counter``: ``lines``, ``events``,
lines per API, ``skipped.*`` / ``broken.*`` / ``dropped.*`` / ``problem.*``), ``routing`` (the
coordinator-routing answers per API and error, contract §10.1 a) and ``problems`` (the newest
``MAX_PROBLEMS`` ``(event_id, code, detail)``; callers drain it). Nothing here raises on bad
input: a broken line is counted and kept, and a bug is logged and counted ``broken.INTERNAL``.
"""

from __future__ import annotations

import logging
from collections import Counter, deque

from fencewatch.streaming.ingest.request_log.wire import COORDINATOR_ERRORS

log = logging.getLogger(__name__)

MAX_PROBLEMS = 10_000
# Counts kept as integer attributes on the hot path (a ``Counter`` update per line was a
# measurable share of a line's time: docs/decisions.md, "Figures that were in code comments"),
# folded into ``counts`` when it is read.
_FAST_COUNTS = (("lines", "_lines"), ("events", "_events"), ("CONSUMER_GROUP_HEARTBEAT", "_heartbeats"),
                ("OFFSET_COMMIT", "_commits"))


class Broken(Exception):
    """A line that cannot be used: ``code`` (stable) and ``detail``."""

    def __init__(self, code: str, detail: str) -> None:
        super().__init__(code, detail)
        self.code, self.detail = code, detail


class Counting:
    """The counts, the routing answers and the problems of a ``RequestLogBridge``."""

    _counts: Counter
    _lines: int
    _events: int
    _heartbeats: int
    _commits: int
    problems: deque[tuple[str, str, str]]
    routing: Counter

    def _init_counting(self) -> None:
        self._counts = Counter()
        self._lines = self._events = self._heartbeats = self._commits = 0  # folded into counts
        self.problems = deque(maxlen=MAX_PROBLEMS)
        # (API name, error name) -> answers that never reached a group (contract §10.1 a)
        self.routing = Counter()

    def _broken(self, event_id: str, exc: Broken) -> None:
        self._counts[f"broken.{exc.code}"] += 1
        self.problems.append((event_id, exc.code, exc.detail[:300]))

    def _dropped(self, api: str, code: int) -> None:
        """contract §10.1 a: a coordinator-routing answer never reached the group; no event, counted
        ``dropped.<NAME>`` and in ``routing`` per API and error."""
        name = COORDINATOR_ERRORS[code]
        self._counts[f"dropped.{name}"] += 1
        self.routing[(api, name)] += 1

    def _internal(self, event_id: str, exc: Exception) -> None:
        log.exception("request-log line %s", event_id)
        self._counts["broken.INTERNAL"] += 1
        self.problems.append((event_id, "INTERNAL", f"{type(exc).__name__}: {exc}"[:300]))

    @property
    def counts(self) -> Counter:
        """Lines, events, lines per API, and every ``skipped.*`` / ``broken.*`` / ``dropped.*`` /
        ``problem.*`` count. The per-line counts are plain integers on the hot path, folded in
        here."""
        c = self._counts
        for key, attr in _FAST_COUNTS:
            n = getattr(self, attr)
            if n:
                c[key] += n
                setattr(self, attr, 0)
        return c

    def summary(self) -> str:
        """One line of counts, for stderr / logs."""
        c = self.counts
        rest = {k: v for k, v in sorted(c.items()) if k not in ("lines", "events")}
        return f"{c['lines']} lines, {c['events']} events" + (f", {rest}" if rest else "")

"""How well a sample of request-log lines decodes: what ``fencewatch doctor`` says about the
lines a shipper delivers before the job reads them.

What lives here: :func:`judge_lines`, the job's own decoder (``RequestLogBridge`` with
``carry=False``, as the Spark job's stateless mapper runs it) over a batch of lines, folded into
a :class:`LineSample`: lines of the APIs it reads judged, lines of other APIs (a broker without the
log4j2 filter), broken lines by reason, lines that are not request-log lines at all (another
logger, a shipper's envelope), and the topic ids no name was found for. Pure: no I/O.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from datetime import tzinfo
from typing import Mapping, Sequence

from fencewatch.streaming.ingest.request_log import RequestLogBridge


@dataclass(frozen=True)
class LineSample:
    lines: int
    judged: int  # completed lines of the APIs the decoder reads (commits, heartbeats, classic membership), decoded
    other_apis: int  # completed requests of other APIs: read and skipped
    broken: Counter  # reason code -> lines (BAD_JSON, BAD_FIELD, MISSING_TIMESTAMP, ...)
    not_request_log: int  # another logger's lines, empty lines
    unresolved_topic_ids: int  # distinct topic ids met that no name is known for
    example: tuple[str, str, str] | None  # (event id, code, detail) of one broken line

    @property
    def readable(self) -> int:
        """Lines the decoder reads as request-log lines (of the APIs it reads or of another)."""
        return self.lines - sum(self.broken.values()) - self.not_request_log

    @property
    def share(self) -> float:
        return self.readable / self.lines if self.lines else 1.0


def judge_lines(lines: Sequence[bytes | str], event_ids: Sequence[str], stamps: Sequence[int | None] | None = None,
                *, topic_ids: Mapping[str, str] | None = None, tz: tzinfo | None = None) -> LineSample:
    """Decode ``lines`` (``event_ids[i]``, ``stamps[i]``: line i's id and its record's time stamp)."""
    bridge = RequestLogBridge(topic_ids or {}, tz=tz, carry=False)
    bridge.events_many(list(lines), list(event_ids), None if stamps is None else list(stamps))
    counts = bridge.counts
    broken = Counter({k.removeprefix("broken."): n for k, n in counts.items() if k.startswith("broken.") and n})
    other_apis = counts.get("skipped.OTHER_API", 0)
    not_request_log = counts.get("skipped.OTHER_LOGGER", 0) + counts.get("skipped.EMPTY", 0)
    total = len(lines)
    return LineSample(lines=total, judged=total - other_apis - not_request_log - sum(broken.values()),
                      other_apis=other_apis, broken=broken, not_request_log=not_request_log,
                      unresolved_topic_ids=bridge.unresolved_ids,
                      example=bridge.problems[0] if bridge.problems else None)

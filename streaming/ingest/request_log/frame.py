"""The line around the JSON: its forms, its time stamp, its API key, and the fast path's positions.

A line (Kafka's ``RequestChannel.updateRequestMetrics``, 2.8+)::

    [2026-11-20 09:00:00,123] DEBUG Completed request:{JSON} (kafka.request.logger)

or its message alone (``Completed request:{JSON}``), or the bare JSON object. What lives here:
the positions and tables by which a line of Kafka's default layout, at a second already read
once, is cut without a regex (``FAST_*``), and ``Frame``, the bridge's part that reads every
other form (``_locate``: the API key, the JSON text and the time stamp, or a ``skipped.*`` count)
and turns log4j time stamps into epoch milliseconds, each second computed once.
"""

from __future__ import annotations

import calendar
import re
from collections import Counter
from datetime import datetime, timedelta, timezone, tzinfo

from fencewatch.streaming.ingest.request_log.problems import Broken
from fencewatch.streaming.ingest.request_log.streams_heartbeat import STREAMS_GROUP_HEARTBEAT
from fencewatch.streaming.ingest.request_log.wire import CONSUMER_GROUP_HEARTBEAT, OFFSET_COMMIT, TXN_OFFSET_COMMIT

_MARKER = "Completed request:"
# The usual line, up to the API key: ``[2026-11-20 09:00:00,123] DEBUG Completed request:{"isForwarded":
# false,"requestHeader":{"requestApiKey":8,`` (RequestConvertToJson writes the keys in this order).
_USUAL = re.compile(r'\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),(\d{3})\] [A-Z]+ Completed request:'
                    r'(\{)"isForwarded":(?:true|false),"requestHeader":\{"requestApiKey":(\d{1,5}),')
USUAL_END = "} (kafka.request.logger)"
# The same line read at fixed positions, without the regex: log4j's default ``%d`` is 23
# characters, so ``]`` is at 24, the JSON at 50 and the API key's digits at 104..106 (three
# characters cover ``8,"``, ``28,``, ``68,`` and ``88,``); a line of any other shape takes the
# regex's way.
FAST_HEAD = '] DEBUG Completed request:{"isForwarded":false,"requestHeader":{"requestApiKey":'
FAST_BODY = 24 + len("] DEBUG Completed request:")
FAST_API = 24 + len(FAST_HEAD) + 3
FAST_APIS = {FAST_HEAD + '8,"': OFFSET_COMMIT, FAST_HEAD + "28,": TXN_OFFSET_COMMIT,
             FAST_HEAD + "68,": CONSUMER_GROUP_HEARTBEAT, FAST_HEAD + "88,": STREAMS_GROUP_HEARTBEAT}
FAST_END = len(USUAL_END) - 1
MILLIS = {f"{i:03d}": i for i in range(1000)}
# The same look-ups for ASCII bytes lines (``events_many``): bytes keys next to the text ones
# (a bytes key never equals a str one); ``_fast_seconds`` holds both forms of each second.
FAST_APIS.update({k.encode(): v for k, v in FAST_APIS.items()})
MILLIS.update({k.encode(): v for k, v in MILLIS.items()})
USUAL_END_BYTES = USUAL_END.encode()
_LOGGER = "(kafka.request.logger)"
_API_KEY = '"requestApiKey"'


class Frame:
    """Reads the line around the JSON, in every accepted form, for a ``RequestLogBridge``."""

    tz: tzinfo
    _counts: Counter
    _seconds: dict[str, int]
    _fast_seconds: dict[str | bytes, int]

    def _init_frame(self, tz: tzinfo | None) -> None:
        self.tz = tz or timezone.utc
        self._seconds = {}
        self._fast_seconds = {}  # "[2026-11-20 09:00:00," -> epoch ms, of lines the regex read

    def _locate(self, line: str, ts: int | None) -> tuple[int | None, str, int] | None:
        """(API key, JSON text, time stamp in epoch ms) of any accepted line form, or None for
        a line that is not a completed request (counted)."""
        m = _USUAL.match(line)
        end = line.rfind(USUAL_END) if m is not None else -1
        if end > 0 and not line[end + len(USUAL_END):].strip():
            # The default layout: one C-level match reads the time stamp and the API key, and
            # the JSON is cut out by position.
            second = m.group(1)
            base = self._seconds.get(second)
            if base is None:
                base = self._second_ms(second + ",000", second)
            if len(self._fast_seconds) > 100_000:
                self._fast_seconds.clear()
            self._fast_seconds[line[:21]] = base
            self._fast_seconds[line[:21].encode()] = base  # (events_many's bytes lines)
            return int(m.group(4)), line[m.start(3):end + 1], base + int(m.group(2))
        body, line_ts = self._split(line)
        if body is None:
            return None
        if line_ts is None:
            if ts is None:
                raise Broken("MISSING_TIMESTAMP", "a message-only line and no record timestamp")
            line_ts = ts
        return api_key(body), body, line_ts

    def _split(self, line: str) -> tuple[str | None, int | None]:
        """(the JSON text, the line's time stamp in epoch ms or None); (None, None) for a line
        that is not a completed request (counted)."""
        i = line.find(_MARKER)
        if i < 0:
            stripped = line.strip()
            if stripped.startswith("{"):
                return stripped, None  # the bare JSON object
            self._counts["skipped.EMPTY" if not stripped else "skipped.OTHER_LOGGER"] += 1
            return None, None
        start = i + len(_MARKER)
        end = line.rfind("}")
        if end < start:
            raise Broken("BAD_JSON", "no JSON object after 'Completed request:'")
        tail = line[end + 1:].strip()
        if tail and tail != _LOGGER:
            if tail.startswith("(") and tail.endswith(")") and " " not in tail:
                self._counts["skipped.OTHER_LOGGER"] += 1  # another logger's "Completed request:"
                return None, None
            raise Broken("BAD_JSON", f"text after the JSON object: {tail[:40]!r}")
        ts = None
        j = line.rfind("[", 0, i)  # the last bracket before the message: a shipper may prefix its own
        if j >= 0:
            k = line.find("]", j, i)
            if k < 0:
                raise Broken("BAD_TIMESTAMP", "'[' without ']' before the message")
            ts = self._timestamp(line[j + 1:k])
        return line[start:end + 1], ts

    def _timestamp(self, text: str) -> int:
        """``2026-11-20 09:00:00,123`` (log4j's default ``%d``) in ``tz``, or ISO 8601 with
        ``T`` and an offset (``...,123+01:00`` / ``Z``), which wins over ``tz``. The epoch
        milliseconds of each second are computed once (lines come many per second)."""
        key = text[:19] if len(text) == 23 else text[:19] + "|" + text[23:]
        base = self._seconds.get(key)
        if base is None:
            base = self._second_ms(text, key)
        ms = text[20:23]
        if text[19:20] not in (",", ".") or not ms.isdigit() or not ms.isascii():
            raise Broken("BAD_TIMESTAMP", f"not a log4j time stamp: {text[:40]!r}")
        return base + int(ms)

    def _second_ms(self, text: str, key: str) -> int:
        if len(text) < 23 or text[4] != "-" or text[7] != "-" or text[10] not in " T" or text[13] != ":" \
                or text[16] != ":":
            raise Broken("BAD_TIMESTAMP", f"not a log4j time stamp: {text[:40]!r}")
        digits = text[:4] + text[5:7] + text[8:10] + text[11:13] + text[14:16] + text[17:19]
        try:
            if not (digits.isdigit() and digits.isascii()):
                raise ValueError("not digits")
            dt = datetime(int(text[:4]), int(text[5:7]), int(text[8:10]), int(text[11:13]), int(text[14:16]),
                          int(text[17:19]))
            offset = text[23:]
            dt = dt.replace(tzinfo=_parse_offset(offset) if offset else self.tz)
            base = calendar.timegm(dt.utctimetuple()) * 1000
        except (ValueError, OverflowError) as exc:
            raise Broken("BAD_TIMESTAMP", f"{text[:40]!r}: {exc}") from None
        if len(self._seconds) > 100_000:
            self._seconds.clear()
        self._seconds[key] = base
        return base


def api_key(body: str) -> int | None:
    """``requestHeader.requestApiKey`` read from the text, so that lines of other APIs are
    skipped without parsing their JSON (the decoder re-checks it for the APIs kept)."""
    i = body.find(_API_KEY)
    if i < 0:
        raise Broken("MISSING_FIELD", "requestHeader.requestApiKey")
    i += len(_API_KEY)
    j = body.find(",", i, i + 16)  # Jackson writes the key and the version after it
    text = body[i:j] if j >= 0 else body[i:i + 16]
    try:
        return int(text.lstrip(" \t:").rstrip("} \t"))
    except ValueError:
        raise Broken("BAD_FIELD", f"requestApiKey {text!r}") from None


def _parse_offset(text: str) -> tzinfo:
    if text in ("Z", "z"):
        return timezone.utc
    sign = {"+": 1, "-": -1}.get(text[:1])
    digits = text[1:].replace(":", "")
    if sign is None or not digits.isdigit() or len(digits) not in (2, 4):
        raise ValueError(f"bad zone offset {text!r}")
    minutes = int(digits[:2]) * 60 + (int(digits[2:]) if len(digits) == 4 else 0)
    return timezone(sign * timedelta(minutes=minutes))

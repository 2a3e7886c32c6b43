"""The request-log line around its two bodies: header, connection, timings, client information; topic ids.

What lives here: the API keys the encoder writes, :func:`log_line`,
deterministic topic ids (:func:`topic_id`), and :class:`Framing`, which puts
a request and a response body into the whole line as
``RequestChannel.updateRequestMetrics`` writes it with the default pattern
``[%d] %p %m (%c)%n``: ``RequestConvertToJson.requestDescMetrics``'s object
(keys in its order) in one compact line. Connections, correlation ids and
timings are derived from crc32 of names and a counter, never drawn at random.
Pure: no I/O, no clock.
"""

from __future__ import annotations

import base64
import hashlib
import json
import uuid
import zlib
from collections import Counter
from datetime import datetime, timezone
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from fencewatch.sim.request_log.versions import GroupProfile

OFFSET_COMMIT = 8
TXN_OFFSET_COMMIT = 28
CONSUMER_GROUP_HEARTBEAT = 68
API_NAMES = {OFFSET_COMMIT: "OFFSET_COMMIT", TXN_OFFSET_COMMIT: "TXN_OFFSET_COMMIT", CONSUMER_GROUP_HEARTBEAT: "CONSUMER_GROUP_HEARTBEAT"}

dumps = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, check_circular=False).encode


def _timings(remote: bool) -> tuple[str, ...]:
    """Timing fields of ``requestDescMetrics`` (ms, doubles): a fixed cycle of plausible values.

    Requests that wait for the coordinator's write (accepted commits, heartbeats
    that change a member) spend milliseconds in ``remoteTimeMs``; the rest is
    tens of microseconds.
    """
    out = []
    for n in range(997):
        queue = (n * 37 % 50) / 1000
        local = 0.05 + (n * 53 % 400) / 1000
        remote_ms = 2.0 + (n * 71 % 4000) / 1000 if remote else 0.0
        response_queue = (n * 29 % 30) / 1000
        send = 0.02 + (n * 13 % 40) / 1000
        total = queue + local + remote_ms + response_queue + send
        out.append(
            f'"totalTimeMs":{round(total, 3)!r},"requestQueueTimeMs":{round(queue, 3)!r},"localTimeMs":{round(local, 3)!r},'
            f'"remoteTimeMs":{round(remote_ms, 3)!r},"throttleTimeMs":0,"responseQueueTimeMs":{round(response_queue, 3)!r},'
            f'"sendTimeMs":{round(send, 3)!r}'
        )
    return tuple(out)


_TIMINGS = {False: _timings(False), True: _timings(True)}
_SUFFIX = " (kafka.request.logger)"


def crc(*parts: str) -> int:
    """crc32 of names: what the stream does not determine (brokers, connections, versions) is derived from it."""
    return zlib.crc32("\x00".join(parts).encode())


def topic_id_uuid(topic: str) -> uuid.UUID:
    """A deterministic topic id for a simulated topic: a version-4 UUID from SHA-256 of the name.

    Kafka's ``Uuid.randomUuid`` never hands out an id whose base64 form starts
    with ``-`` (command lines would read it as an option), nor the reserved
    zero and metadata ids; neither can come out of here.
    """
    salt = 0
    while True:
        digest = bytearray(hashlib.sha256(f"fencewatch-sim-topic-id:{salt}:{topic}".encode()).digest()[:16])
        digest[6] = (digest[6] & 0x0F) | 0x40  # version 4, as java.util.UUID.randomUUID
        digest[8] = (digest[8] & 0x3F) | 0x80  # IETF variant
        value = uuid.UUID(bytes=bytes(digest))
        if not _base64url(value).startswith("-"):
            return value
        salt += 1


def _base64url(value: uuid.UUID) -> str:
    return base64.urlsafe_b64encode(value.bytes).rstrip(b"=").decode("ascii")


def topic_id(topic: str) -> str:
    """Kafka's text form (``Uuid.toString``: 22-character base64url) of :func:`topic_id_uuid`."""
    return _base64url(topic_id_uuid(topic))


def log_line(ts_ms: int, payload: str) -> str:
    """One line of ``kafka-request.log``: ``[yyyy-MM-dd HH:mm:ss,SSS] DEBUG Completed request:{...} (kafka.request.logger)``, UTC."""
    stamp = datetime.fromtimestamp(ts_ms // 1000, tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%S")
    return f"[{stamp},{ts_ms % 1000:03d}] DEBUG Completed request:{payload} (kafka.request.logger)"


class Framing:
    """The lines of one run: their count, the API versions they used, topic ids, per-connection state."""

    def __init__(self) -> None:
        self.lines = 0
        self.versions: Counter = Counter()  # "OFFSET_COMMIT v9" -> lines
        self._topic_ids: dict[str, str] = {}
        self._tails: dict[str, tuple[str, str]] = {}
        self._correlation: dict[str, int] = {}
        self._stamp_second = -1
        self._stamp_text = ""

    def topic_id(self, topic: str) -> str:
        tid = self._topic_ids.get(topic)
        if tid is None:
            tid = self._topic_ids[topic] = topic_id(topic)
        return tid

    def topic_ids(self) -> dict[str, str]:
        """``{topic id: topic name}`` of every topic written so far."""
        return {tid: name for name, tid in sorted(self._topic_ids.items())}

    def _connection(self, profile: GroupProfile, client: str) -> str:
        h = crc("conn", client)
        return (
            f"10.0.0.{profile.broker}:9092-10.1.{(h >> 8) & 0xFF}.{h & 0xFF}:{32768 + (h >> 16) % 28000}"
            f"-{h % 3}-{(h >> 4) % 1000}"
        )

    def _correlation_id(self, client: str) -> int:
        # Clients send Fetch, Metadata and other requests in between: ids advance by more than one.
        value = self._correlation.get(client)
        value = (crc("corr", client) % 50) if value is None else value + 1 + value % 7
        if value > 0x7FFFFFFF:
            value = 1
        self._correlation[client] = value
        return value

    def wrap(self, ts: int, api: int, version: int, client_id: str, conn_key: str, profile: GroupProfile,
             request: str, response: str, *, remote: bool) -> str:
        """The whole line around the two bodies (already JSON), keys in ``requestDescMetrics``' order."""
        n = self.lines
        self.lines = n + 1
        self.versions[f"{API_NAMES[api]} v{version}"] += 1
        tail = self._tails.get(conn_key)
        if tail is None:
            software = profile.software_version
            name = "unknown" if software == "unknown" else "apache-kafka-java"
            tail = self._tails[conn_key] = (
                f'"connection":"{self._connection(profile, conn_key)}",',
                f',"securityProtocol":"PLAINTEXT","principal":"User:ANONYMOUS","listener":"PLAINTEXT",'
                f'"clientInformation":{{"softwareName":"{name}","softwareVersion":"{software}"}}}}',
            )
        header = (
            f'{{"isForwarded":false,"requestHeader":{{"requestApiKey":{api},"requestApiVersion":{version},'
            f'"correlationId":{self._correlation_id(conn_key)},"clientId":{dumps(client_id)},'
            f'"requestApiKeyName":"{API_NAMES[api]}"}},"request":'
        )
        timings = _TIMINGS[remote][n % len(_TIMINGS[False])]
        return self._stamp(ts) + header + request + ',"response":' + response + "," + tail[0] + timings + tail[1] + _SUFFIX

    def _stamp(self, ts: int) -> str:
        """``[yyyy-MM-dd HH:mm:ss,SSS] DEBUG Completed request:`` in UTC (the date text cached per second)."""
        second = ts // 1000
        if second != self._stamp_second:
            self._stamp_second = second
            self._stamp_text = datetime.fromtimestamp(second, tz=timezone.utc).strftime("[%Y-%m-%d %H:%M:%S,")
        return f"{self._stamp_text}{ts % 1000:03d}] DEBUG Completed request:"

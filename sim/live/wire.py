"""Kafka's wire protocol by hand, for the requests no client library sends on purpose.

What lives here: the primitive encodings (Kafka's message specs,
``clients/src/main/resources/common/message/*.json``: flexible versions with
compact strings, unsigned varints and tagged fields), a blocking
:class:`Connection` (request header v2, response header v1), and the bodies
of the few requests :mod:`.handbuilt` sends: FindCoordinator v4,
ConsumerGroupHeartbeat v1, OffsetCommit v9, InitProducerId v5, TxnOffsetCommit
v5/v6 and EndTxn v5.

Why by hand: a client always commits with the member epoch it knows now, so the
case KIP-1251 changed (a commit one epoch behind on a partition the member still
owns) is reached by a real client only in a race it does not control. A request
built here carries exactly the epoch a scenario asks for, and the broker judges
it like any other. Standard library only; no I/O outside :class:`Connection`.
"""

from __future__ import annotations

import base64
import itertools
import socket
import struct
import uuid
from dataclasses import dataclass, field

__all__ = ["Connection", "Reader", "Writer", "ProtocolError", "new_member_id", "uuid_from_kafka", "uuid_to_kafka",
           "FIND_COORDINATOR", "OFFSET_COMMIT", "TXN_OFFSET_COMMIT", "CONSUMER_GROUP_HEARTBEAT",
           "INIT_PRODUCER_ID", "END_TXN", "API_VERSIONS", "encode_api_versions", "decode_api_versions",
           "encode_find_coordinator", "decode_find_coordinator",
           "encode_heartbeat", "decode_heartbeat", "HeartbeatAnswer", "encode_offset_commit",
           "encode_txn_offset_commit", "decode_commit_answer", "encode_init_producer_id",
           "decode_init_producer_id", "encode_end_txn", "decode_end_txn"]

OFFSET_COMMIT = 8
FIND_COORDINATOR = 10
API_VERSIONS = 18
INIT_PRODUCER_ID = 22
END_TXN = 26
TXN_OFFSET_COMMIT = 28
CONSUMER_GROUP_HEARTBEAT = 68


class ProtocolError(Exception):
    """The broker's bytes are not what the message spec says (or the socket closed)."""


# -- primitives ---------------------------------------------------------------------------------


class Writer:
    """Appends Kafka primitives; ``compact_*`` are the flexible-version encodings."""

    def __init__(self) -> None:
        self.buf = bytearray()

    def int8(self, v: int) -> "Writer":
        self.buf += struct.pack(">b", v)
        return self

    def int16(self, v: int) -> "Writer":
        self.buf += struct.pack(">h", v)
        return self

    def int32(self, v: int) -> "Writer":
        self.buf += struct.pack(">i", v)
        return self

    def int64(self, v: int) -> "Writer":
        self.buf += struct.pack(">q", v)
        return self

    def uvarint(self, v: int) -> "Writer":
        while v >= 0x80:
            self.buf.append((v & 0x7F) | 0x80)
            v >>= 7
        self.buf.append(v)
        return self

    def compact_string(self, s: str | None) -> "Writer":
        if s is None:
            return self.uvarint(0)
        b = s.encode("utf-8")
        return self.uvarint(len(b) + 1)._raw(b)

    def legacy_string(self, s: str | None) -> "Writer":
        """int16 length + bytes: the request header's client id, in every version."""
        if s is None:
            return self.int16(-1)
        b = s.encode("utf-8")
        return self.int16(len(b))._raw(b)

    def compact_array_len(self, n: int | None) -> "Writer":
        return self.uvarint(0 if n is None else n + 1)

    def uuid(self, raw: bytes) -> "Writer":
        if len(raw) != 16:
            raise ValueError("a Kafka Uuid is 16 bytes")
        return self._raw(raw)

    def no_tags(self) -> "Writer":
        return self.uvarint(0)

    def _raw(self, b: bytes) -> "Writer":
        self.buf += b
        return self


class Reader:
    """Reads Kafka primitives from one response body; tagged fields are skipped."""

    def __init__(self, data: bytes) -> None:
        self.data, self.pos = data, 0

    def _take(self, n: int) -> bytes:
        if self.pos + n > len(self.data):
            raise ProtocolError(f"response ends at byte {len(self.data)}, {n} more wanted at {self.pos}")
        b = self.data[self.pos:self.pos + n]
        self.pos += n
        return b

    def int8(self) -> int:
        return struct.unpack(">b", self._take(1))[0]

    def int16(self) -> int:
        return struct.unpack(">h", self._take(2))[0]

    def int32(self) -> int:
        return struct.unpack(">i", self._take(4))[0]

    def int64(self) -> int:
        return struct.unpack(">q", self._take(8))[0]

    def uvarint(self) -> int:
        shift = value = 0
        while True:
            b = self._take(1)[0]
            value |= (b & 0x7F) << shift
            if not b & 0x80:
                return value
            shift += 7
            if shift > 35:
                raise ProtocolError("varint longer than 5 bytes")

    def compact_string(self) -> str | None:
        n = self.uvarint()
        return None if n == 0 else self._take(n - 1).decode("utf-8")

    def compact_array_len(self) -> int | None:
        n = self.uvarint()
        return None if n == 0 else n - 1

    def uuid(self) -> bytes:
        return self._take(16)

    def skip_tags(self) -> None:
        for _ in range(self.uvarint()):
            self.uvarint()  # tag
            self._take(self.uvarint())


def uuid_to_kafka(raw: bytes) -> str:
    """16 bytes -> Kafka's text form (``Uuid.toString``: base64url, no padding, 22 characters)."""
    return base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")


def uuid_from_kafka(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "==")


def new_member_id() -> str:
    """A member id as ConsumerGroupHeartbeat v1 wants the client to make one (KIP-1082)."""
    return uuid_to_kafka(uuid.uuid4().bytes)


# -- the connection -----------------------------------------------------------------------------


class Connection:
    """One blocking TCP connection to a broker (PLAINTEXT). Every request uses header v2 and
    every answer here has header v1 (all the APIs above are flexible in these versions)."""

    _correlation_ids = itertools.count(1)  # unique in the process: with the client id, a request's line

    def __init__(self, host: str, port: int, client_id: str, timeout_s: float = 10.0) -> None:
        self.client_id = client_id
        self.sock = socket.create_connection((host, port), timeout=timeout_s)

    @classmethod
    def to(cls, address: str, client_id: str, timeout_s: float = 10.0) -> "Connection":
        host, _, port = address.rpartition(":")
        return cls(host, int(port), client_id, timeout_s)

    def request(self, api_key: int, version: int, body: bytes) -> tuple[int, Reader]:
        """Send one request; (its correlation id, a reader of the answer's body). ApiVersions
        answers with header v0 (no tagged fields), every other API here with v1."""
        cid = next(self._correlation_ids) & 0x7FFFFFFF
        head = Writer().int16(api_key).int16(version).int32(cid).legacy_string(self.client_id).no_tags().buf
        payload = bytes(head) + body
        self.sock.sendall(struct.pack(">i", len(payload)) + payload)
        size = struct.unpack(">i", self._read(4))[0]
        r = Reader(self._read(size))
        got = r.int32()
        if got != cid:
            raise ProtocolError(f"answer to correlation id {got}, expected {cid}")
        if api_key != API_VERSIONS:
            r.skip_tags()
        return cid, r

    def _read(self, n: int) -> bytes:
        chunks, left = [], n
        while left:
            b = self.sock.recv(left)
            if not b:
                raise ProtocolError("the broker closed the connection")
            chunks.append(b)
            left -= len(b)
        return b"".join(chunks)

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> "Connection":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# -- ApiVersions v3 -----------------------------------------------------------------------------


def encode_api_versions(software: str = "fencewatch-sim-live", version: str = "1") -> bytes:
    return bytes(Writer().compact_string(software).compact_string(version).no_tags().buf)


def decode_api_versions(r: Reader) -> dict[int, tuple[int, int]]:
    """api key -> (min version, max version) the broker serves."""
    code = r.int16()
    if code:
        raise ProtocolError(f"ApiVersions answered error {code}")
    out = {}
    for _ in range(r.compact_array_len() or 0):
        key, lo, hi = r.int16(), r.int16(), r.int16()
        r.skip_tags()
        out[key] = (lo, hi)
    return out


# -- FindCoordinator v4 (KIP-699 batched keys) -------------------------------------------------


def encode_find_coordinator(key: str, key_type: int = 0) -> bytes:
    """key_type 0: a group, 1: a transactional id."""
    w = Writer().int8(key_type).compact_array_len(1).compact_string(key).no_tags()
    return bytes(w.buf)


def decode_find_coordinator(r: Reader) -> tuple[int, str, int, int]:
    """(error code, host, port, node id) of the first (only) key."""
    r.int32()  # throttle
    n = r.compact_array_len() or 0
    if n < 1:
        raise ProtocolError("FindCoordinator answered no coordinator")
    r.compact_string()  # key
    node, host, port, code = r.int32(), r.compact_string() or "", r.int32(), r.int16()
    r.compact_string()  # error message
    r.skip_tags()
    if n > 1:
        raise ProtocolError("FindCoordinator answered more keys than asked")
    r.skip_tags()
    return code, host, port, node


# -- ConsumerGroupHeartbeat v1 -----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class HeartbeatAnswer:
    error_code: int
    error_message: str | None
    member_id: str | None
    member_epoch: int
    heartbeat_interval_ms: int
    assignment: dict[bytes, tuple[int, ...]] | None = field(default=None)
    """topic id (16 bytes) -> partitions; None: unchanged (the broker omits it)."""


def _topic_partitions(w: Writer, tps: dict[bytes, tuple[int, ...]] | None) -> None:
    if tps is None:
        w.compact_array_len(None)
        return
    w.compact_array_len(len(tps))
    for topic_id, parts in tps.items():
        w.uuid(topic_id).compact_array_len(len(parts))
        for p in parts:
            w.int32(p)
        w.no_tags()


def _read_topic_partitions(r: Reader) -> dict[bytes, tuple[int, ...]]:
    out: dict[bytes, tuple[int, ...]] = {}
    for _ in range(r.compact_array_len() or 0):
        topic_id = r.uuid()
        out[topic_id] = tuple(r.int32() for _ in range(r.compact_array_len() or 0))
        r.skip_tags()
    return out


def encode_heartbeat(group_id: str, member_id: str, member_epoch: int, *, instance_id: str | None = None,
                     rebalance_timeout_ms: int = -1, subscribed_topic_names: list[str] | None = None,
                     owned: dict[bytes, tuple[int, ...]] | None = None) -> bytes:
    """A ConsumerGroupHeartbeat v1 body. None in the optional fields means "unchanged", as
    Kafka's clients send them after the first heartbeat."""
    w = Writer().compact_string(group_id).compact_string(member_id).int32(member_epoch)
    w.compact_string(instance_id).compact_string(None).int32(rebalance_timeout_ms)  # rack id: none
    if subscribed_topic_names is None:
        w.compact_array_len(None)
    else:
        w.compact_array_len(len(subscribed_topic_names))
        for name in subscribed_topic_names:
            w.compact_string(name)
    w.compact_string(None).compact_string(None)  # no regex, the broker's default assignor
    _topic_partitions(w, owned)
    return bytes(w.no_tags().buf)


def decode_heartbeat(r: Reader) -> HeartbeatAnswer:
    r.int32()  # throttle
    code, message, member_id = r.int16(), r.compact_string(), r.compact_string()
    epoch, interval = r.int32(), r.int32()
    assignment = None
    if r.int8() >= 0:  # a nullable struct: -1 null, 1 present
        assignment = _read_topic_partitions(r)
        r.skip_tags()
    r.skip_tags()
    return HeartbeatAnswer(code, message, member_id, epoch, interval, assignment)


# -- OffsetCommit v9 / TxnOffsetCommit v6 -------------------------------------------------------

CommitEntry = tuple[int, int, int, str | None]
"""(partition, offset, leader epoch, metadata) of one committed partition."""


def _commit_topics(w: Writer, topics: dict[str | bytes, list[CommitEntry]]) -> None:
    """Topics by name (``str``, OffsetCommit v9) or by id (16 ``bytes``, TxnOffsetCommit v6)."""
    w.compact_array_len(len(topics))
    for topic, parts in topics.items():
        if isinstance(topic, bytes):
            w.uuid(topic)
        else:
            w.compact_string(topic)
        w.compact_array_len(len(parts))
        for partition, offset, leader_epoch, metadata in parts:
            w.int32(partition).int64(offset).int32(leader_epoch).compact_string(metadata).no_tags()
        w.no_tags()


def encode_offset_commit(group_id: str, member_epoch: int, member_id: str,
                         topics: dict[str, list[CommitEntry]], instance_id: str | None = None) -> bytes:
    """An OffsetCommit v9 body: the first version a KIP-848 member may use (topics by name;
    ``GenerationIdOrMemberEpoch`` carries the member epoch)."""
    w = Writer().compact_string(group_id).int32(member_epoch).compact_string(member_id).compact_string(instance_id)
    _commit_topics(w, topics)
    return bytes(w.no_tags().buf)


def encode_txn_offset_commit(transactional_id: str, group_id: str, producer_id: int, producer_epoch: int,
                             member_epoch: int, member_id: str, topics: dict[str | bytes, list[CommitEntry]],
                             instance_id: str | None = None) -> bytes:
    """A TxnOffsetCommit v3-v6 body: v6 (Kafka 4.4, KIP-1319) names topics by id (16 bytes)
    and is answered STALE_MEMBER_EPOCH / GROUP_ID_NOT_FOUND where v3-v5 (topics by name) get
    ILLEGAL_GENERATION; the fields are otherwise the same."""
    w = Writer().compact_string(transactional_id).compact_string(group_id).int64(producer_id).int16(producer_epoch)
    w.int32(member_epoch).compact_string(member_id).compact_string(instance_id)
    _commit_topics(w, topics)
    return bytes(w.no_tags().buf)


def decode_commit_answer(r: Reader, by_id: bool = False) -> list[tuple[str, int, int]]:
    """(topic name or Kafka text id, partition, error code) per answered partition."""
    r.int32()  # throttle
    out = []
    for _ in range(r.compact_array_len() or 0):
        topic = uuid_to_kafka(r.uuid()) if by_id else r.compact_string() or ""
        for _ in range(r.compact_array_len() or 0):
            out.append((topic, r.int32(), r.int16()))
            r.skip_tags()
        r.skip_tags()
    r.skip_tags()
    return out


# -- InitProducerId v5 and EndTxn v5 (transactions version 2, KIP-890) -------------------------


def encode_init_producer_id(transactional_id: str, timeout_ms: int = 60_000) -> bytes:
    w = Writer().compact_string(transactional_id).int32(timeout_ms).int64(-1).int16(-1)
    return bytes(w.no_tags().buf)


def decode_init_producer_id(r: Reader) -> tuple[int, int, int]:
    """(error code, producer id, producer epoch)."""
    r.int32()
    code, pid, epoch = r.int16(), r.int64(), r.int16()
    r.skip_tags()
    return code, pid, epoch


def encode_end_txn(transactional_id: str, producer_id: int, producer_epoch: int, committed: bool) -> bytes:
    w = Writer().compact_string(transactional_id).int64(producer_id).int16(producer_epoch).int8(1 if committed else 0)
    return bytes(w.no_tags().buf)


def decode_end_txn(r: Reader) -> int:
    r.int32()
    code = r.int16()
    return code

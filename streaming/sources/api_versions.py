"""Which Apache Kafka release a broker runs, from its ApiVersions answer (no ACL needed).

What lives here: :func:`api_versions`, one ApiVersions v3 request on its own connection (plain or
TLS, as the client settings say), and :func:`kafka_release`, the release that answer
identifies. Kafka has no API that names the broker's software version (DescribeCluster does
not, and JMX is out of reach), but ApiVersions is answered to anyone, before SASL
authentication and without ACLs, and from v3 it carries the broker's *supported* feature
ranges (KIP-584): the highest ``metadata.version`` level a broker supports is the latest
production level of its release (``MetadataVersion.LATEST_PRODUCTION``), which every release
since 3.3 raises. The API ranges alone do not tell 4.2 from 4.3 (both serve OffsetCommit
v2-v10 and ConsumerGroupHeartbeat v0-v1). The *finalized* features of the same answer say
whether KIP-848 is on for the cluster (``group.version`` >= 1).

Imports: the standard library only (sources sit at the start of the flow).
"""
from __future__ import annotations

import os
import socket
import ssl
import struct
from dataclasses import dataclass, field
from typing import Mapping

API_VERSIONS = 18
CONSUMER_GROUP_HEARTBEAT = 68
OFFSET_COMMIT = 8
UNSUPPORTED_VERSION = 35

#: ``metadata.version`` feature levels -> the release that introduced them (Kafka's
#: ``server-common/.../MetadataVersion.java``: IBP_3_3_IV3 = 7 ... IBP_4_4_IV2 = 33).
METADATA_VERSION_RELEASES: tuple[tuple[int, str], ...] = (
    (7, "3.3"), (8, "3.4"), (9, "3.5"), (12, "3.6"), (15, "3.7"), (20, "3.8"), (21, "3.9"),
    (22, "4.0"), (26, "4.1"), (28, "4.2"), (30, "4.3"), (31, "4.4"),
)


class ApiVersionsError(Exception):
    """The broker could not be asked (connection, TLS) or answered something unreadable;
    ``tls``: the TLS handshake or settings failed (the connection itself was made)."""

    def __init__(self, message: str, *, tls: bool = False) -> None:
        super().__init__(message)
        self.tls = tls


@dataclass(frozen=True)
class ApiVersionsInfo:
    """A broker's ApiVersions answer: API key -> (min, max); feature -> (min, max) supported by
    its software; feature -> level finalized for the cluster."""

    apis: Mapping[int, tuple[int, int]]
    supported_features: Mapping[str, tuple[int, int]] = field(default_factory=dict)
    finalized_features: Mapping[str, int] = field(default_factory=dict)

    def max_version(self, api_key: int) -> int | None:
        found = self.apis.get(api_key)
        return None if found is None else found[1]


def kafka_release(info: ApiVersionsInfo) -> str | None:
    """``"4.3"``, ``"4.4"``, ... from the highest ``metadata.version`` the broker supports;
    ``"newer than 4.4"`` above the table; None when the answer has no features (before 2.7,
    or a ZooKeeper-mode broker older than 3.3, which supports no ``metadata.version``)."""
    top = info.supported_features.get("metadata.version")
    if top is None:
        return None
    level = top[1]
    known = [release for first, release in METADATA_VERSION_RELEASES if level >= first]
    if not known:
        return None
    if level > _LAST_KNOWN_LEVEL:
        return f"newer than {known[-1]}"
    return known[-1]


_LAST_KNOWN_LEVEL = 33  # IBP_4_4_IV2


def release_at_least(release: str | None, wanted: str) -> bool:
    """``release_at_least("4.4", "4.3")``; a release "newer than X" is at least X's successors."""
    if release is None:
        return False
    text = release.removeprefix("newer than ")
    newer = release != text
    have = tuple(int(p) for p in text.split("."))
    want = tuple(int(p) for p in wanted.split("."))
    return have >= want or (newer and have >= want[:len(have)])


# --------------------------------------------------------------------------- the wire

def _request(correlation_id: int, client_id: str) -> bytes:
    """ApiVersions v3: request header v2 (client id a nullable int16 string, then no tags),
    body: compact client software name and version, no tags."""
    cid = client_id.encode()
    header = struct.pack(">hhih", API_VERSIONS, 3, correlation_id, len(cid)) + cid + b"\x00"
    body = _compact(b"fencewatch-doctor") + _compact(b"1") + b"\x00"
    message = header + body
    return struct.pack(">i", len(message)) + message


def _compact(raw: bytes) -> bytes:
    return _uvarint(len(raw) + 1) + raw


def _uvarint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data, self.pos = data, 0

    def take(self, n: int) -> bytes:
        if self.pos + n > len(self.data):
            raise ApiVersionsError("ApiVersions answer cut short")
        out = self.data[self.pos:self.pos + n]
        self.pos += n
        return out

    def int16(self) -> int:
        return struct.unpack(">h", self.take(2))[0]

    def int32(self) -> int:
        return struct.unpack(">i", self.take(4))[0]

    def uvarint(self) -> int:
        shift = n = 0
        while True:
            b = self.take(1)[0]
            n |= (b & 0x7F) << shift
            if not b & 0x80:
                return n
            shift += 7

    def compact_string(self) -> str:
        return self.take(self.uvarint() - 1).decode("utf-8", "replace")


def parse_answer(body: bytes) -> ApiVersionsInfo:
    """The body of an ApiVersions v3 answer (after the v0 response header, the correlation id).
    A broker that does not speak v3 answers UNSUPPORTED_VERSION in the v0 layout, with its ranges."""
    r = _Reader(body)
    error = r.int16()
    if error == UNSUPPORTED_VERSION:
        n = r.int32()
        return ApiVersionsInfo({k: (lo, hi) for k, lo, hi in (struct.unpack(">hhh", r.take(6)) for _ in range(n))})
    if error:
        raise ApiVersionsError(f"ApiVersions answered error code {error}")
    apis = {}
    for _ in range(r.uvarint() - 1):
        key, lo, hi = struct.unpack(">hhh", r.take(6))
        _skip_tags(r)
        apis[key] = (lo, hi)
    r.int32()  # throttle time
    supported: dict[str, tuple[int, int]] = {}
    finalized: dict[str, int] = {}
    for _ in range(r.uvarint()):  # the answer's tagged fields
        tag, size = r.uvarint(), r.uvarint()
        field_reader = _Reader(r.take(size))
        if tag == 0:  # SupportedFeatures: name, min, max
            for _ in range(field_reader.uvarint() - 1):
                name = field_reader.compact_string()
                supported[name] = (field_reader.int16(), field_reader.int16())
                _skip_tags(field_reader)
        elif tag == 2:  # FinalizedFeatures: name, max level, min level
            for _ in range(field_reader.uvarint() - 1):
                name = field_reader.compact_string()
                finalized[name] = field_reader.int16()
                field_reader.int16()
                _skip_tags(field_reader)
    return ApiVersionsInfo(apis, supported, finalized)


def _skip_tags(r: _Reader) -> None:
    for _ in range(r.uvarint()):
        r.uvarint()
        r.take(r.uvarint())


# --------------------------------------------------------------------------- connection

def tls_context(client: Mapping[str, str]) -> ssl.SSLContext | None:
    """A TLS context from librdkafka's settings when ``security.protocol`` is SSL or SASL_SSL
    (CA, client certificate and key files; hostname check unless
    ``ssl.endpoint.identification.algorithm`` is ``none``), else None."""
    protocol = str(client.get("security.protocol", "plaintext")).lower()
    if protocol not in ("ssl", "sasl_ssl"):
        return None
    ctx = ssl.create_default_context()
    ca = client.get("ssl.ca.location")
    if ca and ca != "probe":  # "probe": the system's CAs, which the default context has
        if os.path.isdir(ca):
            ctx.load_verify_locations(capath=ca)
        else:
            ctx.load_verify_locations(cafile=ca)
    if client.get("ssl.ca.pem"):
        ctx.load_verify_locations(cadata=client["ssl.ca.pem"])
    if client.get("ssl.certificate.location"):
        ctx.load_cert_chain(client["ssl.certificate.location"], client.get("ssl.key.location"),
                            client.get("ssl.key.password"))
    if str(client.get("ssl.endpoint.identification.algorithm", "https")).lower() == "none":
        ctx.check_hostname = False
    if str(client.get("enable.ssl.certificate.verification", "true")).lower() == "false":
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    return ctx


def api_versions(address: str, client: Mapping[str, str] | None = None, *, timeout_s: float = 10.0,
                 client_id: str = "fencewatch-doctor") -> ApiVersionsInfo:
    """Ask the broker at ``host:port`` (``client``: librdkafka settings, for TLS) for its ApiVersions."""
    host, _, port = address.rpartition(":")
    host = host.strip("[]")
    try:
        ctx = tls_context(client or {})
    except (OSError, ssl.SSLError) as exc:
        raise ApiVersionsError(f"TLS settings: {exc}", tls=True) from None
    try:
        with socket.create_connection((host, int(port)), timeout=timeout_s) as raw:
            sock = ctx.wrap_socket(raw, server_hostname=host) if ctx is not None else raw
            try:
                sock.sendall(_request(1, client_id))
                size = struct.unpack(">i", _read(sock, 4))[0]
                answer = _read(sock, size)
            finally:
                if sock is not raw:
                    sock.close()
    except ssl.SSLError as exc:
        raise ApiVersionsError(f"{address}: TLS: {exc}", tls=True) from None
    except (OSError, ValueError) as exc:
        raise ApiVersionsError(f"{address}: {exc}") from None
    if struct.unpack(">i", answer[:4])[0] != 1:
        raise ApiVersionsError(f"{address}: the answer's correlation id is not the request's")
    return parse_answer(answer[4:])


def _read(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ApiVersionsError("the broker closed the connection")
        buf += chunk
    return bytes(buf)

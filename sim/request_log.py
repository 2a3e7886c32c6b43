"""Broker request-log lines from the simulator's SPEC events (``simulate --format request-log``).

What lives here: :class:`RequestLogEncoder`, which turns the contract §1 event
stream of a simulation into the lines an Apache Kafka broker's
``kafka.request.logger`` writes at DEBUG (contract §10,
research/real-cluster-feed.md §1), so the real-cluster path (request-log
lines -> ``RequestLogBridge`` -> the monitor) can be fed and tested without a
cluster; plus the pieces it is made of: the broker :data:`RELEASES` and the
API versions each accepts, deterministic :func:`topic_id`, :func:`log_line`.

The line is what ``RequestChannel.updateRequestMetrics`` writes with the
default pattern ``[%d] %p %m (%c)%n``: ``RequestConvertToJson.requestDescMetrics``'s
object (keys in its order) with the bodies as the generated
``*DataJsonConverter`` classes render them -- camelCase names of the message
specs, a field only in the versions that have it, ``null`` for unset nullable
fields, topic ids as 22-character base64url -- in one compact line.

Mapping (docs/simulator.md, "Request-log format"):

* ``offset_commit`` / ``txn_offset_commit`` -> one OffsetCommit (8) /
  TxnOffsetCommit (28) line, every partition answered with the event's
  ``error_code`` (the simulated coordinator fails whole requests, as Kafka's
  validator does);
* ``heartbeat`` -> one ConsumerGroupHeartbeat (68) line; the
  ``member_assignment`` the same exchange produced (the next event, same
  member, same ``ts``) goes into that line's response (``memberEpoch``,
  ``assignment`` -- ``null`` when the assigned partitions did not change, as
  the broker does) and a leave's ``member_left`` is the line itself (request
  epoch -1 / -2);
* everything the request log cannot show is skipped and counted
  (:attr:`RequestLogEncoder.counts`): the coordinator's own transitions
  (session / rebalance timeouts, fencing removals), classic groups'
  JoinGroup/SyncGroup/LeaveGroup (APIs the decoder does not read),
  ``group_state``, ``offset_committed`` / ``offset_deleted`` and
  ``partition_epochs`` (no request carries them).

What the SPEC stream does not determine is derived, never drawn at random:
the partitions a member reports owning (its previous assignment, see
:meth:`RequestLogEncoder._owned`), connections, client ids, correlation ids
and timings (from crc32 of names and a counter). Which broker release
coordinates a group and which API versions its clients speak come from the
broker version mix and crc32 of the group id. Pure: no I/O, no clock.
"""

from __future__ import annotations

import base64
import hashlib
import json
import uuid
import zlib
from collections import Counter
from collections.abc import Iterable, Sequence
from datetime import datetime, timezone
from typing import Any, NamedTuple

from fencewatch.state.records import EventType

__all__ = [
    "DEFAULT_BROKER_VERSIONS",
    "RELEASES",
    "Release",
    "RequestLogEncoder",
    "log_line",
    "parse_broker_versions",
    "simulated_topic_ids",
    "topic_id",
    "topic_id_uuid",
]

_COMMITS = frozenset({EventType.OFFSET_COMMIT, EventType.TXN_OFFSET_COMMIT})
OFFSET_COMMIT = 8
TXN_OFFSET_COMMIT = 28
CONSUMER_GROUP_HEARTBEAT = 68
API_NAMES = {OFFSET_COMMIT: "OFFSET_COMMIT", TXN_OFFSET_COMMIT: "TXN_OFFSET_COMMIT", CONSUMER_GROUP_HEARTBEAT: "CONSUMER_GROUP_HEARTBEAT"}

# Lowest versions the request-log decoder reads (contract §10); Kafka 4.0 removed OffsetCommit v0-v1.
MIN_OFFSET_COMMIT = 2
# A KIP-848 member commits with its member epoch: OffsetCommit v9+ (KIP-848).
MIN_CONSUMER_OFFSET_COMMIT = 9


class Release(NamedTuple):
    """The newest stable version of each API a broker release accepts (``validVersions`` of its specs)."""

    name: str
    offset_commit: int
    txn_offset_commit: int
    heartbeat: int | None  # None: no ConsumerGroupHeartbeat (or only unstable): cannot host KIP-848 groups
    epoch_field: str  # OffsetCommit's epoch: ``generationId`` up to 3.5, ``generationIdOrMemberEpoch`` since 3.6


# From clients/src/main/resources/common/message/*.json on each branch of Kafka (confluentinc/kafka
# mirror). 3.6: OffsetCommit v9 and ConsumerGroupHeartbeat v0 are latestVersionUnstable; 4.1: v10 is.
RELEASES: dict[str, Release] = {
    r.name: r
    for r in (
        Release("3.5", 8, 3, None, "generationId"),
        Release("3.6", 8, 3, None, "generationIdOrMemberEpoch"),
        Release("3.7", 9, 3, 0, "generationIdOrMemberEpoch"),
        Release("3.8", 9, 4, 0, "generationIdOrMemberEpoch"),
        Release("3.9", 9, 4, 0, "generationIdOrMemberEpoch"),
        Release("4.0", 9, 5, 1, "generationIdOrMemberEpoch"),
        Release("4.1", 9, 5, 1, "generationIdOrMemberEpoch"),
        Release("4.2", 10, 5, 1, "generationIdOrMemberEpoch"),
        Release("4.3", 10, 5, 1, "generationIdOrMemberEpoch"),
    )
}
DEFAULT_BROKER_VERSIONS = ("3.7", "4.0", "4.2")
CLIENT_VERSIONS = ("newest", "all")

# Messages of Kafka's exceptions for the heartbeat errors the simulator answers (Errors.java, 4.3).
_ERROR_MESSAGES = {
    22: "Specified group generation id is not valid.",
    25: "The coordinator is not aware of this member.",
    110: "The member epoch is fenced by the group coordinator. The member must abandon all its partitions and rejoin.",
    111: "The instance ID is still used by another member in the consumer group. That member must leave first.",
    113: "The member epoch is stale. The member must retry after receiving its updated member epoch via the ConsumerGroupHeartbeat API.",
}

_dumps = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, check_circular=False).encode


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
_EMPTY = '""'
_OFFSET_SLOT = "\x00"


def _request_partition(offset: dict, leader_epoch: bool, value: str | None = None) -> str:
    """One partition of a commit request, in the spec's field order (``value``: the offset's text)."""
    metadata = offset.get("metadata", "")
    epoch = f'"committedLeaderEpoch":{offset.get("leader_epoch", -1)},' if leader_epoch else ""
    return (
        f'{{"partitionIndex":{offset["partition"]},"committedOffset":{offset["offset"] if value is None else value},{epoch}'
        f'"committedMetadata":{_EMPTY if metadata == "" else _dumps(metadata)}}}'
    )


def parse_broker_versions(text: str | Sequence[str]) -> tuple[str, ...]:
    """``"3.7,4.0,4.2"`` or ``"all"`` -> release names; at least one must host KIP-848 groups (3.7+)."""
    items = [text] if isinstance(text, str) else list(text)
    names: list[str] = []
    for item in items:
        for part in item.split(","):
            part = part.strip()
            if not part:
                continue
            if part == "all":
                names.extend(RELEASES)
            elif part in RELEASES:
                names.append(part)
            else:
                raise ValueError(f"unknown broker version {part!r}; valid: all, {', '.join(RELEASES)}")
    names = list(dict.fromkeys(names))
    if not names:
        raise ValueError("no broker version given; valid: all, " + ", ".join(RELEASES))
    if not any(RELEASES[n].heartbeat is not None for n in names):
        raise ValueError(
            f"broker versions {','.join(names)} cannot coordinate KIP-848 groups "
            "(ConsumerGroupHeartbeat is stable from 3.7); add 3.7 or newer"
        )
    return tuple(names)


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


def simulated_topic_ids(config: Any) -> dict[str, str]:
    """``{topic id: name}`` of every topic a simulation (a ``SimConfig``) will use, before it runs.

    For a consumer of the lines that must know the ids up front (the demo's
    streaming job reads ``--topic-ids`` at start).
    """
    from fencewatch.sim.emit import DictEmitter
    from fencewatch.sim.engine import Simulator

    sim = Simulator(config, DictEmitter(lambda kind, key, event: None))
    return {topic_id(name): name for name in sorted({log.topic for log in sim.logs.values()})}


def log_line(ts_ms: int, payload: str) -> str:
    """One line of ``kafka-request.log``: ``[yyyy-MM-dd HH:mm:ss,SSS] DEBUG Completed request:{...} (kafka.request.logger)``, UTC."""
    stamp = datetime.fromtimestamp(ts_ms // 1000, tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%S")
    return f"[{stamp},{ts_ms % 1000:03d}] DEBUG Completed request:{payload} (kafka.request.logger)"


def _crc(*parts: str) -> int:
    return zlib.crc32("\x00".join(parts).encode())


class _GroupProfile(NamedTuple):
    """What one group's traffic looks like on the wire: its coordinator's release and the versions spoken."""

    release: Release
    broker: int  # broker id of the group's coordinator (1-3), for the connection string
    offset_commit: int
    txn_offset_commit: int
    heartbeat: int
    software_version: str


class _Member:
    """What the encoder remembers of one KIP-848 member (the broker's view, as the lines showed it)."""

    __slots__ = ("epoch", "assigned", "pending", "owned_sent", "instance_id", "subscribed", "client_id", "joined")

    def __init__(self, client_id: str) -> None:
        self.epoch = 0
        self.assigned: tuple = ()  # ((topic, partition), ...) sorted, as last delivered
        self.pending: tuple = ()
        self.owned_sent: tuple | None = None  # last topicPartitions sent
        self.instance_id: str | None = None
        self.subscribed: list[str] | None = None
        self.client_id = client_id
        self.joined = False


def _pairs(entries: Iterable[dict] | None) -> tuple:
    """SPEC ``[{"topic", "partitions"}]`` -> sorted ``((topic, partition), ...)``."""
    if not entries:
        return ()
    return tuple(sorted((e["topic"], p) for e in entries for p in e["partitions"]))


class RequestLogEncoder:
    """SPEC events in, ``(group_id, line)`` pairs out, in the order a broker would have logged them.

    Feed every event of a run to :meth:`add` in emission order, then call
    :meth:`close`. A heartbeat is held until the next event, which may be the
    ``member_assignment`` or ``member_left`` its exchange produced.
    ``counts`` says, per event type, what became of it: ``encoded``,
    ``carried`` (folded into a heartbeat line) or ``skipped:<reason>``.
    """

    def __init__(
        self,
        *,
        broker_versions: Sequence[str] = DEFAULT_BROKER_VERSIONS,
        client_versions: str = "newest",
        rebalance_timeout_ms: int = 300_000,
        heartbeat_interval_ms: int = 5_000,
    ) -> None:
        if client_versions not in CLIENT_VERSIONS:
            raise ValueError(f"unknown client versions {client_versions!r}; valid: {', '.join(CLIENT_VERSIONS)}")
        self.releases = parse_broker_versions(broker_versions)
        self.client_versions = client_versions
        self.rebalance_timeout_ms = rebalance_timeout_ms
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.counts: Counter = Counter()
        self.versions: Counter = Counter()  # "OFFSET_COMMIT v9" -> lines
        self.lines = 0
        self._topic_ids: dict[str, str] = {}
        self._groups: dict[str, _GroupProfile] = {}
        self._classic: set[str] = set()
        self._seen = {True: 0, False: 0}  # groups given a profile, per "is a KIP-848 group"
        self._txn: dict[str, int] = {}  # group -> TxnOffsetCommit version (client_versions="all")
        self._pinned: set[str] = set()
        self._members: dict[tuple[str, str], _Member] = {}
        self._clients_per_group: Counter = Counter()
        self._correlation: dict[str, int] = {}
        self._held: list[dict] | None = None  # [heartbeat, member_assignment?]
        self._tails: dict[str, tuple[str, str]] = {}
        self._commit_shapes: dict[tuple, tuple] = {}
        self._stamp_second = -1
        self._stamp_text = ""

    # ------------------------------------------------------------------ public

    def add(self, event: dict) -> list[tuple[str, str]]:
        """Lines completed by this event (the held heartbeat's, then the event's own)."""
        out: list[tuple[str, str]] = []
        kind = event.get("type")
        held = self._held
        if held is not None:
            hb = held[0]
            same = event.get("group_id") == hb["group_id"] and event.get("member_id") == hb["member_id"]
            if same and kind == EventType.MEMBER_ASSIGNMENT and len(held) == 1 and hb["error_code"] == 0:
                held.append(event)
                self.counts["member_assignment:carried"] += 1
                return out
            if same and kind == EventType.MEMBER_LEFT:
                reason = event.get("reason")
                if reason in ("leave", "static_leave") and hb["request_epoch"] < 0 and hb["error_code"] == 0:
                    self.counts[f"member_left:{reason}:carried"] += 1
                    return out
                if reason == "fenced":
                    # The coordinator's removal of the old incarnation: no line of its own.
                    self.counts["member_left:fenced:skipped"] += 1
                    self._forget(hb["group_id"], hb["member_id"])
                    return out
            out.append(self._heartbeat_line(*held))
            self._held = None
        if kind == EventType.HEARTBEAT:
            self._held = [event]
            self.counts["heartbeat:encoded"] += 1
        elif kind in _COMMITS:
            out.append(self._commit_line(event))
            self.counts[f"{kind}:encoded"] += 1
        else:
            self._skip(event)
        return out

    def close(self) -> list[tuple[str, str]]:
        """The held heartbeat's line, if any."""
        if self._held is None:
            return []
        line = self._heartbeat_line(*self._held)
        self._held = None
        return [line]

    def encode_all(self, events: Iterable[dict]) -> list[tuple[str, str]]:
        """Every line of ``events`` (tests, small runs)."""
        out: list[tuple[str, str]] = []
        for event in events:
            out.extend(self.add(event))
        out.extend(self.close())
        return out

    def topic_ids(self) -> dict[str, str]:
        """``{topic id: topic name}`` of every topic written so far: the bridge's ``--topic-ids`` file."""
        return {tid: name for name, tid in sorted(self._topic_ids.items())}

    def skipped(self) -> dict[str, int]:
        """Skipped events per ``type:reason``."""
        return {k[: -len(":skipped")]: v for k, v in sorted(self.counts.items()) if k.endswith(":skipped")}

    def group_versions(self, group_id: str) -> dict[str, Any] | None:
        """The broker release and API versions a group's lines use (None before its first line)."""
        profile = self._groups.get(group_id)
        if profile is None:
            return None
        return {
            "broker": profile.release.name,
            EventType.OFFSET_COMMIT.value: profile.offset_commit,
            EventType.TXN_OFFSET_COMMIT.value: self._txn_version(group_id, profile),
            EventType.HEARTBEAT.value: profile.heartbeat,
        }

    def pin_group(self, group_id: str, broker: str, *, offset_commit: int | None = None,
                  txn_offset_commit: int | None = None, heartbeat: int | None = None) -> None:
        """Fix a group's coordinator release and client versions (golden tests, reproducing a capture).

        Versions default to the release's newest and must be ones it accepts.
        """
        release = RELEASES.get(broker)
        if release is None:
            raise ValueError(f"unknown broker version {broker!r}; valid: {', '.join(RELEASES)}")
        oc = release.offset_commit if offset_commit is None else offset_commit
        txn = release.txn_offset_commit if txn_offset_commit is None else txn_offset_commit
        hb = (release.heartbeat or 0) if heartbeat is None else heartbeat
        if not MIN_OFFSET_COMMIT <= oc <= release.offset_commit:
            raise ValueError(f"OffsetCommit v{oc}: broker {broker} accepts v{MIN_OFFSET_COMMIT}-v{release.offset_commit}")
        if not 0 <= txn <= release.txn_offset_commit:
            raise ValueError(f"TxnOffsetCommit v{txn}: broker {broker} accepts v0-v{release.txn_offset_commit}")
        if heartbeat is not None and (release.heartbeat is None or not 0 <= hb <= release.heartbeat):
            raise ValueError(f"ConsumerGroupHeartbeat v{hb}: broker {broker} does not accept it")
        software = "unknown" if oc < 7 else f"{release.name}.0"
        self._groups[group_id] = _GroupProfile(release, 1 + _crc("group", group_id) % 3, oc, txn, hb, software)
        self._pinned.add(group_id)

    # ------------------------------------------------------------------ what the log cannot carry

    def _skip(self, event: dict) -> None:
        kind = event.get("type")
        group_id = event.get("group_id")
        if kind in (EventType.CLASSIC_JOIN, EventType.CLASSIC_SYNC):
            self._classic.add(group_id)
            self.counts[f"{kind}:skipped"] += 1  # JoinGroup / SyncGroup: APIs 11 and 14, not decoded
        elif kind == EventType.GROUP_STATE:
            if event.get("protocol") == "classic":
                self._classic.add(group_id)
            self.counts["group_state:skipped"] += 1  # the coordinator's own state, in no request
        elif kind == EventType.MEMBER_LEFT:
            reason = event.get("reason")
            if group_id in self._classic:
                self.counts[f"member_left:classic_{reason}:skipped"] += 1  # LeaveGroup / classic session timeout
            else:
                self.counts[f"member_left:{reason}:skipped"] += 1  # coordinator-side removal: no request
                self._forget(group_id, event.get("member_id"))
        elif kind == EventType.MEMBER_ASSIGNMENT:
            self.counts["member_assignment:skipped"] += 1  # no heartbeat delivered it (never in the simulator)
        else:
            self.counts[f"{kind}:skipped"] += 1  # offset_committed, offset_deleted, partition_epochs, unknown

    def _forget(self, group_id: str, member_id: str | None) -> None:
        member = self._members.get((group_id, member_id))
        if member is not None:
            # The broker forgot it; the client keeps its id and rejoins with epoch 0.
            member.epoch = 0
            member.assigned = member.pending = ()
            member.owned_sent = None

    # ------------------------------------------------------------------ wire facts

    def _profile(self, group_id: str, consumer: bool) -> _GroupProfile:
        """A group's coordinator release and client versions, fixed at its first line.

        ``newest``: the release by crc32 of the group id, its newest versions.
        ``all``: the n-th group (per protocol) asks for the n-th OffsetCommit
        version of the cycle (v9-v10 for KIP-848 groups, v2-v10 for classic
        ones), TxnOffsetCommit v0-v5 and heartbeat v0-v1 likewise, on a release
        that accepts it, so a run with a handful of groups shows every version.
        """
        profile = self._groups.get(group_id)
        if profile is not None and (profile.release.heartbeat is not None or not consumer):
            return profile
        candidates = [RELEASES[n] for n in self.releases if not consumer or RELEASES[n].heartbeat is not None]
        h = _crc("group", group_id)
        if self.client_versions == "all":
            k = self._seen[consumer]
            self._seen[consumer] = k + 1
            oc_min = MIN_CONSUMER_OFFSET_COMMIT if consumer else MIN_OFFSET_COMMIT
            top = max(r.offset_commit for r in candidates)
            want = oc_min + k % (top - oc_min + 1)
            able = [r for r in candidates if r.offset_commit >= want] or candidates
            release = able[h % len(able)]
            oc = min(want, release.offset_commit)
            txn = min(k % 6, release.txn_offset_commit)
            hb = min(k % 2, release.heartbeat or 0)
            software = "unknown" if oc < 7 else f"{release.name}.0"  # KIP-511 (2.4) clients name themselves
        else:
            release = candidates[h % len(candidates)]
            oc, txn, hb = release.offset_commit, release.txn_offset_commit, release.heartbeat or 0
            software = f"{release.name}.0"
        profile = _GroupProfile(release, 1 + h % 3, oc, txn, hb, software)
        self._groups[group_id] = profile
        return profile

    def _txn_version(self, group_id: str, profile: _GroupProfile) -> int:
        """``all``: the n-th transactional group takes TxnOffsetCommit v(n mod 6), as far as its broker accepts."""
        if self.client_versions != "all" or group_id in self._pinned:
            return profile.txn_offset_commit
        version = self._txn.get(group_id)
        if version is None:
            version = self._txn[group_id] = min(len(self._txn) % 6, profile.release.txn_offset_commit)
        return version

    def _topic_id(self, topic: str) -> str:
        tid = self._topic_ids.get(topic)
        if tid is None:
            tid = self._topic_ids[topic] = topic_id(topic)
        return tid

    def _connection(self, profile: _GroupProfile, client: str) -> str:
        h = _crc("conn", client)
        return (
            f"10.0.0.{profile.broker}:9092-10.1.{(h >> 8) & 0xFF}.{h & 0xFF}:{32768 + (h >> 16) % 28000}"
            f"-{h % 3}-{(h >> 4) % 1000}"
        )

    def _correlation_id(self, client: str) -> int:
        # Clients send Fetch, Metadata and other requests in between: ids advance by more than one.
        value = self._correlation.get(client)
        value = (_crc("corr", client) % 50) if value is None else value + 1 + value % 7
        if value > 0x7FFFFFFF:
            value = 1
        self._correlation[client] = value
        return value

    def _wrap(self, ts: int, api: int, version: int, client_id: str, conn_key: str, profile: _GroupProfile,
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
            f'"correlationId":{self._correlation_id(conn_key)},"clientId":{_dumps(client_id)},'
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

    # ------------------------------------------------------------------ commits

    def _commit_line(self, event: dict) -> tuple[str, str]:
        """A commit's line. A client commits the same partitions at the same epoch many times: the
        bodies are built once per shape as a %-template of the offsets (as the JSON emitter does)."""
        group_id = event["group_id"]
        txn = event["type"] == EventType.TXN_OFFSET_COMMIT
        member_id = event.get("member_id") or ""
        consumer = group_id not in self._classic and (member_id == "" or (group_id, member_id) in self._members)
        profile = self._profile(group_id, consumer)
        offsets = event.get("offsets") or ()
        error = event.get("error_code") or 0
        shape = (group_id, member_id, event.get("member_epoch", -1), event.get("instance_id"), error, txn,
                 event.get("transactional_id"), event.get("producer_id"), event.get("producer_epoch"),
                 tuple([(o["topic"], o["partition"], o.get("leader_epoch", -1), o.get("metadata", "")) for o in offsets]))
        cached = self._commit_shapes.get(shape)
        if cached is None:
            if len(self._commit_shapes) >= 50_000:
                self._commit_shapes.clear()
            cached = self._commit_shapes[shape] = self._commit_template(event, group_id, member_id, txn, profile, error)
        api, version, client_id, template, order, response = cached
        request = template % tuple([offsets[i]["offset"] for i in order])
        line = self._wrap(event["ts"], api, version, client_id, client_id, profile, request, response, remote=error == 0)
        return group_id, line

    def _commit_template(self, event: dict, group_id: str, member_id: str, txn: bool, profile: _GroupProfile,
                         error: int) -> tuple[int, int, str, str, tuple[int, ...], str]:
        """``(api, version, client id, request %-template of the offsets, offset order, response)``."""
        by_topic: dict[str, list[int]] = {}
        offsets = event.get("offsets") or ()
        for i, o in enumerate(offsets):
            by_topic.setdefault(o["topic"], []).append(i)
        if txn:
            api, version = TXN_OFFSET_COMMIT, self._txn_version(group_id, profile)
            key, leader_epochs = "name", version >= 2
            head = (
                f'{{"transactionalId":{_dumps(event.get("transactional_id", ""))},"groupId":{_dumps(group_id)},'
                f'"producerId":{event.get("producer_id", -1)},"producerEpoch":{event.get("producer_epoch", -1)},'
            )
            if version >= 3:
                head += (
                    f'"generationId":{event.get("member_epoch", -1)},"memberId":{_dumps(member_id)},'
                    f'"groupInstanceId":{_dumps(event.get("instance_id"))},'
                )
            response_head = '{"throttleTimeMs":0,'
            client_id = f"producer-{event.get('transactional_id', '')}"
        else:
            api, version = OFFSET_COMMIT, profile.offset_commit
            key, leader_epochs = ("topicId" if version >= 10 else "name"), version >= 6
            head = (
                f'{{"groupId":{_dumps(group_id)},"{profile.release.epoch_field}":{event.get("member_epoch", -1)},'
                f'"memberId":{_dumps(member_id)},'
            )
            if version >= 7:
                head += f'"groupInstanceId":{_dumps(event.get("instance_id"))},'
            if version <= 4:
                head += '"retentionTimeMs":-1,'
            response_head = '{"throttleTimeMs":0,' if version >= 3 else "{"
            member = self._members.get((group_id, member_id))
            if member is not None:
                client_id = member.client_id
            else:
                client_id = "adminclient-1" if member_id == "" else self._member(group_id, member_id).client_id
        request_topics = []
        response_topics = []
        order: list[int] = []
        for topic, indexes in by_topic.items():
            name = f'"{key}":' + (f'"{self._topic_id(topic)}"' if key == "topicId" else _dumps(topic))
            request_topics.append(
                f'{{{name},"partitions":['
                + ",".join(_request_partition(offsets[i], leader_epochs, _OFFSET_SLOT) for i in indexes)
                + "]}"
            )
            response_topics.append(
                f'{{{name},"partitions":['
                + ",".join(f'{{"partitionIndex":{offsets[i]["partition"]},"errorCode":{error}}}' for i in indexes)
                + "]}"
            )
            order.extend(indexes)
        request = head + '"topics":[' + ",".join(request_topics) + "]}"
        # JSON text never holds a raw NUL (json escapes it), so the slot marker cannot collide.
        template = request.replace("%", "%%").replace(_OFFSET_SLOT, "%d")
        response = response_head + '"topics":[' + ",".join(response_topics) + "]}"
        return api, version, client_id, template, tuple(order), response

    def _member(self, group_id: str, member_id: str) -> _Member:
        """The member's record, created with the Java default ``client.id`` ``consumer-<group>-<n>``."""
        key = (group_id, member_id)
        member = self._members.get(key)
        if member is None:
            self._clients_per_group[group_id] += 1
            member = self._members[key] = _Member(f"consumer-{group_id}-{self._clients_per_group[group_id]}")
        return member

    # ------------------------------------------------------------------ heartbeats

    def _topic_partitions(self, pairs: Iterable[tuple[str, int]]) -> list[dict]:
        out: list[dict] = []
        current: dict | None = None
        for topic, partition in pairs:
            if current is None or current["_topic"] != topic:
                current = {"_topic": topic, "topicId": self._topic_id(topic), "partitions": []}
                out.append(current)
            current["partitions"].append(partition)
        for entry in out:
            del entry["_topic"]
        return out

    @staticmethod
    def _owned(member: _Member, joining: bool, assignment: dict | None) -> tuple:
        """The partitions the request reports owning (``topicPartitions``), derived from the member's past.

        A joining client owns nothing. Otherwise a client owns what it was last
        given; when this exchange moves the member, it still owns the
        partitions the coordinator now waits for it to revoke, plus those it
        keeps, and has already released the ones the coordinator dropped.
        """
        if joining:
            return ()
        if assignment is None:
            return tuple(sorted(set(member.assigned) | set(member.pending)))
        assigned = set(_pairs(assignment.get("assigned")))
        pending = set(_pairs(assignment.get("pending_revocation")))
        previous = set(member.assigned) | set(member.pending)
        return tuple(sorted(pending | (previous & assigned)))

    def _heartbeat_line(self, hb: dict, assignment: dict | None = None) -> tuple[str, str]:
        group_id = hb["group_id"]
        member_id = hb["member_id"]
        profile = self._profile(group_id, True)
        version = profile.heartbeat
        member = self._member(group_id, member_id)
        request_epoch = hb["request_epoch"]
        error = hb["error_code"]
        joining = request_epoch == 0
        leaving = request_epoch < 0
        if assignment is not None:
            if assignment.get("instance_id") is not None:
                member.instance_id = assignment["instance_id"]
            if assignment.get("subscribed_topics") is not None:
                member.subscribed = list(assignment["subscribed_topics"])
        owned = self._owned(member, joining, assignment)
        send_owned = joining or assignment is not None or owned != member.owned_sent
        if leaving:
            send_owned = False
        request: dict[str, Any] = {
            "groupId": group_id,
            # v0: the coordinator names a joining member; from v1 the client generates its id.
            "memberId": "" if version == 0 and joining and error == 0 and not member.joined else member_id,
            "memberEpoch": request_epoch,
            "instanceId": member.instance_id,
            "rackId": None,
            "rebalanceTimeoutMs": self.rebalance_timeout_ms if joining else -1,
            "subscribedTopicNames": (member.subscribed or []) if joining else None,
        }
        if version >= 1:
            request["subscribedTopicRegex"] = None
        request["serverAssignor"] = None
        request["topicPartitions"] = self._topic_partitions(owned) if send_owned else None
        if send_owned:
            member.owned_sent = owned
        if error != 0:
            response: dict[str, Any] = {
                "throttleTimeMs": 0,
                "errorCode": error,
                "errorMessage": _ERROR_MESSAGES.get(error),
                "memberId": None,
                "memberEpoch": 0,
                "heartbeatIntervalMs": 0,
                "assignment": None,
            }
        else:
            response = {
                "throttleTimeMs": 0,
                "errorCode": 0,
                "errorMessage": None,
                "memberId": member_id,
                "memberEpoch": hb["response_epoch"],
                "heartbeatIntervalMs": 0 if leaving else self.heartbeat_interval_ms,
                "assignment": None,
            }
            if assignment is not None:
                assigned = _pairs(assignment.get("assigned"))
                # GroupMetadataManager: the assignment goes out on a join, a full request, or a change.
                if joining or assigned != member.assigned:
                    response["assignment"] = {"topicPartitions": self._topic_partitions(assigned)}
                elif assignment.get("member_epoch") == member.epoch:
                    self.counts["member_assignment:not_visible"] += 1  # same epoch, same partitions
                member.epoch = assignment.get("member_epoch", hb["response_epoch"])
                member.assigned = assigned
                member.pending = _pairs(assignment.get("pending_revocation"))
                member.joined = True
            elif leaving:
                self._forget(group_id, member_id)
            else:
                member.epoch = hb["response_epoch"]
        line = self._wrap(hb["ts"], CONSUMER_GROUP_HEARTBEAT, version, member.client_id, member.client_id, profile,
                          _dumps(request), _dumps(response), remote=assignment is not None or leaving)
        return group_id, line

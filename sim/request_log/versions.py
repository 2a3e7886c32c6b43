"""The version mix: which broker release coordinates a group, and which API versions its clients speak.

What lives here: the broker :data:`RELEASES` with the newest version of each
API they accept, :func:`parse_broker_versions` (``--broker-versions``), and
:class:`VersionMix`, which fixes each group's :class:`GroupProfile` at its
first line: ``newest`` (the release by crc32 of the group id, its newest
versions) or ``all`` (groups spread over every version the releases accept),
or pinned by a test. Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

from fencewatch.sim.request_log.wire import crc

from fencewatch.state.records import EventType

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


class GroupProfile(NamedTuple):
    """What one group's traffic looks like on the wire: its coordinator's release and the versions spoken."""

    release: Release
    broker: int  # broker id of the group's coordinator (1-3), for the connection string
    offset_commit: int
    txn_offset_commit: int
    heartbeat: int
    software_version: str


class VersionMix:
    """Each group's :class:`GroupProfile`, fixed at its first line (or pinned)."""

    def __init__(self, broker_versions: str | Sequence[str], client_versions: str) -> None:
        if client_versions not in CLIENT_VERSIONS:
            raise ValueError(f"unknown client versions {client_versions!r}; valid: {', '.join(CLIENT_VERSIONS)}")
        self.releases = parse_broker_versions(broker_versions)
        self.client_versions = client_versions
        self._groups: dict[str, GroupProfile] = {}
        self._seen = {True: 0, False: 0}  # groups given a profile, per "is a KIP-848 group"
        self._txn: dict[str, int] = {}  # group -> TxnOffsetCommit version (client_versions="all")
        self._pinned: set[str] = set()

    def profile(self, group_id: str, consumer: bool) -> GroupProfile:
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
        h = crc("group", group_id)
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
        profile = GroupProfile(release, 1 + h % 3, oc, txn, hb, software)
        self._groups[group_id] = profile
        return profile

    def txn_version(self, group_id: str, profile: GroupProfile) -> int:
        """``all``: the n-th transactional group takes TxnOffsetCommit v(n mod 6), as far as its broker accepts."""
        if self.client_versions != "all" or group_id in self._pinned:
            return profile.txn_offset_commit
        version = self._txn.get(group_id)
        if version is None:
            version = self._txn[group_id] = min(len(self._txn) % 6, profile.release.txn_offset_commit)
        return version

    def group_versions(self, group_id: str) -> dict[str, Any] | None:
        """The broker release and API versions a group's lines use (None before its first line)."""
        profile = self._groups.get(group_id)
        if profile is None:
            return None
        return {
            "broker": profile.release.name,
            EventType.OFFSET_COMMIT.value: profile.offset_commit,
            EventType.TXN_OFFSET_COMMIT.value: self.txn_version(group_id, profile),
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
        self._groups[group_id] = GroupProfile(release, 1 + crc("group", group_id) % 3, oc, txn, hb, software)
        self._pinned.add(group_id)

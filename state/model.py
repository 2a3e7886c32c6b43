"""Vocabulary shared by every rule: Kafka's errors, member states, policies, and the
declaration of the outputs (a verdict's fields, an alert's).

Owns: the one declaration of a verdict record (``PartitionJudgement`` for what the
policies decide per partition, ``CommitVerdicts`` for what a request shares,
``Verdict`` composed of the two, ``POLICY_ANSWER_FIELD`` for which field holds which
policy's answer); every writer and counter of verdicts derives from it.

Names follow Kafka's group coordinator (``member_epoch``, ``assigned_partitions``,
``partitions_pending_revocation``, ``MemberState.UNREVOKED_PARTITIONS``,
``Errors.STALE_MEMBER_EPOCH``) so the rules read like the coordinator's code.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Mapping, NamedTuple

TopicPartition = tuple[str, int]
"""(topic, partition); tuples, not objects: hashing and memory matter on the hot path."""

EpochMap = Mapping[TopicPartition, int]
"""partition -> assignment epoch (KIP-1251 ``AssignmentEpochs``)."""


class KafkaError(str, enum.Enum):
    """Kafka's error names and codes (``org.apache.kafka.common.protocol.Errors``)."""

    NONE = "NONE"
    COORDINATOR_LOAD_IN_PROGRESS = "COORDINATOR_LOAD_IN_PROGRESS"
    COORDINATOR_NOT_AVAILABLE = "COORDINATOR_NOT_AVAILABLE"
    NOT_COORDINATOR = "NOT_COORDINATOR"
    REQUEST_TIMED_OUT = "REQUEST_TIMED_OUT"
    OFFSET_METADATA_TOO_LARGE = "OFFSET_METADATA_TOO_LARGE"
    ILLEGAL_GENERATION = "ILLEGAL_GENERATION"
    UNKNOWN_MEMBER_ID = "UNKNOWN_MEMBER_ID"
    REBALANCE_IN_PROGRESS = "REBALANCE_IN_PROGRESS"
    UNKNOWN_TOPIC_OR_PARTITION = "UNKNOWN_TOPIC_OR_PARTITION"
    GROUP_AUTHORIZATION_FAILED = "GROUP_AUTHORIZATION_FAILED"
    TOPIC_AUTHORIZATION_FAILED = "TOPIC_AUTHORIZATION_FAILED"
    INVALID_COMMIT_OFFSET_SIZE = "INVALID_COMMIT_OFFSET_SIZE"
    GROUP_ID_NOT_FOUND = "GROUP_ID_NOT_FOUND"
    FENCED_INSTANCE_ID = "FENCED_INSTANCE_ID"
    FENCED_MEMBER_EPOCH = "FENCED_MEMBER_EPOCH"
    STALE_MEMBER_EPOCH = "STALE_MEMBER_EPOCH"
    UNKNOWN = "UNKNOWN"

    @property
    def code(self) -> int:
        return _CODE_BY_ERROR[self]

    @classmethod
    def from_code(cls, code: int) -> "KafkaError":
        return _ERROR_BY_CODE.get(code, cls.UNKNOWN)


_CODE_BY_ERROR = {
    KafkaError.NONE: 0,
    KafkaError.REQUEST_TIMED_OUT: 7,
    KafkaError.OFFSET_METADATA_TOO_LARGE: 12,
    KafkaError.COORDINATOR_LOAD_IN_PROGRESS: 14,
    KafkaError.COORDINATOR_NOT_AVAILABLE: 15,
    KafkaError.NOT_COORDINATOR: 16,
    KafkaError.UNKNOWN_TOPIC_OR_PARTITION: 3,
    KafkaError.ILLEGAL_GENERATION: 22,
    KafkaError.UNKNOWN_MEMBER_ID: 25,
    KafkaError.REBALANCE_IN_PROGRESS: 27,
    KafkaError.INVALID_COMMIT_OFFSET_SIZE: 28,
    KafkaError.TOPIC_AUTHORIZATION_FAILED: 29,
    KafkaError.GROUP_AUTHORIZATION_FAILED: 30,
    KafkaError.GROUP_ID_NOT_FOUND: 69,
    KafkaError.FENCED_INSTANCE_ID: 82,
    KafkaError.FENCED_MEMBER_EPOCH: 110,
    KafkaError.STALE_MEMBER_EPOCH: 113,
    KafkaError.UNKNOWN: -1,
}
_ERROR_BY_CODE = {code: err for err, code in _CODE_BY_ERROR.items() if err is not KafkaError.UNKNOWN}

# Errors a commit can get for reasons the assignment model cannot see (coordinator
# moves, timeouts, authorization): the model does not predict them, so a broker
# answer among these is neither agreement nor divergence.
TRANSIENT_ERRORS = frozenset({
    KafkaError.COORDINATOR_LOAD_IN_PROGRESS, KafkaError.COORDINATOR_NOT_AVAILABLE,
    KafkaError.NOT_COORDINATOR, KafkaError.REQUEST_TIMED_OUT, KafkaError.REBALANCE_IN_PROGRESS,
    KafkaError.GROUP_AUTHORIZATION_FAILED, KafkaError.TOPIC_AUTHORIZATION_FAILED,
    KafkaError.OFFSET_METADATA_TOO_LARGE, KafkaError.INVALID_COMMIT_OFFSET_SIZE,
    KafkaError.UNKNOWN_TOPIC_OR_PARTITION, KafkaError.UNKNOWN,
})


class MemberState(str, enum.Enum):
    """``org.apache.kafka.coordinator.group.modern.MemberState``."""

    STABLE = "STABLE"
    UNREVOKED_PARTITIONS = "UNREVOKED_PARTITIONS"
    UNRELEASED_PARTITIONS = "UNRELEASED_PARTITIONS"
    UNKNOWN = "UNKNOWN"

    @classmethod
    def parse(cls, value: str | None) -> "MemberState":
        """Unknown states map to UNKNOWN: newer brokers may add states (forward compatible)."""
        if value is None:
            return cls.STABLE
        known = _MEMBER_STATES.get(value)  # without Enum's Python-level call (one per membership event)
        if known is not None:
            return known
        try:
            return cls(value.upper())
        except ValueError:
            return cls.UNKNOWN


_MEMBER_STATES = {m.value: m for m in MemberState}


class Protocol(str, enum.Enum):
    CONSUMER = "consumer"
    STREAMS = "streams"
    CLASSIC = "classic"


class Policy(str, enum.Enum):
    """The four commit checks (contract §3.2); values are the names configuration uses
    (``broker_policy: assignment_epoch``). The verdict field holding each one's answer is
    :data:`POLICY_ANSWER_FIELD` (``assignment_epoch`` is taken by the partition's epoch)."""

    STRICT = "strict"
    MEMBER_REVOCATION = "member_revocation"
    ASSIGNMENT_EPOCH = "assignment_epoch"
    KIP1251 = "kip1251"




class CommitClass(str, enum.Enum):
    ACCEPTED = "accepted"
    AVOIDABLE = "avoidable"
    ZOMBIE = "zombie"
    STALE = "stale"
    UNKNOWN_MEMBER = "unknown_member"
    FUTURE_EPOCH = "future_epoch"
    OTHER = "other"


class AlertKind(str, enum.Enum):
    FENCING_SPIKE = "FENCING_SPIKE"
    AVOIDABLE_FENCING = "AVOIDABLE_FENCING"
    ZOMBIE_COMMIT = "ZOMBIE_COMMIT"
    UNSAFE_ACCEPT = "UNSAFE_ACCEPT"
    OFFSETS_EXPIRING = "OFFSETS_EXPIRING"
    OFFSETS_EXPIRED = "OFFSETS_EXPIRED"
    LOG_TRUNCATION = "LOG_TRUNCATION"
    OFFSET_OUT_OF_RANGE = "OFFSET_OUT_OF_RANGE"
    STALE_OWNED_CLAIM = "STALE_OWNED_CLAIM"
    DUPLICATE_ASSIGNMENT = "DUPLICATE_ASSIGNMENT"
    MODEL_DIVERGENCE = "MODEL_DIVERGENCE"
    TXN_ABORT_STORM = "TXN_ABORT_STORM"


class Severity(str, enum.Enum):
    INFO = "info"
    WARNING = "warning"
    CRITICAL = "critical"


# --------------------------------------------------------------------------- outputs

Name = str
"""A verdict field holding a plain name from a closed set (an error name, a class, a kind):
writers need not escape it."""


class PartitionJudgement(NamedTuple):
    """The per-partition part of a verdict: what every policy says for one partition of one
    member at one client epoch. It only changes when membership does, so groups cache it.
    A NamedTuple rather than a frozen dataclass: replay builds hundreds of thousands per
    second and a tuple is several times cheaper to construct. Field order is output order."""

    topic: str
    partition: int
    assignment_epoch: int | None
    revocation_epoch: int | None
    strict: Name  # the policies' answers: an error name, "NONE" when accepted
    member_revocation: Name
    assignment_epoch_check: Name
    kip1251: Name
    cls: Name  # CommitClass value; serialised as "class"
    unsafe: bool
    owner_member_id: str | None


# A policy's answer is in the field of its name, but assignment_epoch's: that name is the partition's epoch.
_ANSWER_FIELD_RENAMED = {Policy.ASSIGNMENT_EPOCH: "assignment_epoch_check"}
POLICY_ANSWER_FIELD: dict[Policy, str] = {p: _ANSWER_FIELD_RENAMED.get(p, p.value) for p in Policy}
"""The ``PartitionJudgement`` field that holds each policy's answer."""
POLICY_ANSWERS: tuple[str, ...] = tuple(POLICY_ANSWER_FIELD.values())
"""The policies' answer fields, in ``Policy`` order."""
if not set(POLICY_ANSWERS) <= set(PartitionJudgement._fields):
    raise TypeError(f"PartitionJudgement lacks a policy's answer field: "
                    f"{sorted(set(POLICY_ANSWERS) - set(PartitionJudgement._fields))}")


class UniformParts(tuple):
    """Judgements of a request's partitions that differ in the partition number only (one
    topic, one judgement): the usual request, as the judge makes it. A plain tuple to every
    reader; a writer takes the promise instead of checking every partition."""

    __slots__ = ()


class CommitVerdicts(NamedTuple):
    """All verdicts of one commit request: request fields once, one judgement per partition.

    Verdict records (contract §8.1) are this expanded per partition (:meth:`expand`):
    the request fields before ``broker_error``, the judgement, then the broker's answer
    fields. Encoders may render the shared parts once per request instead.
    """

    event_id: str
    ts: int
    cluster: str
    group_id: str
    member_id: str
    kind: Name  # commit | txn_commit
    client_epoch: int
    broker_epoch: int | None
    broker_error: str | None
    model_agrees: bool | None
    warming_up: bool
    parts: tuple[PartitionJudgement, ...]
    seq: int = 0  # input order of the commit event (the output order after ts)

    def expand(self) -> list["Verdict"]:
        head = self[:_HEAD_END]
        tail = self[_HEAD_END:_TAIL_END]
        return [Verdict(*head, *p, *tail) for p in self.parts]


_HEAD_END = CommitVerdicts._fields.index("broker_error")
_TAIL_END = CommitVerdicts._fields.index("parts")
REQUEST_HEAD_FIELDS = CommitVerdicts._fields[:_HEAD_END]
"""Verdict fields a request shares, before the partition's (event id to broker epoch)."""
REQUEST_TAIL_FIELDS = CommitVerdicts._fields[_HEAD_END:_TAIL_END]
"""Verdict fields a request shares, after the partition's (the broker's answer)."""


def _annotated(cls, names) -> list[tuple[str, object]]:
    return [(n, cls.__annotations__[n]) for n in names]


def verdict_part(name: str, names: tuple[str, ...], doc: str, module: str,
                 extra: tuple[tuple[str, object], ...] = ()) -> type:
    """A NamedTuple of some verdict fields (``names``), typed as the declaration types them, then
    ``extra`` fields of its own: for rules and counters that carry part of a verdict, so they
    never spell its fields out again. ``module``: the caller's ``__name__``, where pickle finds
    the class by ``name``."""
    fields = {**PartitionJudgement.__annotations__, **CommitVerdicts.__annotations__}
    unknown = [n for n in names if n not in fields]
    if unknown:
        raise TypeError(f"{name}: {unknown} are not verdict fields (state.model.PartitionJudgement, CommitVerdicts)")
    part = NamedTuple(name, [(n, fields[n]) for n in names] + list(extra))
    part.__doc__ = doc
    part.__module__ = module
    return part


Verdict = NamedTuple("Verdict", _annotated(CommitVerdicts, REQUEST_HEAD_FIELDS)
                     + _annotated(PartitionJudgement, PartitionJudgement._fields)
                     + _annotated(CommitVerdicts, REQUEST_TAIL_FIELDS))
Verdict.__doc__ = """One (commit event, partition) verdict record (contract §8.1): the request's
head fields, its ``PartitionJudgement``, the request's tail fields; composed from those two
declarations, never spelled out again."""

OUTPUT_NAMES = {"cls": "class"}
"""Field name -> name in output records, where they differ (``class`` is a Python keyword)."""
VERDICT_OUTPUT_FIELDS: tuple[str, ...] = tuple(OUTPUT_NAMES.get(f, f) for f in Verdict._fields)
"""The keys of a verdict record, in output order."""


@dataclass(frozen=True, slots=True)
class Alert:
    """An alert record of contract §8; ``alert_id`` is deterministic (see :mod:`.alerts`)."""

    alert_id: str
    ts: int
    cluster: str
    group_id: str
    kind: str
    severity: str
    summary: str
    details: Mapping[str, str] = field(default_factory=dict)

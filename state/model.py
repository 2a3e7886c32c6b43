"""Vocabulary shared by every rule: Kafka's errors, member states, policies, and the
declaration of the outputs (a verdict's fields, an alert's).

Owns: the one declaration of a verdict record (``PartitionJudgement`` for what the
policies decide per partition, ``CommitVerdicts`` for what a request shares,
``Verdict`` composed of the two); every writer and counter of verdicts derives from it.
The policies' answer fields come from ``fencing.POLICY_TABLE`` (one per row, in its order);
``KafkaError`` (:mod:`.errors`), ``Policy``, ``CommitClass`` and ``POLICY_ANSWER_FIELD``
(:mod:`.fencing`) are re-exported here with the rest of the vocabulary.

Names follow Kafka's group coordinator (``member_epoch``, ``assigned_partitions``,
``partitions_pending_revocation``, ``MemberState.UNREVOKED_PARTITIONS``,
``Errors.STALE_MEMBER_EPOCH``) so the rules read like the coordinator's code.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Mapping, NamedTuple

from fencewatch.state.errors import KafkaError  # noqa: F401  (re-exported: vocabulary)
from fencewatch.state.fencing import POLICY_ANSWER_FIELD, POLICY_TABLE, CommitClass, Policy  # noqa: F401  (ditto)

TopicPartition = tuple[str, int]
"""(topic, partition); tuples, not objects: hashing and memory matter on the hot path."""

EpochMap = Mapping[TopicPartition, int]
"""partition -> assignment epoch (KIP-1251 ``AssignmentEpochs``)."""


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


# Policy (one member per commit policy) and CommitClass are .fencing's: its POLICY_TABLE
# declares the policies, and the verdict's answer fields below derive from it.


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


PartitionJudgement = NamedTuple("PartitionJudgement", [  # types as written: writers format by them (sinks/jsonl.py)
    ("topic", "str"),
    ("partition", "int"),
    ("assignment_epoch", "int | None"),
    ("revocation_epoch", "int | None"),
    # the policies' answers, one field per fencing.POLICY_TABLE row: an error name, "NONE" when accepted
    *((rule.field, "Name") for rule in POLICY_TABLE),
    ("cls", "Name"),  # CommitClass value; serialised as "class"
    ("unsafe", "bool"),
    ("owner_member_id", "str | None"),
])
PartitionJudgement.__doc__ = """The per-partition part of a verdict: what every policy says for one partition of one
member at one client epoch. It only changes when membership does, so groups cache it.
A NamedTuple rather than a frozen dataclass: replay builds hundreds of thousands per
second and a tuple is several times cheaper to construct. Field order is output order; the
policies' answer fields are ``fencing.POLICY_TABLE``'s, in its order."""

POLICY_ANSWERS: tuple[str, ...] = tuple(rule.field for rule in POLICY_TABLE)
"""The policies' answer fields, in ``POLICY_TABLE`` (and ``Policy``) order. (A row whose field
another verdict field has is refused by ``NamedTuple`` at import, naming the field.)"""


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

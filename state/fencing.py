"""The commit rules (contract §3.1-3.3): the guards before any policy, the policies, the class
of a (commit, partition), ``unsafe``. :mod:`.judging` applies them to a request.

Owns: :data:`POLICY_TABLE`, the one declaration of the commit policies: each row is a policy's
name, the verdict field holding its answer and its predicate. :class:`Policy`,
:data:`POLICY_ANSWER_FIELD`, :class:`PolicyOutcomes` and the verdict's answer fields
(:mod:`.model`) derive from it, and every reader of the policies (judging, the verdict
writers, metrics, the report) iterates it: a policy is one row here. Also :class:`CommitClass`,
what :func:`classify` answers.

Shaped like Kafka's ``ConsumerGroup.validateOffsetCommit`` (4.3, KIP-1251):
guards in the coordinator's order, then the per-partition epoch check. Each
policy is one small function over the same four numbers; ``classify`` reads
policy outcomes by name and never re-derives epochs.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass
from itertools import repeat
from typing import Callable, NamedTuple

from fencewatch.state.errors import KafkaError


class CommitClass(str, enum.Enum):
    """The class of a (commit, partition) (contract §3.3)."""

    ACCEPTED = "accepted"
    AVOIDABLE = "avoidable"
    ZOMBIE = "zombie"
    STALE = "stale"
    UNKNOWN_MEMBER = "unknown_member"
    FUTURE_EPOCH = "future_epoch"
    OTHER = "other"


# --------------------------------------------------------------------------- policies
# Each takes (client epoch c, broker epoch b, member revocation epoch, assignment
# epoch ae of the partition or None when the member does not hold it) and says
# whether the commit of that partition is accepted.


def strict(c: int, b: int, revocation_epoch: int, ae: int | None) -> bool:
    """KIP-848 as shipped up to Kafka 4.2: client epoch == broker epoch."""
    return c == b


def member_revocation(c: int, b: int, revocation_epoch: int, ae: int | None) -> bool:
    """KAFKA-19779, first design: RevocationEpoch < client epoch <= broker epoch."""
    return revocation_epoch < c <= b


def assignment_epoch(c: int, b: int, revocation_epoch: int, ae: int | None) -> bool:
    """KAFKA-19779, final design: AssignmentEpoch <= client epoch <= broker epoch (unheld = MAX)."""
    return ae is not None and ae <= c <= b


def kip1251(c: int, b: int, revocation_epoch: int, ae: int | None) -> bool:
    """As shipped (streams 4.2, consumer 4.3): equal epochs pass; else AssignmentEpoch <= c < b."""
    return c == b or (ae is not None and ae <= c < b)


@dataclass(frozen=True, slots=True)
class PolicyRule:
    """One commit policy (contract §3.2): its ``name`` (configuration's ``broker_policy``, the
    metrics' ``policy`` label, the report's columns; also its :class:`PolicyOutcomes` field),
    ``field``, the verdict field holding its answer (an error name, ``"NONE"`` when accepted),
    and ``accepts``, its predicate over (c, b, revocation epoch, ae)."""

    name: str
    field: str
    accepts: Callable[[int, int, int, int | None], bool]


POLICY_TABLE: tuple[PolicyRule, ...] = (
    PolicyRule("strict", "strict", strict),
    PolicyRule("member_revocation", "member_revocation", member_revocation),
    # "assignment_epoch" is the verdict field of the partition's epoch: its answer is renamed
    PolicyRule("assignment_epoch", "assignment_epoch_check", assignment_epoch),
    PolicyRule("kip1251", "kip1251", kip1251),
)
"""The commit policies, in output order (verdict fields, metrics, the report's columns)."""

Policy = enum.Enum("Policy", [(rule.name.upper(), rule.name) for rule in POLICY_TABLE], type=str,
                   module=__name__)
Policy.__doc__ = """The commit checks (contract §3.2), one member per :data:`POLICY_TABLE` row (``Policy.STRICT``,
``Policy.KIP1251``, ...); values are the names configuration uses (``broker_policy: assignment_epoch``)."""

POLICY_ANSWER_FIELD: dict[Policy, str] = {Policy(rule.name): rule.field for rule in POLICY_TABLE}
"""The verdict field that holds each policy's answer."""
POLICY_ORDER: tuple[Policy, ...] = tuple(POLICY_ANSWER_FIELD)
POLICIES: dict[Policy, Callable[[int, int, int, int | None], bool]] = {
    Policy(rule.name): rule.accepts for rule in POLICY_TABLE}

PolicyOutcomes = NamedTuple("PolicyOutcomes", [(rule.name, bool) for rule in POLICY_TABLE])
PolicyOutcomes.__doc__ = """Whether each policy accepts one partition's commit, by policy name
(``outcomes.strict``; in :data:`POLICY_TABLE` order for code that goes over them all)."""
PolicyOutcomes.__module__ = __name__
_ACCEPTS = tuple(rule.accepts for rule in POLICY_TABLE)
_new_tuple = tuple.__new__


# --------------------------------------------------------------------------- the brokers' checks

#: The first Kafka release whose coordinator runs the relaxed check (``kip1251``) on a group type's
#: commits; before it, and for classic members always (``evaluate``), the exact epoch.
#: Streams groups: ``StreamsGroup.validateOffsetCommit`` + ``createAssignmentEpochValidator``
#: (4.2, with the active tasks' assignment epochs of KIP-1071's current assignment records);
#: consumer groups: ``ConsumerGroup.validateOffsetCommit`` + ``createAssignmentEpochValidator``
#: (4.3, KIP-1251). Measured: tests/fixtures/kafka (4.2 rejects the consumer case 4.3 accepts).
KIP1251_SINCE: dict[str, tuple[int, int]] = {"consumer": (4, 3), "streams": (4, 2)}


def release_policy(release: str, group_type: str = "consumer") -> "Policy":
    """The policy a broker of ``release`` (``4.2``, ``4.3.1``) runs on the commits of a
    ``group_type`` group (``consumer`` or ``streams``; :data:`KIP1251_SINCE`). ValueError for a
    release that is not MAJOR.MINOR[.PATCH] or an unknown group type."""
    since = KIP1251_SINCE.get(group_type)
    if since is None:
        raise ValueError(f"unknown group type {group_type!r}; valid: {', '.join(KIP1251_SINCE)}")
    try:
        major, minor = (int(x) for x in release.split(".")[:2])
    except ValueError:
        raise ValueError(f"cannot read Kafka release {release!r} (expected MAJOR.MINOR, e.g. 4.3)") from None
    return Policy.KIP1251 if (major, minor) >= since else Policy.STRICT


KIP1319_TXN_VERSION = 6
"""TxnOffsetCommit from this version on (Kafka 4.4, KIP-1319) answers as OffsetCommit does:
STALE_MEMBER_EPOCH and GROUP_ID_NOT_FOUND where older versions answer ILLEGAL_GENERATION."""


def txn_answers_like_commit(api_version: int | None) -> bool:
    """Whether a TxnOffsetCommit of this version gets OffsetCommit's errors (KIP-1319); an event
    that does not say its version is taken as an older request (contract §10.1 h)."""
    return api_version is not None and api_version >= KIP1319_TXN_VERSION


def rejection_error(transactional: bool, classic_member: bool, txn_v6: bool = False) -> KafkaError:
    """STALE_MEMBER_EPOCH for OffsetCommit from consumer/streams members (and TxnOffsetCommit v6+,
    KIP-1319); ILLEGAL_GENERATION for older TxnOffsetCommit and for classic members
    (``ConsumerGroup.validateMemberEpoch``)."""
    if classic_member or (transactional and not txn_v6):
        return KafkaError.ILLEGAL_GENERATION
    return KafkaError.STALE_MEMBER_EPOCH


# --------------------------------------------------------------------------- pre-checks

@dataclass(frozen=True, slots=True)
class PreCheck:
    """Outcome of the guards that run before any policy, for the whole request."""

    error: KafkaError | None  # None: go on to the policies; NONE: accepted without them
    commit_class: CommitClass | None = None


ACCEPT_WITHOUT_POLICY = PreCheck(KafkaError.NONE, CommitClass.ACCEPTED)
GO_ON = PreCheck(None)


def pre_check(*, group_exists: bool, group_has_members: bool, member_known: bool,
              member_id: str, client_epoch: int, transactional: bool, txn_v6: bool = False) -> PreCheck:
    """Kafka's order (``OffsetMetadataManager.validateOffsetCommit`` then the group's)."""
    # Unknown group: an epoch of -1 creates a simple group and is accepted;
    # otherwise GROUP_ID_NOT_FOUND (TxnOffsetCommit before v6 answers ILLEGAL_GENERATION).
    if not group_exists:
        if client_epoch < 0:
            return ACCEPT_WITHOUT_POLICY
        err = KafkaError.ILLEGAL_GENERATION if transactional and not txn_v6 else KafkaError.GROUP_ID_NOT_FOUND
        return PreCheck(err, CommitClass.OTHER)
    # Epoch -1 into a group without members: accepted whatever the member id (Kafka's
    # ``memberEpoch < 0 && members().isEmpty()``; a classic group's ``generationId < 0`` when
    # Empty): an admin or simple-consumer commit, or a member's last commit after it left
    # (Kafka's Java consumer commits so on close). With members it is the member's lookup below
    # (an empty member id is never known).
    if client_epoch < 0 and not group_has_members:
        return ACCEPT_WITHOUT_POLICY
    # A member the coordinator does not know (left, fenced, never joined).
    if not member_known:
        return PreCheck(KafkaError.UNKNOWN_MEMBER_ID, CommitClass.UNKNOWN_MEMBER)
    return GO_ON


# --------------------------------------------------------------------------- classification

def classify(accepted: PolicyOutcomes, client_epoch: int, broker_epoch: int,
             held_by_other: bool) -> CommitClass:
    """One class per (commit, partition) from the policy outcomes, tried in the contract's order
    (§3.3; ``unknown_member`` and ``other`` are :func:`pre_check`'s): the first that applies wins."""
    # Ahead of the broker's epoch: no policy accepts it, and it is no zombie even on a
    # partition another member holds (the client saw an epoch the model has not).
    if client_epoch > broker_epoch:
        return CommitClass.FUTURE_EPOCH
    if accepted.strict:
        return CommitClass.ACCEPTED
    if accepted.kip1251:  # fenced only because the owner's epoch was stale
        return CommitClass.AVOIDABLE
    if held_by_other:
        return CommitClass.ZOMBIE
    return CommitClass.STALE


def is_unsafe(outcomes: PolicyOutcomes, client_epoch: int, other_assigned_epoch: int | None) -> bool:
    """A policy accepts while another member holds the partition in ``assigned`` at an
    epoch <= the client's: the commit could overwrite the new owner's offsets."""
    return other_assigned_epoch is not None and other_assigned_epoch <= client_epoch and any(outcomes)


def evaluate(c: int, b: int, revocation_epoch: int, ae: int | None,
             exact_generation: bool = False) -> PolicyOutcomes:
    """Every policy's outcome for one partition (:data:`POLICY_TABLE`'s rows). A classic member
    (``exact_generation``) keeps Kafka's exact generation check under every policy: KAFKA-19779 and
    KIP-1251 relax the consumer and streams protocols only (``ClassicGroup.validateOffsetCommit``
    is unchanged in 4.3 and 4.4; seen against those brokers, docs/fidelity.md)."""
    if exact_generation:
        return _new_tuple(PolicyOutcomes, repeat(c == b, len(_ACCEPTS)))
    return _new_tuple(PolicyOutcomes, [accepts(c, b, revocation_epoch, ae) for accepts in _ACCEPTS])

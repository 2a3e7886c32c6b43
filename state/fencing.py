"""The commit rules (contract §3.1-3.3): the guards before any policy, the four policies,
the class of a (commit, partition), ``unsafe``. :mod:`.judging` applies them to a request.

Shaped like Kafka's ``ConsumerGroup.validateOffsetCommit`` (4.3, KIP-1251):
guards in the coordinator's order, then the per-partition epoch check. Each
policy is one small function over the same four numbers; ``classify`` reads
policy outcomes and never re-derives epochs.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping

from fencewatch.state.model import CommitClass, KafkaError, Policy

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


POLICIES: Mapping[Policy, Callable[[int, int, int, int | None], bool]] = {
    Policy.STRICT: strict,
    Policy.MEMBER_REVOCATION: member_revocation,
    Policy.ASSIGNMENT_EPOCH: assignment_epoch,
    Policy.KIP1251: kip1251,
}
POLICY_ORDER = (Policy.STRICT, Policy.MEMBER_REVOCATION, Policy.ASSIGNMENT_EPOCH, Policy.KIP1251)


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
    # Admin / simple-consumer commit (epoch -1, no member id): only into an empty group.
    if client_epoch < 0 and member_id == "":
        if not group_has_members:
            return ACCEPT_WITHOUT_POLICY
        return PreCheck(KafkaError.UNKNOWN_MEMBER_ID, CommitClass.UNKNOWN_MEMBER)
    # A member the coordinator does not know (left, fenced, never joined).
    if not member_known:
        return PreCheck(KafkaError.UNKNOWN_MEMBER_ID, CommitClass.UNKNOWN_MEMBER)
    return GO_ON


# --------------------------------------------------------------------------- classification

def classify(accepted: tuple[bool, bool, bool, bool], client_epoch: int, broker_epoch: int,
             held_by_other: bool) -> CommitClass:
    """One class per (commit, partition) from the policy outcomes, tried in the contract's order
    (§3.3; ``unknown_member`` and ``other`` are :func:`pre_check`'s): the first that applies wins."""
    # Ahead of the broker's epoch: no policy accepts it, and it is no zombie even on a
    # partition another member holds (the client saw an epoch the model has not).
    if client_epoch > broker_epoch:
        return CommitClass.FUTURE_EPOCH
    if accepted[0]:  # strict
        return CommitClass.ACCEPTED
    if accepted[3]:  # kip1251: fenced only because the owner's epoch was stale
        return CommitClass.AVOIDABLE
    if held_by_other:
        return CommitClass.ZOMBIE
    return CommitClass.STALE


def is_unsafe(outcomes: tuple[bool, bool, bool, bool], client_epoch: int,
              other_assigned_epoch: int | None) -> bool:
    """A policy accepts while another member holds the partition in ``assigned`` at an
    epoch <= the client's: the commit could overwrite the new owner's offsets."""
    return other_assigned_epoch is not None and other_assigned_epoch <= client_epoch and any(outcomes)


def evaluate(c: int, b: int, revocation_epoch: int, ae: int | None,
             exact_generation: bool = False) -> tuple[bool, bool, bool, bool]:
    """Every policy's outcome for one partition, in ``POLICY_ORDER``. A classic member
    (``exact_generation``) keeps Kafka's exact generation check under every policy: KAFKA-19779 and
    KIP-1251 relax the consumer and streams protocols only (``ClassicGroup.validateOffsetCommit``
    is unchanged in 4.3 and 4.4; seen against those brokers, docs/fidelity.md)."""
    if exact_generation:
        ok = c == b
        return (ok, ok, ok, ok)
    return (strict(c, b, revocation_epoch, ae), member_revocation(c, b, revocation_epoch, ae),
            assignment_epoch(c, b, revocation_epoch, ae), kip1251(c, b, revocation_epoch, ae))

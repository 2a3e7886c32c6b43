"""Judging one commit request against a group's membership (contract §3).

Owns: the one definition of "held by another member" (:func:`other_holders`), every
policy's answer per partition and per request (:func:`judge_request`, pure: it reads
the group's members and owner indexes, changes nothing), and the rule of what the broker
stored (:func:`commit_stored`: its answer when we have it, else what its policy decides).
The policies themselves are :mod:`.fencing`'s; this module applies them to a request.

Speed tricks here are measured (docs/decisions.md): policy outcomes memoised by the few
numbers they depend on, judgements built with ``tuple.__new__``, and a request whose
partitions the member alone holds judged per distinct assignment epoch, not per partition.
"""
from __future__ import annotations

from itertools import repeat
from operator import add, attrgetter
from typing import Mapping, NamedTuple, Protocol as Shape

from fencewatch.state.assignment import Member
from fencewatch.state.fencing import POLICY_TABLE, PreCheck, classify, evaluate, is_unsafe, rejection_error
from fencewatch.state.memo import Memo
from fencewatch.state.model import (CommitClass, KafkaError, POLICY_ANSWER_FIELD, PartitionJudgement, Policy, Protocol,
                    TopicPartition, TRANSIENT_ERRORS, UniformParts, verdict_part)

_new_tuple = tuple.__new__  # NamedTuples without their Python-level __new__ (hot path)


class Ownership(Shape):
    """What judging reads of a group: its members and who holds each partition."""

    members: Mapping[str, Member]
    owners: Mapping[TopicPartition, tuple[str, ...]]  # partition -> members holding it in `assigned`
    pending_owners: Mapping[TopicPartition, tuple[str, ...]]  # ... pending revocation


# --------------------------------------------------------------------------- held by another member

def other_holders(own: Ownership, tp: TopicPartition, member_id: str) -> tuple[str | None, int | None]:
    """THE definition of "held by another member": (another member holding ``tp`` now, in
    ``assigned`` first, then pending revocation; the smallest epoch at which another member
    holds it in ``assigned``). (None, None): nobody else holds it."""
    holders = own.owners.get(tp)
    if (holders is None or holders == (member_id,)) and tp not in own.pending_owners:
        return _NOBODY  # the common case, without a loop
    holder = None
    other_ae = None
    if holders:
        for h in holders:
            if h != member_id:
                ae = own.members[h].assigned_partitions[tp]
                if holder is None:
                    holder = h
                if other_ae is None or ae < other_ae:
                    other_ae = ae
    if holder is None:
        for h in own.pending_owners.get(tp, ()):
            if h != member_id:
                holder = h
                break
    return holder, other_ae


_NOBODY = (None, None)


def held_by_member_alone(own: Ownership, member: Member, tps: tuple[TopicPartition, ...]) -> bool:
    """Every one of ``tps`` is in the member's ``assigned`` and ``other_holders`` is (None, None)
    for each: the same definition, checked for a whole request with C-level set operations."""
    return (own.pending_owners.keys().isdisjoint(tps)
            and set(map(own.owners.get, tps)) == {(member.member_id,)})


# --------------------------------------------------------------------------- per partition

_ANSWER_FIELDS = tuple(rule.field for rule in POLICY_TABLE)
_N_POLICIES = len(_ANSWER_FIELDS)
Outcome = verdict_part(
    "Outcome", (*_ANSWER_FIELDS, "cls", "unsafe"), module=__name__,
    doc="""Every policy's answer for one partition (error names, "NONE" when accepted), the class
    and whether a policy accepts it unsafely: what a few epochs decide, shared by partitions.""")


# The policies' answers depend only on these few numbers, and a group's partitions share
# them: memoised, judging a partition is a tuple lookup instead of eight function calls.
_OUTCOMES: Memo = Memo(1 << 16)
_ALL_ACCEPT = Outcome(*("NONE",) * _N_POLICIES, CommitClass.ACCEPTED.value, False)
_CLASS_NAMES = {c: c.value for c in CommitClass}
_AVOIDABLE, _ZOMBIE, _STALE = CommitClass.AVOIDABLE.value, CommitClass.ZOMBIE.value, CommitClass.STALE.value
_CLASSED_BY_REQUEST = (_ZOMBIE, _STALE)
"""Classes a partition KIP-1251 accepts has only from its request (:func:`_request_fails_under_kip1251`):
on its own, a partition KIP-1251 accepts and strict rejects is ``avoidable`` (``classify``)."""

# The error a rejecting policy answers (``fencing.rejection_error``) by (transactional, classic
# member, TxnOffsetCommit v6+), by name.
_REJECTION_NAME = {(t, c, v): rejection_error(t, c, v).value
                   for t in (False, True) for c in (False, True) for v in (False, True)}


def outcome(c: int, b: int, rev: int, ae: int | None, rej: str, held_by_other: bool,
            other_ae: int | None, exact: bool = False) -> Outcome:
    """The policies' answers for client epoch ``c`` against broker epoch ``b``, revocation epoch
    ``rev`` and assignment epoch ``ae``; ``rej``: the error a rejecting policy answers; ``exact``:
    a classic member's commit, judged by its generation under every policy."""
    key = (c, b, rev, ae, rej, held_by_other, other_ae, exact)
    found = _OUTCOMES.get(key)
    if found is None:
        res = evaluate(c, b, rev, ae, exact)
        found = _OUTCOMES.put(key, _new_tuple(Outcome, (
            *("NONE" if ok else rej for ok in res), _CLASS_NAMES[classify(res, c, b, held_by_other)],
            is_unsafe(res, c, other_ae))))
    return found


# Judgements are built by position: (topic, partition, assignment epoch, revocation epoch, *outcome, owner).
if PartitionJudgement._fields[4:-1] != Outcome._fields:
    raise TypeError(f"state.model.PartitionJudgement's fields {PartitionJudgement._fields[4:-1]} no longer follow "
                    f"the outcome's {Outcome._fields} (state.judging builds judgements by position)")


def judge_partition(own: Ownership, member: Member, c: int, tp: TopicPartition, rej: str,
                    exact: bool = False) -> PartitionJudgement:
    """Every policy's answer for one partition of a known member."""
    holder, other_ae = other_holders(own, tp, member.member_id)
    rev = member.revocation_epoch
    ae = member.assignment_epoch(tp)
    o = outcome(c, member.member_epoch, rev, ae, rej, holder is not None, other_ae, exact)
    return _new_tuple(PartitionJudgement, (tp[0], tp[1], ae, rev, *o, holder))


# --------------------------------------------------------------------------- per request

PolicyAnswers = NamedTuple("PolicyAnswers", [(f, KafkaError) for f in _ANSWER_FIELDS])
PolicyAnswers.__doc__ = "Each policy's answer for a whole request: Kafka fails it on its first bad partition."
POLICY_ANSWER: dict[Policy, attrgetter] = {p: attrgetter(f) for p, f in POLICY_ANSWER_FIELD.items()}
"""policy -> its answer in a ``PolicyAnswers`` (or a ``PartitionJudgement``)."""
_NO_ERRORS = PolicyAnswers(*(KafkaError.NONE,) * _N_POLICIES)
_ANSWERS = attrgetter(*PolicyAnswers._fields)  # a judgement's answers, in ``PolicyAnswers`` order
_ALL_NONE = ("NONE",) * _N_POLICIES  # what ``_ANSWERS`` gives for a partition every policy accepts


class RequestJudgement(NamedTuple):
    """What every policy says for one commit request: the partitions' judgements, the
    request-level answers and the partitions each alert names. It only changes when
    membership does, so groups cache it per request shape (:mod:`.judgement_cache`)."""

    parts: tuple[PartitionJudgement, ...]
    answers: PolicyAnswers
    zombies: tuple[TopicPartition, ...]
    avoidable: tuple[TopicPartition, ...]
    unsafe: tuple[TopicPartition, ...]


def judge_request(own: Ownership, member: Member, c: int, tps: tuple[TopicPartition, ...], topic: str | None,
                  transactional: bool, group_type: str | None,
                  known: Mapping[TopicPartition, PartitionJudgement], txn_v6: bool = False) -> RequestJudgement:
    """Judge the commit of ``tps`` by a known member at client epoch ``c`` (contract §3.2).

    ``topic``: the request's one topic (None: several, or not known); ``known``: judgements
    of these partitions made since membership last changed, reused as they are; ``txn_v6``: a
    TxnOffsetCommit of version 6 or later (KIP-1319's answers)."""
    classic = member.protocol is Protocol.CLASSIC or group_type == "classic"
    rej = _REJECTION_NAME[(transactional, classic, txn_v6)]  # ``fencing.rejection_error``, by name
    aes = tuple(map(member.assigned_partitions.get, tps))
    if None not in aes and held_by_member_alone(own, member, tps):
        # The common request: each partition's answer depends only on its assignment epoch.
        b, rev = member.member_epoch, member.revocation_epoch
        outcomes = {ae: outcome(c, b, rev, ae, rej, False, None, classic) for ae in set(aes)}
        # A judgement is (topic, partition) + what its assignment epoch decides: joined in C.
        rests = {ae: (ae, rev, *o, None) for ae, o in outcomes.items()}
        make_parts = UniformParts if len(rests) == 1 and topic is not None else tuple
        parts = make_parts(map(_new_tuple, repeat(PartitionJudgement), map(add, tps, map(rests.__getitem__, aes))))
        if set(outcomes.values()) == {_ALL_ACCEPT}:
            return _new_tuple(RequestJudgement, (parts, _NO_ERRORS, (), (), ()))
        return _summarise(parts, tps)
    parts = []
    for tp in tps:
        pj = known.get(tp)
        if pj is None:
            pj = judge_partition(own, member, c, tp, rej, classic)
        elif pj.kip1251 == "NONE" and pj.cls in _CLASSED_BY_REQUEST:
            pj = pj._replace(cls=_AVOIDABLE)  # its own class again: another request made it (below)
        parts.append(pj)
    return _summarise(tuple(parts), tps)


def _summarise(parts: tuple[PartitionJudgement, ...], tps) -> RequestJudgement:
    """The request's answers (each policy's first rejection) and the partitions alerts name."""
    zombies: list[TopicPartition] = []
    unsafe_tps: list[TopicPartition] = []
    avoidable_tps: list[TopicPartition] = []
    first_error: list[KafkaError | None] = [None] * _N_POLICIES
    for tp, pj in zip(tps, parts):
        if pj.cls == "accepted" and not pj.unsafe and _ANSWERS(pj) == _ALL_NONE:
            continue  # every policy accepts it
        if pj.cls == "zombie":
            zombies.append(tp)
        elif pj.cls == "avoidable":
            avoidable_tps.append(tp)
        if pj.unsafe:
            unsafe_tps.append(tp)
        for i, r in enumerate(_ANSWERS(pj)):
            if r != "NONE" and first_error[i] is None:
                first_error[i] = KafkaError(r)
    answers = PolicyAnswers(*(e if e is not None else KafkaError.NONE for e in first_error))
    if avoidable_tps and answers.kip1251 is not KafkaError.NONE:
        parts, zombies = _request_fails_under_kip1251(parts, tps, zombies)
        avoidable_tps = []
    return RequestJudgement(parts, answers, tuple(zombies), tuple(avoidable_tps), tuple(unsafe_tps))


def _request_fails_under_kip1251(parts: tuple[PartitionJudgement, ...], tps, zombies: list[TopicPartition]):
    """The class follows the request (contract §3.3): Kafka fails a commit request on its first bad
    partition, so where KIP-1251 rejects another partition of it, a partition KIP-1251 alone would
    accept is not saved by it and is not ``avoidable``. It is classed as ``classify`` classes a
    partition no policy saves: ``zombie`` when another member holds it, else ``stale``."""
    out = []
    zombies = list(zombies)
    for tp, pj in zip(tps, parts):
        if pj.cls == _AVOIDABLE:
            cls = _ZOMBIE if pj.owner_member_id is not None else _STALE
            pj = pj._replace(cls=cls)
            if cls == _ZOMBIE:
                zombies.append(tp)
        out.append(pj)
    return tuple(out), zombies


def judge_before_policies(own: Ownership, member_id: str, tps: tuple[TopicPartition, ...], pre: PreCheck,
                          warming: bool) -> RequestJudgement:
    """A request decided by the guards before any policy (unknown group or member, admin
    commit): every policy answers the guard's error for every partition."""
    name = pre.error.value
    cls = (CommitClass.OTHER if warming else pre.commit_class).value
    names = (name,) * _N_POLICIES
    parts = tuple(PartitionJudgement(tp[0], tp[1], None, None, *names, cls, False,
                                     other_holders(own, tp, member_id)[0]) for tp in tps)
    return RequestJudgement(parts, PolicyAnswers(*(pre.error,) * _N_POLICIES), (), (), ())


# --------------------------------------------------------------------------- the broker's side

def commit_stored(broker_error: str | None, predicted: str) -> bool:
    """Whether the broker stored the commit: its answer when we have one, else the prediction
    of the broker's policy. A rejected TxnOffsetCommit aborts its transaction (contract §6)."""
    return (broker_error if broker_error is not None else predicted) == "NONE"


def model_agrees(broker_error: KafkaError | None, predicted: KafkaError, warming: bool,
                 foreseen: frozenset[KafkaError] = frozenset()) -> bool | None:
    """Whether the broker's answer is what the broker's policy predicts; None when there is no
    answer, the group is warming up, or the answer is one the model cannot see (transient) and
    not one it foresees for this group (``foreseen``: ``classic.foreseen_errors``)."""
    if broker_error is None or warming or (broker_error in TRANSIENT_ERRORS and broker_error not in foreseen):
        return None
    return broker_error is predicted

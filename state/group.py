"""One group's coordinator state and the transitions events make to it.

``process(group, event, cfg, out)`` is the single entry point both engines use
(``replay --engine local`` and the Spark state function): it returns the
group's next state and appends verdicts and alerts to ``out``. ``advance``
moves the group's clock forward without input (expiry decisions), and
``next_wakeup`` says when it next has something to do (the Spark state timeout).

Unlike the rules it calls (``fencing``, ``assignment``, ``expiry``,
``truncation``: pure functions over frozen values), the group aggregate is a
mutable object updated in place: copying it per event cost more than judging
the commit (docs/decisions.md). Members stay frozen and are swapped whole.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from itertools import repeat
from operator import add, itemgetter
from typing import Callable, Mapping, NamedTuple

from . import expiry as exp
from . import spike as spk
from . import folding
from .memo import Memo
from .alerts import make_alert
from .assignment import (Member, apply_classic_generation, apply_member_assignment, apply_static_leave,
                         resolve_unchanged_assignment)
from .config import RulesConfig
from .events import (ClassicJoin, ClassicSync, GroupStateChange, Heartbeat, MemberAssignment, MemberLeft,
                     OffsetCommit, OffsetCommitted, OffsetDeleted)
from .fencing import POLICY_ORDER, classify, evaluate, is_unsafe, pre_check, rejection_error
from .model import (Alert, AlertKind, CommitClass, CommitVerdicts, KafkaError, PartitionJudgement, Protocol,
                    Severity, TopicPartition, TRANSIENT_ERRORS, UniformParts, Verdict)
from .sticky import add_claims

# Per-commit alert kinds folded into a count within ``alert_cooldown_ms``.
COOLDOWN_KINDS = frozenset({AlertKind.AVOIDABLE_FENCING.value, AlertKind.ZOMBIE_COMMIT.value,
                            AlertKind.UNSAFE_ACCEPT.value, AlertKind.MODEL_DIVERGENCE.value,
                            AlertKind.DUPLICATE_ASSIGNMENT.value, AlertKind.STALE_OWNED_CLAIM.value})
MAX_LISTED = 20  # partitions listed in an alert's details
_BROKER_POLICY_INDEX = {p: i for i, p in enumerate(POLICY_ORDER)}
_new_tuple = tuple.__new__  # NamedTuples without their Python-level __new__ (hot path)
_TOPIC = itemgetter(0)


@dataclass
class Outputs:
    """What processing emits; a plain collector so the hot path appends, never copies."""

    commits: list[CommitVerdicts] = field(default_factory=list)
    alerts: list[Alert] = field(default_factory=list)

    @property
    def verdicts(self) -> list[Verdict]:
        """Every verdict record, one per (commit, partition), in processing order."""
        return [v for cv in self.commits for v in cv.expand()]


@dataclass(slots=True)
class Counters:
    """Monotone per-group counts, exported as metrics."""

    rebalances: int = 0
    heartbeats: int = 0
    heartbeat_fenced: int = 0  # FENCED_MEMBER_EPOCH
    heartbeat_unknown_member: int = 0  # UNKNOWN_MEMBER_ID
    commits: int = 0
    txn_commits: int = 0
    txn_aborts: int = 0  # rejected transactional commits
    txn_avoidable_aborts: int = 0  # ... that kip1251 would have accepted
    divergences: int = 0
    expired_offsets: int = 0
    broker_fencing_errors: int = 0  # STALE_MEMBER_EPOCH + ILLEGAL_GENERATION answered


@dataclass(frozen=True, slots=True)
class ExpiryTrack:
    """Earliest shipped expiry deadline; ``stale`` means it is only a lower bound."""

    deadline: int | None = None
    set_ts: int = 0
    warned: int | None = None  # the deadline OFFSETS_EXPIRING was emitted for
    stale: bool = False


@dataclass(slots=True)
class GroupState:
    cluster: str
    group_id: str
    exists: bool = False
    group_type: str | None = None  # consumer | streams | classic | simple
    state: str = "Empty"  # Kafka's group state name as last reported or derived
    state_ts: int | None = None
    first_seen_ts: int | None = None
    last_ts: int = 0
    group_epoch: int = 0
    members: Mapping[str, Member] = field(default_factory=dict)
    # partition -> ids of members holding it in ``assigned`` / pending revocation
    owners: Mapping[TopicPartition, tuple[str, ...]] = field(default_factory=dict)
    pending_owners: Mapping[TopicPartition, tuple[str, ...]] = field(default_factory=dict)
    # Read through ``committed_offsets``: stored commit requests wait in ``unfolded`` first.
    offsets: Mapping[TopicPartition, exp.CommittedOffset] = field(default_factory=dict)
    unfolded: list[tuple[tuple[TopicPartition, ...], exp.CommittedOffset]] = field(default_factory=list)
    committed_topics: set[str] = field(default_factory=set)  # the topics of both
    pending_txn: Mapping[TopicPartition, int] = field(default_factory=dict)  # tp -> since ts
    claims: Mapping[TopicPartition, tuple[tuple[str, int], ...]] = field(default_factory=dict)
    expiry: ExpiryTrack = ExpiryTrack()
    counters: Counters = field(default_factory=Counters)
    txn_aborts_by_id: Mapping[str, tuple[int, int]] = field(default_factory=dict)
    alert_last: Mapping[str, int] = field(default_factory=dict)
    alert_suppressed: Mapping[str, int] = field(default_factory=dict)
    spike: object | None = None  # state.spike.SpikeState when the detector is on
    # Topics the group subscribes to (derived from members; None: unknown), cached for expiry.
    subscribed: frozenset[str] | None = frozenset()
    # (member id, client epoch, transactional) -> partition -> judgement; valid until membership changes.
    judged: dict = field(default_factory=dict)


def new_group(cluster: str, group_id: str) -> GroupState:
    return GroupState(cluster=cluster, group_id=group_id)


# --------------------------------------------------------------------------- helpers

def _touch(g: GroupState, ts: int, *, exists: bool | None = None, group_type: str | None = None) -> GroupState:
    if g.first_seen_ts is None:
        g.first_seen_ts = ts
    if ts > g.last_ts:
        g.last_ts = ts
    if exists is not None:
        g.exists = exists
    if group_type is not None and g.group_type in (None, "simple") and group_type != g.group_type:
        g.group_type = group_type
        g.subscribed = _subscribed_topics(g)
        g.judged.clear()  # classic groups answer ILLEGAL_GENERATION
    return g


def _alert(g: GroupState, out: Outputs, cfg: RulesConfig, *, ts: int, kind: AlertKind, severity: Severity,
           summary: str, details: dict, occurrence: str) -> GroupState:
    """Emit an alert, or fold it into a count while the kind is cooling down for this group."""
    k = kind.value
    if k in COOLDOWN_KINDS and cfg.alert_cooldown_ms > 0:
        last = g.alert_last.get(k)
        if last is not None and ts - last < cfg.alert_cooldown_ms:
            g.alert_suppressed[k] = g.alert_suppressed.get(k, 0) + 1
            return g
        details = {**details, "suppressed_before": g.alert_suppressed.pop(k, 0)}
        g.alert_last[k] = ts
    out.alerts.append(make_alert(ts=ts, cluster=g.cluster, group_id=g.group_id, kind=kind, severity=severity,
                                 summary=summary, details=details, occurrence=occurrence))
    return g


def _index_remove(index: dict, member: Member | None, tps) -> None:
    if member is None:
        return
    mid = member.member_id
    for tp in tps:
        holders = index.get(tp)
        if holders is None:
            continue
        if len(holders) == 1 and holders[0] == mid:
            del index[tp]  # the usual case: its only holder leaves it
            continue
        rest = tuple(h for h in holders if h != mid)
        if rest:
            index[tp] = rest
        else:
            del index[tp]


def _index_add(index: dict, member_id: str, tps) -> None:
    if not tps:
        return
    if index.keys().isdisjoint(tps):  # the usual case: nobody else holds them
        index.update(dict.fromkeys(tps, (member_id,)))
        return
    for tp in tps:
        holders = index.get(tp, ())
        if member_id not in holders:
            index[tp] = holders + (member_id,)


def _replace_member(g: GroupState, old: Member | None, new: Member | None,
                    also_remove: Member | None = None) -> GroupState:
    """Swap a member in the group and keep the partition-owner indexes in step."""
    _forget_judgements(g, (old, new, also_remove))
    for gone in (old, also_remove):
        if gone is None:
            continue
        _index_remove(g.owners, gone, gone.assigned_partitions)
        _index_remove(g.pending_owners, gone, gone.partitions_pending_revocation)
        g.members.pop(gone.member_id, None)
    if new is not None:
        g.members[new.member_id] = new
        _index_add(g.owners, new.member_id, new.assigned_partitions)
        _index_add(g.pending_owners, new.member_id, new.partitions_pending_revocation)
    # The union of subscriptions, without a pass over every member when it cannot shrink.
    if also_remove is None and new is not None and g.subscribed is not None and len(g.members) > 1:
        if old is None or _member_topics(old) <= _member_topics(new):
            topics = _member_topics(new)
            if not g.subscribed.issuperset(topics):
                g.subscribed = g.subscribed | topics
            return g
    g.subscribed = _subscribed_topics(g)
    return g


def _member_topics(m: Member) -> frozenset[str] | set[str]:
    return m.subscribed_topics if m.subscribed_topics is not None else m.held_topics()


def _forget_judgements(g: GroupState, changed: tuple) -> None:
    """Drop cached judgements a membership change can alter: the changed members' own, and
    other members' for partitions the changed members held before or hold now."""
    if not g.judged:
        return
    ids = {m.member_id for m in changed if m is not None}
    tps: set = set()
    for m in changed:
        if m is not None:
            tps.update(m.assigned_partitions)
            tps.update(m.partitions_pending_revocation)
    for key in list(g.judged):
        if key[0] in ids:
            del g.judged[key]
        else:
            cache = g.judged[key]
            dropped = cache.keys() & tps
            if dropped:
                for tp in dropped:
                    del cache[tp]
                cache.pop(None, None)  # cached requests made of a dropped partition judgement


def _subscribed_topics(g: GroupState) -> frozenset[str] | None:
    """Union of the members' subscriptions (or held topics when a member has none)."""
    if not g.members:
        return None if g.group_type == "classic" else frozenset()
    topics: set[str] = set()
    for m in g.members.values():
        topics |= _member_topics(m)
    return frozenset(topics)


def _derived_state(g: GroupState) -> str:
    """KIP-848 groups: Empty without members; classic groups keep the reported state."""
    if g.group_type in ("consumer", "streams"):
        if not g.members:
            return "Empty"
        return g.state if g.state not in ("Empty", "Dead") else "Stable"
    return g.state


def _with_state(g: GroupState, ts: int, state: str) -> GroupState:
    if state != g.state:
        g.state = state
        g.state_ts = ts
    return g


def _listed(tps) -> str:
    tps = sorted(tps)
    text = ",".join(f"{t}-{p}" for t, p in tps[:MAX_LISTED])
    return text + (f",...(+{len(tps) - MAX_LISTED})" if len(tps) > MAX_LISTED else "")


# --------------------------------------------------------------------------- committed offsets

def committed_offsets(g: GroupState) -> Mapping[TopicPartition, exp.CommittedOffset]:
    """The group's committed offsets, every stored request folded in. A commit only appends its
    request: most groups subscribe to what they commit, so nothing reads the offsets until a
    membership change, an expiry or a deletion, and by then a member has committed the same
    partitions several times over (only the newest request of each counts)."""
    if g.unfolded:
        offsets = g.offsets
        log = g.unfolded
        for tps, committed in folding.newest_per_shape(log, map(id, map(_TPS, log))):
            offsets.update(zip(tps, repeat(committed)))
        g.unfolded = []
    return g.offsets


_TPS = itemgetter(0)  # a logged request's (topic, partition) keys: its shape, by identity


def _store_offsets(g: GroupState, tps: tuple[TopicPartition, ...], committed: exp.CommittedOffset,
                   topic: str | None) -> None:
    """A stored commit request; ``topic``: its one topic, when the caller knows it."""
    g.unfolded.append((tps, committed))
    if len(g.unfolded) > folding.UNFOLDED_LIMIT:
        committed_offsets(g)
    if topic is None:
        g.committed_topics.update(map(_TOPIC, tps))
    else:
        g.committed_topics.add(topic)


def _remove_offsets(g: GroupState, gone) -> None:
    offsets = committed_offsets(g)
    for tp in gone:
        offsets.pop(tp, None)
    g.committed_topics = set(map(_TOPIC, offsets))


# --------------------------------------------------------------------------- membership

# The group type a member's assignment record implies (a classic member in a consumer group:
# the KIP-848 upgrade path), without Enum's Python-level ``.value``.
_GROUP_TYPE_OF = {p: p.value if p is not Protocol.CLASSIC else "consumer" for p in Protocol}


def _member_assignment(g: GroupState, ev: MemberAssignment, cfg: RulesConfig, out: Outputs) -> GroupState:
    if ev.assigned is None or ev.pending_revocation is None:  # request log (docs/request-log.md): from the model
        whole = resolve_unchanged_assignment(g.members.get(ev.member_id), ev)
        if whole is None:
            return _touch(g, ev.ts)
        ev = whole
    g = _touch(g, ev.ts, exists=True, group_type=_GROUP_TYPE_OF[ev.protocol])
    prev = g.members.get(ev.member_id)
    takeover = None
    if prev is None and ev.instance_id is not None:
        # A static member rejoining under a new member id takes over what it left behind.
        for m in g.members.values():
            if m.instance_id == ev.instance_id and m.member_id != ev.member_id:
                takeover = m
                break
    base = prev if prev is not None else takeover
    new = apply_member_assignment(base, ev)
    if new is not prev:
        # A partition has one owner per epoch: a second member holding it in `assigned` is a model
        # break. Nobody holding any of them before the swap (a joining member) rules it out in C.
        contested = not g.owners.keys().isdisjoint(new.assigned_partitions)
        g = _replace_member(g, prev, new, also_remove=takeover)
        owners = g.owners
        clashes = None
        if contested and max(map(len, map(owners.__getitem__, new.assigned_partitions)), default=1) > 1:
            before = base.assigned_partitions if base is not None else {}
            clashes = {tp: [h for h in owners[tp] if h != new.member_id] for tp in new.assigned_partitions
                       if len(owners[tp]) > 1 and tp not in before}  # the index holds the new member too
        if clashes:
            others = sorted({h for hs in clashes.values() for h in hs})
            g = _alert(g, out, cfg, ts=ev.ts, kind=AlertKind.DUPLICATE_ASSIGNMENT, severity=Severity.CRITICAL,
                       summary=f"{len(clashes)} partition(s) assigned to {ev.member_id} are still assigned to "
                               f"{', '.join(others)}",
                       details={"member_id": ev.member_id, "member_epoch": ev.member_epoch,
                                "other_members": ",".join(others), "partitions": _listed(clashes)},
                       occurrence=ev.event_id)
    new_epoch = ev.group_epoch if ev.group_epoch is not None else ev.member_epoch
    if new_epoch > g.group_epoch:
        g.group_epoch = new_epoch
        g.counters.rebalances += 1
    g = _with_state(g, ev.ts, _derived_state(g))
    return _recompute_expiry(g, ev.ts, cfg)


def _member_left(g: GroupState, ev: MemberLeft, cfg: RulesConfig, out: Outputs) -> GroupState:
    g = _touch(g, ev.ts)
    m = g.members.get(ev.member_id)
    if m is None:
        return g
    if ev.reason == "static_leave":
        g = _replace_member(g, m, apply_static_leave(m))
    else:
        g = _replace_member(g, m, None)
    g = _with_state(g, ev.ts, _derived_state(g))
    return _recompute_expiry(g, ev.ts, cfg)


def _heartbeat(g: GroupState, ev: Heartbeat, cfg: RulesConfig, out: Outputs) -> GroupState:
    g = _touch(g, ev.ts)
    c = g.counters
    c.heartbeats += 1
    c.heartbeat_fenced += ev.error_code == KafkaError.FENCED_MEMBER_EPOCH.code
    c.heartbeat_unknown_member += ev.error_code == KafkaError.UNKNOWN_MEMBER_ID.code
    return g


def _classic_join(g: GroupState, ev: ClassicJoin, cfg: RulesConfig, out: Outputs) -> GroupState:
    g = _touch(g, ev.ts, exists=True, group_type="classic")
    g.claims, conflicts = add_claims(g.claims, ev.member_id, ev.generation, ev.owned)
    if g.state not in ("PreparingRebalance",) and g.group_type == "classic":
        g = _with_state(g, ev.ts, "PreparingRebalance")
    if conflicts:
        stale = [c for c in conflicts if c.winner is not None]
        tied = [c for c in conflicts if c.winner is None]
        losers = sorted({m for c in conflicts for m, _ in c.losers})
        g = _alert(g, out, cfg, ts=ev.ts, kind=AlertKind.STALE_OWNED_CLAIM, severity=Severity.WARNING,
                   summary=f"{len(conflicts)} partition(s) claimed by more than one member in a rebalance "
                           f"({len(stale)} resolved by generation, {len(tied)} at equal generations, reassigned)",
                   details={"member_id": ev.member_id, "claimed_generation": ev.generation,
                            "losing_members": ",".join(losers),
                            "winners": ",".join(sorted({f"{c.winner}@{c.winner_generation}" for c in stale})),
                            "partitions": _listed([c.tp for c in conflicts]),
                            "equal_generation_partitions": _listed([c.tp for c in tied])},
                   occurrence=ev.event_id)
    return g


def _classic_sync(g: GroupState, ev: ClassicSync, cfg: RulesConfig, out: Outputs) -> GroupState:
    g = _touch(g, ev.ts, exists=True, group_type="classic")
    given: dict[TopicPartition, list[str]] = {}
    for mid, tps in ev.assignments:
        for tp in tps:
            given.setdefault(tp, []).append(mid)
    # Members not in the new generation's assignment are gone (they did not rejoin).
    assigned_ids = {mid for mid, _ in ev.assignments}
    for mid in [m for m in g.members if m not in assigned_ids]:
        g = _replace_member(g, g.members[mid], None)
    for mid, tps in ev.assignments:
        prev = g.members.get(mid)
        g = _replace_member(g, prev, apply_classic_generation(prev, mid, ev.generation, tps, Protocol.CLASSIC))
    dupes = {tp: mids for tp, mids in given.items() if len(mids) > 1}
    if dupes:
        g = _alert(g, out, cfg, ts=ev.ts, kind=AlertKind.DUPLICATE_ASSIGNMENT, severity=Severity.CRITICAL,
                   summary=f"generation {ev.generation} gives {len(dupes)} partition(s) to more than one member",
                   details={"generation": ev.generation,
                            "members": ",".join(sorted({m for ms in dupes.values() for m in ms})),
                            "partitions": _listed(dupes)},
                   occurrence=ev.event_id)
    if ev.generation > g.group_epoch:
        g.counters.rebalances += 1
    g.claims = {}
    g.group_epoch = max(g.group_epoch, ev.generation)
    g = _with_state(g, ev.ts, "Stable" if g.members else "Empty")
    return _recompute_expiry(g, ev.ts, cfg)


def _group_state(g: GroupState, ev: GroupStateChange, cfg: RulesConfig, out: Outputs) -> GroupState:
    if ev.state == "Dead":
        # The coordinator removed the group: everything about it is gone.
        fresh = new_group(g.cluster, g.group_id)
        fresh.first_seen_ts, fresh.last_ts, fresh.counters = g.first_seen_ts, max(g.last_ts, ev.ts), g.counters
        return fresh
    gtype = None
    if ev.protocol in ("consumer", "streams") and ev.state in ("Assigning", "Reconciling"):
        gtype = ev.protocol
    elif ev.protocol == "classic" or ev.state in ("PreparingRebalance", "CompletingRebalance"):
        gtype = "classic"
    g = _touch(g, ev.ts, exists=True, group_type=gtype)
    if ev.state == "Empty" and g.members:
        # Empty means no members (the coordinator removed them; we may have missed the leaves).
        for m in list(g.members.values()):
            g = _replace_member(g, m, None)
    g = _with_state(g, ev.ts, ev.state)
    return _recompute_expiry(g, ev.ts, cfg)


# --------------------------------------------------------------------------- commits

def _other_holders(g: GroupState, tp: TopicPartition, member_id: str) -> tuple[str | None, int | None]:
    """Another member holding ``tp`` now (assigned first, then pending revocation), and the
    smallest epoch at which another member holds it in ``assigned`` (None: nobody else does)."""
    holder = None
    other_ae = None
    holders = g.owners.get(tp)
    if holders:
        for h in holders:
            if h != member_id:
                ae = g.members[h].assigned_partitions[tp]
                if holder is None:
                    holder = h
                if other_ae is None or ae < other_ae:
                    other_ae = ae
    if holder is None:
        pend = g.pending_owners.get(tp)
        if pend:
            for h in pend:
                if h != member_id:
                    holder = h
                    break
    return holder, other_ae


_CLASS_NAMES = {c: c.value for c in CommitClass}


def _judge_partition(g: GroupState, member, c: int, tp: TopicPartition, rej: str) -> PartitionJudgement:
    """Every policy's answer for one partition of a known member (SPEC 3 rows); ``rej`` is the
    error a rejecting policy answers (:func:`fencing.rejection_error`)."""
    b = member.member_epoch
    rev = member.revocation_epoch
    ae = member.assignment_epoch(tp)
    holders = g.owners.get(tp)
    if (holders is None or holders == (member.member_id,)) and tp not in g.pending_owners:
        holder = other_ae = None  # nobody else holds it (the common case)
    else:
        holder, other_ae = _other_holders(g, tp, member.member_id)
    outcome = _outcome(c, b, rev, ae, rej, holder is not None, other_ae)
    return _new_tuple(PartitionJudgement, (tp[0], tp[1], ae, rev, *outcome, holder))


# The policies' answers depend only on these few numbers, and a group's partitions share
# them: memoised, judging a partition is a tuple lookup instead of eight function calls.
_OUTCOMES: Memo = Memo(1 << 16)
_ALL_ACCEPT = ("NONE", "NONE", "NONE", "NONE", CommitClass.ACCEPTED.value, False)
_NO_ERRORS = (KafkaError.NONE,) * 4
# The policies' rejection by "transactional or classic" (``fencing.rejection_error``), by name.
_REJECTION_NAME = {x: rejection_error(x, False).value for x in (False, True)}


def _outcome(c: int, b: int, rev: int, ae: int | None, rej: str, held_by_other: bool,
             other_ae: int | None) -> tuple[str, str, str, str, str, bool]:
    """(strict, member_revocation, assignment_epoch, kip1251 answers, class, unsafe), memoised."""
    key = (c, b, rev, ae, rej, held_by_other, other_ae)
    outcome = _OUTCOMES.get(key)
    if outcome is None:
        outcome = _OUTCOMES.put(key, _decide(c, b, rev, ae, rej, held_by_other, other_ae))
    return outcome


def _decide(c: int, b: int, rev: int, ae: int | None, rej: str, held_by_other: bool,
            other_ae: int | None) -> tuple[str, str, str, str, str, bool]:
    res = evaluate(c, b, rev, ae)
    return ("NONE" if res[0] else rej, "NONE" if res[1] else rej, "NONE" if res[2] else rej,
            "NONE" if res[3] else rej, _CLASS_NAMES[classify(res, c, b, held_by_other)], is_unsafe(res, c, other_ae))


class RequestJudgement(NamedTuple):
    """What every policy says for one commit request of a known member: the partitions'
    judgements and the request-level answers. It only changes when membership does, and
    members commit the same partitions again and again, so groups cache it per request shape."""

    parts: tuple[PartitionJudgement, ...]
    request: tuple[KafkaError, KafkaError, KafkaError, KafkaError]  # per policy, in POLICY_ORDER
    zombies: tuple[TopicPartition, ...]
    avoidable: tuple[TopicPartition, ...]
    unsafe: tuple[TopicPartition, ...]


def _judge_request(g: GroupState, member, c: int, tps: tuple[TopicPartition, ...], topic: str | None,
                   transactional: bool, cache: dict) -> RequestJudgement:
    """``topic``: the request's one topic (None: several, or not known)."""
    rej = _REJECTION_NAME[transactional or member.protocol is Protocol.CLASSIC or g.group_type == "classic"]
    make_parts = tuple
    # The common request: the member holds every partition in `assigned` and nobody else holds
    # any, so each partition's answer depends only on its assignment epoch (a few distinct ones).
    aes = tuple(map(member.assigned_partitions.get, tps))
    if (None not in aes and g.pending_owners.keys().isdisjoint(tps)
            and set(map(g.owners.get, tps)) == {(member.member_id,)}):
        b, rev = member.member_epoch, member.revocation_epoch
        outcomes = {ae: _outcome(c, b, rev, ae, rej, False, None) for ae in set(aes)}
        # A judgement is (topic, partition) + what its assignment epoch decides: joined in C.
        rests = {ae: (ae, rev, *o, None) for ae, o in outcomes.items()}
        if len(rests) == 1 and topic is not None:
            make_parts = UniformParts
        parts = make_parts(map(_new_tuple, repeat(PartitionJudgement), map(add, tps, map(rests.__getitem__, aes))))
        cache.update(zip(tps, parts))
        if set(outcomes.values()) == {_ALL_ACCEPT}:
            return _new_tuple(RequestJudgement, (parts, _NO_ERRORS, (), (), ()))
    zombies: list[TopicPartition] = []
    unsafe_tps: list[TopicPartition] = []
    avoidable_tps: list[TopicPartition] = []
    parts_l = []
    first_error = [None, None, None, None]  # Kafka fails the whole request on the first bad partition
    for tp in tps:
        pj = cache.get(tp)
        if pj is None:
            pj = cache[tp] = _judge_partition(g, member, c, tp, rej)
        parts_l.append(pj)
        if pj.cls == "accepted" and not pj.unsafe and pj.member_revocation == pj.assignment_epoch_check == "NONE":
            continue  # every policy accepts it (strict acceptance implies kip1251's)
        if pj.cls == "zombie":
            zombies.append(tp)
        elif pj.cls == "avoidable":
            avoidable_tps.append(tp)
        if pj.unsafe:
            unsafe_tps.append(tp)
        for i, r in enumerate((pj.strict, pj.member_revocation, pj.assignment_epoch_check, pj.kip1251)):
            if r != "NONE" and first_error[i] is None:
                first_error[i] = KafkaError(r)
    request = tuple(e if e is not None else KafkaError.NONE for e in first_error)
    return RequestJudgement(make_parts(parts_l), request, tuple(zombies), tuple(avoidable_tps), tuple(unsafe_tps))


_NO_REQUEST = RequestJudgement((), _NO_ERRORS, (), (), ())


# Per-commit lookups without Enum's Python-level __hash__ / .value: code -> (error, name).
_ANSWER_BY_CODE = {e.code: (e, e.value) for e in KafkaError if e is not KafkaError.UNKNOWN}
_NO_ANSWER = (None, None)
_FENCING_ANSWERS = (KafkaError.STALE_MEMBER_EPOCH, KafkaError.ILLEGAL_GENERATION)
_ACCEPTED = KafkaError.NONE


def _commit(g: GroupState, ev: OffsetCommit, cfg: RulesConfig, out: Outputs) -> GroupState:
    ts, _, _, _, _, txn, mid, c, offsets, _, code, _, _, _ = ev  # the fields, in one unpacking
    if ts > g.last_ts:  # _touch(g, ts), inline: once per commit
        g.last_ts = ts
    if g.first_seen_ts is None:
        g.first_seen_ts = ts
    member = g.members.get(mid) if mid else None
    broker_error, be = _NO_ANSWER if code is None else _ANSWER_BY_CODE.get(code) or (
        KafkaError.UNKNOWN, KafkaError.UNKNOWN.value)
    tps = offsets.tps
    policy_index = _BROKER_POLICY_INDEX[cfg.broker_policy]

    warming = False
    if member is not None and g.exists:
        # Every guard before the policies passes for a known member (``pre_check``).
        b = member.member_epoch
        key = (mid, c, txn)
        cache = g.judged.get(key)
        if cache is None:
            if len(g.judged) > 1024:
                g.judged.clear()
            cache = g.judged[key] = {}
        # Whole requests are cached under the key None, beside the partitions they are made of.
        requests = cache.get(None)
        if requests is None:
            requests = cache[None] = {}
        judged = requests.get(tps)
        if judged is None:
            if len(requests) > 64:
                requests.clear()
            judged = requests[tps] = _judge_request(g, member, c, tps, offsets.topic, txn, cache)
        request = judged.request
        agrees = None if broker_error is None else _agrees(broker_error, request[policy_index], False)
    else:
        pre = pre_check(group_exists=g.exists, group_has_members=bool(g.members), member_known=member is not None,
                        member_id=mid, client_epoch=c, transactional=txn)
        # Decided before any policy (only a known member of an existing group goes on to them,
        # above): every policy answers the same for the whole request.
        warming = (pre.commit_class in (CommitClass.UNKNOWN_MEMBER, CommitClass.OTHER) and mid != ""
                   and cfg.warmup_ms > 0 and ts < g.first_seen_ts + cfg.warmup_ms)
        name = pre.error.value
        cls = (CommitClass.OTHER if warming else pre.commit_class).value
        agrees = _agrees(broker_error, pre.error, warming)
        judged = _NO_REQUEST._replace(
            parts=tuple(PartitionJudgement(tp[0], tp[1], None, None, name, name, name, name, cls, False,
                                           _other_holders(g, tp, mid)[0]) for tp in tps),
            request=(pre.error,) * 4)
        request = judged.request
        b = None
    out.commits.append(_new_tuple(CommitVerdicts, (ev.event_id, ts, g.cluster, g.group_id, mid,
                                                   "txn_commit" if txn else "commit", c, b, be, agrees, warming,
                                                   judged.parts, ev.seq)))

    # What the broker stored: its answer when we have it, else the broker policy's prediction.
    stored = (broker_error if broker_error is not None else request[policy_index]) is _ACCEPTED
    fenced = broker_error is not None and broker_error in _FENCING_ANSWERS
    counters = g.counters
    counters.commits += 1
    if txn or fenced or agrees is False:
        counters.txn_commits += txn
        counters.broker_fencing_errors += fenced
        counters.divergences += agrees is False
    if stored and tps:
        # Expiry needs when each partition was committed, not the offset (truncation keeps that).
        _store_offsets(g, tps, _new_tuple(exp.CommittedOffset, (ts, None)), offsets.topic)
        if not g.exists and g.group_type is None:
            g.group_type = "simple"
        g.exists = True
        if txn:
            g.pending_txn.update(zip(tps, repeat(ts)))
        _note_commit_for_expiry(g, ts, cfg, tps, offsets.topic)

    # Spike detectors: the broker's fencing answers and aborted transactions, per window.
    aborted_txn = txn and not stored
    if fenced or aborted_txn:
        g.spike, spike_alerts = spk.observe(g.spike or spk.INITIAL, ev.ts, int(fenced), int(aborted_txn), cfg.spike,
                                            cluster=g.cluster, group_id=g.group_id)
        out.alerts.extend(spike_alerts)

    # Transactions (SPEC 6): every rejected TxnOffsetCommit aborts the transaction.
    if aborted_txn:
        tid = ev.transactional_id or ""
        aborted, avoidable = g.txn_aborts_by_id.get(tid, (0, 0))
        saved = request[3] is _ACCEPTED and not warming
        g.counters.txn_aborts += 1
        g.counters.txn_avoidable_aborts += saved
        g.txn_aborts_by_id[tid] = (aborted + 1, avoidable + saved)

    if warming or not (judged.zombies or judged.avoidable or judged.unsafe or agrees is False):
        return g
    zombies, avoidable_tps, unsafe_tps = judged.zombies, judged.avoidable, judged.unsafe
    kip_request_ok = request[3] is _ACCEPTED
    # Per-request alerts.
    kind = "txn_commit" if txn else "commit"
    predicted = request[policy_index]
    member_desc = f"member {ev.member_id or '(none)'} at epoch {c}" + (f" (broker epoch {b})" if b is not None else "")
    if avoidable_tps and not stored and kip_request_ok:
        g = _alert(g, out, cfg, ts=ev.ts, kind=AlertKind.AVOIDABLE_FENCING, severity=Severity.WARNING,
                   summary=f"{'transactional ' if ev.transactional else ''}commit of {member_desc} fenced only "
                           f"because its epoch was stale; KIP-1251 would accept it",
                   details={"member_id": ev.member_id, "client_epoch": c, "broker_epoch": b, "kind": kind,
                            "transactional_id": ev.transactional_id, "partitions": _listed(avoidable_tps),
                            "event_id": ev.event_id},
                   occurrence=ev.event_id)
    if zombies:
        g = _alert(g, out, cfg, ts=ev.ts, kind=AlertKind.ZOMBIE_COMMIT, severity=Severity.WARNING,
                   summary=f"zombie commit: {member_desc} committed {len(zombies)} partition(s) now held by "
                           f"another member",
                   details={"member_id": ev.member_id, "client_epoch": c, "broker_epoch": b, "kind": kind,
                            "partitions": _listed(zombies), "event_id": ev.event_id},
                   occurrence=ev.event_id)
    if unsafe_tps:
        g = _alert(g, out, cfg, ts=ev.ts, kind=AlertKind.UNSAFE_ACCEPT, severity=Severity.CRITICAL,
                   summary=f"a policy accepts the commit of {member_desc} for {len(unsafe_tps)} partition(s) "
                           f"another member owns at an epoch <= {c}",
                   details={"member_id": ev.member_id, "client_epoch": c, "broker_epoch": b,
                            "partitions": _listed(unsafe_tps), "event_id": ev.event_id},
                   occurrence=ev.event_id)
    if agrees is False:
        g = _alert(g, out, cfg, ts=ev.ts, kind=AlertKind.MODEL_DIVERGENCE, severity=Severity.WARNING,
                   summary=f"broker answered {broker_error.value} but the {cfg.broker_policy.value} model "
                           f"predicts {predicted.value} for {member_desc}",
                   details={"member_id": ev.member_id, "client_epoch": c, "broker_epoch": b,
                            "broker_error": broker_error.value, "predicted": predicted.value,
                            "policy": cfg.broker_policy.value, "event_id": ev.event_id},
                   occurrence=ev.event_id)
    return g


def _agrees(broker_error: KafkaError | None, predicted: KafkaError, warming: bool) -> bool | None:
    if broker_error is None or warming or broker_error in TRANSIENT_ERRORS:
        return None
    return broker_error is predicted


def _offset_committed(g: GroupState, ev: OffsetCommitted, cfg: RulesConfig, out: Outputs) -> GroupState:
    g = _touch(g, ev.ts, exists=True, group_type="simple" if g.group_type is None else None)
    tp = (ev.topic, ev.partition)
    off = exp.CommittedOffset(ev.commit_ts if ev.commit_ts is not None else ev.ts, ev.expire_ts)
    was_pending = g.pending_txn.pop(tp, None) is not None
    committed_offsets(g)[tp] = off
    g.committed_topics.add(ev.topic)
    if ev.expire_ts is not None or was_pending:
        return _recompute_expiry(g, ev.ts, cfg)
    return _note_commit_for_expiry(g, ev.ts, cfg, [tp])


def _offset_deleted(g: GroupState, ev: OffsetDeleted, cfg: RulesConfig, out: Outputs) -> GroupState:
    g = _touch(g, ev.ts)
    tp = (ev.topic, ev.partition)
    if tp not in committed_offsets(g) and tp not in g.pending_txn:
        return g
    _remove_offsets(g, (tp,))
    g.pending_txn.pop(tp, None)
    return _recompute_expiry(g, ev.ts, cfg)


# --------------------------------------------------------------------------- expiry

def expiry_view(g: GroupState) -> exp.ExpiryView:
    return exp.ExpiryView(group_type=g.group_type or "simple", state=_derived_state(g), state_ts=g.state_ts,
                          subscribed_topics=g.subscribed, pending_transactional=frozenset(g.pending_txn))


def deadlines(g: GroupState, cfg: RulesConfig) -> exp.Deadlines:
    return exp.group_deadlines(expiry_view(g), committed_offsets(g), cfg.offsets_retention_ms)


def _subscribed_to_all(g: GroupState, topics) -> bool:
    if g.members:  # never an empty KIP-848 group: the subscription decides, whatever the state
        return g.subscribed is not None and g.subscribed.issuperset(topics)
    return exp.subscribed_to_all(g.group_type or "simple", _derived_state(g), g.subscribed, topics)


def _shipped_deadline(g: GroupState, cfg: RulesConfig) -> int | None:
    # When the group subscribes to every committed topic nothing can expire (SPEC 4): skip the
    # pass over every committed offset on each membership change.
    if _subscribed_to_all(g, g.committed_topics):
        return None
    return deadlines(g, cfg).shipped


def _recompute_expiry(g: GroupState, ts: int, cfg: RulesConfig) -> GroupState:
    d = _shipped_deadline(g, cfg)
    track = g.expiry
    if d == track.deadline and not track.stale:
        return g
    set_ts = track.set_ts if d == track.deadline else ts
    g.expiry = ExpiryTrack(deadline=d, set_ts=set_ts, warned=track.warned if track.warned == d else None)
    return g


def _note_commit_for_expiry(g: GroupState, ts: int, cfg: RulesConfig, touched, topic: str | None = None) -> GroupState:
    """A commit pushes its partitions' deadlines later, so the cached earliest deadline stays a
    valid lower bound (marked stale) unless a touched partition now expires earlier than it.
    ``topic``: the one topic of ``touched``, when the caller knows it."""
    track = g.expiry
    if _subscribed_to_all(g, (topic,) if topic is not None else map(_TOPIC, touched)):
        # Hot path: committing subscribed topics creates no deadline.
        if track.deadline is not None and not track.stale:
            g.expiry = ExpiryTrack(track.deadline, track.set_ts, track.warned, True)
        return g
    view = expiry_view(g)
    offsets = committed_offsets(g)
    candidate = None
    for tp in touched:
        d = exp.shipped_deadline(view, tp, offsets[tp], cfg.offsets_retention_ms)
        if d is not None and (candidate is None or d < candidate):
            candidate = d
    if candidate is not None and (track.deadline is None or candidate < track.deadline):
        g.expiry = ExpiryTrack(deadline=candidate, set_ts=ts, warned=None, stale=True)
    elif track.deadline is not None and not track.stale:
        g.expiry = ExpiryTrack(track.deadline, track.set_ts, track.warned, True)
    return g


def _expiry_wakeup(g: GroupState, cfg: RulesConfig) -> int | None:
    """When an expiry decision (warning, expiry, a pending transaction timing out) is next due."""
    times = []
    d = g.expiry.deadline
    if d is not None:
        times.append(d if g.expiry.warned == d else d - cfg.expiry_warning_ms)
    if g.pending_txn:
        times.append(min(g.pending_txn.values()) + cfg.txn_timeout_ms)
    return min(times) if times else None


def next_wakeup(g: GroupState, cfg: RulesConfig) -> int | None:
    """The earliest event time at which ``advance`` has something to do."""
    wake = _expiry_wakeup(g, cfg)
    s = g.spike
    if s is not None and (s.fencing_errors or s.txn_aborts or s.fencing.firing or s.txn.firing):
        close = s.window_start_ms + cfg.spike_window_ms  # close the open window without input
        wake = close if wake is None else min(wake, close)
    return wake


def advance(g: GroupState, now: int, cfg: RulesConfig, out: Outputs) -> GroupState:
    """Make the decisions due at or before ``now`` (OFFSETS_EXPIRING / OFFSETS_EXPIRED).

    Decisions are made in deadline order and stamped with the deadline, so the
    result does not depend on when (in which micro-batch) the clock passes it.
    """
    spike = g.spike
    if spike is not None and spk.windows_closed(spike, now, cfg.spike_window_ms):
        g.spike, spike_alerts = spk.advance(spike, now, cfg.spike, cluster=g.cluster, group_id=g.group_id)
        out.alerts.extend(spike_alerts)
    if g.expiry.deadline is None and not g.pending_txn:
        return g  # nothing else can be due (called before every event)
    for _ in range(10_000):  # each round removes offsets or settles the track; bounded for safety
        wake = _expiry_wakeup(g, cfg)
        if wake is None or wake > now:
            return g
        # Transactional offsets pending past the transaction timeout no longer block expiry.
        if g.pending_txn and min(g.pending_txn.values()) + cfg.txn_timeout_ms <= wake:
            g.pending_txn = {k: v for k, v in g.pending_txn.items() if v + cfg.txn_timeout_ms > wake}
            g = _recompute_expiry(g, wake, cfg)
            continue
        if g.expiry.stale:
            g = _recompute_expiry(g, g.expiry.set_ts, cfg)
            continue
        d = g.expiry.deadline
        assert d is not None
        dl = deadlines(g, cfg)
        if g.expiry.warned != d:
            warn_ts = max(d - cfg.expiry_warning_ms, g.expiry.set_ts)
            g = _alert(g, out, cfg, ts=warn_ts, kind=AlertKind.OFFSETS_EXPIRING, severity=Severity.WARNING,
                       summary=f"{dl.shipped_partitions} committed offset(s) expire at {d} "
                               f"({(d - warn_ts) // 60_000} min after this alert)",
                       details=_expiry_details(g, dl, cfg),
                       occurrence=f"expiring/{d}")
            g.expiry = replace(g.expiry, warned=d)
            continue
        gone = exp.expired_at(expiry_view(g), committed_offsets(g), d, cfg.offsets_retention_ms)
        if gone:
            details = _expiry_details(g, dl, cfg)
            details["expired_partitions"] = _listed(gone)
            details["expired_count"] = len(gone)
            g = _alert(g, out, cfg, ts=d, kind=AlertKind.OFFSETS_EXPIRED, severity=Severity.CRITICAL
                       if not g.members else Severity.WARNING,
                       summary=f"{len(gone)} committed offset(s) expired (a consumer without them resets by "
                               f"auto.offset.reset)",
                       details=details, occurrence=f"expired/{d}/{_listed(gone)}")
            _remove_offsets(g, gone)
            g.counters.expired_offsets += len(gone)
        g.expiry = ExpiryTrack(deadline=None, set_ts=d, stale=True)
        g = _recompute_expiry(g, d, cfg)
    return g


def _expiry_details(g: GroupState, dl: exp.Deadlines, cfg: RulesConfig) -> dict:
    return {"deadline_ms": dl.shipped, "partitions": dl.shipped_partitions, "group_type": g.group_type or "simple",
            "group_state": _derived_state(g), "members": len(g.members),
            "cleanup_by_ms": (dl.shipped + cfg.offsets_retention_check_interval_ms) if dl.shipped is not None else None,
            "kip211_deadline_ms": dl.kip211, "pre21_deadline_ms": dl.pre21,
            "retention_ms": cfg.offsets_retention_ms}


# --------------------------------------------------------------------------- dispatch

_HANDLERS: dict[type, Callable] = {
    MemberAssignment: _member_assignment,
    MemberLeft: _member_left,
    Heartbeat: _heartbeat,
    ClassicJoin: _classic_join,
    ClassicSync: _classic_sync,
    GroupStateChange: _group_state,
    OffsetCommit: _commit,
    OffsetCommitted: _offset_committed,
    OffsetDeleted: _offset_deleted,
}


def process(g: GroupState, event, cfg: RulesConfig, out: Outputs) -> GroupState:
    """Apply one group event: first the decisions due before it, then the event itself."""
    if g.spike is not None or g.expiry.deadline is not None or g.pending_txn:  # else nothing can be due
        g = advance(g, event.ts - 1, cfg, out)
    return _HANDLERS[type(event)](g, event, cfg, out)


def is_droppable(g: GroupState) -> bool:
    """Kafka deletes an empty group once its offsets are gone; so can we."""
    return not g.members and not committed_offsets(g) and not g.pending_txn and not g.claims


def status(g: GroupState, cfg: RulesConfig) -> dict:
    """A snapshot for metrics and summaries (no member ids: cardinality is the caller's concern)."""
    dl = deadlines(g, cfg)
    return {
        "cluster": g.cluster, "group_id": g.group_id, "protocol": g.group_type or "simple",
        "state": _derived_state(g), "members": len(g.members),
        "partitions_held": len(g.owners) + sum(1 for tp in g.pending_owners if tp not in g.owners),
        "group_epoch": g.group_epoch,
        "max_member_epoch": max((m.member_epoch for m in g.members.values()), default=None),
        "expiry_deadline_ms": dl.shipped, "kip211_deadline_ms": dl.kip211, "pre21_deadline_ms": dl.pre21,
        "committed_partitions": len(committed_offsets(g)),
        **{f"{k}_total": v for k, v in _counter_items(g.counters)},
    }


def _counter_items(c: Counters):
    for name in Counters.__dataclass_fields__:
        yield name, getattr(c, name)

"""One group's coordinator state (the aggregate) and the dispatch of events to it.

Owns: ``Group`` and its counters; ``process(group, event, cfg, out)``, the single
entry point both engines use (``replay --engine local`` and the Spark state function):
it makes the decisions due before the event, then hands the event to its handler, which
applies the rules of the modules below and returns the group's next state with verdicts
and alerts appended to ``out``. ``advance`` moves the group's clock forward without input,
``next_wakeup`` says when it next has something to do (the Spark state timeout), ``drop_at``
(:mod:`.forgetting`) when the group is forgotten (contract §4.4: its state can then be removed).

Where each rule lives: membership and owner indexes :mod:`.membership` (a member's own
transitions :mod:`.assignment`); commit judging :mod:`.judging` (policies :mod:`.fencing`),
reused through :mod:`.judgement_cache`; offsets and expiry :mod:`.offsets` (the condition
:mod:`.expiry`); alert texts and cool-downs :mod:`.alerts`; spikes :mod:`.spike`; classic
claims :mod:`.sticky`; status and the metrics summary :mod:`.status`.

Unlike those rules (pure functions over frozen values), the aggregate is a mutable object
updated in place: copying it per event cost more than judging the commit
(docs/decisions.md). Members stay frozen and are swapped whole.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from itertools import repeat
from typing import Callable

from fencewatch.state import alerts, classic, judging, streams
from fencewatch.state import expiry as exp, membership as ms, offsets as offs, spike as spk
from fencewatch.state.assignment import (Member, apply_classic_generation, apply_classic_join, apply_member_assignment,
                                        apply_static_leave, resolve_unchanged_assignment)
from fencewatch.state.config import RulesConfig
from fencewatch.state.events import (ClassicGeneration, ClassicJoin, ClassicSync, GroupStateChange, Heartbeat,
                                     MemberAssignment, MemberLeft, OffsetCommit, OffsetCommitted, OffsetDeleted,
                                     StreamsTopology)
from fencewatch.state.fencing import pre_check, txn_answers_like_commit
from fencewatch.state.judgement_cache import JudgementCache
from fencewatch.state.judging import POLICY_ANSWER, commit_stored, model_agrees
from fencewatch.state.model import Alert, AlertKind, CommitClass, CommitVerdicts, KafkaError, Protocol, TopicPartition, Verdict
from fencewatch.state.offsets import ExpiryTrack, committed_offsets, note_commit, store_request
from fencewatch.state.status import status  # noqa: F401  (the group's snapshot, for callers of this module)
from fencewatch.state.forgetting import decision_at, drop_at, drop_due, is_droppable  # noqa: F401  (contract §4.4)
from fencewatch.state.sticky import add_claims

_new_tuple = tuple.__new__  # NamedTuples without their Python-level __new__ (hot path)


@dataclass
class Outputs:
    """What processing emits; a plain collector so the hot path appends, never copies."""

    commits: list[CommitVerdicts] = field(default_factory=list)
    alerts: list[Alert] = field(default_factory=list)
    # The heartbeats answered FENCED_MEMBER_EPOCH / UNKNOWN_MEMBER_ID (state.status.heartbeat_errors):
    # counted here, not as the group's counters' growth, which a group forgotten mid-step resets.
    heartbeat_errors: list[int] = field(default_factory=lambda: [0, 0])

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


@dataclass(slots=True)
class Group:
    """One group as the coordinator holds it (Kafka's ``Group`` of ``ConsumerGroup``, ``StreamsGroup``
    and ``ClassicGroup``, all in one class; not PySpark's ``Group`` handle); the field comments say
    which module keeps each."""

    cluster: str
    group_id: str
    exists: bool = False
    group_type: str | None = None  # consumer | streams | classic | simple
    state: str = "Empty"  # Kafka's group state name as last reported or derived
    state_ts: int | None = None
    first_seen_ts: int | None = None
    last_ts: int = 0
    group_epoch: int = 0
    # membership: members, owner indexes (partition -> ids holding it), subscribed topics
    members: dict[str, Member] = field(default_factory=dict)
    owners: dict[TopicPartition, tuple[str, ...]] = field(default_factory=dict)
    pending_owners: dict[TopicPartition, tuple[str, ...]] = field(default_factory=dict)
    # offsets: read through ``committed_offsets``, stored commit requests wait in ``unfolded``
    offsets: dict[TopicPartition, exp.CommittedOffset] = field(default_factory=dict)
    unfolded: list[tuple[tuple[TopicPartition, ...], exp.CommittedOffset]] = field(default_factory=list)
    committed_topics: set[str] = field(default_factory=set)  # the topics of both
    pending_txn: dict[TopicPartition, int] = field(default_factory=dict)  # tp -> since ts
    claims: dict[TopicPartition, tuple[tuple[str, int], ...]] = field(default_factory=dict)  # sticky
    expiry: ExpiryTrack = ExpiryTrack()
    counters: Counters = field(default_factory=Counters)
    txn_aborts_by_id: dict[str, tuple[int, int]] = field(default_factory=dict)  # id -> (aborts, avoidable)
    alert_last: dict[str, int] = field(default_factory=dict)  # alerts' cool-downs
    alert_suppressed: dict[str, int] = field(default_factory=dict)
    spike: spk.SpikeState | None = None  # when the detector has seen something
    # Topics the group subscribes to (derived from members; None: unknown), kept for expiry.
    subscribed: frozenset[str] | None = frozenset()
    judged: JudgementCache = field(default_factory=JudgementCache)
    # A classic group whose JoinGroup responses the input carries (request log): the model then
    # knows its CompletingRebalance phase and foresees REBALANCE_IN_PROGRESS (state.classic).
    sees_join_phases: bool = False
    # A streams group (state.streams): its topology, and each member's last task-level assignment,
    # re-resolved when the topology changes (held, not applied, while the group has none).
    topology: streams.Topology | None = None
    member_tasks: dict[str, MemberAssignment] = field(default_factory=dict)
    # Members the model itself removed during the warm-up (None outside it): ``ms.watch_departures``.
    departed: tuple[str, ...] | None = None


def new_group(cluster: str, group_id: str) -> Group:
    return Group(cluster=cluster, group_id=group_id)


def _touch(g: Group, ts: int, *, exists: bool | None = None, group_type: str | None = None) -> Group:
    if g.first_seen_ts is None:
        g.first_seen_ts = ts
    if ts > g.last_ts:
        g.last_ts = ts
    if exists is not None:
        if exists and g.state == "Dead":  # created again at the instant it was deleted
            ms.set_state(g, ts, "Empty")
        g.exists = exists
    if group_type is not None and g.group_type in (None, "simple") and group_type != g.group_type:
        g.group_type = group_type
        g.subscribed = ms.subscribed_topics(g)
        g.judged.clear()  # classic groups answer ILLEGAL_GENERATION
    return g


def _settle(g: Group, ts: int, cfg: RulesConfig, state: str | None = None) -> Group:
    """After a membership change: the group's state, then its expiry deadline, follow."""
    ms.set_state(g, ts, ms.derived_state(g) if state is None else state)
    offs.recompute_expiry(g, ts, cfg.offsets_retention_ms)
    return g


def _emit(g: Group, out: Outputs, cfg: RulesConfig, ts: int, kind: AlertKind, build, *args) -> None:
    alerts.emit(g, out.alerts, cfg.alert_cooldown_ms, ts, kind, build, *args)


# --------------------------------------------------------------------------- membership events

# The group type a member's assignment record implies (a classic member in a consumer group:
# the KIP-848 upgrade path), without Enum's Python-level ``.value``.
_GROUP_TYPE_OF = {p: p.value if p is not Protocol.CLASSIC else "consumer" for p in Protocol}


def _member_assignment(g: Group, ev: MemberAssignment, cfg: RulesConfig, out: Outputs) -> Group:
    if ev.has_tasks:  # a streams member's tasks: partitions through the group's topology (state.streams)
        g.member_tasks[ev.member_id] = ev
        if g.topology is None:  # held until the topology arrives (_streams_topology)
            return _touch(g, ev.ts, exists=True, group_type=_GROUP_TYPE_OF[ev.protocol])
        ev = streams.resolve(ev, g.topology)
    elif g.member_tasks:
        g.member_tasks.pop(ev.member_id, None)
    if ev.assigned is None or ev.pending_revocation is None:  # request log (docs/request-log.md): from the model
        whole = resolve_unchanged_assignment(g.members.get(ev.member_id), ev)
        if whole is None:
            return _touch(g, ev.ts)
        ev = whole
    g = _touch(g, ev.ts, exists=True, group_type=_GROUP_TYPE_OF[ev.protocol])
    prev = g.members.get(ev.member_id)
    takeover = ms.static_takeover(g, ev.member_id, ev.instance_id)
    base = prev if prev is not None else takeover
    new = apply_member_assignment(base, ev)
    if new is not prev:
        # Nobody holding any of them before the swap (a joining member) rules out a clash in C.
        contested = not g.owners.keys().isdisjoint(new.assigned_partitions)
        ms.replace_member(g, prev, new, also_remove=takeover)
        if takeover is not None and g.member_tasks:
            g.member_tasks.pop(takeover.member_id, None)
        clashes = contested and ms.new_clashes(g.owners, new, base.assigned_partitions if base is not None else {})
        if clashes:
            _emit(g, out, cfg, ev.ts, AlertKind.DUPLICATE_ASSIGNMENT, alerts.duplicate_assignment, ev.member_id,
                  ev.member_epoch, clashes, ev.event_id)
    new_epoch = ev.group_epoch if ev.group_epoch is not None else ev.member_epoch
    if new_epoch > g.group_epoch:
        g.group_epoch = new_epoch
        g.counters.rebalances += 1
    return _settle(g, ev.ts, cfg)


def _member_left(g: Group, ev: MemberLeft, cfg: RulesConfig, out: Outputs) -> Group:
    g = _touch(g, ev.ts)
    if g.member_tasks:  # a streams member's tasks, held or resolved: nothing to re-resolve once gone
        g.member_tasks.pop(ev.member_id, None)
    m = g.members.get(ev.member_id)
    if m is None:
        return g
    ms.replace_member(g, m, apply_static_leave(m) if ev.reason == "static_leave" else None)
    if g.group_type == "classic":
        return _settle(g, ev.ts, cfg, classic.state_after_leave(g.state, bool(g.members)))
    return _settle(g, ev.ts, cfg)


_FENCED_CODE, _UNKNOWN_MEMBER_CODE = KafkaError.FENCED_MEMBER_EPOCH.code, KafkaError.UNKNOWN_MEMBER_ID.code


def _heartbeat(g: Group, ev: Heartbeat, cfg: RulesConfig, out: Outputs) -> Group:
    g = _touch(g, ev.ts)
    c = g.counters
    c.heartbeats += 1
    fenced, unknown = ev.error_code == _FENCED_CODE, ev.error_code == _UNKNOWN_MEMBER_CODE
    c.heartbeat_fenced += fenced
    c.heartbeat_unknown_member += unknown
    if fenced or unknown:
        out.heartbeat_errors[0] += fenced
        out.heartbeat_errors[1] += unknown
    return g


def _classic_join(g: Group, ev: ClassicJoin, cfg: RulesConfig, out: Outputs) -> Group:
    g = _touch(g, ev.ts, exists=True, group_type="classic")
    g.claims, conflicts = add_claims(g.claims, ev.member_id, ev.generation, ev.owned)
    if g.state not in ("PreparingRebalance",) and g.group_type == "classic":
        ms.set_state(g, ev.ts, "PreparingRebalance")
    if conflicts:
        _emit(g, out, cfg, ev.ts, AlertKind.STALE_OWNED_CLAIM, alerts.stale_owned_claim, ev.member_id, ev.generation,
              conflicts, ev.event_id)
    return g


_KIP848_TYPES = ("consumer", "streams")


def _classic_generation(g: Group, ev: ClassicGeneration, cfg: RulesConfig, out: Outputs) -> Group:
    """A JoinGroup response: the join phase completed (Kafka's ``initNextGeneration``)."""
    if g.group_type in _KIP848_TYPES:
        # A classic member of a consumer group (KIP-848's upgrade path): the consumer group's own
        # records say what its JoinGroup did; it has no classic generation.
        return _touch(g, ev.ts)
    g = _touch(g, ev.ts, exists=True, group_type="classic")
    g.sees_join_phases = True
    gen = ev.generation
    if gen < g.group_epoch:
        return g  # a response of an older generation, written late: nothing it says still holds
    if gen > g.group_epoch:
        # A new generation: every member the model holds rejoined into it until the leader's
        # response says who did; the group waits for the leader's SyncGroup.
        g.counters.rebalances += 1
        g.group_epoch = gen
        for m in list(g.members.values()):
            ms.replace_member(g, m, apply_classic_join(m, m.member_id, gen, None))
        ms.set_state(g, ev.ts, classic.COMPLETING_REBALANCE)
    if ev.members is not None:
        # The leader's response lists the generation: members that did not rejoin were removed.
        listed = set(ev.members)
        for mid in [mid for mid in g.members if mid not in listed]:
            ms.replace_member(g, g.members[mid], None)
        for mid in ev.members:
            if mid not in g.members:
                ms.replace_member(g, None, apply_classic_join(None, mid, gen, None))
    prev = g.members.get(ev.member_id)
    takeover = ms.static_takeover(g, ev.member_id, ev.instance_id)  # a static member under a new id
    new = apply_classic_join(prev if prev is not None else takeover, ev.member_id, gen, ev.instance_id)
    if new is not prev:
        ms.replace_member(g, prev, new, also_remove=takeover)
    return _settle(g, ev.ts, cfg)


def _classic_sync(g: Group, ev: ClassicSync, cfg: RulesConfig, out: Outputs) -> Group:
    if g.group_type in _KIP848_TYPES:
        return _touch(g, ev.ts)  # a classic member's SyncGroup in a consumer group (as above)
    g = _touch(g, ev.ts, exists=True, group_type="classic")
    # Members not in the new generation's assignment are gone (they did not rejoin).
    assigned_ids = {mid for mid, _ in ev.assignments}
    for mid in [m for m in g.members if m not in assigned_ids]:
        ms.replace_member(g, g.members[mid], None)
    for mid, tps in ev.assignments:
        prev = g.members.get(mid)
        ms.replace_member(g, prev, apply_classic_generation(prev, mid, ev.generation, tps, Protocol.CLASSIC))
    dupes = ms.given_twice(ev.assignments)
    if dupes:
        _emit(g, out, cfg, ev.ts, AlertKind.DUPLICATE_ASSIGNMENT, alerts.duplicate_generation, ev.generation, dupes,
              ev.event_id)
    if ev.generation > g.group_epoch:
        g.counters.rebalances += 1
    g.claims = {}
    g.group_epoch = max(g.group_epoch, ev.generation)
    return _settle(g, ev.ts, cfg, "Stable" if g.members else "Empty")


def _group_state(g: Group, ev: GroupStateChange, cfg: RulesConfig, out: Outputs) -> Group:
    if ev.state == "Dead":
        # The coordinator deleted the group: members, offsets and all (contract §2); the group
        # is forgotten before the next event after it (``drop_at``).
        fresh = new_group(g.cluster, g.group_id)
        fresh.first_seen_ts, fresh.last_ts, fresh.counters = g.first_seen_ts, max(g.last_ts, ev.ts), g.counters
        ms.set_state(fresh, ev.ts, "Dead")
        return fresh
    gtype = None
    if ev.protocol in ("consumer", "streams") and ev.state in ("Assigning", "Reconciling"):
        gtype = ev.protocol
    elif ev.protocol == "classic" or ev.state in ("PreparingRebalance", "CompletingRebalance"):
        gtype = "classic"
    g = _touch(g, ev.ts, exists=True, group_type=gtype)
    if ev.state == "Empty" and g.members:
        # Empty means no members (the coordinator removed them; we may have missed the leaves).
        ms.remove_all(g)
    if ev.state == "Empty":
        g.member_tasks.clear()
    return _settle(g, ev.ts, cfg, ev.state)


def _streams_topology(g: Group, ev: StreamsTopology, cfg: RulesConfig, out: Outputs) -> Group:
    """A streams group's topology: its members' tasks are partitions through it. A change
    re-resolves every member's last assignment (held ones, before any topology, apply now), at the
    topology's time, each with its own event id."""
    g = _touch(g, ev.ts, exists=True, group_type="streams")
    topology = streams.Topology(ev.topology_epoch, ev.subtopologies)
    if topology == g.topology:
        return g
    g.topology = topology
    for held in list(g.member_tasks.values()):
        g = _member_assignment(g, held._replace(ts=ev.ts, seq=ev.seq), cfg, out)
    return g


# --------------------------------------------------------------------------- commits

# Per-commit lookups without Enum's Python-level __hash__ / .value: code -> (error, name).
_ANSWER_BY_CODE = {e.code: (e, e.value) for e in KafkaError if e is not KafkaError.UNKNOWN}
_NO_ANSWER = (None, None)
_UNKNOWN_ANSWER = (KafkaError.UNKNOWN, KafkaError.UNKNOWN.value)
_FENCING_ANSWERS = (KafkaError.STALE_MEMBER_EPOCH, KafkaError.ILLEGAL_GENERATION)


def _commit(g: Group, ev: OffsetCommit, cfg: RulesConfig, out: Outputs) -> Group:
    """An OffsetCommit / TxnOffsetCommit: judge it, record what the broker stored, then the
    spike detectors, the transaction and the per-commit alerts. The hot path: what runs for
    every commit is inline here, the rest in the helpers below."""
    ts, mid, c, txn, offsets, code = ev.ts, ev.member_id, ev.member_epoch, ev.transactional, ev.offsets, ev.error_code
    if ts > g.last_ts:  # _touch(g, ts), inline
        g.last_ts = ts
    if g.first_seen_ts is None:
        g.first_seen_ts = ts
    member = g.members.get(mid) if mid else None
    broker_error, be = _NO_ANSWER if code is None else _ANSWER_BY_CODE.get(code) or _UNKNOWN_ANSWER
    if member is not None and g.exists:  # every guard before the policies passes (``pre_check``)
        mine = g.judged.get((mid, c, _commit_kind(ev) if txn else 0))  # the judgement cache's lookup, inline
        judged = mine.requests.get(offsets.tps) if mine is not None else None
        if judged is None:
            judged = _judge_known(g, member, ev, mine)
        if g.state == classic.COMPLETING_REBALANCE:  # (a classic group rebalancing; rare)
            judged = _completing_rebalance(g, ev, judged)
        warming, b = False, member.member_epoch
    else:
        judged, warming = _judge_unknown(g, ev, cfg, member is not None)
        b = None
    policy = cfg.streams_broker_policy if g.group_type == "streams" else cfg.broker_policy  # cfg.policy_for, inline
    predicted = POLICY_ANSWER[policy](judged.answers)
    agrees = None if broker_error is None else model_agrees(broker_error, predicted, warming,
                                                            classic.foreseen_errors(g.sees_join_phases))
    out.commits.append(_new_tuple(CommitVerdicts, (ev.event_id, ts, g.cluster, g.group_id, mid,
                                                   "txn_commit" if txn else "commit", c, b, be, agrees, warming,
                                                   judged.parts, ev.seq)))
    stored = commit_stored(broker_error, predicted)
    fenced = broker_error in _FENCING_ANSWERS
    counters = g.counters
    counters.commits += 1
    if txn or fenced or agrees is False:
        counters.txn_commits += txn
        counters.broker_fencing_errors += fenced
        counters.divergences += agrees is False
    tps = offsets.tps
    if stored and tps:  # the broker stored it: its offsets, the group it may create, the deadline
        store_request(g, tps, ts, offsets.topic)
        if not g.exists and g.group_type is None:
            g.group_type = "simple"
            if g.state == "Dead":  # created again at the instant it was deleted
                ms.set_state(g, ts, "Empty")
        g.exists = True
        if txn:
            g.pending_txn.update(zip(tps, repeat(ts)))
        note_commit(g, ts, cfg.offsets_retention_ms, tps, offsets.topic)
    aborted = txn and not stored
    if fenced or aborted:
        _observe_spikes(g, ts, fenced, aborted, cfg, out)
    if aborted:
        _abort_transaction(g, ev, judged.answers.kip1251 is KafkaError.NONE and not warming)
    if not warming and (judged.zombies or judged.avoidable or judged.unsafe or agrees is False):
        _commit_alerts(g, ev, cfg, out, judged, b, stored, broker_error, predicted, agrees)
    return g


def _commit_kind(ev: OffsetCommit) -> int:
    """0 an OffsetCommit, 1 a TxnOffsetCommit, 2 one of version 6 or later (KIP-1319: it is
    rejected with OffsetCommit's errors): what the judgement cache keys requests by besides
    member and epoch, since each kind is answered with errors of its own."""
    if not ev.transactional:
        return 0
    return 2 if txn_answers_like_commit(ev.api_version) else 1


def _judge_known(g: Group, member: Member, ev: OffsetCommit, mine) -> judging.RequestJudgement:
    """A known member's request the judgement cache does not hold: judged, then kept in
    ``mine`` (the cache's entry for this member, epoch and kind; None: none yet)."""
    kind = _commit_kind(ev)
    if mine is None:
        mine = g.judged.of(ev.member_id, ev.member_epoch, kind)
    tps = ev.offsets.tps
    judged = judging.judge_request(g, member, ev.member_epoch, tps, ev.offsets.topic, ev.transactional, g.group_type,
                                   mine.partitions, txn_v6=kind == 2)
    mine.remember(tps, judged)
    return judged


def _completing_rebalance(g: Group, ev: OffsetCommit, judged: judging.RequestJudgement) -> judging.RequestJudgement:
    """A known member's request in a classic group's CompletingRebalance (``classic.completing_rebalance``):
    answered REBALANCE_IN_PROGRESS when the generation check passed; a classic member's answer
    is the same under every policy."""
    pre = classic.completing_rebalance(g.group_type, g.state, ev.transactional,
                                       judged.answers.strict is KafkaError.NONE)
    if pre is None:
        return judged
    return judging.judge_before_policies(g, ev.member_id, ev.offsets.tps, pre, False)


def _judge_unknown(g: Group, ev: OffsetCommit, cfg: RulesConfig,
                   member_known: bool) -> tuple[judging.RequestJudgement, bool]:
    """A request decided before any policy; (judgement, warming up: a member the monitor may
    not have seen join, within ``warmup_ms`` of first seeing the group)."""
    mid = ev.member_id
    pre = pre_check(group_exists=g.exists, group_has_members=bool(g.members), member_known=member_known,
                    member_id=mid, client_epoch=ev.member_epoch, transactional=ev.transactional,
                    txn_v6=_commit_kind(ev) == 2)
    warming = (pre.commit_class in (CommitClass.UNKNOWN_MEMBER, CommitClass.OTHER) and mid != ""
               and cfg.warmup_ms > 0 and ev.ts < g.first_seen_ts + cfg.warmup_ms and mid not in (g.departed or ()))
    return judging.judge_before_policies(g, mid, ev.offsets.tps, pre, warming), warming


def _observe_spikes(g: Group, ts: int, fenced: bool, aborted: bool, cfg: RulesConfig, out: Outputs) -> None:
    """Spike detectors: the broker's fencing answers and aborted transactions, per window."""
    g.spike, spike_alerts = spk.observe(g.spike or spk.INITIAL, ts, int(fenced), int(aborted), cfg.spike,
                                        cluster=g.cluster, group_id=g.group_id)
    out.alerts.extend(spike_alerts)


def _abort_transaction(g: Group, ev: OffsetCommit, avoidable: bool) -> None:
    """A rejected TxnOffsetCommit aborts its transaction (contract §6)."""
    tid = ev.transactional_id or ""
    aborted, saved = g.txn_aborts_by_id.get(tid, (0, 0))
    g.counters.txn_aborts += 1
    g.counters.txn_avoidable_aborts += avoidable
    g.txn_aborts_by_id[tid] = (aborted + 1, saved + avoidable)


def _commit_alerts(g: Group, ev: OffsetCommit, cfg: RulesConfig, out: Outputs, judged, b: int | None,
                   stored: bool, broker_error: KafkaError | None, predicted: KafkaError, agrees: bool | None) -> None:
    facts = alerts.CommitFacts(ev.member_id, ev.member_epoch, b, ev.transactional, ev.transactional_id, ev.event_id)
    if judged.avoidable and not stored and judged.answers.kip1251 is KafkaError.NONE:
        _emit(g, out, cfg, ev.ts, AlertKind.AVOIDABLE_FENCING, alerts.avoidable_fencing, facts, judged.avoidable)
    if judged.zombies:
        _emit(g, out, cfg, ev.ts, AlertKind.ZOMBIE_COMMIT, alerts.zombie_commit, facts, judged.zombies)
    if judged.unsafe:
        _emit(g, out, cfg, ev.ts, AlertKind.UNSAFE_ACCEPT, alerts.unsafe_accept, facts, judged.unsafe)
    if agrees is False:
        _emit(g, out, cfg, ev.ts, AlertKind.MODEL_DIVERGENCE, alerts.model_divergence, facts, broker_error.value,
              predicted.value, cfg.policy_for(g.group_type).value)


# --------------------------------------------------------------------------- stored offsets

def _offset_committed(g: Group, ev: OffsetCommitted, cfg: RulesConfig, out: Outputs) -> Group:
    g = _touch(g, ev.ts, exists=True, group_type="simple" if g.group_type is None else None)
    tp = (ev.topic, ev.partition)
    off = exp.CommittedOffset(ev.commit_ts if ev.commit_ts is not None else ev.ts, ev.expire_ts)
    was_pending = offs.store_record(g, tp, off)
    if ev.expire_ts is not None or was_pending:
        offs.recompute_expiry(g, ev.ts, cfg.offsets_retention_ms)
    else:
        offs.note_commit(g, ev.ts, cfg.offsets_retention_ms, [tp])
    return g


def _offset_deleted(g: Group, ev: OffsetDeleted, cfg: RulesConfig, out: Outputs) -> Group:
    g = _touch(g, ev.ts)
    tp = (ev.topic, ev.partition)
    if tp not in committed_offsets(g) and tp not in g.pending_txn:
        return g
    offs.remove(g, (tp,))
    g.pending_txn.pop(tp, None)
    offs.recompute_expiry(g, ev.ts, cfg.offsets_retention_ms)
    return g


# --------------------------------------------------------------------------- dispatch and time

_HANDLERS: dict[type, Callable] = {
    MemberAssignment: _member_assignment,
    MemberLeft: _member_left,
    Heartbeat: _heartbeat,
    ClassicJoin: _classic_join,
    ClassicGeneration: _classic_generation,
    ClassicSync: _classic_sync,
    GroupStateChange: _group_state,
    StreamsTopology: _streams_topology,
    OffsetCommit: _commit,
    OffsetCommitted: _offset_committed,
    OffsetDeleted: _offset_deleted,
}


def process(g: Group, event, cfg: RulesConfig, out: Outputs) -> Group:
    """Apply one group event: first the decisions due before it, then the event itself. A group
    forgotten before the event (``drop_at``) meets it as a new group, whether or not an engine
    removed its state in between: the same outputs whatever the batches."""
    if g.spike is not None or g.expiry.deadline is not None or g.pending_txn:  # else nothing can be due
        g = advance(g, event.ts - 1, cfg, out)
    gap = event.ts - 1 - g.last_ts  # a drop comes at least this long after the group's last event
    if (gap >= 0 and (not g.members or gap >= cfg.group_retention_ms > 0) and g.first_seen_ts is not None
            and drop_due(g, event.ts - 1, cfg)):
        g = new_group(g.cluster, g.group_id)
    if g.departed is not None or g.first_seen_ts is None:
        ms.watch_departures(g, g.first_seen_ts, event.ts, cfg.warmup_ms)
    return _HANDLERS[type(event)](g, event, cfg, out)


def next_wakeup(g: Group, cfg: RulesConfig) -> int | None:
    """The earliest event time at which the group has something to do: a decision for
    ``advance``, or being forgotten (``drop_at``)."""
    wake = decision_at(g, cfg)
    return wake if wake is not None else drop_at(g, cfg)


def advance(g: Group, now: int, cfg: RulesConfig, out: Outputs) -> Group:
    """Make the decisions due at or before ``now``: spike windows closing, then expiry
    (OFFSETS_EXPIRING / OFFSETS_EXPIRED) in deadline order, stamped with the deadline, so the
    result does not depend on when (in which micro-batch) the clock passes it."""
    spike = g.spike
    if spike is not None and spk.windows_closed(spike, now, cfg.spike_window_ms):
        g.spike, spike_alerts = spk.advance(spike, now, cfg.spike, cluster=g.cluster, group_id=g.group_id)
        out.alerts.extend(spike_alerts)
    if g.expiry.deadline is None and not g.pending_txn:
        return g  # nothing else can be due (called before every event)
    g.counters.expired_offsets += offs.expire_due(g, now, cfg, out.alerts)
    return g


def deadlines(g: Group, cfg: RulesConfig) -> exp.Deadlines:
    """The group's earliest expiry deadlines under each rule (contract §4)."""
    return offs.deadlines(g, cfg.offsets_retention_ms)

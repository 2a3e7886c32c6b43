"""The report's numbers: verdict and alert records (contract §8, as ``sinks/jsonl.py`` writes
them) folded into one JSON-ready summary, per cluster and per group, for the range read.

Streaming and bounded: a verdict line updates a few counters keyed by its *shape* (group, kind,
which policies accept, class, flags), never a list of records, so millions of lines cost the
same memory as a thousand. A commit request (its lines share an ``event_id``) is held open only
while its lines arrive (:data:`OPEN_REQUESTS` at most; a request's lines are adjacent in a file
and nearly so in a topic), then folded into request shapes. Member tables are pruned to the
busiest when they grow past their bound (the summary says so); series widen their buckets
(:mod:`.timeline`).

The numbers (contract §3, §6): under the policy the brokers run (``broker_policy``), commits
rejected; for every other policy, how many of those it would accept (``avoidable``); aborted
transactions (rejected ``txn_commit`` requests: the broker's answer when the verdict carries
one, else the broker policy's, as ``fencewatch_aborted_transactions_total``) and how many each
policy would save (it accepts every partition); ``unsafe`` accepts per policy, and those that
today's check stops (``added``); zombie and stale verdicts.
"""
from __future__ import annotations

from collections import Counter, OrderedDict
from typing import Iterable, Mapping

from fencewatch.state.judging import commit_stored
from fencewatch.state.model import POLICY_ANSWER_FIELD, CommitClass, Policy

from .alerts import AlertDigest
from .timeline import Timeline

FORMAT = 1  # the summary's format version (``fencewatch_report``)
POLICIES = tuple(p.value for p in Policy)
ANSWER_FIELDS = tuple(POLICY_ANSWER_FIELD[p] for p in Policy)
CLASSES = tuple(c.value for c in CommitClass)
KINDS = ("commit", "txn_commit")
DEFAULT_CLUSTER = "default"
OPEN_REQUESTS = 1 << 14
MAX_MEMBERS = 20_000  # members with avoidable fences kept before pruning to the busiest half
TOP = 20  # rows of the member and client tables
SERIES_GROUPS = 8  # groups with their own series (the most avoidable fences)
_NONE = "NONE"
# add_fields takes the answers in this order (fencing.POLICY_TABLE's), and the accept masks' bits follow it
_EVERY = (1 << len(POLICIES)) - 1


def rank_policy(broker_policy: str) -> str:
    """The policy the headline and the member tables rank by: the upgrade to KIP-1251, or, when
    the brokers run it already, KAFKA-19779's final design."""
    return Policy.KIP1251.value if broker_policy != Policy.KIP1251.value else Policy.ASSIGNMENT_EPOCH.value


def classic_client_id(member_id: str | None) -> str | None:
    """The client id inside a classic member id (``clientId-<uuid>``, Kafka's
    ``GroupMetadata.generateMemberId``); None for KIP-848 members (a bare UUID) and admin commits."""
    if not member_id or (len(member_id) == 22 and _BASE64URL.issuperset(member_id)):
        return None  # empty (an admin commit), or a KIP-848 member's base64url UUID
    head, sep, tail = member_id.rpartition("-")
    if not sep or not head:
        return None
    # a full UUID: strip its five parts; a shortened one: its last part (hex)
    parts = member_id.split("-")
    if len(parts) >= 6 and [len(p) for p in parts[-5:]] == [8, 4, 4, 4, 12] and _hex("".join(parts[-5:])):
        return "-".join(parts[:-5]) or None
    if len(tail) >= 8 and _hex(tail):
        return head
    return None


_BASE64URL = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")


def _hex(text: str) -> bool:
    return all(ch in "0123456789abcdef" for ch in text.lower())


def empty_counts(broker_policy: str) -> dict:
    """One scope's numbers (a group, a cluster, all), every one 0; see the module docstring."""
    relaxed = [p for p in POLICIES if p != broker_policy]
    return {
        "requests": 0, "verdicts": 0, "requests_by_kind": {k: 0 for k in KINDS},
        "classes": {c: 0 for c in CLASSES},
        "rejected": {"policy": broker_policy, "requests": 0, "verdicts": 0},
        "rejected_by_policy": {p: {"requests": 0, "verdicts": 0} for p in POLICIES},
        "avoidable": {p: {"requests": 0, "verdicts": 0} for p in relaxed},
        "aborted_transactions": {"policy": broker_policy, "requests": 0, "saved": {p: 0 for p in relaxed}},
        "unsafe": {p: {"verdicts": 0, "added": 0} for p in POLICIES},
        "zombie": {"verdicts": 0, "rejected_by_every_policy": 0},
        "stale": {"verdicts": 0, "rejected_by_every_policy": 0},
        "broker": {"answered_requests": 0, "answered_verdicts": 0, "rejected_requests": 0, "errors": {},
                   "model_agrees": {"true": 0, "false": 0, "unknown": 0}},
        "warming_up_verdicts": 0,
    }


def add_into(dst: dict, src: Mapping) -> dict:
    """``dst`` += ``src``, key by key through nested dicts (strings, like a policy's name, kept)."""
    for k, v in src.items():
        if isinstance(v, Mapping):
            add_into(dst.setdefault(k, {}), v)
        elif isinstance(v, bool) or not isinstance(v, int):
            dst.setdefault(k, v)
        else:
            dst[k] = dst.get(k, 0) + v
    return dst


class ReportAggregator:
    """Fold verdict records (:meth:`add_verdict`) and alert records (:meth:`add_alert`), then
    :meth:`summary`. ``from_ms`` / ``to_ms`` (inclusive, epoch ms) keep records in that range."""

    def __init__(self, broker_policy: str = "strict", *, from_ms: int | None = None, to_ms: int | None = None,
                 open_requests: int = OPEN_REQUESTS, max_members: int = MAX_MEMBERS,
                 streams_broker_policy: str = "kip1251") -> None:
        self.broker_policy = Policy(broker_policy).value
        # Streams groups (KIP-1071): the brokers' check on their commits (contract §3.4: kip1251 from
        # Kafka 4.2) and which groups are streams groups: verdicts do not say, a trace or the caller does.
        self.streams_broker_policy = Policy(streams_broker_policy).value
        self.streams_groups: set[tuple[str, str]] = set()
        self._b = POLICIES.index(self.broker_policy)
        self._relaxed = [(i, p) for i, p in enumerate(POLICIES) if i != self._b]
        self.from_ms, self.to_ms = from_ms, to_ms
        self.open_requests, self.max_members = open_requests, max_members
        self.timeline = Timeline()
        self._masks: dict[tuple, int] = {}  # policies' answers -> accept mask
        # (cluster, group, kind, accepts, class, unsafe, answered, agrees, warming) -> verdicts
        self.vshapes: Counter = Counter()
        # (cluster, group, kind, rejects, broker error, aborted) -> requests
        self.rshapes: Counter = Counter()
        # (cluster, group, policy) -> verdict lines the brokers' policy rejects in requests the policy accepts whole
        self.avoidable_lines: Counter = Counter()
        self.fenced = self.timeline.counter(1)  # (cluster, bucket, kind, rejects, aborted) -> requests
        self.avoid_series = self.timeline.counter(2)  # (cluster, group, bucket, rejects, aborted) -> requests
        self.unsafe_series = self.timeline.counter(2)  # (cluster, group, bucket, accepts) -> unsafe verdicts
        self.members: dict[tuple, list[int]] = {}  # (cluster, group, member) -> avoidable, saved by policy
        self.members_pruned = 0
        self.group_range: dict[tuple, list[int]] = {}  # (cluster, group) -> [first ts, last ts]
        self.first_ts: int | None = None
        self.last_ts: int | None = None
        self.alerts = AlertDigest()
        self.inputs: list[dict] = []
        self.bad_examples: list[str] = []
        self._open: OrderedDict = OrderedDict()
        self._last_key = None
        self._last = None
        self.input("records", "(unnamed)")

    def mark_streams_group(self, cluster: str | None, group: str) -> None:
        """``group`` is a streams group: the summary's ``streams`` section counts what the relaxed
        check saves it (:func:`.assemble.streams_section`)."""
        self.streams_groups.add((cluster or DEFAULT_CLUSTER, group))

    # -- inputs

    def input(self, kind: str, name: str) -> int:
        """Register an input (a file, a topic); its number is the ``source`` of its records."""
        self.inputs.append({"kind": kind, "name": name, "records": 0, "bad": 0, "outside_range": 0})
        return len(self.inputs) - 1

    def reject(self, source: int, what: str, exc: Exception) -> None:
        """A record its reader could not decode: counted with the input's records, and skipped."""
        self.inputs[source]["records"] += 1
        self._bad(source, what, exc)

    def _bad(self, source: int, what: str, exc: Exception) -> None:
        self.inputs[source]["bad"] += 1
        if len(self.bad_examples) < 5:
            self.bad_examples.append(f"{self.inputs[source]['name']}: {what}: {type(exc).__name__}: {exc}")

    def _in_range(self, ts: int) -> bool:
        return (self.from_ms is None or ts >= self.from_ms) and (self.to_ms is None or ts <= self.to_ms)

    def _seen(self, ts: int) -> None:
        if self.first_ts is None or ts < self.first_ts:
            self.first_ts = ts
        if self.last_ts is None or ts > self.last_ts:
            self.last_ts = ts

    # -- verdicts

    def add_verdicts(self, records: Iterable[Mapping], source: int = 0) -> None:
        for v in records:
            self.add_verdict(v, source)

    def add_verdict(self, v: Mapping, source: int = 0) -> None:
        """One (commit, partition) verdict record; a malformed one is counted, never raised."""
        try:
            cls = v["class"] if "class" in v else v["cls"]
            args = (v["ts"], v.get("cluster"), v["group_id"], v["kind"], tuple(v[f] for f in ANSWER_FIELDS), cls,
                    v.get("unsafe"), v.get("broker_error"), v.get("model_agrees"), v.get("warming_up"), v["event_id"],
                    v.get("member_id"))
        except (KeyError, TypeError) as exc:
            self.reject(source, "verdict", exc)
            return
        self.add_fields(*args, source=source)

    def add_fields(self, ts: int, cluster: str | None, group: str, kind: str, answers: tuple[str, ...], cls: str,
                   unsafe: bool | None, broker_error: str | None, agrees: bool | None, warming: bool | None,
                   event_id: str, member: str | None, *, source: int = 0) -> None:
        """A verdict record's fields, the policies' answers as a tuple in :data:`ANSWER_FIELDS` order:
        the readers that decode lines into typed records call this directly, without a dict per line."""
        stats = self.inputs[source]
        stats["records"] += 1
        try:
            if type(ts) is not int:
                ts = int(ts)
            if kind not in KINDS or type(group) is not str or type(cls) is not str:
                raise ValueError(f"kind {kind!r}, group_id {group!r}, class {cls!r}")
        except (TypeError, ValueError) as exc:
            self._bad(source, "verdict", exc)
            return
        if not self._in_range(ts):
            stats["outside_range"] += 1
            return
        cluster = cluster or DEFAULT_CLUSTER
        try:
            accepts = self._masks.get(answers)
            if accepts is None:  # bit i: policy i accepts; few distinct answer tuples, each computed once
                accepts = self._masks[answers] = self._accept_mask(answers)
        except (TypeError, ValueError) as exc:  # an answer that is no name (a list, say), or too few
            self._bad(source, "verdict", exc)
            return
        unsafe = unsafe is True
        self.vshapes[cluster, group, kind, accepts, cls, unsafe, broker_error is not None, agrees,
                     warming is True] += 1
        if unsafe:
            self.unsafe_series[cluster, group, self.timeline.bucket(ts), accepts] += 1
        key = (source, cluster, group, kind, event_id)
        if key == self._last_key:
            r = self._last
        else:
            r = self._open.get(key)
            if r is None:
                r = self._open[key] = [cluster, group, kind, ts, member, broker_error, 0, 0]
                if len(self._open) > self.open_requests:
                    self._close(self._open.popitem(last=False)[1])
            else:
                self._open.move_to_end(key)
            self._last_key, self._last = key, r
        r[6] |= ~accepts & _EVERY
        if not accepts >> self._b & 1:
            r[7] += 1  # a line the brokers' policy rejects
        if r[5] is None:
            r[5] = broker_error

    @staticmethod
    def _accept_mask(answers: tuple) -> int:
        if len(answers) != len(POLICIES):
            raise ValueError(f"{len(answers)} policy answers; expected {len(POLICIES)} ({', '.join(ANSWER_FIELDS)})")
        return sum(1 << i for i, a in enumerate(answers) if a == _NONE)

    def _close(self, r: list) -> None:
        cluster, group, kind, ts, member, broker_error, rejects, b_lines = r
        if b_lines:  # the class follows the request: a policy saves a line only if it accepts the whole request
            for i, p in self._relaxed:
                if not rejects >> i & 1:
                    self.avoidable_lines[cluster, group, p] += b_lines
        aborted = kind == "txn_commit" and not commit_stored(broker_error, "REJECTED" if rejects >> self._b & 1
                                                             else _NONE)
        self.rshapes[cluster, group, kind, rejects, broker_error, aborted] += 1
        bucket = self.timeline.bucket(ts)
        self.fenced[cluster, bucket, kind, rejects, aborted] += 1
        self._seen(ts)
        span = self.group_range.get((cluster, group))
        if span is None:
            self.group_range[cluster, group] = [ts, ts]
        elif ts < span[0] or ts > span[1]:
            span[0], span[1] = min(span[0], ts), max(span[1], ts)
        b_rejects = rejects >> self._b & 1
        if (b_rejects or aborted) and any(not rejects >> i & 1 for i, _ in self._relaxed):
            self.avoid_series[cluster, group, bucket, rejects, aborted] += 1
            self._member(cluster, group, member, rejects, b_rejects, aborted)

    def _member(self, cluster: str, group: str, member: str | None, rejects: int, b_rejects: int,
                aborted: bool) -> None:
        n = len(POLICIES)
        row = self.members.get((cluster, group, member))
        if row is None:
            row = self.members[cluster, group, member] = [0] * (2 * n)
            if len(self.members) > self.max_members:
                self._prune_members()
        for i, _ in self._relaxed:
            if not rejects >> i & 1:
                row[i] += b_rejects
                row[n + i] += aborted

    def _prune_members(self) -> None:
        """Keep the busiest half: the tables show the top rows, and say they are approximate."""
        rank = POLICIES.index(rank_policy(self.broker_policy))
        keep = sorted(self.members.items(), key=lambda kv: (-kv[1][rank], -sum(kv[1])))[: self.max_members // 2]
        self.members_pruned += len(self.members) - len(keep)
        self.members = dict(keep)

    def finish(self) -> None:
        """Fold the requests still open (the end of the input)."""
        while self._open:
            self._close(self._open.popitem(last=False)[1])
        self._last_key = self._last = None

    # -- alerts

    def add_alerts(self, records: Iterable[Mapping], source: int = 0) -> None:
        for a in records:
            self.add_alert(a, source)

    def add_alert(self, a: Mapping, source: int = 0) -> None:
        stats = self.inputs[source]
        stats["records"] += 1
        try:
            ts = int(a["ts"])
            if not isinstance(a["kind"], str):
                raise ValueError(f"kind {a['kind']!r}")
            if not self._in_range(ts):
                stats["outside_range"] += 1
                return
            if self.alerts.add(a, a.get("cluster") or DEFAULT_CLUSTER):
                self._seen(ts)
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            self._bad(source, "alert", exc)

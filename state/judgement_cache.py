"""The judgement cache: judgements reused until membership changes.

Owns: which judgements a group may reuse and when they go stale. What a policy says for
a partition depends only on the committing member, its client epoch, whether the request
is transactional, and who holds the partition; members commit the same partitions again
and again between rebalances, so judgements are kept per (member, client epoch,
transactional): partition by partition, and whole requests by their partitions tuple.
A membership change forgets what it can alter (:meth:`JudgementCache.forget`).
"""
from __future__ import annotations

from typing import Iterable

from fencewatch.state.model import PartitionJudgement, TopicPartition

MAX_KEYS = 1024  # (member, epoch, transactional) keys kept before the cache is emptied
MAX_REQUESTS = 64  # request shapes kept per key before that key's requests are emptied


class MemberJudgements:
    """Judgements for one (member id, client epoch, transactional)."""

    __slots__ = ("partitions", "requests")

    def __init__(self) -> None:
        self.partitions: dict[TopicPartition, PartitionJudgement] = {}
        self.requests: dict[tuple[TopicPartition, ...], object] = {}  # tps -> judging.RequestJudgement

    def remember(self, tps: tuple[TopicPartition, ...], judged) -> None:
        """Keep a request's judgement and those of its partitions."""
        if len(self.requests) > MAX_REQUESTS:
            self.requests.clear()
        self.requests[tps] = judged
        self.partitions.update(zip(tps, judged.parts))


class JudgementCache(dict):
    """Per group: (member id, client epoch, kind: 0 OffsetCommit, 1 TxnOffsetCommit, 2 one of v6+) ->
    :class:`MemberJudgements`.
    A dict, so the per-commit lookup is one C-level ``get``."""

    __slots__ = ()

    def of(self, member_id: str, client_epoch: int, kind: int) -> MemberJudgements:
        key = (member_id, client_epoch, kind)
        found = self.get(key)
        if found is None:
            if len(self) > MAX_KEYS:
                self.clear()
            found = self[key] = MemberJudgements()
        return found

    def forget(self, changed: Iterable) -> None:
        """Drop what a membership change can alter: the changed members' own judgements, and
        other members' for partitions the changed members held before or hold now (with the
        requests made of them). ``changed``: members (or None) before and after the change."""
        if not self:
            return
        changed = [m for m in changed if m is not None]
        ids = {m.member_id for m in changed}
        tps: set = set()
        for m in changed:
            tps.update(m.assigned_partitions)
            tps.update(m.partitions_pending_revocation)
        for key in list(self):
            if key[0] in ids:
                del self[key]
                continue
            entry = self[key]
            dropped = entry.partitions.keys() & tps
            if dropped:
                for tp in dropped:
                    del entry.partitions[tp]
                entry.requests.clear()

"""Client-side state of simulated consumers: what each client believes, and since when.

What lives here: :class:`ConsumerClient`. The races KAFKA-19779 is about
exist because a client acts on what it last *learned* from the coordinator,
while the coordinator has already moved on. A client therefore keeps a short
history of ``(learned_at, member_epoch, owned, in_group)``; a request sent
at time ``t`` carries :meth:`ConsumerClient.view_at` ``(t)`` -- the epoch of the
last heartbeat response that had *arrived* by ``t`` -- and the coordinator
judges it when it arrives, later. A commit sent just before a heartbeat
response that bumped the epoch therefore arrives with the old epoch: the
heartbeat race.

Behaviour knobs per client: transactional (exactly-once producer committing
through TxnOffsetCommit on its own clock), static membership (``instance_id``),
slow revocation callbacks. Which client does what when is decided by
:mod:`fencewatch.sim.world`.
"""

from __future__ import annotations

__all__ = ["CommitPlan", "ConsumerClient", "View"]

# (learned_at_ms, member_epoch, owned partitions sorted, in_group)
View = tuple[int, int, tuple[int, ...], bool]

_HISTORY = 8


class CommitPlan:
    """The simulator's memo for a client's commits of one partition set (until a leader election).

    ``lines`` are each partition's current log segment ``(base, start_ts,
    records_per_s)`` so an offset is one multiply-add; ``layout`` is the
    emitter's precomputed form of the partition list. The ``key_*`` fields say
    what the cached answer (``error``), label (``truth``) and prepared event
    (``prepared``) were computed from: the coordinator's state version and the
    request's member, epoch, cause and kind. Same key, same answer.
    """

    __slots__ = (
        "partitions",
        "logs_version",
        "logs",
        "lines",
        "epochs",
        "newest_segment",
        "layout",
        "key_version",
        "key_member",
        "key_epoch",
        "key_cause",
        "key_transactional",
        "error",
        "truth",
        "prepared",
        "view",
    )

    def __init__(self, partitions: tuple[int, ...], logs_version: int, logs: list, layout_of) -> None:
        segments = [lg.current for lg in logs]
        self.partitions = partitions
        self.logs_version = logs_version
        self.logs = logs
        self.lines = [(s[1], s[0], s[2]) for s in segments]
        self.epochs = [s[3] for s in segments]
        self.newest_segment = max((s[0] for s in segments), default=0)
        self.layout = layout_of(logs, self.epochs)
        self.key_version = -1
        self.key_member = None
        self.key_epoch = 0
        self.key_cause = None
        self.key_transactional = False
        self.error = 0
        self.truth = None
        self.prepared = None
        self.view = None  # the client view the regular commit path last used this plan for


class ConsumerClient:
    """One consumer process (one incarnation of a member id).

    Mutable and slotted: the simulator updates it on every heartbeat response.
    ``hb_token`` / ``commit_token`` invalidate scheduled heartbeats or
    commits when the client pauses, restarts a chain, or dies.
    """

    __slots__ = (
        "member_id",
        "instance_id",
        "group",
        "transactional_id",
        "producer_id",
        "producer_epoch",
        "commit_interval_ms",
        "slow_revocation",
        "history",
        "hb_token",
        "commit_token",
        "alive",
        "frozen",
        "revoking",
        "protocol",
        "plan",
        "txn",
        "commit_delay_ms",
        "commit_cause",
    )

    def __init__(
        self,
        member_id: str,
        group,
        now: int,
        *,
        instance_id: str | None = None,
        transactional_id: str | None = None,
        producer_id: int = -1,
        producer_epoch: int = 0,
        commit_interval_ms: int = 5000,
        slow_revocation: bool = False,
        protocol: str = "consumer",
    ) -> None:
        self.member_id = member_id
        self.instance_id = instance_id
        self.group = group
        self.transactional_id = transactional_id
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        self.commit_interval_ms = commit_interval_ms
        self.slow_revocation = slow_revocation
        self.history: list[View] = [(now, 0, (), False)]
        self.hb_token = 0
        self.commit_token = 0
        self.alive = True
        self.frozen = False
        self.revoking = False
        self.protocol = protocol
        self.plan: CommitPlan | None = None
        # TxnOffsetCommit identity (transactional id, producer id, producer epoch), or None.
        self.txn = None if transactional_id is None else (transactional_id, producer_id, producer_epoch)
        self.commit_delay_ms = 0  # extra transit of commits from the client's clock (set by the simulator)
        self.commit_cause = "auto_commit" if transactional_id is None else "eos_commit"

    @property
    def transactional(self) -> bool:
        return self.transactional_id is not None

    @property
    def latest(self) -> View:
        return self.history[-1]

    def view_at(self, t: int) -> View:
        """What the client knew at time ``t`` (the newest view learned at or before ``t``)."""
        history = self.history
        view = history[-1]
        if view[0] <= t:
            return view
        for view in reversed(history):
            if view[0] <= t:
                return view
        return history[0]

    def learn(self, learned_at: int, member_epoch: int, owned: tuple[int, ...], in_group: bool) -> None:
        """Record a heartbeat response (or a reset) that reaches the client at ``learned_at``."""
        history = self.history
        if learned_at < history[-1][0]:
            learned_at = history[-1][0]
        history.append((learned_at, member_epoch, owned, in_group))
        if len(history) > _HISTORY:
            del history[0]

    def stop_timers(self) -> None:
        """Invalidate every scheduled heartbeat and commit of this client."""
        self.hb_token += 1
        self.commit_token += 1

    def __repr__(self) -> str:
        return f"ConsumerClient({self.member_id!r}, latest={self.latest}, alive={self.alive})"

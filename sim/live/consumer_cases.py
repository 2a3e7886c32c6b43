"""Scenarios of KIP-848 consumer groups played by librdkafka consumers (``group.protocol=consumer``).

- ``join_leave``: members join and leave while the others consume and commit.
- ``zombie``: a member stopped past its session timeout resumes and commits.
- ``reassign_inflight``: commits sent while the group reassigns (the KAFKA-19779 race).
- ``static_rejoin``: a static member (``group.instance.id``) leaves and comes back.
"""

from __future__ import annotations

import logging
import time

from .clients import StalledConsumer, take_over, wait_for
from .context import HEARTBEAT, OFFSET_COMMIT, Context, Worker, client_saw

__all__ = ["join_leave", "zombie", "reassign_inflight", "static_rejoin"]

log = logging.getLogger(__name__)


def _start(ctx: Context, group: str, name: str, topics: list[str], **kw) -> Worker:
    w = Worker(ctx, group, f"{group}-{name}", topics, **kw)
    w.start()
    if not w.joined.wait(60):
        raise TimeoutError(f"{w.client_id} got no partition")
    return w


def _owned(workers: list[Worker]) -> int:
    return sum(len(w.partitions) for w in workers if w.is_alive())


def _expect_leave(ctx: Context, scenario: str, w: Worker, epoch: int = -1) -> None:
    ctx.expect(scenario, "static_leave" if epoch == -2 else "leave", HEARTBEAT, w.group_id, {"any": ["NONE"]},
               match={"request": {"memberId": w.member_id, "memberEpoch": epoch}},
               note="a leaving member's last heartbeat (epoch -1, or -2 for a static member) is accepted")


def join_leave(ctx: Context) -> None:
    """Three members join one after another under load, two leave, the last one settles."""
    s = "join_leave"
    partitions = 6
    topic = ctx.topic(s, "in", partitions, messages=900 if ctx.short else 6000)
    group = ctx.name(s, "g")
    rng = ctx.rng(s)
    pace = 0.15 if ctx.short else 0.005
    # One asynchronous commit unanswered at most, as reassign_inflight's: librdkafka changes a
    # member's assignment only with none outstanding (the suite's short run, 2026-12-05: the
    # first member never took the leavers' partitions in 60 s)
    workers = [_start(ctx, group, "c1", [topic], sync_share=0.5, rng=rng, pace_s=pace, max_in_flight=1)]
    for name in ("c2", "c3"):
        workers.append(_start(ctx, group, name, [topic], sync_share=0.5, rng=rng, pace_s=pace, max_in_flight=1))
    wait_for(lambda: _owned(workers) == partitions and all(w.partitions for w in workers), 60,
             "three members sharing the partitions")
    time.sleep(1.0 if ctx.short else 5.0)
    for w in workers[1:]:
        w.leave()
        _expect_leave(ctx, s, w)
    first = workers[0]
    wait_for(lambda: len(first.partitions) == partitions, 120, "the first member holding every partition")
    time.sleep(1.5)  # a few heartbeats: its epoch is the group's
    mark = first.mark()
    # fresh records: the member may have read the topic to its end while the others left
    ctx.clients.produce(topic, 300, partitions, prefix="settled")
    wait_for(lambda: len(first.seen) >= mark + 2, 60, "two commits of the settled member")
    first.leave()
    _expect_leave(ctx, s, first)
    for w in workers:
        client_saw(ctx, s, w, w.seen)
    client_saw(ctx, s, first, first.seen[mark:mark + 2], predicted="NONE", fencewatch_class="accepted")
    _raise_worker_errors(workers)


def zombie(ctx: Context) -> None:
    """A member stopped past its 2 s session; another takes its partitions; it resumes and
    commits with the epoch it had: the coordinator removed it, UNKNOWN_MEMBER_ID."""
    s = "zombie"
    topic = ctx.topic(s, "in", 2, messages=200)
    group = ctx.name(s, "g")
    ctx.short_session(group)
    stalled = StalledConsumer(ctx.clients, group, f"{group}-zombie", "consumer", topic)
    heir = None
    try:
        stalled.joined()
        partition, offset = stalled.last_committed
        zombie_offset = offset + 7  # an offset nobody else commits: it finds the line
        stalled.stall(partition, zombie_offset, "fw:zombie")
        heir_offset = zombie_offset + 1
        heir, heir_answer = take_over(ctx.clients, group, topic, partition, heir_offset)
        zombie_answer = stalled.resume()
        log.info("[%s] zombie's commit answered %s (client), heir's %s", s, zombie_answer, heir_answer)
        ctx.count("zombie_commits")
        ctx.expect(s, "zombie_commit", OFFSET_COMMIT, group, {"any": ["UNKNOWN_MEMBER_ID"]},
                   match={"request": {"memberId": stalled.member_id}, "partition": [topic, partition, zombie_offset]},
                   fencewatch_class="unknown_member",
                   note=f"the coordinator removed the member at its session timeout; librdkafka reported "
                        f"{zombie_answer}. From the request log alone the removal is not seen (contract §10): "
                        "its heartbeat just before is answered UNKNOWN_MEMBER_ID")
        ctx.expect(s, "zombie_leave", HEARTBEAT, group, {"any": ["UNKNOWN_MEMBER_ID"]},
                   match={"request": {"memberId": stalled.member_id, "memberEpoch": -1}},
                   note="the resumed zombie's leave on close: the coordinator no longer knows it")
        ctx.expect(s, "heir_commit", OFFSET_COMMIT, group, {"any": ["NONE"]},
                   match={"request": {"memberId": heir.memberid()}, "partition": [topic, partition, heir_offset]},
                   fencewatch_class="accepted", note=f"the new owner's commit; librdkafka reported {heir_answer}")
    finally:
        stalled.close()
        if heir is not None:
            heir.close()


def reassign_inflight(ctx: Context) -> None:
    """One member commits asynchronously after every message while others join and leave:
    commits sent at an epoch the coordinator moves past before they arrive are answered
    STALE_MEMBER_EPOCH by 4.2 and, on partitions still owned, accepted by 4.3 (KIP-1251)."""
    s = "reassign_inflight"
    partitions = 4
    topic = ctx.topic(s, "in", partitions, messages=1200 if ctx.short else 20000)
    group = ctx.name(s, "g")
    rng = ctx.rng(s)
    pace = 0.03 if ctx.short else 0.005  # without a pause the commits queue up behind each other
    # One unanswered commit at most: librdkafka finishes a revocation only once no commit of the
    # member is outstanding, and a commit sent on every message kept one outstanding for good on
    # a loaded host (the member never acknowledged the revocation, its joiner got no partition in
    # 60 s: the suite's short run, 2026-12-04). Each commit still meets an epoch bump in flight
    # whenever the bump comes while it travels.
    a = _start(ctx, group, "a", [topic], commit_every=1, sync_share=0.0, rng=rng, pace_s=pace, max_in_flight=1)
    rounds = 1 if ctx.short else 3
    for r in range(rounds):
        b = _start(ctx, group, f"b{r}", [topic], commit_every=2, sync_share=0.0, rng=rng, pace_s=pace,
                   max_in_flight=1)
        wait_for(lambda: len(a.partitions) < partitions and b.partitions, 60, "the joiner taking partitions")
        time.sleep(0.5)
        b.leave()
        wait_for(lambda: len(a.partitions) == partitions, 60, "the first member holding every partition again")
    a.leave()
    ctx.expect(s, "every_commit", OFFSET_COMMIT, group, {"any": ["NONE", "STALE_MEMBER_EPOCH"]},
               match={"request": {"memberId": a.member_id}},
               note="racy by design: which commits arrive after an epoch bump varies from run to run")
    _raise_worker_errors([a])


def static_rejoin(ctx: Context) -> None:
    """A static member leaves (epoch -2: its partitions wait for it) and a new instance with the
    same ``group.instance.id`` takes them back under a new member id."""
    s = "static_rejoin"
    topic = ctx.topic(s, "in", 3, messages=600)
    group = ctx.name(s, "g")
    instance = ctx.name(s, "instance")
    rng = ctx.rng(s)
    conf = {"group.instance.id": instance}
    first = _start(ctx, group, "s1", [topic], sync_share=1.0, rng=rng, pace_s=0.1, **conf)
    wait_for(lambda: len(first.seen) >= 2, 30, "two commits of the static member")
    before = set(first.partitions)
    first.leave()
    _expect_leave(ctx, s, first, epoch=-2)
    second = _start(ctx, group, "s2", [topic], sync_share=1.0, rng=rng, pace_s=0.1, **conf)
    wait_for(lambda: len(second.seen) >= 2, 30, "two commits of the returning instance")
    second.leave()
    ctx.count("static_same_partitions" if set(second.partitions) == before else "static_other_partitions")
    ctx.expect(s, "static_rejoin", HEARTBEAT, group, {"any": ["NONE"]},
               match={"request": {"memberId": second.member_id, "memberEpoch": 0, "instanceId": instance}},
               note="the new instance joins with the same instance id and takes the partitions over")
    _expect_leave(ctx, s, second, epoch=-2)
    client_saw(ctx, s, first, first.seen)
    client_saw(ctx, s, second, second.seen[:2], predicted="NONE", fencewatch_class="accepted")
    _raise_worker_errors([first, second])


def _raise_worker_errors(workers: list[Worker]) -> None:
    for w in workers:
        if w.error is not None:
            raise RuntimeError(f"{w.client_id} failed: {w.error}") from w.error

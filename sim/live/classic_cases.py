"""Classic groups (``group.protocol=classic``, JoinGroup/SyncGroup) and generation fencing.

``classic_generation`` plays two groups at once:

- eager (``range``): the group's metadata is taken at generation g, a second member joins
  (generation g+1), and a transactional producer sends offsets with the old metadata:
  ILLEGAL_GENERATION on every Kafka version, because ``ClassicGroup.validateOffsetCommit``
  compares generations exactly (KIP-1251 relaxes consumer groups only).
- cooperative-sticky: a member stopped past its 6 s session resumes and commits after
  the group rebalanced without it.
"""

from __future__ import annotations

import logging
import threading

from confluent_kafka import TopicPartition

from .clients import StalledConsumer, assigned, consume_some, take_over, wait_for
from .context import OFFSET_COMMIT, TXN_OFFSET_COMMIT, Context
from .txn_cases import _transact

__all__ = ["classic_generation"]

log = logging.getLogger(__name__)


def classic_generation(ctx: Context) -> None:
    s = "classic_generation"
    errors: list[BaseException] = []

    def guarded(fn) -> threading.Thread:
        def body() -> None:
            try:
                fn(ctx, s)
            except BaseException as exc:
                log.exception("[%s] %s failed", s, fn.__name__)
                errors.append(exc)
        t = threading.Thread(target=body, name=f"{s}-{fn.__name__}", daemon=True)
        t.start()
        return t

    for t in [guarded(_eager_stale_generation), guarded(_cooperative_zombie)]:
        t.join()
    if errors:
        raise RuntimeError(f"{len(errors)} part(s) failed: {errors[0]}") from errors[0]


def _eager_stale_generation(ctx: Context, s: str) -> None:
    topic = ctx.topic(s, "eager-in", 4, messages=400)
    out = ctx.topic(s, "eager-out", 4)
    group, txn_id = ctx.name(s, "eager"), ctx.name(s, "txn")
    a = ctx.clients.consumer(group, f"{group}-a", "classic", assignor="range")
    a.subscribe([topic])
    b = producer = None
    try:
        wait_for(lambda: len(assigned(a)) == 4, 60, "the eager member's assignment", lambda: a.poll(0.1))
        consume_some(a, 4, 20)
        stale = a.consumer_group_metadata()
        producer = ctx.clients.transactional_producer(txn_id, f"{txn_id}-p")
        b = ctx.clients.consumer(group, f"{group}-b", "classic", assignor="range")
        b.subscribe([topic])

        def step() -> None:
            a.poll(0.05)
            b.poll(0.05)
        wait_for(lambda: assigned(b) and assigned(a) and len(assigned(a)) + len(assigned(b)) == 4, 60,
                 "the eager rebalance", step)
        kept = sorted(assigned(a))[0]
        tp = TopicPartition(kept[0], kept[1], 401)
        answer = _transact(producer, out, [tp], stale)
        ctx.count("txn_commits")
        ctx.expect(s, "classic_stale_generation", TXN_OFFSET_COMMIT, group, {"any": ["ILLEGAL_GENERATION"]},
                   match={"request": {"transactionalId": txn_id}, "partition": [tp.topic, tp.partition, tp.offset]},
                   note="a classic group's generation from before the rebalance, on a partition the member kept: "
                        "Kafka's ClassicGroup rejects it on every version (no KIP-1251 relaxation for classic "
                        f"groups); librdkafka reported {answer}")
    finally:
        a.close()
        if b is not None:
            b.close()
        if producer is not None:
            producer.flush(10)


def _cooperative_zombie(ctx: Context, s: str) -> None:
    topic = ctx.topic(s, "coop-in", 2, messages=200)
    group = ctx.name(s, "coop")
    stalled = StalledConsumer(ctx.clients, group, f"{group}-zombie", "classic", topic, assignor="cooperative-sticky")
    heir = None
    try:
        stalled.joined()
        partition, offset = stalled.last_committed
        zombie_offset = offset + 7
        stalled.stall(partition, zombie_offset, "fw:classic-zombie")
        heir_offset = zombie_offset + 1
        heir, heir_answer = take_over(ctx.clients, group, topic, partition, heir_offset, "classic", assignor="cooperative-sticky")
        zombie_answer = stalled.resume()
        log.info("[%s] classic zombie's commit answered %s (client), heir's %s", s, zombie_answer, heir_answer)
        ctx.count("zombie_commits")
        ctx.expect(s, "classic_zombie_commit", OFFSET_COMMIT, group, {"any": ["UNKNOWN_MEMBER_ID", "ILLEGAL_GENERATION"]},
                   match={"partition": [topic, partition, zombie_offset]}, count="last",
                   note="a classic member removed at its session timeout commits with its old generation; "
                        f"librdkafka reported {zombie_answer}")
        ctx.expect(s, "classic_heir_commit", OFFSET_COMMIT, group, {"any": ["NONE"]},
                   match={"partition": [topic, partition, heir_offset]},
                   note=f"the classic heir's commit; librdkafka reported {heir_answer}")
    finally:
        stalled.close()
        if heir is not None:
            heir.close()

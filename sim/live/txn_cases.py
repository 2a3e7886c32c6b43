"""Scenarios of transactional producers (KIP-447 consume-transform-produce) with librdkafka:
``send_offsets_to_transaction`` sends AddOffsetsToTxn then TxnOffsetCommit (v3 in 2.16).

- ``txn_fence``: a new instance with the same ``transactional.id`` fences the old one,
  which tries to commit again.
- ``txn_stale_metadata``: offsets sent with the consumer's group metadata from before a
  reassignment (a stale member epoch in the TxnOffsetCommit).
"""

from __future__ import annotations

import logging
import time

from confluent_kafka import KafkaException, TopicPartition

from .clients import assigned, consume_some, error_name, wait_for
from .context import ADD_OFFSETS_TO_TXN, TXN_OFFSET_COMMIT, Context

__all__ = ["txn_fence", "txn_stale_metadata"]

log = logging.getLogger(__name__)


def _retried(call, attempts: int = 4) -> None:
    """A transactional call, again while librdkafka says it may be (a timeout on a slow or moving
    transaction coordinator: the call is still under way, and a new transaction begun now would
    conflict with it, _CONFLICT)."""
    for attempt in range(attempts):
        try:
            call()
            return
        except KafkaException as exc:
            err = exc.args[0]
            if attempt == attempts - 1 or not (hasattr(err, "retriable") and err.retriable()):
                raise
            log.info("transactional call retried: %s", err)


def _transact(producer, out_topic: str, offsets: list[TopicPartition], metadata) -> str:
    """One consume-transform-produce transaction; the error name ("NONE" when committed). An
    abortable failure is aborted; a fatal one (fenced) leaves the producer unusable."""
    try:
        producer.begin_transaction()
        for tp in offsets:
            producer.produce(out_topic, f"{tp.topic}/{tp.partition}/{tp.offset}".encode(), partition=tp.partition)
        _retried(lambda: producer.send_offsets_to_transaction(offsets, metadata, 30))
        _retried(lambda: producer.commit_transaction(30))
        return "NONE"
    except KafkaException as exc:
        err = exc.args[0]
        if hasattr(err, "txn_requires_abort") and err.txn_requires_abort():
            producer.abort_transaction(30)
        return error_name(exc)


def _expect_txn_commit(ctx: Context, s: str, case: str, group: str, txn_id: str, tp: TopicPartition,
                       answers: dict[str, list[str]], cls: str | None, note: str, count: str = "one") -> None:
    ctx.expect(s, case, TXN_OFFSET_COMMIT, group, answers, fencewatch_class=cls, count=count, note=note,
               match={"request": {"transactionalId": txn_id}, "partition": [tp.topic, tp.partition, tp.offset]})


def txn_fence(ctx: Context) -> None:
    s = "txn_fence"
    topic = ctx.topic(s, "in", 2, messages=200)
    out = ctx.topic(s, "out", 2)
    group, txn_id = ctx.name(s, "g"), ctx.name(s, "txn")
    c = ctx.clients.consumer(group, f"{group}-c")
    c.subscribe([topic])
    old = new = None
    try:
        wait_for(lambda: len(assigned(c)) == 2, 60, "the consumer's assignment", lambda: c.poll(0.1))
        old = ctx.clients.transactional_producer(txn_id, f"{txn_id}-old")
        for i in range(2 if ctx.short else 5):
            msgs = consume_some(c, 2, 20)
            offsets = [TopicPartition(m.topic(), m.partition(), m.offset() + 1) for m in msgs[-1:]]
            answer = _transact(old, out, offsets, c.consumer_group_metadata())
            ctx.count("txn_commits")
            _expect_txn_commit(ctx, s, "txn_commit", group, txn_id, offsets[0], {"any": ["NONE"]}, "accepted",
                               f"consume-transform-produce; librdkafka reported {answer}")
        msgs = consume_some(c, 1, 20)
        after = [TopicPartition(msgs[0].topic(), msgs[0].partition(), msgs[0].offset() + 1000)]
        old.begin_transaction()
        old.produce(out, b"from the old instance", partition=0)
        new = ctx.clients.transactional_producer(txn_id, f"{txn_id}-new")  # InitProducerId: fences the old one
        try:
            old.send_offsets_to_transaction(after, c.consumer_group_metadata(), 30)
            old.commit_transaction(30)
            old_answer = "NONE"
        except KafkaException as exc:
            old_answer = error_name(exc)
        log.info("[%s] the fenced instance's commit: %s", s, old_answer)
        ctx.expect(s, "fenced_add_offsets", ADD_OFFSETS_TO_TXN, group,
                   {"any": ["INVALID_PRODUCER_EPOCH", "PRODUCER_FENCED"]}, count="last",
                   match={"header": {"clientId": f"{txn_id}-old"}},
                   note=f"the old instance is fenced at the transaction coordinator (librdkafka: {old_answer}); "
                        "the group coordinator never sees its commit")
        _expect_txn_commit(ctx, s, "fenced_txn_commit_absent", group, txn_id, after[0], {}, None,
                           "no TxnOffsetCommit of the fenced instance reaches the group", count="none")
        nxt = [TopicPartition(after[0].topic, after[0].partition, after[0].offset + 1)]
        answer = _transact(new, out, nxt, c.consumer_group_metadata())
        _expect_txn_commit(ctx, s, "new_instance_commit", group, txn_id, nxt[0], {"any": ["NONE"]}, "accepted",
                           f"the new instance carries on; librdkafka reported {answer}")
    finally:
        c.close()
        if new is not None:
            new.flush(10)  # the old instance is fenced (a fatal error): nothing to flush


def txn_stale_metadata(ctx: Context) -> None:
    """The consumer's group metadata is taken, then a second member joins and the first one's
    epoch moves on; offsets sent with the old metadata carry the old member epoch. On a
    partition the first member kept, 4.2 answers ILLEGAL_GENERATION and 4.3 accepts
    (KIP-1251 also relaxes TxnOffsetCommit): an avoidable abort. On a partition it lost,
    every version answers ILLEGAL_GENERATION (a zombie)."""
    s = "txn_stale_metadata"
    topic = ctx.topic(s, "in", 4, messages=400)
    out = ctx.topic(s, "out", 4)
    group, txn_id = ctx.name(s, "g"), ctx.name(s, "txn")
    a = ctx.clients.consumer(group, f"{group}-a")
    a.subscribe([topic])
    b = producer = None
    try:
        wait_for(lambda: len(assigned(a)) == 4, 60, "the first member's assignment", lambda: a.poll(0.1))
        consume_some(a, 4, 20)
        stale = a.consumer_group_metadata()
        producer = ctx.clients.transactional_producer(txn_id, f"{txn_id}-p")
        b = ctx.clients.consumer(group, f"{group}-b")
        b.subscribe([topic])

        def step() -> None:
            a.poll(0.05)
            b.poll(0.05)
        wait_for(lambda: assigned(b) and len(assigned(a)) + len(assigned(b)) == 4, 60, "the reassignment", step)
        t_end = time.monotonic() + 1.5  # heartbeats: the first member's epoch settles past the stale one
        while time.monotonic() < t_end:
            step()
        kept = sorted(assigned(a))[0]
        lost = sorted(assigned(b))[0]
        for case, (t, p), offset, answers, cls, what in (
                ("txn_stale_on_kept", kept, 301, {"strict": ["ILLEGAL_GENERATION"], "kip1251": ["NONE"]}, "avoidable",
                 "kept through the reassignment"),
                ("txn_stale_on_lost", lost, 302, {"any": ["ILLEGAL_GENERATION"]}, "zombie",
                 "now held by the second member")):
            tp = TopicPartition(t, p, offset)
            answer = _transact(producer, out, [tp], stale)
            ctx.count("txn_commits")
            _expect_txn_commit(ctx, s, case, group, txn_id, tp, answers, cls,
                               f"the first member's epoch from before the reassignment, partition {p} {what}; "
                               f"librdkafka reported {answer}")
    finally:
        a.close()
        if b is not None:
            b.close()
        if producer is not None:
            producer.flush(10)

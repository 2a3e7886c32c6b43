"""Scenarios played with hand-built requests (:mod:`.handbuilt`), for answers no client's
state machine reaches on purpose.

- ``kip1251``: OffsetCommit v9 one epoch behind on a partition the member still owns
  (4.2: STALE_MEMBER_EPOCH; 4.3: accepted), and its neighbours: behind on a partition
  added at the newer epoch, ahead of the broker, behind on a partition another member
  (a real librdkafka consumer) now owns.
- ``kip1319``: the same epochs in a TxnOffsetCommit: v6 on brokers that serve it (4.4:
  STALE_MEMBER_EPOCH, GROUP_ID_NOT_FOUND), else v5 (ILLEGAL_GENERATION).
- ``coordinator_routing``: requests a fresh cluster answers with coordinator-routing errors.
"""

from __future__ import annotations

import logging

from confluent_kafka.admin import NewPartitions

from .clients import assigned, wait_for
from .context import HEARTBEAT, OFFSET_COMMIT, TXN_OFFSET_COMMIT, Context
from .handbuilt import CommitAnswer, HandBuiltMember, HandBuiltTransaction, api_versions
from .wire import (Connection, decode_commit_answer, decode_heartbeat, encode_heartbeat, encode_offset_commit,
                   encode_txn_offset_commit, new_member_id, uuid_to_kafka)

__all__ = ["kip1251", "kip1319", "coordinator_routing"]

log = logging.getLogger(__name__)

_HAND_BUILT = "hand-built request (no client sends this epoch on purpose): "


def _owned(m: HandBuiltMember) -> int:
    return sum(len(parts) for parts in m.assignment.values())


def _member_across_two_epochs(ctx: Context, scenario: str) -> tuple[str, str, HandBuiltMember, int, int]:
    """A hand-built member that got partition 0 at epoch e1 and, after the topic grew to two
    partitions, partition 1 at e2 > e1 (partition 0 keeps assignment epoch e1)."""
    topic = ctx.topic(scenario, "in", 1)
    group = ctx.name(scenario, "g")
    m = HandBuiltMember(ctx.bootstrap, group, [topic], f"{group}-hand")
    m.join()
    m.heartbeat_until(lambda s: _owned(s) == 1)
    e1 = m.epoch
    ctx.clients.admin.create_partitions([NewPartitions(topic, 2)])[topic].result(30)
    m.heartbeat_until(lambda s: _owned(s) == 2)
    if m.epoch <= e1:
        raise RuntimeError(f"the member's epoch did not move past {e1} when its topic grew")
    return topic, group, m, e1, m.epoch


def _expect_commit(ctx: Context, scenario: str, case: str, api: int, group: str, a: CommitAnswer,
                   answers: dict[str, list[str]], cls: str | None, note: str, topic: str, partition: int,
                   offset: int) -> None:
    ctx.count("handbuilt_commits")
    ctx.expect(scenario, case, api, group, answers, fencewatch_class=cls, note=_HAND_BUILT + note,
               match={"header": {"clientId": a.client_id, "correlationId": a.correlation_id},
                      "partition": [topic, partition, offset]})


def kip1251(ctx: Context) -> None:
    s = "kip1251"
    topic, group, m, e1, e2 = _member_across_two_epochs(ctx, s)
    stale = {"any": ["STALE_MEMBER_EPOCH"]}
    try:
        a = m.commit(e1, {topic: [(0, 101, -1, "fw:kip1251")]})
        _expect_commit(ctx, s, "behind_on_owned", OFFSET_COMMIT, group, a,
                       {"strict": ["STALE_MEMBER_EPOCH"], "kip1251": ["NONE"]}, "avoidable",
                       f"epoch {e1} < member epoch {e2}, partition 0 assigned at {e1}", topic, 0, 101)
        a = m.commit(e1, {topic: [(1, 102, -1, None)]})
        _expect_commit(ctx, s, "behind_on_newer", OFFSET_COMMIT, group, a, stale, "stale",
                       f"epoch {e1}, partition 1 assigned at {e2}: rejected by both checks", topic, 1, 102)
        a = m.commit(e2, {topic: [(0, 103, -1, None), (1, 103, -1, None)]})
        _expect_commit(ctx, s, "current", OFFSET_COMMIT, group, a, {"any": ["NONE"]}, "accepted",
                       f"the member's own epoch {e2}", topic, 1, 103)
        a = m.commit(e2 + 1, {topic: [(0, 104, -1, None)]})
        _expect_commit(ctx, s, "ahead", OFFSET_COMMIT, group, a, stale, "future_epoch",
                       f"epoch {e2 + 1} ahead of the broker's {e2}", topic, 0, 104)
        _another_member_takes_one(ctx, s, topic, group, m, e2)
    finally:
        left = m.leave()
        m.close()
    ctx.expect(s, "leave", HEARTBEAT, group, {"any": ["NONE"]},
               match={"request": {"memberId": m.member_id, "memberEpoch": -1}},
               note=f"hand-built leave answered {left.error_code}")


def _another_member_takes_one(ctx: Context, s: str, topic: str, group: str, m: HandBuiltMember, e2: int) -> None:
    """A librdkafka consumer joins and gets one partition; the hand-built member revokes it at
    once. Then commits at e2 (now behind): on the partition it lost (another member holds it:
    zombie) and on the one it kept (assignment epoch <= e2: avoidable)."""
    b = ctx.clients.consumer(group, f"{group}-b")
    b.subscribe([topic])
    try:
        def step() -> None:
            b.poll(0.1)
            m.heartbeat()
        wait_for(lambda: len(assigned(b)) == 1 and _owned(m) == 1, 60, "the consumer taking one partition", step)
        for _ in range(3):
            step()
        lost = next(iter(assigned(b)))[1]
        kept = 1 - lost
        a = m.commit(e2, {topic: [(lost, 105, -1, None)]})
        _expect_commit(ctx, s, "behind_on_taken", OFFSET_COMMIT, group, a, {"any": ["STALE_MEMBER_EPOCH"]}, "zombie",
                       f"epoch {e2} < {m.epoch} on partition {lost}, which another member now holds", topic, lost, 105)
        a = m.commit(e2, {topic: [(kept, 106, -1, None)]})
        _expect_commit(ctx, s, "behind_on_kept", OFFSET_COMMIT, group, a,
                       {"strict": ["STALE_MEMBER_EPOCH"], "kip1251": ["NONE"]}, "avoidable",
                       f"epoch {e2} < {m.epoch} on partition {kept}, kept through the reassignment", topic, kept, 106)
    finally:
        b.close()


def kip1319(ctx: Context) -> None:
    s = "kip1319"
    version = 6 if api_versions(ctx.bootstrap).get(TXN_OFFSET_COMMIT, (0, 0))[1] >= 6 else 5
    ctx.count(f"kip1319_txn_offset_commit_v{version}")
    topic, group, m, e1, e2 = _member_across_two_epochs(ctx, s)
    topic_id = next(iter(m.assignment))
    key: str | bytes = topic_id if version >= 6 else topic
    shown = uuid_to_kafka(topic_id) if version >= 6 else topic
    txn = HandBuiltTransaction(ctx.bootstrap, ctx.name(s, "txn"), f"{group}-txn")
    try:
        txn.init()
        a = txn.commit_offsets(group, m.member_id, e1, {key: [(1, 201, -1, None)]}, version)
        _expect_commit(ctx, s, "txn_behind_on_newer", TXN_OFFSET_COMMIT, group, a,
                       {"kip1319": ["STALE_MEMBER_EPOCH"], "kip1251": ["ILLEGAL_GENERATION"],
                        "strict": ["ILLEGAL_GENERATION"]}, "stale",
                       f"TxnOffsetCommit v{version} at epoch {e1}, partition 1 assigned at {e2}", shown, 1, 201)
        a = txn.commit_offsets(group, m.member_id, e1, {key: [(0, 202, -1, None)]}, version)
        _expect_commit(ctx, s, "txn_behind_on_owned", TXN_OFFSET_COMMIT, group, a,
                       {"strict": ["ILLEGAL_GENERATION"], "kip1251": ["NONE"]}, "avoidable",
                       f"TxnOffsetCommit v{version} at epoch {e1} < {e2} on partition 0 assigned at {e1}",
                       shown, 0, 202)
        nogroup = ctx.name(s, "no-such-group")
        a = txn.commit_offsets(nogroup, "", 5, {key: [(0, 203, -1, None)]}, version)
        _expect_commit(ctx, s, "txn_unknown_group", TXN_OFFSET_COMMIT, nogroup, a,
                       {"kip1319": ["GROUP_ID_NOT_FOUND"], "kip1251": ["ILLEGAL_GENERATION"],
                        "strict": ["ILLEGAL_GENERATION"]}, None,
                       f"TxnOffsetCommit v{version} at epoch 5 to a group that does not exist", shown, 0, 203)
        code = txn.end(False)
        log.info("[%s] EndTxn(abort) answered %d", s, code)
    finally:
        txn.close()
        m.leave()
        m.close()


ROUTING_ERRORS = ["NOT_COORDINATOR", "COORDINATOR_NOT_AVAILABLE", "COORDINATOR_LOAD_IN_PROGRESS"]


def coordinator_routing(ctx: Context) -> None:
    """On a fresh cluster, before anything asked for a group coordinator (``__consumer_offsets``
    does not exist yet), a commit, a heartbeat and a transactional commit sent straight to a
    broker are answered with coordinator-routing errors (4.2-4.4: NOT_COORDINATOR for the
    first two, COORDINATOR_NOT_AVAILABLE for the third). Contract §10.1 a: they never reached
    a group, so they give no event. The driver plays this case first; on a cluster that
    already has ``__consumer_offsets`` it is skipped."""
    s = "coordinator_routing"
    if "__consumer_offsets" in ctx.clients.admin.list_topics(timeout=10).topics:
        log.info("[%s] skipped: __consumer_offsets exists (not a fresh cluster)", s)
        ctx.count("coordinator_routing_skipped")
        return
    topic = ctx.topic(s, "in", 1)
    group = ctx.name(s, "g")
    note = _HAND_BUILT + "sent before any group coordinator exists: contract §10.1 a, no event"
    with Connection.to(ctx.bootstrap.split(",")[0], f"{group}-probe") as conn:
        member_id = new_member_id()
        cid, r = conn.request(OFFSET_COMMIT, 9, encode_offset_commit(group, 3, member_id, {topic: [(0, 1, -1, None)]}))
        log.info("[%s] OffsetCommit answered %s", s, decode_commit_answer(r))
        ctx.expect(s, "routing_commit", OFFSET_COMMIT, group, {"any": ROUTING_ERRORS}, note=note,
                   match={"header": {"clientId": conn.client_id, "correlationId": cid}})
        cid, r = conn.request(HEARTBEAT, 1, encode_heartbeat(group, member_id, 0, rebalance_timeout_ms=30_000,
                                                             subscribed_topic_names=[topic], owned={}))
        log.info("[%s] ConsumerGroupHeartbeat answered %s", s, decode_heartbeat(r).error_code)
        ctx.expect(s, "routing_heartbeat", HEARTBEAT, group, {"any": ROUTING_ERRORS}, note=note,
                   match={"header": {"clientId": conn.client_id, "correlationId": cid}})
        cid, r = conn.request(TXN_OFFSET_COMMIT, 5, encode_txn_offset_commit(
            ctx.name(s, "txn"), group, 0, 0, 3, member_id, {topic: [(0, 2, -1, None)]}))
        log.info("[%s] TxnOffsetCommit answered %s", s, decode_commit_answer(r))
        ctx.expect(s, "routing_txn_commit", TXN_OFFSET_COMMIT, group, {"any": ROUTING_ERRORS}, note=note,
                   match={"header": {"clientId": conn.client_id, "correlationId": cid}})

"""What a stream's key decides in its turn (``state.engine``: issue 47 item 4, moved out of the Spark
state function and the router): which topics a commit request's stored offsets go to, with and
without its event built; a bucket of topic watches' step; whether a key's state goes and when it
next runs without input."""
from typing import Any, NamedTuple

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fencewatch.state import group as grp
from fencewatch.state import partition as part
from fencewatch.state.config import RulesConfig
from fencewatch.state.engine import (STORED_ANSWERS, KeyKind, LocalEngine, commit_topics, key_forgotten, key_wakeup,
                                     route, run_topics, stored_topics, timeout_ms, wakeup)
from fencewatch.state.events import CommitOffset, CommitOffsets, OffsetCommit

from .helpers import assignment, commit, left, partition_epochs, tp

SEC = 1000
KEEP = 600 * SEC
CFG = RulesConfig(group_retention_ms=KEEP, alert_cooldown_ms=0)


def request(rows, error_code=None, *, ts=2000, group="g"):
    """A commit request of (topic, partition, offset, leader epoch) rows."""
    offsets = CommitOffsets.of(CommitOffset(t, p, o, e) for t, p, o, e in rows)
    return OffsetCommit(ts=ts, cluster="default", group_id=group, event_id=f"c{ts}", seq=ts, transactional=False,
                        member_id="A", member_epoch=1, offsets=offsets, error_code=error_code)


# --------------------------------------------------------------------------- a stored commit's topics

@pytest.mark.parametrize("code, stored", [(None, True), (0, True), (22, False), (25, False), (113, False)])
def test_the_broker_stored_the_offsets_when_it_answered_0_or_gave_no_answer(code, stored):
    assert (code in STORED_ANSWERS) is stored
    rows = [("a", 0, 10, 1)]
    # the event's topics and the router's (each tests the answer inline) follow the one rule
    assert bool(stored_topics(request(rows, code))) is stored
    assert bool(commit_topics(code, rows)) is stored
    assert (len(list(route(request(rows, code)))) == 2) is stored


def test_a_stored_commit_goes_to_its_topics_with_their_columns_and_a_rejected_one_to_none():
    rows = [("a", 0, 10, 1), ("a", 1, 11, 1), ("b", 0, 20, -1)]
    assert stored_topics(request(rows)) == [("a", (0, 1), (10, 11), (1, 1)), ("b", (0,), (20,), (-1,))]
    assert stored_topics(request(rows, 0)) == stored_topics(request(rows))
    assert stored_topics(request(rows, 113)) == []
    assert stored_topics(request([])) == []
    # what ``route`` sends besides the group's key: the same topics, nothing for a rejected commit
    assert [k.name for k, _ in route(request(rows))][1:] == ["a", "b"]
    assert [k.kind for k, _ in route(request(rows, 113))] == [KeyKind.GROUP]


_rows = st.lists(st.tuples(st.sampled_from("abc"), st.integers(0, 5), st.integers(0, 99), st.integers(-1, 3)),
                 max_size=8)


@settings(max_examples=300, deadline=None)
@given(rows=_rows, code=st.sampled_from([None, 0, 22, 113]))
def test_the_routers_topics_without_the_event_are_the_events_topics(rows, code):
    """The router's fast path (no event built) and ``route`` (the event) agree: topics in order of
    first appearance, a topic's partitions contiguous or not."""
    assert commit_topics(code, rows) == stored_topics(request(rows, code))


def test_commit_topics_cases_the_property_may_miss():
    interleaved = [("a", 0, 1, 0), ("b", 0, 2, 0), ("a", 1, 3, 0)]
    assert commit_topics(None, interleaved) == [("a", (0, 1), (1, 3), (0, 0)), ("b", (0,), (2,), (0,))]
    listed_together = [("a", 0, 1, 0), ("b", 0, 2, 0), ("b", 1, 3, 0)]
    assert commit_topics(0, listed_together) == [("a", (0,), (1,), (0,)), ("b", (0, 1), (2, 3), (0, 0))]
    assert commit_topics(None, iter(listed_together)) == commit_topics(0, listed_together)  # any iterable, once
    assert commit_topics(22, listed_together) == []
    assert commit_topics(None, []) == []


# --------------------------------------------------------------------------- a bucket of topic watches

class Entry(NamedTuple):
    ts: int
    payload: Any


class Stored(NamedTuple):  # the stream's stored commit, as the runtime's hold names it
    topic: str
    group_id: str
    partitions: tuple
    offsets: tuple
    leader_epochs: tuple


class ForTopic(NamedTuple):  # the stream's TopicEvent
    topic: str
    event: Any


def bucket_entries(events):
    """What a topic bucket's key releases for ``events``: a stored commit's columns per topic, any
    other event as ``route`` gives it to each topic's key."""
    entries = []
    for ev in events:
        if type(ev) is OffsetCommit:
            entries += [Entry(ev.ts, Stored(t, ev.group_id, *cols)) for t, *cols in stored_topics(ev)]
            continue
        entries += [Entry(ev.ts, ForTopic(k.name, kev)) for k, kev in route(ev) if k.kind is KeyKind.TOPIC]
    return entries


TRUNCATED = [
    request([("t", 0, 50, 3), ("t", 1, 50, 3), ("u", 0, 9, 1)], ts=1000),
    request([("t", 0, 60, 3)], 113, ts=1500),  # rejected: the watch keeps 50
    partition_epochs("t", 0, ts=2000, log_end=40, cache=[(3, 0), (4, 30)]),  # epoch 3 ended at 30 < 50
    partition_epochs("u", 0, ts=2100, log_start=20, log_end=40, cache=[(1, 0)]),  # 9 is below the log start
]


def test_a_bucket_of_watches_finds_what_the_local_engine_finds():
    out = grp.Outputs()
    watches = run_topics("default", None, bucket_entries(TRUNCATED), CFG, out, commit_type=Stored)
    local = LocalEngine(CFG)
    local.feed_all(TRUNCATED)
    assert [a.kind for a in out.alerts] == ["LOG_TRUNCATION", "OFFSET_OUT_OF_RANGE"]
    truncations = [a for a in local.out.alerts if a.kind in ("LOG_TRUNCATION", "OFFSET_OUT_OF_RANGE")]
    assert [a.alert_id for a in out.alerts] == [a.alert_id for a in truncations]  # the group's own alerts aside
    assert out.alerts[0].details["committed_offset"] == "50"  # not the rejected 60
    assert sorted(watches) == ["t", "u"]
    assert watches["t"].committed == {"g": {0: (50, 3), 1: (50, 3)}}


def test_a_payload_not_of_the_commit_type_is_an_event_for_its_topic():
    """``commit_type`` decides: the same stored commit read as an event for the watch fails."""
    with pytest.raises(AttributeError):
        run_topics("default", None, bucket_entries(TRUNCATED[:1]), CFG, grp.Outputs(), commit_type=ForTopic)


def test_a_watch_nothing_refers_to_goes_at_the_clock_and_not_without_one():
    entries = bucket_entries([request([("t", 0, 5, 0)], ts=1000)])
    kept = run_topics("default", None, entries, CFG, grp.Outputs(), commit_type=Stored)
    assert list(kept) == ["t"]
    early = run_topics("default", None, entries, CFG, grp.Outputs(), 1000 + KEEP - 1, commit_type=Stored)
    assert list(early) == ["t"]
    gone = run_topics("default", None, entries, CFG, grp.Outputs(), 1000 + KEEP, commit_type=Stored)
    assert gone == {}


# --------------------------------------------------------------------------- when a key goes, when it wakes

def test_a_bucket_wakes_at_its_watches_earliest_and_a_group_at_its_own():
    watches = run_topics("default", None, bucket_entries([request([("t", 0, 5, 0)], ts=3000),
                                                          request([("u", 0, 5, 0)], ts=1000)]),
                         CFG, grp.Outputs(), commit_type=Stored)
    assert key_wakeup(KeyKind.TOPIC, watches, CFG) == 1000 + KEEP
    assert key_wakeup(KeyKind.TOPIC, {}, CFG) is None
    assert key_wakeup(KeyKind.TOPIC, watches, RulesConfig(group_retention_ms=0)) is None  # nothing forgets
    g = grp.process(grp.new_group("default", "g"), assignment("A", 1, tp("t", 0), ts=2000), CFG, grp.Outputs())
    assert key_wakeup(KeyKind.GROUP, g, CFG) == wakeup(g, CFG) == grp.next_wakeup(g, CFG) == 2000 + KEEP


def test_a_key_goes_only_once_started_with_nothing_held_and_its_state_gone():
    out = grp.Outputs()
    g = grp.new_group("default", "g")
    for ev in (assignment("A", 1, tp("t", 0), ts=1000), left("A", ts=1500)):
        g = grp.process(g, ev, CFG, out)
    at = grp.drop_at(g, CFG)
    assert at is not None
    assert key_forgotten(KeyKind.GROUP, g, at, CFG, started=True, holding=False)
    assert not key_forgotten(KeyKind.GROUP, g, at - 1, CFG, started=True, holding=False)
    assert not key_forgotten(KeyKind.GROUP, g, at, CFG, started=False, holding=False)
    assert not key_forgotten(KeyKind.GROUP, g, at, CFG, started=True, holding=True)
    assert key_forgotten(KeyKind.TOPIC, {}, 0, CFG, started=True, holding=False)
    assert not key_forgotten(KeyKind.TOPIC, {"t": part.new_topic_watch("default", "t")}, 0, CFG,
                             started=True, holding=False)
    assert not key_forgotten(KeyKind.TOPIC, {}, 0, CFG, started=True, holding=True)


@pytest.mark.parametrize("wake_at, clock, hold_wait, expected", [
    (None, 100, None, None),  # nothing to wait for
    (None, 100, 250, 250),  # held events only
    (None, 100, 0, 1),  # at least 1 ms
    (400, 100, None, 300),  # the state's wake-up, in the key's clock
    (400, 100, 250, 250),  # the earlier of the two
    (300, 100, 250, 200),
    (90, 100, None, 1),  # passed already: at once
])
def test_a_key_runs_again_at_the_earlier_of_its_held_wait_and_its_wakeup(wake_at, clock, hold_wait, expected):
    assert timeout_ms(wake_at, clock, hold_wait) == expected

"""Truncation (contract §5): ``LeaderEpochFileCacheTest`` end offsets and ``SubscriptionStateTest``
truncation detection, and the partition-keyed watch that raises the alerts."""
from hypothesis import given, settings
from hypothesis import strategies as st

from fencewatch.state import folding
from fencewatch.state import group as grp
from fencewatch.state import partition as part
from fencewatch.state.engine import LocalEngine
from fencewatch.state.truncation import (UNDEFINED_EPOCH, UNDEFINED_OFFSET, TruncationFinding, check_committed,
                                         end_offset_for)

from .helpers import commit, partition_epochs, tp

CACHE = ((2, 6), (3, 8), (5, 11))


def test_should_return_log_end_offset_if_latest_epoch_requested():
    """LeaderEpochFileCacheTest.shouldReturnLogEndOffsetIfLatestEpochRequested."""
    assert end_offset_for(CACHE, 5, 20) == (5, 20)


def test_should_return_undefined_offset_if_undefined_epoch_requested():
    """LeaderEpochFileCacheTest.shouldReturnUndefinedOffsetIfUndefinedEpochRequested."""
    assert end_offset_for(CACHE, -1, 20) == (UNDEFINED_EPOCH, UNDEFINED_OFFSET)


def test_should_return_undefined_if_requested_epoch_greater_than_latest():
    """LeaderEpochFileCacheTest.shouldReturnUnsupportedIfRequestedEpochGreaterThanLatestEpoch (undefined)."""
    assert end_offset_for(CACHE, 6, 20) == (UNDEFINED_EPOCH, UNDEFINED_OFFSET)


def test_should_return_first_epoch_start_if_requested_epoch_less_than_first():
    """LeaderEpochFileCacheTest.shouldReturnFirstEpochIfRequestedEpochLessThanFirstEpoch."""
    assert end_offset_for(CACHE, 1, 20) == (1, 6)


def test_should_get_first_offset_of_subsequent_epoch():
    """LeaderEpochFileCacheTest.shouldGetFirstOffsetOfSubsequentEpochWhenOffsetRequestedForPreviousEpoch."""
    assert end_offset_for(CACHE, 2, 20) == (2, 8)


def test_should_return_next_available_epoch_if_no_exact_epoch():
    """LeaderEpochFileCacheTest.shouldReturnNextAvailableEpochIfThereIsNoExactEpochForTheOneRequested."""
    assert end_offset_for(CACHE, 4, 20) == (3, 11)


def test_empty_cache_is_undefined():
    assert end_offset_for((), 3, 20) == (UNDEFINED_EPOCH, UNDEFINED_OFFSET)


def test_truncation_detection():
    """SubscriptionStateTest.testTruncationDetectionWithResetPolicy: position (10, epoch 2) past end 8."""
    f = check_committed(10, 2, 0, 20, CACHE)
    assert (f.kind, f.divergent_offset, f.lost_records) == ("LOG_TRUNCATION", 8, 2)


def test_no_truncation_when_end_offset_beyond_position():
    """SubscriptionStateTest.testNoTruncationDetectionWhenEndOffsetIsGreaterThanPosition analogue."""
    assert check_committed(7, 2, 0, 20, CACHE) is None
    assert check_committed(15, 5, 0, 20, CACHE) is None


def test_unknown_leader_epoch_skips_validation_but_checks_range():
    assert check_committed(10, -1, 0, 20, CACHE) is None
    f = check_committed(3, -1, 5, 20, CACHE)
    assert (f.kind, f.divergent_offset, f.lost_records) == ("OFFSET_OUT_OF_RANGE", 5, 2)


def test_partition_watch_alerts_once_per_divergence_either_order():
    facts = partition_epochs("t", 0, ts=500, log_end=20, cache=CACHE)
    c = commit("A", -1, tp("t", 0), offset=10, leader_epoch=2, ts=400, group="g1")
    for order in ([c, facts], [facts, c]):
        eng = LocalEngine()
        for ev in sorted(order, key=lambda e: e.ts):
            eng.feed(ev)
        eng.feed(partition_epochs("t", 0, ts=600, log_end=21, cache=CACHE))  # same divergence again
        out = eng.finish()
        alerts = [a for a in out.alerts if a.kind == "LOG_TRUNCATION"]
        assert len(alerts) == 1 and alerts[0].group_id == "g1"
        assert alerts[0].details["divergent_offset"] == "8" and alerts[0].details["records"] == "2"


def test_rejected_commit_is_not_a_committed_offset():
    eng = LocalEngine()
    eng.feed(partition_epochs("t", 0, ts=1, log_end=20, cache=CACHE))
    eng.feed(commit("A", 1, tp("t", 0), offset=10, leader_epoch=2, ts=2, group="g1", error_code=113))
    assert not [a for a in eng.finish().alerts if a.kind == "LOG_TRUNCATION"]


def test_partition_state_only_touched_by_its_groups():
    tw = part.new_topic_watch("default", "t")
    out = grp.Outputs()
    part.note_commits(tw, "g1", (1,), (10,), (2,), 1, out)  # a commit to another partition of the topic
    tw = part.apply_partition_epochs(tw, partition_epochs("t", 0, ts=2, log_end=20, cache=CACHE), out)
    assert out.alerts == [] and part.fold(tw).committed == {"g1": {1: (10, 2)}}
    tw = part.apply_partition_epochs(tw, partition_epochs("t", 1, ts=3, log_end=20, cache=CACHE), out)
    assert [a.kind for a in out.alerts] == ["LOG_TRUNCATION"]  # committed 10 at epoch 2, which ended at 8


def test_latest_epoch_is_open_ended():
    """A commit at the latest epoch past the fact's log end offset is newer, not diverged
    (found by the simulator: the log keeps growing after a partition_epochs snapshot)."""
    assert check_committed(25, 5, 0, 20, CACHE) is None
    assert check_committed(25, 6, 0, 20, CACHE) is None  # an epoch newer than the snapshot knows


def test_clean_election_then_growth_raises_nothing():
    eng = LocalEngine()
    eng.feed(partition_epochs("t", 0, ts=1, log_end=100, cache=((0, 0), (1, 60))))
    for i, off in enumerate((120, 150, 400)):
        eng.feed(commit("A", -1, tp("t", 0), offset=off, leader_epoch=1, ts=10 + i, group="g1"))
    assert [a.kind for a in eng.finish().alerts] == []


_requests = st.lists(st.tuples(st.sampled_from(["g1", "g2"]),
                               st.lists(st.integers(0, 5), min_size=1, max_size=4, unique=True).map(tuple),
                               st.integers(0, 1000)), max_size=40)


def _store(requests, limit: int, facts_at: int | None):
    old = folding.UNFOLDED_LIMIT
    folding.UNFOLDED_LIMIT = limit
    try:
        tw = part.new_topic_watch("default", "t")
        out = grp.Outputs()
        for i, (group, partitions, base) in enumerate(requests):
            if i == facts_at:  # partition 0's log becomes known: commits to it are checked from then on
                part.apply_partition_epochs(tw, partition_epochs("t", 0, ts=i, log_end=600, cache=CACHE), out)
            offsets = tuple(base + p for p in partitions)
            part.note_commits(tw, group, partitions, offsets, (2,) * len(partitions), i, out)
            assert len(tw.unfolded) <= limit
        # Partition 1's log arrives last: it sees whatever is stored, folded or not.
        part.apply_partition_epochs(tw, partition_epochs("t", 1, ts=99, log_end=600, cache=CACHE), out)
        return tw, [a.alert_id for a in out.alerts]
    finally:
        folding.UNFOLDED_LIMIT = old


@settings(max_examples=300, deadline=None)
@given(requests=_requests, limit=st.integers(1, 8), facts_at=st.none() | st.integers(0, 40))
def test_unfolded_commits_store_what_eager_storing_does(requests, limit, facts_at):
    """The watch keeps requests unfolded until log facts arrive or the limit is passed: every
    partition ends with the newest offset any request gave it, and log facts see exactly what
    storing each request at once (limit 0) shows them: the same alerts."""
    expected: dict = {}
    for group, partitions, base in requests:
        expected.setdefault(group, {}).update((p, (base + p, 2)) for p in partitions)
    tw, alerts = _store(requests, limit, facts_at)
    assert part.fold(tw).committed == expected and tw.unfolded == []
    assert alerts == _store(requests, 0, facts_at)[1]


# --------------------------------------------------------------------------- edges found by mutation testing
# Each test below failed on a mutant of state/truncation.py that survived the tests above (tests/README.md).

def test_undefined_answer_is_kafkas_minus_one_pair():
    """``UNDEFINED_EPOCH`` and ``UNDEFINED_EPOCH_OFFSET`` are -1 on the wire (OffsetsForLeaderEpoch)."""
    assert end_offset_for(CACHE, -1, 20) == (-1, -1)


def test_epoch_zero_is_an_epoch():
    """Epoch 0 is the first leader's: its end is the start of epoch 1, not undefined."""
    assert end_offset_for(((0, 0), (1, 10)), 0, 20) == (0, 10)
    assert check_committed(15, 0, 0, 20, ((0, 0), (1, 10))) == \
        TruncationFinding("LOG_TRUNCATION", 15, 0, 10, 5)


def test_an_end_offset_of_one_is_an_offset():
    """An end offset that happens to be 1 is still compared (not taken for 'undefined')."""
    assert check_committed(3, 0, 0, 20, ((0, 0), (1, 1), (2, 5))) == \
        TruncationFinding("LOG_TRUNCATION", 3, 0, 1, 2)


def test_middle_epoch_of_three_is_checked_against_the_latest():
    """Only the latest epoch is open ended: a middle one ends where the next starts."""
    assert check_committed(25, 1, 0, 30, ((0, 0), (1, 10), (2, 20))) == \
        TruncationFinding("LOG_TRUNCATION", 25, 1, 20, 5)


def test_committed_exactly_at_the_end_offset_lost_nothing():
    assert check_committed(10, 0, 0, 20, ((0, 0), (1, 10))) is None


def test_committed_exactly_at_the_log_start_is_in_range():
    assert check_committed(5, 1, 5, 20, ((0, 0), (1, 10))) is None

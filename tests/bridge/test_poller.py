"""Leader epoch boundaries by bisection (pure), on synthetic logs with gaps."""

from __future__ import annotations

import bisect

import pytest

from fencewatch.streaming.sources.partition_facts import build_epochs, epoch_starts


class Log:
    """A log as (offset -> epoch) of the records that exist (compaction leaves gaps)."""

    def __init__(self, records: dict[int, int]):
        self.offsets = sorted(records)
        self.records = records
        self.reads = 0

    def epoch_at(self, offset: int):
        self.reads += 1
        i = bisect.bisect_left(self.offsets, offset)
        if i == len(self.offsets):
            return None
        o = self.offsets[i]
        return o, self.records[o]


def make_log(segments, gaps=()):
    """segments: [(epoch, start, end_exclusive)]"""
    recs = {o: e for e, s, t in segments for o in range(s, t) if o not in set(gaps)}
    return Log(recs)


def test_epoch_starts_finds_every_boundary():
    log = make_log([(0, 0, 1000), (3, 1000, 1200), (4, 1200, 5000), (7, 5000, 5001)])
    assert epoch_starts(log.epoch_at, 0, 0, 5000, 7, budget=200) == [(3, 1000), (4, 1200), (7, 5000)]
    assert log.reads < 60


def test_epoch_starts_with_compaction_gaps_at_the_boundary():
    log = make_log([(1, 0, 100), (2, 100, 300)], gaps=range(90, 130))
    # the first surviving record of epoch 2 is 130
    assert epoch_starts(log.epoch_at, 0, 1, 299, 2, budget=100) == [(2, 130)]


def test_epoch_starts_gives_up_past_its_budget():
    log = make_log([(0, 0, 10**6), (1, 10**6, 2 * 10**6)])
    assert epoch_starts(log.epoch_at, 0, 0, 2 * 10**6 - 1, 1, budget=5) is None


def test_build_epochs_single_epoch_needs_no_probe():
    assert build_epochs(100, 5, 900, 5, None, 64) == [{"epoch": 5, "start_offset": 100}]


def test_build_epochs_empty_log():
    assert build_epochs(40, 2, 40, 3, None, 64) == [{"epoch": 3, "start_offset": 40}]


def test_build_epochs_unknown_without_probe_or_epoch():
    assert build_epochs(0, 1, 10, 2, None, 64) is None
    assert build_epochs(0, None, 10, None, None, 64) is None


@pytest.mark.parametrize("latest_has_records", [True, False])
def test_build_epochs_with_probe(latest_has_records):
    segments = [(2, 50, 400), (5, 400, 700)]
    end_epoch = 5 if latest_has_records else 6  # a new leader with no appends yet starts at the log end
    log = make_log(segments)
    epochs = build_epochs(50, 2, 700, end_epoch, log.epoch_at, 64)
    expected = [{"epoch": 2, "start_offset": 50}, {"epoch": 5, "start_offset": 400}]
    if not latest_has_records:
        expected.append({"epoch": 6, "start_offset": 700})
    assert epochs == expected


def test_build_epochs_skips_a_trailing_transaction_marker():
    log = make_log([(1, 0, 10), (2, 10, 20)], gaps=[19])  # offset 19 is a marker: consumers never see it
    assert build_epochs(0, 1, 20, 2, log.epoch_at, 64) == [{"epoch": 1, "start_offset": 0},
                                                           {"epoch": 2, "start_offset": 10}]

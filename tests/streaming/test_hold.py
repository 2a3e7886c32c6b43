"""``streaming.hold.Hold``: cross-topic ordering and the event-time clock, without Spark."""
import pickle
import random

from fencewatch.streaming.hold import Hold

SKEW = 2_000


def admit(hold, now, *events):
    """events: (ts, seq, source); the payload is the (ts, seq) pair, to check order."""
    hold.admit(((ts, seq, src, (ts, seq)) for ts, seq, src in events), now)


def payloads(ready):
    return [p for _, _, p, _ in ready]


def test_group_waits_for_the_topic_that_is_behind():
    h = Hold()
    admit(h, 1_000, (100, 1, "heartbeats"), (300, 2, "heartbeats"), (200, 3, "offsets"))
    # offsets read up to 200: heartbeats at 300 may still be preceded by an offsets event.
    assert payloads(h.release(1_000, SKEW, all_sources=True)) == [(100, 1), (200, 3)]
    assert payloads(h.pending) == [(300, 2)]
    admit(h, 1_100, (250, 5, "offsets"), (310, 6, "offsets"))
    # The late offsets event at 250 goes before the held heartbeat at 300; now heartbeats are behind.
    assert payloads(h.release(1_100, SKEW, all_sources=True)) == [(250, 5), (300, 2)]
    assert payloads(h.pending) == [(310, 6)]


def test_topic_key_reads_one_source_and_never_waits():
    h = Hold()
    admit(h, 0, (300, 2, "offsets"), (100, 1, "offsets"))
    assert payloads(h.release(0, SKEW, all_sources=False)) == [(100, 1), (300, 2)]


def test_a_quiet_source_holds_events_for_max_skew_only():
    h = Hold()
    admit(h, 10_000, (500, 1, "heartbeats"), (900, 2, "heartbeats"), (400, 0, "offsets"))
    assert payloads(h.release(10_000, SKEW, all_sources=True)) == [(400, 0)]
    assert h.wait_ms(10_500, SKEW) == 1_500
    assert h.release(11_999, SKEW, all_sources=True) == []
    assert payloads(h.release(12_000, SKEW, all_sources=True)) == [(500, 1), (900, 2)]
    assert h.wait_ms(12_000, SKEW) is None


def test_equal_ts_keep_input_order_by_seq():
    h = Hold()
    admit(h, 0, (100, 9, "offsets"), (100, 4, "heartbeats"), (100, 6, "offsets"))
    assert payloads(h.release(0, SKEW, all_sources=True)) == [(100, 4), (100, 6), (100, 9)]


def test_release_order_is_ts_seq_order_however_the_batches_split():
    rng = random.Random(3)
    hb = [(t, 4 * i, "heartbeats") for i, t in enumerate(sorted(rng.sample(range(10_000), 300)))]
    off = [(t, 4 * i + 1, "offsets") for i, t in enumerate(sorted(rng.sample(range(10_000), 300)))]
    h, out, now = Hold(), [], 0
    i = j = 0
    while i < len(hb) or j < len(off):  # one topic read ahead of the other, in uneven slices
        a, b = rng.randint(0, 40), rng.randint(0, 10)
        admit(h, now, *hb[i:i + a], *off[j:j + b])
        i, j = i + a, j + b
        out += payloads(h.release(now, SKEW, all_sources=True))
        now += 10  # never reaches the skew limit
    out += payloads(h.release(now + SKEW, SKEW, all_sources=True))
    assert out == sorted((t, s) for t, s, _ in hb + off)


def test_clock_follows_wall_time_but_never_passes_a_held_event():
    h = Hold()
    admit(h, 5_000, (1_000, 1, "heartbeats"))
    h.release(5_000, SKEW, all_sources=False)
    assert h.clock(5_000) == 1_000
    assert h.clock(8_000) == 4_000  # idle group: the clock moves with the wall
    admit(h, 8_000, (1_500, 2, "heartbeats"), (1_400, 3, "offsets"))
    h.release(8_000, SKEW, all_sources=True)
    assert [p for _, _, p, _ in h.pending] == [(1_500, 2)]
    assert h.clock(8_000) == 1_499  # not past the held heartbeat
    assert h.last_ts == 1_500 and h.last_wall == 8_000


def test_old_event_does_not_move_the_clock_back():
    h = Hold()
    admit(h, 1_000, (900, 1, "offsets"))
    admit(h, 2_000, (800, 2, "offsets"))
    assert (h.last_ts, h.last_wall) == (900, 1_000)


def test_hold_pickles_with_its_pending_events():
    h = Hold()
    admit(h, 0, (10, 1, "heartbeats"), (20, 2, "offsets"), (30, 3, "heartbeats"))
    h.release(0, SKEW, all_sources=True)
    back = pickle.loads(pickle.dumps(h))
    assert back == h and payloads(back.pending) == [(30, 3)]


def test_a_caught_up_batch_releases_at_once_in_order():
    """Both topics read to their ends when the batch was planned: nothing older can come, so a
    quiet topic (no commits lately) does not hold heartbeats for max_skew."""
    h = Hold()
    admit(h, 10_000, (900, 2, "heartbeats"), (500, 1, "heartbeats"), (400, 0, "offsets"))
    assert payloads(h.release(10_000, SKEW, all_sources=True, caught_up=True)) == [(400, 0), (500, 1), (900, 2)]
    assert h.pending == []
    assert h.clock(10_500) == 1_400  # nothing held: the clock follows the wall


def test_events_held_by_a_lagging_batch_go_with_the_next_caught_up_one():
    h = Hold()
    admit(h, 1_000, (300, 2, "heartbeats"), (100, 1, "offsets"))
    assert payloads(h.release(1_000, SKEW, all_sources=True)) == [(100, 1)]  # offsets lag: 300 waits
    admit(h, 1_500, (250, 3, "offsets"))
    assert payloads(h.release(1_500, SKEW, all_sources=True, caught_up=True)) == [(250, 3), (300, 2)]

"""``streaming.runtime.hold.Hold``: cross-topic ordering and the event-time clock, without Spark."""
import random

from hypothesis import example, given, settings
from hypothesis import strategies as st

from fencewatch.streaming.runtime.hold import Hold

SKEW = 2_000


def admit(hold, now, *events):
    """events: (ts, seq, source); the payload is the (ts, seq) pair, to check order."""
    hold.admit(((ts, seq, src, (ts, seq)) for ts, seq, src in events), now)


def payloads(ready):
    return [held.payload for held in ready]


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
    # A heartbeat at ts 100 with a seq between 4 and 9 may still come: only (100, 4) is certain.
    assert payloads(h.release(0, SKEW, all_sources=True)) == [(100, 4)]
    admit(h, 0, (100, 8, "heartbeats"), (101, 12, "heartbeats"))
    assert payloads(h.release(0, SKEW, all_sources=True)) == [(100, 6), (100, 8), (100, 9)]


def test_a_source_that_delivered_nothing_yet_may_still_deliver_older_events():
    h = Hold()
    admit(h, 0, (500, 1, "heartbeats"))
    assert h.release(0, SKEW, all_sources=True, expected=("heartbeats", "offsets")) == []
    admit(h, 0, (400, 2, "offsets"), (600, 6, "offsets"))
    assert payloads(h.release(0, SKEW, all_sources=True, expected=("heartbeats", "offsets"))) == [(400, 2), (500, 1)]


BACKLOG_NOW = 10**12  # wall time far past the events' ts: read from a backlog


def test_backlog_events_wait_for_the_topic_behind_while_the_key_reads_on():
    """A restart reads heartbeats minutes of event time ahead: they wait for the offsets however many
    triggers that takes, as long as the key keeps reading (no wall-time release while it does)."""
    h, now = Hold(), BACKLOG_NOW
    admit(h, now, (100, 1, "offsets"), (9_000, 2, "heartbeats"))
    out = payloads(h.release(now, SKEW, all_sources=True))
    for ts in range(200, 9_000, 400):
        now += 1_000
        admit(h, now, (ts, ts * 4 + 1, "offsets"))
        out += payloads(h.release(now, SKEW, all_sources=True))
    assert (9_000, 2) not in out and out == sorted(out)
    # Nothing read for max_skew and two calls in a row (state timeouts): the backlog has passed them.
    assert h.wait_ms(now, SKEW) == SKEW
    assert h.release(now + SKEW, SKEW, all_sources=True) == []
    assert h.wait_ms(now + SKEW, SKEW) == 1
    assert payloads(h.release(now + SKEW + 1, SKEW, all_sources=True)) == [(9_000, 2)]


def test_a_slow_micro_batch_alone_does_not_end_a_backlog_hold():
    """An executor lost and its tasks rerun: one call comes minutes later, with input."""
    h, now = Hold(), BACKLOG_NOW
    admit(h, now, (9_000, 2, "heartbeats"), (100, 1, "offsets"))
    h.release(now, SKEW, all_sources=True)
    admit(h, now + 300_000, (200, 9, "offsets"))
    assert payloads(h.release(now + 300_000, SKEW, all_sources=True)) == [(200, 9)]
    assert payloads(h.pending) == [(9_000, 2)]


def test_backlog_hold_is_bounded():
    from fencewatch.streaming.runtime.hold import MAX_HOLD_BATCHES, MAX_HOLD_MS

    h, now = Hold(), BACKLOG_NOW
    admit(h, now, (9_000, 2, "heartbeats"), (100, 1, "offsets"))
    h.release(now, SKEW, all_sources=True)
    step = MAX_HOLD_MS // MAX_HOLD_BATCHES
    for i in range(1, MAX_HOLD_BATCHES):
        admit(h, now + i * step, (100 + i, 10 + i * 4, "offsets"))
        h.release(now + i * step, SKEW, all_sources=True)
    assert payloads(h.pending) == [(9_000, 2)]
    assert len(h.input_walls) == MAX_HOLD_BATCHES  # only the calls since the held event arrived
    admit(h, now + MAX_HOLD_MS, (200, 900, "offsets"))
    assert payloads(h.release(now + MAX_HOLD_MS, SKEW, all_sources=True)) == [(200, 900), (9_000, 2)]
    assert h.input_walls == []


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
    assert payloads(h.pending) == [(1_500, 2)]
    assert h.clock(8_000) == 1_499  # not past the held heartbeat
    assert h.last_ts == 1_500 and h.last_wall == 8_000


def test_old_event_does_not_move_the_clock_back():
    h = Hold()
    admit(h, 1_000, (900, 1, "offsets"))
    admit(h, 2_000, (800, 2, "offsets"))
    assert (h.last_ts, h.last_wall) == (900, 1_000)


def test_hold_is_stored_with_its_pending_events():
    from fencewatch.streaming.runtime.state_codec import decode_hold, encode_hold

    from fencewatch.streaming.runtime.hold import Record, StoredCommit

    h = Hold()
    h.admit([(10, 1, "heartbeats", Record(b"{}", "h/0/1")), (20, 2, "offsets", Record(b"{}", "o/0/2")),
             (30, 3, "heartbeats", Record(b'{"n":3}', "h/0/3")),
             (30, 4, "heartbeats", StoredCommit("orders", "g1", (0, 1), (40, 41), (2, -1)))], 0)
    h.release(0, SKEW, all_sources=True)
    back = decode_hold(encode_hold(h))
    assert back == h and payloads(back.pending) == [Record(b'{"n":3}', "h/0/3"),
                                                    StoredCommit("orders", "g1", (0, 1), (40, 41), (2, -1))]


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


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 50), st.integers(0, 50), st.integers(0, 120_000)), max_size=30),
       st.dictionaries(st.sampled_from(["heartbeats", "offsets"]), st.tuples(st.integers(0, 50), st.integers(0, 50))),
       st.integers(0, 150_000), st.integers(0, 4), st.integers(0, 150_000),
       st.one_of(st.lists(st.integers(0, 150_000), max_size=5),  # the hold's bound needs 100 calls with input
                 st.lists(st.integers(40_000, 150_000), min_size=100, max_size=110)))
@example([(10, 5, 35_000)], {}, 150_000, 0, 150_000, [50_000] * 100)  # a backlog event past the hold's bound
@example([(10, 5, 149_000), (20, 1, 0)], {"offsets": (30, 0)}, 150_000, 0, 150_000, [])  # live, and past max_skew
def test_release_takes_the_longest_prefix_that_may_go(pending, seen, last_input, idle_calls, now, walls):
    """The rule as the class states it, applied event by event in (ts, seq) order: an event goes
    if every source has passed it, the key is quiet, it waited past the hold's bounds, or it was
    read live and waited ``max_skew``; the first that may not stops the release."""
    from fencewatch.streaming.runtime.hold import LIVE_LAG_MS, MAX_HOLD_BATCHES, MAX_HOLD_MS, QUIET_CALLS, Held

    entries = [Held(ts, seq, (ts, seq, arrived), arrived) for ts, seq, arrived in pending]
    h = Hold(pending=list(entries), seen=dict(seen), last_input=last_input, idle_calls=idle_calls,
             input_walls=sorted(walls))
    expected_sources = ("heartbeats", "offsets")
    pairs = list(seen.values())
    safe = min(pairs) if pairs and all(s in seen for s in expected_sources) else (float("-inf"), -1)
    idle = 0 if last_input == now else idle_calls + 1
    quiet = last_input <= now - SKEW and idle >= QUIET_CALLS
    ws = sorted(walls)
    forced = min(now - MAX_HOLD_MS, ws[-MAX_HOLD_BATCHES] - 1 if len(ws) >= MAX_HOLD_BATCHES else -1)
    ordered = sorted(entries, key=lambda e: (e.ts, e.seq))
    n = 0
    for ts, seq, arrived in ((e.ts, e.seq, e.arrived) for e in ordered):
        if not ((ts, seq) <= safe or quiet or arrived <= forced
                or (arrived <= now - SKEW and arrived - ts <= LIVE_LAG_MS)):
            break
        n += 1
    ready = h.release(now, SKEW, all_sources=True, expected=expected_sources)
    assert payloads(ready) == payloads(ordered[:n])
    assert sorted(payloads(h.pending)) == sorted(payloads(ordered[n:]))

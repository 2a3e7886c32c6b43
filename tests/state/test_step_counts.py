"""What a group's step counts for the metrics (``state.status``: issue 47 item 4, moved out of the
state function and the writer): its heartbeats answered with an error, counted as the step went
(not as the group's counters' growth: a group forgotten mid-step starts from zero), its events by (type, source) as text keys and back, and the status a step ships
taken apart again by the writer."""
from collections import Counter

from fencewatch.state import group as grp
from fencewatch.state.config import RulesConfig
from fencewatch.state.events import Heartbeat
from fencewatch.state.model import KafkaError
from fencewatch.state.status import (HEARTBEAT_ERRORS, event_counts, heartbeat_errors, read_event_counts, status,
                                     step_counts, step_status)

from .helpers import assignment, group_state, tp

CFG = RulesConfig()


def heartbeat(error: KafkaError | int, *, ts: int, member="A"):
    code = error if isinstance(error, int) else error.code
    return Heartbeat(ts, "default", "g", f"hb{ts}", ts, member, 1, 1, code)


def stepped(*events, g=None, cfg=CFG):
    """The group after a step of ``events``, with the step's outputs."""
    g = grp.new_group("default", "g") if g is None else g
    out = grp.Outputs()
    for ev in events:
        g = grp.process(g, ev, cfg, out)
    return g, out


def test_a_step_counts_the_heartbeat_errors_it_saw_not_the_groups_totals():
    g, first = stepped(assignment("A", 1, tp("t", 0), ts=1000), heartbeat(KafkaError.FENCED_MEMBER_EPOCH, ts=1100))
    assert heartbeat_errors(first.heartbeat_errors) == {"FENCED_MEMBER_EPOCH": 1, "UNKNOWN_MEMBER_ID": 0}
    g, out = stepped(heartbeat(KafkaError.FENCED_MEMBER_EPOCH, ts=1200), heartbeat(KafkaError.FENCED_MEMBER_EPOCH, ts=1300),
                     heartbeat(KafkaError.UNKNOWN_MEMBER_ID, ts=1400), heartbeat(0, ts=1500), g=g)
    assert heartbeat_errors(out.heartbeat_errors) == {"FENCED_MEMBER_EPOCH": 2, "UNKNOWN_MEMBER_ID": 1}
    assert (g.counters.heartbeat_fenced, g.counters.heartbeat_unknown_member) == (3, 1)  # the totals
    assert tuple(heartbeat_errors(out.heartbeat_errors)) == HEARTBEAT_ERRORS  # the names, in the list's order
    _, quiet = stepped(heartbeat(0, ts=1600), g=g)
    assert heartbeat_errors(quiet.heartbeat_errors) == {"FENCED_MEMBER_EPOCH": 0, "UNKNOWN_MEMBER_ID": 0}


def test_other_heartbeat_errors_are_not_counted():
    _, out = stepped(assignment("A", 1, tp("t", 0), ts=1000),
                     heartbeat(KafkaError.STALE_MEMBER_EPOCH, ts=1100), heartbeat(0, ts=1200))
    assert heartbeat_errors(out.heartbeat_errors) == {"FENCED_MEMBER_EPOCH": 0, "UNKNOWN_MEMBER_ID": 0}


def test_a_group_forgotten_within_the_step_counts_every_error_never_a_negative_one():
    """A group the coordinator deleted (``Dead``) is forgotten before its next event, which meets
    it as a new group with its counters at zero: the step's errors are the three it saw, where
    the counters' growth since the step began was -3 (broker_errors_total would have gone down)."""
    g, _ = stepped(assignment("A", 1, tp("t", 0), ts=1000),
                   *(heartbeat(KafkaError.FENCED_MEMBER_EPOCH, ts=1100 + i) for i in range(3)))
    assert g.counters.heartbeat_fenced == 3
    dead = group_state("Dead", ts=2000, protocol="consumer")
    g, out = stepped(heartbeat(KafkaError.FENCED_MEMBER_EPOCH, ts=1500), dead,
                     assignment("B", 1, tp("t", 0), ts=3000), g=g)
    assert g.counters.heartbeat_fenced == 0  # a new group: its counters start again
    assert heartbeat_errors(out.heartbeat_errors) == {"FENCED_MEMBER_EPOCH": 1, "UNKNOWN_MEMBER_ID": 0}


def test_event_counts_are_text_keys_in_order_and_read_back_as_they_were():
    counts = Counter({("offset_commit", "offsets"): 3, ("heartbeat", "heartbeats"): 2, ("unknown", "other"): 1})
    text = event_counts(counts)
    assert text == {"heartbeat/heartbeats": 2, "offset_commit/offsets": 3, "unknown/other": 1}
    assert list(text) == sorted(text)
    assert list(read_event_counts(text)) == [("heartbeat", "heartbeats", 2), ("offset_commit", "offsets", 3),
                                             ("unknown", "other", 1)]
    assert event_counts(Counter()) == {}
    # split at the first "/" only: a source is never cut
    assert list(read_event_counts({"heartbeat/a/b": 1})) == [("heartbeat", "a/b", 1)]


def test_a_step_status_is_the_status_with_the_steps_counts_and_the_writer_takes_them_out():
    g, _ = stepped(assignment("A", 1, tp("t", 0), ts=1000))
    g, out = stepped(heartbeat(KafkaError.UNKNOWN_MEMBER_ID, ts=1100), g=g)
    shipped = step_status(g, CFG, Counter({("heartbeat", "heartbeats"): 1}), out.heartbeat_errors)
    assert shipped["events"] == {"heartbeat/heartbeats": 1}
    assert shipped["heartbeat_errors"] == {"FENCED_MEMBER_EPOCH": 0, "UNKNOWN_MEMBER_ID": 1}
    events, errors = step_counts(shipped)
    assert events == {"heartbeat/heartbeats": 1}
    assert errors == {"UNKNOWN_MEMBER_ID": 1}  # an error that did not grow makes no increment
    assert shipped == status(g, CFG)  # what is left: the group's status alone
    assert step_status(g, CFG, Counter(), out.heartbeat_errors, forgotten=True)["state"] == "Dead"


def test_step_counts_of_a_bare_status_default_the_rebalance_count_and_count_nothing():
    bare = {"cluster": "default", "group_id": "g"}
    assert step_counts(bare) == ({}, {})
    assert bare == {"cluster": "default", "group_id": "g", "rebalances_total": 0}
    kept = {"cluster": "default", "group_id": "g", "rebalances_total": 7, "heartbeat_errors": {"X": -1}}
    assert step_counts(kept) == ({}, {"X": -1})  # a change either way is passed on as it is
    assert kept["rebalances_total"] == 7

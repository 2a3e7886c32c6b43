"""The fast paths of the decoder are optimisations, never a second opinion.

``decoding._typed_event`` decodes the common, well-formed commit and assignment lines with msgspec;
``_fast_commit`` / ``_offsets`` read it from a parsed object with C-level maps; the
general builders check field by field. For any input, both must
give the same event, or the fast path must step aside (None) so the general path
reports the error. Hypothesis draws well-formed commits and then breaks them in the
ways producers do (wrong types, nulls, extra fields, floats, booleans, metadata).
"""
import json

from hypothesis import example, given, settings, strategies as st

from fencewatch.state.events import CommitOffset, CommitOffsets, MemberAssignment, OffsetCommit
from fencewatch.streaming.ingest import commit_offsets, fast_paths
from fencewatch.streaming.ingest import events as dec
from fencewatch.streaming.ingest.builders import build_event
from fencewatch.streaming.ingest.fields import Bad

ODD_VALUES = st.one_of(st.none(), st.booleans(), st.floats(allow_nan=False, allow_infinity=False),
                       st.text(max_size=3), st.lists(st.integers(), max_size=1), st.integers(-2**70, 2**70))


@st.composite
def offsets(draw):
    items = []
    for _ in range(draw(st.integers(0, 5))):
        o = {"topic": draw(st.sampled_from(["a", "b", "é"])), "partition": draw(st.integers(0, 9)),
             "offset": draw(st.integers(-1, 10**12)), "leader_epoch": draw(st.integers(-1, 50))}
        if draw(st.booleans()) and draw(st.booleans()):
            field = draw(st.sampled_from(["topic", "partition", "offset", "leader_epoch", "metadata", "extra"]))
            if draw(st.booleans()) and field in o:
                del o[field]
            else:
                o[field] = draw(ODD_VALUES)
        items.append(o)
    return items


@st.composite
def commits(draw):
    d = {"type": draw(st.sampled_from(["offset_commit", "txn_offset_commit"])), "ts": draw(st.integers(0, 10**13)),
         "group_id": "g", "member_id": draw(st.sampled_from(["m1", ""])), "member_epoch": draw(st.integers(-1, 9)),
         "offsets": draw(offsets())}
    for name, value in (("cluster", "c1"), ("event_id", "e1"), ("error_code", 113), ("instance_id", "i1"),
                        ("transactional_id", "tx-1"), ("producer_id", 4001), ("producer_epoch", 3),
                        ("api_version", 6)):
        if draw(st.booleans()):
            d[name] = value
    if draw(st.booleans()):
        field = draw(st.sampled_from(["ts", "cluster", "event_id", "group_id", "member_id", "member_epoch",
                                      "error_code", "offsets", "transactional_id", "instance_id", "producer_id",
                                      "producer_epoch", "api_version"]))
        d[field] = draw(ODD_VALUES)
    # Through JSON text, as the decoder sees it.
    return dec._loads(json.dumps(d))


def general(d, default_event_id="7"):
    """The field-by-field path alone (sequence number 7): the reference the fast path must match."""
    try:
        return build_event(d, d["type"], 7, default_event_id)
    except Bad as bad:
        return ("error", bad.code)


@settings(max_examples=600, deadline=None)
@given(commits())
def test_fast_commit_equals_general_path_or_steps_aside(d):
    try:
        fast = fast_paths.fast_commit(d, 7, "7", d["type"] == "txn_offset_commit")
    except Bad as bad:
        fast = ("error", bad.code)
    ref = general(d)
    if fast is not None:
        assert fast == ref


@settings(max_examples=600, deadline=None)
@given(commits(), st.sampled_from([None, "given"]))
@example({"type": "offset_commit", "ts": 1, "group_id": "g", "offsets": [
    {"topic": "a", "partition": 0, "offset": 2**63, "leader_epoch": 0}]}, None)  # beyond a Kafka long
@example({"type": "offset_commit", "ts": 1, "group_id": "g", "offsets": [], "cluster": None}, "given")
@example({"type": "offset_commit", "ts": 1, "group_id": "g", "offsets": [  # every optional field left out
    {"topic": "a", "partition": 0, "offset": 2, "leader_epoch": 0}]}, None)
@example({"type": "txn_offset_commit", "ts": 1, "group_id": "g", "offsets": [
    {"topic": "a", "partition": True, "offset": 0, "leader_epoch": 0}]}, None)
def test_typed_commit_line_equals_general_path_or_steps_aside(d, default_event_id):
    line = json.dumps(d).encode()
    fast = fast_paths.typed_event(line, 7, default_event_id)
    ref = general(d, default_event_id or "7")  # without a default, the id is the sequence number
    if fast is not None:
        assert fast == ref
        if d["offsets"]:  # the single-topic columns the engine reads, too
            assert (fast.offsets.topic, fast.offsets.partitions) == (ref.offsets.topic, ref.offsets.partitions)
    # The whole line, through the decoder's entry point: the general path when the typed one steps aside.
    whole = dec.decode_json_line(line, seq=7, default_event_id="7", coords="line 8")
    assert (whole if isinstance(whole, OffsetCommit) else ("error", whole.code)) == general(d)


@settings(max_examples=600, deadline=None)
@given(offsets())
@example([{"topic": 5, "partition": 0, "offset": 1, "leader_epoch": 0}])  # one topic, of the wrong type
@example([{"topic": "a", "partition": 0, "offset": 1, "leader_epoch": 0}, {"topic": "b", "partition": 0,
                                                                         "offset": 1, "leader_epoch": 0}])
def test_offset_columns_equal_checked_rows(items):
    d = {"offsets": items}
    try:
        ref = CommitOffsets.of(commit_offsets.offsets_checked(d))
    except Bad as bad:
        ref = ("error", bad.code, bad.params.get("field"))
    try:
        got = commit_offsets.offsets(d)
    except Bad as bad:
        got = ("error", bad.code, bad.params.get("field"))
    assert got == ref
    if isinstance(got, CommitOffsets):  # the single-topic columns the engine reads, too
        assert (got.topic, got.partitions) == (ref.topic, ref.partitions)


def test_columns_iterate_as_rows():
    rows = [CommitOffset("a", 1, 10, 2), CommitOffset("b", 0, 5, -1, "m")]
    cols = CommitOffsets.of(rows)
    assert cols.rows() == rows and len(cols.tps) == 2
    assert cols.tps == (("a", 1), ("b", 0)) and cols.metadata == (None, "m")
    assert CommitOffsets.of(rows[:1]).metadata is None
    assert (cols.topic, cols.partitions) == (None, (1, 0))
    assert (CommitOffsets.of(rows[:1]).topic, CommitOffsets.of(rows[:1]).partitions) == ("a", (1,))


def test_integer_beyond_a_long_is_rejected_not_rounded():
    ev = dec.decode_json_line(b'{"type":"offset_commit","ts":1,"group_id":"g","offsets":[{"topic":"t",'
                              b'"partition":0,"offset":123456789012345678901234567890}]}',
                              seq=0, default_event_id="0", coords="line 1")
    assert isinstance(ev, dec.DecodeError) and ev.code == "WRONG_TYPE" and "offsets[0].offset" in ev.reason


@st.composite
def partition_lists(draw):
    items = []
    for _ in range(draw(st.integers(0, 3))):
        parts = draw(st.lists(st.integers(0, 9), max_size=4))
        e = {"topic": draw(st.sampled_from(["a", "b", "é"])), "partitions": parts}
        if draw(st.booleans()):
            e["assignment_epochs"] = draw(st.lists(st.integers(0, 9), min_size=len(parts), max_size=len(parts)))
        if draw(st.booleans()) and draw(st.booleans()):
            field = draw(st.sampled_from(["topic", "partitions", "assignment_epochs", "extra"]))
            if draw(st.booleans()) and field in e:
                del e[field]
            else:
                e[field] = draw(st.one_of(ODD_VALUES, st.lists(st.integers(0, 9), max_size=5)))
        items.append(e)
    return items


@st.composite
def assignments(draw):
    d = {"type": "member_assignment", "ts": draw(st.integers(0, 10**13)), "group_id": "g",
         "member_id": draw(st.sampled_from(["m1", ""])), "member_epoch": draw(st.integers(-2, 9)),
         "assigned": draw(partition_lists())}
    for name, value in (("cluster", "c1"), ("event_id", "e1"), ("protocol", draw(st.sampled_from(
            ["consumer", "streams", "classic", "share"]))), ("state", draw(st.sampled_from(
            ["STABLE", "UNREVOKED_PARTITIONS", "unreleased_partitions", "NEW"]))),
            ("pending_revocation", draw(partition_lists())), ("subscribed_topics", ["a", "b"]),
            ("previous_member_epoch", 3), ("instance_id", "i1"), ("group_epoch", 5),
            ("target_assignment_epoch", 4)):
        if draw(st.booleans()):
            d[name] = value
    if draw(st.booleans()):
        field = draw(st.sampled_from(["ts", "cluster", "event_id", "group_id", "member_id", "member_epoch",
                                      "assigned", "pending_revocation", "protocol", "state", "subscribed_topics",
                                      "previous_member_epoch", "instance_id", "group_epoch",
                                      "target_assignment_epoch", "extra"]))
        d[field] = draw(ODD_VALUES)
    return d


@settings(max_examples=800, deadline=None)
@given(assignments(), st.sampled_from([None, "given"]))
@example({"type": "member_assignment", "ts": 1, "group_id": "g", "member_id": "m", "member_epoch": 2,
          "assigned": [{"topic": "a", "partitions": [0, 1], "assignment_epochs": [1]}]}, None)  # epochs too few
@example({"type": "member_assignment", "ts": 1, "group_id": "g", "member_id": "m", "member_epoch": 2,
          "assigned": [{"topic": "a", "partitions": [0]}, {"topic": "b", "partitions": [1],
                                                          "assignment_epochs": [1, 2]}]}, None)
@example({"type": "member_assignment", "ts": 1, "group_id": "g", "member_id": "m", "member_epoch": 2,
          "assigned": [{"topic": "a", "partitions": [0], "assignment_epochs": [1]},
                       {"topic": "b", "partitions": [1], "assignment_epochs": [1, 2]}]}, None)
@example({"type": "member_assignment", "ts": 1, "group_id": "g", "member_id": "m", "member_epoch": 2,
          "assigned": [], "subscribed_topics": [1, "a"]}, None)  # the general path takes them as text
def test_typed_assignment_line_equals_general_path_or_steps_aside(d, default_event_id):
    line = json.dumps(d).encode()
    fast = fast_paths.typed_event(line, 7, default_event_id)
    ref = general(d, default_event_id or "7")
    if fast is not None:
        assert type(fast) is MemberAssignment and fast == ref
    whole = dec.decode_json_line(line, seq=7, default_event_id="7", coords="line 8")
    assert (whole if isinstance(whole, MemberAssignment) else ("error", whole.code)) == general(d)


def test_transactional_commit_takes_the_typed_path():
    """KIP-447 commits (most of an exactly-once workload's input) are decoded by msgspec too, with
    their transactional fields, and equal the general path's event."""
    d = {"type": "txn_offset_commit", "ts": 5, "group_id": "g", "member_id": "m1", "member_epoch": 4,
         "instance_id": "i-1", "transactional_id": "tx-1", "producer_id": 4001, "producer_epoch": 2,
         "error_code": 0, "offsets": [{"topic": "a", "partition": 1, "offset": 9, "leader_epoch": 3}]}
    fast = fast_paths.typed_event(json.dumps(d).encode(), 7, "7")
    assert fast is not None
    assert fast == general(d)
    assert (fast.transactional_id, fast.producer_id, fast.producer_epoch, fast.instance_id) == ("tx-1", 4001, 2, "i-1")

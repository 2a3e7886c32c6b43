"""The request-at-a-time verdict renderer (bytes, cached fragments) against the plain
per-verdict encoder and against ``json``: any strings Kafka allows in ids, any epochs."""
from __future__ import annotations

import json

from hypothesis import example, given, settings
from hypothesis import strategies as st

from fencewatch.sinks.jsonl import VERDICT_FIELDS, commit_verdicts_block, commit_verdicts_bytes, commit_verdicts_json, verdict_dict, verdict_json
from fencewatch.state.model import CommitVerdicts, PartitionJudgement

# Quotes, backslashes, control characters, non-ASCII; ASCII-only strings often, as ids mostly are.
ids = (st.text(st.sampled_from('m-1"\\\x1f\x7f\u00e9\u2028'), max_size=6) | st.text(st.characters(max_codepoint=0x7F), max_size=8)
       | st.text(max_size=12))
epochs = st.none() | st.integers(-1, 2**31 - 1)
answers = st.sampled_from(["NONE", "STALE_MEMBER_EPOCH", "FENCED_MEMBER_EPOCH", "ILLEGAL_GENERATION"])
parts = st.builds(PartitionJudgement, ids, st.integers(-2, 10_000), epochs, epochs, answers, answers, answers,
                  answers, st.sampled_from(["accepted", "avoidable", "zombie", "stale"]), st.booleans(),
                  st.none() | ids)
requests = st.builds(CommitVerdicts, ids, st.integers(0, 2**62), ids, ids, ids,
                     st.sampled_from(["commit", "txn_commit"]), st.integers(-1, 2**31 - 1), epochs,
                     st.none() | answers, st.none() | st.booleans(), st.booleans(),
                     st.lists(parts, max_size=5).map(tuple))

# The usual request: one topic, every partition judged alike (rendered without a fragment each).
uniform = st.builds(lambda cv, part, ps: cv._replace(parts=tuple(part._replace(partition=p) for p in ps)),
                    requests, parts, st.lists(st.integers(-2, 10_000), min_size=1, max_size=6))


_TRICKY = ['a"b', "a\\b", "a\x1fb", "\u00e9", "\u2028", ""]


def _tricky(s: str) -> CommitVerdicts:
    part = PartitionJudgement(s, 1, 2, 0, "NONE", "NONE", "NONE", "NONE", "accepted", False, s)
    return CommitVerdicts(s, 1, s, s, s, "commit", 3, 3, None, True, False, (part, part._replace(partition=2)))


@settings(max_examples=400, deadline=None)
@given(st.lists(requests | uniform, min_size=1, max_size=4))
@example([_tricky(s) for s in _TRICKY])
def test_request_lines_equal_per_verdict_lines(cvs):
    for cv in cvs * 2:  # twice: the second pass is served from the fragment caches
        expected = [verdict_json(v) for v in cv.expand()]
        assert commit_verdicts_json(cv) == expected
        assert commit_verdicts_bytes(cv) == "".join(line + "\n" for line in expected).encode("ascii")
        assert commit_verdicts_block(cv) == "\n".join(expected)
        for line, v in zip(expected, cv.expand()):
            assert json.loads(line) == verdict_dict(v)
            assert list(json.loads(line)) == list(VERDICT_FIELDS)

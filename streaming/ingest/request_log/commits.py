"""OffsetCommit (8) and TxnOffsetCommit (28) lines -> ``offset_commit`` / ``txn_offset_commit``.

What lives here: ``Commits``, the bridge's part that maps a parsed commit line (contract §10,
``docs/request-log.md``): one event per distinct response error code, in order of first
appearance, each with its partitions in request order; a partition the response does not list
gets no ``error_code`` (``problem.NO_RESPONSE_PARTITION``); coordinator-routing answers give no
event (contract §10.1 a); ``api_version`` is the request header's version (contract §10.1 h).
For speed, a commit's per-partition answers stay ``msgspec.Raw`` and are parsed once per distinct
text (``_answers``), and the usual request (one topic answered in order with one code) is
written as one event without grouping.
"""

from __future__ import annotations

from collections import Counter
from operator import attrgetter
import msgspec
from msgspec import UNSET

from fencewatch.streaming.ingest.request_log.output import Event, Offset, OffsetCommit, TxnOffsetCommit, unset
from fencewatch.streaming.ingest.request_log.problems import Broken
from fencewatch.streaming.ingest.request_log.wire import (COORDINATOR_ERRORS, DECODE_ANSWERS, CommitBody, CommitLine,
                                                          CommitPartition, CommitTopic, ResponseTopic)

MAX_ANSWERS = 20_000  # distinct response texts remembered (a few per member)
_PARTITION_INDEX = attrgetter("partition_index")
_ERROR_CODE = attrgetter("error_code")
_METADATA = attrgetter("committed_metadata")
_Offset = Offset
Answers = tuple[tuple[int, ...], tuple[int, ...], int | None]  # (indices, codes, the one code of all or None)


class Commits:
    """Maps OffsetCommit and TxnOffsetCommit lines for a ``RequestLogBridge`` (with its
    ``_resolve`` from ``TopicIds`` and ``_dropped`` from ``Counting``)."""

    cluster: str | None
    _counts: Counter
    _commits: int
    _answer_memo: dict[bytes, Answers]

    def _init_commits(self) -> None:
        self._answer_memo = {}

    def _commit(self, line: CommitLine | CommitBody, transactional: bool, ts: int, eid: str) -> list[Event]:
        req = line.request
        resp = line.response
        resp_topics = resp.topics if resp is not None else []
        # The answers first: the line counts as decoded once all of it is read, as when the
        # response was parsed with the rest.
        if len(resp_topics) == 1:
            answers = [self._answers(0, resp_topics[0].partitions)]
        else:
            answers = [self._answers(i, r.partitions) for i, r in enumerate(resp_topics)]
        if transactional:
            self._counts["TXN_OFFSET_COMMIT"] += 1
        else:
            self._commits += 1
        topics = req.topics
        by_code = None
        if len(topics) == 1 and len(answers) == 1:
            # The usual request: one topic, answered in the same order with one code for all of
            # its partitions; the same result as _offsets_by_code's loop, in fewer steps.
            t, r = topics[0], resp_topics[0]
            parts = t.partitions
            indices, _, code = answers[0]
            if (code is not None and parts and r.name == t.name and r.topic_id == t.topic_id
                    and tuple(map(_PARTITION_INDEX, parts)) == indices):
                if code in COORDINATOR_ERRORS:  # contract §10.1 a: never reached the group
                    self._dropped("TxnOffsetCommit" if transactional else "OffsetCommit", code)
                    return []
                topic = t.name
                if topic is None:
                    if t.topic_id is None:
                        raise Broken("MISSING_FIELD", "request.topics[0]: neither name nor topicId")
                    topic = self._resolve(t.topic_id)
                rows = [_Offset(topic, p.partition_index, p.committed_offset, p.committed_leader_epoch)
                        for p in parts]
                if any(map(_METADATA, parts)):
                    _add_metadata(rows, parts)
                if self.cluster is None and req.group_instance_id is None and not transactional:
                    epoch = req.generation_id_or_member_epoch
                    if epoch is None:
                        epoch = req.generation_id if req.generation_id is not None else -1
                    version = line.request_header.request_api_version
                    return [OffsetCommit(ts, UNSET, req.group_id, eid, req.member_id or "", epoch, UNSET, rows,
                                         code, version if version >= 0 else UNSET)]
                by_code = {code: rows}
        if by_code is None:
            by_code = self._offsets_by_code(topics, resp_topics, answers)
        if not by_code:
            self._counts["skipped.EMPTY_COMMIT"] += 1
            return []
        for code in [c for c in by_code if c in COORDINATOR_ERRORS]:  # contract §10.1 a: no event
            del by_code[code]
            self._dropped("TxnOffsetCommit" if transactional else "OffsetCommit", code)
        if not by_code:
            return []
        epoch = req.generation_id_or_member_epoch
        if epoch is None:
            epoch = req.generation_id if req.generation_id is not None else -1
        member_id = req.member_id or ""
        cluster, instance_id = unset(self.cluster), unset(req.group_instance_id)
        version = line.request_header.request_api_version
        version = version if version >= 0 else UNSET
        out: list[Event] = []
        for code, offsets in by_code.items():
            if transactional:
                out.append(TxnOffsetCommit(
                    ts, cluster, req.group_id, eid, member_id, epoch, instance_id, offsets, unset(code), version,
                    req.transactional_id if req.transactional_id is not None else "",
                    req.producer_id if req.producer_id is not None else -1,
                    req.producer_epoch if req.producer_epoch is not None else -1))
            else:
                out.append(OffsetCommit(ts, cluster, req.group_id, eid, member_id, epoch, instance_id, offsets,
                                        unset(code), version))
        if None in by_code:
            self._counts["problem.NO_RESPONSE_PARTITION"] += 1
        return out

    def _offsets_by_code(self, topics: list[CommitTopic], resp_topics: list[ResponseTopic],
                         answers: list[Answers]) -> dict[int | None, list[Offset]]:
        """A commit's offsets grouped by the response's error code (first appearance order),
        partitions in request order; None: a partition the response does not list."""
        n_resp = len(resp_topics)
        lookup: dict[tuple[str | None, int], int] | None = None
        by_code: dict[int | None, list[Offset]] = {}
        for i, t in enumerate(topics):
            name, topic_id, parts = t.name, t.topic_id, t.partitions
            if not parts:
                continue
            if name is not None:
                topic = name
            elif topic_id is not None:
                topic = self._resolve(topic_id)
            else:
                raise Broken("MISSING_FIELD", f"request.topics[{i}]: neither name nor topicId")
            r = resp_topics[i] if i < n_resp else None
            if (r is not None and r.name == name and r.topic_id == topic_id
                    and answers[i][0] == tuple(map(_PARTITION_INDEX, parts))):
                codes_of: list[int | None] = list(answers[i][1])  # by position, as answered
            else:
                if lookup is None:
                    lookup = {(a.name if a.name is not None else a.topic_id, p): c
                              for a, (indices, codes, _) in zip(resp_topics, answers) for p, c in zip(indices, codes)}
                key = name if name is not None else topic_id
                codes_of = [lookup.get((key, p.partition_index)) for p in parts]
            rows = self._rows(topic, parts)
            first = codes_of[0] if codes_of else None
            if codes_of.count(first) == len(codes_of):  # one answer for the whole topic: the usual case
                group = by_code.get(first)
                if group is None:
                    by_code[first] = rows
                else:
                    group.extend(rows)
            else:
                for o, c in zip(rows, codes_of):
                    by_code.setdefault(c, []).append(o)
        return by_code

    def _answers(self, i: int, raw: msgspec.Raw) -> Answers:
        """(partition indices, error codes, the one code of all or None) of response topic ``i``."""
        key = bytes(raw)
        answers = self._answer_memo.get(key)
        if answers is None:
            try:
                parts = DECODE_ANSWERS(key)
            except msgspec.ValidationError as exc:  # msgspec's path, from the document's root as before
                raise Broken("BAD_FIELD", str(exc).replace("`$", f"`$.response.topics[{i}].partitions", 1)) from None
            except msgspec.DecodeError as exc:  # not reached: the line's parse checked the syntax
                raise Broken("BAD_JSON", str(exc)) from None
            codes = tuple(map(_ERROR_CODE, parts))
            one = codes[0] if codes and codes.count(codes[0]) == len(codes) else None
            answers = (tuple(map(_PARTITION_INDEX, parts)), codes, one)
            if len(self._answer_memo) >= MAX_ANSWERS:
                self._answer_memo.clear()
            self._answer_memo[key] = answers
        return answers

    @staticmethod
    def _rows(topic: str, parts: list[CommitPartition]) -> list[Offset]:
        """Contract ``offsets`` entries; ``metadata`` only when not empty."""
        rows = [_Offset(topic, p.partition_index, p.committed_offset, p.committed_leader_epoch) for p in parts]
        if any(map(_METADATA, parts)):
            _add_metadata(rows, parts)
        return rows



def _add_metadata(rows: list[Offset], parts: list[CommitPartition]) -> None:
    for o, p in zip(rows, parts):
        if p.committed_metadata:
            o.metadata = p.committed_metadata


"""What each scripted case expects, and the check of those expectations against a broker's
request log.

What lives here: :class:`Expectation` (a case's request, the answers each broker rule set
should give, the class fencewatch should give it), :func:`rules_of` (which rules a Kafka
version runs), :func:`read_request_log` (the log's lines as JSON objects) and
:func:`check` (each expectation against the lines). Pure: no I/O but reading a file.

The request log is read here with ``json`` directly, not with fencewatch's decoders: the
simulator checks the broker's own words, independently of the monitor it tests.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field
from typing import Any, Iterable

from fencewatch.state.model import KafkaError

__all__ = ["Expectation", "Check", "RULES", "rules_of", "read_request_log", "check", "matching", "error_name",
           "load_expectations", "dump_expectations"]

# The commit checks a broker runs, by version (contract §3): Kafka up to 4.2 is strict for
# consumer groups; 4.3 has KIP-1251; 4.4 adds KIP-1319 (TxnOffsetCommit v6 answers
# STALE_MEMBER_EPOCH / GROUP_ID_NOT_FOUND). An expectation names the answer under the most
# specific rules it depends on; ``any`` is every version.
RULES = ("strict", "kip1251", "kip1319")

# Error codes the transactional cases meet that fencewatch's KafkaError does not name.
_MORE_ERRORS = {47: "INVALID_PRODUCER_EPOCH", 48: "INVALID_TXN_STATE", 51: "CONCURRENT_TRANSACTIONS",
                90: "PRODUCER_FENCED", 35: "UNSUPPORTED_VERSION", 42: "INVALID_REQUEST", 100: "UNKNOWN_TOPIC_ID"}


def error_name(code: int) -> str:
    if code in _MORE_ERRORS:
        return _MORE_ERRORS[code]
    err = KafkaError.from_code(code)
    return err.value if err is not KafkaError.UNKNOWN else f"ERROR_{code}"


def rules_of(version: str) -> tuple[str, ...]:
    """Most specific first: ``"4.4.0"`` -> ``("kip1319", "kip1251", "any")``."""
    m = re.match(r"(\d+)\.(\d+)", version)
    if not m:
        raise ValueError(f"not a Kafka version: {version!r}")
    major, minor = int(m.group(1)), int(m.group(2))
    if (major, minor) >= (4, 4):
        return ("kip1319", "kip1251", "any")
    if (major, minor) >= (4, 3):
        return ("kip1251", "any")
    return ("strict", "any")


@dataclass(frozen=True)
class Expectation:
    """One scripted request and what should happen to it.

    ``match`` finds its line(s): ``request`` fields by their JSON names (e.g.
    ``{"memberId": "...", "memberEpoch": -2}``), ``header`` fields (``clientId``,
    ``correlationId``), and for commits ``partition`` = [topic, partition, offset].
    ``count``: ``one`` (at least one line, and every matching line answered as allowed; with
    no ``match`` that is every line of the group and API), ``last`` (the last matching line
    answered as allowed: a client may retry a commit), ``none`` (no line may match).
    The answer of a commit is its matched partition's code (or every partition's, all equal),
    of other APIs the response's ``errorCode``."""
    scenario: str
    case: str
    api: int
    group_id: str | None
    answers: dict[str, list[str]]
    match: dict[str, Any] = field(default_factory=dict)
    fencewatch_class: str | None = None
    count: str = "one"
    note: str = ""

    def allowed(self, version: str) -> list[str] | None:
        for rules in rules_of(version):
            if rules in self.answers:
                return self.answers[rules]
        return None

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)


def load_expectations(lines: Iterable[str]) -> list[Expectation]:
    return [Expectation(**json.loads(line)) for line in lines if line.strip()]


def dump_expectations(expectations: Iterable[Expectation]) -> str:
    return "".join(e.to_json() + "\n" for e in expectations)


@dataclass(frozen=True)
class Check:
    expectation: Expectation
    ok: bool
    observed: list[str]
    detail: str


_MARK = "Completed request:"


def read_request_log(lines: Iterable[str], apis: Iterable[int] | None = None) -> list[dict[str, Any]]:
    """The ``Completed request:`` objects of these lines (those of ``apis`` only, if given)."""
    wanted = None if apis is None else tuple(f'"requestApiKey":{a},' for a in apis)
    out = []
    for line in lines:
        i = line.find(_MARK)
        if i < 0 or (wanted is not None and not any(w in line for w in wanted)):
            continue
        body = line[i + len(_MARK):].rstrip()
        if body.endswith(")"):  # "... (kafka.request.logger)"
            body = body[:body.rfind(" (")]
        out.append(json.loads(body))
    return out


def _matches(e: Expectation, obj: dict[str, Any]) -> tuple[bool, list[int]]:
    """(whether the line is the expectation's, the codes that answer it)."""
    head, req, resp = obj["requestHeader"], obj["request"], obj["response"]
    if head["requestApiKey"] != e.api:
        return False, []
    if e.group_id is not None and req.get("groupId") != e.group_id:
        return False, []
    for k, v in e.match.get("header", {}).items():
        if head.get(k) != v:
            return False, []
    for k, v in e.match.get("request", {}).items():
        if req.get(k) != v:
            return False, []
    if "topics" not in resp:
        return True, [resp.get("errorCode", 0)]
    codes = [(t.get("name"), p["partitionIndex"], p["errorCode"]) for t in resp["topics"] for p in t["partitions"]]
    want = e.match.get("partition")
    if want is None:
        return True, [c for _, _, c in codes]
    topic, partition, offset = want
    for t in req["topics"]:
        if t.get("name", t.get("topicId")) != topic:
            continue
        for p in t["partitions"]:
            if p["partitionIndex"] == partition and (offset is None or p["committedOffset"] == offset):
                return True, [c for name, i, c in codes if i == partition and name in (topic, None)]
    return False, []


def matching(e: Expectation, objects: list[dict[str, Any]]) -> list[int]:
    """Indices of the objects (request-log lines) that are this expectation's request."""
    return [i for i, o in enumerate(objects) if _matches(e, o)[0]]


def check(expectations: Iterable[Expectation], objects: list[dict[str, Any]], version: str) -> list[Check]:
    """Each expectation against the request log's objects of a broker of ``version``."""
    out = []
    for e in expectations:
        allowed = e.allowed(version)
        hits = [codes for ok, codes in (_matches(e, o) for o in objects) if ok]
        observed = sorted({error_name(c) for codes in hits for c in codes})
        if e.count == "none":
            out.append(Check(e, not hits, observed, f"{len(hits)} lines match, none expected"))
            continue
        if allowed is None:
            out.append(Check(e, True, observed, f"no expectation for {version}"))
            continue
        if not hits:
            out.append(Check(e, False, observed, "no line matches"))
            continue
        if e.count == "last":
            observed = sorted({error_name(c) for c in hits[-1]})
        bad = [n for n in observed if n not in allowed]
        out.append(Check(e, not bad, observed,
                         f"{len(hits)} lines; answered {observed}, allowed {allowed}"))
    return out

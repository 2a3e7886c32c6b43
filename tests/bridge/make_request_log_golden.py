"""Write ``data/request_log_golden.jsonl.xz``: a corpus of request-log lines and what
``RequestLogBridge`` made of them, for ``test_request_log_golden.py``.

The corpus is the benchmark's mix (``bench/bench_request_log.py``'s ``build``, 600 lines,
seed 11: steady and changing heartbeats, OffsetCommit v9/v10 of 1-200 partitions, a few
STALE_MEMBER_EPOCH answers, TxnOffsetCommit) plus the shapes its fast paths leave to the
general ones: message-only lines, ISO time stamps, shipper prefixes, ``isForwarded: true``,
bytes, several topics per commit, answers out of order or missing, mixed codes per topic, a
line of another API, broken lines; then, appended (``fenced_and_versions``), heartbeats answered
UNKNOWN_MEMBER_ID / FENCED_MEMBER_EPOCH and commits of several API versions. Outputs recorded
for four bridges (carry or not, cluster or not). First written by the decoder of main 6bae636,
before the position-based fast paths, so the test holds them to its outputs byte for byte;
rewritten once since, for contract §10.1 g and h (commit events gained ``api_version``, the
appended lines their outputs), after checking that the decoder gave the recorded outputs on
the earlier lines but for ``api_version`` (``docs/request-log.md``). Regenerate only for an
intended change:

    .venv/bin/python tests/bridge/make_request_log_golden.py
"""

from __future__ import annotations

import lzma
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(HERE))

from request_log_lines import heartbeat, log_line, offset_commit, txn_offset_commit  # noqa: E402

GOLDEN = HERE / "data" / "request_log_golden.jsonl.xz"
CONFIGS = ({}, {"cluster": "c1"}, {"carry": False}, {"carry": False, "cluster": "c1"})


def corpus() -> tuple[list[dict], dict[str, str]]:
    """[{"line": str, "bytes": bool, "ts": int | None}], topic ids."""
    from bench_request_log import build

    lines, names = build(600, seed=11)
    ids = list(names)
    out = [{"line": x, "bytes": False, "ts": None} for x in lines]
    t0, t1 = ids[0], ids[1]
    n0, n1 = names[t0], names[t1]
    extra = [
        log_line(offset_commit(9, "g", 3, "m", [(n0, [(0, 5, 1), (1, 6, 1)]), (n1, [(2, 7, 1)])])),
        log_line(offset_commit(10, "g", 3, "m", [(t0, [(0, 5, 1), (1, 6, 1)]), (t1, [(2, 7, 1)])],
                               codes={(t0, 1): 113, (t1, 2): 22})),
        log_line(offset_commit(9, "g", 3, "m", [(n0, [(0, 5, 1), (1, 6, 1), (2, 7, 1)])], codes={(n0, 1): 25})),
        log_line(offset_commit(9, "g", 3, "m", [(n0, [])])),
        log_line(offset_commit(7, "g", 3, "m", [(n0, [(0, 5, 1)])], instance="i-1", metadata="meta")),
        log_line(heartbeat(1, "g", "m", 0, response_epoch=4, assignment=[(t0, [0, 1])], subscribed=[n0])),
        log_line(heartbeat(1, "g", "m", 4, response_epoch=5, owned=[(t0, [0, 1])])),
        log_line(heartbeat(1, "g", "m", -1)),
        log_line(heartbeat(0, "g", "m", 4, error=16)),
        log_line(offset_commit(9, "g", 3, "m", [(n0, [(0, 5, 1)])])).replace(f'{{"name":"{n0}",', "{", 1),
    ]
    out += [{"line": x, "bytes": False, "ts": None} for x in extra]
    # Answers out of order, one missing: the general join by (topic, partition).
    c = json.loads(lines[[i for i, x in enumerate(lines) if '"requestApiKey":8,' in x[:120]][0]].split("request:", 1)[1]
                   .rsplit(" (kafka", 1)[0])
    c["response"]["topics"][0]["partitions"] = c["response"]["topics"][0]["partitions"][::-1][:-1] or []
    out.append({"line": "[2026-11-20 09:00:01,001] DEBUG Completed request:" + json.dumps(c, separators=(",", ":"))
                + " (kafka.request.logger)", "bytes": False, "ts": None})
    # The same lines in the shapes the fast path does not take.
    for x in lines[:40]:
        stamp, rest = x[1:24], x[25:]
        out.append({"line": rest.split(" ", 1)[1].removesuffix(" (kafka.request.logger)"), "bytes": False,
                    "ts": 1795165200000})
        out.append({"line": f"[{stamp[:10]}T{stamp[11:]}+01:00] {rest}", "bytes": False, "ts": None})
        out.append({"line": f"host-1 kafka: {x}", "bytes": False, "ts": None})
        out.append({"line": x.replace('"isForwarded":false', '"isForwarded":true', 1), "bytes": False, "ts": None})
        out.append({"line": x, "bytes": True, "ts": None})
        out.append({"line": x.replace("DEBUG", "TRACE", 1), "bytes": False, "ts": None})
    # Broken and skipped lines.
    x = lines[0]
    out += [{"line": y, "bytes": False, "ts": None} for y in (
        x[:-200], x.replace('"groupId"', '"groupIdX"', 1), x.replace(":10,", ':"10",', 1),
        x.replace("[2026-11-20 09", "[2026-13-20 09", 1), x.replace("requestApiKey\":68", "requestApiKey\":1", 1),
        "", "[2026-11-20 09:00:00,123] INFO started (kafka.server.KafkaServer)")]
    return out + fenced_and_versions(t0, n0), names


def fenced_and_versions(tid: str, name: str) -> list[dict]:
    """Added after the corpus above was recorded (contract §10.1 g and h), so that its lines keep
    their numbers: heartbeats answered UNKNOWN_MEMBER_ID (a known member, the same member again,
    an unknown one, a static one) and FENCED_MEMBER_EPOCH (the member kept, then its rejoin at
    epoch 0); commits of several API versions, one without ``requestApiVersion``."""
    def at(second: int, obj: dict) -> str:
        return log_line(obj, stamp=f"2026-11-20 09:01:{second:02d},500")

    join = [(tid, [0, 1])]
    lines = [
        at(1, heartbeat(1, "gz", "z", 0, response_epoch=5, assignment=join, owned=[], subscribed=[name])),
        at(1, heartbeat(1, "gz", "z", 5)),
        at(2, heartbeat(1, "gz", "z", 5, response_epoch=0, error=25)),  # removed: member_left fenced
        at(2, offset_commit(9, "gz", 5, "z", [(name, [(0, 50, 1)])], codes={(name, 0): 25})),
        at(2, heartbeat(1, "gz", "z", -1, response_epoch=0, error=25)),  # already left: no second one
        at(3, heartbeat(1, "gz", "u", 7, response_epoch=0, error=25)),  # never seen by the bridge
        at(3, heartbeat(1, "gz", "s", 0, response_epoch=6, assignment=[(tid, [2])], owned=[], subscribed=[name],
                        instance="i-s")),
        at(4, heartbeat(1, "gz", "s", 6, response_epoch=0, error=25)),  # static: its instance id remembered
        at(4, heartbeat(1, "gz", "f", 0, response_epoch=3, assignment=[(tid, [3])], owned=[], subscribed=[name])),
        at(5, heartbeat(1, "gz", "f", 2, response_epoch=0, error=110)),  # kept by the coordinator
        at(5, heartbeat(1, "gz", "f", 0, response_epoch=3, assignment=[(tid, [3])], owned=[], subscribed=[name])),
        at(6, txn_offset_commit(6, "gz", 3, "f", [(tid, [(3, 60, -1)])], codes={(tid, 3): 113}, legacy_names=False)),
        at(6, txn_offset_commit(3, "gz", 3, "f", [(name, [(3, 61, -1)])], codes={(name, 3): 22})),
        at(6, txn_offset_commit(0, "gz", 3, "f", [(name, [(3, 62, -1)])])),
        at(6, offset_commit(10, "gz", 3, "f", [(tid, [(3, 63, 0)])])),
        at(6, offset_commit(2, "gz", 3, "f", [(name, [(3, 64, 0)])], legacy_names=True)),
        at(7, offset_commit(9, "gz", 3, "f", [(name, [(3, 65, 0)])])).replace('"requestApiVersion":9,', "", 1),
        at(7, offset_commit(9, "gz", 3, "f", [(name, [(3, 66, 0)])])).replace('"requestApiVersion":9,',
                                                                           '"requestApiVersion":"9",', 1),
    ]
    out = [{"line": x, "bytes": False, "ts": None} for x in lines]
    # The same removal through the other ways in: bytes, and a message-only line.
    out.append({"line": at(8, heartbeat(1, "gz", "y", 0, response_epoch=8, assignment=join, owned=[])), "bytes": True,
                "ts": None})
    out.append({"line": at(8, heartbeat(1, "gz", "y", 8, response_epoch=0, error=25)), "bytes": True, "ts": None})
    out.append({"line": at(9, heartbeat(1, "gz", "w", 0, response_epoch=9, assignment=join, owned=[])).split(
        "] DEBUG ", 1)[1].removesuffix(" (kafka.request.logger)"), "bytes": False, "ts": 1795165300000})
    out.append({"line": at(9, heartbeat(1, "gz", "w", 9, response_epoch=0, error=25)).split(
        "] DEBUG ", 1)[1].removesuffix(" (kafka.request.logger)"), "bytes": False, "ts": 1795165300001})
    return out


def outputs(cases: list[dict], names: dict[str, str], config: dict) -> dict:
    from fencewatch.streaming.ingest.request_log import RequestLogBridge

    b = RequestLogBridge(names, **config)
    events = []
    for n, case in enumerate(cases):
        line = case["line"].encode() if case["bytes"] else case["line"]
        events.append(b.map_line(line, str(n), ts=case["ts"]))
    return {"events": events, "counts": dict(sorted(b.counts.items())), "problems": [list(p) for p in b.problems]}


def main() -> int:
    cases, names = corpus()
    with lzma.open(GOLDEN, "wt", encoding="utf-8", preset=9) as f:
        f.write(json.dumps({"names": names, "cases": cases}) + "\n")
        for config in CONFIGS:
            f.write(json.dumps({"config": config, **outputs(cases, names, config)}) + "\n")
    print(f"{GOLDEN}: {len(cases)} lines x {len(CONFIGS)} bridges")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

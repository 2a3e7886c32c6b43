"""Write ``data/request_log_golden.jsonl.xz``: a corpus of request-log lines and what
``RequestLogBridge`` made of them, for ``test_request_log_golden.py``.

The corpus is the benchmark's mix (``bench/bench_request_log.py``'s ``build``, 600 lines,
seed 11: steady and changing heartbeats, OffsetCommit v9/v10 of 1-200 partitions, a few
STALE_MEMBER_EPOCH answers, TxnOffsetCommit) plus the shapes its fast paths leave to the
general ones: message-only lines, ISO time stamps, shipper prefixes, ``isForwarded: true``,
bytes, several topics per commit, answers out of order or missing, mixed codes per topic, a
line of another API, broken lines. Outputs recorded for four bridges (carry or not, cluster
or not). First written by the decoder of main 6bae636, before the position-based fast paths,
so the test holds them to its outputs byte for byte; regenerate only for an intended change:

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

from request_log_lines import heartbeat, log_line, offset_commit  # noqa: E402

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
    return out, names


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

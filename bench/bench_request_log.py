"""Request-log decoding benchmark: broker request-log lines -> contract events on one core.

Builds N lines as a busy cluster's brokers write them (``tests/bridge/request_log_lines.py``,
field presence as Kafka's message specs): 62% steady ConsumerGroupHeartbeats (no assignment),
3% heartbeats that join or move an epoch (with an assignment), 27% OffsetCommit v9/v10 of
1-4 partitions, 6% of 10-50 partitions, 1% of 200 partitions, 1% TxnOffsetCommit; then times
lines -> output records as the commands make them: the lines as bytes (what the offline bridge,
the live bridge and the Spark mapper hand the decoder), ``RequestLogBridge.events_many`` with
``BATCH_LINES`` lines per call and ``event_json`` per event (the target's figure), also with
``carry=False`` (the Spark mapper's mode) and the offline bridge's whole loop
(``run_from_request_log``: reading a file's bytes, writing JSON lines). Beside them, the figure
this bench gave before: ``map_line_json`` line by line on text lines, and ``map_line`` (dicts).
To choose the JSON parser by measurement, the parse step alone with each candidate on the same
JSON bodies: stdlib ``json.loads``, ``msgspec.json.decode`` to dicts, and ``msgspec`` into typed
Structs that name only the fields used (what ``request_log.py`` does: header skipped, a commit's
answers kept raw). Also the cost of skipping a line of another API (a broker without the log4j2
filter logs every Fetch and Produce), and the floor: the same lines with no decoding logic at all
(JSON found by position, typed parse, and then also the output dicts, or the output JSON bytes
through the decoder's output Structs; on text lines and, as the commands get them, on bytes).
Target: >= 100,000 lines/s on one core.

    python bench/bench_request_log.py [--lines 200000] [--write-docs]

Before and after a change, run interleaved: ``bench/ab_request_log.py OLD`` (this host drifts).
"""

from __future__ import annotations

import argparse
import datetime as dt
import gc
import io
import json
import os
import random
import sys
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "bridge"))
sys.path.insert(0, str(ROOT / "bench"))

import msgspec  # noqa: E402
from msgspec import UNSET  # noqa: E402
from request_log_lines import envelope, heartbeat, kafka_id, log_line, offset_commit, txn_offset_commit  # noqa: E402

from bench_bridge import bench_feed  # noqa: E402
from bench_bridge import build as build_records  # noqa: E402
from fencewatch.streaming.commands.bridge import run_from_request_log, tune_gc  # noqa: E402
from fencewatch.streaming.ingest.request_log import (  # noqa: E402
    BATCH_LINES, Heartbeat, Offset, OffsetCommit, RequestLogBridge, event_json)
from fencewatch.streaming.ingest.request_log.frame import FAST_API, FAST_APIS, FAST_BODY, FAST_END  # noqa: E402
from fencewatch.streaming.ingest.request_log.frame import api_key as _api_key  # noqa: E402
from fencewatch.streaming.ingest.request_log.wire import BODY_DECODERS  # noqa: E402


def build(n: int, seed: int = 7) -> tuple[list[str], dict[str, str]]:
    rng = random.Random(seed)
    ids = [kafka_id(uuid.UUID(int=rng.getrandbits(128))) for _ in range(50)]
    names = {tid: f"topic-{i}" for i, tid in enumerate(ids)}
    groups = [f"group-{i}" for i in range(500)]
    base = dt.datetime(2026, 11, 20, 9, 0, 0)
    members = {(g, k): f"{g}-{uuid.UUID(int=rng.getrandbits(128))}" for g in groups for k in range(20)}
    out = []
    for i in range(n):
        stamp = (base + dt.timedelta(milliseconds=i * 3)).strftime("%Y-%m-%d %H:%M:%S,%f")[:-3]
        g = rng.choice(groups)
        m = members[(g, rng.randrange(20))]  # a steady population: 500 groups x 20 members
        tid = rng.choice(ids)
        r = rng.random()
        if r < 0.62:
            obj = heartbeat(1, g, m, 10)
        elif r < 0.65:
            obj = heartbeat(1, g, m, 10, response_epoch=11, assignment=[(tid, sorted(rng.sample(range(64), 4)))],
                            owned=[(tid, sorted(rng.sample(range(64), 4)))], subscribed=[names[tid]])
        elif r < 0.98:
            k = rng.randint(1, 4) if r < 0.92 else (rng.randint(10, 50) if r < 0.97 else 200)
            parts = [(p, rng.randrange(10**9), rng.randrange(20)) for p in range(k)]
            v10 = rng.random() < 0.5
            obj = offset_commit(10 if v10 else 9, g, 10, m, [(tid if v10 else names[tid], parts)],
                                codes={} if rng.random() < 0.97 else {(tid if v10 else names[tid], 0): 113})
        else:
            obj = txn_offset_commit(5, g, 10, m, [(names[tid], [(0, rng.randrange(10**9), 3)])])
        out.append(log_line(obj, stamp=stamp))
    return out, names


def other_api_lines(n: int) -> list[str]:
    fetch = envelope(1, 17, {"replicaId": -1, "maxWaitMs": 500, "minBytes": 1, "topics": [
        {"topic": "orders", "partitions": [{"partition": p, "fetchOffset": 10**6 + p, "partitionMaxBytes": 1048576}
                                           for p in range(8)]}]},
                     {"throttleTimeMs": 0, "errorCode": 0, "sessionId": 0, "responses": [
                         {"topic": "orders", "partitions": [{"partitionIndex": p, "errorCode": 0,
                                                             "highWatermark": 10**6 + p, "recordsSizeInBytes": 512}
                                                            for p in range(8)]}]})
    return [log_line(fetch)] * n


def timed(fn) -> tuple[float, float]:
    c0, w0 = time.process_time(), time.perf_counter()
    fn()
    return time.process_time() - c0, time.perf_counter() - w0


def bench_map(lines: list[str], names: dict[str, str], how: str = "json") -> tuple[float, float, int]:
    """``how``: "json" (``map_line_json``, the commands' output) or "dicts" (``map_line``)."""
    bridge = RequestLogBridge(names)
    map_line = bridge.map_line_json if how == "json" else bridge.map_line
    ids = [str(i) for i in range(len(lines))]
    count = [0]

    def run():
        n = 0
        for line, eid in zip(lines, ids):
            n += len(map_line(line, eid))
        count[0] = n

    c, w = timed(run)
    assert not bridge.counts.get("broken.INTERNAL"), bridge.summary()
    return c, w, count[0]


def bench_commands(lines: list[bytes], names: dict[str, str], carry: bool = True) -> tuple[float, float, int]:
    """Lines -> output JSON records as the commands make them: ``events_many``, ``BATCH_LINES``
    lines per call, ``event_json`` per event (the Spark mapper's and the live bridge's bytes)."""
    bridge = RequestLogBridge(names, carry=carry)
    events_many = bridge.events_many
    ids = [str(i) for i in range(len(lines))]
    count = [0]

    def run():
        n = 0
        for k in range(0, len(lines), BATCH_LINES):
            for events in events_many(lines[k:k + BATCH_LINES], ids[k:k + BATCH_LINES]):
                for e in events:
                    event_json(e)
                    n += 1
        count[0] = n

    c, w = timed(run)
    assert not bridge.counts.get("broken.INTERNAL"), bridge.summary()
    return c, w, count[0]


def bench_offline(data: bytes, names: dict[str, str]) -> tuple[float, float]:
    """The offline bridge's loop: a file's bytes -> JSON lines (``run_from_request_log``)."""
    return timed(lambda: run_from_request_log(io.BytesIO(data), io.StringIO(), io.StringIO(), RequestLogBridge(names)))


def bodies_of(lines: list[str]) -> list[str]:
    return [line[line.index("request:") + 8:line.rindex("}") + 1] for line in lines]


def bench_parse(bodies: list[str], how: str) -> tuple[float, float]:
    if how == "json.loads":
        loads = json.loads
        return timed(lambda: [loads(b) for b in bodies])
    if how == "msgspec dicts":
        dec = msgspec.json.decode
        return timed(lambda: [dec(b) for b in bodies])
    return timed(lambda: [BODY_DECODERS[_api_key(b)](b) for b in bodies])


def bench_floor(lines: list[str] | list[bytes], output: str | None) -> tuple[float, float]:
    """What any decoder of these lines pays, without its logic: the API key and the JSON by
    position, the typed parse the decoder uses, and (``output``) one output dict ("dicts") or
    one output Struct encoded to JSON bytes ("json", as ``event_json``) per heartbeat and per
    committed partition. No tracker, no checks, no counters, no error handling, commit
    answers not read: a floor, not a decoder."""
    decoders, apis = BODY_DECODERS, FAST_APIS

    def run():
        for line in lines:
            api = apis[line[24:FAST_API]]
            p = decoders[api](line[FAST_BODY:-FAST_END])  # (bytes lines: no newline, as Kafka records)
            if output is None:
                continue
            req, resp = p.request, p.response
            if output == "json":
                if api == 68:
                    [event_json(Heartbeat(1, UNSET, req.group_id, "1", req.member_id, req.member_epoch,
                                          resp.member_epoch, resp.error_code))]
                else:
                    t = req.topics[0]
                    topic = t.name or t.topic_id
                    [event_json(OffsetCommit(1, UNSET, req.group_id, "1", req.member_id,
                                             req.generation_id_or_member_epoch, UNSET,
                                             [Offset(topic, q.partition_index, q.committed_offset,
                                                     q.committed_leader_epoch) for q in t.partitions], 0))]
                continue
            if api == 68:
                [{"type": "heartbeat", "ts": 1, "group_id": req.group_id, "event_id": "1",
                  "member_id": req.member_id, "request_epoch": req.member_epoch,
                  "response_epoch": resp.member_epoch, "error_code": resp.error_code}]
            else:
                t = req.topics[0]
                topic = t.name or t.topic_id
                [{"type": "offset_commit", "ts": 1, "group_id": req.group_id, "event_id": "1",
                  "member_id": req.member_id, "member_epoch": req.generation_id_or_member_epoch,
                  "offsets": [{"topic": topic, "partition": q.partition_index, "offset": q.committed_offset,
                               "leader_epoch": q.committed_leader_epoch} for q in t.partitions]}]

    return timed(run)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lines", type=int, default=200_000)
    ap.add_argument("--repeat", type=int, default=3, help="best of N runs")
    ap.add_argument("--write-docs", action="store_true", help="write (replace) its section of docs/benchmarks.md")
    args = ap.parse_args(argv)
    from report import pin_one_core

    pin_one_core()
    lines, names = build(args.lines)
    blines = [x.encode() for x in lines]  # as the commands get them
    file_data = b"".join(x + b"\n" for x in blines)
    bodies = bodies_of(lines)
    others = other_api_lines(args.lines // 4)
    mean_len = sum(map(len, lines)) / len(lines)
    gc.collect()
    gc.freeze()  # the prebuilt input is not the decoder's garbage
    tune_gc()
    commands = [bench_commands(blines, names) for _ in range(args.repeat)]
    stateless = [bench_commands(blines, names, carry=False) for _ in range(args.repeat)]
    offline = [bench_offline(file_data, names) for _ in range(args.repeat)]
    full = [bench_map(lines, names) for _ in range(args.repeat)]
    dicts = [bench_map(lines, names, "dicts") for _ in range(args.repeat)]
    kinds = {"heartbeats": [x for x in lines if "\"requestApiKey\":68," in x[:200]],
             "commits < 5 KB": [x for x in lines if "\"requestApiKey\":68," not in x[:200] and len(x) < 5000],
             "commits >= 5 KB (10-200 partitions)": [x for x in lines if len(x) >= 5000]}
    by_kind_commands = {k: [bench_commands([x.encode() for x in v], names) for _ in range(args.repeat)]
                        for k, v in kinds.items()}
    by_kind = {k: [bench_map(v, names) for _ in range(args.repeat)] for k, v in kinds.items()}
    by_kind_dicts = {k: [bench_map(v, names, "dicts") for _ in range(args.repeat)] for k, v in kinds.items()}
    parse = {how: [bench_parse(bodies, how) for _ in range(args.repeat)]
             for how in ("json.loads", "msgspec dicts", "msgspec typed (used)")}
    floor = {how: [bench_floor(lines, out) for _ in range(args.repeat)]
             for how, out in (("position + typed parse", None), ("+ output dicts", "dicts"),
                              ("+ output JSON (Structs, event_json)", "json"))}
    floor |= {how: [bench_floor(blines, out) for _ in range(args.repeat)]
              for how, out in (("bytes lines: position + typed parse", None),
                               ("bytes lines: + output JSON (Structs, event_json)", "json"))}
    skip = [bench_map(others, names) for _ in range(args.repeat)]
    # The host's speed at this moment: the __consumer_offsets decoder on its own mix, to scale
    # these numbers against its runs in docs/benchmarks.md (this host is shared and drifts).
    records, topics = build_records(100_000)
    reference = [bench_feed(records, topics) for _ in range(args.repeat)]

    def rate(n: int, runs: list, i: int) -> str:
        return f"{n / min(r[i] for r in runs):>10,.0f}"

    load = os.getloadavg()[0]
    lines_out = [
        f"lines: {len(lines)} (mean {mean_len:,.0f} bytes), events: {commands[0][2]}; "
        f"{BATCH_LINES} lines per events_many call",
        f"{'lines/s':<52}{'per CPU-s':>10}  {'wall':>10}",
        f"{'lines -> output JSON records as the commands, whole mix':<52}{rate(len(lines), commands, 0)}  "
        f"{rate(len(lines), commands, 1)}",
        *(f"{'  as the commands, ' + k + f' ({len(kinds[k]) / len(lines):.0%})':<52}"
          f"{rate(len(kinds[k]), runs, 0)}  {rate(len(kinds[k]), runs, 1)}" for k, runs in by_kind_commands.items()),
        f"{'  the same, carry=False (the Spark mapper), whole mix':<52}{rate(len(lines), stateless, 0)}  "
        f"{rate(len(lines), stateless, 1)}",
        f"{'offline bridge loop (file bytes -> JSON lines)':<52}{rate(len(lines), offline, 0)}  "
        f"{rate(len(lines), offline, 1)}",
        f"{'before: map_line_json per text line, whole mix':<52}{rate(len(lines), full, 0)}  "
        f"{rate(len(lines), full, 1)}",
        *(f"{'  map_line_json, ' + k + f' ({len(kinds[k]) / len(lines):.0%})':<52}{rate(len(kinds[k]), runs, 0)}  "
          f"{rate(len(kinds[k]), runs, 1)}" for k, runs in by_kind.items()),
        f"{'map_line (dicts), whole mix (split+time+parse+map)':<52}{rate(len(lines), dicts, 0)}  "
        f"{rate(len(lines), dicts, 1)}",
        *(f"{'  map_line, ' + k + f' ({len(kinds[k]) / len(lines):.0%})':<52}{rate(len(kinds[k]), runs, 0)}  "
          f"{rate(len(kinds[k]), runs, 1)}" for k, runs in by_kind_dicts.items()),
        *(f"{'parse only: ' + how:<52}{rate(len(bodies), runs, 0)}  {rate(len(bodies), runs, 1)}"
          for how, runs in parse.items()),
        *(f"{'floor, no logic: ' + how:<52}{rate(len(lines), runs, 0)}  {rate(len(lines), runs, 1)}"
          for how, runs in floor.items()),
        f"{'map_line, Fetch lines of another API (skipped)':<52}{rate(len(others), skip, 0)}  "
        f"{rate(len(others), skip, 1)}",
        f"{'reference, same moment: bench_bridge.py whole mix (records/s)':<52}{rate(len(records), reference, 0)}  "
        f"{rate(len(records), reference, 1)}",
        f"load average during the run: {load:.2f} (per CPU-s = process CPU time, robust to other load)",
        "target: >= 100,000 lines/s on one core",
    ]
    print("\n".join(lines_out))
    if args.write_docs:
        from report import write_section

        write_section("request-log decoder",
                      f"python bench/bench_request_log.py --lines {args.lines}",
                      f"Pinned to one core, best of {args.repeat}.\n\n```\n" + "\n".join(lines_out) + "\n```")
        print("docs/benchmarks.md updated")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

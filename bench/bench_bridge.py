"""Decoder benchmark: ``__consumer_offsets`` records -> contract events on one core.

Builds N records in a commit-heavy mix (45% OffsetCommit v3, 45% v4, 5%
KIP-848 current member assignments with KIP-1251 epochs, 2% member metadata,
0.5% classic GroupMetadata with embedded protocol, 2.5% offset tombstones; in
a steady cluster commits are well over 99%),
encodes them with the test-side encoder (schema-driven, like the tests), then
times ``Bridge.feed`` (decode + map) and the bare decoder separately.
Anchor: kminion decodes 100-120k offsets/s on 2 cores; target >= 200,000 records/s.

    python bench/bench_bridge.py [--records 500000] [--write-docs]
"""

from __future__ import annotations

import argparse
import gc
import os
import random
import sys
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "bridge"))

from bridge_encoder import encode_record, version_prefixed  # noqa: E402

from fencewatch.streaming.commands.bridge import tune_gc  # noqa: E402
from fencewatch.streaming.ingest.consumer_offsets.mapping import Bridge  # noqa: E402
from fencewatch.streaming.ingest.consumer_offsets.records import decode  # noqa: E402
from fencewatch.streaming.ingest.consumer_offsets.record_types import (  # noqa: E402
    CONSUMER_PROTOCOL_ASSIGNMENT,
    CONSUMER_PROTOCOL_SUBSCRIPTION,
)


def build(n: int, seed: int = 7) -> tuple[list[tuple[bytes, bytes | None, int]], dict[bytes, str]]:
    rng = random.Random(seed)
    topics = {uuid.UUID(int=rng.getrandbits(128)).bytes: f"topic-{i}" for i in range(50)}
    ids = list(topics)
    groups = [f"group-{i}" for i in range(500)]
    out = []
    ts = 1_700_000_000_000
    sub = version_prefixed(CONSUMER_PROTOCOL_SUBSCRIPTION, 3, {
        "topics": ["topic-1"], "userData": None, "ownedPartitions": [{"topic": "topic-1", "partitions": [0, 1]}],
        "generationId": 4, "rackId": None})
    asg = version_prefixed(CONSUMER_PROTOCOL_ASSIGNMENT, 3, {
        "assignedPartitions": [{"topic": "topic-1", "partitions": [0, 1]}], "userData": None})
    for i in range(n):
        ts += rng.randint(0, 3)
        g = rng.choice(groups)
        r = rng.random()
        if r < 0.45:
            tid = rng.choice(ids)
            k, v = encode_record(1, {"group": g, "topic": topics[tid], "partition": rng.randrange(64)}, 3, {
                "offset": rng.randrange(10**9), "leaderEpoch": rng.randrange(20), "metadata": "",
                "commitTimestamp": ts})
        elif r < 0.90:
            tid = rng.choice(ids)
            k, v = encode_record(1, {"group": g, "topic": topics[tid], "partition": rng.randrange(64)}, 4, {
                "offset": rng.randrange(10**9), "leaderEpoch": rng.randrange(20), "metadata": "",
                "commitTimestamp": ts, "topicId": tid})
        elif r < 0.95:
            m = f"member-{rng.randrange(20)}"
            parts = sorted(rng.sample(range(64), 4))
            k, v = encode_record(8, {"groupId": g, "memberId": m}, 0, {
                "memberEpoch": 10, "previousMemberEpoch": 9, "state": 0,
                "assignedPartitions": [{"topicId": rng.choice(ids), "partitions": parts,
                                        "assignmentEpochs": [rng.randrange(1, 11) for _ in parts]}],
                "partitionsPendingRevocation": []})
        elif r < 0.97:
            m = f"member-{rng.randrange(20)}"
            k, v = encode_record(5, {"groupId": g, "memberId": m}, 0, {
                "instanceId": None, "rackId": None, "clientId": "client", "clientHost": "/10.1.2.3",
                "subscribedTopicNames": ["topic-1", "topic-2"], "subscribedTopicRegex": None,
                "rebalanceTimeoutMs": 300000, "serverAssignor": "uniform"})
        elif r < 0.975:
            k, v = encode_record(2, {"group": "classic-" + g}, 3, {
                "protocolType": "consumer", "generation": 5, "protocol": "range", "leader": "a",
                "currentStateTimestamp": ts, "members": [
                    {"memberId": "a", "groupInstanceId": None, "clientId": "c", "clientHost": "h",
                     "rebalanceTimeout": 1, "sessionTimeout": 1, "subscription": sub, "assignment": asg}]})
        else:
            k, v = encode_record(1, {"group": g, "topic": "topic-3", "partition": rng.randrange(64)})
        out.append((k, v, ts))
    return out, topics


def bench_feed(records, topics) -> tuple[float, float, int]:
    """(CPU seconds, wall seconds, events) of decode + map."""
    bridge = Bridge(topics)
    feed = bridge.feed
    ids = ["__consumer_offsets/0/%d" % i for i in range(len(records))]
    c0, w0 = time.process_time(), time.perf_counter()
    n_events = 0
    for (k, v, ts), eid in zip(records, ids):
        n_events += len(feed(k, v, ts, eid))
    n_events += len(bridge.flush())
    return time.process_time() - c0, time.perf_counter() - w0, n_events


def bench_decode(records) -> tuple[float, float]:
    c0, w0 = time.process_time(), time.perf_counter()
    for k, v, _ in records:
        decode(k, v)
    return time.process_time() - c0, time.perf_counter() - w0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=500_000)
    ap.add_argument("--repeat", type=int, default=3, help="best of N runs")
    ap.add_argument("--write-docs", action="store_true", help="write (replace) its section of docs/benchmarks.md")
    args = ap.parse_args(argv)
    from report import pin_one_core

    pin_one_core()
    records, topics = build(args.records)
    # A live reader holds one record at a time; keep the prebuilt input out of the
    # cyclic GC's way so the numbers measure decoding, not scanning this list.
    gc.collect()
    gc.freeze()
    tune_gc()
    offsets = [r for r in records if r[0][:2] == b"\x00\x01" and r[1] is not None]
    others = [r for r in records if not (r[0][:2] == b"\x00\x01" and r[1] is not None)]
    feed = [bench_feed(records, topics) for _ in range(args.repeat)]
    dec = [bench_decode(records) for _ in range(args.repeat)]
    offs = [bench_feed(offsets, topics) for _ in range(args.repeat)]
    oth = [bench_feed(others, topics) for _ in range(args.repeat)]
    events = feed[0][2]

    def rate(n: int, runs: list, i: int) -> str:
        return f"{n / min(r[i] for r in runs):>10,.0f}"

    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    lines = [
        f"records: {len(records)} ({len(offsets)} offset commits), events: {events}",
        f"{'records/s':<44}{'per CPU-s':>10}  {'wall':>10}",
        f"{'decode+map, whole mix (Bridge.feed)':<44}{rate(len(records), feed, 0)}  {rate(len(records), feed, 1)}",
        f"{'decode only, whole mix (records.decode)':<44}{rate(len(records), dec, 0)}  {rate(len(records), dec, 1)}",
        f"{'decode+map, offset commits only':<44}{rate(len(offsets), offs, 0)}  {rate(len(offsets), offs, 1)}",
        f"{'decode+map, group/member records only':<44}{rate(len(others), oth, 0)}  {rate(len(others), oth, 1)}",
        f"load average during the run: {load:.2f} (per CPU-s = process CPU time, robust to other load)",
        "target: >= 200,000 records/s on one core (kminion: 100-120k offsets/s on 2 cores)",
    ]
    print("\n".join(lines))
    if args.write_docs:
        from report import write_section

        write_section("bridge decoder", f"python bench/bench_bridge.py --records {args.records}",
                      f"Pinned to one core, best of {args.repeat}.\n\n```\n" + "\n".join(lines) + "\n```")
        print("docs/benchmarks.md updated")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

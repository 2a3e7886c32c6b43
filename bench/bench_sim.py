"""Simulator benchmark: events/s ``fencewatch simulate`` writes to a file and to the broker.

File: each profile runs to a fixed event budget into a temporary file (JSON
lines with and without ground-truth labels, and Avro object container), the
same path the CLI takes (:func:`fencewatch.sim.run.run_simulation`).
Broker: Apache Kafka's broker (FENCEWATCH_BENCH_BROKER=tansu|VERSION to change), JSON values on the two input topics,
keyed by group, including the final per-partition flush (NOTES.md watermark
quirk) -- the number is what a reader can consume once the command returns.

Numbers are events per wall second and per CPU second of this process (the
machine is shared; CPU seconds are less sensitive to other load).

    python bench/bench_sim.py [--events 400000] [--broker-events 300000] [--write-docs]
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.report import write_section  # noqa: E402
from fencewatch.sim.run import run_simulation  # noqa: E402
from fencewatch.sim.world import SimConfig  # noqa: E402
from fencewatch.sim.profiles import profile  # noqa: E402

# Sizes: 500 groups x 3 members x 2 topics x 6 partitions (6,000 group-partitions); the small
# cases use 20 groups (the per-event cost without the cache pressure of thousands of clients).
SIZE = dict(groups=500, members_per_group=3, topics=2, partitions_per_topic=6)
SMALL = 20


def config(name: str, events: int, *, labels: bool = True, **knobs) -> SimConfig:
    return SimConfig(
        knobs=dataclasses.replace(profile(name), **{**SIZE, **knobs}),
        seed=1,
        duration_ms=None,
        max_events=events,
        labels=labels,
    )


def timed(fn) -> tuple[dict, float, float]:
    gc.collect()
    c0, w0 = time.process_time(), time.perf_counter()
    summary = fn()
    return summary, time.perf_counter() - w0, time.process_time() - c0


def bench_file(events: int, repeat: int) -> list[tuple[str, int, float, float, int]]:
    rows = []
    cases = [
        (f"steady, {SMALL} groups, JSON, labels", "steady", "json", True, SMALL),
        (f"eos-heavy, {SMALL} groups, JSON, labels", "eos-heavy", "json", True, SMALL),
        ("steady, JSON, labels", "steady", "json", True, None),
        ("steady, JSON, no labels", "steady", "json", False, None),
        ("eos-heavy, JSON, labels", "eos-heavy", "json", True, None),
        ("zombie-storm, JSON, labels", "zombie-storm", "json", True, None),
        ("mixed, JSON, labels", "mixed", "json", True, None),
        ("steady, Avro container, labels", "steady", "avro", True, None),
    ]
    with tempfile.TemporaryDirectory() as tmp:
        for title, name, fmt, labels, groups in cases:
            best = None
            path = os.path.join(tmp, f"out.{fmt}")
            n = events if fmt == "json" else events // 4
            size = {} if groups is None else {"groups": groups}
            for _ in range(repeat):
                summary, wall, cpu = timed(
                    lambda: run_simulation(config(name, n, labels=labels, **size), fmt=fmt, out=path)
                )
                if best is None or wall < best[2]:
                    best = (title, summary["events"], wall, cpu, os.path.getsize(path))
            rows.append(best)
            print(f"{best[0]:<38} {best[1] / best[2]:>10,.0f} events/s wall {best[1] / best[3]:>10,.0f} /CPU-s", flush=True)
    return rows


def bench_broker(events: int) -> list[tuple[str, int, float, float, int]]:
    from fencewatch.streaming.brokers import embedded_broker

    rows = []
    with embedded_broker(os.environ.get("FENCEWATCH_BENCH_BROKER", "kafka")) as broker:
        for title, name, fmt in (("steady, JSON, labels -> Kafka", "steady", "json"),
                                 ("eos-heavy, JSON, labels -> Kafka", "eos-heavy", "json"),
                                 ("steady, Avro (Confluent) -> Kafka", "steady", "avro")):
            suffix = f"{name}-{fmt}-{os.getpid()}"
            n = events if fmt == "json" else events // 4
            summary, wall, cpu = timed(lambda: run_simulation(
                config(name, n), fmt=fmt, bootstrap_servers=broker.bootstrap,
                heartbeats_topic=f"bench.hb.{suffix}", offsets_topic=f"bench.off.{suffix}", topic_partitions=4))
            rows.append((title, summary["events"], wall, cpu, 0))
            print(f"{title:<38} {summary['events'] / wall:>10,.0f} events/s wall {summary['events'] / cpu:>10,.0f} /CPU-s",
                  flush=True)
    return rows


def bench_request_log(events: int, repeat: int) -> str:
    """``--format request-log``: contract events simulated and written as broker request-log lines."""
    cases = [
        ("steady, default versions", "steady", {}),
        ("eos-heavy, default versions", "eos-heavy", {}),
        ("mixed, all broker and client versions", "mixed", {"broker_versions": "all", "client_versions": "all"}),
    ]
    lines = [f"{'case':<40}{'events':>10}{'lines':>10}{'lines/s wall':>15}{'per CPU-s':>12}{'bytes/line':>12}"]
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "request.log")
        for title, name, options in cases:
            best = None
            for _ in range(repeat):
                summary, wall, cpu = timed(lambda: run_simulation(
                    config(name, events, labels=False, groups=SMALL * 5), fmt="request-log", out=path, **options))
                if best is None or wall < best[2]:
                    best = (summary["events"], summary["lines"], wall, cpu, os.path.getsize(path))
            n, count, wall, cpu, size = best
            lines.append(f"{title:<40}{n:>10,}{count:>10,}{count / wall:>15,.0f}{count / cpu:>12,.0f}{size / count:>12,.0f}")
            print(lines[-1], flush=True)
    lines.append(f"{SMALL * 5} groups, seed 1; load average at the end: {os.getloadavg()[0]:.2f} (2 shared cores)")
    return "```\n" + "\n".join(lines) + "\n```"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=400_000, help="events per file run (Avro: a quarter)")
    parser.add_argument("--broker-events", type=int, default=300_000, help="events per broker run (Avro: a quarter)")
    parser.add_argument("--repeat", type=int, default=2, help="file runs per case (best is reported)")
    parser.add_argument("--no-broker", action="store_true", help="skip the broker runs")
    parser.add_argument("--write-docs", action="store_true", help="write the results to docs/benchmarks.md")
    parser.add_argument("--request-log-events", type=int, default=100_000,
                        help="events per --format request-log run (0 = skip)")
    parser.add_argument("--request-log-only", action="store_true", help="only the --format request-log runs")
    args = parser.parse_args()

    if args.request_log_events:
        body = bench_request_log(args.request_log_events, args.repeat)
        if args.write_docs:
            write_section("simulator, request-log lines (fencewatch simulate --format request-log)",
                          f"python bench/bench_sim.py --request-log-only --request-log-events {args.request_log_events}"
                          f" --repeat {args.repeat}",
                          body)
    if args.request_log_only:
        return 0

    print(f"sizes: {SIZE}; seed 1; load average {os.getloadavg()[0]:.2f}", flush=True)
    rows = bench_file(args.events, args.repeat)
    if not args.no_broker:
        rows += bench_broker(args.broker_events)
    load = os.getloadavg()[0]
    lines = [
        f"sizes: {SIZE['groups']} groups (unless stated) x {SIZE['members_per_group']} members x {SIZE['topics']} "
        f"topics x {SIZE['partitions_per_topic']} partitions, profile defaults otherwise, seed 1; each run includes "
        "the groups' initial joins",
        f"{'case':<40}{'events':>10}{'events/s wall':>16}{'per CPU-s':>12}{'bytes/event':>13}",
    ]
    for title, n, wall, cpu, size in rows:
        per_event = f"{size / n:,.0f}" if size else "-"
        lines.append(f"{title:<40}{n:>10,}{n / wall:>16,.0f}{n / cpu:>12,.0f}{per_event:>13}")
    lines.append(f"load average at the end: {load:.2f} (2 shared cores; per CPU-s = this process's CPU time)")
    lines.append("Kafka runs include topic creation and the final single-record flush per partition.")
    body = "```\n" + "\n".join(lines) + "\n```"
    print(body)
    if args.write_docs:
        command = "python bench/bench_sim.py" + "".join(
            f" --{k.replace('_', '-')} {v}" for k, v in (("events", args.events), ("broker_events", args.broker_events))
        )
        write_section("simulator (fencewatch simulate)", command, body)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""``python -m fencewatch.sim.live``: play the scripted fencing cases (and a load) with real
clients against a Kafka cluster, write what each case expects, and optionally check those
expectations against the broker's request log.

    python -m fencewatch.sim.live --bootstrap-servers 127.0.0.1:9092 --scenario all --short
    python -m fencewatch.sim.live --bootstrap-servers B --scenario all --groups 8 --commits 20000 \\
        --expectations-out exp.jsonl
    python -m fencewatch.sim.live --check exp.jsonl --request-log kafka-request.log --broker-version 4.3.1
"""

from __future__ import annotations

import argparse
import logging
import sys

from .driver import LOADS, SCENARIOS, run, scenario_names
from .expect import check, dump_expectations, load_expectations, read_request_log

log = logging.getLogger("fencewatch.sim.live")


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m fencewatch.sim.live", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bootstrap-servers", metavar="HOSTS", help="the cluster (PLAINTEXT for the hand-built cases)")
    p.add_argument("--scenario", default="all",
                   help=f"all, none (the load alone), or names separated by commas: {', '.join(SCENARIOS)}")
    p.add_argument("--groups", type=int, default=0, help="load: this many groups beside the scenarios (0: none)")
    p.add_argument("--members", type=int, default=3, help="load: members per group (default %(default)s)")
    p.add_argument("--commits", type=int, default=0, help="load: run until this many commits were answered")
    p.add_argument("--rate", type=float, default=400.0,
                   help="load: commits per second over all members, roughly (0: as fast as they go)")
    p.add_argument("--load", choices=LOADS, default="steady",
                   help="load: steady (--groups x --members) or fences (fence_load.py's own groups: members "
                        "stalled, replaced, scaled; any --groups > 0 switches it on)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--short", action="store_true", help="the quick variant of every scenario (tests)")
    p.add_argument("-X", dest="client_config", action="append", default=[], metavar="KEY=VALUE",
                   help="librdkafka setting for every client (repeatable)")
    p.add_argument("--expectations-out", metavar="FILE", help="write the expectations here (JSON lines)")
    p.add_argument("--check", metavar="EXPECTATIONS", help="check these expectations instead of running")
    p.add_argument("--request-log", metavar="FILE", help="the broker's request log, to check against")
    p.add_argument("--broker-version", metavar="V", help="the broker's Kafka version, e.g. 4.3.1 (for --check)")
    p.add_argument("--log-level", default="INFO")
    return p


def _check(expectations_file: str, request_log: str, version: str) -> int:
    with open(expectations_file, encoding="utf-8") as f:
        expectations = load_expectations(f)
    with open(request_log, encoding="utf-8", errors="replace") as f:
        objects = read_request_log(f, {e.api for e in expectations})
    results = check(expectations, objects, version)
    bad = [r for r in results if not r.ok]
    for r in results:
        e = r.expectation
        print(f"{'ok  ' if r.ok else 'FAIL'} {e.scenario}/{e.case} (api {e.api}, {e.group_id}): {r.detail}")
    print(f"{len(results) - len(bad)} of {len(results)} expectations hold on {version}")
    return 1 if bad else 0


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s %(message)s")
    if args.check:
        if not (args.request_log and args.broker_version):
            print("--check needs --request-log and --broker-version", file=sys.stderr)
            return 2
        return _check(args.check, args.request_log, args.broker_version)
    if not args.bootstrap_servers:
        print("give --bootstrap-servers (or --check)", file=sys.stderr)
        return 2
    try:
        names = [] if args.scenario == "none" else scenario_names(args.scenario)
        extra = dict(kv.split("=", 1) for kv in args.client_config)
    except ValueError as exc:
        print(f"{exc}", file=sys.stderr)
        return 2
    result = run(args.bootstrap_servers, names, groups=args.groups, commits=args.commits, members=args.members,
                 rate=args.rate, seed=args.seed, short=args.short, client_config=extra, load=args.load)
    if args.expectations_out:
        with open(args.expectations_out, "w", encoding="utf-8") as f:
            f.write(dump_expectations(result.expectations))
    print(result.summary())
    return 1 if result.failed else 0


if __name__ == "__main__":
    sys.exit(main())

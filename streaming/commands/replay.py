"""``fencewatch replay``: judge a JSON-lines file of events with the local engine (or Spark's)."""
from __future__ import annotations

import argparse

from fencewatch.streaming.commands.common import add_rules_flags, build_config, maybe_print_config


def register(subparsers) -> None:
    p = subparsers.add_parser("replay", help="judge a JSON-lines file of events; verdicts as JSON lines")
    p.add_argument("events", help="JSON-lines file of events (docs/contract.md §1) ('-' for stdin)")
    p.add_argument("--out", help="verdicts file (default stdout)")
    p.add_argument("--alerts", help="alerts file (JSON lines)")
    p.add_argument("--engine", choices=("local", "spark"), default="local",
                   help="local: the rules in this process; spark: the same rules through Spark (default: %(default)s)")
    p.add_argument("--spark-master", default=None, help="Spark master for --engine spark (default local[2])")
    p.add_argument("--quiet", action="store_true", help="no summary on stderr")
    add_rules_flags(p)
    p.set_defaults(func=_cmd_replay)


def _cmd_replay(args: argparse.Namespace) -> int:
    from fencewatch.streaming.runtime.replay import run_replay

    cfg = build_config(args)
    if maybe_print_config(args, cfg):
        return 0
    rc = run_replay(args.events, out=args.out, alerts=args.alerts, cfg=cfg.state, engine=args.engine,
                    spark_master=args.spark_master, quiet=args.quiet)
    # Its outputs are written and closed; nothing but memory is left (see console_main).
    args.exit_without_teardown = args.engine == "local"
    return rc

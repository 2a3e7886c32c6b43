"""``fencewatch groups``: each group's members as the job last saw them, from its groups topic.

The job writes a group's snapshot (``state.group_view``) to the compacted ``sinks.groups_topic``
when its members, epochs or partitions change, or a commit is fenced; a forgotten group's
tombstone removes it. This command reads the topic to its end offsets and prints the latest
snapshot of each group: a table, each group's members (``--members``), JSON or an HTML page.
"""
from __future__ import annotations

import argparse
import json
import logging
import sys

log = logging.getLogger(__name__)


def register(subparsers) -> None:
    from fencewatch.streaming.commands.common import add_kafka_client_flags

    p = subparsers.add_parser(
        "groups", help="each group's members, member epochs and partitions, as the job last saw them",
        description="Read the job's groups topic (sinks.groups_topic, written by `fencewatch run --groups-topic`) "
                    "and show each group: type, state, group epoch, members, partitions assigned and pending "
                    "revocation with their assignment epochs, and the verdicts of its last snapshot. The running "
                    "job serves the same view at /groups on its metrics port. See docs/groups.md.")
    p.add_argument("--config", help="a YAML or JSON settings file (default: none)")
    add_kafka_client_flags(p, "the cluster holding the groups topic (default: streaming.bootstrap_servers)")
    p.add_argument("--groups-topic", metavar="TOPIC", help="the groups topic (default: sinks.groups_topic)")
    p.add_argument("--cluster", dest="only_cluster", metavar="NAME", help="this cluster's groups only (default: all)")
    p.add_argument("--group", metavar="GROUP", help="this group only, with its members (default: all groups)")
    p.add_argument("--members", action="store_true", help="each group's members below its line (default: off)")
    p.add_argument("--format", choices=("table", "json", "html"), default="table",
                   help="table (default), json (the snapshots), or html (the page /groups serves)")
    p.add_argument("--out", metavar="FILE", help="write to FILE rather than standard output (default: stdout)")
    p.set_defaults(func=_cmd_groups)


def _cmd_groups(args: argparse.Namespace) -> int:
    from fencewatch.sinks.group_views import GroupViews, parse_group_view_key, render_html, render_text
    from fencewatch.streaming.commands.common import build_config, pairs
    from fencewatch.streaming.commands.topic_reader import read_topic
    from fencewatch.streaming.config import ConfigError
    from fencewatch.streaming.config.settings import kafka_client_config

    extra = {"streaming": {"bootstrap_servers": args.bootstrap_servers, "kafka": pairs(args.kafka, "-X") or None},
             "sinks": {"groups_topic": args.groups_topic}}
    cfg = build_config(args, extra)
    topic = cfg.sinks.groups_topic
    if not topic:
        raise ConfigError("no groups topic: give --groups-topic (the topic `fencewatch run --groups-topic` writes) "
                          "or set sinks.groups_topic")
    views = GroupViews()
    unkeyed = 0

    def handle(key, value) -> None:
        nonlocal unkeyed
        group = parse_group_view_key(key)
        if group is None:
            unkeyed += 1
        else:
            views.apply([(*group, value)])

    read_topic(kafka_client_config(cfg, "consumer"), topic, handle, keyed=True, command="groups")
    if unkeyed or views.refused:
        log.warning("groups: %d record(s) of %s were not group snapshots this version reads; skipped",
                    unkeyed + views.refused, topic)
    shown = views.snapshot(args.only_cluster, args.group)
    if args.format == "json":
        text = json.dumps(shown, indent=2)
    elif args.format == "html":
        text = render_html(shown, title=f"fencewatch groups ({topic})").decode()
    else:
        text = render_text(shown, members=args.members or args.group is not None)
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            f.write(text + "\n")
        log.info("groups: %d group(s) written to %s", len(shown), args.out)
    else:
        sys.stdout.write(text + "\n")
    if args.group is not None and not shown:
        log.warning("groups: no snapshot of group %r in %s", args.group, topic)
        return 1
    return 0

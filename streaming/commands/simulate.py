"""``fencewatch simulate``: produce contract event traffic from the simulator (``sim/``).

What lives here: ``register(subparsers)``, the option parsers, and the
translation of the flags into what :func:`fencewatch.sim.run.run_simulation`
takes as plain arguments: a :class:`~fencewatch.sim.world.SimConfig`, and
producer settings passed through the one Kafka client translation every
fencewatch client gets (``streaming.config``). The engine, the Config and
the Kafka/Avro libraries are imported when the command runs, so the CLI
starts fast and never fails to build its parser.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os
import re
import sys
import time
from datetime import datetime, timezone
from typing import Any

from fencewatch.streaming.commands.common import pairs as key_value_pairs

log = logging.getLogger(__name__)

__all__ = ["parse_duration_flag", "parse_rate", "parse_start_ts", "register"]


def parse_duration_flag(text: str) -> int:
    """``90`` (seconds), ``90s``, ``10m``, ``2h``, ``1d``, ``500ms`` -> milliseconds (the config's one parser)."""
    from fencewatch.streaming.config import settings as cfgmod

    try:
        return cfgmod.parse_duration_ms(text, "duration", bare="s")
    except cfgmod.ConfigError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def parse_rate(text: str) -> tuple[str, float | None]:
    """``asap``, ``N`` (events/s of wall time), ``realtime`` or ``realtime:K`` (K x simulated time)."""
    value = text.strip().lower()
    if value == "asap":
        return "asap", None
    if value.startswith("realtime"):
        speed = value.partition(":")[2] or "1"
        try:
            factor = float(speed)
        except ValueError:
            raise argparse.ArgumentTypeError(f"rate {text!r}: realtime speed must be a number") from None
        if factor <= 0:
            raise argparse.ArgumentTypeError(f"rate {text!r}: realtime speed must be > 0")
        return "realtime", factor
    try:
        rate = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"rate {text!r}: expected asap, events/s, or realtime[:speed]") from None
    if rate <= 0:
        raise argparse.ArgumentTypeError(f"rate {text!r}: must be > 0 events/s")
    return "events", rate


def parse_start_ts(text: str) -> int:
    """Epoch milliseconds, an ISO 8601 time (UTC if no zone), or ``now`` (not reproducible)."""
    value = text.strip()
    if value == "now":
        return int(time.time() * 1000)
    if re.fullmatch(r"\d{10,}", value):
        return int(value)
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"start time {text!r}: expected epoch ms, ISO 8601, or now") from None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=timezone.utc)
    return int(parsed.timestamp() * 1000)


def register(subparsers: Any) -> argparse.ArgumentParser:
    """Add ``simulate`` to the ``fencewatch`` command line."""
    from fencewatch.sim.profiles import PROFILES

    p = subparsers.add_parser(
        "simulate",
        help="produce simulated KIP-848 / classic group traffic (events of docs/contract.md §1) to a file or Kafka",
        description=(
            "Simulate consumer groups as a Kafka coordinator sees them and write fencewatch's input event stream "
            "(docs/contract.md §1): heartbeats, member assignments, commits with the broker's answer (Kafka <= 4.2), "
            "partition facts, with optional ground-truth labels. Deterministic for a given seed and options. "
            "See docs/simulator.md."
        ),
    )
    p.add_argument("--profile", default="steady", choices=sorted(PROFILES), help="traffic profile (default steady)")
    p.add_argument("--list-profiles", action="store_true", help="print the profiles and their knobs, then exit")
    p.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    size = p.add_argument_group("size (override the profile)")
    size.add_argument("--groups", type=int, help="number of consumer groups")
    size.add_argument("--members-per-group", type=int, help="members per group")
    size.add_argument("--topics", type=int, help="topics per group")
    size.add_argument("--partitions-per-topic", type=int, help="partitions per topic")
    size.add_argument(
        "--set",
        dest="knobs",
        action="append",
        default=[],
        metavar="KNOB=VALUE",
        help="override any profile knob, e.g. --set race_rate=0.2 (repeatable; see --list-profiles)",
    )
    _add_span_flags(p)
    out = _add_output_flags(p)
    _add_request_log_flags(p)
    _add_kafka_flags(out)
    labels = out.add_mutually_exclusive_group()
    labels.add_argument("--labels", dest="labels", action="store_true", default=True, help="add ground-truth labels (default)")
    labels.add_argument("--no-labels", dest="labels", action="store_false", help="omit ground-truth labels")
    out.add_argument("--assignment-epochs", action="store_true", help="include KIP-1251 assignment_epochs (a Kafka 4.3 coordinator)")
    out.add_argument("--cluster", help="cluster name on every event (default: field omitted, i.e. 'default')")
    out.add_argument("--quiet", action="store_true", help="no summary on stderr")
    p.set_defaults(func=_cmd_simulate)
    return p


def _add_span_flags(p: argparse.ArgumentParser) -> None:
    span = p.add_argument_group("span and pace")
    span.add_argument(
        "--duration",
        type=parse_duration_flag,
        help="simulated time to cover: 600 (s), 10m, 2h; 0 = no limit (default 10m unless --events)",
    )
    span.add_argument("--events", type=int, help="stop after exactly N events")
    span.add_argument(
        "--rate",
        type=parse_rate,
        default=("asap", None),
        help="asap (default), N events/s of wall time, or realtime[:K] (simulated time at K x wall time)",
    )
    span.add_argument(
        "--start-ts",
        type=parse_start_ts,
        help="simulated start: epoch ms, ISO 8601, or now (default 2025-01-01T00:00:00Z, reproducible)",
    )


def _add_output_flags(p: argparse.ArgumentParser):
    out = p.add_argument_group("output")
    out.add_argument(
        "--format",
        choices=("json", "avro", "request-log"),
        default="json",
        help="event encoding (default json); request-log: the broker's kafka.request.logger lines (contract §10)",
    )
    out.add_argument("--out", help="output file, '-' for stdout (default stdout unless --bootstrap-servers)")
    out.add_argument("--bootstrap-servers", help="write to Kafka topics instead of a file")
    out.add_argument("--heartbeats-topic", default="fencewatch.heartbeats", help="membership events topic (default: %(default)s)")
    out.add_argument("--offsets-topic", default="fencewatch.offsets", help="commit and partition events topic (default: %(default)s)")
    return out


def _add_request_log_flags(p: argparse.ArgumentParser) -> None:
    from fencewatch.sim.request_log import DEFAULT_BROKER_VERSIONS, RELEASES

    reqlog = p.add_argument_group("request-log format (--format request-log; docs/simulator.md)")
    reqlog.add_argument(
        "--request-log-topic",
        help="with --bootstrap-servers: the topic of log lines, one line per record, key = group id "
        "(default fencewatch.request-log)",
    )
    reqlog.add_argument("--topic-ids-out", help="write the topic ids of the lines as the bridge's --topic-ids JSON file")
    reqlog.add_argument(
        "--broker-versions",
        default=",".join(DEFAULT_BROKER_VERSIONS),
        help=f"broker releases coordinating the groups, e.g. 3.7,4.0,4.2 or all (default {','.join(DEFAULT_BROKER_VERSIONS)}; "
        f"known: {', '.join(RELEASES)})",
    )
    reqlog.add_argument(
        "--client-versions",
        choices=("newest", "all"),
        default="newest",
        help="newest: clients speak their broker's newest versions; all: groups spread over every version the broker accepts (default: %(default)s)",
    )


def _add_kafka_flags(out) -> None:
    out.add_argument("--topic-partitions", type=int, default=4, help="partitions of topics the command creates (default 4)")
    out.add_argument(
        "--avro-wire",
        choices=("confluent", "plain"),
        default="confluent",
        help="Avro on Kafka: Confluent wire format (magic byte + schema id) or plain body (default: %(default)s)",
    )
    out.add_argument("--schema-id", type=int, default=1, help="schema id in the Confluent wire format (default 1)")
    out.add_argument(
        "--producer-config",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="extra librdkafka producer property (repeatable), e.g. security.protocol=SASL_SSL",
    )


def _knobs_from_args(args: argparse.Namespace):
    from fencewatch.sim.profiles import parse_knob, profile, validate

    knobs = profile(args.profile)
    sizes = {
        "groups": args.groups,
        "members_per_group": args.members_per_group,
        "topics": args.topics,
        "partitions_per_topic": args.partitions_per_topic,
    }
    knobs = dataclasses.replace(knobs, **{k: v for k, v in sizes.items() if v is not None})
    for assignment in args.knobs:
        knobs = parse_knob(knobs, assignment)
    return validate(knobs)


def _list_profiles() -> int:
    from fencewatch.sim.profiles import PROFILES, Knobs

    defaults = Knobs()
    for name, knobs in PROFILES.items():
        changed = [
            f"{f.name}={getattr(knobs, f.name)}"
            for f in dataclasses.fields(Knobs)
            if getattr(knobs, f.name) != getattr(defaults, f.name)
        ]
        print(f"{name}: {', '.join(changed) or '(defaults)'}")
    print("defaults: " + ", ".join(f"{f.name}={getattr(defaults, f.name)}" for f in dataclasses.fields(Knobs)))
    return 0


def _usage_error(args: argparse.Namespace) -> str | None:
    """What is wrong with a combination of flags (exit 2), or None."""
    if args.events is not None and args.events < 0:
        return "--events must be >= 0"
    if args.format != "request-log" and args.topic_ids_out:
        return "--topic-ids-out needs --format request-log"
    if args.request_log_topic and not (args.format == "request-log" and args.bootstrap_servers):
        return "--request-log-topic needs --format request-log and --bootstrap-servers"
    if args.format == "request-log":
        from fencewatch.sim.request_log import parse_broker_versions

        try:
            parse_broker_versions(args.broker_versions)
        except ValueError as exc:
            return f"--broker-versions: {exc}"
    if args.bootstrap_servers and args.out is not None:
        return "give either --out or --bootstrap-servers, not both"
    return None


def _producer_config(args: argparse.Namespace, pairs: dict[str, str]) -> dict[str, str]:
    """With a broker, the pairs merged and translated as every fencewatch client's are.

    The one translation (streaming.config.kafka_client_config): merged over
    FENCEWATCH_STREAMING__KAFKA__*, Java names translated or refused with a
    ConfigError (the CLI reports it, redacted).
    """
    if not args.bootstrap_servers:
        return pairs
    from fencewatch.streaming.config import settings as cfgmod

    cfg = cfgmod.load_config(overrides={"streaming": {"bootstrap_servers": args.bootstrap_servers, "kafka": pairs}})
    return {k: v for k, v in cfgmod.kafka_client_config(cfg, "producer").items() if k != "bootstrap.servers"}


def _sim_config(args: argparse.Namespace, knobs):
    from fencewatch.sim.world import DEFAULT_START_TS, SimConfig

    if args.duration is not None:
        duration = args.duration or None
    else:
        duration = None if args.events is not None else 600_000
    if duration is None and args.events is None and args.rate[0] == "asap":
        log.warning("no --duration or --events limit: simulating until interrupted")
    return SimConfig(
        knobs=knobs,
        seed=args.seed,
        start_ts=args.start_ts if args.start_ts is not None else DEFAULT_START_TS,
        duration_ms=duration,
        max_events=args.events,
        labels=args.labels,
        cluster=args.cluster,
        assignment_epochs=args.assignment_epochs,
    )


def _cmd_simulate(args: argparse.Namespace) -> int:
    if args.list_profiles:
        return _list_profiles()
    from fencewatch.sim.run import run_simulation

    try:
        knobs = _knobs_from_args(args)
        problem = _usage_error(args)
        pairs = {} if problem else key_value_pairs(args.producer_config, "--producer-config")
    except ValueError as exc:
        problem = str(exc)
    if problem:
        print(f"fencewatch simulate: {problem}", file=sys.stderr)
        return 2
    producer_config = _producer_config(args, pairs)
    config = _sim_config(args, knobs)
    try:
        summary = run_simulation(
            config,
            fmt=args.format,
            out=args.out,
            bootstrap_servers=args.bootstrap_servers,
            heartbeats_topic=args.heartbeats_topic,
            offsets_topic=args.offsets_topic,
            topic_partitions=args.topic_partitions,
            avro_wire=args.avro_wire,
            schema_id=args.schema_id,
            producer_config=producer_config,
            pace=args.rate,
            request_log_topic=args.request_log_topic or "fencewatch.request-log",
            topic_ids_out=args.topic_ids_out,
            broker_versions=args.broker_versions,
            client_versions=args.client_versions,
        )
    except BrokenPipeError:
        # The reader (e.g. `| head`) went away: not an error. Point stdout at /dev/null so the
        # interpreter's final flush does not complain about the closed pipe.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except (OSError, RuntimeError, ValueError) as exc:
        print(f"fencewatch simulate: {exc}", file=sys.stderr)
        return 1
    if not args.quiet:
        _print_summary(args, summary)
    return 0


def _print_summary(args: argparse.Namespace, summary: dict[str, Any]) -> None:
    topics = (args.request_log_topic or "fencewatch.request-log") if args.format == "request-log" else f"{args.heartbeats_topic}+{args.offsets_topic}"
    target = args.bootstrap_servers and f"{topics} @ {args.bootstrap_servers}" or (args.out or "stdout")
    stats = ", ".join(f"{k}={v}" for k, v in sorted(summary["stats"].items()))
    print(
        f"fencewatch simulate: profile={args.profile} seed={args.seed} events={summary['events']} "
        f"simulated={summary['simulated_ms'] / 1000:.1f}s wall={summary['seconds']:.2f}s "
        f"rate={summary['events_per_s']:,.0f}/s -> {target}" + (f" [{stats}]" if stats else ""),
        file=sys.stderr,
    )
    if "lines" in summary:
        skipped = ", ".join(f"{k}={v}" for k, v in summary["skipped"].items())
        versions = ", ".join(f"{k}={v}" for k, v in summary["versions"].items())
        print(
            f"fencewatch simulate: request-log lines={summary['lines']} [{versions}]; "
            f"events the log cannot carry, skipped: {skipped or 'none'}",
            file=sys.stderr,
        )

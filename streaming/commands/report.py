"""``fencewatch report``: what an upgrade to KIP-1251 would change, as one HTML page and a JSON
summary with the same numbers (``sinks/report``).

Inputs, any mix: verdict JSON-lines files (``replay``'s output) and ``--alerts`` files; the job's
verdicts and alerts topics (``--bootstrap-servers``), each read from its beginning to the end
offsets seen at start, with progress on stderr; or a trace of contract §1 events (``--events``) judged
first by replay's local engine. ``--compare BEFORE.json AFTER.json`` compares a 4.2 run's
summary with a 4.3 run's (``sinks/report/compare.py``) instead.
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from operator import attrgetter
from typing import Callable

import msgspec

from fencewatch.sinks.report.assemble import summarize
from fencewatch.streaming.commands.topic_reader import Progress, read_topic
from fencewatch.sinks.report.summary import ReportAggregator, rank_policy
from fencewatch.state.model import OUTPUT_NAMES, POLICY_ANSWERS, Verdict

log = logging.getLogger(__name__)



def _verdict_types() -> dict[str, object]:
    import typing

    return typing.get_type_hints(Verdict)


# The verdict fields the report reads (contract §8.1), typed as state.model.Verdict declares them;
# the record's other fields are skipped unparsed. Required: what every verdict record has.
_READ_REQUIRED = ("event_id", "ts", "group_id", "kind", *POLICY_ANSWERS, "cls")
_READ_OPTIONAL = ("cluster", "member_id", "unsafe", "broker_error", "model_agrees", "warming_up")
VerdictLine = msgspec.defstruct(
    "VerdictLine",
    [(f, _verdict_types()[f], msgspec.field(name=OUTPUT_NAMES.get(f, f))) for f in _READ_REQUIRED]
    + [(f, _verdict_types()[f] | None, msgspec.field(default=None, name=OUTPUT_NAMES.get(f, f)))
       for f in _READ_OPTIONAL],
    module=__name__)


_VERDICT = msgspec.json.Decoder(VerdictLine)
_ANSWERS = attrgetter(*POLICY_ANSWERS)  # a verdict's policies' answers, as ReportAggregator.add_fields takes them
_JSON = msgspec.json.Decoder()


def parse_time(text: str, flag: str) -> int:
    """Epoch milliseconds, or an ISO 8601 time (UTC unless it names an offset)."""
    from fencewatch.streaming.config import ConfigError

    t = text.strip()
    if t.lstrip("-").isdigit():
        return int(t)
    try:
        dt = datetime.fromisoformat(t.replace("Z", "+00:00"))
    except ValueError:
        raise ConfigError(f"{flag} {text!r}: expected epoch milliseconds or an ISO 8601 time "
                          "(2026-11-20T09:00:00Z)") from None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=timezone.utc)
    return int(dt.timestamp() * 1000)


# --------------------------------------------------------------------------- reading

def fold_verdict_line(agg: ReportAggregator, line: bytes, source: int) -> None:
    try:
        v = _VERDICT.decode(line)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        agg.reject(source, "verdict", exc)
        return
    agg.add_fields(v.ts, v.cluster, v.group_id, v.kind, _ANSWERS(v), v.cls, v.unsafe, v.broker_error, v.model_agrees,
                   v.warming_up, v.event_id, v.member_id, source=source)


def fold_alert_value(agg: ReportAggregator, value: bytes, source: int) -> None:
    """An alert as JSON, or Avro in the Confluent wire format (magic byte 0), as the job writes it."""
    try:
        if value[:1] == b"\x00":
            from fencewatch.sinks.kafka import decode_alert_avro

            alert = decode_alert_avro(value)
        else:
            alert = _JSON.decode(value)
        if not isinstance(alert, dict):
            raise ValueError(f"not an alert record: {type(alert).__name__}")
    except Exception as exc:  # fastavro and msgspec raise several types on bad bytes
        agg.reject(source, "alert", exc)
        return
    agg.add_alert(alert, source)


def read_file(agg: ReportAggregator, path: str, kind: str,
              fold: Callable[[ReportAggregator, bytes, int], None]) -> None:
    source = agg.input(kind, path)
    progress = Progress(path)
    with (sys.stdin.buffer if path == "-" else open(path, "rb")) as fh:
        for line in fh:
            if line.strip():
                fold(agg, line, source)
                progress.step()
    progress.done()


def read_events(agg: ReportAggregator, path: str, cfg) -> dict | None:
    """Judge a trace with replay's local engine and fold its verdicts and alerts; returns what the
    trace says about its own membership (event types, assignments carrying assignment epochs)."""
    from fencewatch.sinks.jsonl import alert_dict

    from fencewatch.streaming.runtime.replay import replay_file

    facts = _trace_facts(path) if path != "-" else None  # stdin is read once, by replay
    t0 = time.monotonic()
    result = replay_file(path, cfg)
    log.info("report: judged %s: %d events in %.1fs", path, result.events, time.monotonic() - t0)
    source = agg.input("events (replayed)", path)
    for err in result.errors:
        agg.reject(source, "event", ValueError(str(err)))
    for cv in result.commit_verdicts:
        for v in cv.expand():
            agg.add_fields(v.ts, v.cluster, v.group_id, v.kind, _ANSWERS(v), v.cls, v.unsafe, v.broker_error,
                           v.model_agrees, v.warming_up, v.event_id, v.member_id, source=source)
    alerts = agg.input("alerts (replayed)", path)
    for a in result.alert_records:
        agg.add_alert(alert_dict(a), alerts)
    for cluster, group in (facts or {}).get("streams_groups", ()):
        agg.mark_streams_group(cluster, group)
    return facts


class _Typed(msgspec.Struct):
    type: str | None = None


class _Grouped(msgspec.Struct):
    cluster: str | None = None
    group_id: str | None = None
    protocol: str | None = None


def _trace_facts(path: str) -> dict:
    """Event types, assignments with epochs, and the streams groups (a ``streams_topology``, or a
    ``member_assignment`` with ``protocol: streams``): verdicts do not carry a group's type."""
    decode = msgspec.json.Decoder(_Typed).decode
    grouped = msgspec.json.Decoder(_Grouped).decode
    types: dict[str, int] = {}
    with_epochs = 0
    streams: set[tuple[str, str]] = set()
    with open(path, "rb") as fh:
        for line in fh:
            try:
                t = decode(line).type
            except (msgspec.DecodeError, msgspec.ValidationError):
                continue
            types[t] = types.get(t, 0) + 1
            if t == "member_assignment" and b'"assignment_epochs"' in line:
                with_epochs += 1
            if t == "streams_topology" or (t == "member_assignment" and b'"streams"' in line):
                try:
                    g = grouped(line)
                except (msgspec.DecodeError, msgspec.ValidationError):
                    continue
                if g.group_id and (t == "streams_topology" or g.protocol == "streams"):
                    streams.add((g.cluster or "default", g.group_id))
    return {"types": types, "assignments_with_epochs": with_epochs, "streams_groups": sorted(streams)}


# --------------------------------------------------------------------------- the command

def register(subparsers) -> None:
    from fencewatch.streaming.commands.common import add_kafka_client_flags, add_rules_flags

    p = subparsers.add_parser(
        "report", help="what moving the brokers to KIP-1251 would change: one HTML page and a JSON summary",
        description="Read the job's verdicts and alerts (files, the job's topics, or a trace judged first by "
                    "replay) and write one self-contained HTML page and a JSON summary with the same numbers: "
                    "commits rejected under the brokers' check, how many each relaxed check would accept, the "
                    "transactions they aborted, the unsafe accepts each would let through, zombie and stale commits, "
                    "offset expiry and truncation. See docs/report.md.")
    p.add_argument("verdicts", nargs="*", metavar="VERDICTS.jsonl", help="verdict JSON-lines files ('-' = stdin)")
    p.add_argument("--alerts", action="append", default=[], metavar="FILE", help="alert JSON-lines file, repeatable")
    p.add_argument("--events", metavar="TRACE.jsonl", help="a trace of fencewatch events (docs/contract.md §1): "
                   "judge it with replay's local engine first (the rules flags below apply)")
    k = p.add_argument_group("topics (the job's outputs)")
    add_kafka_client_flags(k, "read --verdicts-topic and --alerts-topic from this cluster")
    k.add_argument("--verdicts-topic", help="the job's verdicts topic (e.g. fencewatch.verdicts)")
    k.add_argument("--alerts-topic", help="the job's alerts topic (Avro or JSON; e.g. fencewatch.alerts)")
    p.add_argument("--streams-group", dest="streams_groups", action="append", default=[], metavar="[CLUSTER/]GROUP",
                   help="a streams group (KIP-1071) of the verdicts read, repeatable: the report's streams section "
                        "counts what the relaxed check saves it (a trace given with --events names its own)")
    r = p.add_argument_group("range and output")
    r.add_argument("--from", dest="from_time", help="keep records at or after this time (epoch ms or ISO 8601)")
    r.add_argument("--to", dest="to_time", help="keep records at or before this time (epoch ms or ISO 8601)")
    r.add_argument("--out", default="report.html", help="the HTML page (default report.html)")
    r.add_argument("--json", dest="json_out", help="the JSON summary (default: the page's name with .json)")
    r.add_argument("--compare", nargs=2, metavar=("BEFORE.json", "AFTER.json"),
                   help="compare two summaries of one scenario, run on a strict (4.2) and a KIP-1251 (4.3) broker, "
                        "print the predicted against the observed avoided fences, and exit")
    add_rules_flags(p)
    p.set_defaults(func=_cmd_report)


def _cmd_report(args: argparse.Namespace) -> int:
    from fencewatch.streaming.commands.common import build_config, maybe_print_config, pairs
    from fencewatch.streaming.config import ConfigError

    if args.compare:
        return _compare(args)
    extra = {"streaming": {"bootstrap_servers": args.bootstrap_servers, "kafka": pairs(args.kafka, "-X") or None}}
    cfg = build_config(args, extra)
    if maybe_print_config(args, cfg):
        return 0
    topics = [t for t in (args.verdicts_topic, args.alerts_topic) if t]
    if topics and not args.bootstrap_servers:
        raise ConfigError("--verdicts-topic / --alerts-topic need --bootstrap-servers")
    if args.bootstrap_servers and not topics:
        raise ConfigError("--bootstrap-servers needs --verdicts-topic and/or --alerts-topic")
    if not (args.verdicts or args.alerts or args.events or topics):
        raise ConfigError("nothing to read: give verdict files, --alerts, --events, or topics (see --help)")
    agg = ReportAggregator(cfg.state.broker_policy.value,
                           from_ms=parse_time(args.from_time, "--from") if args.from_time else None,
                           to_ms=parse_time(args.to_time, "--to") if args.to_time else None,
                           streams_broker_policy=cfg.state.streams_broker_policy.value)
    for group in args.streams_groups:
        cluster, sep, gid = group.rpartition("/")
        agg.mark_streams_group(cluster if sep else None, gid)
    facts: dict = {"verdicts_read": bool(args.verdicts or args.events or args.verdicts_topic),
                   "alerts_read": bool(args.alerts or args.events or args.alerts_topic), "topics": topics}
    for path in args.verdicts:
        read_file(agg, path, "verdicts file", fold_verdict_line)
    for path in args.alerts:
        read_file(agg, path, "alerts file", fold_alert_value)
    if args.events:
        facts["events"] = read_events(agg, args.events, cfg.state)  # None: what the trace held is unknown
    if topics:
        _read_topics(agg, cfg, args)
    summary = summarize(agg, **facts)
    json_out = args.json_out or str(Path(args.out).with_suffix(".json"))
    _write_outputs(summary, args.out, json_out)
    print(summary_text(summary, args.out, json_out))
    return 0


def _read_topics(agg: ReportAggregator, cfg, args: argparse.Namespace) -> None:
    from fencewatch.streaming.config import kafka_client_config

    client = {k: v for k, v in kafka_client_config(cfg, "consumer").items()}
    if args.verdicts_topic:
        source = agg.input("verdicts topic", args.verdicts_topic)

        def verdicts(value: bytes) -> None:
            for line in value.split(b"\n"):  # one line a record; a block of lines is read the same way
                if line.strip():
                    fold_verdict_line(agg, line, source)

        read_topic(client, args.verdicts_topic, verdicts)
    if args.alerts_topic:
        source = agg.input("alerts topic", args.alerts_topic)
        read_topic(client, args.alerts_topic, lambda value: fold_alert_value(agg, value, source))


def _write_outputs(summary: dict, out: str, json_out: str) -> None:
    from fencewatch.sinks.report.page import render

    Path(json_out).write_text(json.dumps(summary, indent=1) + "\n")
    _atomic_write(out, render(summary, json_name=os.path.basename(json_out)))


def _atomic_write(path: str, text: str) -> None:
    tmp = f"{path}.tmp"
    Path(tmp).write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def summary_text(s: dict, out: str | None = None, json_out: str | None = None) -> str:
    """The command's closing lines: the headline numbers with their policy and range."""
    t, b, r = s["totals"], s["broker_policy"], rank_policy(s["broker_policy"])
    rng = s["range"]
    lines = [f"fencewatch report: {t['requests']:,} commit requests ({t['verdicts']:,} verdicts) in "
             f"{len(s['groups']):,} group(s) of {len(s['clusters'])} cluster(s), {rng['from']} to {rng['to']}",
             f"  rejected under {b} (the brokers' check): {t['rejected']['requests']:,} requests "
             f"({t['rejected']['verdicts']:,} verdicts)"]
    if t["avoidable"]:
        lines.append("  avoidable (would be accepted): " + ", ".join(
            f"{p} {c['requests']:,}" for p, c in t["avoidable"].items()))
    lines.append(f"  aborted transactions under {b}: {t['aborted_transactions']['requests']:,}"
                 + "".join(f", {p} saves {n:,}" for p, n in t["aborted_transactions"]["saved"].items()))
    lines.append("  unsafe accepts added (verdicts): " + ", ".join(
        f"{p} {t['unsafe'][p]['added']:,}" for p in s["relaxed_policies"]))
    lines.append(f"  zombie {t['zombie']['verdicts']:,}, stale {t['stale']['verdicts']:,} verdicts; "
                 f"expiry forecasts for {s['expiry']['counts']['groups_forecast']:,} group(s), "
                 f"{s['expiry']['counts']['expired_offsets']:,} offsets expired; "
                 f"{s['truncation']['counts']['LOG_TRUNCATION']:,} log truncations, "
                 f"{s['truncation']['counts']['OFFSET_OUT_OF_RANGE']:,} out of range")
    if s.get("streams", {}).get("groups"):
        lines.append("  streams groups: " + s["streams"]["statement"])
    if s["limits"]:
        lines.append("  the input could not show: " + ", ".join(x["code"] for x in s["limits"]))
    if out:
        lines.append(f"  wrote {out} ({os.path.getsize(out):,} bytes) and {json_out}; ranked by {r}")
    return "\n".join(lines)


def _compare(args: argparse.Namespace) -> int:
    from fencewatch.sinks.report.compare import compare, render_text

    before, after = (json.loads(Path(p).read_text()) for p in args.compare)
    result = compare(before, after)
    print(render_text(result))
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(result, indent=1) + "\n")
    return 0

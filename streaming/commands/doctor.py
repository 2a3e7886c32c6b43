"""``fencewatch doctor``: check, and explain, every precondition of a real deployment.

It reads the configuration exactly as ``fencewatch run`` does (the same flags, ``--config``
file, ``FENCEWATCH_*`` environment and ``-X`` Kafka settings) and prints one line per check:
``OK``, ``WARN`` (works, but something is off or could not be checked), ``FAIL`` (the job
would not work as configured) or ``SKIP`` (not checked: an earlier failure), what was
checked, and after ``Fix:`` what to do. It exits 1 when a line says FAIL, else 0.

Checks, in order: the configuration itself; ``FENCEWATCH_*`` variables that set nothing; the
connection and authentication; the ACLs the job needs (``runtime.access.job_needs``, read from
the authorized operations the brokers report for this principal, never by writing); the
brokers' releases, KIP-848 and ``broker_policy``; the request-log topic's freshness and how its
newest lines decode (``--source request-log``); topic ids; the Schema Registry (when one is
set); the checkpoint and the metrics port. The Kafka checks are in ``doctor_kafka``.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from dataclasses import dataclass, field
from typing import TextIO

from fencewatch.streaming.config import settings as cfgmod

STATUSES = ("OK", "WARN", "FAIL", "SKIP")


@dataclass
class Report:
    """The lines printed so far; each is printed as soon as its check ends (secrets redacted)."""

    out: TextIO = field(default_factory=lambda: sys.stdout)
    lines: list[tuple[str, str, str]] = field(default_factory=list)

    def add(self, status: str, check: str, text: str, fix: str | None = None) -> None:
        from fencewatch.streaming.config.logsetup import redact

        assert status in STATUSES, status
        text = redact(text + (f" Fix: {fix}" if fix else ""))
        self.lines.append((status, check, text))
        print(f"{status:<4}  {check:<20}  {text}", file=self.out, flush=True)

    def count(self, status: str) -> int:
        return sum(1 for s, _, _ in self.lines if s == status)

    def finish(self) -> int:
        failed, warned = self.count("FAIL"), self.count("WARN")
        verdict = "ready" if not failed else "not ready: fix the FAIL lines and run it again"
        print(f"fencewatch doctor: {failed} failed, {warned} warning(s), {self.count('OK')} ok: {verdict}",
              file=self.out, flush=True)
        return 1 if failed else 0


def _cmd_doctor(args: argparse.Namespace) -> int:
    if getattr(args, "print_config", False):
        from fencewatch.streaming.commands.common import build_config, maybe_print_config
        from fencewatch.streaming.commands.run import _streaming_overrides

        maybe_print_config(args, build_config(args, _streaming_overrides(args)))
        return 0
    report = Report()
    cfg = check_config(report, args)
    check_environment(report, os.environ)
    if cfg is None:
        report.add("SKIP", "kafka", "not checked: the configuration does not load")
        return report.finish()
    check_cluster(report, cfg, args)
    check_registry(report, cfg, args.timeout)
    check_checkpoint(report, cfg)
    check_metrics_port(report, cfg)
    return report.finish()


def check_config(report: Report, args: argparse.Namespace) -> cfgmod.Config | None:
    """The effective configuration, as `run` builds it (a failure here is the first FAIL)."""
    from fencewatch.streaming.commands.common import build_config
    from fencewatch.streaming.commands.run import _streaming_overrides, _with_default_warmup

    try:
        cfg = _with_default_warmup(build_config(args, _streaming_overrides(args)), args)
    except cfgmod.ConfigError as exc:
        first, *rest = str(exc).splitlines()
        report.add("FAIL", "config", " ".join([first, "; ".join(r.strip() for r in rest)]).strip(),
                   "fix the setting named (flags, --config file, FENCEWATCH_* environment; "
                   "docs/reference-config.yaml lists them all)")
        return None
    avro = cfgmod.alerts_format(cfg) == "avro"
    alerts = "Avro (a Schema Registry is set)" if avro else "JSON (no Schema Registry)"
    report.add("OK", "config", f"loads (digest {cfgmod.digest(cfg)}): --source {cfg.streaming.source}, alerts as "
               f"{alerts}, broker_policy {cfg.state.broker_policy.value}")
    return cfg


def check_environment(report: Report, environ) -> None:
    from fencewatch.streaming.config.env_check import env_problems

    problems = env_problems(environ)
    for p in problems:
        hint = f"use {p.nearest}" if p.nearest else "remove it, or name a setting: docs/reference-config.yaml"
        report.add("FAIL" if p.fatal else "WARN", "environment", f"{p.name} {p.problem}", hint)
    if not problems:
        n = sum(1 for name in environ if name.startswith(cfgmod.ENV_PREFIX))
        report.add("OK", "environment", f"{n} FENCEWATCH_* variable(s), each a setting (or another part's)")


def check_cluster(report: Report, cfg: cfgmod.Config, args: argparse.Namespace) -> None:
    from confluent_kafka import KafkaException

    from fencewatch.streaming.sources.cluster_probe import ClusterProbe

    probe = ClusterProbe(cfgmod.kafka_client_config(cfg, "admin"), timeout_s=args.timeout)
    try:
        _cluster_checks(report, cfg, args, probe)
    except KafkaException as exc:  # a request that failed after the connection worked
        report.add("FAIL", "kafka", f"a request failed: {exc.args[0].str() if exc.args else exc}; later Kafka "
                   "checks not run", "run it again; if it repeats, see the brokers' logs")
    finally:
        probe.close()


def _cluster_checks(report: Report, cfg: cfgmod.Config, args: argparse.Namespace, probe) -> None:
    from fencewatch.streaming.commands import doctor_kafka as kafka

    view = kafka.check_connection(report, cfg, probe)
    if view is None:
        report.add("SKIP", "kafka", "ACLs, brokers, KIP-848, request log and topic ids not checked: no connection")
        return
    readable = kafka.check_access(report, cfg, probe)
    brokers = kafka.check_brokers(report, cfg, probe, view)
    kafka.check_kip848(report, probe, brokers)
    kafka.check_policy(report, cfg, brokers)
    sample = None
    if "request-log" in cfgmod.source_list(cfg.streaming.source):
        sample = _request_log_checks(report, cfg, args, probe, view, readable)
    kafka.check_topic_ids(report, cfg, view, sample)


def _request_log_checks(report: Report, cfg: cfgmod.Config, args: argparse.Namespace, probe, view, readable):
    """Freshness, then the newest lines' decoding with the topic names this principal sees."""
    from fencewatch.streaming.commands import doctor_kafka as kafka

    topic = cfg.streaming.request_log_topic
    if not readable.get(topic):
        report.add("SKIP", "request-log", f"{topic} not read: see its acl line")
        return None
    tail = kafka.check_request_log(report, cfg, probe, lines=args.lines, max_age_s=args.max_age,
                                   now_ms=int(time.time() * 1000))
    if tail is None or not tail.records:
        return None
    ids = probe.topic_ids(view.topics)
    if cfg.streaming.topic_ids_file:
        from fencewatch.streaming.commands.bridge import load_topic_ids

        ids.update(load_topic_ids(cfg.streaming.topic_ids_file))
    return kafka.check_lines(report, cfg, tail, ids)


def check_registry(report: Report, cfg: cfgmod.Config, timeout_s: float) -> None:
    settings = cfg.streaming.schema_registry
    if not settings.get("url"):
        if cfg.streaming.input_format == "avro":
            report.add("WARN", "schema registry", "none set, and --input-format avro: records must carry "
                       "fencewatch's fixed schema id 1; a registry's ids go to the dead-letter topic as "
                       "UNKNOWN_SCHEMA_ID", "set streaming.schema_registry.url")
        else:
            report.add("OK", "schema registry", "none set: alerts are JSON")
        return
    from fencewatch.streaming.ingest.schema_registry import RegistryUnavailable, probe_registry

    subject = f"{cfg.sinks.alerts_topic}-value"
    try:
        subjects, version = probe_registry(settings, subject, timeout_s=timeout_s)
    except ImportError as exc:
        report.add("FAIL", "schema registry", str(exc), "pip install 'fencewatch[registry]'")
        return
    except RegistryUnavailable as exc:
        report.add("FAIL", "schema registry", f"{settings['url']} does not answer: {exc}",
                   "fix streaming.schema_registry.url and its credentials (basic.auth.user.info, ssl.*), or unset "
                   "it to write alerts as JSON")
        return
    auto = str(settings.get("auto.register.schemas", "true")).lower() in ("1", "true", "yes", "on")
    alerts_avro = cfgmod.alerts_format(cfg) == "avro"
    if version is None and alerts_avro and not auto:
        report.add("FAIL", "schema registry", f"{settings['url']} answers ({subjects} subjects), but {subject} has "
                   "no schema and auto.register.schemas is false: the first alert would fail",
                   f"register docs/schemas/fencewatch-alert.avsc under {subject} (docs/deploy.md, Schema Registry)")
        return
    where = (f"{subject} version {version}" if version is not None
             else f"{subject} registered at the first alert" if alerts_avro else "alerts are JSON")
    report.add("OK", "schema registry", f"{settings['url']} answers ({subjects} subjects; {where})")


def check_checkpoint(report: Report, cfg: cfgmod.Config) -> None:
    from fencewatch.streaming.runtime.checkpoint import is_local, writable_problem

    location = cfg.streaming.checkpoint_location
    if not is_local(location):
        report.add("WARN", "checkpoint", f"{location} not checked: a remote file system is reached through Spark's "
                   "Hadoop client, which only the job starts", "check the job's first micro-batch: it writes there "
                   "first (credentials, bucket policy, hadoop-aws on spark.jars.packages: docs/deploy.md)")
        return
    problem = writable_problem(location)
    if problem is not None:
        report.add("FAIL", "checkpoint", f"{location}: {problem}", "give a writable folder (--checkpoint, "
                   "streaming.checkpoint_location) owned by the job's user, on storage that survives restarts")
    else:
        report.add("OK", "checkpoint", f"{location} is writable")


def check_metrics_port(report: Report, cfg: cfgmod.Config) -> None:
    from fencewatch.sinks.exposition import port_problem

    k = cfg.sinks
    problem = port_problem(k.metrics_host, k.metrics_port)
    if problem is not None:
        report.add("FAIL", "metrics port", f"{problem}: the job serves /metrics, /healthz and /readyz there",
                   "stop what listens there, or choose another port (--metrics-port, sinks.metrics_port)")
    else:
        report.add("OK", "metrics port", f"{k.metrics_host}:{k.metrics_port} is free" if k.metrics_port
                   else f"{k.metrics_host}: any free port (metrics_port 0)")


def register(subparsers) -> None:
    from fencewatch.streaming.commands.common import add_rules_flags, add_spark_flags
    from fencewatch.streaming.commands.run import _streaming_flags

    p = subparsers.add_parser("doctor", help="check a deployment's preconditions with `run`'s configuration "
                              "(connection, ACLs, broker versions, request log, registry, checkpoint, port)",
                              description=__doc__.split("\n\n")[1])
    _streaming_flags(p)
    add_rules_flags(p)
    add_spark_flags(p)
    g = p.add_argument_group("doctor")
    g.add_argument("--timeout", type=cfgmod.duration_s_arg, default=10.0,
                   help="how long each Kafka or registry request may take (default 10s)")
    g.add_argument("--lines", type=cfgmod.positive_int_arg, default=1_000, help="request-log lines to decode, the newest (default 1000)")
    g.add_argument("--max-age", type=cfgmod.duration_s_arg, default=300.0,
                   help="a request-log partition with nothing newer is stale (default 5m)")
    p.set_defaults(func=_cmd_doctor)

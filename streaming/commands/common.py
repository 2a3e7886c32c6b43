"""What every command shares: the rules and Spark flags, and how flags become the one Config
(defaults < file < environment < flags; then logging as configured)."""
from __future__ import annotations

import argparse
import json
from typing import Sequence

from fencewatch.streaming.config import logsetup
from fencewatch.streaming.config import settings as cfgmod


def add_rules_flags(p: argparse.ArgumentParser) -> None:
    c = p.add_argument_group("configuration")
    c.add_argument("--config", help="configuration file (YAML, or JSON when named *.json); flags win over it and "
                   "over FENCEWATCH_* variables (docs/reference-config.yaml lists every setting)")
    c.add_argument("--print-config", action="store_true",
                   help="print the effective (redacted) config, checked as at a start, and exit")
    g = p.add_argument_group("rules")
    g.add_argument("--warmup", help="warm-up after a group is first seen (e.g. 45s); default 0 for replay")
    g.add_argument("--retention", help="offsets.retention.minutes as a duration (default 7d)")
    g.add_argument("--retention-check-interval", help="offsets.retention.check.interval.ms (default 10m)")
    g.add_argument("--expiry-warning", help="OFFSETS_EXPIRING lead time (default 1h)")
    g.add_argument("--broker-policy", help="policy of the broker that answered error_code (default strict)")
    g.add_argument("--streams-broker-policy", help="the same for streams groups (default kip1251, as Kafka 4.2+)")
    g.add_argument("--alert-cooldown", help="fold repeated per-commit alerts of a group within this window (default 60s)")


def add_spark_flags(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("spark")
    g.add_argument("--conf", dest="spark_conf", action="append", default=[], metavar="KEY=VALUE",
                   help="any spark.* setting (spark.driver.memory=4g, spark.executor.instances=3), repeatable; "
                        "adds to streaming.spark_conf from the file and environment")


def add_kafka_client_flags(g, bootstrap_help: str) -> None:
    """``--bootstrap-servers`` and ``-X`` for a command that reads the job's topics (``report``, ``groups``)."""
    g.add_argument("--bootstrap-servers", help=bootstrap_help)
    g.add_argument("-X", dest="kafka", action="append", default=[], metavar="KEY=VALUE",
                   help="Kafka client setting (security.protocol, sasl.*, ssl.*), repeatable")


def pairs(items: Sequence[str], flag: str) -> dict[str, str]:
    out = {}
    for item in items or ():
        k, sep, v = item.partition("=")
        if not sep or not k.strip():
            raise cfgmod.ConfigError(f"{flag} {item!r}: expected KEY=VALUE")
        out[k.strip()] = v.strip()
    return out


def flag_durations(overrides: dict) -> dict:
    """Flags carry no unit in their names: a bare number there means seconds, as in every
    command (``--duration 90``, ``--max-skew 2``); ``*_ms`` settings get milliseconds."""
    for section, values in overrides.items():
        for key, value in values.items():
            if key.endswith("_ms") and isinstance(value, str):
                values[key] = cfgmod.parse_duration_ms(value, f"{section}.{key}", bare="s")
    return overrides


def require_extra(module: str, extra: str, command: str) -> None:
    """A one-line error, not a traceback, when an optional extra is missing."""
    import importlib.util

    if importlib.util.find_spec(module) is None:
        raise cfgmod.ConfigError(f"{command} needs the optional '{extra}' dependencies: "
                                 f"pip install 'fencewatch[{extra}]' (or `make demo`)")


def rules_overrides(args: argparse.Namespace) -> dict:
    state = {}
    for flag, key in (("warmup", "warmup_ms"), ("retention", "offsets_retention_ms"),
                      ("retention_check_interval", "offsets_retention_check_interval_ms"),
                      ("expiry_warning", "expiry_warning_ms"), ("broker_policy", "broker_policy"),
                      ("streams_broker_policy", "streams_broker_policy"),
                      ("alert_cooldown", "alert_cooldown_ms")):
        v = getattr(args, flag, None)
        if v is not None:
            state[key] = v
    return {"state": state} if state else {}


def build_config(args: argparse.Namespace, extra: dict | None = None) -> cfgmod.Config:
    """Defaults < file < environment < these flags; then logging as configured (level, format)."""
    overrides = rules_overrides(args)
    for section, values in (extra or {}).items():
        overrides.setdefault(section, {}).update({k: v for k, v in values.items() if v is not None})
    spark_conf = pairs(getattr(args, "spark_conf", None), "--conf")
    if spark_conf:
        overrides.setdefault("streaming", {})["spark_conf"] = spark_conf
    logging_flags = {"level": getattr(args, "log_level", None), "format": getattr(args, "log_format", None)}
    overrides["logging"] = {k: v for k, v in logging_flags.items() if v is not None}
    cfg = cfgmod.load_config(file=getattr(args, "config", None), overrides=flag_durations(overrides))
    logsetup.configure(cfg.logging.level, cfg.logging.format)
    return cfg


def maybe_print_config(args: argparse.Namespace, cfg: cfgmod.Config) -> bool:
    if getattr(args, "print_config", False):
        print(json.dumps(cfgmod.redacted(cfg), indent=2, sort_keys=True))
        return True
    return False

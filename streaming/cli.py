"""The ``fencewatch`` console script: parse flags, build the Config, call one command."""
from __future__ import annotations

import argparse
import importlib
import json
import logging
import os
import sys
from typing import Sequence

from fencewatch.streaming.config import settings as cfgmod
from fencewatch.streaming.config import logsetup

log = logging.getLogger("fencewatch")

# Subcommands living next to the code they drive, by name; each module has ``register(subparsers)``.
_COMMAND_MODULES = {
    "simulate": "fencewatch.streaming.commands.simulate",
    "bridge": "fencewatch.streaming.commands.bridge",
    "grafana": "fencewatch.streaming.commands.grafana",
    "run": "fencewatch.streaming.commands.run",
    "demo": "fencewatch.streaming.commands.demo",
    "checkpoint": "fencewatch.streaming.commands.checkpoint",
    "report": "fencewatch.streaming.commands.report",
    "doctor": "fencewatch.streaming.commands.doctor",
}


def _add_rules_flags(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("rules")
    g.add_argument("--config", help="configuration file (YAML or JSON); see docs/reference-config.yaml")
    g.add_argument("--warmup", help="warm-up after a group is first seen (e.g. 45s); default 0 for replay")
    g.add_argument("--retention", help="offsets.retention.minutes as a duration (default 7d)")
    g.add_argument("--retention-check-interval", help="offsets.retention.check.interval.ms (default 10m)")
    g.add_argument("--expiry-warning", help="OFFSETS_EXPIRING lead time (default 1h)")
    g.add_argument("--broker-policy", help="policy of the broker that answered error_code (default strict)")
    g.add_argument("--alert-cooldown", help="fold repeated per-commit alerts of a group within this window (default 60s)")
    g.add_argument("--print-config", action="store_true", help="print the effective (redacted) config and exit")


def add_spark_flags(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("spark")
    g.add_argument("--conf", dest="spark_conf", action="append", default=[], metavar="KEY=VALUE",
                   help="any spark.* setting (spark.driver.memory=4g, spark.executor.instances=3), repeatable; "
                        "adds to streaming.spark_conf from the file and environment")


def _pairs(items: Sequence[str], flag: str) -> dict[str, str]:
    out = {}
    for item in items or ():
        k, sep, v = item.partition("=")
        if not sep or not k.strip():
            raise cfgmod.ConfigError(f"{flag} {item!r}: expected KEY=VALUE")
        out[k.strip()] = v.strip()
    return out


def _flag_durations(overrides: dict) -> dict:
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
    spark_conf = _pairs(getattr(args, "spark_conf", None), "--conf")
    if spark_conf:
        overrides.setdefault("streaming", {})["spark_conf"] = spark_conf
    logging_flags = {"level": getattr(args, "log_level", None), "format": getattr(args, "log_format", None)}
    overrides["logging"] = {k: v for k, v in logging_flags.items() if v is not None}
    cfg = cfgmod.load_config(file=getattr(args, "config", None), overrides=_flag_durations(overrides))
    logsetup.configure(cfg.logging.level, cfg.logging.format)
    return cfg


def maybe_print_config(args: argparse.Namespace, cfg: cfgmod.Config) -> bool:
    if getattr(args, "print_config", False):
        print(json.dumps(cfgmod.redacted(cfg), indent=2, sort_keys=True))
        return True
    return False


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


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """Every command's parser; with ``argv``, only the named command's module is imported (the
    bridge's alone took longer to import than replaying a small file), all of them for help."""
    named = next((a for a in argv or () if a == "replay" or a in _COMMAND_MODULES), None)
    parser = argparse.ArgumentParser(prog="fencewatch", description=__doc__)
    parser.add_argument("--version", action=_Version, help="show the versions of fencewatch and its runtime, and exit")
    _add_logging_flags(parser, default=None)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    p = sub.add_parser("replay", help="judge a JSON-lines file of events; verdicts as JSON lines")
    p.add_argument("events", help="JSON-lines file of events (docs/contract.md §1) ('-' for stdin)")
    p.add_argument("--out", help="verdicts file (default stdout)")
    p.add_argument("--alerts", help="alerts file (JSON lines)")
    p.add_argument("--engine", choices=("local", "spark"), default="local")
    p.add_argument("--spark-master", default=None, help="Spark master for --engine spark (default local[2])")
    p.add_argument("--quiet", action="store_true", help="no summary on stderr")
    _add_rules_flags(p)
    p.set_defaults(func=_cmd_replay)

    wanted = (dict.fromkeys(_COMMAND_MODULES.values()) if named is None
              else [_COMMAND_MODULES[named]] if named in _COMMAND_MODULES else [])
    for name in wanted:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name != name:
                raise
            continue
        module.register(sub)
    _logging_flags_everywhere(parser)
    return parser


def _add_logging_flags(parser: argparse.ArgumentParser, default=None) -> None:
    parser.add_argument("--log-level", default=default,
                        help="DEBUG, INFO, WARNING, ERROR (default: logging.level, INFO)")
    parser.add_argument("--log-format", default=default, choices=("text", "json"),
                        help="text, or one JSON object per line (default: logging.format, text)")


def _logging_flags_everywhere(parser: argparse.ArgumentParser) -> None:
    """``--log-level`` and ``--log-format`` after the command too (``fencewatch run --log-level
    DEBUG``), in every command and sub-command: given there, they win; not given, they leave the
    value given before the command (SUPPRESS: the sub-parser sets nothing)."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in dict.fromkeys(action.choices.values()):  # aliases map to the same parser
                if "--log-level" not in sub._option_string_actions:
                    _add_logging_flags(sub, default=argparse.SUPPRESS)
                _logging_flags_everywhere(sub)


def version_text() -> str:
    """``fencewatch X (Python, pyspark, confluent-kafka/librdkafka)``: what a bug report needs."""
    from fencewatch.sinks.build_info import installed, running_versions

    try:
        import confluent_kafka

        librdkafka = confluent_kafka.libversion()[0]
    except ImportError:
        librdkafka = "unknown"
    v = running_versions()
    return (f"fencewatch {v['version']} (Python {v['python_version']}, pyspark {v['pyspark_version']}, "
            f"confluent-kafka {installed('confluent-kafka')}, librdkafka {librdkafka})")


class _Version(argparse.Action):
    """``--version``, computed only when asked (no imports at start-up)."""

    def __init__(self, option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS, help=None):
        super().__init__(option_strings, dest=dest, default=default, nargs=0, help=help)

    def __call__(self, parser, namespace, values, option_string=None):
        print(version_text())
        parser.exit()


def main(argv: Sequence[str] | None = None) -> int:
    return _run(argv)[0]


def _run(argv: Sequence[str] | None) -> tuple[int, argparse.Namespace | None]:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = build_parser(argv).parse_args(argv)
    # Until the config is read (build_config applies logging.level and logging.format).
    logsetup.configure(args.log_level or "INFO", args.log_format or "text")
    try:
        return int(args.func(args) or 0), args
    except cfgmod.ConfigError as exc:
        print(f"fencewatch: {logsetup.redact(str(exc))}", file=sys.stderr)
        return 2, None
    except (FileNotFoundError, PermissionError, IsADirectoryError) as exc:  # an input or output path
        print(f"fencewatch: {exc.strerror}: {exc.filename}", file=sys.stderr)
        return 2, None
    except KeyboardInterrupt:
        return 130, None


def console_main() -> None:
    """The ``fencewatch`` script. A local replay holds millions of objects at the end, and
    freeing them one by one at interpreter exit takes time that grows with the verdicts
    (docs/decisions.md, "The rules engine"): once its outputs are written and closed, it exits
    at once (as mypy does); other commands exit normally (Spark and the exporters have shutdown
    hooks)."""
    rc, args = _run(None)
    if getattr(args, "exit_without_teardown", False):
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(rc)
    sys.exit(rc)


if __name__ == "__main__":
    console_main()

"""The ``fencewatch`` console script: parse flags, build the Config, call one command."""
from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
from typing import Sequence

from fencewatch.streaming.config import settings as cfgmod
from fencewatch.streaming.config import logsetup

log = logging.getLogger("fencewatch")

# Subcommands living next to the code they drive, by name; each module has ``register(subparsers)``.
_COMMAND_MODULES = {
    "replay": "fencewatch.streaming.commands.replay",
    "simulate": "fencewatch.streaming.commands.simulate",
    "bridge": "fencewatch.streaming.commands.bridge",
    "grafana": "fencewatch.streaming.commands.grafana",
    "run": "fencewatch.streaming.commands.run",
    "demo": "fencewatch.streaming.commands.demo",
    "checkpoint": "fencewatch.streaming.commands.checkpoint",
    "report": "fencewatch.streaming.commands.report",
    "doctor": "fencewatch.streaming.commands.doctor",
    "groups": "fencewatch.streaming.commands.groups",
}


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """Every command's parser; with ``argv``, only the named command's module is imported (the
    bridge's alone took longer to import than replaying a small file), all of them for help."""
    named = next((a for a in argv or () if a in _COMMAND_MODULES), None)
    parser = _Parser(prog="fencewatch", description=DESCRIPTION,
                     epilog="`fencewatch COMMAND --help` for a command's options; docs/reference-config.yaml "
                            "for every setting (file, FENCEWATCH_* environment, flags)")
    parser.add_argument("--version", action=_Version, help="show the versions of fencewatch and its runtime, and exit")
    _add_logging_flags(parser, default=None)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

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


DESCRIPTION = ("Watch Kafka's group coordinator: judge every offset commit against the group's members, "
               "epochs and assignments (KIP-848), and alert on the ones a fenced or zombie member made.")


class _Parser(argparse.ArgumentParser):
    """A usage error is one line on stderr, exit 2 (argparse's code): the command, the error and
    where the options are listed, not the whole usage block."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (see `{self.prog} --help`)\n")


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

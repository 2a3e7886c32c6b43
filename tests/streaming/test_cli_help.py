"""Every ``fencewatch`` option says what it does and, when it has a default, what that is
(issue 46). Walks the parsers only: no Spark, no broker."""
from __future__ import annotations

import argparse
import subprocess
import sys

from fencewatch.streaming.cli import build_parser


def _parsers(parser: argparse.ArgumentParser, prog: str = "fencewatch"):
    yield prog, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _parsers(sub, f"{prog} {name}")


def _options():
    for prog, parser in _parsers(build_parser()):
        for action in parser._actions:
            if action.option_strings and not isinstance(action, argparse._HelpAction):
                yield prog, action


# A flag's default is its absence; an empty list is "none given" for a repeatable option.
_FLAGS = (argparse._StoreTrueAction, argparse._StoreFalseAction, argparse._StoreConstAction)


def _shows_default(action: argparse.Action) -> bool:
    text = action.help or ""
    return "default" in text.lower()  # "%(default)s" or a default written out


def test_every_option_has_help():
    missing = [f"{prog} {a.option_strings[0]}" for prog, a in _options()
               if a.help is not argparse.SUPPRESS and not (a.help or "").strip()]
    assert not missing, missing


def test_every_default_is_shown():
    hidden = [f"{prog} {a.option_strings[0]} (default {a.default!r})" for prog, a in _options()
              if a.help is not argparse.SUPPRESS and a.default not in (None, False, argparse.SUPPRESS)
              and a.default != [] and not isinstance(a, _FLAGS)
              and not _shows_default(a)]
    assert not hidden, hidden


def test_top_level_help_prints_no_code_comment():
    out = subprocess.run([sys.executable, "-m", "fencewatch.streaming.cli", "--help"],
                         capture_output=True, text=True, timeout=60, check=True).stdout
    assert "#" not in out, out


def test_no_help_page_prints_a_code_comment():
    commented = [f"{prog}: {line.strip()}" for prog, parser in _parsers(build_parser())
                 for line in parser.format_help().splitlines() if "#" in line]
    assert not commented, commented

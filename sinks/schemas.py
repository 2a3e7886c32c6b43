"""The Avro schema files (``.avsc``) of what fencewatch reads and writes, for a Schema Registry.

Why generated: the schemas are declared once, in ``state/records.py`` (``event_avro_schema``
from the event declarations, ``alert_avro_schema`` from ``model.Alert``); the files are that
declaration written out, checked in under ``docs/schemas/`` so a user can register them (or
compare a registered version) without running Python, and a test fails when they drift.

    python -m fencewatch.sinks.schemas             # rewrite docs/schemas/*.avsc
    python -m fencewatch.sinks.schemas --check     # exit 1 if a checked-in file is stale
    python -m fencewatch.sinks.schemas --out DIR   # write them elsewhere (an installed package)
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Callable

from fencewatch.state.records import alert_avro_schema, event_avro_schema


#: The checked-in copies (this repository's docs/schemas/; absent in an installed package).
SCHEMA_DIR = Path(__file__).resolve().parent.parent / "docs" / "schemas"
#: File name -> the declaration it is written from.
SCHEMAS: dict[str, Callable[[], dict[str, Any]]] = {
    "fencewatch-event.avsc": event_avro_schema,
    "fencewatch-alert.avsc": alert_avro_schema,
}


def render(schema: dict[str, Any]) -> str:
    """A schema as its file's text: indented JSON, keys in declaration order, a final newline."""
    return json.dumps(schema, indent=2, ensure_ascii=False) + "\n"


def stale(directory: Path = SCHEMA_DIR) -> list[str]:
    """The files of ``directory`` that are missing or differ from the declaration."""
    out = []
    for name, schema in SCHEMAS.items():
        path = directory / name
        if not path.exists() or path.read_text(encoding="utf-8") != render(schema()):
            out.append(name)
    return out


def write(directory: Path = SCHEMA_DIR) -> list[Path]:
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for name, schema in SCHEMAS.items():
        path = directory / name
        path.write_text(render(schema()), encoding="utf-8")
        written.append(path)
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m fencewatch.sinks.schemas", description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=SCHEMA_DIR, help=f"folder to write (default {SCHEMA_DIR})")
    parser.add_argument("--check", action="store_true", help="exit 1 if a file in --out differs from the declaration")
    args = parser.parse_args(argv)
    if args.check:
        bad = stale(args.out)
        for name in bad:
            print(f"{args.out / name} is out of date: run python -m fencewatch.sinks.schemas", file=sys.stderr)
        return 1 if bad else 0
    for path in write(args.out):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())

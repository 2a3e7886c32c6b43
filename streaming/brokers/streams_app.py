"""fencewatch's Kafka Streams application (``streams-app/``, issue 45), run as child processes.

What lives here: :func:`resolve_app` finds the application ``make streams-app`` built against a
Kafka Streams version (``<jars root>/streams-app-<version>/``, the cache of
:func:`~fencewatch.streaming.brokers.kafka.jars_root`); :class:`StreamsApp` runs N instances of
one ``application.id`` (one streams group) as JVMs, each its own process group with its own
state directory, and starts, SIGKILLs, stalls (SIGSTOP/SIGCONT), stops and adds instances, so a
test moves tasks while commits are in flight. Each instance's stdout (the application's
``fencewatch-streams ...`` lines) and stderr (its log, Kafka's layout) go to files in the app's
temporary folder, removed by :meth:`StreamsApp.close`.

Children die with this process (parent-death signal) and at interpreter exit.

Imports: standard library, confluent_kafka, the helpers of brokers/common.py and brokers/kafka.py.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import re
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import weakref
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

from fencewatch.streaming.brokers.common import _PRCTL, BrokerStartError, _parent_death_preexec, _quiet_client_logger
from fencewatch.streaming.brokers.kafka import _java, installed_versions, jars_root, newest_match

log = logging.getLogger(__name__)

MAIN_CLASS = "dev.fencewatch.streams.StreamsApp"
APP_JAR = "fencewatch-streams-app.jar"
#: What every line the application prints for a caller starts with (StreamsApp.PREFIX).
LINE_PREFIX = "fencewatch-streams "
PROCESSING_GUARANTEES = ("exactly_once_v2", "at_least_once")
#: Seconds between SIGTERM and SIGKILL: longer than the application's own 30 s close timeout.
STOP_GRACE_S = 40.0


def installed_app_versions(root: Path | None = None) -> list[str]:
    """Kafka Streams versions the application was built against completely, oldest first."""
    return installed_versions(root, prefix="streams-app-")


def resolve_app(version: str, root: Path | None = None) -> tuple[str, Path]:
    """``"4.3"`` -> the newest built 4.3.x, ``"4.3.1"`` -> exactly that; with its folder."""
    root = root or jars_root()
    exact, built = newest_match(version, root, "streams-app-", "Kafka Streams")
    if not exact:
        raise BrokerStartError(f"no Kafka Streams application for {version.strip()} in {root} (built: "
                               f"{', '.join(built) or 'none'}); run `make streams-app`")
    return exact, root / f"streams-app-{exact}"


@dataclass(frozen=True, slots=True)
class StreamsAppConfig:
    """The application's settings (streams-app/.../StreamsApp.java names each flag)."""

    bootstrap_servers: str
    application_id: str
    input: str
    output: str
    processing_guarantee: str = "exactly_once_v2"
    group_protocol: str = "streams"
    num_stream_threads: int = 1
    commit_interval_ms: int | None = None
    #: Any further Streams, consumer or producer setting (``--config=name=value``).
    config: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.processing_guarantee not in PROCESSING_GUARANTEES:
            raise ValueError(f"unknown processing guarantee {self.processing_guarantee!r}; valid: "
                             f"{', '.join(PROCESSING_GUARANTEES)}")
        if self.num_stream_threads < 1:
            raise ValueError(f"num_stream_threads must be at least 1, got {self.num_stream_threads}")

    def args(self, *, state_dir: Path, client_id: str) -> list[str]:
        out = [f"--bootstrap-servers={self.bootstrap_servers}", f"--application-id={self.application_id}",
               f"--input={self.input}", f"--output={self.output}",
               f"--processing-guarantee={self.processing_guarantee}", f"--group-protocol={self.group_protocol}",
               f"--num-stream-threads={self.num_stream_threads}", f"--state-dir={state_dir}",
               f"--client-id={client_id}"]
        if self.commit_interval_ms is not None:
            out.append(f"--commit-interval-ms={self.commit_interval_ms}")
        out += [f"--config={k}={v}" for k, v in self.config.items()]
        return out


class StreamsInstance:
    """One running instance (a JVM in its own process group); made by :meth:`StreamsApp.add`."""

    def __init__(self, name: str, process: subprocess.Popen[bytes], stdout: Path, stderr: Path) -> None:
        self.name = name
        self.process = process
        self.stdout_path = stdout
        self.stderr_path = stderr
        self.stalled = False

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def is_alive(self) -> bool:
        return self.process.poll() is None

    def lines(self) -> list[str]:
        """The application's own lines so far (``fencewatch-streams `` removed)."""
        try:
            text = self.stdout_path.read_text(encoding="utf-8", errors="replace")
        except FileNotFoundError:
            return []
        return [line[len(LINE_PREFIX):] for line in text.splitlines() if line.startswith(LINE_PREFIX)]

    def log_tail(self, max_chars: int = 3000) -> str:
        try:
            return self.stderr_path.read_text(encoding="utf-8", errors="replace")[-max_chars:]
        except FileNotFoundError:
            return ""

    def _signal(self, sig: int) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.process.pid, sig)

    def kill(self) -> None:
        """SIGKILL: the instance dies mid-transaction, nothing closed, no leave heartbeat."""
        self._signal(signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=STOP_GRACE_S)
        self.stalled = False

    def stall(self) -> None:
        """SIGSTOP: frozen in place (a long GC pause); :meth:`resume` lets it go on."""
        self._signal(signal.SIGSTOP)
        self.stalled = True

    def resume(self) -> None:
        self._signal(signal.SIGCONT)
        self.stalled = False

    def stop(self, grace_s: float = STOP_GRACE_S) -> int | None:
        """SIGTERM (``KafkaStreams.close``: commits, leaves the group), SIGKILL after ``grace_s``."""
        if self.is_alive:
            if self.stalled:
                self.resume()
            self._signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                log.warning("Kafka Streams instance %s ignored SIGTERM for %.0fs; killing it", self.name, grace_s)
        self.kill()
        return self.process.returncode

    def wait_for(self, pattern: str, timeout_s: float = 60.0) -> str:
        """The first line of the application matching ``pattern`` (a regex), waiting for it."""
        regex = re.compile(pattern)
        deadline = time.monotonic() + timeout_s
        while True:
            for line in self.lines():
                if regex.search(line):
                    return line
            if not self.is_alive:
                raise BrokerStartError(f"Kafka Streams instance {self.name} exited ({self.process.returncode}) "
                                       f"before /{pattern}/; its log ends with:\n{self.log_tail()}")
            if time.monotonic() >= deadline:
                raise TimeoutError(f"Kafka Streams instance {self.name}: no /{pattern}/ within {timeout_s:.0f}s; "
                                   f"lines {self.lines()[-5:]}; its log ends with:\n{self.log_tail()}")
            time.sleep(0.1)

    def __repr__(self) -> str:
        state = "stalled" if self.stalled else "running" if self.is_alive else f"exited {self.process.returncode}"
        return f"StreamsInstance({self.name}, pid {self.pid}, {state})"


def set_group_config(bootstrap: str, group_id: str, settings: Mapping[str, str], timeout_s: float = 30.0) -> None:
    """A group's own settings (IncrementalAlterConfigs on the GROUP resource); one line if refused."""
    entries = [ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in settings.items()]
    resource = ConfigResource(ResourceType.GROUP, group_id, incremental_configs=entries)
    admin = AdminClient({"bootstrap.servers": bootstrap, "logger": _quiet_client_logger()})
    try:
        admin.incremental_alter_configs([resource])[resource].result(timeout_s)
    except KafkaException as exc:
        raise BrokerStartError(f"[group={group_id}] the broker refused group config {dict(settings)}: "
                               f"{exc.args[0].str() if exc.args else exc}") from None


_LIVE: weakref.WeakSet[StreamsApp] = weakref.WeakSet()
_LIVE_LOCK = threading.Lock()


@atexit.register
def _close_all() -> None:
    with _LIVE_LOCK:
        apps = list(_LIVE)
    for app in apps:
        app.close()


class StreamsApp:
    """Instances of one Kafka Streams application (``application.id``), started on demand.

    ``version`` picks the Kafka Streams build (``"4.3"`` or exact); ``heap`` each JVM's maximum;
    ``jvm_args`` go to every JVM; ``group_config`` are the streams group's own settings on the
    broker (KIP-1071: ``streams.session.timeout.ms``, ``streams.heartbeat.interval.ms``,
    ``streams.num.standby.replicas``), set before any instance starts. ``start(n)`` starts n
    instances and waits until each reports RUNNING; ``add()`` one more; ``instances`` lists
    them in start order (killed ones included).
    """

    def __init__(self, config: StreamsAppConfig, version: str = "4.2", *, heap: str = "256m",
                 jvm_args: tuple[str, ...] = (), group_config: Mapping[str, str] | None = None,
                 jars_dir: str | os.PathLike[str] | None = None) -> None:
        self.config = config
        self.version, self._app_dir = resolve_app(version, Path(jars_dir) if jars_dir is not None else None)
        if group_config:
            set_group_config(config.bootstrap_servers, config.application_id, group_config)
        self._heap = heap
        self._jvm_args = list(jvm_args)
        self._dir = Path(tempfile.mkdtemp(prefix=f"fencewatch-streams-{self.version}-"))
        self.instances: list[StreamsInstance] = []
        self._lock = threading.Lock()
        with _LIVE_LOCK:
            _LIVE.add(self)

    @property
    def directory(self) -> Path:
        return self._dir

    def _argv(self, name: str) -> list[str]:
        state_dir = self._dir / name / "state"
        state_dir.mkdir(parents=True, exist_ok=True)
        return [_java(), f"-Xmx{self._heap}", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
                "-Djava.awt.headless=true", f"-Djava.io.tmpdir={self._dir / name}", *self._jvm_args,
                "-cp", f"{self._app_dir}/*", MAIN_CLASS,
                *self.config.args(state_dir=state_dir, client_id=f"{self.config.application_id}-{name}")]

    def add(self, *, wait_running: bool = True, timeout_s: float = 90.0) -> StreamsInstance:
        """Start one more instance; with ``wait_running``, return once it reports RUNNING."""
        with self._lock:
            name = f"i{len(self.instances)}"
            folder = self._dir / name
            folder.mkdir(parents=True, exist_ok=True)
            stdout, stderr = folder / "stdout.log", folder / "stderr.log"
            main_thread = threading.current_thread() is threading.main_thread()
            with stdout.open("wb") as out, stderr.open("wb") as err:
                process = subprocess.Popen(
                    self._argv(name), stdin=subprocess.DEVNULL, stdout=out, stderr=err, cwd=folder,
                    start_new_session=True,
                    preexec_fn=_parent_death_preexec if main_thread and _PRCTL is not None else None)
            instance = StreamsInstance(name, process, stdout, stderr)
            self.instances.append(instance)
        log.info("Kafka Streams %s instance %s started (pid %d)", self.version, name, process.pid)
        if wait_running:
            instance.wait_for(r"^state=\w+->RUNNING$", timeout_s)
        return instance

    def start(self, n: int, *, timeout_s: float = 90.0) -> StreamsApp:
        """Start ``n`` instances, then wait until each reports RUNNING."""
        started = [self.add(wait_running=False) for _ in range(n)]
        for instance in started:
            instance.wait_for(r"^state=\w+->RUNNING$", timeout_s)
        return self

    @property
    def alive(self) -> list[StreamsInstance]:
        return [i for i in self.instances if i.is_alive]

    def close(self) -> None:
        """Stop every instance (SIGTERM, then SIGKILL) and remove the folder. Safe to call twice."""
        for instance in self.instances:
            if instance.is_alive:
                instance.stop()
        with _LIVE_LOCK:
            _LIVE.discard(self)
        shutil.rmtree(self._dir, ignore_errors=True)

    def __enter__(self) -> StreamsApp:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"StreamsApp({self.config.application_id}, Kafka Streams {self.version}, {self.instances})"

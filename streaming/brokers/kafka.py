"""Apache Kafka's own broker, one KRaft node on loopback, for the demo, the tests and benchmarks.

What lives here: :class:`KafkaBroker` runs ``kafka.Kafka`` from the jars ``make jars`` put in
a cache outside git (``$FENCEWATCH_JARS_DIR``, else ``$XDG_CACHE_HOME/fencewatch/jars``, one
``kafka-<version>/`` folder each). It formats fresh storage in a temporary folder (broker and
controller in one process, free loopback ports), turns the KIP-848 and streams (KIP-1071)
protocols on beside the classic one, and writes the request logger at DEBUG to its own file in
Kafka's log4j2 layout, the lines `fencewatch bridge --from-request-log` reads. Optionally the
client listener is SASL_PLAINTEXT with SCRAM-SHA-512 and ACLs enforced by ``StandardAuthorizer``.

It has the surface of :class:`~fencewatch.streaming.brokers.tansu.EmbeddedBroker` (``bootstrap``,
``client_config()``, ``create_topics``, ``stop``, a context manager) and is stopped the same
ways: on ``with``-block exit, at interpreter exit, on SIGTERM, and by the kernel when this
process dies (parent-death signal). Stopping removes its temporary folder.

Imports: standard library, confluent_kafka, the helpers of brokers/tansu.py. Nothing else of ours.
"""

from __future__ import annotations

import base64
import logging
import os
import re
import secrets
import shutil
import socket
import subprocess
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from fencewatch.streaming.brokers.common import (
    _LIVE,
    _LIVE_LOCK,
    _PRCTL,
    BrokerStartError,
    ChildBroker,
    _parent_death_preexec,
    _quiet_client_logger,
    free_port,
    port_taken,
)

log = logging.getLogger(__name__)

#: The version a bare ``KafkaBroker()`` runs: 4.2 answers commits with the strict KIP-848 check,
#: the project's default ``broker_policy``, so verdicts agree with it under the default config.
DEFAULT_VERSION = "4.2"
#: The versions ``make jars`` fetches (keep in step with KAFKA_VERSIONS in the Makefile).
KNOWN_VERSIONS = ("4.2.2", "4.3.1", "4.4.0")
JARS_ENV = "FENCEWATCH_JARS_DIR"
#: Seconds until the broker answers: generous, as a busy shared machine starts the JVM far slower
#: than a quiet one.
DEFAULT_STARTUP_TIMEOUT_S = 90.0
#: Seconds between SIGTERM and SIGKILL: a controlled shutdown of one node takes a second or two.
STOP_GRACE_S = 20.0
#: The principal ``client_config()`` uses with SASL on; a super user.
SUPER_USER = "admin"
SCRAM_MECHANISM = "SCRAM-SHA-512"
_LOG_TAIL_BYTES = 4000
_START_ATTEMPTS = 3
#: Kafka's own log4j2 pattern (config/log4j2.yaml of the distribution), request log included.
KAFKA_LOG_PATTERN = "[%d] %p %m (%c)%n"


# --------------------------------------------------------------------------- jars


def jars_root() -> Path:
    """Where ``make jars`` puts one folder per jar set (same rule as the Makefile's JARS_DIR)."""
    override = os.environ.get(JARS_ENV, "").strip()
    if override:
        return Path(override)
    cache = os.environ.get("XDG_CACHE_HOME", "").strip() or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(cache) / "fencewatch" / "jars"


def _version_key(version: str) -> tuple[int, ...]:
    return tuple(int(part) if part.isdigit() else -1 for part in re.split(r"[.-]", version))


def installed_versions(root: Path | None = None, prefix: str = "kafka-") -> list[str]:
    """Exact versions whose ``<prefix><version>`` folder of the jars cache is complete (Maven's fetch
    or build ended), oldest first: the brokers' jars, or with ``streams-app-`` the Kafka Streams
    application's builds."""
    root = root or jars_root()
    if not root.is_dir():
        return []
    found = [entry.name.removeprefix(prefix) for entry in root.iterdir()
             if entry.name.startswith(prefix) and (entry / ".complete").exists()]
    return sorted(found, key=_version_key)


def newest_match(version: str, root: Path, prefix: str, what: str) -> tuple[str, list[str]]:
    """The exact version ``version`` names among the complete ``<prefix><version>`` folders of
    ``root`` (``"4.3"`` -> the newest 4.3.x, ``"4.3.1"`` -> exactly that), or "" with what is there."""
    wanted = version.strip()
    if not re.fullmatch(r"\d+\.\d+(\.\d+)?", wanted):
        raise ValueError(f"{what} version {version!r}: expected MAJOR.MINOR (4.3) or MAJOR.MINOR.PATCH (4.3.1)")
    there = installed_versions(root, prefix)
    matches = [v for v in there if v == wanted or v.startswith(wanted + ".")]
    return (matches[-1] if matches else ""), there


def resolve_version(version: str = DEFAULT_VERSION, root: Path | None = None) -> tuple[str, Path]:
    """``"4.3"`` -> the newest fetched 4.3.x, ``"4.3.1"`` -> exactly that; with its jar folder."""
    root = root or jars_root()
    exact, installed = newest_match(version, root, "kafka-", "Kafka")
    if not exact:
        have = ", ".join(installed) or "none"
        raise BrokerStartError(
            f"no jars for Apache Kafka {version.strip()} in {root} (fetched: {have}); run `make jars` "
            f"(it fetches {', '.join(KNOWN_VERSIONS)}; set {JARS_ENV} if they are elsewhere)")
    return exact, root / f"kafka-{exact}"


def _java() -> str:
    home = os.environ.get("JAVA_HOME", "").strip()
    candidate = os.path.join(home, "bin", "java") if home else shutil.which("java")
    if not candidate or not os.access(candidate, os.X_OK):
        raise BrokerStartError("no `java` found (PATH or JAVA_HOME); Apache Kafka's broker needs Java 17+")
    return candidate


# --------------------------------------------------------------------------- configuration


def _cluster_id() -> str:
    """A random cluster id in Kafka's form (a UUID, base64url without padding). Like Kafka's
    ``Uuid.randomUuid``, never one starting with "-": ``kafka-storage format -t -x...`` reads it
    as an option and fails (one start in 64 did, 2026-11-28)."""
    while True:
        cid = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        if not cid.startswith("-"):
            return cid


def _jaas(user: str, password: str) -> str:
    return f'org.apache.kafka.common.security.scram.ScramLoginModule required username="{user}" password="{password}";'


def server_properties(*, host: str, port: int, controller_port: int, data_dir: str,
                      sasl_password: str | None = None, node_id: int = 1,
                      quorum_voters: str | None = None) -> dict[str, str]:
    """The node's settings before the caller's own: a test-sized single node (or, with
    ``node_id`` and ``quorum_voters`` (``id@host:port,...``), one node of a cluster, whose
    replication settings ``cluster.py`` sets over these).

    KIP-848 and KIP-1071 (streams groups) beside classic; one partition for the internal topics
    (creating 50 costs seconds); minimum session and heartbeat intervals low so a test can
    provoke a session timeout in seconds (a group sets ``consumer.session.timeout.ms`` or
    ``streams.session.timeout.ms`` itself); topics are never created by a produce or fetch (as
    on most production clusters: a test that forgot one fails); no time retention.
    """
    listener = "SASL_PLAINTEXT" if sasl_password is not None else "PLAINTEXT"
    props = {
        "process.roles": "broker,controller",
        "node.id": str(node_id),
        "controller.quorum.voters": quorum_voters or f"{node_id}@{host}:{controller_port}",
        "listeners": f"{listener}://{host}:{port},CONTROLLER://{host}:{controller_port}",
        "advertised.listeners": f"{listener}://{host}:{port}",
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": listener,
        "listener.security.protocol.map": f"{listener}:{listener},CONTROLLER:PLAINTEXT",
        "log.dirs": data_dir,
        "num.partitions": "1",
        "auto.create.topics.enable": "false",
        # Traces in tests and benchmarks carry fixed past timestamps (2023), and time retention goes
        # by record timestamp: the first retention check (30 s after start) deleted them mid-test.
        "log.retention.ms": "-1",
        "offsets.topic.replication.factor": "1",
        "offsets.topic.num.partitions": "1",
        "transaction.state.log.replication.factor": "1",
        "transaction.state.log.min.isr": "1",
        "transaction.state.log.num.partitions": "1",
        "share.coordinator.state.topic.replication.factor": "1",
        "share.coordinator.state.topic.min.isr": "1",
        "group.initial.rebalance.delay.ms": "0",
        # Kafka's own default since 4.2 (KIP-1071's streams groups production-ready there); named
        # so a test reads what it runs.
        "group.coordinator.rebalance.protocols": "classic,consumer,streams",
        "group.consumer.min.session.timeout.ms": "1000",
        "group.consumer.min.heartbeat.interval.ms": "100",
        "group.consumer.heartbeat.interval.ms": "500",
        # Streams groups (KIP-1071) likewise: a group sets ``streams.session.timeout.ms`` itself;
        # no 3 s wait before the first assignment.
        "group.streams.min.session.timeout.ms": "1000",
        "group.streams.min.heartbeat.interval.ms": "100",
        "group.streams.heartbeat.interval.ms": "500",
        "group.streams.initial.rebalance.delay.ms": "0",
        "group.min.session.timeout.ms": "1000",
    }
    if sasl_password is not None:
        mechanism = SCRAM_MECHANISM.lower()
        props |= {
            "sasl.enabled.mechanisms": SCRAM_MECHANISM,
            "sasl.mechanism.inter.broker.protocol": SCRAM_MECHANISM,
            f"listener.name.sasl_plaintext.{mechanism}.sasl.jaas.config": _jaas(SUPER_USER, sasl_password),
            "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            # ANONYMOUS is only ever the principal of the PLAINTEXT controller listener, which the
            # node's own broker half uses: clients reach SASL_PLAINTEXT only, and authenticate.
            "super.users": f"User:{SUPER_USER};User:ANONYMOUS",
        }
    return props


def _log4j2_yaml(folder: Path, request_log: Path) -> str:
    """Root at INFO into server.log; ``kafka.request.logger`` at DEBUG into its own file."""
    return (
        "Configuration:\n"
        "  Appenders:\n"
        "    File:\n"
        f"      - {{name: Server, fileName: \"{folder / 'server.log'}\", "
        f"PatternLayout: {{pattern: \"{KAFKA_LOG_PATTERN}\"}}}}\n"
        f"      - {{name: Request, fileName: \"{request_log}\", "
        f"PatternLayout: {{pattern: \"{KAFKA_LOG_PATTERN}\"}}}}\n"
        "  Loggers:\n"
        "    Root: {level: INFO, AppenderRef: [{ref: Server}]}\n"
        "    Logger:\n"
        "      - {name: kafka.request.logger, level: DEBUG, additivity: false, AppenderRef: [{ref: Request}]}\n"
    )


def _write_properties(path: Path, props: Mapping[str, str]) -> None:
    # Java properties: backslashes and line ends escaped; values here never need more.
    lines = [f"{key}={str(value).replace(chr(92), chr(92) * 2)}" for key, value in props.items()]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


_FOLDER_PREFIX = "fencewatch-kafka-"
_OWNERS_FILE = "owners"


def _alive(pid: int) -> bool:
    """Running (a zombie nobody reaped yet counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except FileNotFoundError:
        return False
    except OSError:  # no /proc: ask the kernel
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True


def sweep_orphans(temp_root: str | os.PathLike[str] | None = None) -> list[Path]:
    """Remove broker folders whose owner and broker both died (an owner killed by SIGKILL).

    The kernel kills such a broker (parent-death signal), but nobody is left to remove its
    folder; the next broker started under the same temporary root does. Returns what it removed.
    """
    root = Path(temp_root or tempfile.gettempdir())
    removed = []
    for folder in root.glob(_FOLDER_PREFIX + "*"):
        try:
            pids = [int(p) for p in (folder / _OWNERS_FILE).read_text().split()]
        except (OSError, ValueError):
            continue  # not ours, or still being set up
        if pids and not any(_alive(pid) for pid in pids):
            shutil.rmtree(folder, ignore_errors=True)
            removed.append(folder)
    return removed


def _tail(path: Path, max_bytes: int = _LOG_TAIL_BYTES) -> str:
    if not path.exists():
        return ""
    with path.open("rb") as fh:
        fh.seek(0, os.SEEK_END)
        fh.seek(max(0, fh.tell() - max_bytes))
        return fh.read().decode("utf-8", errors="replace")


# --------------------------------------------------------------------------- the broker


class KafkaBroker(ChildBroker):
    """Apache Kafka (one KRaft node) on free loopback ports, owned by this process.

    ``version`` is ``"4.2"``, ``"4.3"``, ``"4.4"`` (the newest fetched patch) or exact
    (``"4.3.1"``); ``port`` fixes the client listener's port (default: a free one); ``jvm_args``
    go to the broker's JVM (a ``-javaagent:``, say), ``env`` to its environment. ``properties`` are server
    settings over the defaults of :func:`server_properties`. ``log4j2`` replaces the logging
    configuration: ``log4j2(folder, bootstrap)`` returns a log4j2 properties file (a test of a shipped
    one; ``folder`` is the broker's, ``bootstrap`` its client address). ``sasl=True`` makes the client listener SASL_PLAINTEXT with
    SCRAM-SHA-512 and ACLs on; SCRAM credentials for :data:`SUPER_USER` (a random password) and
    for each of ``users`` (name -> password) are written at format time. ``node_id``,
    ``controller_port``, ``quorum_voters`` and ``cluster_id`` make it one node of a cluster
    (:class:`~fencewatch.streaming.brokers.cluster.KafkaCluster` sets them).
    """

    NAME = "Apache Kafka"
    STOP_GRACE_S = STOP_GRACE_S

    def __init__(
        self,
        version: str = DEFAULT_VERSION,
        *,
        properties: Mapping[str, str] | None = None,
        sasl: bool = False,
        users: Mapping[str, str] | None = None,
        host: str = "127.0.0.1",
        port: int | None = None,
        heap: str = "1g",
        jvm_args: Iterable[str] = (),
        env: Mapping[str, str] | None = None,
        log4j2: Callable[[Path, str], str] | None = None,
        startup_timeout_s: float = DEFAULT_STARTUP_TIMEOUT_S,
        jars_dir: str | os.PathLike[str] | None = None,
        node_id: int = 1,
        controller_port: int | None = None,
        quorum_voters: str | None = None,
        cluster_id: str | None = None,
    ) -> None:
        self._wanted = version
        self._properties = dict(properties or {})
        self._sasl = sasl
        self._passwords = {SUPER_USER: secrets.token_hex(12)} if sasl else {}
        if users and not sasl:
            raise ValueError("users need sasl=True (SCRAM credentials)")
        for name, password in (users or {}).items():
            if not re.fullmatch(r"[\w.-]+", name) or not re.fullmatch(r"[\w.@%+-]+", password):
                raise ValueError(f"SCRAM user {name!r}: letters, digits and ._- only (and @%+ in passwords)")
            self._passwords[name] = password
        super().__init__(host)
        self._requested_port = port
        self._heap = heap
        self._jvm_args = list(jvm_args)
        self._env = dict(env or {})
        self._log4j2 = log4j2
        self._startup_timeout_s = startup_timeout_s
        self._jars_root = Path(jars_dir) if jars_dir is not None else None
        #: ``node.id``; with ``controller_port``, ``quorum_voters`` and ``cluster_id``, a node of a
        #: :class:`~fencewatch.streaming.brokers.cluster.KafkaCluster` (which picks them).
        self.node_id = node_id
        self._requested_controller_port = controller_port
        self._quorum_voters = quorum_voters
        self._given_cluster_id = cluster_id
        self.version: str | None = None  # exact, once resolved
        #: Seconds from the broker's launch (after formatting) until it answered, at the last start.
        self.ready_in_s: float | None = None
        self._dir: Path | None = None
        self._launched_at = 0.0

    # -- what callers read ---------------------------------------------------------

    @property
    def address(self) -> str:
        """``host:port`` of the client listener, running or not (a cluster's bootstrap names a
        node that is restarting, as an operator's does)."""
        if self._port is None:
            raise RuntimeError("Kafka broker is not started")
        return f"{self._host}:{self._port}"

    @property
    def directory(self) -> Path | None:
        """The temporary folder (storage, configuration, logs); removed by :meth:`stop`."""
        return self._dir

    @property
    def request_log_path(self) -> Path:
        """``kafka-request.log``: every request the broker completed, at DEBUG, Kafka's layout."""
        if self._dir is None:
            raise RuntimeError("Kafka broker is not started")
        return self._dir / "kafka-request.log"

    @property
    def server_log_path(self) -> Path:
        if self._dir is None:
            raise RuntimeError("Kafka broker is not started")
        return self._dir / "server.log"

    @property
    def super_user(self) -> str | None:
        return SUPER_USER if self._sasl else None

    def password(self, user: str = SUPER_USER) -> str:
        """The SCRAM password of ``user`` (set up at format time)."""
        return self._passwords[user]

    def client_config(self, user: str | None = None, password: str | None = None) -> dict[str, str]:
        """librdkafka settings to reach the broker; with SASL, as ``user`` (default the super user)."""
        config = {"bootstrap.servers": self.bootstrap}
        if self._sasl:
            user = user or SUPER_USER
            config |= {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": SCRAM_MECHANISM,
                       "sasl.username": user,
                       "sasl.password": password if password is not None else self._passwords[user]}
        return config

    def log_tail(self, max_bytes: int = _LOG_TAIL_BYTES) -> str:
        """The end of the JVM's own output and of server.log (for error messages)."""
        if self._dir is None:
            return ""
        parts = []
        for name in ("format.log", "stdout.log", "server.log"):
            text = _tail(self._dir / name, max_bytes).strip()
            if text:
                parts.append(f"--- {name}\n{text}")
        return "\n".join(parts)

    # -- lifecycle -------------------------------------------------------------------

    def start(self) -> KafkaBroker:
        """Format storage, launch the broker and return once it answers metadata requests."""
        with self._lock:
            if self.is_running:
                return self
            began = time.monotonic()
            for attempt in range(1, _START_ATTEMPTS + 1):
                try:
                    launched = self._launch_fresh()
                    self._wait_ready()
                    self.ready_in_s = time.monotonic() - launched
                except BrokerStartError as exc:
                    self._abandon()
                    if not port_taken(exc) or self._requested_port is not None or attempt == _START_ATTEMPTS:
                        raise
                    log.warning("a Kafka broker port was taken, retrying (attempt %d)", attempt)
                    continue
                except BaseException:
                    self._abandon()
                    raise
                log.info("Apache Kafka %s up at %s (pid %d) in %.1fs", self.version, self.bootstrap,
                         self.pid, time.monotonic() - began)
                return self
            raise AssertionError("unreachable")

    def launch(self) -> KafkaBroker:
        """Format fresh storage and launch the JVM without waiting for it to answer: a cluster
        launches every node first, as no node answers before a quorum of controllers runs. Then
        :meth:`wait_ready`; on failure :meth:`stop`."""
        with self._lock:
            if not self.is_running:
                self._launch_fresh()
            return self

    def wait_ready(self) -> KafkaBroker:
        """Return once the launched node answers a metadata request naming a broker (it raises
        :class:`BrokerStartError` with its log tail when the JVM exits or the time is up)."""
        with self._lock:
            self._wait_ready()
            self.ready_in_s = time.monotonic() - self._launched_at
            return self

    def _launch_fresh(self) -> float:
        """Fresh folder, format, launch; registered at once, so exit and SIGTERM stop it even
        mid-start. Returns when the JVM was launched (after formatting)."""
        self.version, jar_dir = resolve_version(self._wanted, self._jars_root)
        java = _java()
        self.ready_in_s = None
        self._prepare()
        self._format(java, jar_dir)
        self._launched_at = time.monotonic()
        self._launch(java, jar_dir)
        self._register()
        return self._launched_at

    def _abandon(self) -> None:
        """A failed start: no process, no folder (the caller holds the lock)."""
        self._terminate()
        self._remove_dir()
        with _LIVE_LOCK:
            _LIVE.discard(self)

    def _prepare(self) -> None:
        """A fresh folder with server.properties and log4j2.yaml for new free ports."""
        for folder in sweep_orphans():
            log.info("removed %s, left by a broker whose owner was killed", folder)
        self._dir = Path(tempfile.mkdtemp(prefix=f"{_FOLDER_PREFIX}{self.version}-"))
        self._port = self._requested_port or free_port(self._host)
        controller_port = self._requested_controller_port or free_port(self._host)
        while controller_port == self._port:
            controller_port = free_port(self._host)
        props = server_properties(host=self._host, port=self._port, controller_port=controller_port,
                                  data_dir=str(self._dir / "data"),
                                  sasl_password=self._passwords.get(SUPER_USER) if self._sasl else None,
                                  node_id=self.node_id, quorum_voters=self._quorum_voters)
        _write_properties(self._dir / "server.properties", props | self._properties)
        # The storage tool always logs by the default file: a shipped file under test (an appender
        # to Kafka, say) is for the broker alone.
        (self._dir / "log4j2.yaml").write_text(_log4j2_yaml(self._dir, self.request_log_path), encoding="utf-8")
        if self._log4j2 is not None:
            text = self._log4j2(self._dir, f"{self._host}:{self._port}")
            (self._dir / "log4j2.properties").write_text(text, encoding="utf-8")

    def _jvm(self, java: str, jar_dir: Path, *extra: str, log4j2: str = "log4j2.yaml") -> list[str]:
        assert self._dir is not None
        return [java, *extra, "-Djava.awt.headless=true", f"-Djava.io.tmpdir={self._dir}",
                f"-Dlog4j2.configurationFile={self._dir / log4j2}", "-cp", f"{jar_dir}/*"]

    def _format(self, java: str, jar_dir: Path) -> None:
        """``kafka-storage.sh format``, with SCRAM credentials when SASL is on."""
        assert self._dir is not None
        argv = self._jvm(java, jar_dir, "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC", "-Xmx256m")
        argv += ["kafka.tools.StorageTool", "format", "-t", self._given_cluster_id or _cluster_id(),
                 "-c", str(self._dir / "server.properties")]
        for user, password in self._passwords.items():
            argv += ["--add-scram", f"{SCRAM_MECHANISM}=[name={user},password={password}]"]
        with (self._dir / "format.log").open("wb") as out:
            try:
                done = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                      timeout=self._startup_timeout_s, check=False)
            except subprocess.TimeoutExpired as exc:
                raise BrokerStartError(f"formatting Kafka storage took over {exc.timeout}s") from exc
        if done.returncode != 0:
            raise BrokerStartError(f"formatting Kafka {self.version} storage failed (exit {done.returncode}):\n"
                                   f"{self.log_tail()}")

    def _launch(self, java: str, jar_dir: Path, mode: str = "wb") -> None:
        assert self._dir is not None
        argv = self._jvm(java, jar_dir, f"-Xmx{self._heap}", "-Xms256m", "-XX:+UseG1GC",
                         "-XX:MaxGCPauseMillis=20", "-XX:+ExitOnOutOfMemoryError", *self._jvm_args,
                         log4j2="log4j2.yaml" if self._log4j2 is None else "log4j2.properties")
        argv += ["kafka.Kafka", str(self._dir / "server.properties")]
        main_thread = threading.current_thread() is threading.main_thread()
        with (self._dir / "stdout.log").open(mode) as out:
            self._process = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, cwd=self._dir,
                env={**os.environ, **self._env} if self._env else None,
                start_new_session=True,  # its own process group: stop() signals the group
                preexec_fn=_parent_death_preexec if main_thread and _PRCTL is not None else None,
            )
        (self._dir / _OWNERS_FILE).write_text(f"{os.getpid()} {self._process.pid}\n")

    def restart(self) -> float:
        """Stop the broker's process (SIGTERM, a controlled shutdown) and start it again on the
        same folder, ports and data, as a pod restart does; returns the seconds the stop took
        (``ready_in_s`` is then the new start's)."""
        with self._lock:
            if self._dir is None or self.version is None:
                raise RuntimeError("Kafka broker is not started")
            began = time.monotonic()
            self._terminate()
            stopped_in_s = time.monotonic() - began
            _, jar_dir = resolve_version(self.version, self._jars_root)
            launched = time.monotonic()
            self._launch(_java(), jar_dir, mode="ab")
            self._wait_ready()
            self.ready_in_s = time.monotonic() - launched
            return stopped_in_s

    def _wait_ready(self) -> None:
        """Poll TCP, then a metadata request naming a broker; fail fast when the JVM exits."""
        assert self._process is not None and self._port is not None
        deadline = time.monotonic() + self._startup_timeout_s
        admin: AdminClient | None = None
        problem = "no answer yet"
        while True:
            code = self._process.poll()
            if code is not None:
                raise BrokerStartError(f"Apache Kafka {self.version} exited with code {code} before it answered "
                                       f"on {self._host}:{self._port}; its logs end with:\n{self.log_tail()}")
            if time.monotonic() >= deadline:
                raise BrokerStartError(f"Apache Kafka {self.version} did not answer on {self._host}:{self._port} "
                                       f"within {self._startup_timeout_s}s ({problem}); its logs end with:\n"
                                       f"{self.log_tail()}")
            try:
                with socket.create_connection((self._host, self._port), timeout=0.5):
                    pass
            except OSError as exc:
                problem = f"connect: {exc}"
                time.sleep(0.1)
                continue
            if admin is None:
                admin = AdminClient({**self.client_config(), "logger": _quiet_client_logger()})
            try:
                if admin.list_topics(timeout=2.0).brokers:
                    return
                problem = "metadata lists no brokers"
            except KafkaException as exc:
                problem = f"metadata: {exc}"
            time.sleep(0.1)

    def _after_stop(self) -> None:
        self._remove_dir()

    def _remove_dir(self) -> None:
        if self._dir is not None and not self.is_running:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None

    def __repr__(self) -> str:
        state = f"running at {self._host}:{self._port}" if self.is_running else "stopped"
        return f"KafkaBroker({self.version or self._wanted}, {state})"

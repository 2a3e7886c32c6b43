"""Building the SparkSession fencewatch runs in (local, or a cluster master URL).

``streaming.spark_conf`` (the config file, ``FENCEWATCH_STREAMING__SPARK_CONF__*``,
``--conf key=value``) is applied last, so any ``spark.*`` setting (driver memory,
executors, ...) can be set; settings that size the driver JVM take effect only
when this process starts it (not under ``spark-submit``, which reads its own
``--conf``). The JVM logs through a log4j2 file shipped here: WARN and above,
in the console's format (or Spark's JSON layout with ``logging.format: json``).
"""
from __future__ import annotations

import contextlib
import logging
import os
import sys
import tempfile
from pathlib import Path
from typing import Mapping

log = logging.getLogger(__name__)

ROCKSDB_PROVIDER = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
WORKER_DAEMON = "fencewatch.streaming.runtime.worker_daemon"  # preloads the workers' imports (worker_daemon.py)
LOCAL_JVM_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
CHECKPOINT_MANAGER_CONF = "spark.sql.streaming.checkpointFileManagerClass"
FS_CHECKPOINT_MANAGER = "org.apache.spark.sql.execution.streaming.checkpointing.FileSystemBasedCheckpointFileManager"  # local masters only: the C1 JIT, no C2
SPARK_REDACTION_REGEX = r"(?i)secret|password|token|access[.]?key|jaas|user[.]?info|credential"
LOG4J2_FILES = {"text": Path(__file__).with_name("log4j2.properties"),
                "json": Path(__file__).with_name("log4j2-json.properties")}
# Where Debian/Ubuntu (x86_64, arm64), RHEL and Alpine put jemalloc (libjemalloc2, jemalloc).
JEMALLOC_PATHS = ("/usr/lib/x86_64-linux-gnu/libjemalloc.so.2", "/usr/lib/aarch64-linux-gnu/libjemalloc.so.2",
                  "/usr/lib64/libjemalloc.so.2", "/usr/lib/libjemalloc.so.2")


DEFAULT_CLUSTER_PARTITIONS = 8
"""Shuffle (state) partitions on a cluster master whose executor cores the settings do not say."""

PARTITIONS_PER_CORE = 2
"""State partitions per core when ``streaming.shuffle_partitions`` is unset (:func:`state_partitions`)."""


def state_partitions(master: str | None, setting: int | None = None, conf: Mapping[str, str] | None = None,
                     local_cores: int | None = None) -> int:
    """The shuffle partitions, which are the state's partitions: ``setting``, else
    :data:`PARTITIONS_PER_CORE` per core the job starts with. A local master: ``local_cores``,
    Spark's own count (``defaultParallelism``: N of ``local[N]``; for ``local[*]`` the JVM's
    processors, which respect a container's CPU limit where ``os.cpu_count`` sees the node's). A
    cluster: ``spark.executor.instances`` x ``spark.executor.cores`` or ``spark.cores.max`` when
    set, else :data:`DEFAULT_CLUSTER_PARTITIONS` (its executors may not have registered when the
    job starts, so Spark's count is not yet theirs).

    Why two per core: each partition is a state task per micro-batch with fixed costs (the state
    store's load and commit, two Python runner calls) whatever it reads, so more partitions than
    cores run those costs in waves and slow caught-up micro-batches. But groups are uneven, and
    with one partition per core a backlog waited for the busier core, then for the driver to write
    that partition's outputs alone; two per core read backlogs faster for a small price in
    decision latency (docs/decisions.md, "State partitions"). Spark keeps the first start's value
    in the checkpoint, so a job meant to grow sets it for the cores it will have."""
    if setting:
        return setting
    cores = _starting_cores(master or "", conf or {}, local_cores)
    return DEFAULT_CLUSTER_PARTITIONS if cores is None else PARTITIONS_PER_CORE * max(1, cores)


def _starting_cores(master: str, conf: Mapping[str, str], local_cores: int | None) -> int | None:
    """The cores the job starts with, as :func:`state_partitions` reads them; None: not said."""
    if master.startswith("local-cluster["):  # local-cluster[workers, cores per worker, memory]
        workers, cores = master[len("local-cluster["):].split(",")[:2]
        return int(workers) * int(cores)
    if master.startswith("local"):
        return local_cores or 1
    try:
        if "spark.executor.instances" in conf and "spark.executor.cores" in conf:
            return int(conf["spark.executor.instances"]) * int(conf["spark.executor.cores"])
        if "spark.cores.max" in conf:
            return int(conf["spark.cores.max"])
    except ValueError:
        pass  # Spark itself refuses such a setting at start, with its own message
    return None


def spark_session_for(cfg, *, app_name: str = "fencewatch"):
    """The session for a :class:`~fencewatch.streaming.config.settings.Config` (master, state store, ``spark_conf``)."""
    s = cfg.streaming
    # Spark turns adaptive execution off for streaming queries anyway, with a WARN line per
    # start (ResolveWriteToStream); saying so up front keeps the console quiet.
    conf = {"spark.sql.adaptive.enabled": "false", **checkpoint_conf(s.checkpoint_location), **s.spark_conf}
    return spark_session(s.spark_master, app_name=app_name, shuffle_partitions=s.shuffle_partitions,
                         state_store=s.state_store, extra=conf, log_format=cfg.logging.format, jemalloc=s.jemalloc,
                         kafka_source=s.kafka_source)


def jemalloc_path(setting: str = "auto") -> str | None:
    """The jemalloc to preload into Spark's JVM (``streaming.jemalloc``: auto, off or a path).

    Why: RocksDB's block cache fills and evicts ~4 KB blocks from Spark's task threads, and
    glibc's malloc keeps what they free in per-thread arenas. In the soak the JVM's memory outside
    what it tracks kept rising with glibc while the cache's live size was bounded; with jemalloc it
    rose while the cache filled and then stayed level (docs/reliability.md, "Soak"; docs/decisions.md,
    "Memory")."""
    if setting == "off":
        return None
    if setting != "auto":
        return setting
    return next((p for p in JEMALLOC_PATHS if os.path.isfile(p)), None)


@contextlib.contextmanager
def _preloaded(library: str | None):
    """``LD_PRELOAD`` set while pyspark starts the JVM (a child of this process, which keeps it,
    as do the Python workers it forks); this process's environment is restored after."""
    before = os.environ.get("LD_PRELOAD")
    if library and library not in (before or "").split():
        os.environ["LD_PRELOAD"] = f"{library} {before}" if before else library
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("LD_PRELOAD", None)
        else:
            os.environ["LD_PRELOAD"] = before


def checkpoint_conf(location: str | None) -> dict[str, str]:
    """For a checkpoint on the local file system, Spark's ``FileSystem``-based checkpoint file
    manager. The default (``FileContext``-based) renames through Hadoop's local ``FileContext``,
    which, without Hadoop's native library (not in the pyspark wheel), starts a ``readlink``
    process four times per file written, on the micro-batch's critical path (docs/decisions.md,
    "Checkpoint files on a local file system"). A local rename is atomic either way. Other file systems keep Spark's default."""
    from fencewatch.streaming.runtime.checkpoint import is_local

    return {CHECKPOINT_MANAGER_CONF: FS_CHECKPOINT_MANAGER} if location and is_local(location) else {}


def driver_java_options(master: str | None, extra: Mapping[str, str], log_format: str = "text") -> str | None:
    """``spark.driver.extraJavaOptions``: the user's, plus our log4j2 file unless they name one,
    plus the C1-only JIT on local masters unless they set options of their own."""
    user = (extra or {}).get("spark.driver.extraJavaOptions")
    parts = [user] if user else ([LOCAL_JVM_OPTIONS] if master and master.startswith("local") else [])
    log4j = LOG4J2_FILES.get(log_format, LOG4J2_FILES["text"])
    if "log4j2.configurationFile" not in (user or "") and log4j.is_file():
        parts.append(f"-Dlog4j2.configurationFile={log4j.as_uri()}")
    return " ".join(parts) or None


def spark_session(master: str = "local[2]", *, app_name: str = "fencewatch", shuffle_partitions: int | None = None,
                  state_store: str = "rocksdb", extra: Mapping[str, str] | None = None, log_format: str = "text",
                  jemalloc: str = "auto", kafka_source: str = "auto"):
    """A session with the settings the job relies on (RocksDB state store, Arrow, loopback locally);
    ``extra`` (``streaming.spark_conf``) last, so it wins. ``shuffle_partitions`` None: the cores
    it starts with (:func:`state_partitions`). ``jemalloc`` (see :func:`jemalloc_path`):
    preloaded into the JVM this process starts; on a cluster master an explicit path goes to the
    executors (``spark.executorEnv.LD_PRELOAD``), which must have it there. ``kafka_source`` not
    ``python``: Spark's Kafka connector's jars, when ``make connector-jars`` fetched them, on the
    driver's and executors' classpath (``spark.jars``; ``sources.connector``)."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    if master and master.startswith("local"):
        # Everything binds to loopback locally; without this Spark warns twice at start that the
        # host name resolves to a loopback address.
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    builder = SparkSession.builder
    if master:  # empty: the master comes from spark-submit
        builder = builder.master(master)
    builder = (builder.appName(app_name)
               .config("spark.sql.session.timeZone", "UTC")
               .config("spark.sql.execution.arrow.pyspark.enabled", "true")
               .config("spark.sql.catalogImplementation", "in-memory")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.streaming.metricsEnabled", "true")
               # Python workers forked with pandas, pyarrow, pyspark and fencewatch imported and
               # frozen out of the GC: no start-up inside a micro-batch, no full collection per task.
               .config("spark.python.daemon.module", WORKER_DAEMON)
               # Spark's default redaction pattern plus what our Kafka options carry (a JAAS line
               # holds the password; Schema Registry's basic.auth.user.info is user:password).
               .config("spark.redaction.regex", SPARK_REDACTION_REGEX))
    # One JVM and the Python workers share the cores: C2 compiling the code each micro-batch
    # generates took a large share of a core on local[2]; C1 alone is enough here. G1's concurrent
    # threads too: the serial collector (the JVM's own choice on one core) costs the job less CPU
    # per event (docs/decisions.md, "The JVM and the tasks on few cores").
    java_options = driver_java_options(master, extra or {}, log_format)
    if java_options:
        builder = builder.config("spark.driver.extraJavaOptions", java_options)
    if log_format == "json":
        builder = builder.config("spark.log.structuredLogging.enabled", "true")
    if master and master.startswith("local"):
        builder = (builder.config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
                   .config("spark.ui.enabled", "false")
                   .config("spark.sql.warehouse.dir", tempfile.mkdtemp(prefix="fencewatch-warehouse-")))
    if state_store == "rocksdb":
        builder = (builder.config("spark.sql.streaming.stateStore.providerClass", ROCKSDB_PROVIDER)
                   .config("spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled", "true"))
    local = bool(master) and master.startswith("local")
    library = jemalloc_path(jemalloc)
    executor_preload = (extra or {}).get("spark.executorEnv.LD_PRELOAD")
    if not local and executor_preload is None and jemalloc not in ("auto", "off"):
        executor_preload = library  # auto: this host's path says nothing about the executors'
        builder = builder.config("spark.executorEnv.LD_PRELOAD", library)
    for k, v in {**(extra or {}), **_connector_conf(kafka_source, extra or {})}.items():
        if k != "spark.driver.extraJavaOptions":  # merged above
            builder = builder.config(k, v)
    from pyspark import SparkContext

    starts_jvm = SparkContext._gateway is None and "PYSPARK_GATEWAY_PORT" not in os.environ
    if library is None and jemalloc == "auto" and state_store == "rocksdb" and local and starts_jvm:
        log.warning("jemalloc not found (%s): Spark's JVM runs RocksDB on glibc's malloc, whose arenas kept "
                    "growing in the soak (docs/reliability.md); install it (Debian: libjemalloc2) or set "
                    "streaming.jemalloc", ", ".join(JEMALLOC_PATHS))
    with _preloaded(library if starts_jvm else None):
        if starts_jvm:
            _launch_jvm_in_own_session(builder)
        session = builder.getOrCreate()
    session.sparkContext.setLogLevel("WARN")
    # After the start: under spark-submit the master and the executors come from its own settings.
    sc = session.sparkContext
    shuffle_partitions = state_partitions(sc.master, shuffle_partitions, dict(sc.getConf().getAll()),
                                          sc.defaultParallelism)
    session.conf.set("spark.sql.shuffle.partitions", str(shuffle_partitions))
    log.info("Spark %s, master %s, shuffle partitions %d, state store %s, malloc %s%s", session.version, master,
             shuffle_partitions, state_store,
             _malloc_label(library, local, starts_jvm, executor_preload),
             f", spark_conf {sorted(extra)}" if extra else "")
    return session


def _connector_conf(kafka_source: str, extra: Mapping[str, str]) -> dict[str, str]:
    """``spark.jars`` with Spark's Kafka connector for this pyspark, when fetched (see the caller)."""
    import pyspark

    from fencewatch.streaming.sources.connector import classpath_conf

    return classpath_conf(kafka_source, pyspark.__version__, dict(extra))


def _launch_jvm_in_own_session(builder) -> None:
    """Start Spark's JVM (as pyspark would, with the builder's settings) in a session of its own.

    Why: a signal to this command's process group (``kill -- -PGID``, a supervisor that stops a
    process group, a shell's job control) would otherwise reach the JVM and its Python workers too:
    the JVM's shutdown hook stops the SparkContext under the running micro-batch, and the driver's
    stop between batches finds nothing to stop. In its own session only this process gets the
    signal and stops the query at a batch boundary; the JVM still exits with this process (pyspark
    closes its stdin). systemd signals the whole cgroup: a unit needs ``KillMode=mixed``."""
    from pyspark import SparkConf, SparkContext
    from pyspark.java_gateway import launch_gateway

    conf = SparkConf(loadDefaults=False)
    conf.setAll(builder._options.items())  # what getOrCreate would pass to spark-submit
    SparkContext._ensure_initialized(gateway=launch_gateway(conf, popen_kwargs={"start_new_session": True}))


def _malloc_label(library: str | None, local: bool, starts_jvm: bool, executor_preload: str | None) -> str:
    """The allocator named in the start-up log line."""
    if local:
        return (library or "glibc") if starts_jvm else "that of the running JVM"
    return f"{executor_preload} on executors" if executor_preload else "the executors' own"

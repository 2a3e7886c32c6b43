"""Building the SparkSession fencewatch runs in (local, or a cluster master URL)."""
from __future__ import annotations

import logging
import os
import sys
import tempfile

log = logging.getLogger(__name__)

ROCKSDB_PROVIDER = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
LOCAL_JVM_OPTIONS = "-XX:TieredStopAtLevel=1"  # local masters only: the C1 JIT, no C2


def spark_session(master: str = "local[2]", *, app_name: str = "fencewatch", shuffle_partitions: int = 8,
                  state_store: str = "rocksdb", extra: dict | None = None):
    """A session with the settings the job relies on (RocksDB state store, Arrow, loopback locally)."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    builder = SparkSession.builder
    if master:  # empty: the master comes from spark-submit
        builder = builder.master(master)
    builder = (builder.appName(app_name)
               .config("spark.sql.shuffle.partitions", str(shuffle_partitions))
               .config("spark.sql.session.timeZone", "UTC")
               .config("spark.sql.execution.arrow.pyspark.enabled", "true")
               .config("spark.sql.catalogImplementation", "in-memory")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.streaming.metricsEnabled", "true"))
    if master and master.startswith("local") and not (extra or {}).get("spark.driver.extraJavaOptions"):
        # One JVM and the Python workers share the cores: C2 compiling the code each micro-batch
        # generates took 40-60% of a core on local[2] (docs/decisions.md); C1 alone is enough here.
        builder = builder.config("spark.driver.extraJavaOptions", LOCAL_JVM_OPTIONS)
    if master and master.startswith("local"):
        builder = (builder.config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
                   .config("spark.ui.enabled", "false")
                   .config("spark.sql.warehouse.dir", tempfile.mkdtemp(prefix="fencewatch-warehouse-")))
    if state_store == "rocksdb":
        builder = (builder.config("spark.sql.streaming.stateStore.providerClass", ROCKSDB_PROVIDER)
                   .config("spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled", "true"))
    for k, v in (extra or {}).items():
        builder = builder.config(k, v)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("WARN")
    log.info("Spark %s, master %s, shuffle partitions %d, state store %s", session.version, master,
             shuffle_partitions, state_store)
    return session

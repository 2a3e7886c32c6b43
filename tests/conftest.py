"""Shared fixtures: a real Kafka-protocol broker, uuid-named topics, a lazy local Spark.

- ``broker`` (session): bootstrap string of an embedded Tansu broker on a free
  loopback port, or of ``$FENCEWATCH_TEST_BOOTSTRAP`` when set (an external
  broker, e.g. Apache Kafka; nothing is started or stopped then).
- ``topic_factory`` (function): ``topic_factory(partitions=1, prefix="t") -> name``
  creates a fresh uuid-named topic and deletes it after the test.
- ``group_id`` (function): a fresh uuid consumer group id.
- ``spark`` (session): ``local[2]`` SparkSession, started only when a test asks
  for it; RocksDB state store with changelog checkpointing, 4 shuffle
  partitions, no UI, temp warehouse and checkpoint root.

Markers: ``spark`` (uses Spark), ``broker`` (uses the broker), ``slow``.
"""

from __future__ import annotations

import logging
import os
import sys
import uuid
from collections.abc import Callable, Iterator

import pytest

BOOTSTRAP_ENV = "FENCEWATCH_TEST_BOOTSTRAP"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "spark: starts a local SparkSession (slower, needs Java)")
    config.addinivalue_line("markers", "broker: talks to the Kafka-protocol test broker")
    config.addinivalue_line("markers", "slow: takes more than a few seconds; skipped by `make test-fast`")


@pytest.fixture(scope="session")
def broker() -> Iterator[str]:
    """Bootstrap address of the session's broker (embedded Tansu unless overridden)."""
    from fencewatch.streaming.brokers.tansu import EmbeddedBroker

    external = os.environ.get(BOOTSTRAP_ENV, "").strip()
    if external:
        yield external
        return
    with EmbeddedBroker() as embedded:
        yield embedded.bootstrap


@pytest.fixture
def topic_factory(broker: str) -> Iterator[Callable[..., str]]:
    """Create uuid-named topics for one test; they are deleted afterwards."""
    from fencewatch.streaming.brokers.tansu import create_topics, delete_topics

    created: list[str] = []
    config = {"bootstrap.servers": broker}

    def make(partitions: int = 1, prefix: str = "t") -> str:
        name = f"{prefix}-{uuid.uuid4().hex[:12]}"
        create_topics(config, [name], partitions)
        created.append(name)
        return name

    yield make
    try:
        delete_topics(config, created)
    except Exception as exc:  # a failed cleanup must not hide the test's own result
        logging.getLogger(__name__).warning("could not delete test topics %s: %s", created, exc)


@pytest.fixture
def group_id() -> str:
    return f"g-{uuid.uuid4().hex[:12]}"


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory):
    """A small local SparkSession shared by the session's Spark tests."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    root = tmp_path_factory.mktemp("spark")
    session = (
        SparkSession.builder.master("local[2]")
        .appName("fencewatch-tests")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.default.parallelism", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.catalogImplementation", "in-memory")
        .config("spark.sql.warehouse.dir", str(root / "warehouse"))
        .config("spark.sql.streaming.checkpointLocation", str(root / "checkpoints"))
        .config(
            "spark.sql.streaming.stateStore.providerClass",
            "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
        )
        .config("spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled", "true")
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .config("spark.driver.extraJavaOptions", f"-Djava.io.tmpdir={root}")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    try:
        yield session
    finally:
        session.stop()

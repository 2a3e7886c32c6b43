"""Shared fixtures: a real Kafka broker, uuid-named topics, a lazy local Spark.

- ``broker`` (session): bootstrap string of the session's broker: Apache Kafka
  (``KafkaBroker``, one KRaft node on free loopback ports) of the version
  ``$FENCEWATCH_TEST_BROKER`` names (``4.2``, ``4.3``, ``4.4`` or exact, default
  ``DEFAULT_VERSION``), or embedded Tansu with ``FENCEWATCH_TEST_BROKER=tansu``, or
  ``$FENCEWATCH_TEST_BOOTSTRAP`` when set (an external broker; nothing is started
  or stopped then).
- ``kafka_broker`` (session): the ``KafkaBroker`` object itself (request log,
  server log, version), for tests that need Apache Kafka whatever ``broker`` is.
  It is the same broker as ``broker`` when that one is Apache Kafka.
- ``kafka_broker_each_version`` (session, parametrized 4.2 / 4.3 / 4.4): one
  broker per version, started when a test first asks for it; pytest groups the
  tests by version, so one extra broker runs at a time.
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
BROKER_ENV = "FENCEWATCH_TEST_BROKER"
#: The versions ``kafka_broker_each_version`` runs (the newest fetched patch of each).
KAFKA_TEST_VERSIONS = ("4.2", "4.3", "4.4")


def _broker_choice() -> str:
    """``tansu`` or a Kafka version, from ``$FENCEWATCH_TEST_BROKER`` (default: the default version)."""
    from fencewatch.streaming.brokers.kafka import DEFAULT_VERSION

    return os.environ.get(BROKER_ENV, "").strip().lower() or DEFAULT_VERSION


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "spark: starts a local SparkSession (slower, needs Java)")
    config.addinivalue_line("markers", "broker: talks to a Kafka broker (Apache Kafka unless told otherwise)")
    config.addinivalue_line("markers", "slow: takes more than a few seconds; skipped by `make test-fast`")
    config.addinivalue_line("markers", "full_fault_table: a long fault trial (conftest.FULL_TABLE_ONLY); run by "
                                       "`make faults`, not `make test` (docs/reliability.md)")


#: Long trials only ``make faults`` runs, by test and Kafka reader (``kafka_source``): each takes one
#: to four minutes, and ``make test`` must stay near 20 minutes on a 2-core clean clone (issue 47).
#: CI runs ``make faults`` nightly (``.ci/nightly``, tests/README.md). What stays in ``make test``
#: proves the same behaviour at a smaller scale: a poison record, an oversized batch bounded after
#: a SIGKILL, the sink killed mid-produce and after it (test_reliability_sink.py), exactly once
#: across a restart (test_job_e2e.py), a deleted output topic and a growing backlog, each on one
#: reader or both.
BOTH = frozenset({"python", "spark"})
FULL_TABLE_ONLY: dict[str, frozenset[str]] = {
    "test_sigkill_mid_batch_three_times_then_restart": BOTH,
    "test_sigkill_while_the_last_batch_is_written": BOTH,
    "test_broker_paused_60s": BOTH,
    "test_300k_backlog_with_run_defaults": BOTH,
    "test_executor_killed_on_standalone_cluster": BOTH,
    "test_checkpoint_bound_recovers_an_oversized_planned_batch": frozenset({"spark"}),
    "test_run_stops_in_one_line_when_its_verdicts_topic_is_deleted": frozenset({"spark"}),
    "test_a_backlog_is_read_in_growing_batches_with_the_engines_verdicts": frozenset({"python"}),
}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        callspec = getattr(item, "callspec", None)
        if (callspec is not None and callspec.params.get("kafka_source")
                in FULL_TABLE_ONLY.get(getattr(item, "originalname", ""), ())):
            item.add_marker(pytest.mark.full_fault_table)


@pytest.fixture(scope="session")
def kafka_broker():
    """The session's Apache Kafka broker (``$FENCEWATCH_TEST_BROKER``'s version, else the default)."""
    from fencewatch.streaming.brokers.kafka import DEFAULT_VERSION, KafkaBroker

    choice = _broker_choice()
    with KafkaBroker(DEFAULT_VERSION if choice == "tansu" else choice) as started:
        yield started


@pytest.fixture(scope="session")
def broker(request: pytest.FixtureRequest) -> Iterator[str]:
    """Bootstrap address of the session's broker (Apache Kafka unless overridden)."""
    external = os.environ.get(BOOTSTRAP_ENV, "").strip()
    if external:
        yield external
        return
    if _broker_choice() == "tansu":
        from fencewatch.streaming.brokers.tansu import EmbeddedBroker

        with EmbeddedBroker() as embedded:
            yield embedded.bootstrap
        return
    yield request.getfixturevalue("kafka_broker").bootstrap


@pytest.fixture(scope="session", params=KAFKA_TEST_VERSIONS, ids=lambda v: f"kafka-{v}")
def kafka_broker_each_version(request: pytest.FixtureRequest):
    """An Apache Kafka broker of each of KAFKA_TEST_VERSIONS; the session's own when it matches."""
    from fencewatch.streaming.brokers.kafka import KafkaBroker, resolve_version

    choice = _broker_choice()
    if choice != "tansu" and resolve_version(choice)[0] == resolve_version(request.param)[0]:
        yield request.getfixturevalue("kafka_broker")
        return
    with KafkaBroker(request.param) as started:
        yield started


@pytest.fixture
def topic_factory(broker: str) -> Iterator[Callable[..., str]]:
    """Create uuid-named topics for one test; they are deleted afterwards."""
    from fencewatch.streaming.brokers.common import create_topics, delete_topics

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

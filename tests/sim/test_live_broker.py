"""The scripted cases of ``fencewatch.sim.live`` (short form) against a fresh Apache Kafka broker of
each version, and every expectation they recorded checked against the broker's own answers in
its request log: which versions reject the KIP-1251 commit, the zombie's UNKNOWN_MEMBER_ID,
the fenced transactional instance, KIP-1319's answers on 4.4, the classic generation check.

The broker: ``fencewatch.streaming.brokers.kafka.KafkaBroker`` (Apache Kafka's jars), or, where
that module is not there, a launcher script named by ``$FENCEWATCH_KAFKA_LAUNCHER``
(``SCRIPT VERSION DIR`` printing ``BOOTSTRAP=... PID=... REQUEST_LOG=...``, as
``tests/fixtures/kafka/make_captures.py`` takes).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator

import pytest

from fencewatch.sim.live.capture import wait_for_log
from fencewatch.sim.live.driver import run
from fencewatch.sim.live.expect import check, read_request_log

VERSIONS = {"4.2": "4.2.2", "4.3": "4.3.1", "4.4": "4.4.0"}
LAUNCHER_ENV = "FENCEWATCH_KAFKA_LAUNCHER"

# the cases that tell broker versions apart, or that only a real coordinator can answer
MUST_CHECK = {("kip1251", "behind_on_owned"), ("kip1251", "behind_on_kept"), ("kip1251", "behind_on_taken"),
              ("zombie", "zombie_commit"), ("static_rejoin", "static_leave"), ("txn_fence", "fenced_add_offsets"),
              ("txn_fence", "fenced_txn_commit_absent"), ("txn_stale_metadata", "txn_stale_on_kept"),
              ("kip1319", "txn_behind_on_newer"), ("kip1319", "txn_unknown_group"),
              ("classic_generation", "classic_stale_generation"), ("classic_generation", "classic_zombie_commit")}


def _stop(pid: int) -> None:
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)
    os.kill(pid, signal.SIGKILL)


@pytest.fixture(params=list(VERSIONS))
def fresh_kafka(request) -> Iterator[tuple[str, str, str]]:
    """(bootstrap, request log path, exact version) of a broker started for this test."""
    try:
        from fencewatch.streaming.brokers.kafka import KafkaBroker
    except ImportError:
        KafkaBroker = None
    if KafkaBroker is not None:
        with KafkaBroker(request.param) as b:
            yield b.bootstrap, str(b.request_log_path), b.version
        return
    launcher = os.environ.get(LAUNCHER_ENV)
    if not launcher:
        pytest.skip(f"no Apache Kafka broker: streaming.brokers.kafka is missing and ${LAUNCHER_ENV} is not set")
    version = VERSIONS[request.param]
    work = tempfile.mkdtemp(prefix=f"fw-live-{version}-")
    out = subprocess.run([launcher, version, os.path.join(work, "broker")], capture_output=True, text=True,
                         timeout=180, check=True).stdout
    fields = dict(kv.split("=", 1) for kv in out.split() if "=" in kv)
    try:
        yield fields["BOOTSTRAP"], fields["REQUEST_LOG"], version
    finally:
        _stop(int(fields["PID"]))
        shutil.rmtree(work, ignore_errors=True)


@pytest.mark.broker
@pytest.mark.slow
def test_scripted_cases_answer_as_each_version_should(fresh_kafka):
    bootstrap, request_log, version = fresh_kafka
    result = run(bootstrap, "all", short=True, seed=7)
    assert result.failed == {}
    wait_for_log(request_log)
    with open(request_log, encoding="utf-8") as f:
        objects = read_request_log(f, {e.api for e in result.expectations})
    results = check(result.expectations, objects, version)
    assert [(r.expectation.scenario, r.expectation.case, r.detail) for r in results if not r.ok] == []
    assert MUST_CHECK <= {(r.expectation.scenario, r.expectation.case) for r in results}
    # the fresh broker answered the routing probes before it had a group coordinator
    assert {r.expectation.case for r in results if r.expectation.scenario == "coordinator_routing"} == {
        "routing_commit", "routing_heartbeat", "routing_txn_commit"}

"""/healthz and /readyz: what each answers, by the rules (a clock we move) and over real HTTP.

Liveness is "the work runs" (not failed, not stopped, main loop reporting); readiness is "the
work makes progress" (a micro-batch within N triggers, input lag bounded). The query's side
(a real Spark query that stalls or fails) is tests/streaming/test_health_probes.py.
"""
from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest

from fencewatch.sinks.health import Health, HealthConfig
from fencewatch.sinks.metrics import MetricsConfig
from fencewatch.sinks.prometheus import MetricsSink

CONFIG = HealthConfig(trigger_s=1.0, ready_triggers=10, max_lag_records=1000, startup_grace_s=60, loop_timeout_s=30)


class Clock:
    def __init__(self, t: float = 1_000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def answers(h: Health) -> tuple[tuple[int, str], tuple[int, str]]:
    live, ready = h.liveness(), h.readiness()
    return (live.http_status, live.status), (ready.http_status, ready.status)


def test_starting_is_live_within_the_grace_and_not_ready():
    clock = Clock()
    h = Health(CONFIG, clock=clock)
    assert answers(h) == ((200, "starting"), (503, "starting"))
    clock.t += 61
    assert answers(h) == ((503, "not_started"), (503, "not_started"))


def test_running_with_a_recent_batch_is_live_and_ready():
    clock = Clock()
    h = Health(CONFIG, clock=clock)
    h.running(True)
    assert answers(h) == ((200, "ok"), (503, "starting"))  # no micro-batch yet
    h.progressed(lag_records=0)
    clock.t += 5
    h.running(True)
    assert answers(h) == ((200, "ok"), (200, "ready"))
    assert json.loads(h.readiness().body()) == {"status": "ready", "reason": "the last micro-batch completed 5.0 s ago",
                                                "last_progress_s_ago": 5.0, "input_lag_records": 0}


def test_a_stalled_query_is_live_but_not_ready():
    clock = Clock()
    h = Health(CONFIG, clock=clock)
    h.running(True)
    h.progressed(0)
    for _ in range(11):  # the main loop keeps reporting; no batch completes
        clock.t += 1
        h.running(True)
    assert answers(h) == ((200, "ok"), (503, "stalled"))
    assert "11 s ago (> 10 triggers of 1 s)" in h.readiness().reason
    h.progressed(0)
    assert answers(h) == ((200, "ok"), (200, "ready"))


def test_lag_over_the_bound_is_not_ready():
    h = Health(CONFIG, clock=Clock())
    h.running(True)
    h.progressed(lag_records=1001)
    assert answers(h) == ((200, "ok"), (503, "lagging"))
    h.progressed(lag_records=1000)
    assert answers(h) == ((200, "ok"), (200, "ready"))
    unbounded = Health(HealthConfig(max_lag_records=None), clock=Clock())
    unbounded.running(True)
    unbounded.progressed(lag_records=10**9)
    assert unbounded.readiness().ok


def test_a_failed_query_is_neither_live_nor_ready():
    clock = Clock()
    h = Health(CONFIG, clock=clock)
    h.running(True)
    h.progressed(0)
    h.running(False, "StreamingQueryException: boom")
    assert answers(h) == ((503, "failed"), (503, "failed"))
    assert h.liveness().reason == "the query failed: StreamingQueryException: boom"
    h.running(False)  # ended without a failure (a stop)
    assert answers(h) == ((503, "stopped"), (503, "stopped"))
    h.running(True)  # restarted from the checkpoint
    assert answers(h) == ((200, "ok"), (200, "ready"))


def test_a_main_loop_that_stopped_reporting_is_not_live():
    clock = Clock()
    h = Health(CONFIG, clock=clock)
    h.running(True)
    h.progressed(0)
    clock.t += 31
    assert answers(h) == ((503, "hung"), (503, "hung"))


def test_invalid_bounds_are_refused_with_their_valid_values():
    with pytest.raises(ValueError, match="ready_triggers=0; valid: >= 1"):
        Health(HealthConfig(ready_triggers=0))
    assert MetricsConfig(health=HealthConfig(trigger_s=0)).validate() == ["health trigger_s=0; valid: > 0"]


def get(url: str) -> tuple[int, str, str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as res:
            return res.status, res.headers["Content-Type"], res.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.headers["Content-Type"], err.read().decode()


def test_the_exporter_serves_the_probes_beside_the_metrics():
    clock = Clock()
    sink = MetricsSink(MetricsConfig(port=0, health=CONFIG), clock=clock)
    host, port = sink.start()
    base = f"http://{host}:{port}"
    try:
        code, ctype, body = get(base + "/readyz")
        assert (code, ctype, json.loads(body)["status"]) == (503, "application/json", "starting")
        sink.set_query_state(True)
        sink.add_batch(batch_id=0, input_lag_records=3)  # the batch writer's report: progress and lag
        code, _, body = get(base + "/readyz")
        assert code == 200 and json.loads(body)["input_lag_records"] == 3
        clock.t += 11
        sink.set_query_state(True)
        code, _, body = get(base + "/readyz")
        assert code == 503 and json.loads(body)["status"] == "stalled"
        assert get(base + "/healthz")[0] == 200
        sink.add_batch(batch_id=0)  # a retried batch (already counted) is progress all the same
        assert get(base + "/readyz")[0] == 200
        sink.set_query_state(False, "boom")
        code, _, body = get(base + "/healthz")
        assert code == 503 and json.loads(body) == {"status": "failed", "reason": "the query failed: boom",
                                                    "loop_reported_s_ago": 0.0}
        code, ctype, body = get(base + "/metrics")
        assert code == 200 and ctype.startswith("text/plain") and "fencewatch_batches_total 1.0" in body
        assert "fencewatch_up" in body and "healthz" not in body
    finally:
        sink.close()

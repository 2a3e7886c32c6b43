"""The job's probes against real Spark queries (real Tansu, real Spark, real HTTP).

- A stalled query: the job's own query (``start_query`` with its ``BatchWriter``) whose sink
  stops returning, as a write stuck on its destination would: it keeps running (``/healthz``
  200) but completes no micro-batch (``/readyz`` 503 ``stalled``), and is ready again once the
  sink returns.
- A failed query: a streaming query whose batch raises: ``/healthz`` 503 with the failure.

In both, the job's main loop (``job._watch``) is what tells the exporter.
"""
from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from dataclasses import replace

import pytest

from fencewatch.sim.world import SimConfig, simulate
from fencewatch.sim.profiles import profile
from fencewatch.streaming.config import settings as cfgmod
from fencewatch.streaming.runtime.writer import BatchWriter
from fencewatch.streaming.commands.run import _watch
from fencewatch.streaming.runtime.query import make_sinks, query_facts, start_query, stop_between_batches
from reliability_harness import produce_clock, produce_events


def probe(base: str, path: str) -> tuple[int, dict]:
    try:
        with urllib.request.urlopen(base + path, timeout=10) as res:
            return res.status, json.loads(res.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def wait_probe(base: str, path: str, status: str, timeout_s: float) -> tuple[int, dict]:
    deadline = time.monotonic() + timeout_s
    while True:
        code, body = probe(base, path)
        if body["status"] == status or time.monotonic() > deadline:
            return code, body
        time.sleep(0.2)


@pytest.mark.spark
@pytest.mark.broker
def test_a_stalled_query_is_live_but_not_ready(spark, broker, topic_factory, tmp_path):
    hb, off = topic_factory(1, "hb"), topic_factory(1, "off")
    events = simulate(SimConfig(knobs=replace(profile("mixed"), groups=2), seed=5, duration_ms=None, max_events=300))
    produce_events(broker, hb, off, events)
    produce_clock(broker, [hb, off], events[-1]["ts"])
    cfg = cfgmod.load_config(environ={}, overrides={
        "streaming": {"bootstrap_servers": broker, "heartbeats_topic": hb, "offsets_topic": off,
                      "starting_offsets": "earliest", "checkpoint_location": str(tmp_path / "cp"),
                      "trigger_interval": "200ms"},
        "sinks": {"health_ready_triggers": 25, "alerts_format": "json", "alerts_topic": topic_factory(1, "alerts"),
                  "dlq_topic": topic_factory(1, "dlq")}})  # ready window: 25 triggers of 0.2 s = 5 s
    kafka, metrics = make_sinks(cfg, spark, metrics_port=0)
    host, port = metrics.start()
    base = f"http://{host}:{port}"
    writer = BatchWriter(cfg, kafka=kafka, metrics=metrics)
    writer.progress = lambda: query_facts(writer.query)
    query = start_query(spark, cfg, writer)
    stop = threading.Event()
    loop = threading.Thread(target=_watch, args=(query, stop, writer), daemon=True)
    loop.start()
    held = False
    try:
        code, body = wait_probe(base, "/readyz", "ready", 240)
        assert (code, body["status"]) == (200, "ready"), body
        code, body = probe(base, "/healthz")
        assert (code, body["status"]) == (200, "ok"), body
        writer._gate.acquire()  # the next foreachBatch call waits: a sink that does not return
        held = True
        code, body = wait_probe(base, "/readyz", "stalled", 60)
        assert (code, body["status"]) == (503, "stalled"), body
        assert "> 25 triggers of 0.2 s" in body["reason"]
        code, body = probe(base, "/healthz")
        assert (code, body["status"]) == (200, "ok") and query.isActive
        writer._gate.release()
        held = False
        code, body = wait_probe(base, "/readyz", "ready", 60)
        assert (code, body["status"]) == (200, "ready"), body
    finally:
        if held:
            writer._gate.release()
        stop.set()
        loop.join(30)
        stop_between_batches(query, 60, writer=writer)
        kafka.close()
        metrics.close()


@pytest.mark.spark
def test_a_failed_query_is_not_live(spark, tmp_path):
    cfg = cfgmod.load_config(environ={}, overrides={"streaming": {"checkpoint_location": str(tmp_path / "cp")}})
    from fencewatch.sinks.metrics import MetricsConfig
    from fencewatch.sinks.prometheus import MetricsSink
    from fencewatch.streaming.runtime.probes import health_config

    metrics = MetricsSink(MetricsConfig(port=0, health=health_config(cfg)))
    host, port = metrics.start()
    writer = BatchWriter(cfg, metrics=metrics)

    def fail_on_second(df, batch_id):
        metrics.add_batch(batch_id=batch_id)
        if batch_id >= 1:
            raise RuntimeError(f"boom in batch {batch_id}")

    query = (spark.readStream.format("rate").option("rowsPerSecond", 5).load().writeStream
             .foreachBatch(fail_on_second).option("checkpointLocation", str(tmp_path / "rate-cp"))
             .trigger(processingTime="200 milliseconds").start())
    try:
        _watch(query, threading.Event(), writer)  # the job's main loop: returns when the query ends
        code, body = probe(f"http://{host}:{port}", "/healthz")
        assert (code, body["status"]) == (503, "failed"), body
        assert "boom in batch 1" in body["reason"] and "\n" not in body["reason"]
        assert probe(f"http://{host}:{port}", "/readyz")[0] == 503
    finally:
        query.stop()
        metrics.close()


def test_failure_summary_names_the_python_exception_not_py4js_wrapper():
    from fencewatch.streaming.runtime.probes import failure_summary

    wrapped = RuntimeError('An exception was raised by the Python Proxy. Return Message: Traceback (most recent '
                           'call last):\n  File "x.py", line 5, in f\n    raise RuntimeError("boom")\n'
                           'RuntimeError: boom\n\n=== Streaming Query ===\nIdentifier: [id = 1]')
    assert failure_summary(wrapped) == "RuntimeError: boom"
    assert failure_summary(ValueError("one line\nand more")) == "one line"
    assert failure_summary(ValueError("")) == "ValueError"

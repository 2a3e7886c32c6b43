"""The exporter of `fencewatch bridge`: its own metrics and probes, on its own port.

What lives here: :class:`BridgeMetrics`. The bridge's live loop tells it, once per poll of
its source topic, what the round read and produced (plain counts, no Kafka types); a scrape
serves a snapshot (names, help and labels from ``sinks/metrics.py``, ``BRIDGE_METRICS``). The
probes are those of the job (``sinks/health.py``) with the bridge's loop as the work and one
poll of the source topic as the unit of progress: ``/healthz`` while the loop runs, ``/readyz``
while it polls and its source lag is bounded.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from typing import Any, Callable, Mapping

from prometheus_client import CollectorRegistry, generate_latest

from fencewatch.sinks import metrics as m
from fencewatch.sinks.build_info import running_versions
from fencewatch.sinks.exposition import adder, empty_families, serve
from fencewatch.sinks.health import Health, HealthConfig
from fencewatch.state.records import DEFAULT_CLUSTER

log = logging.getLogger(__name__)

DEFAULT_PORT = 9465
"""The bridge's metrics port: the job's (9464) plus one, so both run on one host."""


class BridgeMetrics:
    """Counts the bridge reports; serves them with /healthz and /readyz.

    ::

        metrics = BridgeMetrics("request_log", port=9465, cluster="eu-1")
        metrics.start()
        metrics.running(True)                                   # each turn of the loop
        metrics.add(records=1000, events={"heartbeat": 990}, undecodable={"BAD_JSON": 1},
                    routing={("OffsetCommit", "NOT_COORDINATOR"): 2}, produced=True)
        metrics.progressed(lag_records=0)                       # a poll round completed
        metrics.close()
    """

    def __init__(self, source: str, *, host: str = "127.0.0.1", port: int = DEFAULT_PORT,
                 health: HealthConfig | None = None, clock: Callable[[], float] = time.time,
                 build_labels: Mapping[str, str] | None = None, cluster: str | None = None) -> None:
        if source not in m.BRIDGE_INPUTS:
            raise ValueError(f"unknown bridge input {source!r}; valid: {', '.join(m.BRIDGE_INPUTS)}")
        self.source, self.host, self.port = source, host, port
        # the cluster the bridge reads (its --cluster), on every series but build_info: several
        # bridges in one Prometheus stay apart as the job's group series do (docs/metrics.md)
        self.cluster = cluster or DEFAULT_CLUSTER
        self._clock = clock
        self.health = Health(health or HealthConfig(trigger_s=0.5), clock=clock, what="bridge",
                             unit="poll of its source topic")
        self._build = dict(build_labels) if build_labels is not None else running_versions()
        self._lock = threading.Lock()
        self._records = 0.0
        self._events: Counter = Counter()
        # at 0 from the start, so rate() sees 0 rather than nothing
        self._undecodable: Counter = Counter({r: 0 for r in m.UNDECODABLE_REASONS})
        self._routing: Counter = Counter({(a, e): 0 for a in m.ROUTING_APIS for e in m.ROUTING_ERRORS})
        self._delivery_failures = 0.0
        self._lag: float | None = None
        self._last_produce_s: float | None = None
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(_Collector(self))
        self._server = None

    # ------------------------------------------------------------------ serving

    def start(self, host: str | None = None, port: int | None = None) -> tuple[str, int]:
        """Serve /metrics, /healthz and /readyz (port 0 picks a free one); (host, bound port)."""
        host = self.host if host is None else host
        port = self.port if port is None else port
        self._server = serve(self.registry, {"/healthz": self.health.liveness, "/readyz": self.health.readiness},
                             host, port)
        self.port = self._server.server_port
        log.info("bridge metrics at http://%s:%d/metrics (probes /healthz, /readyz)", host, self.port)
        return host, self.port

    def close(self) -> None:
        """Stop serving (idempotent)."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def render(self) -> str:
        """The exposition text a scrape would get now."""
        return generate_latest(self.registry).decode()

    # ------------------------------------------------------------------ input

    def running(self, active: bool, failure: str | None = None) -> None:
        """Each turn of the loop: it runs; at its end: it stopped (with its failure, if it failed)."""
        self.health.running(active, failure)

    def progressed(self, lag_records: int | None = None) -> None:
        """A poll of the source topic completed; ``lag_records``: what it has not read yet."""
        with self._lock:
            if lag_records is not None:
                self._lag = float(lag_records)
        self.health.progressed(lag_records)

    def add(self, *, records: int = 0, events: Mapping[str, int] | None = None,
            undecodable: Mapping[str, int] | None = None, routing: Mapping[tuple[str, str], int] | None = None,
            delivery_failures: int = 0, produced: bool = False) -> None:
        """Counts of one round (deltas): records read, events produced by type, undecodable records
        by reason code, routing answers by (API, error); ``produced``: an event was produced now."""
        with self._lock:
            self._records += records
            for kind, n in (events or {}).items():
                self._events[m.closed(kind, m.EVENT_TYPES)] += n
            for reason, n in (undecodable or {}).items():
                self._undecodable[m.closed(reason, m.UNDECODABLE_REASONS)] += n
            for (api, error), n in (routing or {}).items():
                if api in m.ROUTING_APIS and error in m.ROUTING_ERRORS:
                    self._routing[(api, error)] += n
            self._delivery_failures += delivery_failures
            if produced:
                self._last_produce_s = self._clock()

    # ------------------------------------------------------------------ scrape

    def _families(self):
        families = empty_families(m.BRIDGE_METRICS)
        add = adder(families)
        p = m.PREFIX
        c = self.cluster
        with self._lock:
            add(p + "bridge_records_total", (c, self.source), self._records)
            for kind, n in self._events.items():
                add(p + "bridge_events_total", (c, kind), n)
            for reason, n in self._undecodable.items():
                add(p + "bridge_undecodable_records_total", (c, reason), n)
            for (api, error), n in self._routing.items():
                add(p + "bridge_coordinator_routing_answers_total", (c, api, error), n)
            add(p + "bridge_delivery_failures_total", (c,), self._delivery_failures)
            if self._lag is not None:
                add(p + "bridge_source_lag_records", (c,), self._lag)
            if self._last_produce_s is not None:
                add(p + "bridge_last_produce_timestamp_seconds", (c,), self._last_produce_s)
        add(p + "bridge_up", (c,), 1.0 if self.health.liveness().ok else 0.0)
        b = self._build
        add(p + "build_info", (b["version"], b["python_version"], b["pyspark_version"]), 1.0)
        return families.values()


class _Collector:
    """The registry's view of the exporter; collect() runs at scrape time."""

    def __init__(self, metrics: BridgeMetrics) -> None:
        self._metrics = metrics

    def collect(self) -> Any:
        return list(self._metrics._families())

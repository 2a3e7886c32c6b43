"""How fencewatch's exporters expose what they count: metric families and the HTTP endpoint.

What lives here: :func:`empty_families` (one prometheus_client family per
:class:`~fencewatch.sinks.metrics.MetricSpec`, so names, help and labels come from
``sinks/metrics.py`` only), :func:`adder` (one value written under a family and its
deprecated aliases), and :func:`serve`: ``/metrics`` (prometheus_client's own exposition:
text, OpenMetrics, gzip, ``name[]`` filters) plus the probes ``/healthz`` and ``/readyz``
(a :class:`~fencewatch.sinks.health.Answer` as JSON, 200 or 503) and pages (the job's ``/groups``). Used by the job's exporter
(``sinks/prometheus.py``) and the bridge's (``sinks/bridge_metrics.py``).
"""

from __future__ import annotations

import socket
import threading
from typing import Any, Callable, Iterable, Mapping
from wsgiref.simple_server import WSGIRequestHandler, make_server

from prometheus_client import CollectorRegistry, make_wsgi_app
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.exposition import ThreadingWSGIServer

from fencewatch.sinks import metrics as m
from fencewatch.sinks.health import Answer

Probe = Callable[[], Answer]
Page = Callable[[Mapping[str, str]], tuple[str, bytes]]
"""A page: its query parameters -> (content type, body); served 200 (``/groups``)."""

_FAMILY = {m.COUNTER: CounterMetricFamily, m.GAUGE: GaugeMetricFamily, m.HISTOGRAM: HistogramMetricFamily}


def empty_families(specs: Iterable[m.MetricSpec]) -> dict[str, Any]:
    """Name -> an empty family of the spec's type, help and labels, in the specs' order."""
    return {spec.name: _FAMILY[spec.type](spec.name, spec.help, labels=spec.labels) for spec in specs}


def adder(families: dict[str, Any]) -> Callable[[str, tuple, float], None]:
    """``add(name, labels, value)``: one sample of a counter or gauge, repeated under its aliases."""
    def add(name: str, labels: tuple, value: float) -> None:
        for family in (name, *m.ALIASES.get(name, ())):
            families[family].add_metric([str(x) for x in labels], value)

    return add


class _QuietHandler(WSGIRequestHandler):
    """No access log line per scrape or probe."""

    def log_message(self, format: str, *args: Any) -> None:
        pass


def app(registry: CollectorRegistry, probes: Mapping[str, Probe], pages: Mapping[str, Page] | None = None):
    """The WSGI application: a probe's answer or a page on its path, the metrics on any other."""
    from urllib.parse import parse_qsl

    metrics = make_wsgi_app(registry)
    pages = dict(pages or {})

    def application(environ, start_response):
        path = environ.get("PATH_INFO", "")
        page = pages.get(path.rstrip("/") or path)
        if page is not None:
            ctype, body = page(dict(parse_qsl(environ.get("QUERY_STRING", ""))))
            start_response("200 OK", [("Content-Type", ctype), ("Content-Length", str(len(body))),
                                      ("Cache-Control", "no-store")])
            return [body]
        probe = probes.get(path)
        if probe is None:
            return metrics(environ, start_response)
        answer = probe()
        body = answer.body()
        start_response(f"{answer.http_status} {'OK' if answer.ok else 'Service Unavailable'}",
                       [("Content-Type", "application/json"), ("Content-Length", str(len(body))),
                        ("Cache-Control", "no-store")])
        return [body]

    return application


def serve(registry: CollectorRegistry, probes: Mapping[str, Probe], host: str, port: int,
          pages: Mapping[str, Page] | None = None):
    """Serve on host:port (0: a free port) from a daemon thread; returns the server (its
    ``server_port`` is the bound port; ``shutdown()`` and ``server_close()`` stop it)."""

    class Server(ThreadingWSGIServer):
        daemon_threads = True
        address_family = _family(host, port)

    server = make_server(host, port, app(registry, probes, pages), Server, handler_class=_QuietHandler)
    threading.Thread(target=server.serve_forever, name=f"exporter-{server.server_port}", daemon=True).start()
    return server


def _family(host: str, port: int) -> socket.AddressFamily:
    """IPv6 for an IPv6 host (``::``), else IPv4."""
    infos = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    return infos[0][0]


def port_problem(host: str, port: int) -> str | None:
    """Why ``serve`` could not listen on host:port, or None: bound and released at once, with
    the same address reuse as the server (a port in TIME_WAIT is free to it)."""
    if port == 0:
        return None
    try:
        family = _family(host, port)
        with socket.socket(family, socket.SOCK_STREAM) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((host, port))
    except OSError as exc:
        return f"{host}:{port}: {exc.strerror or exc}"
    return None

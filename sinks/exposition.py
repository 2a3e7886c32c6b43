"""How fencewatch's exporters expose what they count: metric families built from their specs.

What lives here: :func:`empty_families` (one prometheus_client family per
:class:`~fencewatch.sinks.metrics.MetricSpec`, so names, help and labels come from
``sinks/metrics.py`` only) and :func:`adder` (one value written under a family and its
deprecated aliases). Used by the job's exporter (``sinks/prometheus.py``) and the bridge's.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily

from fencewatch.sinks import metrics as m

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

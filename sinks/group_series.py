"""The group gauges' series as the exporter shows them: a labelled group's own, the rest folded
into ``group="other"`` (as each spec's ``fold`` says: members and partitions summed, the earliest
expiry deadline; the number of groups firing). The gauges read off a status are shown from their
specs alone (``sinks.metrics.STATUS_METRICS``), so a new one needs no line here. Pure functions of
the exporter's state, so the sink's scrape stays a short loop."""
from __future__ import annotations

from collections import Counter
from typing import Any, Callable, Iterable, Mapping

from fencewatch.sinks import metrics as m
from fencewatch.sinks.metrics import OTHER, GroupKey


_GAUGES = tuple(spec for spec in m.STATUS_METRICS if spec.type == m.GAUGE)
_FOLD = {"sum": lambda a, b: a + b, "min": min}


def group_model_series(statuses: Mapping[GroupKey, Any], label: Callable[[GroupKey], str],
                       add: Callable[[str, tuple, float], None]) -> None:
    """The gauges read off the groups' statuses (``sinks.metrics.STATUS_METRICS``), each from its
    spec alone: a gauge declared with its ``status_field`` is exported with no line here.
    Own series for labelled groups; a folded group adds to ``group="other"`` by the spec's
    ``fold``, or shows nowhere (a group's epoch or state is no sum). A gauge without a ``group``
    label counts every group by the field's value (``groups``, not limited by max_groups).
    Within a family the series come in the statuses' order, folded ones after the labelled."""
    shown = {key: label(key) for key in statuses}
    for spec in _GAUGES:
        if "group" not in spec.labels:
            _counted_by_value(spec, statuses, add)
        else:
            _group_gauge(spec, statuses, shown, add)


def _counted_by_value(spec: m.MetricSpec, statuses: Mapping[GroupKey, Any],
                      add: Callable[[str, tuple, float], None]) -> None:
    fields = spec.labels[1:]  # after cluster
    counts: Counter = Counter()
    for (cluster, _), s in statuses.items():
        counts[(cluster, *(getattr(s, f) for f in fields))] += 1
    for labels, n in counts.items():
        add(spec.name, labels, n)


def _group_gauge(spec: m.MetricSpec, statuses: Mapping[GroupKey, Any], shown: Mapping[GroupKey, str],
                 add: Callable[[str, tuple, float], None]) -> None:
    name, field, unit = spec.name, spec.status_field, spec.status_unit
    fields = spec.labels[2:]  # after cluster, group: the status's fields of those names
    state = field in fields  # 1 for the current value, the value a label
    fold = _FOLD[spec.fold] if spec.fold else None
    folded: dict[tuple, Any] = {}
    for key, s in statuses.items():
        value = 1 if state else getattr(s, field)
        if value is None:
            continue
        tail = tuple(getattr(s, f) for f in fields)
        if shown[key] == OTHER:
            if fold is not None:
                at = (key[0], *tail)
                folded[at] = fold(folded[at], value) if at in folded else value
            continue
        add(name, (*key, *tail), value / unit if unit != 1 else value)
    for (cluster, *tail), value in folded.items():
        add(name, (cluster, OTHER, *tail), value / unit if unit != 1 else value)


def firing_series(grouped: Iterable[GroupKey], firing_by_group: Mapping[GroupKey, Mapping[str, bool]],
                  label: Callable[[GroupKey], str], add: Callable[[str, tuple, float], None]) -> None:
    """Lifecycle alerts: 0/1 per labelled group, number of groups firing for "other"."""
    firing: Counter = Counter()
    for (cluster, own) in grouped:
        if own:
            for kind in m.LIFECYCLE_KINDS:
                firing[(cluster, own, kind)] += 0
    for (cluster, group), kinds in firing_by_group.items():
        shown = label((cluster, group))
        for kind, on in kinds.items():
            firing[(cluster, shown, kind)] += 1 if on else 0
    for labels, n in firing.items():
        add(m.ALERTS_FIRING, labels, n)


def protocol_totals(protocol: str, statuses: Mapping[GroupKey, Any], label: Callable[[GroupKey], str],
                    stores: Iterable[Mapping[GroupKey, Mapping[str, Mapping[tuple, float]]]]) -> dict:
    """What the exporter counted for the groups whose last status says ``protocol`` (``streams``):
    how many, their verdicts by class (``commits_judged_total`` of one policy, so each verdict
    once) and alerts by kind, summed over ``stores`` (the series, and increments held for a
    group just promoted). A group folded into ``other`` (past ``max_groups``) shares its series
    and cannot be told apart: counted in ``folded`` only. For the demo's closing summary, which
    counts verdicts but not by group type."""
    one_policy = m.POLICIES[0]
    classes: Counter = Counter()
    alerts: Counter = Counter()
    keys = [key for key, status in statuses.items() if status.protocol == protocol]
    folded = 0
    for key in keys:
        if label(key) != key[1]:
            folded += 1
            continue
        for store in stores:
            series = store.get(key, {})
            for (_, policy, _, cls), n in series.get(m.COMMITS_JUDGED_TOTAL, {}).items():
                if policy == one_policy:
                    classes[cls] += n
            for (kind, _), n in series.get(m.ALERTS_TOTAL, {}).items():
                alerts[kind] += n
    return {"groups": len(keys), "folded": folded,
            "classes": {k: int(v) for k, v in sorted(classes.items()) if v},
            "alerts": {k: int(v) for k, v in sorted(alerts.items()) if v}}

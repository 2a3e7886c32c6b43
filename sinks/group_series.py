"""The group gauges' series as the exporter shows them: a labelled group's own, the rest folded
into ``group="other"`` (as each spec's ``fold`` says: members and partitions summed, the earliest
expiry deadline; the number of groups firing). The gauges read off a status are shown from their
specs alone (``sinks.metrics.STATUS_METRICS``), so a new one needs no line here. Pure functions of
the exporter's state, so the sink's scrape stays a short loop."""
from __future__ import annotations

from collections import Counter
from operator import attrgetter
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
    Within a family the series come in the statuses' order, folded ones after the labelled.
    The groups are split into labelled and folded once, not per gauge: beyond ``max_groups``
    most groups are folded, and a gauge that does not fold skips them all."""
    labelled, folded = [], []
    for key, s in statuses.items():
        (folded if label(key) == OTHER else labelled).append((key, s))
    for spec in _GAUGES:
        if "group" not in spec.labels:
            _counted_by_value(spec, statuses.items(), add)
        else:
            _group_gauge(spec, labelled, folded, add)


def _tail(fields: tuple[str, ...]) -> Callable[[Any], tuple]:
    """A status's values of ``fields``, as a tuple (the labels after cluster and group)."""
    if not fields:
        return lambda s: ()
    if len(fields) == 1:
        one = attrgetter(fields[0])
        return lambda s: (one(s),)
    return attrgetter(*fields)


def _counted_by_value(spec: m.MetricSpec, statuses: Iterable[tuple[GroupKey, Any]],
                      add: Callable[[str, tuple, float], None]) -> None:
    tail = _tail(spec.labels[1:])  # after cluster
    counts: Counter = Counter()
    for (cluster, _), s in statuses:
        counts[(cluster, *tail(s))] += 1
    for labels, n in counts.items():
        add(spec.name, labels, n)


def _group_gauge(spec: m.MetricSpec, labelled: list, folded: list, add: Callable[[str, tuple, float], None]) -> None:
    name, field, unit = spec.name, spec.status_field, spec.status_unit
    fields = spec.labels[2:]  # after cluster, group: the status's fields of those names
    tail = _tail(fields)
    # a state: 1 for the current value, the value a label; else the field's number
    value_of = (lambda s: 1) if field in fields else attrgetter(field)
    for key, s in labelled:
        value = value_of(s)
        if value is not None:
            add(name, (*key, *tail(s)), value / unit if unit != 1 else value)
    if spec.fold is None:
        return
    fold, sums = _FOLD[spec.fold], {}
    for (cluster, _), s in folded:
        value = value_of(s)
        if value is not None:
            at = (cluster, *tail(s))
            sums[at] = fold(sums[at], value) if at in sums else value
    for (cluster, *rest), value in sums.items():
        add(name, (cluster, OTHER, *rest), value / unit if unit != 1 else value)


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

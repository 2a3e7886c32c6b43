"""The group gauges' series as the exporter shows them: a labelled group's own, the rest folded
into ``group="other"`` (members and partitions summed, the earliest expiry deadline, the number of
groups firing). Pure functions of the exporter's state, so the sink's scrape stays a short loop."""
from __future__ import annotations

from collections import Counter
from typing import Any, Callable, Iterable, Mapping

from fencewatch.sinks import metrics as m
from fencewatch.sinks.metrics import OTHER, GroupKey


def group_model_series(statuses: Mapping[GroupKey, Any], label: Callable[[GroupKey], str],
                       add: Callable[[str, tuple, float], None]) -> None:
    """Group model gauges: own series for labelled groups, folded into "other"."""
    folded_members: Counter = Counter()
    folded_partitions: Counter = Counter()
    folded_deadline: dict[str, int] = {}
    by_state: Counter = Counter()
    for (cluster, group), s in statuses.items():
        by_state[(cluster, s.state)] += 1
        if label((cluster, group)) == OTHER:
            if s.members is not None:
                folded_members[(cluster, s.protocol)] += s.members
            if s.partitions_held is not None:
                folded_partitions[cluster] += s.partitions_held
            if s.expiry_deadline_ms is not None:
                folded_deadline[cluster] = min(folded_deadline.get(cluster, s.expiry_deadline_ms), s.expiry_deadline_ms)
            continue
        if s.members is not None:
            add(m.PREFIX + "group_members", (cluster, group, s.protocol), s.members)
        if s.partitions_held is not None:
            add(m.PREFIX + "group_partitions_held", (cluster, group), s.partitions_held)
        if s.group_epoch is not None:
            add(m.PREFIX + "group_epoch", (cluster, group), s.group_epoch)
        if s.max_member_epoch is not None:
            add(m.PREFIX + "group_max_member_epoch", (cluster, group), s.max_member_epoch)
        add(m.PREFIX + "group_state", (cluster, group, s.state), 1)
        if s.expiry_deadline_ms is not None:
            add(m.PREFIX + "group_offsets_expiry_deadline_timestamp_seconds", (cluster, group), s.expiry_deadline_ms / 1000)
    for (cluster, protocol), n in folded_members.items():
        add(m.PREFIX + "group_members", (cluster, OTHER, protocol), n)
    for cluster, n in folded_partitions.items():
        add(m.PREFIX + "group_partitions_held", (cluster, OTHER), n)
    for cluster, deadline in folded_deadline.items():
        add(m.PREFIX + "group_offsets_expiry_deadline_timestamp_seconds", (cluster, OTHER), deadline / 1000)
    for (cluster, state), n in by_state.items():
        add(m.PREFIX + "groups", (cluster, state), n)


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
        add(m.PREFIX + "alerts_firing", labels, n)


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
            for (_, policy, _, cls), n in series.get(m.PREFIX + "commits_judged_total", {}).items():
                if policy == one_policy:
                    classes[cls] += n
            for (kind, _), n in series.get(m.PREFIX + "alerts_total", {}).items():
                alerts[kind] += n
    return {"groups": len(keys), "folded": folded,
            "classes": {k: int(v) for k, v in sorted(classes.items()) if v},
            "alerts": {k: int(v) for k, v in sorted(alerts.items()) if v}}

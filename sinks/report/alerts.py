"""The report's alert sections: offset-expiry forecasts (KIP-211, contract §4), truncation
incidents (KIP-320, contract §5), alert counts by kind, and the transactional ids that
AVOIDABLE_FENCING alerts name.

Memory is bounded by groups, not by alerts: per group the latest forecast and running totals,
plus the :data:`MAX_INCIDENTS` latest truncation incidents overall. Alert ids are remembered to
drop a record read twice (the same input gives the same id: two copies of one file, a topic
read back after a replay).
"""
from __future__ import annotations

import heapq
from collections import Counter
from typing import Mapping

from fencewatch.state.model import AlertKind

MAX_INCIDENTS = 200  # truncation incidents listed (the latest); counts cover all
EXPIRING = AlertKind.OFFSETS_EXPIRING.value
EXPIRED = AlertKind.OFFSETS_EXPIRED.value
TRUNCATIONS = (AlertKind.LOG_TRUNCATION.value, AlertKind.OFFSET_OUT_OF_RANGE.value)
AVOIDABLE = AlertKind.AVOIDABLE_FENCING.value
ALERT_KINDS = tuple(k.value for k in AlertKind)

# What a forecast says (details of OFFSETS_EXPIRING / OFFSETS_EXPIRED, state.offsets._expiry_details).
_FORECAST_FIELDS = ("deadline_ms", "partitions", "group_type", "group_state", "members", "cleanup_by_ms",
                    "kip211_deadline_ms", "pre21_deadline_ms", "retention_ms")
_INCIDENT_FIELDS = ("topic", "partition", "committed_offset", "leader_epoch", "divergent_offset", "records",
                    "log_start_offset", "log_end_offset")


def _number(text) -> int | None:
    """A detail value as an int (alert details are strings; "" means none)."""
    if text is None or text == "":
        return None
    try:
        return int(text)
    except (TypeError, ValueError):
        return None


def _details(fields: tuple[str, ...], details: Mapping) -> dict:
    out = {}
    for f in fields:
        v = details.get(f)
        n = _number(v)
        out[f] = n if n is not None else (v if v not in ("", None) else None)
    return out


class AlertDigest:
    """Alert records (contract §8 dicts, ``details`` a map of strings), folded as they come."""

    def __init__(self) -> None:
        self.seen_ids: set[str] = set()
        self.duplicates = 0
        self.by_kind: Counter = Counter()  # (cluster, group, kind) -> alerts
        self.suppressed: Counter = Counter()  # (cluster, kind) -> occurrences folded by cool-down
        self.forecasts: dict[tuple, dict] = {}  # (cluster, group) -> latest OFFSETS_EXPIRING
        self.forecast_counts: Counter = Counter()
        self.expired: dict[tuple, dict] = {}  # (cluster, group) -> totals of OFFSETS_EXPIRED
        self.truncations: Counter = Counter()  # (cluster, group, kind) -> incidents
        self.truncated_records: Counter = Counter()  # (cluster, group, kind) -> records gone
        self.incidents: list = []  # heap of (ts, n, incident): the latest MAX_INCIDENTS
        self.transactional_ids: Counter = Counter()  # (cluster, group, transactional id) -> alerts
        self._n = 0

    def add(self, a: Mapping, cluster: str) -> bool:
        """Fold one alert; False for an alert id already folded."""
        alert_id = a.get("alert_id")
        if alert_id is not None:
            if alert_id in self.seen_ids:
                self.duplicates += 1
                return False
            self.seen_ids.add(alert_id)
        kind, group, ts = a["kind"], a.get("group_id") or "", int(a["ts"])
        details = a.get("details") or {}
        self.by_kind[cluster, group, kind] += 1
        self.suppressed[cluster, kind] += _number(details.get("suppressed_before")) or 0
        key = (cluster, group)
        if kind == EXPIRING:
            self.forecast_counts[key] += 1
            latest = self.forecasts.get(key)
            if latest is None or ts >= latest["ts"]:
                self.forecasts[key] = {"cluster": cluster, "group_id": group, "ts": ts,
                                       "severity": a.get("severity"), **_details(_FORECAST_FIELDS, details)}
        elif kind == EXPIRED:
            self._expired(key, ts, a, details)
        elif kind in TRUNCATIONS:
            self._truncation(cluster, group, kind, ts, a, details)
        elif kind == AVOIDABLE and details.get("transactional_id"):
            self.transactional_ids[cluster, group, details["transactional_id"]] += 1
        return True

    def _expired(self, key: tuple, ts: int, a: Mapping, details: Mapping) -> None:
        e = self.expired.get(key)
        if e is None:
            e = self.expired[key] = {"cluster": key[0], "group_id": key[1], "alerts": 0, "expired_offsets": 0,
                                     "first_ts": ts, "last_ts": ts, "last": None}
        e["alerts"] += 1
        e["expired_offsets"] += _number(details.get("expired_count")) or 0
        e["first_ts"] = min(e["first_ts"], ts)
        if ts >= e["last_ts"] or e["last"] is None:
            e["last_ts"] = ts
            e["last"] = {"ts": ts, "severity": a.get("severity"),
                         "expired_partitions": details.get("expired_partitions") or "",
                         **_details(_FORECAST_FIELDS, details)}

    def _truncation(self, cluster: str, group: str, kind: str, ts: int, a: Mapping, details: Mapping) -> None:
        self.truncations[cluster, group, kind] += 1
        incident = {"cluster": cluster, "group_id": group, "kind": kind, "ts": ts, "severity": a.get("severity"),
                    **_details(_INCIDENT_FIELDS, details)}
        self.truncated_records[cluster, group, kind] += incident["records"] or 0
        self._n += 1
        # by time, then by content (not by arrival: two inputs in another order list the same)
        order = (cluster, group, kind, str(incident["topic"]), incident["partition"] or 0,
                 incident["committed_offset"] or 0, self._n)
        item = (ts, _Desc(order), incident)
        if len(self.incidents) < MAX_INCIDENTS:
            heapq.heappush(self.incidents, item)
        elif item > self.incidents[0]:
            heapq.heapreplace(self.incidents, item)

    # -- sections of the summary

    def alert_counts(self, clusters: list[str]) -> list[dict]:
        by_cluster: dict[str, Counter] = {c: Counter() for c in clusters}
        for (cluster, _, kind), n in self.by_kind.items():
            by_cluster.setdefault(cluster, Counter())[kind] += n
        return [{"cluster": c, "counts": {k: counts.get(k, 0) for k in _kinds(counts)}}
                for c, counts in sorted(by_cluster.items())]

    def suppressed_by_kind(self) -> dict[str, int]:
        """Occurrences of per-commit kinds folded into a later alert's ``suppressed_before``."""
        out: Counter = Counter()
        for (_, kind), n in self.suppressed.items():
            if n:
                out[kind] += n
        return dict(out)

    def groups(self) -> dict[tuple, dict]:
        """(cluster, group) -> {kind: alerts}, for the groups' table."""
        out: dict[tuple, dict] = {}
        for (c, g, k), n in sorted(self.by_kind.items()):
            out.setdefault((c, g), {})[k] = n
        return out

    def expiry(self) -> dict:
        forecasts = sorted(({**f, "forecasts": self.forecast_counts[k]} for k, f in self.forecasts.items()),
                           key=lambda f: (f["deadline_ms"] is None, f["deadline_ms"] or 0, f["cluster"], f["group_id"]))
        expired = sorted(self.expired.values(), key=lambda e: (-e["expired_offsets"], e["cluster"], e["group_id"]))
        return {"forecasts": forecasts, "expired": expired,
                "counts": {"groups_forecast": len(forecasts), "forecasts": sum(self.forecast_counts.values()),
                           "groups_expired": len(expired),
                           "expired_alerts": sum(e["alerts"] for e in expired),
                           "expired_offsets": sum(e["expired_offsets"] for e in expired)}}

    def truncation(self) -> dict:
        groups: dict[tuple, dict] = {}
        for (cluster, group, kind), n in sorted(self.truncations.items()):
            g = groups.setdefault((cluster, group), {"cluster": cluster, "group_id": group,
                                                     **{k: 0 for k in TRUNCATIONS}, "records": 0})
            g[kind] += n
            g["records"] += self.truncated_records[cluster, group, kind]
        incidents = [i for _, _, i in sorted(self.incidents, key=lambda x: (-x[0], x[1].key))]
        counts = {k: sum(g[k] for g in groups.values()) for k in TRUNCATIONS}
        counts["records"] = sum(g["records"] for g in groups.values())
        counts["listed"] = len(incidents)
        return {"by_group": sorted(groups.values(), key=lambda g: (-g["records"], g["cluster"], g["group_id"])),
                "incidents": incidents, "counts": counts}

    def transactional(self, limit: int) -> list[dict]:
        rows = sorted(self.transactional_ids.items(), key=lambda kv: (-kv[1], kv[0]))[:limit]
        return [{"cluster": c, "group_id": g, "transactional_id": t, "alerts": n} for (c, g, t), n in rows]


class _Desc:
    """A heap key that keeps, among incidents of one time stamp, the first in content order."""

    __slots__ = ("key",)

    def __init__(self, key: tuple) -> None:
        self.key = key

    def __lt__(self, other: "_Desc") -> bool:
        return self.key > other.key

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Desc) and self.key == other.key


def _kinds(counts: Counter) -> list[str]:
    """Every known kind (0 when absent), then any other kind the input carried."""
    return list(ALERT_KINDS) + sorted(k for k in counts if k not in ALERT_KINDS)

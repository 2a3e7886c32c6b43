"""The summary document, built once from a :class:`.summary.ReportAggregator`'s counters.

Every count block carries the policy it is under (in its keys, or a ``policy`` field), and the
document's ``range`` is the time range every count comes from (each group also says when it was
first and last seen inside it). docs/report.md describes the fields.
"""
from __future__ import annotations

from collections import Counter
from datetime import datetime, timezone
from importlib import metadata

from .limits import limits
from .summary import (CLASSES, DEFAULT_CLUSTER, FORMAT, POLICIES, SERIES_GROUPS, TOP, classic_client_id,
                      empty_counts, add_into, rank_policy)


def iso(ms: int | None) -> str | None:
    if ms is None:
        return None
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")


def _version() -> str:
    try:
        return metadata.version("fencewatch")
    except metadata.PackageNotFoundError:
        return "unknown"


def summarize(agg, **facts) -> dict:
    """The summary of everything ``agg`` (a :class:`.summary.ReportAggregator`) read (docs/report.md);
    ``facts`` add what the caller knows about its inputs (``alerts_read``, ``events``: event type
    counts of a trace run through replay)."""
    agg.finish()
    return assemble(agg, facts)


def assemble(agg, facts: dict) -> dict:
    b = agg.broker_policy
    groups = _group_counts(agg)
    for key in agg.alerts.groups():
        groups.setdefault(key, empty_counts(b))
    clusters: dict[str, dict] = {}
    for (cluster, _), counts in groups.items():
        add_into(clusters.setdefault(cluster, empty_counts(b)), counts)
    totals = empty_counts(b)
    for counts in clusters.values():
        add_into(totals, counts)
    rank = rank_policy(b)
    alert_groups = agg.alerts.groups()
    group_rows = []
    for (cluster, group), counts in groups.items():
        span = agg.group_range.get((cluster, group))
        group_rows.append({"cluster": cluster, "group_id": group, "first_ts": span[0] if span else None,
                           "last_ts": span[1] if span else None, **counts,
                           "alerts": alert_groups.get((cluster, group), {})})
    group_rows.sort(key=lambda g: (-_avoidable(g, rank), -g["rejected"]["requests"], -g["requests"],
                                   g["cluster"], g["group_id"]))
    first = agg.from_ms if agg.from_ms is not None else agg.first_ts
    last = agg.to_ms if agg.to_ms is not None else agg.last_ts
    doc = {
        "fencewatch_report": FORMAT,
        "generated_by": f"fencewatch {_version()}",
        "broker_policy": b,
        "policies": list(POLICIES),
        "relaxed_policies": [p for p in POLICIES if p != b],
        "rank_policy": rank,
        "range": {"from_ms": first, "to_ms": last, "from": iso(first), "to": iso(last),
                  "requested_from_ms": agg.from_ms, "requested_to_ms": agg.to_ms,
                  "data_first_ms": agg.first_ts, "data_last_ms": agg.last_ts},
        "inputs": [dict(i) for i in agg.inputs if i["records"] or i["name"] != "(unnamed)"],
        "totals": totals,
        "clusters": [{"cluster": c, **counts} for c, counts in sorted(clusters.items())],
        "groups": group_rows,
        "series": _series(agg, [(g["cluster"], g["group_id"]) for g in group_rows[:SERIES_GROUPS]
                                if _avoidable(g, rank) or g["unsafe"][rank]["added"]], sorted(clusters)),
        "top_members": _top_members(agg, rank),
        "top_clients": _top_clients(agg, rank),
        "transactional_ids": agg.alerts.transactional(TOP),
        "expiry": agg.alerts.expiry(),
        "truncation": agg.alerts.truncation(),
        "alerts": {"by_cluster": agg.alerts.alert_counts(sorted(clusters)),
                   "folded_by_cooldown": dict(sorted(agg.alerts.suppressed_by_kind().items())),
                   "duplicates_dropped": agg.alerts.duplicates},
    }
    doc["streams"] = streams_section(agg)
    doc["limits"] = limits(doc, agg, facts)
    return doc


_STRICT, _KIP1251 = POLICIES.index("strict"), POLICIES.index("kip1251")


def streams_section(agg) -> dict:
    """What the relaxed check saves the streams groups (KIP-1071) under exactly-once: per streams
    group, its transactional commit requests that ``strict`` rejects and ``kip1251`` accepts whole
    (``eos_aborts_avoided``: each one a transaction the exact epoch check aborts; verdicts: their
    lines, class ``avoidable``), whatever ``broker_policy`` says about consumer groups, and whether
    the brokers already run the relaxed check on streams groups (``streams_broker_policy``: Kafka
    4.2+ does, contract §3.4), in which case nothing is left to gain."""
    policy = agg.streams_broker_policy
    rows: dict[tuple, dict] = {key: {"cluster": key[0], "group_id": key[1], "txn_requests": 0,
                                     "eos_aborts_avoided": {"requests": 0, "verdicts": 0}, "aborted_transactions": 0}
                               for key in sorted(agg.streams_groups)}
    for (cluster, group, kind, rejects, _, aborted), n in agg.rshapes.items():
        row = rows.get((cluster, group))
        if row is None or kind != "txn_commit":
            continue
        row["txn_requests"] += n
        row["aborted_transactions"] += n if aborted else 0
        if rejects >> _STRICT & 1 and not rejects >> _KIP1251 & 1:
            row["eos_aborts_avoided"]["requests"] += n
    for (cluster, group, kind, _, cls, *_), n in agg.vshapes.items():
        row = rows.get((cluster, group))
        if row is not None and kind == "txn_commit" and cls == "avoidable":
            row["eos_aborts_avoided"]["verdicts"] += n
    groups = sorted(rows.values(), key=lambda r: (-r["eos_aborts_avoided"]["requests"], r["cluster"], r["group_id"]))
    avoided = sum(r["eos_aborts_avoided"]["requests"] for r in groups)
    lines = sum(r["eos_aborts_avoided"]["verdicts"] for r in groups)
    already = policy != "strict"
    if not groups:
        statement = ("No streams groups in the input: a trace's streams_topology or streams member_assignment "
                     "events name them (--events), or --streams-group.")
    elif already:
        statement = (f"The brokers run {policy} on streams groups (Kafka 4.2+ does): it accepted {avoided:,} "
                     f"transactional commits of {len(groups):,} streams groups ({lines:,} verdicts) that the exact "
                     "epoch check rejects. Those EOS aborts were avoided already: nothing is left to gain for "
                     "streams groups.")
    else:
        statement = (f"The brokers run the exact epoch check (strict) on streams groups (Kafka 4.1): {avoided:,} "
                     f"transactional commits of {len(groups):,} streams groups ({lines:,} verdicts) were rejected "
                     "that KIP-1251's check (Kafka 4.2+) accepts: EOS aborts an upgrade avoids.")
    return {"broker_policy": policy, "already_relaxed": already, "groups_count": len(groups),
            "eos_aborts_avoided": {"requests": avoided, "verdicts": lines}, "statement": statement,
            "groups": groups[:TOP * 5]}


def _avoidable(g: dict, policy: str) -> int:
    a = g["avoidable"].get(policy)
    return a["requests"] if a else 0


def _group_counts(agg) -> dict[tuple, dict]:
    b = agg.broker_policy
    bi = POLICIES.index(b)
    relaxed = [(i, p) for i, p in enumerate(POLICIES) if p != b]
    out: dict[tuple, dict] = {}
    for (cluster, group, kind, accepts, cls, unsafe, answered, agrees, warming), n in agg.vshapes.items():
        c = out.get((cluster, group)) or out.setdefault((cluster, group), empty_counts(b))
        c["verdicts"] += n
        c["classes"][cls] = c["classes"].get(cls, 0) + n
        for i, p in enumerate(POLICIES):
            ok = accepts >> i & 1
            if not ok:
                c["rejected_by_policy"][p]["verdicts"] += n
            if unsafe and ok:
                c["unsafe"][p]["verdicts"] += n
                if not accepts >> bi & 1:
                    c["unsafe"][p]["added"] += n
        if not accepts >> bi & 1:
            c["rejected"]["verdicts"] += n
        if cls in ("zombie", "stale"):
            c[cls]["verdicts"] += n
            if not accepts:
                c[cls]["rejected_by_every_policy"] += n
        if answered:
            c["broker"]["answered_verdicts"] += n
        c["broker"]["model_agrees"]["unknown" if agrees is None else "true" if agrees else "false"] += n
        if warming:
            c["warming_up_verdicts"] += n
    for (cluster, group, kind, rejects, broker_error, aborted), n in agg.rshapes.items():
        c = out.get((cluster, group)) or out.setdefault((cluster, group), empty_counts(b))
        c["requests"] += n
        c["requests_by_kind"][kind] += n
        for i, p in enumerate(POLICIES):
            if rejects >> i & 1:
                c["rejected_by_policy"][p]["requests"] += n
        if rejects >> bi & 1:
            c["rejected"]["requests"] += n
            for i, p in relaxed:
                if not rejects >> i & 1:
                    c["avoidable"][p]["requests"] += n
        if aborted:
            c["aborted_transactions"]["requests"] += n
            for i, p in relaxed:
                if not rejects >> i & 1:
                    c["aborted_transactions"]["saved"][p] += n
        if broker_error is not None:
            c["broker"]["answered_requests"] += n
            if broker_error != "NONE":
                c["broker"]["rejected_requests"] += n
                errors = c["broker"]["errors"]
                errors[broker_error] = errors.get(broker_error, 0) + n
    for (cluster, group, p), n in agg.avoidable_lines.items():  # lines of requests p accepts whole
        c = out.get((cluster, group)) or out.setdefault((cluster, group), empty_counts(b))
        c["avoidable"][p]["verdicts"] += n
    return out


def _series(agg, top_groups: list[tuple], clusters: list[str]) -> dict:
    """Dense per-bucket arrays over the whole range: per cluster, fences under every policy;
    per top group, avoidable fences and added unsafe accepts under every other policy."""
    tl = agg.timeline
    span = tl.span()
    index = {bucket: i for i, bucket in enumerate(span)}
    n = len(span)
    bi = POLICIES.index(agg.broker_policy)
    relaxed = [(i, p) for i, p in enumerate(POLICIES) if i != bi]
    per_cluster = {c: {"cluster": c, "requests": [0] * n, "fenced": {p: [0] * n for p in POLICIES},
                       "aborted": [0] * n, "saved": {p: [0] * n for _, p in relaxed}} for c in clusters}
    for (cluster, bucket, kind, rejects, aborted), k in agg.fenced.items():
        s, i = per_cluster[cluster], index[bucket]
        s["requests"][i] += k
        for j, p in enumerate(POLICIES):
            if rejects >> j & 1:
                s["fenced"][p][i] += k
        if aborted:
            s["aborted"][i] += k
            for j, p in relaxed:
                if not rejects >> j & 1:
                    s["saved"][p][i] += k
    per_group = {g: {"cluster": g[0], "group_id": g[1], "avoidable": {p: [0] * n for _, p in relaxed},
                     "unsafe_added": {p: [0] * n for _, p in relaxed}} for g in top_groups}
    for (cluster, group, bucket, rejects, aborted), k in agg.avoid_series.items():
        s = per_group.get((cluster, group))
        if s is not None and rejects >> bi & 1:
            for j, p in relaxed:
                if not rejects >> j & 1:
                    s["avoidable"][p][index[bucket]] += k
    for (cluster, group, bucket, accepts), k in agg.unsafe_series.items():
        s = per_group.get((cluster, group))
        if s is not None and not accepts >> bi & 1:
            for j, p in relaxed:
                if accepts >> j & 1:
                    s["unsafe_added"][p][index[bucket]] += k
    return {"bucket_ms": tl.width, "start_ms": span.start * tl.width if n else None, "buckets": n,
            "clusters": list(per_cluster.values()), "groups": list(per_group.values())}


def _member_rows(agg) -> list[dict]:
    n = len(POLICIES)
    relaxed = [(i, p) for i, p in enumerate(POLICIES) if p != agg.broker_policy]
    return [{"cluster": c, "group_id": g, "member_id": m, "client_id": classic_client_id(m),
             "avoidable_requests": {p: row[i] for i, p in relaxed},
             "saved_transactions": {p: row[n + i] for i, p in relaxed}}
            for (c, g, m), row in agg.members.items()]


def _ranked(rows: list[dict], rank: str, key) -> list[dict]:
    return sorted(rows, key=lambda r: (-r["avoidable_requests"].get(rank, 0), -r["saved_transactions"].get(rank, 0),
                                       -sum(r["avoidable_requests"].values()), key(r)))[:TOP]


def _top_members(agg, rank: str) -> dict:
    rows = _member_rows(agg)
    return {"ranked_by": rank, "policy": agg.broker_policy, "approximate": agg.members_pruned > 0,
            "members_with_avoidable_fences": len(rows) + agg.members_pruned,
            "rows": _ranked(rows, rank, lambda r: (r["cluster"], r["group_id"], r["member_id"] or ""))}


def _top_clients(agg, rank: str) -> dict:
    """Client ids read from classic member ids (verdicts name members, not clients)."""
    clients: dict[tuple, dict] = {}
    underived = Counter()
    for r in _member_rows(agg):
        if r["client_id"] is None:
            underived["members"] += 1
            continue
        row = clients.setdefault((r["cluster"], r["client_id"]), {
            "cluster": r["cluster"], "client_id": r["client_id"], "groups": set(), "members": 0,
            "avoidable_requests": Counter(), "saved_transactions": Counter()})
        row["groups"].add(r["group_id"])
        row["members"] += 1
        row["avoidable_requests"].update(r["avoidable_requests"])
        row["saved_transactions"].update(r["saved_transactions"])
    rows = [{**r, "groups": sorted(r["groups"]), "avoidable_requests": dict(r["avoidable_requests"]),
             "saved_transactions": dict(r["saved_transactions"])} for r in clients.values()]
    return {"ranked_by": rank, "policy": agg.broker_policy, "approximate": agg.members_pruned > 0,
            "members_without_client_id": underived["members"],
            "rows": _ranked(rows, rank, lambda r: (r["cluster"], r["client_id"]))}


__all__ = ["assemble", "iso", "CLASSES", "DEFAULT_CLUSTER"]

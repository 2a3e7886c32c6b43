"""Alert construction with deterministic ids (SPEC 8).

The same input gives the same ``alert_id``: it hashes what identifies the
occurrence (cluster, group, kind, and an occurrence key such as the commit's
event id or an expiry deadline), never wall-clock time, so a replayed batch
deduplicates downstream.
"""
from __future__ import annotations

import hashlib
from typing import Mapping

from .model import Alert, AlertKind, Severity


def alert_id(cluster: str, group_id: str, kind: str, occurrence: str) -> str:
    digest = hashlib.sha256(f"{cluster}\x1f{group_id}\x1f{kind}\x1f{occurrence}".encode()).hexdigest()
    return digest[:32]


def make_alert(*, ts: int, cluster: str, group_id: str, kind: AlertKind | str, severity: Severity | str,
               summary: str, details: Mapping[str, object], occurrence: str) -> Alert:
    kind_s = kind.value if isinstance(kind, AlertKind) else str(kind)
    sev_s = severity.value if isinstance(severity, Severity) else str(severity)
    return Alert(
        alert_id=alert_id(cluster, group_id, kind_s, occurrence),
        ts=ts,
        cluster=cluster,
        group_id=group_id,
        kind=kind_s,
        severity=sev_s,
        summary=summary,
        details={k: "" if v is None else str(v) for k, v in sorted(details.items())},
    )

"""Alerts (contract §8.2): their texts, their deterministic ids, and a group's cool-downs.

Owns: every alert text a group emits (one builder per kind, returning a :class:`Draft`),
:func:`emit` folding per-commit kinds into a count within ``alert_cooldown_ms``, and
:func:`make_alert`. The same input gives the same ``alert_id``: it hashes what identifies the
occurrence (cluster, group, kind, and an occurrence key such as the commit's
event id or an expiry deadline), never wall-clock time, so a replayed batch
deduplicates downstream.
"""
from __future__ import annotations

import hashlib
from typing import Callable, Mapping, NamedTuple, Protocol

from fencewatch.state.model import Alert, AlertKind, Severity


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


# --------------------------------------------------------------------------- a group's alerts

# Per-commit alert kinds folded into a count within ``alert_cooldown_ms``.
COOLDOWN_KINDS = frozenset({AlertKind.AVOIDABLE_FENCING.value, AlertKind.ZOMBIE_COMMIT.value,
                            AlertKind.UNSAFE_ACCEPT.value, AlertKind.MODEL_DIVERGENCE.value,
                            AlertKind.DUPLICATE_ASSIGNMENT.value, AlertKind.STALE_OWNED_CLAIM.value})
MAX_LISTED = 20  # partitions listed in an alert's details


class Draft(NamedTuple):
    """An alert before its group and cool-down are applied (:func:`emit`)."""

    kind: AlertKind
    severity: Severity
    summary: str
    details: dict
    occurrence: str  # what identifies it: an event id, a deadline


class Cooldowns(Protocol):
    """What :func:`emit` reads and updates of a group."""

    cluster: str
    group_id: str
    alert_last: dict[str, int]  # kind -> ts of the last alert emitted
    alert_suppressed: dict[str, int]  # kind -> alerts folded into a count since


def emit(g: Cooldowns, alerts: list[Alert], cooldown_ms: int, ts: int, kind: AlertKind,
         build: Callable[..., Draft], *args) -> None:
    """Append the alert ``build(*args)`` makes, or fold it into a count while ``kind`` is
    cooling down for this group (then nothing is built: a zombie storm costs no texts)."""
    k = kind.value
    more = None
    if k in COOLDOWN_KINDS and cooldown_ms > 0:
        last = g.alert_last.get(k)
        if last is not None and ts - last < cooldown_ms:
            g.alert_suppressed[k] = g.alert_suppressed.get(k, 0) + 1
            return
        more = g.alert_suppressed.pop(k, 0)
        g.alert_last[k] = ts
    draft = build(*args)
    assert draft.kind is kind, (draft.kind, kind)
    details = draft.details if more is None else {**draft.details, "suppressed_before": more}
    alerts.append(make_alert(ts=ts, cluster=g.cluster, group_id=g.group_id, kind=kind, severity=draft.severity,
                             summary=draft.summary, details=details, occurrence=draft.occurrence))


def listed(tps) -> str:
    """Partitions as ``topic-p`` text, at most ``MAX_LISTED`` of them."""
    tps = sorted(tps)
    text = ",".join(f"{t}-{p}" for t, p in tps[:MAX_LISTED])
    return text + (f",...(+{len(tps) - MAX_LISTED})" if len(tps) > MAX_LISTED else "")


class CommitFacts(NamedTuple):
    """What a commit alert says about the commit."""

    member_id: str
    client_epoch: int
    broker_epoch: int | None
    transactional: bool
    transactional_id: str | None
    event_id: str

    def describe(self) -> str:
        return (f"member {self.member_id or '(none)'} at epoch {self.client_epoch}"
                + (f" (broker epoch {self.broker_epoch})" if self.broker_epoch is not None else ""))

    def details(self, **more) -> dict:
        return {"member_id": self.member_id, "client_epoch": self.client_epoch, "broker_epoch": self.broker_epoch,
                **more, "event_id": self.event_id}

    @property
    def kind(self) -> str:
        return "txn_commit" if self.transactional else "commit"


def avoidable_fencing(c: CommitFacts, tps) -> Draft:
    return Draft(AlertKind.AVOIDABLE_FENCING, Severity.WARNING,
                 f"{'transactional ' if c.transactional else ''}commit of {c.describe()} fenced only because its "
                 f"epoch was stale; KIP-1251 would accept it",
                 c.details(kind=c.kind, transactional_id=c.transactional_id, partitions=listed(tps)), c.event_id)


def zombie_commit(c: CommitFacts, tps) -> Draft:
    return Draft(AlertKind.ZOMBIE_COMMIT, Severity.WARNING,
                 f"zombie commit: {c.describe()} committed {len(tps)} partition(s) now held by another member",
                 c.details(kind=c.kind, partitions=listed(tps)), c.event_id)


def unsafe_accept(c: CommitFacts, tps) -> Draft:
    return Draft(AlertKind.UNSAFE_ACCEPT, Severity.CRITICAL,
                 f"a policy accepts the commit of {c.describe()} for {len(tps)} partition(s) another member owns "
                 f"at an epoch <= {c.client_epoch}",
                 c.details(partitions=listed(tps)), c.event_id)


def model_divergence(c: CommitFacts, broker_error: str, predicted: str, policy: str) -> Draft:
    return Draft(AlertKind.MODEL_DIVERGENCE, Severity.WARNING,
                 f"broker answered {broker_error} but the {policy} model predicts {predicted} for {c.describe()}",
                 c.details(broker_error=broker_error, predicted=predicted, policy=policy), c.event_id)


def duplicate_assignment(member_id: str, member_epoch: int, clashes: dict, event_id: str) -> Draft:
    """A KIP-848 member assigned partitions other members still hold in ``assigned``."""
    others = sorted({h for hs in clashes.values() for h in hs})
    return Draft(AlertKind.DUPLICATE_ASSIGNMENT, Severity.CRITICAL,
                 f"{len(clashes)} partition(s) assigned to {member_id} are still assigned to {', '.join(others)}",
                 {"member_id": member_id, "member_epoch": member_epoch, "other_members": ",".join(others),
                  "partitions": listed(clashes)}, event_id)


def duplicate_generation(generation: int, dupes: dict, event_id: str) -> Draft:
    """A classic generation giving a partition to more than one member."""
    return Draft(AlertKind.DUPLICATE_ASSIGNMENT, Severity.CRITICAL,
                 f"generation {generation} gives {len(dupes)} partition(s) to more than one member",
                 {"generation": generation, "members": ",".join(sorted({m for ms in dupes.values() for m in ms})),
                  "partitions": listed(dupes)}, event_id)


def stale_owned_claim(member_id: str, generation: int, conflicts, event_id: str) -> Draft:
    """Classic members claiming the same owned partition in one rebalance (``sticky.add_claims``)."""
    stale = [c for c in conflicts if c.winner is not None]
    tied = [c for c in conflicts if c.winner is None]
    losers = sorted({m for c in conflicts for m, _ in c.losers})
    return Draft(AlertKind.STALE_OWNED_CLAIM, Severity.WARNING,
                 f"{len(conflicts)} partition(s) claimed by more than one member in a rebalance "
                 f"({len(stale)} resolved by generation, {len(tied)} at equal generations, reassigned)",
                 {"member_id": member_id, "claimed_generation": generation, "losing_members": ",".join(losers),
                  "winners": ",".join(sorted({f"{c.winner}@{c.winner_generation}" for c in stale})),
                  "partitions": listed([c.tp for c in conflicts]),
                  "equal_generation_partitions": listed([c.tp for c in tied])}, event_id)


def offsets_expiring(deadline: int, partitions: int, warn_ts: int, details: dict) -> Draft:
    return Draft(AlertKind.OFFSETS_EXPIRING, Severity.WARNING,
                 f"{partitions} committed offset(s) expire at {deadline} "
                 f"({(deadline - warn_ts) // 60_000} min after this alert)",
                 details, f"expiring/{deadline}")


def offsets_expired(deadline: int, gone, has_members: bool, details: dict) -> Draft:
    return Draft(AlertKind.OFFSETS_EXPIRED, Severity.WARNING if has_members else Severity.CRITICAL,
                 f"{len(gone)} committed offset(s) expired (a consumer without them resets by auto.offset.reset)",
                 {**details, "expired_partitions": listed(gone), "expired_count": len(gone)},
                 f"expired/{deadline}/{listed(gone)}")

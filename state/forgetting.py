"""When a group is forgotten (contract §4.4): its state can then be removed, by either engine.

A group is forgotten once Kafka's own cleanup would have deleted it, or once it has been idle
``group_retention_ms``, never while a decision about it is still to be made (``decision_at``: an
expiry, a spike window) or an alert kind cools down. ``group.process`` meets an event after
``drop_at`` as a new group, whether or not an engine removed the state in between.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from fencewatch.state import offsets as offs
from fencewatch.state.config import RulesConfig
from fencewatch.state.offsets import committed_offsets

if TYPE_CHECKING:
    from fencewatch.state.group import Group


def decision_at(g: Group, cfg: RulesConfig) -> int | None:
    """The earliest event time at which ``advance`` has something to do."""
    wake = offs.expiry_wakeup(g, cfg.expiry_warning_ms, cfg.txn_timeout_ms)
    s = g.spike
    if s is not None and (s.fencing_errors or s.txn_aborts or s.fencing.firing or s.txn.firing):
        close = s.window_start_ms + cfg.spike_window_ms  # close the open window without input
        wake = close if wake is None else min(wake, close)
    return wake


def is_droppable(g: Group) -> bool:
    """Gone as Kafka sees it: no members, no committed offsets (expired or deleted), no pending
    transactional offset, no classic rebalance under way. Kafka's cleanup deletes such a group
    (``GroupMetadataManager.maybeDeleteGroup`` after ``cleanupExpiredOffsets``)."""
    return (not g.members and not g.committed_topics and not g.pending_txn and not g.claims
            and not committed_offsets(g))


def drop_at(g: Group, cfg: RulesConfig) -> int | None:
    """The event time at which the group is forgotten unless an event comes first; None while a
    decision is still to be made (an expiry, a spike window) or never.

    - reported ``Dead``: at once (the coordinator deleted it);
    - droppable: one ``offsets.retention.check.interval.ms`` after it became so (by then Kafka's
      cleanup has deleted it), counted from its last event or expiry;
    - anything else: ``group_retention_ms`` after its last event (0: never);

    and never while a per-commit alert kind is cooling down (its folding would change)."""
    if decision_at(g, cfg) is not None:
        return None
    at = None
    if is_droppable(g):
        at = g.last_ts if g.state == "Dead" else (
            max(g.last_ts, g.expiry.set_ts) + cfg.offsets_retention_check_interval_ms)
    if cfg.group_retention_ms > 0:
        idle = g.last_ts + cfg.group_retention_ms
        at = idle if at is None else min(at, idle)
    if at is not None and g.alert_last and cfg.alert_cooldown_ms > 0:
        at = max(at, max(g.alert_last.values()) + cfg.alert_cooldown_ms)
    return at


def drop_due(g: Group, now: int, cfg: RulesConfig) -> bool:
    """Whether the group, its decisions made up to ``now``, is forgotten by ``now``."""
    at = drop_at(g, cfg)
    return at is not None and now >= at

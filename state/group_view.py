"""A group as a person looks at it: the per-member view ``fencewatch groups`` shows (issue 46).

Owns: :func:`group_view` (a group's members, member epochs, assigned and pending-revocation
partitions with their assignment epochs, as one JSON-able dict), :func:`view_key` and
:func:`view_changed` (whether a step changed what the view shows) and :func:`snapshot_due`
(that, or a fence judged: a snapshot is written only then, so its cost follows membership
events and fences, not the number of groups), and
:func:`count_verdicts` (a step's verdicts by class and by policy rejection, from the
``status.VerdictShape`` counts the group's metrics already take). Pure: no I/O; time is the group's event time.
"""
from __future__ import annotations

from collections import Counter
from typing import Mapping

from fencewatch.state.membership import derived_state
from fencewatch.state.model import POLICY_ANSWER_FIELD, CommitClass

VIEW_FORMAT = 1
"""The snapshot's format, carried in every view (``format``): readers refuse a newer one."""


def _partitions(epochs: Mapping) -> list[dict]:
    """Partitions with their assignment epochs, in (topic, partition) order."""
    return [{"topic": t, "partition": p, "assignment_epoch": e} for (t, p), e in sorted(epochs.items())]


def _member(m) -> dict:
    return {"member_id": m.member_id, "instance_id": m.instance_id, "protocol": m.protocol.value,
            "member_epoch": m.member_epoch, "previous_member_epoch": m.previous_member_epoch,
            "state": m.state.value, "assigned_partitions": _partitions(m.assigned_partitions),
            "partitions_pending_revocation": _partitions(m.partitions_pending_revocation)}


def group_view(g, verdicts: Mapping[str, Mapping[str, int]] | None = None) -> dict:
    """The group's view: cluster, group, type, state, group epoch, members (by member id) and
    ``verdicts`` (:func:`count_verdicts`' counts; empty when none were given). ``changed_ts``:
    the event time of the group's last event, the moment this view describes."""
    return {"format": VIEW_FORMAT, "cluster": g.cluster, "group_id": g.group_id,
            "group_type": g.group_type or "simple", "state": derived_state(g), "group_epoch": g.group_epoch,
            "changed_ts": g.last_ts,
            "members": [_member(m) for _, m in sorted(g.members.items())],
            "verdicts": {part: dict(sorted((verdicts or {}).get(part, {}).items()))
                         for part in ("by_class", "rejected_by")}}


def view_key(g) -> tuple | None:
    """What the view depends on besides verdicts, taken before a step (None: no group yet). The
    members dict is copied, not its members: they are immutable and swapped whole, so an
    unchanged member is the same object and compares at once."""
    if g is None:
        return None
    return (g.exists, g.group_type, derived_state(g), g.group_epoch, dict(g.members))


def view_changed(before: tuple | None, g) -> bool:
    """Whether the step from ``before`` (:func:`view_key`) to ``g`` changed the view's membership:
    members joined or left, a member's epoch, state or partitions moved, the group epoch, state
    or type changed. A group seen for the first time changed if it exists or has members."""
    if before is None:
        return bool(g.exists or g.members)
    return before != view_key(g)


def snapshot_due(before: tuple | None, g, shapes: Mapping | None) -> bool:
    """Whether a step writes the group's snapshot: its view changed (:func:`view_changed`), or
    it judged a commit that was not plainly accepted (another class, or accepted unsafely), so
    that a fence is seen beside the members it fenced. A step of plain accepted commits and
    heartbeats writes nothing: the cost follows membership events and fences, not commits."""
    if shapes and any(shape.cls != CommitClass.ACCEPTED.value or shape.unsafe for shape in shapes):
        return True
    return view_changed(before, g)


def count_verdicts(shapes: Mapping) -> dict[str, dict[str, int]]:
    """Verdicts (one per commit and partition) by class, and by each policy that rejected them
    (``{"by_class": {"accepted": 3}, "rejected_by": {"strict": 1}}``), from the
    ``status.summarize_commit_verdicts`` shapes the state function already counts for the
    group's metrics: a distinct shape once, no second pass over the judgements."""
    by_class: Counter = Counter()
    rejected: Counter = Counter()
    for shape, n in shapes.items():
        by_class[shape.cls] += n
        for policy, name in POLICY_ANSWER_FIELD.items():
            if getattr(shape, name) != "NONE":
                rejected[policy.value] += n
    return {"by_class": dict(by_class), "rejected_by": dict(rejected)}

"""The rule a classic group's join phase adds to judging a commit (contract §3.1, §10.1 i).

Owns: :func:`completing_rebalance`, the last guard of Kafka's ``ClassicGroup.validateOffsetCommit``
(4.x, unchanged since the Scala ``GroupCoordinator.handleCommitOffsets``), and
:func:`foreseen_errors`, the answers the model can foresee for a group beyond the policies'.

Kafka's order for a classic group: the member must be known (UNKNOWN_MEMBER_ID,
:func:`.fencing.pre_check`), its generation must be the group's (ILLEGAL_GENERATION, the exact
generation check of :func:`.fencing.evaluate`), and then, in CompletingRebalance, an
OffsetCommit is answered REBALANCE_IN_PROGRESS: the member holds the new generation from its
JoinGroup response but not yet its assignment. PreparingRebalance commits pass (the generation
has not moved yet); a TxnOffsetCommit passes too ("the group state is not enforced for those").

The model knows a classic group is CompletingRebalance only from the JoinGroup responses of the
request log (``classic_generation``); ``__consumer_offsets`` records a generation when its
SyncGroup completes. So REBALANCE_IN_PROGRESS is a model answer only for a group whose join
phases the model sees; elsewhere the broker's REBALANCE_IN_PROGRESS stays unforeseeable
(``TRANSIENT_ERRORS``) and is not judged.
"""
from __future__ import annotations

from fencewatch.state.fencing import PreCheck
from fencewatch.state.model import CommitClass, KafkaError

COMPLETING_REBALANCE = "CompletingRebalance"
PREPARING_REBALANCE = "PreparingRebalance"
REBALANCE_IN_PROGRESS = PreCheck(KafkaError.REBALANCE_IN_PROGRESS, CommitClass.OTHER)
"""A commit a member of the current generation sent before its group's SyncGroup completed."""

_FORESEEN_WITH_JOINS = frozenset({KafkaError.REBALANCE_IN_PROGRESS})
_NONE_FORESEEN: frozenset[KafkaError] = frozenset()


def completing_rebalance(group_type: str | None, group_state: str, transactional: bool,
                         generation_ok: bool) -> PreCheck | None:
    """REBALANCE_IN_PROGRESS for an OffsetCommit that passed the member and generation checks
    (``generation_ok``) while its classic group is CompletingRebalance; None: the policies'
    answer stands."""
    # Only a classic group has this phase (a consumer group's classic members are judged by
    # ConsumerGroup.validateOffsetCommit, which has no such state).
    if group_type != "classic" or group_state != COMPLETING_REBALANCE:
        return None
    # "This does not apply to transactional offset commits, since the group state is not
    # enforced for those."
    if transactional or not generation_ok:
        return None
    return REBALANCE_IN_PROGRESS


def state_after_leave(group_state: str, members_remain: bool) -> str:
    """A classic group's state once a member left (LeaveGroup): a group waiting for its leader's
    SyncGroup rebalances again (``ClassicGroup``'s member removal: ``prepareRebalance``; the
    pending SyncGroups are answered REBALANCE_IN_PROGRESS and the generation stays until the next
    join phase completes), so the current generation's commits pass again. Kafka does the same
    from Stable; the model keeps Stable there, where no answer differs and offset expiry reads
    the state."""
    if group_state == COMPLETING_REBALANCE and members_remain:
        return PREPARING_REBALANCE
    return group_state


def foreseen_errors(sees_join_phases: bool) -> frozenset[KafkaError]:
    """Answers outside the policies the model can foresee for a group, so that a verdict judges
    them (``judging.model_agrees``): REBALANCE_IN_PROGRESS once the group's join phases are seen."""
    return _FORESEEN_WITH_JOINS if sees_join_phases else _NONE_FORESEEN

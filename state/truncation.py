"""Truncation of committed offsets (contract §5, KIP-320).

``end_offset_for`` answers as ``LeaderEpochFileCache.endOffsetFor`` does for
OffsetsForLeaderEpoch; ``check_committed`` is what the consumer's
``SubscriptionState.maybeCompleteValidation`` concludes from that answer.
"""
from __future__ import annotations

from dataclasses import dataclass

UNDEFINED_EPOCH = -1
UNDEFINED_OFFSET = -1


def end_offset_for(epochs: tuple[tuple[int, int], ...], requested_epoch: int,
                   log_end_offset: int) -> tuple[int, int]:
    """(epoch, end offset) for ``requested_epoch`` in the cache ``epochs`` ((epoch, start), ascending).

    As ``LeaderEpochFileCache.endOffsetFor``:
    - undefined requested epoch, or newer than every cached one: (UNDEFINED_EPOCH, UNDEFINED_OFFSET);
    - the latest epoch: (epoch, log end offset);
    - older than every cached epoch: (requested epoch, start offset of the first cached epoch);
    - otherwise: (largest cached epoch <= requested, start offset of the first cached epoch > requested).
    """
    if requested_epoch < 0 or not epochs:
        return UNDEFINED_EPOCH, UNDEFINED_OFFSET
    if requested_epoch == epochs[-1][0]:
        return requested_epoch, log_end_offset
    floor: tuple[int, int] | None = None
    for entry in epochs:
        if entry[0] > requested_epoch:
            if floor is None:
                return requested_epoch, entry[1]
            return floor[0], entry[1]
        floor = entry
    return UNDEFINED_EPOCH, UNDEFINED_OFFSET


@dataclass(frozen=True, slots=True)
class TruncationFinding:
    kind: str  # LOG_TRUNCATION | OFFSET_OUT_OF_RANGE
    committed_offset: int
    leader_epoch: int
    divergent_offset: int  # where the consumer will resume (end offset, or log start)
    lost_records: int


def check_committed(offset: int, leader_epoch: int, log_start_offset: int, log_end_offset: int,
                    epochs: tuple[tuple[int, int], ...]) -> TruncationFinding | None:
    """Is the committed (offset, leader epoch) still on the log?"""
    # Divergence shows only for an epoch that has ended: at the latest epoch the log keeps
    # growing after the fact was taken, so an offset past that snapshot is just newer.
    if epochs and 0 <= leader_epoch < epochs[-1][0]:
        end_epoch, end = end_offset_for(epochs, leader_epoch, log_end_offset)
        if end != UNDEFINED_OFFSET and end < offset:
            # The log diverged: [end, offset) the group consumed is gone.
            return TruncationFinding("LOG_TRUNCATION", offset, leader_epoch, end, offset - end)
    if offset < log_start_offset:
        return TruncationFinding("OFFSET_OUT_OF_RANGE", offset, leader_epoch, log_start_offset,
                                 log_start_offset - offset)
    return None

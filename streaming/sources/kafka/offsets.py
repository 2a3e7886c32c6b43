"""Offsets as the checkpoint holds them, and how a micro-batch's limit is shared among partitions.

Spark compares offsets as JSON strings, so :func:`offsets_to_json` always writes the same order
(Spark's own Kafka checkpoint form, ``{"topic": {"0": 42}}``). :func:`rate_limit` turns
``maxOffsetsPerTrigger`` (or the adaptive limit) into end offsets. A planned end may carry the
caught-up mark (:data:`CAUGHT_UP`), so a batch run again after a crash has it too. Pure: standard
library only.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from fencewatch.streaming.sources.kafka.options import TopicPartitionKey


CAUGHT_UP = "fencewatch:caught_up"
"""Key of a planned end offset (``includeCaughtUp`` only, and only when true): the micro-batch reads
every partition to the end it had when planned. It travels with the offsets because Spark writes
them to ``offsets/N`` before the batch runs, so a batch run again after a crash is judged with the
mark its first attempt had (the rows' ``caught_up`` decides which held events go, docs/reliability.md).
``:`` cannot be in a topic name."""


def offsets_to_json(offsets: Mapping[TopicPartitionKey, int], *, caught_up: bool = False) -> dict:
    """Checkpoint form ``{"topic": {"0": 42}}``: topics and partitions sorted, then
    :data:`CAUGHT_UP` when ``caught_up``.

    Spark compares offsets as JSON strings, so equal offsets must always be
    written in the same order.
    """
    out: dict = {}
    for topic, partition in sorted(offsets):
        out.setdefault(topic, {})[str(partition)] = int(offsets[(topic, partition)])
    if caught_up:
        out[CAUGHT_UP] = True
    return out


def offsets_from_json(offsets: Mapping | None) -> dict[TopicPartitionKey, int]:
    if not offsets:
        return {}
    return {(topic, int(p)): int(o) for topic, parts in offsets.items() if topic != CAUGHT_UP
            for p, o in parts.items()}


def caught_up_mark(offsets: Mapping | None) -> bool:
    """Whether a planned end offset carries :data:`CAUGHT_UP`."""
    return bool(offsets) and offsets.get(CAUGHT_UP) is True


# --------------------------------------------------------------------------- planning helpers


def rate_limit(begin: Mapping[TopicPartitionKey, int], end: Mapping[TopicPartitionKey, int],
               max_offsets: int) -> dict[TopicPartitionKey, int]:
    """End offsets advancing at most ``max_offsets`` in total past ``begin``.

    Every partition with a backlog first gets one offset (so a quiet partition
    is never starved by a busy one), the rest is shared in proportion to the
    backlog with largest-remainder rounding, so the total is exactly
    ``min(max_offsets, backlog)``.
    """
    lag = {tp: max(0, end[tp] - begin.get(tp, end[tp])) for tp in end}
    total = sum(lag.values())
    if total <= max_offsets:
        return dict(end)
    quota = {tp: 0 for tp in end}
    lagging = sorted((tp for tp in end if lag[tp] > 0), key=lambda tp: (-lag[tp], tp))
    budget = max_offsets
    if budget >= len(lagging):
        for tp in lagging:
            quota[tp] = 1
        budget -= len(lagging)
    else:  # fewer offsets than busy partitions: the largest backlogs go first
        for tp in lagging[:budget]:
            quota[tp] = 1
        budget = 0
    rest = {tp: lag[tp] - quota[tp] for tp in lagging}
    rest_total = sum(rest.values())
    if budget and rest_total:
        shares = {tp: budget * rest[tp] / rest_total for tp in lagging}
        floors = {tp: min(rest[tp], math.floor(shares[tp])) for tp in lagging}
        left = budget - sum(floors.values())
        for tp in sorted(lagging, key=lambda tp: (-(shares[tp] - floors[tp]), tp)):
            if left <= 0:
                break
            if floors[tp] < rest[tp]:
                floors[tp] += 1
                left -= 1
        for tp in lagging:
            quota[tp] += floors[tp]
    return {tp: (begin[tp] + quota[tp]) if tp in begin else end[tp] for tp in end}

